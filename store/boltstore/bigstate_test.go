package boltstore

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// pausedWith creates n paused runs of one call each, with a state of
// about size bytes, and returns them.
func pausedWith(tb testing.TB, s *Store, n, size int) []store.Run {
	tb.Helper()
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", size) + `"}`)
	now := time.Now()
	out := make([]store.Run, n)
	for i := range out {
		r := store.Run{ID: store.NewRunID(), Conversation: "T1/C1/" + store.NewRunID(), Requester: "U1", Channel: "C1", State: state}
		c := store.Call{ID: store.CallID(r.ID, 0), Tool: "http_get", Args: json.RawMessage(`{}`), Fingerprint: "fp", ExpiresAt: now.Add(time.Hour)}
		if err := s.CreateRun(tb.Context(), r, []store.Call{c}); err != nil {
			tb.Fatal(err)
		}
		out[i] = r
	}
	return out
}

// BenchmarkDecideResumeBigState is the store's part of a decision on a
// run with 1 KiB and 256 KiB of history and of its resume: the decision that begins
// the resume, the mark of the call as started, its result, and the run
// finished.
func BenchmarkDecideResumeBigState(b *testing.B) {
	for _, size := range []int{1 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("state=%dKiB", size>>10), func(b *testing.B) { benchmarkDecideResume(b, size) })
	}
}

func benchmarkDecideResume(b *testing.B, size int) {
	s, err := Open(filepath.Join(b.TempDir(), "toolgate.db"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	runs := pausedWith(b, s, b.N, size)
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		r := runs[i]
		id := store.CallID(r.ID, 0)
		d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}
		_, complete, rs, err := s.DecideBegin(ctx, id, "fp", d, store.Effects{}, store.ResumeBegin{
			Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "o", TTL: time.Minute, Start: []string{"approve"}})
		if err != nil || !complete || !rs.Claimed || len(rs.Run.State) < size {
			b.Fatalf("DecideBegin = complete %v, claimed %v, %d bytes of state, %v", complete, rs.Claimed, len(rs.Run.State), err)
		}
		if err := s.SaveResult(ctx, id, []byte(`{"ok":true}`), store.AuditEntry{}); err != nil {
			b.Fatal(err)
		}
		if err := s.FinishRun(ctx, r.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// recordSizes returns the size of run runID's record and of its state as
// the file holds them.
func recordSizes(t *testing.T, s *Store, runID string) (record, state int) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		record, state = len(tx.Bucket(bucketRuns).Get([]byte(runID))), len(tx.Bucket(bucketStates).Get([]byte(runID)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return record, state
}

// A run's state (a conversation's history, large) is written once, apart
// from the record that each decision, claim and renewal writes again; the
// run read back, and the resume begun, have it whole.
func TestRunStateIsWrittenOnce(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const size = 64 << 10
	r := pausedWith(t, s, 1, size)[0]
	want := `{"messages":"` + strings.Repeat("x", size) + `"}`
	d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}
	_, _, rs, err := s.DecideBegin(t.Context(), store.CallID(r.ID, 0), "fp", d, store.Effects{}, store.ResumeBegin{
		Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "o", TTL: time.Minute, Start: []string{"approve"}})
	if err != nil || !rs.Claimed || string(rs.Run.State) != want {
		t.Fatalf("DecideBegin: claimed %v, %d bytes of state, %v; want the claim and the whole state", rs.Claimed, len(rs.Run.State), err)
	}
	if ok, err := s.RenewClaim(t.Context(), r.ID, "o", time.Minute); !ok || err != nil {
		t.Fatalf("RenewClaim = %v, %v", ok, err)
	}
	if record, state := recordSizes(t, s, r.ID); record > 2048 || state != len(want) {
		t.Errorf("the run's record is %d bytes and its state %d; want the record small and the state %d bytes apart", record, state, len(want))
	}
	run, _, err := s.LoadRun(t.Context(), r.ID)
	if err != nil || string(run.State) != want {
		t.Errorf("LoadRun: %d bytes of state, %v; want the whole state", len(run.State), err)
	}
	// An earlier version reads the record with the state in it: what it
	// finds there fails to decode as a run's state, so it resumes
	// nothing rather than a run with no history.
	var earlier runRecord
	err = s.db.View(func(tx *bolt.Tx) error { _, err := get(tx.Bucket(bucketRuns), r.ID, &earlier); return err })
	var st struct{ User string }
	if err != nil || json.Unmarshal(earlier.Run.State, &st) == nil {
		t.Errorf("an earlier version would decode the record's state %s (%v) as a run's", earlier.Run.State, err)
	}
}

// A run an earlier version wrote, its state in its record, is read whole,
// and its state moved apart at the record's first write.
func TestRunStateOfAnEarlierVersion(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := pausedWith(t, s, 1, 100)[0]
	want := `{"messages":"` + strings.Repeat("x", 100) + `"}`
	err = s.db.Update(func(tx *bolt.Tx) error {
		var rec runRecord
		if _, err := getRun(tx, r.ID, &rec); err != nil {
			return err
		}
		rec.Run.State = json.RawMessage(want)
		if err := put(tx.Bucket(bucketRuns), r.ID, rec); err != nil {
			return err
		}
		return tx.Bucket(bucketStates).Delete([]byte(r.ID))
	})
	if err != nil {
		t.Fatal(err)
	}
	if run, _, err := s.LoadRun(t.Context(), r.ID); err != nil || string(run.State) != want {
		t.Fatalf("LoadRun of an earlier version's run: state %s, %v", run.State, err)
	}
	decide(t, s, store.CallID(r.ID, 0))
	if record, state := recordSizes(t, s, r.ID); record > 1024 || state != len(want) {
		t.Errorf("after a decision the record is %d bytes and the state %d; want the state moved apart", record, state)
	}
	rs, err := s.BeginResume(t.Context(), r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "o", TTL: time.Minute})
	if err != nil || !rs.Claimed || string(rs.Run.State) != want {
		t.Errorf("BeginResume: claimed %v, state %s, %v", rs.Claimed, rs.Run.State, err)
	}
}

// Prune deletes a run's state with the run, and a state whose run is gone
// (an earlier version, opening the file in between, deletes runs without
// theirs).
func TestPruneDeletesRunStates(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{Retention: time.Millisecond, PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	runs := pausedWith(t, s, 2, 100)
	kept, orphan := runs[0], runs[1]
	err = s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRuns).Delete([]byte(orphan.ID)) })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.prune(time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, bucketStates); !slices.Equal(got, []string{kept.ID}) {
		t.Errorf("states after prune = %v, want only %s's", got, kept.ID)
	}
	if err := s.prune(time.Now().Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, s, bucketStates); len(got) != 0 {
		t.Errorf("states after the runs expired = %v, want none", got)
	}
}
