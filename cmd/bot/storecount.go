package main

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// countedStore is the bot's store with every method call counted in
// toolgate_store_calls_total{method}. Each call is one request to the store
// as the bot sees it: one bolt transaction on the embedded store, one or
// more round trips on Redis, which are counted apart in
// toolgate_store_round_trips_total. The load tool reads both to report the
// store calls and round trips of a pause, a decision and a resume.
//
// It does not embed the store: a method added to botsetup.Store stops the build
// here until it is counted, rather than passing through uncounted.
type countedStore struct {
	st    botsetup.Store
	calls *prometheus.CounterVec
}

// countedWatchStore is a countedStore over a store that announces lease
// releases (Redis), which the agent's lease waiters look for.
type countedWatchStore struct {
	*countedStore
	watch agent.LeaseWatcher
}

// countedRedisStore is a countedWatchStore over a store that also
// carries what the processes sharing it tell each other (Redis).
type countedRedisStore struct {
	*countedWatchStore
	feed feeds
}

// feeds is what a store shared by several processes carries between them
// (Redis): pauses, which the agent follows, and notices, which the Slack
// app follows.
type feeds interface {
	agent.PauseFeed
	slackapp.Notices
}

var (
	_ botsetup.Store     = (*countedStore)(nil)
	_ agent.LeaseWatcher = (*countedWatchStore)(nil)
	_ feeds              = (*countedRedisStore)(nil)
)

// hooked is a store whose commands a go-redis hook can see (Redis).
type hooked interface{ AddHook(redis.Hook) }

// countStore wraps st so that each of its calls is counted in a
// toolgate_store_calls_total counter registered with reg. The result
// offers WatchLease, and FollowPauses, Notify and FollowNotices with it,
// exactly when st does. Close is not counted.
func countStore(st botsetup.Store, reg prometheus.Registerer) botsetup.Store {
	calls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "toolgate_store_calls_total",
		Help: "Calls to the store (Redis or the embedded store), by method.",
	}, []string{"method"})
	reg.MustRegister(calls)
	if h, ok := st.(hooked); ok {
		trips := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_store_round_trips_total",
			Help: "Round trips to Redis: one per command sent alone, one per pipeline.",
		})
		reg.MustRegister(trips)
		h.AddHook(redisstore.RoundTrips(trips.Inc))
	}
	c := &countedStore{st: st, calls: calls}
	w, ok := st.(agent.LeaseWatcher)
	if !ok {
		return c
	}
	cw := &countedWatchStore{countedStore: c, watch: w}
	if f, ok := st.(feeds); ok {
		return &countedRedisStore{countedWatchStore: cw, feed: f}
	}
	return cw
}

func (s *countedStore) count(method string) { s.calls.WithLabelValues(method).Inc() }

func (s *countedWatchStore) WatchLease(ctx context.Context, key string) (store.LeaseWatch, error) {
	s.count("WatchLease")
	return s.watch.WatchLease(ctx, key)
}

func (s *countedRedisStore) FollowPauses(ctx context.Context, live func(), fn func([]byte)) error {
	s.count("FollowPauses")
	return s.feed.FollowPauses(ctx, live, fn)
}

func (s *countedRedisStore) Notify(ctx context.Context, notice []byte) error {
	s.count("Notify")
	return s.feed.Notify(ctx, notice)
}

func (s *countedRedisStore) FollowNotices(ctx context.Context, live func(), fn func([]byte)) error {
	s.count("FollowNotices")
	return s.feed.FollowNotices(ctx, live, fn)
}

func (s *countedStore) Close() error { return s.st.Close() }

func (s *countedStore) VersionedRecords(ctx context.Context, kinds ...string) (map[string][]store.Record, int64, error) {
	s.count("VersionedRecords")
	return s.st.VersionedRecords(ctx, kinds...)
}

func (s *countedStore) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	s.count("RecordsOf")
	return s.st.RecordsOf(ctx, kinds...)
}

func (s *countedStore) LoadConversation(ctx context.Context, key string) (store.Conversation, error) {
	s.count("LoadConversation")
	return s.st.LoadConversation(ctx, key)
}

func (s *countedStore) LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error) {
	s.count("LoadRun")
	return s.st.LoadRun(ctx, runID)
}

func (s *countedStore) GetCallWith(ctx context.Context, callID string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	s.count("GetCallWith")
	return s.st.GetCallWith(ctx, callID, kinds...)
}

func (s *countedStore) PutCallNote(ctx context.Context, callID string, note []byte) error {
	s.count("PutCallNote")
	return s.st.PutCallNote(ctx, callID, note)
}

func (s *countedStore) CallNote(ctx context.Context, callID string) ([]byte, error) {
	s.count("CallNote")
	return s.st.CallNote(ctx, callID)
}

func (s *countedStore) GetCall(ctx context.Context, callID string) (store.Call, error) {
	s.count("GetCall")
	return s.st.GetCall(ctx, callID)
}

func (s *countedStore) DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	s.count("DecideAudited")
	return s.st.DecideAudited(ctx, callID, fingerprint, d, fx)
}

