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
