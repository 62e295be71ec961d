package boltstore

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/internal/newrun"
)

// pause creates n runs of calls calls each, paused, 1,000 to a transaction.
func pause(tb testing.TB, s *Store, n, calls int) []store.Run {
	tb.Helper()
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", 1500) + `"}`)
	now := time.Now()
	var out []store.Run
	for len(out) < n {
		err := s.db.Update(func(tx *bolt.Tx) error {
			for range min(1000, n-len(out)) {
				r := store.Run{ID: store.NewRunID(), Conversation: "T1/C1/" + store.NewRunID(), Requester: "U1", Channel: "C1", State: state}
				cs := make([]store.Call, calls)
				for i := range cs {
					cs[i] = store.Call{ID: store.CallID(r.ID, i), Tool: "http_get", Args: json.RawMessage(`{}`), Fingerprint: "fp", ExpiresAt: now.Add(time.Hour)}
				}
				r, cs, err := newrun.Prepare(r, cs, now)
				if err != nil {
					return err
				}
				if err := s.createRun(tx, r, cs, now); err != nil {
					return err
				}
				out = append(out, r)
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

func decide(tb testing.TB, s *Store, callID string) {
	tb.Helper()
	d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}
	if _, _, err := s.Decide(tb.Context(), callID, "fp", d); err != nil {
		tb.Fatalf("Decide(%s): %v", callID, err)
	}
}

// keys returns the keys of a bucket, or nil if there is no such bucket.
func keys(tb testing.TB, s *Store, bucket []byte) []string {
	tb.Helper()
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// Stalled reads the runs whose resume is due, not every unfinished run:
// a run is listed once its last pending call is decided and unlisted
// when it finishes, so that a sweep costs the same with any number of
// paused runs.
func TestOnlyDecidedRunsAreListedForStalled(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := pause(t, s, 5, 2)
	paused, half, decided, finished, cut := runs[0], runs[1], runs[2], runs[3], runs[4]
	decide(t, s, half.CallIDs[0])
	for _, r := range []store.Run{decided, finished} {
		decide(t, s, r.CallIDs[0])
		decide(t, s, r.CallIDs[1])
	}
	if err := s.FinishRun(t.Context(), finished.ID); err != nil {
		t.Fatal(err)
	}
	// A run finished with a call pending, whose last call is decided
	// after all, is not listed.
	decide(t, s, cut.CallIDs[0])
	if err := s.FinishRun(t.Context(), cut.ID); err != nil {
		t.Fatal(err)
	}
	decide(t, s, cut.CallIDs[1])
	if got := keys(t, s, bucketDecided); !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("decided runs listed = %v, want only %s (paused %s, half decided %s, finished %s and %s)", got, decided.ID, paused.ID, half.ID, finished.ID, cut.ID)
	}
	if got, err := s.Stalled(t.Context(), 0); err != nil || !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("Stalled = %v, %v; want [%s]", got, err, decided.ID)
	}
}

// A file written by an earlier version lists every unfinished run for
// Stalled; Open keeps the decided ones listed and drops that list.
func TestOpenListsTheDecidedRunsOfAnEarlierFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs := pause(t, s, 3, 1)
	paused, decided, finished := runs[0], runs[1], runs[2]
	decide(t, s, decided.CallIDs[0])
	decide(t, s, finished.CallIDs[0])
	if err := s.FinishRun(t.Context(), finished.ID); err != nil {
		t.Fatal(err)
	}
	// As an earlier version left it: its runs in "active" (a finished run
	// is taken out of it, but one left behind is dropped as well).
	err = s.db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket(bucketDecided); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(bucketDecided); err != nil {
			return err
		}
		active, err := tx.CreateBucket(bucketActive)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if err := active.Put([]byte(r.ID), nil); err != nil {
				return err
			}
		}
		return active.Put([]byte("gone"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := keys(t, s, bucketDecided); !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("decided runs listed after Open = %v, want only %s (paused %s, finished %s)", got, decided.ID, paused.ID, finished.ID)
	}
	err = s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketActive) != nil {
			t.Error("the earlier list of unfinished runs is still there after Open")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Stalled(t.Context(), 0); err != nil || !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("Stalled = %v, %v; want [%s]", got, err, decided.ID)
	}
}

// BenchmarkStalledWithPausedRuns is one stalled-resume sweep with 100,000
// paused runs (1.5 KB of history each) and 10 decided ones.
func BenchmarkStalledWithPausedRuns(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "toolgate.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	pause(b, s, 100000, 1)
	for _, r := range pause(b, s, 10, 1) {
		decide(b, s, r.CallIDs[0])
	}
	b.ReportAllocs()
	for b.Loop() {
		if ids, err := s.Stalled(b.Context(), 100); err != nil || len(ids) != 10 {
			b.Fatalf("Stalled = %d runs, %v; want 10", len(ids), err)
		}
	}
}

// Prune drops the listing of a run that is finished or gone, as an
// earlier version opening the file in between may leave it: that version
// neither lists nor unlists runs here.
func TestPruneDropsListingsOfRunsFinishedOrGone(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := pause(t, s, 2, 1)
	decided, finished := runs[0], runs[1]
	decide(t, s, decided.CallIDs[0])
	decide(t, s, finished.CallIDs[0])
	if err := s.FinishRun(t.Context(), finished.ID); err != nil {
		t.Fatal(err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketDecided)
		if err := b.Put([]byte(finished.ID), nil); err != nil {
			return err
		}
		return b.Put([]byte("gone"), nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.prune(time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, bucketDecided); !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("decided runs listed after prune = %v, want only %s", got, decided.ID)
	}
}

// A run record that cannot be read (a damaged file) stops neither the
// prune, nor the store from opening again, nor the stalled-resume sweep or
// the listings of pending calls: it is kept, and passed over, until its
// deletion time passes if that can be read (its calls are found by their
// numbers, not in the record), or for Retention after a prune found it
// otherwise (see TestDamagedRunIsNotedThenDropped).
func TestDamagedRunIsPassedOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runs := pause(t, s, 3, 1)
	decided, damaged, pending := runs[0], runs[1], runs[2]
	decide(t, s, decided.CallIDs[0])
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRuns)
		if err := b.Put([]byte("garbled"), []byte("not json")); err != nil {
			return err
		}
		// Its deletion time can be read, the rest not.
		if err := b.Put([]byte("torn"), []byte(`{"delete_at":"2000-01-01T00:00:00Z","run":5}`)); err != nil {
			return err
		}
		for _, k := range []string{"garbled", "torn"} {
			if err := tx.Bucket(bucketDecided).Put([]byte(k), nil); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketCalls).Put([]byte(damaged.CallIDs[0]), []byte("not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.prune(time.Now()); err != nil {
		t.Errorf("prune with damaged runs = %v, want nil", err)
	}
	if got := keys(t, s, bucketRuns); slices.Contains(got, "torn") || !slices.Contains(got, "garbled") {
		t.Errorf("runs after prune = %q, want garbled kept and torn, past its deletion time, dropped", got)
	}
	if got, err := s.Stalled(t.Context(), 0); err != nil || !slices.Equal(got, []string{decided.ID}) {
		t.Errorf("Stalled with damaged runs = %v, %v; want [%s]", got, err, decided.ID)
	}
	if got, err := s.Pending(t.Context(), store.Filter{}); err != nil || len(got) != 1 || got[0].ID != pending.CallIDs[0] {
		t.Errorf("Pending with damaged records = %v, %v; want the pending call", got, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatalf("Open a file with damaged runs: %v", err)
	}
	s.Close()
}

// A result sent again as its first sending was is saved already, however
// its JSON is spaced: the record keeps it compacted.
func TestSaveResultSentAgainWithSpaces(t *testing.T) {
	s, _, id := openDecided(t)
	if ok, err := s.BeginExecution(t.Context(), id, ""); err != nil || !ok {
		t.Fatalf("BeginExecution = %v, %v", ok, err)
	}
	result := []byte(`{"content": "done", "is_error": false}`)
	for i := range 2 {
		if err := s.SaveResult(t.Context(), id, result, store.AuditEntry{}); err != nil {
			t.Errorf("SaveResult, sending %d: %v", i+1, err)
		}
	}
	if err := s.SaveResult(t.Context(), id, []byte(`{"content":"other"}`), store.AuditEntry{}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("another result = %v, want ErrConflict", err)
	}
}

// A call stored by an earlier version with the execution attempt its
// CreateRun was given (and not executing) is marked by BeginResume for no
// attempt: BeginExecution asked with that attempt is not told that the
// mark is its own.
func TestBeginResumeMarksACallForNoAttempt(t *testing.T) {
	s, r, id := openDecided(t)
	err := s.db.Update(func(tx *bolt.Tx) error {
		var c store.Call
		if _, err := get(tx.Bucket(bucketCalls), id, &c); err != nil {
			return err
		}
		c.ExecAttempt = "A"
		return put(tx.Bucket(bucketCalls), id, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := s.BeginResume(t.Context(), r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "a", TTL: time.Minute, Start: []string{"approve"}})
	if err != nil || rs.Started != id {
		t.Fatalf("BeginResume = started %q, %v; want %s", rs.Started, err, id)
	}
	if ok, err := s.BeginExecution(t.Context(), id, "A"); err != nil || ok {
		t.Errorf("BeginExecution(%s, A) after BeginResume marked it = %v, %v; want false: attempt A did not mark it", id, ok, err)
	}
}

// openDecided opens a store in a new file with one paused run of one
// call, decided, and returns them; the store is closed at the end of the
// test.
func openDecided(t *testing.T) (*Store, store.Run, string) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := pause(t, s, 1, 1)[0]
	id := r.CallIDs[0]
	decide(t, s, id)
	return s, r, id
}
