package boltstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// The pending-call indexes. A pending call of an unfinished run (a key of
// bucketPending) has one entry in bucketByExpiry, one in bucketByCreated
// and one in bucketByField for its conversation, each of its requesters
// (store.Call.RequestedBy) and each of its approvers (store.AnyApprover
// when it has none), so that Due, NextExpiry and Pending read the calls
// they list and no others. The entries are written and deleted in the
// transactions that add a call to bucketPending or take it out
// (listPending, unlistPending); a file written before they existed, or
// with another layout of them (indexVersion), gets them at Open
// (ensureIndexes).
var (
	bucketByExpiry  = []byte("pending-by-expiry")  // ExpiresAt (Unix ns, big endian) + call id -> nothing
	bucketByCreated = []byte("pending-by-created") // CreatedAt (Unix ns, big endian) + call id -> nothing
	bucketByField   = []byte("pending-by-field")   // fieldPrefix + CreatedAt + call id -> nothing
	bucketMeta      = []byte("meta")               // name -> version (big endian)
)

// indexVersion is the layout of the pending-call indexes; a file whose
// meta records another (or none) has them rebuilt at Open. Version 1
// listed a call under its Requester only; 2 under each of its requesters.
const indexVersion = 2

var metaIndexVersion = []byte("pending-index-version")

// Field kinds of bucketByField.
const (
	fieldConversation = 'c'
	fieldRequester    = 'r'
	fieldApprover     = 'a'
)

// fieldPrefix is the bucketByField prefix of the calls whose field kind
// has value v: the kind, the length of v and v, so that no value's prefix
// is a prefix of another's.
func fieldPrefix(kind byte, v string) []byte {
	b := binary.AppendUvarint([]byte{kind}, uint64(len(v)))
	return append(b, v...)
}

// indexEntry is one key of one index.
type indexEntry struct {
	bucket []byte
	key    []byte
}

// indexEntries returns the index entries of a pending call.
func indexEntries(c store.Call) []indexEntry {
	id := []byte(c.ID)
	created := append(encodeTime(c.CreatedAt), id...)
	out := []indexEntry{
		{bucketByExpiry, append(encodeTime(c.ExpiresAt), id...)},
		{bucketByCreated, created},
	}
	field := func(kind byte, v string) {
		out = append(out, indexEntry{bucketByField, append(fieldPrefix(kind, v), created...)})
	}
	if c.Conversation != "" {
		field(fieldConversation, c.Conversation)
	}
	for _, r := range c.RequestedBy() {
		field(fieldRequester, r)
	}
	if len(c.Approvers) == 0 {
		field(fieldApprover, store.AnyApprover)
	}
	for _, a := range c.Approvers {
		field(fieldApprover, a)
	}
	return out
}

// index puts the index entries of a pending call.
func index(tx *bolt.Tx, c store.Call) error {
	for _, e := range indexEntries(c) {
		if err := tx.Bucket(e.bucket).Put(e.key, nil); err != nil {
			return err
		}
	}
	return nil
}

// listPending marks a new call pending: it lists the call in bucketPending,
// in the reminder index if it has a reminder, and in the pending-call
// indexes.
func listPending(tx *bolt.Tx, c store.Call) error {
	if err := tx.Bucket(bucketPending).Put([]byte(c.ID), nil); err != nil {
		return err
	}
	if !c.RemindAt.IsZero() {
		if err := tx.Bucket(bucketRemind).Put(remindKey(c.RemindAt, c.ID), nil); err != nil {
			return err
		}
	}
	return index(tx, c)
}

