package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/internal/newrun"
)

// Defaults for the zero fields of Options.
const (
	DefaultPrefix          = "toolgate"
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultConversationTTL = 30 * 24 * time.Hour
	DefaultAuditMax        = 10000
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key, so several bots or tests can share one
	// database. It must not contain '{' or '}'. Default DefaultPrefix.
	Prefix string
	// Retention is how long a run and its calls are kept after the run
	// expired (its latest call's ExpiresAt) or was finished, whichever
	// comes first. Default DefaultRetention.
	Retention time.Duration
	// ConversationTTL is how long a conversation is kept after it was last
	// saved. Default DefaultConversationTTL.
	ConversationTTL time.Duration
	// AuditMax is how many audit entries are kept; older ones are dropped.
	// Default DefaultAuditMax.
	AuditMax int
	// AuditRetention is how long an audit entry is kept after its At;
	// older entries are trimmed when entries are added and by Stalled
	// (which the agent's sweep calls periodically), and never listed.
	// Default store.DefaultAuditRetention.
	AuditRetention time.Duration
	// WaitReplicas, when above zero, makes every write of the Store wait
	// until that many replicas acknowledged it (Redis's WAIT, sent after
	// the write on the same connection, in the same round trip but for a
	// transaction's): Redis replicates asynchronously, and a failover
	// that promotes a replica loses the writes the primary acknowledged
	// but had not sent on yet, such as a decision's mark that a call is
	// running, after which a resume would run it again. A write fewer
	// replicas acknowledged within WaitTimeout makes its call fail with an
	// error wrapping ErrNotReplicated; it stands on the primary. Reads
	// wait for nothing. A single node (with replicas) or a Sentinel's
	// primary only: on a Redis Cluster, New refuses it, as go-redis sends
	// a pipeline's commands to the nodes that own their keys and a WAIT,
	// which has none, to any node, and a WAIT only counts what was written
	// on its own connection. Default 0: writes do not wait.
	WaitReplicas int
	// WaitTimeout is how long a write waits for WaitReplicas replicas.
	// It must be shorter than the client's read timeout (read_timeout in
	// the URL, 5 s by default), which bounds the wait's reply. Default
	// DefaultWaitTimeout.
	WaitTimeout time.Duration
	// Log, if set, gets a warning for each call a scan of the pending
	// calls skips because it cannot be read (written by another version,
	// edited by hand): it is left where it is, and the scan goes on with
	// the others.
	Log *slog.Logger
}

// Store keeps the bot's state in Redis. It is safe for concurrent use by
// many goroutines and by many processes sharing the same Redis and Prefix.
type Store struct {
	c      redis.UniversalClient
	log    *slog.Logger // see Options.Log
	prefix string
	// channels prefixes the pub/sub channels (see channelPrefix).
	channels  string
	retention time.Duration
	convTTL   time.Duration
	auditMax  int64
	auditTTL  time.Duration
	// leases announces lease releases to this process's waiters.
	leases *leaseHub
	// cluster is set on Redis Cluster, where a script reaches the keys of
	// one hash slot only.
	cluster bool
	// renewals is the client renewals are sent on, of a few connections
	// of its own (see New); nil: c.
	renewals redis.UniversalClient
	renewer  renewer
}

// New connects to the Redis at rawURL (see NewClient for the forms it
// takes), checks that it answers, and returns a Store on it. The Store owns
// the client: Close closes it.
func New(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	c := t.client(0)
	if err := opts.checkWait(c); err != nil {
		_ = c.Close()
		return nil, err
	}
	s := NewFromClient(c, opts)
	s.renewals = t.client(renewalConns)
	s.waitOn(s.renewals, opts)
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	if err := checkPrimary(ctx, c); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// checkPrimary refuses a client of one node (a redis:// URL) that is
// not a primary that keeps the data itself: a node of a Redis Cluster (it
// answers a ping, but most keys are on other nodes, and nearly every
// command would fail with MOVED), a Sentinel (it keeps no data, and
// refuses every command of the store) or a replica (it refuses writes).
func checkPrimary(ctx context.Context, c redis.UniversalClient) error {
	if _, ok := c.(*redis.Client); !ok {
		return nil
	}
	info, err := c.Info(ctx, "server", "cluster", "replication").Result()
	if err != nil {
		return nil // a server that keeps INFO to itself is taken as it is
	}
	switch {
	case strings.Contains(info, "cluster_enabled:1"):
		return errors.New("the server is a node of a Redis Cluster: write the url as redis+cluster://host:port[,host:port...]")
	case strings.Contains(info, "redis_mode:sentinel"):
		return errors.New("the server is a Redis Sentinel, which keeps no data: write the url as redis+sentinel://host:port[,host:port...][/db]?master_name=NAME")
	case strings.Contains(info, "role:slave"):
		return errors.New("the server is a replica, which refuses writes: name its primary, or its Sentinels with redis+sentinel://")
	}
	return nil
}

// NewFromClient returns a Store on an existing client, which the Store then
// owns: Close closes it. Hooks added to the client beforehand with AddHook
// see every command the Store sends, which is how a benchmark counts round
// trips (a pipeline or a script is one round trip); with
// opts.WaitReplicas set, such a hook sees a write sent alone twice: as
// itself, then in the pipeline the Store sends it in with its WAIT (a hook
// added later with AddHook sees that pipeline only). It panics if
// opts.Prefix contains '{' or '}', or if opts.WaitReplicas is set and c is
// not a client of one node or of a Sentinel's primary (see Options).
func NewFromClient(c redis.UniversalClient, opts Options) *Store {
	if err := opts.validate(); err != nil {
		panic(err)
	}
	if err := opts.checkWait(c); err != nil {
		panic(err)
	}
	s := &Store{
		c:         c,
		prefix:    cmp.Or(opts.Prefix, DefaultPrefix),
		retention: cmp.Or(opts.Retention, DefaultRetention),
		convTTL:   cmp.Or(opts.ConversationTTL, DefaultConversationTTL),
		auditMax:  int64(cmp.Or(opts.AuditMax, DefaultAuditMax)),
		auditTTL:  cmp.Or(opts.AuditRetention, store.DefaultAuditRetention),
		log:       opts.Log,
	}
	s.channels = channelPrefix(c, s.prefix)
	s.leases = newLeaseHub(c, s.channels+":lease-released:")
	_, s.cluster = c.(*redis.ClusterClient)
	s.waitOn(c, opts)
	return s
}

// waitOn has the writes sent on c wait for opts.WaitReplicas replicas,
// if set.
func (s *Store) waitOn(c redis.UniversalClient, opts Options) {
	if opts.WaitReplicas > 0 {
		// Hooks added later run inside it: they see the pipelines it
		// sends, WAIT included.
		c.AddHook(&waitHook{c: c.(*redis.Client), n: opts.WaitReplicas, timeout: cmp.Or(opts.WaitTimeout, DefaultWaitTimeout), mark: s.channels + ":replicated"})
	}
}

// checkWait refuses WaitReplicas on a client other than one node's or a
// Sentinel primary's, and a WaitTimeout that c's read timeout would cut.
func (o Options) checkWait(c redis.UniversalClient) error {
	if o.WaitReplicas == 0 {
		return nil
	}
	rc, ok := c.(*redis.Client)
	if !ok {
		if _, cluster := c.(*redis.ClusterClient); cluster {
			return errors.New("redisstore: waiting for replicas is not supported on Redis Cluster: go-redis sends a pipeline's commands to the nodes that own their keys, and a WAIT, which has no key, to any node, where it would not count the write; leave WaitReplicas at 0, or use one primary with replicas, or Sentinel")
		}
		return fmt.Errorf("redisstore: waiting for replicas needs a client of one node or of a Sentinel's primary, not a %T", c)
	}
	wait := cmp.Or(o.WaitTimeout, DefaultWaitTimeout)
	if wait < time.Millisecond {
		return fmt.Errorf("redisstore: the replica wait's timeout (%s) must be at least 1ms: WAIT counts whole milliseconds, and 0 waits for ever", wait)
	}
	if rt := rc.Options().ReadTimeout; rt > 0 && wait >= rt {
		return fmt.Errorf("redisstore: the replica wait's timeout (%s) must be shorter than the connection's read timeout (%s), which would cut the wait's reply: lower it, or raise read_timeout in the url", wait, rt)
	}
	return nil
}

// channelPrefix is the prefix of the store's pub/sub channels. Redis
// delivers a PUBLISH to the subscribers of every database of the server,
// so on a database other than 0 the channels name it: stores with the same
// prefix on other databases of the server do not hear each other's
// announcements (a pause's carries its policy records, by a version
// number that each database counts for itself). A Cluster has database 0
// only; a Sentinel-managed primary's client has its database in its
// options, as a node's has. A prefix has no braces, so no prefix on
// database 0 names the channels of another database.
func channelPrefix(c redis.UniversalClient, prefix string) string {
	if c, ok := c.(*redis.Client); ok && c.Options().DB != 0 {
		return prefix + "{db" + strconv.Itoa(c.Options().DB) + "}"
	}
	return prefix
}

func (o Options) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return fmt.Errorf("redisstore: prefix %q contains '{' or '}'", o.Prefix)
	}
	if o.Retention < 0 || o.ConversationTTL < 0 || o.AuditMax < 0 || o.AuditRetention < 0 || o.WaitReplicas < 0 || o.WaitTimeout < 0 {
		return errors.New("redisstore: negative option")
	}
	return nil
}

