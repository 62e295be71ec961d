package boltstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// inboxRecord is a conversation's unanswered messages, and the last Seq
// given out (kept while the record lives, so Seqs only grow).
type inboxRecord struct {
	// DeleteAt comes first, for prune (see deleteAtOf).
	DeleteAt time.Time       `json:"delete_at"`
	Seq      int64           `json:"seq"`
	Messages []store.Inbound `json:"messages,omitempty"`
}

// RenewClaim is one transaction: see storetest.Store for the contract.
func (s *Store) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if lease <= 0 {
		return false, fmt.Errorf("renew resume claim of run %s: lease %v is not positive", runID, lease)
	}
	var renewed bool
	err := s.commits.update(func(tx *bolt.Tx) error {
		renewed = false
		var rec runRecord
		ok, err := getRun(tx, runID, &rec)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		now := time.Now()
		if rec.Finished || rec.ClaimOwner != owner || !rec.ClaimUntil.After(now) {
			return nil
		}
		rec.ClaimUntil = now.Add(lease)
		renewed = true
		return putRun(tx, runID, rec)
	})
	if err != nil {
		return false, fmt.Errorf("renew resume claim of run %s: %w", runID, err)
	}
	return renewed, nil
}

// ReleaseClaim is one transaction: see storetest.Store for the contract.
func (s *Store) ReleaseClaim(ctx context.Context, runID, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error {
		var rec runRecord
		ok, err := getRun(tx, runID, &rec)
		if err != nil || !ok || rec.Finished || rec.ClaimOwner != owner || !rec.ClaimUntil.After(time.Now()) {
			return err
		}
		rec.ClaimOwner, rec.ClaimUntil = "", time.Time{}
		return putRun(tx, runID, rec)
	})
	if err != nil {
		return fmt.Errorf("release resume claim of run %s: %w", runID, err)
	}
	return nil
}

func seenInboxKey(conversation, kind, id string) []byte {
	return []byte("inbox\x00" + conversation + "\x00" + kind + "\x00" + id)
}

// AcceptMessage is one transaction (committed with concurrent ones): see
// storetest.Store for the contract.
func (s *Store) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	m, got, _, err := s.accept(ctx, conversation, m, requireKnown, nil)
	return m, got, err
}

// AcceptBegin is AcceptMessage and, if the message was accepted, BeginTurn
// in the same transaction: see storetest.Store for the contract.
func (s *Store) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	if ttl <= 0 {
		return m, "", store.Begun{}, fmt.Errorf("accept message in %s: lease ttl %v is not positive", conversation, ttl)
	}
	return s.accept(ctx, conversation, m, requireKnown, func(tx *bolt.Tx) (store.Begun, error) {
		return beginTurn(tx, conversation, owner, ttl, kinds)
	})
}

// accept records m as AcceptMessage does and, if it was accepted and
// begin is set, runs begin in the same transaction.
func (s *Store) accept(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, begin func(*bolt.Tx) (store.Begun, error)) (store.Inbound, store.Acceptance, store.Begun, error) {
	if err := ctx.Err(); err != nil {
		return m, "", store.Begun{}, err
	}
	now := time.Now()
	if m.At.IsZero() {
		m.At = now
	}
	var got store.Acceptance
	var b store.Begun
	err := s.commits.updateFirst(func(tx *bolt.Tx) error {
		got, b = "", store.Begun{} // the function may run more than once (see committer)
		seen, inbox, unans := tx.Bucket(bucketSeen), tx.Bucket(bucketInbox), tx.Bucket(bucketUnans)
		var rec inboxRecord
		found, err := get(inbox, conversation, &rec)
		if err != nil {
			return err
		}
		firstTime := func(kind, id string) (bool, error) {
			if id == "" {
				return true, nil
			}
			k := seenInboxKey(conversation, kind, id)
			if v := seen.Get(k); v != nil && decodeTime(v).After(now) {
				return false, nil
			}
			return true, seen.Put(k, encodeTime(now.Add(store.DedupeTTL)))
		}
		duplicate := func() error {
			got = store.Duplicate
			if len(rec.Messages) > 0 && unans.Get([]byte(conversation)) == nil {
				return unans.Put([]byte(conversation), encodeTime(m.At))
			}
			return nil
		}
		// A message in a thread the bot is not in records nothing, not
		// even its ids: Slack's next delivery of it, if it was not acked,
		// is not taken for a duplicate.
		if requireKnown && !found && tx.Bucket(bucketConvs).Get([]byte(conversation)) == nil {
			got = store.Unknown
			return nil
		}
		if ok, err := firstTime("event", m.EventID); err != nil || !ok {
			if err != nil {
				return err
			}
			return duplicate()
		}
		if ok, err := firstTime("msg", m.MsgID); err != nil || !ok {
			if err != nil {
				return err
			}
			return duplicate()
		}
		m.Seq = max(rec.Seq+1, now.UnixMicro())
		rec.Seq = m.Seq
		rec.Messages = append(rec.Messages, m)
		rec.DeleteAt = now.Add(s.convTTL)
		if err := put(inbox, conversation, rec); err != nil {
			return err
		}
		got = store.Accepted
		if unans.Get([]byte(conversation)) == nil {
			if err := unans.Put([]byte(conversation), encodeTime(m.At)); err != nil {
				return err
			}
		}
		if begin != nil {
			// A Begun that cannot be read leaves the message recorded,
			// with nothing begun: failing would roll the message back,
			// and every redelivery of it would fail the same way. The
			// caller begins the turn itself.
			if b, err = begin(tx); errors.Is(err, errUnreadable) {
				b, err = store.Begun{}, nil
			}
		}
		return err
	})
	if err != nil {
		return m, "", store.Begun{}, fmt.Errorf("accept message in %s: %w", conversation, err)
	}
	if got != store.Accepted {
		m.Seq = 0
	}
	return m, got, b, nil
}

