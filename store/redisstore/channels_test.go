package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store/redisstore"
)

// Redis delivers a PUBLISH to the subscribers of every database of the
// server, so a store does not hear what a store on another database with
// the same prefix announces: its pauses (whose policy records are
// numbered by each database for itself) and its lease releases. The other
// store is never connected: what it would publish is published from this
// database, as PUBLISH is the same from any.
func TestAnnouncementsOfAnotherDatabaseAreNotHeard(t *testing.T) {
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL, with databases: %v", err)
	}
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	otherOpts := *opts
	otherOpts.DB = (opts.DB + 1) % 16
	other := redisstore.NewFromClient(redis.NewClient(&otherOpts), redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = other.Close() })
	pub := redis.NewClient(opts)
	t.Cleanup(func() { _ = pub.Close() })
	ctx := t.Context()
	heard := followPauses(t, s)
	// Published in this order, and heard in it if heard at all.
	if err := pub.Publish(ctx, other.PausesChannel(), "another database's").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, s.PausesChannel(), "this database's").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if got != "this database's" {
			t.Errorf("first announcement heard = %q, want this database's own", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no announcement within 10s")
	}

	const key, mine = "conv:T1/C1/1.1", "conv:T1/C1/2.2"
	wOther, err := s.WatchLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer wOther.Close()
	wMine, err := s.WatchLease(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	defer wMine.Close()
	if err := pub.Publish(ctx, other.LeaseChannel(key), "1").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AcquireLease(ctx, mine, "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, mine, "a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wMine.Released():
	case <-time.After(10 * time.Second):
		t.Fatal("no release announced within 10s of ReleaseLease")
	}
	// The releases are handed to the watches in the order published.
	select {
	case <-wOther.Released():
		t.Error("a release of the lease on another database woke this database's watch")
	default:
	}
}