// Key layout. The keys of one run share the hash tag {runID}, the keys of
// one conversation share {conv:key}, and so does the lease of its turns
// (store.TurnLease); the indexes are global keys that only ever point at
// calls and runs, and readers check every entry against the call or run it
// names.
func (s *Store) runKey(runID string) string   { return s.prefix + ":run:{" + runID + "}" }
func (s *Store) claimKey(runID string) string { return s.runKey(runID) + ":claim" }
func (s *Store) callKey(callID string) string {
	return s.runKey(store.RunOf(callID)) + ":call:" + callID
}
func (s *Store) convKey(key string) string        { return s.prefix + ":conv:{conv:" + key + "}" }
func (s *Store) convPendingKey(key string) string { return s.convKey(key) + ":pending" }
func (s *Store) inboxKey(key string) string       { return s.convKey(key) + ":inbox" }
func (s *Store) inboxSeqKey(key string) string    { return s.convKey(key) + ":inbox-seq" }
func (s *Store) convSeenKey(key, kind, id string) string {
	return s.convKey(key) + ":seen:" + kind + ":" + id
}
func (s *Store) unansweredKey() string         { return s.prefix + ":unanswered" }
func (s *Store) dueKey() string                { return s.prefix + ":due" }
func (s *Store) remindKey() string             { return s.prefix + ":remind" }
func (s *Store) pendingKey() string            { return s.prefix + ":pending" }
func (s *Store) approverKey(id string) string  { return s.prefix + ":pending:approver:" + id }
func (s *Store) requesterKey(id string) string { return s.prefix + ":pending:requester:" + id }
func (s *Store) runsKey() string               { return s.prefix + ":runs" }
func (s *Store) leaseKey(key string) string    { return s.prefix + ":lease:{" + key + "}" }
func (s *Store) seenKey(id string) string      { return s.prefix + ":seen:" + id }
func (s *Store) auditKey() string              { return s.prefix + ":audit" }
func (s *Store) recordsKey(kind string) string { return s.prefix + ":records:" + kind }

// anyApprover is the approver index entry of calls without approvers.
const anyApprover = store.AnyApprover

// requesterKeys returns the requester indexes a call is listed in: one
// for each of its requesters (store.Call.RequestedBy).
func (s *Store) requesterKeys(c store.Call) []string {
	var keys []string
	for _, r := range c.RequestedBy() {
		keys = append(keys, s.requesterKey(r))
	}
	return keys
}

// approverKeys returns the approver indexes a call is listed in.
func (s *Store) approverKeys(c store.Call) []string {
	if len(c.Approvers) == 0 {
		return []string{s.approverKey(anyApprover)}
	}
	keys := make([]string, 0, len(c.Approvers))
	for _, a := range c.Approvers {
		keys = append(keys, s.approverKey(a))
	}
	return keys
}

// SaveConversation replaces the conversation record; it is kept for
// ConversationTTL after the last save. A zero UpdatedAt is set to now.
func (s *Store) SaveConversation(ctx context.Context, c store.Conversation) error {
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = time.Now()
	}
	k := s.convKey(c.Key)
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, k)
		p.HSet(ctx, k,
			"key", c.Key,
			"state", []byte(c.State),
			"paused_run", c.PausedRun,
			"updated_at", c.UpdatedAt.Format(time.RFC3339Nano))
		p.PExpire(ctx, k, s.convTTL)
		return nil
	})
	if err != nil {
		return fmt.Errorf("save conversation %s: %w", c.Key, err)
	}
	return nil
}

// LoadConversation returns the conversation, or store.ErrNotFound.
func (s *Store) LoadConversation(ctx context.Context, key string) (store.Conversation, error) {
	m, err := s.c.HGetAll(ctx, s.convKey(key)).Result()
	if err != nil {
		return store.Conversation{}, fmt.Errorf("load conversation %s: %w", key, err)
	}
	if len(m) == 0 {
		return store.Conversation{}, fmt.Errorf("load conversation %s: %w", key, store.ErrNotFound)
	}
	c, err := decodeConversation(key, m)
	if err != nil {
		return store.Conversation{}, fmt.Errorf("load conversation %s: %w", key, err)
	}
	return c, nil
}

// decodeConversation builds a conversation from the fields of its hash.
func decodeConversation(key string, m map[string]string) (store.Conversation, error) {
	c := store.Conversation{Key: key, PausedRun: m["paused_run"]}
	if st := m["state"]; st != "" {
		c.State = json.RawMessage(st)
	}
	if at := m["updated_at"]; at != "" {
		var err error
		if c.UpdatedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
			return store.Conversation{}, err
		}
	}
	return c, nil
}

// CreateRun saves the run and its calls atomically (one script on the
// run's hash slot), then adds them to the indexes and marks the
// conversation as paused on the run. If that second step fails the error
// is returned and the run, which nobody knows about yet, expires unseen.
// See storetest.Store for the contract.
func (s *Store) CreateRun(ctx context.Context, r store.Run, calls []store.Call) error {
	nr, err := s.createRun(ctx, r, calls, nil)
	if err != nil {
		return err
	}
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		s.indexRun(ctx, p, nr, true)
		return nil
	})
	if err != nil {
		return fmt.Errorf("create run %s: index: %w", nr.run.ID, err)
	}
	return nil
}

// createRun writes the run and its calls with their notes (one script),
// and returns them as prepared for indexRun.
func (s *Store) createRun(ctx context.Context, r store.Run, calls []store.Call, notes map[string][]byte) (newRun, error) {
	nr, err := s.newRun(r, calls, notes)
	if err != nil {
		return newRun{}, err
	}
	// rand.Text names this sending (see the script).
	created, err := createRun.Run(ctx, s.c, nr.keys, append(slices.Clip(nr.args), rand.Text())...).Int()
	if err != nil {
		return newRun{}, fmt.Errorf("create run %s: %w", nr.run.ID, err)
	}
	if created == 0 {
		return newRun{}, fmt.Errorf("create run %s: %w", nr.run.ID, store.ErrRunExists)
	}
	return nr, nil
}

// newRun is a run and its calls prepared for the createRun script: its
// keys (the run's, then each call's) and arguments.
type newRun struct {
	run   store.Run
	calls []store.Call
	index []indexEntry // runIndex of run and calls
	keys  []string
	args  []any
}

// newRun prepares r and calls (newrun.Prepare) and encodes them for the
// createRun script.
func (s *Store) newRun(r store.Run, calls []store.Call, notes map[string][]byte) (newRun, error) {
	r, calls, err := newrun.Prepare(r, calls, time.Now())
	if err == nil {
		err = newrun.CheckNotes(calls, notes)
	}
	if err != nil {
		return newRun{}, fmt.Errorf("create run: %w", err)
	}
	runJSON, err := store.EncodeJSON(r)
	if err != nil {
		return newRun{}, fmt.Errorf("create run %s: %w", r.ID, err)
	}
	deleteAt := r.ExpiresAt.Add(s.retention)
	conv := ""
	if r.Conversation != "" {
		conv = s.convKey(r.Conversation)
	}
	nr := newRun{run: r, calls: calls, index: s.runIndex(r, calls), keys: []string{s.runKey(r.ID)}, args: []any{runJSON, deleteAt.UnixMilli(), conv}}
	// The index keys of each call, kept for commitFinish (a single node
	// only).
	idx := map[string][]string{}
	if !s.cluster {
		for _, e := range nr.index {
			idx[e.member] = append(idx[e.member], e.key)
		}
	}
	for _, c := range calls {
		fp := c.Fingerprint
		c.Status = "" // the status lives in its own field
		b, err := store.EncodeJSON(c)
		if err != nil {
			return newRun{}, fmt.Errorf("create run %s: %w", r.ID, err)
		}
		nr.keys = append(nr.keys, s.callKey(c.ID))
		nr.args = append(nr.args, b, fp, c.ExpiresAt.UnixMicro(), remindArg(c.RemindAt), strings.Join(idx[c.ID], "\n"), notes[c.ID])
	}
	return nr, nil
}

