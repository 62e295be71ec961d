package boltstore_test

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
)

// A file written before the pending-call indexes existed (modelled by
// deleting them and their version) gets them at Open: Pending, Due and
// NextExpiry list its pending calls, and a decided call stays out.
func TestOpenBuildsPendingIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := t.Context()
	s, err := boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	now := time.Now()
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1", Requester: "U_REQ", CreatedAt: now.Add(-time.Hour)}
	var calls []store.Call
	for i := range 3 {
		calls = append(calls, store.Call{
			ID: store.CallID(r.ID, i), Fingerprint: "fp", Approvers: []string{"U_APP"},
			CreatedAt: r.CreatedAt.Add(time.Duration(i) * time.Second),
			ExpiresAt: now.Add(time.Duration(i)*time.Hour - 30*time.Minute), // the first is due
		})
	}
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if _, _, err := s.Decide(ctx, calls[2].ID, "fp", store.Decision{Kind: "approve", Decider: "U_APP"}); err != nil {
		t.Fatalf("Decide(%s): %v", calls[2].ID, err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatalf("bolt.Open(%s): %v", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"pending-by-expiry", "pending-by-created", "pending-by-field", "meta"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("delete the indexes: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = boltstore.Open(path, boltstore.Options{})
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	defer s.Close()
	want := []string{calls[0].ID, calls[1].ID}
	for _, f := range []store.Filter{{}, {Conversation: r.Conversation}, {Requester: r.Requester}, {Approver: "U_APP"}} {
		got, err := s.Pending(ctx, f)
		if err != nil {
			t.Fatalf("Pending(%+v): %v", f, err)
		}
		if ids := ids(got); !slices.Equal(ids, want) {
			t.Errorf("Pending(%+v) after rebuilding the indexes = %v, want %v", f, ids, want)
		}
	}
	if due, err := s.Due(ctx, now, 0); err != nil || !slices.Equal(ids(due), want[:1]) {
		t.Errorf("Due after rebuilding the indexes = %v, %v; want %v", ids(due), err, want[:1])
	}
	if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(calls[0].ExpiresAt.Truncate(time.Microsecond)) {
		t.Errorf("NextExpiry after rebuilding the indexes = %v, %v; want %v", next, err, calls[0].ExpiresAt)
	}
}

func ids(cs []store.Call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}