func (s *countedStore) DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	s.count("DecideBegin")
	return s.st.DecideBegin(ctx, callID, fingerprint, d, fx, r)
}

func (s *countedStore) ApproveAudited(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	s.count("ApproveAudited")
	return s.st.ApproveAudited(ctx, callID, fingerprint, ap, drop, edit, need, d, fx)
}

func (s *countedStore) ApproveBegin(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	s.count("ApproveBegin")
	return s.st.ApproveBegin(ctx, callID, fingerprint, ap, drop, edit, need, d, fx, r)
}

func (s *countedStore) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	s.count("BeginResume")
	return s.st.BeginResume(ctx, runID, r)
}

func (s *countedStore) BeginExecution(ctx context.Context, callID, attempt string) (bool, error) {
	s.count("BeginExecution")
	return s.st.BeginExecution(ctx, callID, attempt)
}

func (s *countedStore) AbandonExecution(ctx context.Context, callID, attempt string) error {
	s.count("AbandonExecution")
	return s.st.AbandonExecution(ctx, callID, attempt)
}

func (s *countedStore) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	s.count("SaveResult")
	return s.st.SaveResult(ctx, callID, result, e)
}

func (s *countedStore) SkipExecution(ctx context.Context, callID string, result []byte) error {
	s.count("SkipExecution")
	return s.st.SkipExecution(ctx, callID, result)
}

func (s *countedStore) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	s.count("Pending")
	return s.st.Pending(ctx, f)
}

func (s *countedStore) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	s.count("Due")
	return s.st.Due(ctx, now, limit)
}

func (s *countedStore) Stalled(ctx context.Context, limit int) ([]string, error) {
	s.count("Stalled")
	return s.st.Stalled(ctx, limit)
}

func (s *countedStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	s.count("AcquireLease")
	return s.st.AcquireLease(ctx, key, owner, ttl)
}

func (s *countedStore) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	s.count("RenewLease")
	return s.st.RenewLease(ctx, key, owner, ttl)
}

func (s *countedStore) ReleaseLease(ctx context.Context, key, owner string) error {
	s.count("ReleaseLease")
	return s.st.ReleaseLease(ctx, key, owner)
}

func (s *countedStore) Audit(ctx context.Context, e store.AuditEntry) error {
	s.count("Audit")
	return s.st.Audit(ctx, e)
}

func (s *countedStore) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	s.count("SeenEvent")
	return s.st.SeenEvent(ctx, id, ttl)
}

func (s *countedStore) PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	s.count("PutRecord")
	return s.st.PutRecord(ctx, r, expectVersion)
}

func (s *countedStore) Records(ctx context.Context, kind string) ([]store.Record, error) {
	s.count("Records")
	return s.st.Records(ctx, kind)
}

func (s *countedStore) DeleteRecord(ctx context.Context, kind, id string) error {
	s.count("DeleteRecord")
	return s.st.DeleteRecord(ctx, kind, id)
}

func (s *countedStore) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	s.count("AuditLog")
	return s.st.AuditLog(ctx, limit)
}

func (s *countedStore) Ping(ctx context.Context) error {
	s.count("Ping")
	return s.st.Ping(ctx)
}

func (s *countedStore) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	s.count("RenewClaim")
	return s.st.RenewClaim(ctx, runID, owner, lease)
}

func (s *countedStore) ReleaseClaim(ctx context.Context, runID, owner string) error {
	s.count("ReleaseClaim")
	return s.st.ReleaseClaim(ctx, runID, owner)
}

func (s *countedStore) NextExpiry(ctx context.Context) (time.Time, error) {
	s.count("NextExpiry")
	return s.st.NextExpiry(ctx)
}

func (s *countedStore) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	s.count("DueReminders")
	return s.st.DueReminders(ctx, now, limit)
}

func (s *countedStore) ClaimReminder(ctx context.Context, callID string, n int, next time.Time) (bool, error) {
	s.count("ClaimReminder")
	return s.st.ClaimReminder(ctx, callID, n, next)
}

func (s *countedStore) NextReminder(ctx context.Context) (time.Time, error) {
	s.count("NextReminder")
	return s.st.NextReminder(ctx)
}

func (s *countedStore) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	s.count("AcceptBegin")
	return s.st.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
}

func (s *countedStore) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	s.count("AcceptMessage")
	return s.st.AcceptMessage(ctx, conversation, m, requireKnown)
}

func (s *countedStore) Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error) {
	s.count("Unanswered")
	return s.st.Unanswered(ctx, before, offset, limit)
}

func (s *countedStore) Inbox(ctx context.Context, conversation string) ([]store.Inbound, error) {
	s.count("Inbox")
	return s.st.Inbox(ctx, conversation)
}

func (s *countedStore) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	s.count("BeginTurn")
	return s.st.BeginTurn(ctx, conversation, owner, ttl, kinds...)
}

func (s *countedStore) CommitTurn(ctx context.Context, c store.Commit) error {
	s.count("CommitTurn")
	return s.st.CommitTurn(ctx, c)
}