// indexEntry is one entry of a sorted-set index that a created run adds:
// member at score (a time, as Unix ms) in key.
type indexEntry struct {
	key    string
	score  time.Time
	member string
}

// runIndex returns the index entries of a created run and its calls.
// Scores are times in ms: expiry times in the due and (on a Cluster) runs
// indexes, reminder times in the reminder index, and creation times in
// the pending-call listings, so that a bounded listing reads only its
// oldest entries. No index is trimmed by score: an entry leaves it with
// FinishRun or the call's decision, or when a reader finds it stale, and
// each index key lives no longer than the last run it lists (indexRun).
// A due entry's time is no proof that its call is gone: an approval with
// an edit lists the call at the edit's earlier expiry before its script
// runs, and a call whose script refuses the edit stays pending, later,
// with its entry early (Due moves it back); a runs entry of a run decided
// long ago may still wait on a call pending (Stalled reads it when its
// time comes).
func (s *Store) runIndex(r store.Run, calls []store.Call) []indexEntry {
	var out []indexEntry
	for _, c := range calls {
		out = append(out, indexEntry{s.dueKey(), c.ExpiresAt, c.ID})
		if !c.RemindAt.IsZero() {
			// Not trimmed by time: a call waits up to four weeks, far
			// past its first reminder; readers drop the entries of
			// calls that are gone (see DueReminders).
			out = append(out, indexEntry{s.remindKey(), c.RemindAt, c.ID})
		}
		out = append(out, indexEntry{s.pendingKey(), c.CreatedAt, c.ID})
		for _, k := range s.requesterKeys(c) {
			out = append(out, indexEntry{k, c.CreatedAt, c.ID})
		}
		for _, k := range s.approverKeys(c) {
			out = append(out, indexEntry{k, c.CreatedAt, c.ID})
		}
		if c.Conversation != "" {
			out = append(out, indexEntry{s.convPendingKey(c.Conversation), c.CreatedAt, c.ID})
		}
	}
	if s.cluster {
		// Listed for Stalled once its expiry passes, and at once when a
		// decision moves it to the decision's time (see listDecided); on
		// one node the script of the decision that leaves no call of the
		// run pending lists it (see decisionEffects).
		out = append(out, indexEntry{s.runsKey(), r.ExpiresAt, r.ID})
	}
	return out
}

// indexRun adds a created run and its calls to the indexes (runIndex),
// each kept at least until the run's keys are deleted, and with mark set
// marks the conversation as paused on the run.
func (s *Store) indexRun(ctx context.Context, p redis.Pipeliner, nr newRun, mark bool) {
	r := nr.run
	deleteAt := r.ExpiresAt.Add(s.retention)
	for _, e := range nr.index {
		p.ZAdd(ctx, e.key, redis.Z{Score: float64(e.score.UnixMilli()), Member: e.member})
		expireAtLeast(ctx, p, e.key, deleteAt)
	}
	if mark && r.Conversation != "" {
		k := s.convKey(r.Conversation)
		p.HSet(ctx, k, "key", r.Conversation, "paused_run", r.ID)
		p.PExpire(ctx, k, s.convTTL)
	}
}

// remindArg is a reminder time as the scripts take it: Unix µs, 0 for none.
func remindArg(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// expireAtLeast makes key live at least until t, never shortening a longer
// life (a new key has none, hence NX before GT); it returns its commands.
func expireAtLeast(ctx context.Context, p redis.Pipeliner, key string, t time.Time) []redis.Cmder {
	ms := t.UnixMilli()
	return []redis.Cmder{p.Do(ctx, "PEXPIREAT", key, ms, "NX"), p.Do(ctx, "PEXPIREAT", key, ms, "GT")}
}

// callFields are the fields of a call hash that make up a store.Call, in
// the order decodeCall reads them.
var callFields = []string{"call", "status", "decision", "executing", "result", "approvals", "edit", "fp", "remind", "reminded", "exp"}

// decodeCall builds a call from the values of callFields; ok is false if
// the call does not exist.
func decodeCall(vals []any) (c store.Call, ok bool, err error) {
	str := func(i int) string {
		if i >= len(vals) {
			return ""
		}
		v, _ := vals[i].(string)
		return v
	}
	if str(0) == "" {
		return store.Call{}, false, nil
	}
	if err := fastjson.Unmarshal([]byte(str(0)), &c); err != nil {
		return store.Call{}, false, fmt.Errorf("decode call: %w", err)
	}
	c.Status = store.Status(str(1))
	if d := str(2); d != "" {
		c.Decision = new(store.Decision)
		if err := fastjson.Unmarshal([]byte(d), c.Decision); err != nil {
			return store.Call{}, false, fmt.Errorf("decode decision of call %s: %w", c.ID, err)
		}
	}
	c.Executing = str(3) == "1"
	if r := str(4); r != "" {
		c.Result = json.RawMessage(r)
	}
	if a := str(5); a != "" {
		if err := fastjson.Unmarshal([]byte(a), &c.Approvals); err != nil {
			return store.Call{}, false, fmt.Errorf("decode approvals of call %s: %w", c.ID, err)
		}
	}
	if e := str(6); e != "" {
		c.Edit = new(store.Decision)
		if err := fastjson.Unmarshal([]byte(e), c.Edit); err != nil {
			return store.Call{}, false, fmt.Errorf("decode edit of call %s: %w", c.ID, err)
		}
	}
	if fp := str(7); fp != "" {
		c.Fingerprint = fp // an edit replaces the one the call was created with
	}
	if r := str(10); r != "" {
		// An edit may have brought the expiry forward (see approve).
		us, err := strconv.ParseInt(r, 10, 64)
		if err != nil {
			return store.Call{}, false, fmt.Errorf("decode expiry of call %s: %w", c.ID, err)
		}
		if us < c.ExpiresAt.UnixMicro() {
			c.ExpiresAt = time.UnixMicro(us).UTC()
		}
	}
	// The reminder fields, not the JSON, say what ClaimReminder and the
	// decision scripts made of them.
	c.RemindAt, c.Reminded = time.Time{}, 0
	if r := str(8); r != "" {
		us, err := strconv.ParseInt(r, 10, 64)
		if err != nil {
			return store.Call{}, false, fmt.Errorf("decode reminder time of call %s: %w", c.ID, err)
		}
		c.RemindAt = time.UnixMicro(us)
	}
	if r := str(9); r != "" {
		n, err := strconv.Atoi(r)
		if err != nil {
			return store.Call{}, false, fmt.Errorf("decode reminder count of call %s: %w", c.ID, err)
		}
		c.Reminded = n
	}
	return c, true, nil
}

// liveCall is a call as the indexes see it.
type liveCall struct {
	call     store.Call
	exists   bool
	finished bool  // its run is finished
	score    int64 // its entry's score in the index read (scanIndex)
	// unreadable is why a call stored could not be decoded (exists is
	// then false).
	unreadable error
}

// skipped warns, if the store has a log, of a call a scan skipped as
// unreadable.
func (s *Store) skipped(err error) {
	if s.log != nil {
		s.log.Warn("skipped a pending call that cannot be read: it does not expire, remind or list until it is deleted or a version that reads it runs", "err", err)
	}
}

// pending reports whether the call belongs in the pending indexes.
func (l liveCall) pending() bool {
	return l.exists && !l.finished && l.call.Status == store.Pending
}

// loadCalls reads calls and whether their runs are finished in one round
// trip. Unknown ids come back with exists false.
func (s *Store) loadCalls(ctx context.Context, ids []string) ([]liveCall, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	p := s.c.Pipeline()
	calls := make([]*redis.SliceCmd, len(ids))
	runs := make([]*redis.SliceCmd, len(ids))
	for i, id := range ids {
		if store.RunOf(id) == "" {
			continue
		}
		calls[i] = p.HMGet(ctx, s.callKey(id), callFields...)
		runs[i] = p.HMGet(ctx, s.runKey(store.RunOf(id)), "finished")
	}
	if p.Len() > 0 {
		if _, err := p.Exec(ctx); err != nil {
			return nil, err
		}
	}
	out := make([]liveCall, len(ids))
	for i := range ids {
		if calls[i] == nil {
			continue
		}
		c, ok, err := decodeCall(calls[i].Val())
		if err != nil {
			// One call that cannot be read does not hide the others:
			// LoadRun fails with it; a scan skips it (see scanIndexFrom).
			out[i] = liveCall{unreadable: fmt.Errorf("decode call %s: %w", ids[i], err)}
			continue
		}
		fin, _ := runs[i].Val()[0].(string)
		out[i] = liveCall{call: c, exists: ok, finished: fin == "1"}
	}
	return out, nil
}

// runRecord reads a run hash; ok is false if the run does not exist.
func (s *Store) runRecord(ctx context.Context, runID string) (r store.Run, finished, ok bool, err error) {
	vals, err := s.c.HMGet(ctx, s.runKey(runID), "run", "finished").Result()
	if err != nil {
		return store.Run{}, false, false, err
	}
	raw, _ := vals[0].(string)
	if raw == "" {
		return store.Run{}, false, false, nil
	}
	if err := fastjson.Unmarshal([]byte(raw), &r); err != nil {
		return store.Run{}, false, false, fmt.Errorf("decode run: %w", err)
	}
	fin, _ := vals[1].(string)
	return r, fin == "1", true, nil
}

// LoadRun returns the run and its calls in CallIDs order, or
// store.ErrNotFound.
func (s *Store) LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error) {
	r, finished, ok, err := s.runRecord(ctx, runID)
	r.Finished = finished
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	if !ok {
		return store.Run{}, nil, fmt.Errorf("load run %s: %w", runID, store.ErrNotFound)
	}
	live, err := s.loadCalls(ctx, r.CallIDs)
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	calls := make([]store.Call, 0, len(live))
	for i, l := range live {
		if l.unreadable != nil {
			return store.Run{}, nil, fmt.Errorf("load run %s: %w", runID, l.unreadable)
		}
		if !l.exists {
			return store.Run{}, nil, fmt.Errorf("load run %s: call %s: %w", runID, r.CallIDs[i], store.ErrNotFound)
		}
		calls = append(calls, l.call)
	}
	return r, calls, nil
}