// Inbox returns the conversation's unanswered messages in Seq order.
func (s *Store) Inbox(ctx context.Context, conversation string) ([]store.Inbound, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var rec inboxRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		_, err := get(tx.Bucket(bucketInbox), conversation, &rec)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read inbox of %s: %w", conversation, err)
	}
	return rec.Messages, nil
}

// AnswerInbox is one transaction: see storetest.Store for the contract.
func (s *Store) AnswerInbox(ctx context.Context, conversation string, upTo int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return answerInbox(tx, conversation, upTo) })
	if err != nil {
		return fmt.Errorf("answer inbox of %s: %w", conversation, err)
	}
	return nil
}

// answerInbox removes the messages up to upTo, and unlists the
// conversation once none is left, unless it is paused on a step that is
// decided and not resumed yet (a decision lists the conversation until
// the resume saves its result).
func answerInbox(tx *bolt.Tx, conversation string, upTo int64) error {
	inbox := tx.Bucket(bucketInbox)
	var rec inboxRecord
	found, err := get(inbox, conversation, &rec)
	if err != nil {
		return err
	}
	if found {
		n := len(rec.Messages)
		rec.Messages = slices.DeleteFunc(rec.Messages, func(m store.Inbound) bool { return m.Seq <= upTo })
		if len(rec.Messages) > 0 {
			if len(rec.Messages) != n {
				return put(inbox, conversation, rec)
			}
			return nil
		}
		if n > 0 {
			if err := put(inbox, conversation, rec); err != nil {
				return err
			}
		}
	}
	if decidedStep(tx, conversation) {
		return nil
	}
	return tx.Bucket(bucketUnans).Delete([]byte(conversation))
}

// decidedStep reports whether the conversation is paused on a run that
// has no call pending and is not finished: its step waits for its resume.
// A conversation or run that cannot be read (a damaged record) waits on
// nothing: no resume could read it (Stalled passes such a run over), and
// failing here would fail every answer of the conversation's turns.
func decidedStep(tx *bolt.Tx, conversation string) bool {
	var conv convRecord
	ok, err := get(tx.Bucket(bucketConvs), conversation, &conv)
	if err != nil || !ok || conv.Conversation.PausedRun == "" {
		return false
	}
	var run runRecord
	ok, err = getRun(tx, conv.Conversation.PausedRun, &run)
	return err == nil && ok && run.Pending == 0 && !run.Finished
}

// MarkUnanswered lists the conversation unless it is listed already.
func (s *Store) MarkUnanswered(ctx context.Context, conversation string, at time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return markUnanswered(tx, conversation, at) })
	if err != nil {
		return fmt.Errorf("list %s as unanswered: %w", conversation, err)
	}
	return nil
}

// markUnanswered lists the conversation unless it is listed already.
func markUnanswered(tx *bolt.Tx, conversation string, at time.Time) error {
	b := tx.Bucket(bucketUnans)
	if b.Get([]byte(conversation)) != nil {
		return nil
	}
	return b.Put([]byte(conversation), encodeTime(at))
}

// Unanswered lists conversations listed at or before the given time,
// oldest first, past the first offset of them.
func (s *Store) Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type listed struct {
		key string
		at  time.Time
	}
	var all []listed
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUnans).ForEach(func(k, v []byte) error {
			if at := decodeTime(v); !at.After(before) {
				all = append(all, listed{string(k), at})
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list unanswered conversations: %w", err)
	}
	slices.SortFunc(all, func(a, b listed) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.key, b.key)) })
	all = all[min(max(offset, 0), len(all)):]
	if limit > 0 && len(all) > limit {
		all = all[:limit]
	}
	out := make([]string, len(all))
	for i, l := range all {
		out[i] = l.key
	}
	return out, nil
}
