package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// RenewHolds renews each hold of a batch as RenewLease or RenewClaim alone
// would, keys spread over a Cluster's nodes included, and after the
// server dropped its cached scripts.
func TestRenewHoldsRenewsEachAsAlone(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single node", redisURL(t)},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, tc.url, redisstore.Options{Prefix: newPrefix(t, tc.url)})
			t.Cleanup(func() { _ = s.Close() })
			flushScripts(t, tc.url)

			var holds []store.Hold
			var want []store.Renewed
			for i := range 6 {
				key := "conv:renew-" + string(rune('a'+i))
				if i%3 != 2 { // every third lease is no one's
					if ok, err := s.AcquireLease(ctx, key, "me", time.Second); err != nil || !ok {
						t.Fatalf("AcquireLease(%s) = %v, %v", key, ok, err)
					}
				}
				owner := "me"
				if i%3 == 1 {
					owner = "someone else"
				}
				holds = append(holds, store.Hold{Lease: key, Owner: owner})
				want = append(want, store.Renewed{OK: i%3 == 0})
			}
			r, calls := testRun()
			if err := s.CreateRun(ctx, r, calls); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, store.Decision{Kind: "approve", Decider: "U1", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.ClaimResume(ctx, r.ID, "me", time.Second); err != nil || !ok {
				t.Fatalf("ClaimResume = %v, %v", ok, err)
			}
			holds = append(holds, store.Hold{Run: r.ID, Owner: "me"}, store.Hold{Run: r.ID, Owner: "someone else"}, store.Hold{Run: store.NewRunID(), Owner: "me"})
			want = append(want, store.Renewed{OK: true}, store.Renewed{}, store.Renewed{Err: store.ErrNotFound})

			got := s.RenewHolds(ctx, time.Hour, holds)
			if len(got) != len(holds) {
				t.Fatalf("RenewHolds gave %d results for %d holds", len(got), len(holds))
			}
			for i := range holds {
				if got[i].OK != want[i].OK || !errors.Is(got[i].Err, want[i].Err) || (want[i].Err == nil) != (got[i].Err == nil) {
					t.Errorf("RenewHolds: hold %+v = %+v, want %+v", holds[i], got[i], want[i])
				}
			}
			// The renewed ones last the new ttl: past the old one, they are
			// still held.
			for i, h := range holds[:6] {
				if h.Owner != "me" || !want[i].OK {
					continue
				}
				pttl := pttlOf(t, s, h.Lease)
				if pttl < time.Minute {
					t.Errorf("lease %s has %v left after its renewal for an hour", h.Lease, pttl)
				}
			}
			if ok, err := s.ClaimResume(ctx, r.ID, "someone else", time.Second); err != nil || ok {
				t.Errorf("ClaimResume by another owner after the claim's renewal = %v, %v; want false", ok, err)
			}
		})
	}
}

// A renewal goes out on connections of its own: the store's other
// commands, holding every connection of their pool (pipelines' included),
// do not hold it up.
func TestRenewalsDoNotWaitForTheStoresConnections(t *testing.T) {
	u := redisURL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	prefix := newPrefix(t, u)
	s := newStore(t, u+sep+"pool_size=1&pipeline_pool_size=-1&pool_timeout=30s", redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if ok, err := s.AcquireLease(ctx, "conv:busy", "me", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}

	// The pool's one connection blocks on a list no one pushes to until
	// the test does; the test sees it blocked before it renews.
	blocked := make(chan error, 1)
	list := prefix + ":test-blocked"
	name := "toolgate-renew-test-" + store.NewRunID()
	go func() {
		c := redisstore.ClientOf(s)
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientSetName(ctx, name)
			p.BLPop(ctx, 20*time.Second, list)
			return nil
		})
		blocked <- err
	}()
	watcher, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	eventuallyTrue(t, "the pool's connection blocked", func() bool {
		list, err := watcher.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, "name="+name) && strings.Contains(list, "cmd=blpop")
	})

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := s.RenewLease(rctx, "conv:busy", "me", time.Minute)
	if err != nil || !ok {
		t.Errorf("RenewLease while the store's only other connection is busy = %v, %v; want true", ok, err)
	}
	select {
	case err := <-blocked:
		t.Fatalf("the blocking command ended (%v) before the renewal was checked", err)
	default:
	}
	if err := watcher.RPush(ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatalf("the blocking command: %v", err)
	}
}

// flushScripts has every primary of the Redis at u drop its cached
// scripts, so that the next script sent by its hash is not found.
func flushScripts(t *testing.T, u string) {
	t.Helper()
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), flush)
	} else {
		err = flush(t.Context(), c.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// pttlOf returns how long the lease on key has left.
func pttlOf(t *testing.T, s *redisstore.Store, key string) time.Duration {
	t.Helper()
	d, err := redisstore.ClientOf(s).PTTL(t.Context(), redisstore.LeaseKey(s, key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// eventuallyTrue waits up to 10 s for cond, checking every 10 ms.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