// GetCall returns one call or store.ErrNotFound.
func (s *Store) GetCall(ctx context.Context, callID string) (store.Call, error) {
	if store.RunOf(callID) == "" {
		return store.Call{}, fmt.Errorf("get call %s: %w", callID, store.ErrNotFound)
	}
	vals, err := s.c.HMGet(ctx, s.callKey(callID), callFields...).Result()
	if err != nil {
		return store.Call{}, fmt.Errorf("get call %s: %w", callID, err)
	}
	c, ok, err := decodeCall(vals)
	if err != nil {
		return store.Call{}, fmt.Errorf("get call %s: %w", callID, err)
	}
	if !ok {
		return store.Call{}, fmt.Errorf("get call %s: %w", callID, store.ErrNotFound)
	}
	return c, nil
}

// PutCallNote is one Lua script: the note is a field of the call's hash,
// which expires with the call. See storetest.Store for the contract.
func (s *Store) PutCallNote(ctx context.Context, callID string, note []byte) error {
	if store.RunOf(callID) == "" {
		return fmt.Errorf("put note of call %s: %w", callID, store.ErrNotFound)
	}
	n, err := putCallNote.Run(ctx, s.c, []string{s.callKey(callID)}, note).Int()
	if err != nil {
		return fmt.Errorf("put note of call %s: %w", callID, err)
	}
	if n < 0 {
		return fmt.Errorf("put note of call %s: %w", callID, store.ErrNotFound)
	}
	return nil
}

// CallNote is one read: see storetest.Store for the contract.
func (s *Store) CallNote(ctx context.Context, callID string) ([]byte, error) {
	if store.RunOf(callID) == "" {
		return nil, fmt.Errorf("get note of call %s: %w", callID, store.ErrNotFound)
	}
	vals, err := s.c.HMGet(ctx, s.callKey(callID), "call", "note").Result()
	if err != nil {
		return nil, fmt.Errorf("get note of call %s: %w", callID, err)
	}
	if vals[0] == nil {
		return nil, fmt.Errorf("get note of call %s: %w", callID, store.ErrNotFound)
	}
	note, _ := vals[1].(string)
	if note == "" {
		return nil, nil
	}
	return []byte(note), nil
}

// Approve is ApproveAudited with no effects.
func (s *Store) Approve(ctx context.Context, callID, fingerprint string, a store.Approval, edit *store.Proposal, need int, d store.Decision) (store.Call, bool, error) {
	return s.ApproveAudited(ctx, callID, fingerprint, a, nil, edit, need, d, store.Effects{})
}

// Decide is DecideAudited with no effects.
func (s *Store) Decide(ctx context.Context, callID, fingerprint string, d store.Decision) (store.Call, bool, error) {
	return s.DecideAudited(ctx, callID, fingerprint, d, store.Effects{})
}

// ClaimResume is one Lua script: see storetest.Store for the contract. The
// claim is a key that Redis deletes when the lease runs out.
func (s *Store) ClaimResume(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	if lease < time.Millisecond {
		return false, fmt.Errorf("claim resume of run %s: lease %v is under 1ms", runID, lease)
	}
	n, err := claimResume.Run(ctx, s.c, []string{s.runKey(runID), s.claimKey(runID)},
		owner, lease.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("claim resume of run %s: %w", runID, err)
	}
	if n < 0 {
		return false, fmt.Errorf("claim resume of run %s: %w", runID, store.ErrNotFound)
	}
	return n == 1, nil
}

// BeginExecution is one Lua script: see storetest.Store for the contract.
func (s *Store) BeginExecution(ctx context.Context, callID, attempt string) (bool, error) {
	if store.RunOf(callID) == "" {
		return false, fmt.Errorf("begin execution of call %s: %w", callID, store.ErrNotFound)
	}
	// Names this sending: go-redis sends a command again when its reply
	// is lost (an EOF, a read time-out), and the sending that set the
	// flag must still be told it did; so must the caller asking again.
	if attempt == "" {
		attempt = rand.Text()
	}
	n, err := beginExecution.Run(ctx, s.c, []string{s.callKey(callID)}, attempt).Int()
	if err != nil {
		return false, fmt.Errorf("begin execution of call %s: %w", callID, err)
	}
	if n < 0 {
		return false, fmt.Errorf("begin execution of call %s: %w", callID, store.ErrNotFound)
	}
	return n == 1, nil
}

// AbandonExecution is one Lua script: see storetest.Store for the
// contract.
func (s *Store) AbandonExecution(ctx context.Context, callID, attempt string) error {
	if store.RunOf(callID) == "" {
		return fmt.Errorf("abandon execution of call %s: %w", callID, store.ErrNotFound)
	}
	n, err := abandonExecution.Run(ctx, s.c, []string{s.callKey(callID)}, attempt).Int()
	if err != nil {
		return fmt.Errorf("abandon execution of call %s: %w", callID, err)
	}
	if n < 0 {
		return fmt.Errorf("abandon execution of call %s: %w", callID, store.ErrNotFound)
	}
	return nil
}

// SkipExecution is one Lua script: see storetest.Store for the contract.
func (s *Store) SkipExecution(ctx context.Context, callID string, result []byte) error {
	if store.RunOf(callID) == "" {
		return fmt.Errorf("skip execution of call %s: %w", callID, store.ErrNotFound)
	}
	if len(result) == 0 {
		return fmt.Errorf("skip execution of call %s: empty result", callID)
	}
	n, err := skipExecution.Run(ctx, s.c, []string{s.callKey(callID)}, result).Int()
	switch {
	case err != nil:
		return fmt.Errorf("skip execution of call %s: %w", callID, err)
	case n < 0:
		return fmt.Errorf("skip execution of call %s: %w", callID, store.ErrNotFound)
	case n == 0:
		return fmt.Errorf("skip execution of call %s: not decided, or started already: %w", callID, store.ErrConflict)
	}
	return nil
}

// errOtherResult is SaveResult's error for a call another result was saved
// for.
var errOtherResult = fmt.Errorf("another result is saved: %w", store.ErrConflict)

// SaveResult keeps the result of an executing call and appends its audit
// entry in one script. On a Cluster, where the log is in another hash
// slot, the entry goes beside the script in one pipeline, and is taken
// back unless this sending saved the result, or an earlier SaveResult of
// the same result and entry did (another may have saved the same result,
// with its own entry); if the entry fails alone, the result stands and the
// error wraps store.ErrEffects. A part of that pipeline the client sends
// again after its reply was cut may write the entry twice, as a commit's.
func (s *Store) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	if store.RunOf(callID) == "" {
		return fmt.Errorf("save result of call %s: %w", callID, store.ErrNotFound)
	}
	if len(result) == 0 {
		return fmt.Errorf("save result of call %s: empty result", callID)
	}
	if e.At.IsZero() {
		e.At = time.Now()
	}
	entry, err := auditArg(e)
	if err != nil {
		return fmt.Errorf("save result of call %s: %w", callID, err)
	}
	var res []any
	var tail string
	nonce := rand.Text() // names this sending
	if s.cluster && entry != "" {
		res, tail, err = s.saveResultBeside(ctx, callID, result, entry, nonce)
	} else {
		keys := []string{s.callKey(callID)}
		if !s.cluster {
			keys = append(keys, s.auditKey())
		}
		res, err = saveResult.Run(ctx, s.c, keys, result, entry, s.auditMax, nonce).Slice()
		if err == nil && len(res) > 1 {
			tail, _ = res[1].(string)
		}
	}
	if err != nil {
		return fmt.Errorf("save result of call %s: %w", callID, err)
	}
	switch n, _ := firstInt(res); n {
	case -1:
		return fmt.Errorf("save result of call %s: %w", callID, store.ErrNotFound)
	case 0:
		return fmt.Errorf("save result of call %s: not executing: %w", callID, store.ErrConflict)
	case 3:
		return fmt.Errorf("save result of call %s: %w", callID, errOtherResult)
	}
	// Saved with its entry: now (1), by this sending made before (2, the
	// entry beside it on a Cluster), by an earlier SaveResult of the same
	// result and entry (5: on a Cluster the entry is kept once, also when
	// that one took its own back after its reply was lost), or the same
	// result by another (4, with that one's entry). Entries past the
	// retention time that this write cannot trim are trimmed by a later
	// one.
	s.trimStale(ctx, store.Effects{Audit: e}, tail)
	return nil
}

