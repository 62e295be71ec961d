package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// The deletion time of a record is read whichever place its field has in
// the record's JSON: first, as records are written now, or after the rest,
// as records written before were.
func TestDeleteAtOf(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 123456789, time.UTC)
	big := json.RawMessage(`{"state":"` + strings.Repeat("x", 1000) + `"}`)
	first, err := json.Marshal(convRecord{Conversation: store.Conversation{Key: "k", State: big}, DeleteAt: at})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), `{"delete_at":`) {
		t.Fatalf("a conversation record is written as %.40s..., want its deletion time first", first)
	}
	last := []byte(`{"conversation":{"key":"k","state":` + string(big) + `},"delete_at":"` + at.Format(time.RFC3339Nano) + `"}`)
	for name, v := range map[string][]byte{"first": first, "last": last} {
		got, err := deleteAtOf(v)
		if err != nil || !got.Equal(at) {
			t.Errorf("deleteAtOf(record with it %s) = %v, %v; want %v", name, got, err, at)
		}
	}
	if _, err := deleteAtOf([]byte(`{"delete_at":`)); err == nil {
		t.Error("deleteAtOf(a broken record) = nil error")
	}
}

// BenchmarkPrune is a prune pass over 500 conversations of 250 KiB of
// state each, none due: the cost of the pass that runs every
// PruneInterval whatever there is to delete.
func BenchmarkPrune(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", 250<<10) + `"}`)
	for i := range 500 {
		if err := s.SaveConversation(b.Context(), store.Conversation{Key: "T1/C1/" + strconv.Itoa(i), State: state}); err != nil {
			b.Fatal(err)
		}
	}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if err := s.prune(now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcceptMessageAfterChurn is a message accepted when the file
// has tens of thousands of free pages, as after months of conversations
// saved and pruned: the cost of a commit where a person waits (a message's
// record before its ack, a decision before its tool runs) once the store
// has aged. It reports the free pages at the end.
func BenchmarkAcceptMessageAfterChurn(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "bench.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	churn(b, s, 30000)
	for i := 0; b.Loop(); i++ {
		m := store.Inbound{EventID: fmt.Sprint("Ev", i), MsgID: fmt.Sprint("M", i), User: "U1", Channel: "C1", Text: "hello"}
		if _, got, err := s.AcceptMessage(ctx, fmt.Sprint("C1:", i), m, false); err != nil || got != store.Accepted {
			b.Fatalf("AcceptMessage %d = %q, %v; want accepted", i, got, err)
		}
	}
	b.ReportMetric(float64(s.db.Stats().FreePageN), "free-pages")
}

// save saves the conversations numbered from to to-1, with 5 KiB of state
// each, to be deleted at deleteAt.
func save(tb testing.TB, s *Store, from, to int, deleteAt time.Time) {
	tb.Helper()
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", 5<<10) + `"}`)
	const batch = 1000
	for i := from; i < to; i += batch {
		err := s.db.Update(func(tx *bolt.Tx) error {
			for j := i; j < min(i+batch, to); j++ {
				c := store.Conversation{Key: "T1/C1/" + strconv.Itoa(j), State: state}
				if err := put(tx.Bucket(bucketConvs), c.Key, convRecord{Conversation: c, DeleteAt: deleteAt}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// churn saves n conversations of 5 KiB of state and prunes them all, so
// the file has many free pages, as after months of use.
func churn(tb testing.TB, s *Store, n int) {
	tb.Helper()
	now := time.Now()
	save(tb, s, 1<<30, 1<<30+n, now.Add(time.Minute))
	if err := s.prune(now.Add(time.Hour)); err != nil {
		tb.Fatal(err)
	}
}

// A commit in a file with many free pages writes what it changed, not the
// list of free pages; the free pages are found again after a restart and
// used before the file grows.
func TestCommitInAnAgedFileWritesLittle(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	churn(t, s, 10000)
	accept := func(s *Store, i int) {
		t.Helper()
		m := store.Inbound{EventID: fmt.Sprint("Ev", i), MsgID: fmt.Sprint("M", i), User: "U1", Channel: "C1", Text: "hello"}
		if _, got, err := s.AcceptMessage(t.Context(), fmt.Sprint("C1:", i), m, false); err != nil || got != store.Accepted {
			t.Fatalf("AcceptMessage %d = %q, %v; want accepted", i, got, err)
		}
	}
	accept(s, 0) // the pruned pages are free once no transaction reads them
	free := s.db.Stats().FreePageN
	if free < 10000 {
		t.Fatalf("%d free pages after the churn, want over 10,000", free)
	}
	pageAlloc := func() int64 { st := s.db.Stats(); return st.TxStats.GetPageAlloc() }
	before := pageAlloc()
	accept(s, 1)
	if wrote := pageAlloc() - before; wrote > 32<<10 {
		t.Errorf("a message's commit in a file with %d free pages wrote %d bytes of pages, want at most 32 KiB", free, wrote)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	size := fileSize(t, path)

	s, err = Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.db.Stats().FreePageN; got < free-100 {
		t.Errorf("%d free pages after a restart, want about the %d before it", got, free)
	}
	churn(t, s, 5000)
	accept(s, 2)
	if got := fileSize(t, path); got != size {
		t.Errorf("the file grew from %d to %d bytes after a restart, with free pages to spare", size, got)
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// BenchmarkOpenAfterChurn opens a file of 100,000 conversations of 5 KiB
// of state and the free pages of 33,000 more, pruned: a start, which finds
// the free pages by a walk of the file (with its pages in the OS's
// cache).
func BenchmarkOpenAfterChurn(b *testing.B) {
	path := filepath.Join(b.TempDir(), "bench.db")
	s, err := Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	save(b, s, 0, 100000, time.Now().Add(24*time.Hour))
	churn(b, s, 33000)
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		s, err := Open(path, Options{PruneInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/(1<<20), "file-MiB")
}

// Audit entries past the retention are deleted by the prune even when
// nothing new is audited: the log is not left holding them until the next
// entry comes.
func TestPruneTrimsTheAuditLog(t *testing.T) {
	const retention = 300 * time.Millisecond
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{AuditRetention: retention, PruneInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Audit(t.Context(), store.AuditEntry{Actor: "U1", Action: "decide", CallID: "old"}); err != nil {
		t.Fatal(err)
	}
	stored := func() int {
		t.Helper()
		n := 0
		if err := s.db.View(func(tx *bolt.Tx) error {
			n = tx.Bucket(bucketAudit).Stats().KeyN
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := stored(); n != 1 {
		t.Fatalf("%d audit entries stored after one Audit, want 1", n)
	}
	// Past the retention, with several prune passes in between.
	deadline := time.Now().Add(retention + 2*time.Second)
	for stored() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := stored(); n != 0 {
		t.Errorf("%d audit entries still stored %v after the retention of %v ran out, with a prune every 50ms; want none", n, 2*time.Second, retention)
	}
}

// A prune with much to delete (after a downtime, or with the retention
// made shorter) deletes it a chunk at a time, each chunk a write of its
// own: a message accepted while the prune runs is committed between two
// chunks, with expired runs still left to delete, instead of waiting for
// the whole prune.
func TestPruneLetsWritesInBetweenItsChunks(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{Retention: time.Millisecond, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 2*pruneChunk + 1
	pause(t, s, n, 1)
	var events []string
	s.afterChunk = func() {
		events = append(events, "chunk")
		if len(events) > 1 {
			return
		}
		// The prune is between its first chunk and the next: a message
		// accepted now is committed before the prune goes on.
		done := make(chan error, 1)
		go func() {
			m := store.Inbound{EventID: "Ev1", MsgID: "M1", User: "U1", Channel: "C1", Text: "hello"}
			_, got, err := s.AcceptMessage(t.Context(), "C1:1", m, false)
			if err == nil && got != store.Accepted {
				err = fmt.Errorf("got %q, want accepted", got)
			}
			done <- err
		}()
		if err := <-done; err != nil {
			t.Errorf("AcceptMessage while the prune runs: %v", err)
		}
		events = append(events, fmt.Sprintf("message accepted with %d runs left", len(keys(t, s, bucketRuns))))
	}
	// The calls expire in an hour: their runs are past their retention in two.
	if err := s.prune(time.Now().Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("message accepted with %d runs left", n-pruneChunk)
	if len(events) < 4 || events[1] != want {
		t.Errorf("prune of %d runs = %q, want a chunk, %q, and the chunks of the rest", n, events, want)
	}
	if got := keys(t, s, bucketRuns); len(got) != 0 {
		t.Errorf("%d runs left after the prune, want none", len(got))
	}
}

// A prune that fails is logged at warn level, on the Logger of the
// Options: the next prune tries again, but someone may need to know why
// the file keeps what has lapsed.
func TestFailedPruneIsLogged(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{PruneInterval: time.Hour, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Every transaction of a closed file fails.
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
	s.prunePass(time.Now())
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, bolterrors.ErrDatabaseNotOpen.Error()) {
		t.Errorf("log of a failed prune = %q, want a warning with its error", got)
	}
}

// A log longer than AuditMax (AUDIT_MAX_ENTRIES lowered since it was
// written) is cut to AuditMax by the prune at Open, in chunks, and not by
// the first audited write after it, in the transaction of a decision a
// person waits on, with every other write queued behind it.
func TestPruneCutsTheAuditLogToAuditMax(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := Open(path, Options{AuditMax: 1 << 30, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30000
	raw, err := store.EncodeJSON(store.AuditEntry{At: time.Now(), Actor: "U1", Action: "decide", Tool: "http_get", CallID: "abcdef0123456789.0", Detail: strings.Repeat("x", 200)})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 10000 {
		err := s.db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketAudit)
			for range 10000 {
				seq, _ := b.NextSequence()
				if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), raw); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{AuditMax: 1000, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stored := func() (k int) {
		_ = s.db.View(func(tx *bolt.Tx) error { k = tx.Bucket(bucketAudit).Stats().KeyN; return nil })
		return k
	}
	if err := s.prune(time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != 1000 {
		t.Errorf("after a prune with AuditMax 1000, %d audit entries are stored", got)
	}
	r := pause(t, s, 1, 1)[0]
	if _, _, err := s.DecideAudited(t.Context(), r.CallIDs[0], "fp", store.Decision{Kind: "approve", Decider: "U2"}, store.Effects{Audit: store.AuditEntry{Actor: "U2", Action: "decide"}}); err != nil {
		t.Fatal(err)
	}
	if got := stored(); got != 1000 {
		t.Errorf("after an audited decision with AuditMax 1000, %d audit entries are stored", got)
	}
}
