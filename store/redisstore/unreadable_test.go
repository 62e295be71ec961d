package redisstore_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// lockedBuffer is a bytes.Buffer for a log written from several
// goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// One pending call that cannot be read (written by another version, or
// edited by hand) does not stop the others from expiring, being reminded
// or listed: scans skip it, leave it in the index, and log it by its id.
func TestOneUnreadableCallHoldsUpNoOther(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			var logged lockedBuffer
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url), Log: slog.New(slog.NewTextHandler(&logged, nil))})
			c, err := redisstore.NewClient(topo.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			now := time.Now().Truncate(time.Millisecond)
			bad := pausedUntil(t, s, "fpbad", now.Add(-2*time.Minute))
			good := pausedUntil(t, s, "fpgood", now.Add(-time.Minute))
			if err := c.HSet(ctx, s.CallKey(bad.ID), "call", `{"id":`).Err(); err != nil {
				t.Fatal(err)
			}
			due, err := s.Due(ctx, now, 100)
			if err != nil || len(due) != 1 || due[0].ID != good.ID {
				t.Errorf("Due = %d calls, %v; want only the readable call %s", len(due), err, good.ID)
			}
			if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(good.ExpiresAt) {
				t.Errorf("NextExpiry = %v, %v; want the readable call's %v", next, err, good.ExpiresAt)
			}
			if pending, err := s.Pending(ctx, store.Filter{}); err != nil || len(pending) != 1 || pending[0].ID != good.ID {
				t.Errorf("Pending = %d calls, %v; want only the readable call", len(pending), err)
			}
			if !strings.Contains(logged.String(), bad.ID) {
				t.Errorf("the log names no unreadable call %s:\n%s", bad.ID, logged.String())
			}
			// Left in the index: skipped again, not dropped.
			if due, _ := s.Due(ctx, now, 100); len(due) != 1 || strings.Count(logged.String(), bad.ID) < 2 {
				t.Errorf("the unreadable call was not skipped again at the next scan")
			}
		})
	}
}