// saveResultBeside runs the saveResult script on a Cluster with the
// commands that append entry to the audit log beside it, in one pipeline
// (a round trip to each node, in parallel). It returns the script's reply
// and the log's oldest entry. An entry added while this sending did not
// save the result (refused, failed, lost, or saved by another) is taken
// back; one that failed while it did is reported wrapped in
// store.ErrEffects. A save of the same result and entry made before (a
// SaveResult whose reply was lost, made again: the script names the entry
// beside the result) is this entry's: the log keeps it once, whether the
// entry added then was taken back (its reply lost) or not.
func (s *Store) saveResultBeside(ctx context.Context, callID string, result []byte, entry, nonce string) ([]any, string, error) {
	keys := []string{s.callKey(callID)}
	p := s.c.Pipeline()
	// The script gets the entry to name it beside the result, and
	// appends nothing: it has no audit key.
	save := saveResult.EvalSha(ctx, p, keys, result, entry, s.auditMax, nonce)
	// The entry is added once for this sending: the client sends a
	// node's part of a pipeline again when its reply is lost, the entry
	// with it where the log is on the call's node.
	mark := s.auditSentKey(callID, "result."+nonce)
	push := pushAuditOnce.Eval(ctx, p, []string{s.auditKey(), mark}, entry, s.auditMax, time.Now().Add(auditMarkTTL).UnixMilli())
	_, _ = p.Exec(ctx)
	if redis.HasErrorPrefix(save.Err(), "NOSCRIPT") {
		save = saveResult.Run(ctx, s.c, keys, result, entry, s.auditMax, nonce)
	}
	res, err := save.Slice()
	n, _ := firstInt(res)
	switch {
	case err == nil && n == 5:
		// The earlier save's entry was kept, or taken back when its
		// reply was lost: the log keeps the entry once. Should that
		// fail, an entry pushed now is kept rather than none.
		err := keepOnce.Run(context.WithoutCancel(ctx), s.c, []string{s.auditKey()}, entry, s.auditMax).Err()
		if err != nil && push.Err() != nil {
			return res, "", fmt.Errorf("%w: %w", store.ErrEffects, err)
		}
		tail, _ := push.Text()
		return res, tail, nil
	case err != nil || n != 1 && n != 2:
		if push.Err() == nil {
			s.c.LRem(context.WithoutCancel(ctx), s.auditKey(), 1, entry)
		}
		return res, "", err
	}
	tail, err := push.Text()
	if err != nil {
		return res, "", fmt.Errorf("%w: %w", store.ErrEffects, err)
	}
	return res, tail, nil
}

// keepOnce leaves an audit entry in the log exactly once: the copies
// newer than the oldest are removed, and the entry is added if the log
// has none. Only the newest 1,000 entries are looked at: the copies were
// pushed seconds apart, and a long log is not scanned whole.
// KEYS: audit
// ARGV: entry, max entries kept
// Returns how many copies the log had.
var keepOnce = redis.NewScript(`
local at = redis.call('LPOS', KEYS[1], ARGV[1], 'COUNT', 0, 'MAXLEN', 1000)
if #at == 0 then
  redis.call('LPUSH', KEYS[1], ARGV[1])
  redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
elseif #at > 1 then
  redis.call('LREM', KEYS[1], #at - 1, ARGV[1])
end
return #at
`)

// firstInt is the first element of a script's reply as an integer.
func firstInt(res []any) (int64, bool) {
	if len(res) == 0 {
		return 0, false
	}
	n, ok := res[0].(int64)
	return n, ok
}

// FinishRun marks the run finished (one script on its hash slot), which
// takes it out of every listing, and shortens the life of its keys to the
// retention time. It then drops its index entries and clears the
// conversation's PausedRun if it names the run (one pipeline). Finishing a
// finished run changes nothing but that clean-up, made again.
func (s *Store) FinishRun(ctx context.Context, runID string) error {
	unindex, err := s.finishRun(ctx, runID)
	if err != nil || unindex == nil {
		return err
	}
	_, err = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		unindex(p)
		return nil
	})
	if err != nil {
		// The run is finished; readers skip and drop the entries left behind.
		return fmt.Errorf("finish run %s: clean up: %w", runID, err)
	}
	return nil
}

// finishRun marks the run finished (one script) and returns what adds to a
// pipeline the commands that drop its index entries and clear the
// conversation's PausedRun, also when the run was finished already (they
// are idempotent, and a finish sent again must not skip them).
func (s *Store) finishRun(ctx context.Context, runID string) (unindex func(p redis.Pipeliner), err error) {
	keys := []string{s.runKey(runID), s.claimKey(runID)}
	res, err := finishRun.Run(ctx, s.c, keys, s.retention.Milliseconds(), runID).Slice()
	if err != nil {
		return nil, fmt.Errorf("finish run %s: %w", runID, err)
	}
	if n, _ := res[0].(int64); n == 0 {
		return nil, fmt.Errorf("finish run %s: %w", runID, store.ErrNotFound)
	}
	var r struct {
		Conversation string `json:"conversation"`
	}
	if raw, _ := res[1].(string); fastjson.Unmarshal([]byte(raw), &r) != nil {
		return nil, fmt.Errorf("finish run %s: bad run record", runID)
	}
	calls := make([]store.Call, 0, len(res)-2)
	for _, v := range res[2:] {
		raw, _ := v.(string)
		var c store.Call
		if err := fastjson.Unmarshal([]byte(raw), &c); err != nil {
			return nil, fmt.Errorf("finish run %s: decode call: %w", runID, err)
		}
		calls = append(calls, c)
	}
	return func(p redis.Pipeliner) {
		for _, c := range calls {
			p.ZRem(ctx, s.dueKey(), c.ID)
			p.ZRem(ctx, s.remindKey(), c.ID)
			p.ZRem(ctx, s.pendingKey(), c.ID)
			for _, k := range s.requesterKeys(c) {
				p.ZRem(ctx, k, c.ID)
			}
			for _, k := range s.approverKeys(c) {
				p.ZRem(ctx, k, c.ID)
			}
			if c.Conversation != "" {
				p.ZRem(ctx, s.convPendingKey(c.Conversation), c.ID)
			}
		}
		p.ZRem(ctx, s.runsKey(), runID)
		if r.Conversation != "" {
			// Eval, not Run: a pipeline cannot fall back from EVALSHA.
			clearPaused.Eval(ctx, p, []string{s.convKey(r.Conversation)}, runID)
		}
	}, nil
}

// scanIndex walks a sorted set in score order, in batches of entries,
// from min to max (as ZRANGEBYSCORE takes them), and calls keep with each
// batch's pending calls, each with its entry's score, and the score of
// the batch's last entry (pending or not). Scanning stops when keep
// reports it has enough. Entries whose call is no longer pending are
// removed from the index.
func (s *Store) scanIndex(ctx context.Context, key, max string, keep func(ls []liveCall, last int64) (enough bool)) error {
	return s.scanIndexFrom(ctx, key, max, 200, keep)
}

// nextBatch is the first batch of a scan for the earliest pending call of
// an index (NextExpiry, NextReminder), which the expiry timer runs on
// every pass: each entry read loads its whole call.
const nextBatch = 8

