package redisstore_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// A lease released by CommitTurn is announced to the processes waiting for
// it, as one released by ReleaseLease is.
func TestCommitTurnAnnouncesRelease(t *testing.T) {
	for _, u := range []string{redisURL(t), envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")} {
		s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u)})
		t.Cleanup(func() { _ = s.Close() })
		ctx := t.Context()
		conv := "C1:" + store.NewRunID()
		if b, err := s.BeginTurn(ctx, conv, "a", time.Minute); err != nil || !b.Acquired {
			t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
		}
		w, err := s.WatchLease(ctx, store.TurnLease(conv))
		if err != nil {
			t.Fatalf("WatchLease: %v", err)
		}
		if err := s.CommitTurn(ctx, store.Commit{Key: conv, Release: "a"}); err != nil {
			t.Fatalf("CommitTurn: %v", err)
		}
		select {
		case <-w.Released():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no release announced within 10s of the commit", u)
		}
		_ = w.Close()
	}
}
