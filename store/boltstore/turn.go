package boltstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/internal/newrun"
)

// BeginTurn is one transaction: see storetest.Store for the contract.
func (s *Store) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	if err := ctx.Err(); err != nil {
		return store.Begun{}, err
	}
	if ttl <= 0 {
		return store.Begun{}, fmt.Errorf("begin turn of %s: ttl %v is not positive", conversation, ttl)
	}
	var b store.Begun
	err := s.commits.update(func(tx *bolt.Tx) (err error) {
		b, err = beginTurn(tx, conversation, owner, ttl, kinds)
		return err
	})
	if err != nil {
		return store.Begun{}, fmt.Errorf("begin turn of %s: %w", conversation, err)
	}
	return b, nil
}

// beginTurn takes the lease on the conversation's turns for owner and, if
// it got it, reads what BeginTurn returns. It reads before it writes: a
// lease, conversation or inbox record it cannot read fails it with
// errUnreadable having written nothing, so that AcceptBegin can keep the
// message it recorded in the same transaction.
func beginTurn(tx *bolt.Tx, conversation, owner string, ttl time.Duration, kinds []string) (store.Begun, error) {
	key, now := store.TurnLease(conversation), time.Now()
	leases := tx.Bucket(bucketLeases)
	var l leaseRecord
	held, err := get(leases, key, &l)
	if err != nil {
		return store.Begun{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if held && l.Owner != owner && l.Until.After(now) {
		return store.Begun{}, nil
	}
	b := store.Begun{Acquired: true}
	var conv convRecord
	if b.Found, err = get(tx.Bucket(bucketConvs), conversation, &conv); err != nil {
		return store.Begun{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	b.Conversation = conv.Conversation
	var inbox inboxRecord
	if _, err := get(tx.Bucket(bucketInbox), conversation, &inbox); err != nil {
		return store.Begun{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	b.Inbox = inbox.Messages
	if recs, err := recordsOf(tx, kinds); err == nil { // nil if they cannot be read
		b.Records, b.RecordsVersion = recs, recordsVersion(tx)
	}
	if err := put(leases, key, leaseRecord{Owner: owner, Until: now.Add(ttl)}); err != nil {
		return store.Begun{}, err
	}
	return b, nil
}

// CommitTurn is one transaction: see storetest.Store for the contract.
func (s *Store) CommitTurn(ctx context.Context, c store.Commit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	var run store.Run
	var calls []store.Call
	if c.Run != nil {
		var err error
		if run, calls, err = newrun.Prepare(*c.Run, c.Calls, now); err != nil {
			return fmt.Errorf("commit turn of %s: %w", c.Key, err)
		}
	}
	if err := newrun.CheckNotes(calls, c.Notes); err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	err := s.commits.update(func(tx *bolt.Tx) error {
		if c.Holder != "" {
			// The lease is judged when the write runs, not when it was
			// queued behind a group's commit.
			if err := checkHolder(tx, store.TurnLease(c.Key), c.Holder, time.Now()); err != nil {
				return err
			}
		}
		if c.Run != nil {
			if err := s.createRun(tx, run, calls, now); err != nil {
				return err
			}
			for id, note := range c.Notes {
				if len(note) == 0 {
					continue
				}
				if err := tx.Bucket(bucketNotes).Put([]byte(id), slices.Clone(note)); err != nil {
					return err
				}
			}
		}
		if c.Conversation != nil {
			conv := *c.Conversation
			conv.Key = c.Key
			if conv.UpdatedAt.IsZero() {
				conv.UpdatedAt = now
			}
			if err := s.saveConversation(tx, conv, now); err != nil {
				return err
			}
		}
		if c.Finish != "" {
			if err := s.finishRun(tx, c.Finish, now); err != nil && !errors.Is(err, store.ErrNotFound) {
				return err
			}
		}
		for _, e := range c.Audit {
			if err := s.audit(tx, e); err != nil {
				return err
			}
		}
		if c.Answer {
			if err := answerInbox(tx, c.Key, c.AnswerUpTo); err != nil {
				return err
			}
		}
		if c.Release != "" {
			return releaseLease(tx, store.TurnLease(c.Key), c.Release)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	return nil
}

// checkHolder fails with store.ErrNotHolder unless holder holds the lease
// on key: another owner holds it, or nobody does (the holder's ran out, and
// whoever took the conversation over since may have finished with it).
func checkHolder(tx *bolt.Tx, key, holder string, now time.Time) error {
	var rec leaseRecord
	ok, err := get(tx.Bucket(bucketLeases), key, &rec)
	if err != nil {
		return err
	}
	if !ok || rec.Owner != holder || !rec.Until.After(now) {
		return store.ErrNotHolder
	}
	return nil
}