// scanIndexFrom is scanIndex with a first batch of first entries; each
// next one is four times larger, up to 200.
func (s *Store) scanIndexFrom(ctx context.Context, key, max string, first int64, keep func(ls []liveCall, last int64) (enough bool)) error {
	batch := first
	var stale []any
	for offset := int64(0); ; offset, batch = offset+batch, min(batch*4, 200) {
		zs, err := s.c.ZRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{
			Min: "-inf", Max: max, Offset: offset, Count: batch,
		}).Result()
		if err != nil {
			return err
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			ids[i], _ = z.Member.(string)
		}
		live, err := s.loadCalls(ctx, ids)
		if err != nil {
			return err
		}
		var ok []liveCall
		var last int64
		for i, l := range live {
			l.score = int64(zs[i].Score)
			last = l.score
			if l.unreadable != nil {
				// Left in the index, where a version that can read it
				// finds it; the scan goes on with the others.
				s.skipped(l.unreadable)
				continue
			}
			if l.pending() {
				ok = append(ok, l)
			} else {
				stale = append(stale, ids[i])
			}
		}
		if keep(ok, last) || int64(len(ids)) < batch {
			break
		}
	}
	if len(stale) > 0 {
		// Only entries found decided, expired or gone are removed; a call
		// never becomes pending again, so this cannot lose a pending call.
		if err := s.c.ZRem(ctx, key, stale...).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Pending lists pending calls matching f, oldest first, from the most
// selective index for f (scored by creation time); with f.Limit > 0 it
// stops reading once it has the oldest f.Limit.
func (s *Store) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	key := s.pendingKey()
	switch {
	case f.Conversation != "":
		key = s.convPendingKey(f.Conversation)
	case f.Requester != "":
		key = s.requesterKey(f.Requester)
	case f.Approver != "":
		key = s.approverKey(f.Approver)
	}
	var out []store.Call
	err := s.scanIndex(ctx, key, "+inf", func(ls []liveCall, _ int64) bool {
		for _, l := range ls {
			if f.Match(l.call) {
				out = append(out, l.call)
			}
		}
		if f.Limit <= 0 || len(out) < f.Limit || len(ls) == 0 {
			return false
		}
		// Entries of one millisecond share a score and come in id order,
		// not in CreatedAt order: read on past the millisecond of the
		// last call kept.
		sortCalls(out)
		out = out[:f.Limit]
		return ls[len(ls)-1].call.CreatedAt.UnixMilli() > out[f.Limit-1].CreatedAt.UnixMilli()
	})
	if err != nil {
		return nil, fmt.Errorf("list pending calls: %w", err)
	}
	sortCalls(out)
	return out, nil
}

// sortCalls orders calls oldest first, then by id.
func sortCalls(cs []store.Call) {
	slices.SortFunc(cs, func(a, b store.Call) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
}

// Due lists up to limit pending calls whose ExpiresAt is at or before now,
// earliest expiry first; limit <= 0 lists all. An entry scored earlier
// than its call's ExpiresAt (an approval's edit with an earlier expiry
// that its script refused: see approveBegin) is moved to it (see
// moveDue), not listed.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	var out []store.Call
	var later []redis.Z
	err := s.scanIndex(ctx, s.dueKey(), strconv.FormatInt(now.UnixMilli(), 10), func(ls []liveCall, last int64) bool {
		for _, l := range ls {
			if z, ok := dueLater(l); ok {
				later = append(later, z)
			}
			if l.call.ExpiresAt.After(now) { // later, or later within the same ms
				continue
			}
			out = append(out, l.call)
		}
		if limit <= 0 || len(out) < limit {
			return false
		}
		// Entries of one millisecond share a score and come in id order,
		// not in ExpiresAt order: read on past the millisecond of the
		// last call kept (an entry is never scored after its call's
		// expiry).
		sortDue(out)
		out = out[:limit]
		return last > out[limit-1].ExpiresAt.UnixMilli()
	})
	if err != nil {
		return nil, fmt.Errorf("list due calls: %w", err)
	}
	if err := s.moveDue(ctx, later); err != nil {
		return nil, fmt.Errorf("list due calls: %w", err)
	}
	sortDue(out)
	return out, nil
}

// sortDue orders calls earliest expiry first, then by id.
func sortDue(cs []store.Call) {
	slices.SortFunc(cs, func(a, b store.Call) int {
		return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.ID, b.ID))
	})
}

// dueLater returns the due index entry of a pending call moved to its
// ExpiresAt, if its entry is scored earlier.
func dueLater(l liveCall) (redis.Z, bool) {
	ms := l.call.ExpiresAt.UnixMilli()
	return redis.Z{Score: float64(ms), Member: l.call.ID}, ms > l.score
}

// moveDue moves existing due index entries to their calls' expiry times;
// see moveLater.
func (s *Store) moveDue(ctx context.Context, later []redis.Z) error {
	return s.moveLater(ctx, s.dueKey(), nil, later, func(c store.Call) time.Time { return c.ExpiresAt })
}

// moveLater removes the entries gone of the index at key and moves its
// existing entries later (XX: an entry removed meanwhile is not added
// back) to the times read of their calls (at: ExpiresAt for the due index,
// RemindAt for the reminder index). An approval with an edit that brings a
// call's expiry, and so its next reminder, forward lists it at the new
// time (LT) before its script runs, and again once it has run (see
// approveBegin): an entry this moved later past such an edit, whose time
// was read before it, is moved back here, where the calls are read again,
// or by the approval's second listing.
func (s *Store) moveLater(ctx context.Context, key string, gone []any, later []redis.Z, at func(store.Call) time.Time) error {
	if len(gone) == 0 && len(later) == 0 {
		return nil
	}
	_, err := s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if len(gone) > 0 {
			p.ZRem(ctx, key, gone...)
		}
		if len(later) > 0 {
			p.ZAddArgs(ctx, key, redis.ZAddArgs{XX: true, Members: later})
		}
		return nil
	})
	if err != nil || len(later) == 0 {
		return err
	}
	ids := make([]string, len(later))
	for i, z := range later {
		ids[i] = z.Member.(string)
	}
	live, err := s.loadCalls(ctx, ids)
	if err != nil {
		return err
	}
	var back []redis.Z
	for i, l := range live {
		if t := at(l.call); l.pending() && !t.IsZero() && t.UnixMilli() < int64(later[i].Score) {
			back = append(back, redis.Z{Score: float64(t.UnixMilli()), Member: l.call.ID})
		}
	}
	if len(back) == 0 {
		return nil
	}
	return s.c.ZAddArgs(ctx, key, redis.ZAddArgs{XX: true, LT: true, Members: back}).Err()
}

