package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/redisstore"
)

// watchStore is a botsetup.Store that also announces lease releases, as Redis
// does.
type watchStore struct {
	botsetup.Store
	keys []string
}

func (w *watchStore) WatchLease(_ context.Context, key string) (store.LeaseWatch, error) {
	w.keys = append(w.keys, key)
	return nil, nil
}

func openBolt(t *testing.T) *boltstore.Store {
	t.Helper()
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "toolgate.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// counterValue returns the value of the counter name with label=value, or
// -1 when there is none.
func counterValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// Every call through the wrapper is counted by method, and reaches the
// store.
func TestCountStoreCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := countStore(openBolt(t), reg)
	ctx := t.Context()
	for range 2 {
		if _, err := st.SeenEvent(ctx, "Ev1", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CommitTurn(ctx, store.Commit{Key: "C1/1.0", Conversation: &store.Conversation{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.LoadConversation(ctx, "C1/1.0"); err != nil {
		t.Fatal(err)
	}
	for method, want := range map[string]float64{"SeenEvent": 2, "CommitTurn": 1, "LoadConversation": 1, "Decide": -1} {
		if got := counterValue(t, reg, "toolgate_store_calls_total", "method", method); got != want {
			t.Errorf("toolgate_store_calls_total{method=%q} = %v, want %v", method, got, want)
		}
	}
	isNew, err := st.SeenEvent(ctx, "Ev1", time.Minute)
	if err != nil || isNew {
		t.Errorf("SeenEvent through the wrapper after two calls = %v, %v; want false (not new): the calls did not reach the store", isNew, err)
	}
}

// pauseStore is a watchStore that also announces pauses, as Redis does.
type pauseStore struct {
	*watchStore
	followed int
}

func (p *pauseStore) FollowPauses(context.Context, func(), func([]byte)) error {
	p.followed++
	return nil
}

func (p *pauseStore) Notify(context.Context, []byte) error { return nil }

func (p *pauseStore) FollowNotices(context.Context, func(), func([]byte)) error { return nil }

// The wrapper of the Redis store offers every interface of it another
// package looks for: without one, what it is for is silently off in the
// bot (the lease waiters, the pauses followed, and someone who left a
// channel deciding on other replicas for a minute).
func TestCountStoreKeepsWhatRedisCarries(t *testing.T) {
	rs := redisstore.NewFromClient(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), redisstore.Options{})
	t.Cleanup(func() { rs.Close() })
	st := countStore(rs, prometheus.NewRegistry())
	for name, ok := range map[string]bool{
		"agent.LeaseWatcher":         is[agent.LeaseWatcher](st),
		"agent.PauseFeed":            is[agent.PauseFeed](st),
		"slackapp.Notices":           is[slackapp.Notices](st),
		"approvals.Auditor":          is[approvals.Auditor](st),
		"approvals.BatchRecordStore": is[approvals.BatchRecordStore](st),
	} {
		if !ok {
			t.Errorf("the wrapper of the Redis store is no %s", name)
		}
	}
}

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}

// Lease release announcements are offered exactly when the wrapped store
// has them (without them the agent's waiters in other processes fall back
// to re-checking), and are counted; so is the policy's batch listing.
// Pause announcements too (without them a click on another replica's card
// reads the call first).
func TestCountStoreKeepsLeaseWatchAndBatchRecords(t *testing.T) {
	if _, ok := countStore(openBolt(t), prometheus.NewRegistry()).(agent.LeaseWatcher); ok {
		t.Error("the wrapper of a store without WatchLease offers WatchLease")
	}
	if _, ok := countStore(&watchStore{Store: openBolt(t)}, prometheus.NewRegistry()).(agent.PauseFeed); ok {
		t.Error("the wrapper of a store without FollowPauses offers FollowPauses")
	}
	ps := &pauseStore{watchStore: &watchStore{Store: openBolt(t)}}
	feed, ok := countStore(ps, prometheus.NewRegistry()).(agent.PauseFeed)
	if !ok {
		t.Fatal("the wrapper of a store with FollowPauses does not offer it")
	}
	if err := feed.FollowPauses(t.Context(), nil, func([]byte) {}); err != nil || ps.followed != 1 {
		t.Errorf("FollowPauses through the wrapper = %v, the store followed %d times; want once", err, ps.followed)
	}
	inner := &watchStore{Store: openBolt(t)}
	reg := prometheus.NewRegistry()
	st := countStore(inner, reg)
	w, ok := st.(agent.LeaseWatcher)
	if !ok {
		t.Fatal("the wrapper of a store with WatchLease does not offer it")
	}
	if _, err := w.WatchLease(t.Context(), "conv:C1/1.0"); err != nil {
		t.Fatal(err)
	}
	if len(inner.keys) != 1 || inner.keys[0] != "conv:C1/1.0" {
		t.Errorf("the store got WatchLease calls %v, want one for conv:C1/1.0", inner.keys)
	}
	if _, err := st.RecordsOf(t.Context(), "a", "b"); err != nil {
		t.Fatal(err)
	}
	for _, method := range []string{"WatchLease", "RecordsOf"} {
		if got := counterValue(t, reg, "toolgate_store_calls_total", "method", method); got != 1 {
			t.Errorf("%s counted %v times, want 1", method, got)
		}
	}
}

// On Redis the round trips are counted too: a command sent alone is one,
// as is a pipeline of several commands (RecordsOf lists two kinds in one).
func TestCountStoreCountsRedisRoundTrips(t *testing.T) {
	url, ok := teststore.RedisURL(t)
	if !ok {
		t.Skip("REDIS_URL is not set: no Redis round trips to count")
	}
	rs, err := redisstore.New(t.Context(), url, redisstore.Options{Prefix: teststore.Prefix(t, url, "storecount")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	reg := prometheus.NewRegistry()
	st := countStore(rs, reg)
	if _, ok := st.(agent.PauseFeed); !ok {
		t.Error("the wrapper of the Redis store does not offer FollowPauses")
	}
	trips := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "toolgate_store_round_trips_total" {
				return mf.GetMetric()[0].GetCounter().GetValue()
			}
		}
		t.Fatal("no toolgate_store_round_trips_total")
		return 0
	}
	ctx := t.Context()
	// No script here: a script's EVALSHA is followed by an EVAL when the
	// server does not have it (other tests may flush the scripts).
	if _, err := st.SeenEvent(ctx, "Ev0", time.Minute); err != nil {
		t.Fatal(err) // dials the connection, whose handshake is left out
	}
	before := trips()
	if _, err := st.SeenEvent(ctx, "Ev1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RecordsOf(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	if got := trips() - before; got != 2 {
		t.Errorf("round trips of a command and a listing of two kinds = %v, want 2", got)
	}
}
