package boltstore

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// A run record whose deletion time cannot be read (a damaged file) is
// taken, by the first prune that finds it, for a run that ended then, as
// a damaged conversation is taken for one saved then (see lifeRule): it is
// noted as unreadable, with a warning in the log, and its calls, which
// nothing can decide (a decision reads the run), are no longer listed as
// pending, nor as due to expire, where the expiry sweep would fail on them
// again and again; the records are kept as they are for Retention, for a
// person to look at, and then deleted with the run's calls, state and
// notes.
func TestDamagedRunIsNotedThenDropped(t *testing.T) {
	var logs bytes.Buffer
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{
		Retention: time.Hour, PruneInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	runs := pause(t, s, 2, 2) // their calls expire in an hour
	damaged, whole := runs[0], runs[1]
	for _, id := range damaged.CallIDs {
		if err := s.PutCallNote(ctx, id, []byte("note")); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, s, bucketRuns, damaged.ID)
	expired := time.Now().Add(2 * time.Hour)
	if _, _, err := s.Decide(ctx, damaged.CallIDs[0], "", store.Decision{Kind: "expire", Decider: "system"}); err == nil {
		t.Fatalf("Decide on a call of a damaged run = nil, want the error that makes the expiry sweep fail")
	}

	now := time.Now()
	if err := s.prune(now); err != nil {
		t.Fatalf("prune with a damaged run = %v, want nil", err)
	}
	if v := raw(t, s, bucketRuns, damaged.ID); string(v) != "not json" {
		t.Errorf("damaged run after a prune found it = %q, want it kept as it is", v)
	}
	note := string(unreadableKey(bucketRuns, []byte(damaged.ID)))
	if raw(t, s, bucketUnreadable, note) == nil {
		t.Errorf("a damaged run is not noted as unreadable after a prune found it")
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, damaged.ID) {
		t.Errorf("log after a prune found a damaged run = %q, want a warning naming it", got)
	}
	for _, id := range damaged.CallIDs {
		if raw(t, s, bucketCalls, id) == nil || raw(t, s, bucketNotes, id) == nil {
			t.Errorf("call %s of a damaged run, or its note, deleted before Retention passed", id)
		}
	}
	want := slices.Sorted(slices.Values(whole.CallIDs))
	listed := func(when string) {
		t.Helper()
		due, err := s.Due(ctx, expired, 0)
		if got := slices.Sorted(slices.Values(ids(due))); err != nil || !slices.Equal(got, want) {
			t.Errorf("Due %s = %v, %v; want only the calls of the run that can be read, %v", when, got, err, want)
		}
		pending, err := s.Pending(ctx, store.Filter{})
		if got := slices.Sorted(slices.Values(ids(pending))); err != nil || !slices.Equal(got, want) {
			t.Errorf("Pending %s = %v, %v; want %v", when, got, err, want)
		}
		if got := keys(t, s, bucketPending); !slices.Equal(got, want) {
			t.Errorf("pending calls %s = %v, want %v", when, got, want)
		}
		for _, b := range [][]byte{bucketByExpiry, bucketByCreated, bucketByField, bucketRemind} {
			indexed(t, s, b, func(id string) {
				if !slices.Contains(want, id) {
					t.Errorf("%s lists %s %s", b, id, when)
				}
			})
		}
	}
	listed("after a prune found the damaged run")

	if err := s.prune(now.Add(59 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	if raw(t, s, bucketRuns, damaged.ID) == nil || raw(t, s, bucketUnreadable, note) == nil {
		t.Errorf("damaged run, or its note, deleted before Retention passed since a prune found it")
	}

	if err := s.prune(now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]byte{bucketRuns, bucketStates} {
		if got := keys(t, s, b); !slices.Equal(got, []string{whole.ID}) {
			t.Errorf("%s a Retention after a prune found the damaged run = %q, want only %s", b, got, whole.ID)
		}
	}
	if got := keys(t, s, bucketCalls); !slices.Equal(got, want) {
		t.Errorf("calls a Retention after a prune found the damaged run = %q, want %q", got, want)
	}
	for _, b := range [][]byte{bucketNotes, bucketUnreadable, bucketDecided} {
		if got := keys(t, s, b); len(got) != 0 {
			t.Errorf("%s a Retention after a prune found the damaged run = %q, want none", b, got)
		}
	}
	listed("once the damaged run is deleted")
	// The run that can be read goes on as ever.
	if _, complete, err := s.Decide(context.Background(), whole.CallIDs[0], "fp", store.Decision{Kind: "approve", Decider: "U2"}); err != nil || complete {
		t.Errorf("Decide on a call of the run that can be read = complete %v, %v; want not complete, nil", complete, err)
	}
}

// indexed calls fn with the id of the call each key of the index b lists.
func indexed(tb testing.TB, s *Store, b []byte, fn func(id string)) {
	tb.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(b).ForEach(func(k, _ []byte) error {
			id, ok := indexedCall(b, k)
			if !ok {
				tb.Errorf("%s holds a key that lists no call: %q", b, k)
			}
			fn(string(id))
			return nil
		})
	})
	if err != nil {
		tb.Fatal(err)
	}
}