// NextExpiry returns the earliest ExpiresAt of a pending call, or the zero
// time if none is pending. As entries may be scored earlier than their
// calls' expiry (see Due), it reads on until an entry is scored past the
// earliest expiry found, and moves the early entries it read to their
// calls' expiry.
func (s *Store) NextExpiry(ctx context.Context) (time.Time, error) {
	var next time.Time
	var later []redis.Z
	err := s.scanIndexFrom(ctx, s.dueKey(), "+inf", nextBatch, func(ls []liveCall, last int64) bool {
		for _, l := range ls {
			if z, ok := dueLater(l); ok {
				later = append(later, z)
			}
			if next.IsZero() || l.call.ExpiresAt.Before(next) {
				next = l.call.ExpiresAt
			}
		}
		return !next.IsZero() && last > next.UnixMilli()
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("next expiry: %w", err)
	}
	if err := s.moveDue(ctx, later); err != nil {
		return time.Time{}, fmt.Errorf("next expiry: %w", err)
	}
	return next, nil
}

// DueReminders lists up to limit pending calls whose RemindAt is at or
// before now, earliest first, from the reminder index (limit <= 0: all).
// Entries whose call left Pending or has no reminder left are removed; an
// entry scored earlier than its call's RemindAt (ClaimReminder's index
// update failed or was overtaken) is scored again.
func (s *Store) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	var out []store.Call
	var gone []any
	var later []redis.Z
	err := s.scanIndex(ctx, s.remindKey(), strconv.FormatInt(now.UnixMilli(), 10), func(ls []liveCall, _ int64) bool {
		for _, l := range ls {
			switch at := l.call.RemindAt; {
			case at.IsZero():
				gone = append(gone, l.call.ID)
			case at.After(now):
				later = append(later, redis.Z{Score: float64(at.UnixMilli()), Member: l.call.ID})
			default:
				out = append(out, l.call)
				if limit > 0 && len(out) == limit {
					return true
				}
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("list due reminders: %w", err)
	}
	if err := s.moveLater(ctx, s.remindKey(), gone, later, func(c store.Call) time.Time { return c.RemindAt }); err != nil {
		return nil, fmt.Errorf("list due reminders: %w", err)
	}
	slices.SortFunc(out, func(a, b store.Call) int {
		return cmp.Or(a.RemindAt.Compare(b.RemindAt), cmp.Compare(a.ID, b.ID))
	})
	return out, nil
}

// ClaimReminder is one Lua script on the call's hash slot (see
// storetest.Store for the contract), then an update of the global
// reminder index in a second command, as CreateRun writes its indexes,
// with the call read again after it (see moveLater).
// When that second command fails the claim stands: it returns true with
// the error, and the entry left at the earlier time is moved by the next
// DueReminders that meets it.
func (s *Store) ClaimReminder(ctx context.Context, callID string, n int, next time.Time) (bool, error) {
	if n < 1 {
		return false, fmt.Errorf("claim reminder %d of call %s: reminders count from 1", n, callID)
	}
	if store.RunOf(callID) == "" {
		return false, fmt.Errorf("claim reminder %d of call %s: %w", n, callID, store.ErrNotFound)
	}
	// rand.Text names this sending (see BeginExecution).
	res, err := claimReminder.Run(ctx, s.c, []string{s.callKey(callID), s.runKey(store.RunOf(callID))}, n, remindArg(next), rand.Text()).Int()
	if err != nil {
		return false, fmt.Errorf("claim reminder %d of call %s: %w", n, callID, err)
	}
	switch res {
	case -1:
		return false, fmt.Errorf("claim reminder %d of call %s: %w", n, callID, store.ErrNotFound)
	case 0:
		if err := s.c.ZRem(ctx, s.remindKey(), callID).Err(); err != nil {
			return false, fmt.Errorf("claim reminder %d of call %s: unlist: %w", n, callID, err)
		}
		return false, nil
	case 2:
		return false, nil
	}
	if next.IsZero() {
		err = s.c.ZRem(ctx, s.remindKey(), callID).Err()
	} else {
		// An approval with an edit may bring the reminder forward
		// between the script and this move: moveLater moves it back.
		later := []redis.Z{{Score: float64(next.UnixMilli()), Member: callID}}
		err = s.moveLater(ctx, s.remindKey(), nil, later, func(c store.Call) time.Time { return c.RemindAt })
	}
	if err != nil {
		return true, fmt.Errorf("claim reminder %d of call %s: index: %w", n, callID, err)
	}
	return true, nil
}

// NextReminder returns the earliest RemindAt of a pending call, or the
// zero time if none has a reminder to send. As entries may be scored
// earlier than their calls' reminder (see DueReminders), it reads on
// until an entry is scored past the earliest reminder found, and moves
// the early entries it read to their calls' reminder.
func (s *Store) NextReminder(ctx context.Context) (time.Time, error) {
	var next time.Time
	var gone []any
	var later []redis.Z
	err := s.scanIndexFrom(ctx, s.remindKey(), "+inf", nextBatch, func(ls []liveCall, last int64) bool {
		for _, l := range ls {
			at := l.call.RemindAt
			if at.IsZero() {
				gone = append(gone, l.call.ID)
				continue
			}
			if ms := at.UnixMilli(); ms > l.score {
				later = append(later, redis.Z{Score: float64(ms), Member: l.call.ID})
			}
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		return !next.IsZero() && last > next.UnixMilli()
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("next reminder: %w", err)
	}
	if err := s.moveLater(ctx, s.remindKey(), gone, later, func(c store.Call) time.Time { return c.RemindAt }); err != nil {
		return time.Time{}, fmt.Errorf("next reminder: %w", err)
	}
	return next, nil
}

// Stalled lists up to limit runs with no pending call, not finished and
// with no live resume claim; limit <= 0 lists all. It reads the entries
// of the runs index whose time has come, by that time, however many runs
// are paused: on one node the runs whose last pending call was decided,
// by the time of that decision (the decision's script lists the run); on
// a Cluster, where a decision's script cannot list its run, every run is
// listed when it is created, by its expiry time, and moved to the time of
// the first decision sent on it, beside the decision's script (see
// listDecided): a run whose calls are still pending (the decision was
// refused, or left others pending) is passed over until it finishes.
// Runs listed when they were created, by an earlier version, are read
// once decided by this one, or expired (also when an earlier version, on
// one node, decided them: its script kept an entry's time).
//
// Stalled also trims the audit entries older than AuditRetention (up to
// auditTrimBatch of them), as Audit does: the agent's sweep calls it
// periodically on every replica, which the Redis store has no pass of its
// own for, and a log nothing is written to would keep them otherwise.
func (s *Store) Stalled(ctx context.Context, limit int) ([]string, error) {
	s.trimAudit(ctx, time.Now().Add(-s.auditTTL))
	const batch = 200
	var out []string
	var stale []any
	due := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10), Count: batch}
	for ; ; due.Offset += batch {
		ids, err := s.c.ZRangeByScore(ctx, s.runsKey(), due).Result()
		if err != nil {
			return nil, fmt.Errorf("list stalled runs: %w", err)
		}
		if len(ids) == 0 {
			break
		}
		p := s.c.Pipeline()
		runs := make([]*redis.SliceCmd, len(ids))
		claims := make([]*redis.IntCmd, len(ids))
		for i, id := range ids {
			runs[i] = p.HMGet(ctx, s.runKey(id), "pending", "finished")
			claims[i] = p.Exists(ctx, s.claimKey(id))
		}
		if _, err := p.Exec(ctx); err != nil {
			return nil, fmt.Errorf("list stalled runs: %w", err)
		}
		for i, id := range ids {
			v := runs[i].Val()
			pending, _ := v[0].(string)
			finished, _ := v[1].(string)
			switch {
			case pending == "" || finished == "1":
				stale = append(stale, id)
			case pending == "0" && claims[i].Val() == 0:
				out = append(out, id)
			}
		}
		if (limit > 0 && len(out) >= limit) || len(ids) < batch {
			break
		}
	}
	if len(stale) > 0 {
		if err := s.c.ZRem(ctx, s.runsKey(), stale...).Err(); err != nil {
			return nil, fmt.Errorf("list stalled runs: %w", err)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AcquireLease takes the lease on key for owner for ttl, or renews it if
// owner holds it; false if someone else holds it. Redis deletes the lease
// when ttl runs out.
func (s *Store) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("acquire lease %s: ttl %v is under 1ms", key, ttl)
	}
	n, err := acquireLease.Run(ctx, s.c, []string{s.leaseKey(key)}, owner, ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	return n == 1, nil
}

// RenewLease extends owner's lease on key to ttl from now; false, changing
// nothing, if the lease ran out (Redis deleted it) or is another owner's.
// It goes out with the other renewals due on its node (see renew.go).
func (s *Store) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	return s.renew(&renewal{ctx: ctx, key: key, owner: owner, ttl: ttl})
}

// ReleaseLease frees the lease on key if owner holds it, and does nothing
// otherwise.
func (s *Store) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := releaseLease.Run(ctx, s.c, []string{s.leaseKey(key)}, owner, s.leaseChannel(key)).Err(); err != nil {
		return fmt.Errorf("release lease %s: %w", key, err)
	}
	return nil
}

// Audit appends an entry to a list capped at AuditMax entries, and trims
// the entries older than AuditRetention from its old end. A zero At is set
// to now.
func (s *Store) Audit(ctx context.Context, e store.AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	_, err := s.c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		_, err := s.pushAudit(ctx, p, e)
		return err
	})
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	s.trimAudit(ctx, time.Now().Add(-s.auditTTL))
	return nil
}

// pushAudit adds to p the commands that append e to the capped audit list,
// and returns the one that adds it.
func (s *Store) pushAudit(ctx context.Context, p redis.Pipeliner, e store.AuditEntry) (*redis.IntCmd, error) {
	b, err := auditJSON(e)
	if err != nil {
		return nil, err
	}
	push := p.LPush(ctx, s.auditKey(), b)
	p.LTrim(ctx, s.auditKey(), 0, s.auditMax-1)
	return push, nil
}

// auditJSON encodes an audit entry as the list keeps it, dated now if it
// has no time.
func auditJSON(e store.AuditEntry) ([]byte, error) {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	return store.EncodeJSON(e)
}

// auditTrimBatch bounds the entries one Audit or Stalled call trims, so a
// backlog is worked off over several calls instead of delaying one.
const auditTrimBatch = 100

// popIfTail removes the oldest audit entry if it is still ARGV[1]: two
// replicas trimming at once never drop an entry the other found recent.
var popIfTail = redis.NewScript(`
if redis.call('LINDEX', KEYS[1], -1) == ARGV[1] then
  redis.call('RPOP', KEYS[1])
  return 1
end
return 0`)

// staleAudit reports whether the audit entry raw is from before cutoff;
// false for a recent entry, or one that does not decode (kept for a
// person to read).
func staleAudit(raw string, cutoff time.Time) bool {
	var e store.AuditEntry
	return json.Unmarshal([]byte(raw), &e) == nil && e.At.Before(cutoff)
}

// trimAudit drops audit entries from before cutoff, oldest first. It is
// a best effort, made after what it follows is written: one that fails (a
// connection cut) leaves the entries to the next write's trim, or the
// sweep's, and never fails the write or the sweep.
func (s *Store) trimAudit(ctx context.Context, cutoff time.Time) {
	for range auditTrimBatch {
		tail, err := s.c.LIndex(ctx, s.auditKey(), -1).Result()
		if err != nil || !staleAudit(tail, cutoff) {
			return
		}
		if popIfTail.Run(ctx, s.c, []string{s.auditKey()}, tail).Err() != nil {
			return
		}
	}
}

// AuditLog returns the newest limit entries younger than AuditRetention,
// newest first; limit <= 0 returns all that are kept.
func (s *Store) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	stop := int64(limit) - 1
	if limit <= 0 {
		stop = -1
	}
	raw, err := s.c.LRange(ctx, s.auditKey(), 0, stop).Result()
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	cutoff := time.Now().Add(-s.auditTTL)
	out := make([]store.AuditEntry, 0, len(raw))
	for _, r := range raw {
		var e store.AuditEntry
		if err := json.Unmarshal([]byte(r), &e); err != nil {
			return nil, fmt.Errorf("read audit log: %w", err)
		}
		if e.At.Before(cutoff) {
			break // older entries follow
		}
		out = append(out, e)
	}
	return out, nil
}