// unlistPending takes the stored call out of bucketPending, the reminder
// index and the pending-call indexes, wherever it is listed. It reads the
// call as stored, so it comes before the transaction stores the call's
// new state. A call it cannot read (a damaged record) is taken out of
// bucketPending alone, with errUnreadable: its other entries cannot be
// found without it, every listing passes over a call that is not in
// bucketPending, and prune deletes them.
func unlistPending(tx *bolt.Tx, callID string) error {
	if err := tx.Bucket(bucketPending).Delete([]byte(callID)); err != nil {
		return err
	}
	var c store.Call
	ok, err := get(tx.Bucket(bucketCalls), callID, &c)
	if err != nil {
		return fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if !ok {
		return nil
	}
	if !c.RemindAt.IsZero() {
		if err := tx.Bucket(bucketRemind).Delete(remindKey(c.RemindAt, callID)); err != nil {
			return err
		}
	}
	for _, e := range indexEntries(c) {
		if err := tx.Bucket(e.bucket).Delete(e.key); err != nil {
			return err
		}
	}
	return nil
}

// indexedCall returns the id of the call that the key k of an index lists:
// bucketByField, bucketByExpiry, bucketByCreated or bucketRemind, whose
// keys end with a time and the id. False for a key of no such layout,
// which no listing reads.
func indexedCall(bucket, k []byte) ([]byte, bool) {
	if bytes.Equal(bucket, bucketByField) {
		// The prefix: the field's kind, the length of its value and the
		// value (see fieldPrefix).
		if len(k) == 0 {
			return nil, false
		}
		n, w := binary.Uvarint(k[1:])
		if w <= 0 || n > uint64(len(k)-1-w) {
			return nil, false
		}
		k = k[1+w+int(n):]
	}
	if len(k) <= 8 {
		return nil, false
	}
	return k[8:], true
}

// moveExpiry moves the expiry index's entry of the pending call id from
// was to at.
func moveExpiry(tx *bolt.Tx, id string, was, at time.Time) error {
	b := tx.Bucket(bucketByExpiry)
	if err := b.Delete(append(encodeTime(was), id...)); err != nil {
		return err
	}
	return b.Put(append(encodeTime(at), id...), nil)
}

// ensureIndexes creates the pending-call indexes, and builds them from
// the pending calls when the file's meta does not record indexVersion, or
// when rebuild is set (a version that knows no indexes paused calls since
// they were built).
func ensureIndexes(tx *bolt.Tx, rebuild bool) error {
	meta, err := tx.CreateBucketIfNotExists(bucketMeta)
	if err != nil {
		return err
	}
	if v := meta.Get(metaIndexVersion); !rebuild && len(v) == 8 && binary.BigEndian.Uint64(v) == indexVersion {
		return nil
	}
	for _, b := range [][]byte{bucketByExpiry, bucketByCreated, bucketByField} {
		if tx.Bucket(b) != nil {
			if err := tx.DeleteBucket(b); err != nil {
				return err
			}
		}
		if _, err := tx.CreateBucket(b); err != nil {
			return err
		}
	}
	calls := tx.Bucket(bucketCalls)
	err = tx.Bucket(bucketPending).ForEach(func(k, _ []byte) error {
		var c store.Call
		// A call that cannot be read (a damaged record) is left out of
		// the indexes, which every listing reads, as a listing passes it
		// over; failing here would keep the store from opening.
		if ok, err := get(calls, string(k), &c); err != nil || !ok {
			return nil
		}
		return index(tx, c)
	})
	if err != nil {
		return fmt.Errorf("index pending calls: %w", err)
	}
	return meta.Put(metaIndexVersion, binary.BigEndian.AppendUint64(nil, indexVersion))
}

// pendingIndex returns the index and prefix that list the calls f
// selects (among others when f has several fields), in CreatedAt order.
func pendingIndex(f store.Filter) (bucket, prefix []byte) {
	switch {
	case f.Conversation != "":
		return bucketByField, fieldPrefix(fieldConversation, f.Conversation)
	case f.Requester != "":
		return bucketByField, fieldPrefix(fieldRequester, f.Requester)
	case f.Approver != "":
		return bucketByField, fieldPrefix(fieldApprover, f.Approver)
	}
	return bucketByCreated, nil
}

// scanIndex calls visit with each pending call listed in bucket under
// prefix, in key order, with the time its key holds, until visit returns
// true.
func scanIndex(tx *bolt.Tx, bucket, prefix []byte, visit func(at time.Time, c store.Call) (enough bool)) error {
	calls, pending := tx.Bucket(bucketCalls), tx.Bucket(bucketPending)
	cur := tx.Bucket(bucket).Cursor()
	for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
		rest := k[len(prefix):]
		if len(rest) <= 8 {
			continue
		}
		id := string(rest[8:])
		if pending.Get([]byte(id)) == nil {
			continue
		}
		var c store.Call
		// A call that cannot be read (a damaged record) is passed over:
		// the listing goes on with the others.
		ok, err := get(calls, id, &c)
		if err == nil && ok && visit(decodeTime(rest[:8]), c) {
			return nil
		}
	}
	return nil
}
