package boltstore_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/storetest"
)

var _ storetest.Store = (*boltstore.Store)(nil)

func open(t *testing.T) (storetest.Store, func() storetest.Store) {
	path := filepath.Join(t.TempDir(), "data", "toolgate.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	reopen := func() storetest.Store {
		if err := s.Close(); err != nil {
			t.Fatalf("Close before reopening: %v", err)
		}
		s, err = boltstore.Open(path, boltstore.Options{})
		if err != nil {
			t.Fatalf("reopen %s: %v", path, err)
		}
		return s
	}
	return s, reopen
}

func TestConformance(t *testing.T) {
	storetest.Run(t, open)
}

func TestOpenLockedFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer s.Close()
	s2, err := boltstore.Open(path, boltstore.Options{LockTimeout: 100 * time.Millisecond})
	if err == nil {
		s2.Close()
		t.Fatalf("second Open(%s) of an open file succeeded, want an error", path)
	}
	if !strings.Contains(err.Error(), "locked") {
		t.Errorf("second Open(%s) error = %q, want it to say the file is locked", path, err)
	}
}

func TestPruneDeletesExpiredRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := boltstore.Open(path, boltstore.Options{Retention: time.Millisecond, PruneInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	defer s.Close()
	ctx := t.Context()
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1"}
	c := store.Call{ID: store.CallID(r.ID, 0), Fingerprint: "fp", ExpiresAt: time.Now().Add(200 * time.Millisecond)}
	if err := s.CreateRun(ctx, r, []store.Call{c}); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if err := s.PutCallNote(ctx, c.ID, []byte(`{"refs":[]}`)); err != nil {
		t.Fatalf("PutCallNote: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := s.GetCall(ctx, c.ID)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GetCall(%s) of a run past its retention = %v, want ErrNotFound within 5s", c.ID, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := s.LoadRun(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(%s) after pruning: error = %v, want ErrNotFound", r.ID, err)
	}
	if due, err := s.Due(ctx, time.Now(), 0); err != nil || len(due) != 0 {
		t.Errorf("Due after pruning = %v, %v; want none", due, err)
	}
	// The call's note went with it: a run made again with the same id
	// starts with none.
	c.ExpiresAt = time.Now().Add(time.Hour)
	if err := s.CreateRun(ctx, r, []store.Call{c}); err != nil {
		t.Fatalf("CreateRun again: %v", err)
	}
	if note, err := s.CallNote(ctx, c.ID); err != nil || note != nil {
		t.Errorf("CallNote(%s) of the run made again = %q, %v; want nil, nil", c.ID, note, err)
	}
}

// Audit entries past the retention are deleted, not only hidden: a store
// told to keep them longer no longer finds them.
func TestAuditRetentionTrims(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := t.Context()
	long := boltstore.Options{AuditRetention: 1000 * 24 * time.Hour}
	reopen := func(opts boltstore.Options) *boltstore.Store {
		t.Helper()
		s, err := boltstore.Open(path, opts)
		if err != nil {
			t.Fatalf("Open(%s): %v", path, err)
		}
		return s
	}
	s := reopen(long)
	if err := s.Audit(ctx, store.AuditEntry{At: time.Now().Add(-100 * 24 * time.Hour), Actor: "U1", Action: "decide", CallID: "old"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen(boltstore.Options{AuditRetention: 90 * 24 * time.Hour})
	if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "decide", CallID: "new"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = reopen(long)
	defer s.Close()
	log, err := s.AuditLog(ctx, 0)
	if err != nil || len(log) != 1 || log[0].CallID != "new" {
		t.Errorf("AuditLog after trimming = %+v, %v; want only the new entry", log, err)
	}
}

// benchParallel runs write b.N times, with i = 1, 2, ..., from 64
// goroutines per GOMAXPROCS at once, as in a burst of events, and reports
// the mean time a caller waits for its write (wait-ns/op; ns/op is the
// time per write of the whole group).
func benchParallel(b *testing.B, write func(s *boltstore.Store, i int64) error) {
	path := filepath.Join(b.TempDir(), "toolgate.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		b.Fatalf("Open(%s): %v", path, err)
	}
	defer s.Close()
	var n, waited atomic.Int64
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			start := time.Now()
			if err := write(s, i); err != nil {
				b.Error(err)
				return
			}
			waited.Add(int64(time.Since(start)))
		}
	})
	b.ReportMetric(float64(waited.Load())/float64(b.N), "wait-ns/op")
}

// BenchmarkAcceptMessage is one caller at a time: the latency of an accept
// when the bot is idle.
func BenchmarkAcceptMessage(b *testing.B) {
	path := filepath.Join(b.TempDir(), "toolgate.db")
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		b.Fatalf("Open(%s): %v", path, err)
	}
	defer s.Close()
	ctx := b.Context()
	for i := 0; b.Loop(); i++ {
		m := store.Inbound{EventID: fmt.Sprint("Ev", i), MsgID: fmt.Sprint("M", i), User: "U1", Channel: "C1", Text: "hello"}
		if _, got, err := s.AcceptMessage(ctx, fmt.Sprint("C1:", i), m, false); err != nil || got != store.Accepted {
			b.Fatalf("AcceptMessage %d = %q, %v; want accepted", i, got, err)
		}
	}
}

// BenchmarkAcceptMessageParallel accepts messages in conversations of
// their own, many at once.
func BenchmarkAcceptMessageParallel(b *testing.B) {
	benchParallel(b, func(s *boltstore.Store, i int64) error {
		m := store.Inbound{EventID: fmt.Sprint("Ev", i), MsgID: fmt.Sprint("M", i), User: "U1", Channel: "C1", Text: "hello"}
		_, got, err := s.AcceptMessage(b.Context(), fmt.Sprint("C1:", i), m, false)
		if err == nil && got != store.Accepted {
			err = fmt.Errorf("AcceptMessage %d = %q, want accepted", i, got)
		}
		return err
	})
}

// BenchmarkSaveConversationParallel saves conversations, many at once.
func BenchmarkSaveConversationParallel(b *testing.B) {
	benchParallel(b, func(s *boltstore.Store, i int64) error {
		return s.SaveConversation(b.Context(), store.Conversation{Key: fmt.Sprint("C1:", i), State: []byte(`{"messages":[]}`)})
	})
}

// Open prunes what has lapsed: a conversation, its inbox and its listing as
// unanswered, and a finished run, and keeps what has not.
func TestOpenPrunesLapsed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := t.Context()
	short := boltstore.Options{ConversationTTL: time.Nanosecond, Retention: time.Nanosecond}
	s, err := boltstore.Open(path, short)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1"}
	if err := s.CreateRun(ctx, r, []store.Call{{ID: store.CallID(r.ID, 0), Fingerprint: "fp", ExpiresAt: time.Now().Add(time.Hour)}}); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun: %v", err)
	}
	if _, _, err := s.AcceptMessage(ctx, "C1:1.1", store.Inbound{EventID: "Ev1", User: "U1", Channel: "C1", Text: "hi"}, false); err != nil {
		t.Fatalf("AcceptMessage: %v", err)
	}
	s.Close()
	s, err = boltstore.Open(path, short)
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	defer func() { s.Close() }()
	if _, err := s.LoadConversation(ctx, "C1:1.1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadConversation of a lapsed conversation after Open: error = %v, want ErrNotFound", err)
	}
	if _, _, err := s.LoadRun(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun of a finished run past its retention after Open: error = %v, want ErrNotFound", err)
	}
	if in, err := s.Inbox(ctx, "C1:1.1"); err != nil || len(in) != 0 {
		t.Errorf("Inbox of a lapsed conversation after Open = %v, %v; want empty", in, err)
	}
	if un, err := s.Unanswered(ctx, time.Now(), 0, 0); err != nil || len(un) != 0 {
		t.Errorf("Unanswered after Open = %v, %v; want none", un, err)
	}
	s.Close()
	// Kept for a day from now: still there after the next Open.
	long := boltstore.Options{ConversationTTL: 24 * time.Hour, Retention: 24 * time.Hour}
	s, err = boltstore.Open(path, long)
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	if err := s.SaveConversation(ctx, store.Conversation{Key: "C2:1.1"}); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	if _, _, err := s.AcceptMessage(ctx, "C2:1.1", store.Inbound{EventID: "Ev2", User: "U1", Channel: "C2", Text: "hi"}, false); err != nil {
		t.Fatalf("AcceptMessage: %v", err)
	}
	s.Close()
	s, err = boltstore.Open(path, long)
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	if _, err := s.LoadConversation(ctx, "C2:1.1"); err != nil {
		t.Errorf("LoadConversation of a live conversation after Open: %v", err)
	}
	if in, err := s.Inbox(ctx, "C2:1.1"); err != nil || len(in) != 1 {
		t.Errorf("Inbox of a live conversation after Open = %v, %v; want its message", in, err)
	}
	if un, err := s.Unanswered(ctx, time.Now(), 0, 0); err != nil || !slices.Equal(un, []string{"C2:1.1"}) {
		t.Errorf("Unanswered after Open = %v, %v; want [C2:1.1]", un, err)
	}
}