// PutRecord stores a record with a compare-and-set on its version (one
// script). Records are configuration and never expire. A zero UpdatedAt is
// set to now.
func (s *Store) PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = time.Now()
	}
	r.Version = 0
	b, err := store.EncodeJSON(r)
	if err != nil {
		return store.Record{}, fmt.Errorf("put record %s/%s: %w", r.Kind, r.ID, err)
	}
	keys := []string{s.recordsKey(r.Kind)}
	if !s.cluster {
		keys = append(keys, s.recordsVersionKey())
	}
	// rand.Text names this sending (see the script).
	v, err := putRecord.Run(ctx, s.c, keys, r.ID, expectVersion, b, rand.Text()).Int64()
	if err != nil {
		return store.Record{}, fmt.Errorf("put record %s/%s: %w", r.Kind, r.ID, err)
	}
	if v < 0 {
		return store.Record{}, fmt.Errorf("put record %s/%s: %w", r.Kind, r.ID, store.ErrConflict)
	}
	r.Version = v
	return r, nil
}

// recordsVersionKey counts the changes of records, on a single node (see
// store.Begun.RecordsVersion, which is the count plus one). Redis Cluster
// keeps no count: its records are in several hash slots.
func (s *Store) recordsVersionKey() string { return s.prefix + ":records-version" }

// Records lists a kind's records by id.
func (s *Store) Records(ctx context.Context, kind string) ([]store.Record, error) {
	m, err := s.c.HGetAll(ctx, s.recordsKey(kind)).Result()
	if err != nil {
		return nil, fmt.Errorf("list records %s: %w", kind, err)
	}
	return decodeRecords(kind, m)
}

// RecordsOf lists the records of several kinds in one round trip, each
// kind's by id (VersionedRecords, without the version).
func (s *Store) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	out, _, err := s.VersionedRecords(ctx, kinds...)
	return out, err
}

// VersionedRecords is RecordsOf with the version of the records, read
// before them in the same round trip (a change between the two reads makes
// the version older than the records, never newer); zero on a Cluster,
// which keeps none.
func (s *Store) VersionedRecords(ctx context.Context, kinds ...string) (map[string][]store.Record, int64, error) {
	var version *redis.StringCmd
	cmds := make([]*redis.MapStringStringCmd, len(kinds))
	// Each command's error is checked apart: a version that was never
	// counted is no error.
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if !s.cluster {
			version = p.Get(ctx, s.recordsVersionKey())
		}
		for i, k := range kinds {
			cmds[i] = p.HGetAll(ctx, s.recordsKey(k))
		}
		return nil
	})
	out := make(map[string][]store.Record, len(kinds))
	for i, k := range kinds {
		if err := cmds[i].Err(); err != nil {
			return nil, 0, fmt.Errorf("list records %v: %w", kinds, err)
		}
		recs, err := decodeRecords(k, cmds[i].Val())
		if err != nil {
			return nil, 0, err
		}
		out[k] = recs
	}
	return out, recordsVersion(version, cmds), nil
}

// decodeRecords turns a kind's hash into records sorted by id.
func decodeRecords(kind string, m map[string]string) ([]store.Record, error) {
	var out []store.Record
	for f, v := range m {
		id, ok := strings.CutPrefix(f, "d:")
		if !ok {
			continue
		}
		var r store.Record
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			return nil, fmt.Errorf("list records %s: %s: %w", kind, id, err)
		}
		var err error
		if r.Version, err = strconv.ParseInt(m["v:"+id], 10, 64); err != nil {
			return nil, fmt.Errorf("list records %s: %s: %w", kind, id, err)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b store.Record) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// DeleteRecord deletes a record, or returns store.ErrNotFound (one
// script, naming its sending: see deleteRecord).
func (s *Store) DeleteRecord(ctx context.Context, kind, id string) error {
	keys := []string{s.recordsKey(kind)}
	if !s.cluster {
		// The change is counted in the same step, and only if there was
		// one: a version that moves for nothing sends decisions checked
		// against the records the slower way.
		keys = append(keys, s.recordsVersionKey())
	}
	// rand.Text names this sending: go-redis sends the script again when
	// its reply is lost, and the sending that deleted the record must not
	// then find it gone.
	n, err := deleteRecord.Run(ctx, s.c, keys, id, rand.Text()).Int64()
	if err != nil {
		return fmt.Errorf("delete record %s/%s: %w", kind, id, err)
	}
	if n == 0 {
		return fmt.Errorf("delete record %s/%s: %w", kind, id, store.ErrNotFound)
	}
	return nil
}

// SeenEvent records an event id for ttl (SET NX, naming its sending); true
// if it was new, also when the client sent the command again after its
// reply was lost.
func (s *Store) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("record event %s: ttl %v is under 1ms", id, ttl)
	}
	// The value names this sending: the client sends the command again
	// when its reply is lost, and the sending that set the key must not
	// then find it set by someone else. GET returns what was there.
	nonce := rand.Text()
	prev, err := s.c.SetArgs(ctx, s.seenKey(id), nonce, redis.SetArgs{Mode: "NX", TTL: ttl, Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("record event %s: %w", id, err)
	}
	return prev == nonce, nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping redis: %w", err)
	}
	return nil
}

// EvictionPolicy returns the maxmemory-policy of the Redis the store is on
// (on a Cluster, the first of its primaries whose policy is not
// noeviction), as INFO tells it; "" if INFO does not tell. Every key the
// store writes has a time to live, so a policy that evicts keys with one
// (volatile-*) or any key (allkeys-*) may drop paused runs, calls and
// leases under memory pressure: only noeviction keeps them.
func (s *Store) EvictionPolicy(ctx context.Context) (string, error) {
	var policy string
	var mu sync.Mutex
	read := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return fmt.Errorf("read redis memory settings: %w", err)
		}
		p := infoField(info, "maxmemory_policy")
		mu.Lock()
		defer mu.Unlock()
		if policy == "" || policy == "noeviction" {
			policy = p
		}
		return nil
	}
	var err error
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, read)
	case *redis.Client:
		err = read(ctx, c)
	}
	return policy, err
}

// ClockSkew returns how far now's clock is ahead of Redis's (behind when
// negative), as read by TIME and taken at the middle of its round trip,
// and how uncertain that is (half the round trip). Each replica judges a
// call's deadline by its own clock (the pausing one sets it, the deciding
// one checks it): replicas whose clocks disagree accept a click late, or
// expire a call early, by the difference.
func (s *Store) ClockSkew(ctx context.Context, now func() time.Time) (skew, within time.Duration, err error) {
	sent := now()
	t, err := s.c.Time(ctx).Result()
	got := now()
	if err != nil {
		return 0, 0, fmt.Errorf("read redis time: %w", err)
	}
	rtt := got.Sub(sent)
	return sent.Add(rtt / 2).Sub(t), rtt / 2, nil
}

// infoField returns the value of field in an INFO reply, "" if absent.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// Close closes the clients, and waits for the renewals they were sending.
func (s *Store) Close() error {
	s.leases.close()
	s.renewer.mu.Lock()
	s.renewer.closed = true
	s.renewer.mu.Unlock()
	var err error
	if s.renewals != nil {
		err = s.renewals.Close()
	}
	err = errors.Join(s.c.Close(), err)
	// Their batches end with the clients closed.
	s.renewer.senders.Wait()
	if err != nil {
		return fmt.Errorf("close redis client: %w", err)
	}
	return nil
}
