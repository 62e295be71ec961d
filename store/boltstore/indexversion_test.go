package boltstore

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// A file whose pending-call indexes were written by version 1, which
// listed a call under its Requester alone, has them rebuilt at Open: a
// call requested by two people is then listed under each of them.
func TestOpenListsEveryRequesterOfAnEarlierIndex(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := t.Context()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	first, second := "U_FIRST", "U_SECOND"
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1", Requester: second, CreatedAt: time.Now()}
	c := store.Call{ID: store.CallID(r.ID, 0), Fingerprint: "fp", Requesters: []string{first, second}, ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.CreateRun(ctx, r, []store.Call{c}); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	// As version 1 left it: no entry for the first requester.
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketByField)
		prefix := fieldPrefix(fieldRequester, first)
		var keys [][]byte
		cur := b.Cursor()
		for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
			keys = append(keys, slices.Clone(k))
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(metaIndexVersion, binary.BigEndian.AppendUint64(nil, 1))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatalf("reopen %s: %v", path, err)
	}
	defer s.Close()
	for _, u := range []string{first, second} {
		got, err := s.Pending(ctx, store.Filter{Requester: u})
		if err != nil {
			t.Fatalf("Pending(requester %s): %v", u, err)
		}
		if ids := ids(got); !slices.Equal(ids, []string{c.ID}) {
			t.Errorf("Pending(requester %s) after Open = %v, want %v", u, ids, []string{c.ID})
		}
	}
}

// A file this version wrote, then used by a version from before the
// pending-call indexes, which pauses a run as it did (runs, active, calls,
// pending; no index entries, the meta untouched), then opened by this
// version again: that version's pending call is listed by Pending, Due and
// NextExpiry, or it would never expire.
func TestCallPausedByAVersionBeforeTheIndexesIsListedAfterwards(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	ctx := t.Context()
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Microsecond)
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1", Requester: "U_REQ", CreatedAt: now, State: []byte(`{"m":1}`)}
	c := store.Call{
		ID: store.CallID(r.ID, 0), RunID: r.ID, Fingerprint: "fp", Conversation: r.Conversation, Requester: r.Requester,
		Status: store.Pending, CreatedAt: now, ExpiresAt: now.Add(time.Minute),
	}
	r.CallIDs, r.ExpiresAt = []string{c.ID}, c.ExpiresAt
	err = db.Update(func(tx *bolt.Tx) error {
		active, err := tx.CreateBucketIfNotExists(bucketActive)
		if err != nil {
			return err
		}
		if err := put(tx.Bucket(bucketRuns), r.ID, runRecord{Run: r, Pending: 1, DeleteAt: r.ExpiresAt.Add(DefaultRetention)}); err != nil {
			return err
		}
		if err := active.Put([]byte(r.ID), nil); err != nil {
			return err
		}
		if err := put(tx.Bucket(bucketCalls), c.ID, c); err != nil {
			return err
		}
		if err := tx.Bucket(bucketPending).Put([]byte(c.ID), nil); err != nil {
			return err
		}
		conv := convRecord{Conversation: store.Conversation{Key: r.Conversation, PausedRun: r.ID}, DeleteAt: now.Add(DefaultConversationTTL)}
		return put(tx.Bucket(bucketConvs), r.Conversation, conv)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.Pending(ctx, store.Filter{}); err != nil || len(got) != 1 {
		t.Errorf("Pending = %d calls, %v; want the earlier version's call", len(got), err)
	}
	if got, err := s.Pending(ctx, store.Filter{Conversation: r.Conversation}); err != nil || len(got) != 1 {
		t.Errorf("Pending of its conversation = %d calls, %v; want 1", len(got), err)
	}
	if got, err := s.Due(ctx, now.Add(time.Hour), 0); err != nil || len(got) != 1 {
		t.Errorf("Due an hour past its expiry = %d calls, %v; want the earlier version's call", len(got), err)
	}
	if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(c.ExpiresAt) {
		t.Errorf("NextExpiry = %v, %v; want %v", next, err, c.ExpiresAt)
	}
}
