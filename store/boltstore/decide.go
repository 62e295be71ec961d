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

// DecideAudited is one transaction: the decision and its effects. See
// storetest.Store for the contract. A zero d.At is set to now.
func (s *Store) DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, _, err := s.decide(ctx, callID, fingerprint, d, fx, nil)
	return c, complete, err
}

// DecideBegin is DecideAudited and, when the decision completes its step,
// BeginResume in the same transaction: see storetest.Store for the
// contract.
func (s *Store) DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if r.TTL <= 0 {
		return store.Call{}, false, store.ResumeStart{}, fmt.Errorf("decide call %s: resume ttl %v is not positive", callID, r.TTL)
	}
	return s.decide(ctx, callID, fingerprint, d, fx, &r)
}

// decide is DecideAudited, and with r DecideBegin.
func (s *Store) decide(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r *store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if err := ctx.Err(); err != nil {
		return store.Call{}, false, store.ResumeStart{}, err
	}
	if d.At.IsZero() {
		d.At = time.Now()
	}
	var c store.Call
	var complete bool
	var rs store.ResumeStart
	// The function may run more than once (see committer): it starts afresh.
	err := s.commits.updateFirst(func(tx *bolt.Tx) error {
		c, complete, rs = store.Call{}, false, store.ResumeStart{}
		rec, err := pendingCall(tx, callID, &c)
		if err != nil {
			return err
		}
		// Only a decision that could be made is stale: one on a call
		// unknown or decided is refused as that (with the call as stored,
		// which says who decided), whatever the records, as Redis refuses
		// it.
		if fx.IfRecords != 0 && recordsVersion(tx) != fx.IfRecords {
			c = store.Call{}
			return store.ErrStale
		}
		if fx.HeldAsJudged() && !store.HoldsApprovals(c, fx.IfApprovers, fx.IfEdited) {
			return store.ErrStale
		}
		special := d.Kind == "expire" || d.Kind == "cancel"
		switch {
		case !special && fingerprint != c.Fingerprint:
			return store.ErrFingerprintMismatch
		case d.Kind == "expire" && d.At.Before(c.ExpiresAt):
			return fmt.Errorf("expire before %s: %w", c.ExpiresAt.Format(time.RFC3339), store.ErrConflict)
		case d.Kind != "expire" && !d.At.Before(c.ExpiresAt):
			return store.ErrExpired
		}
		if complete, err = decided(tx, &c, rec, d); err != nil {
			return err
		}
		if err := s.effects(tx, d.At, complete, fx); err != nil || !complete || r == nil {
			return err
		}
		rs, err = beginResumeAfter(tx, c.RunID, *r)
		return err
	})
	if err != nil {
		return c, false, store.ResumeStart{}, fmt.Errorf("decide call %s: %w", callID, err)
	}
	return c, complete, rs, nil
}

// ApproveAudited is one transaction: the approval, the decision it may
// complete, and their effects. See storetest.Store for the contract. A
// zero a.At or d.At is set to now.
func (s *Store) ApproveAudited(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, _, err := s.approve(ctx, callID, fingerprint, a, drop, edit, need, d, fx, nil)
	return c, complete, err
}

// ApproveBegin is ApproveAudited and, when the approval decides the call
// and completes its step, BeginResume in the same transaction: see
// storetest.Store for the contract.
func (s *Store) ApproveBegin(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if r.TTL <= 0 {
		return store.Call{}, false, store.ResumeStart{}, fmt.Errorf("approve call %s: resume ttl %v is not positive", callID, r.TTL)
	}
	return s.approve(ctx, callID, fingerprint, a, drop, edit, need, d, fx, &r)
}

// approve is ApproveAudited, and with r ApproveBegin.
func (s *Store) approve(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r *store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if err := ctx.Err(); err != nil {
		return store.Call{}, false, store.ResumeStart{}, err
	}
	now := time.Now()
	if a.At.IsZero() {
		a.At = now
	}
	if d.At.IsZero() {
		d.At = now
	}
	var c store.Call
	var complete bool
	var rs store.ResumeStart
	// The function may run more than once (see committer): it starts afresh.
	err := s.commits.updateFirst(func(tx *bolt.Tx) error {
		c, complete, rs = store.Call{}, false, store.ResumeStart{}
		fx := fx
		var was time.Time // the expiry an edit moved
		rec, err := pendingCall(tx, callID, &c)
		if err != nil {
			return err
		}
		switch {
		case fingerprint != c.Fingerprint:
			return store.ErrFingerprintMismatch
		case !a.At.Before(c.ExpiresAt):
			return store.ErrExpired
		}
		if fx.IfRecords != 0 && recordsVersion(tx) != fx.IfRecords {
			c = store.Call{}
			return store.ErrStale
		}
		if fx.HeldAsJudged() && !store.HoldsApprovals(c, fx.IfApprovers, fx.IfEdited) {
			return store.ErrStale
		}
		if edit == nil && slices.ContainsFunc(store.Dropped(c.Approvals, drop), func(x store.Approval) bool { return x.Approver == a.Approver }) {
			return store.ErrDuplicateApproval
		}
		before, reminded := c.ExpiresAt, c.RemindAt
		c = store.Counted(c, a, drop, edit)
		if c.ExpiresAt.Before(before) {
			was = before
		}
		if len(c.Approvals) < need {
			if !was.IsZero() {
				if err := moveExpiry(tx, c.ID, was, c.ExpiresAt); err != nil {
					return err
				}
				if err := moveReminder(tx, c.ID, reminded, c.RemindAt); err != nil {
					return err
				}
			}
			if err := put(tx.Bucket(bucketCalls), callID, c); err != nil {
				return err
			}
		} else if complete, err = decided(tx, &c, rec, d); err != nil {
			return err
		}
		if fx.Audit.Action != "" {
			fx.Audit = store.ApprovalAudit(fx.Audit, len(c.Approvals), need)
		}
		if err := s.effects(tx, a.At, complete, fx); err != nil || !complete || r == nil {
			return err
		}
		rs, err = beginResumeAfter(tx, c.RunID, *r)
		return err
	})
	if err != nil {
		return c, false, store.ResumeStart{}, fmt.Errorf("approve call %s: %w", callID, err)
	}
	return c, complete, rs, nil
}

// moveReminder moves the reminder index's entry of the pending call id
// from was to at (zero: none), as an edit that brought its expiry forward
// moved its RemindAt.
func moveReminder(tx *bolt.Tx, id string, was, at time.Time) error {
	if was.Equal(at) {
		return nil
	}
	b := tx.Bucket(bucketRemind)
	if !was.IsZero() {
		if err := b.Delete(remindKey(was, id)); err != nil {
			return err
		}
	}
	if at.IsZero() {
		return nil
	}
	return b.Put(remindKey(at, id), nil)
}

// pendingCall reads a call into c and its run; store.ErrNotFound (with c
// zero) if either is missing, store.ErrAlreadyDecided if the call is not
// pending.
func pendingCall(tx *bolt.Tx, callID string, c *store.Call) (runRecord, error) {
	var rec runRecord
	ok, err := get(tx.Bucket(bucketCalls), callID, c)
	if err != nil {
		return rec, err
	}
	if ok {
		ok, err = getRun(tx, c.RunID, &rec)
		if err != nil {
			return rec, err
		}
	}
	if !ok {
		*c = store.Call{}
		return rec, store.ErrNotFound
	}
	if c.Status != store.Pending {
		return rec, store.ErrAlreadyDecided
	}
	return rec, nil
}

// decided records decision d on the pending call c of the run rec, and
// reports whether it left no call of the run pending.
func decided(tx *bolt.Tx, c *store.Call, rec runRecord, d store.Decision) (bool, error) {
	c.Status = newrun.Outcome(d.Kind)
	c.Decision = &d
	if err := unlistPending(tx, c.ID); err != nil {
		return false, err
	}
	c.RemindAt = time.Time{}
	if err := put(tx.Bucket(bucketCalls), c.ID, *c); err != nil {
		return false, err
	}
	rec.Pending--
	if rec.Pending == 0 && !rec.Finished {
		if err := tx.Bucket(bucketDecided).Put([]byte(c.RunID), nil); err != nil {
			return false, err
		}
	}
	return rec.Pending == 0, putRun(tx, c.RunID, rec)
}

// effects writes the effects of a decision made at at.
func (s *Store) effects(tx *bolt.Tx, at time.Time, complete bool, fx store.Effects) error {
	if e := fx.Audit; e.Action != "" {
		if e.At.IsZero() {
			e.At = at
		}
		raw, err := store.EncodeJSON(e)
		if err != nil {
			return err
		}
		if err := s.appendAudit(tx, raw); err != nil {
			return err
		}
	}
	if fx.Unanswered != "" && complete {
		return markUnanswered(tx, fx.Unanswered, at)
	}
	return nil
}

// BeginResume is one transaction: see storetest.Store for the contract.
func (s *Store) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if err := ctx.Err(); err != nil {
		return store.ResumeStart{}, err
	}
	if r.TTL <= 0 {
		return store.ResumeStart{}, fmt.Errorf("begin resume of run %s: ttl %v is not positive", runID, r.TTL)
	}
	var rs store.ResumeStart
	err := s.commits.update(func(tx *bolt.Tx) (err error) {
		rs, err = beginResume(tx, runID, r)
		return err
	})
	if err != nil {
		return store.ResumeStart{}, fmt.Errorf("begin resume of run %s: %w", runID, err)
	}
	return rs, nil
}

// beginResumeAfter is beginResume after a decision that completed its
// step, in the decision's transaction. A ResumeStart that cannot be read
// comes back zero, with nothing taken and no error: failing would roll
// the decision back, and the click would be refused each time it is
// made. The caller begins the resume itself.
func beginResumeAfter(tx *bolt.Tx, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := beginResume(tx, runID, r)
	if errors.Is(err, errUnreadable) {
		return store.ResumeStart{}, nil
	}
	return rs, err
}

// beginResume is BeginResume in tx. It reads before it writes: a record
// it cannot read (the run, the lease, a call of the run or the
// conversation) fails it with errUnreadable having taken neither the
// lease nor the claim, so that DecideBegin and ApproveBegin can keep the
// decision they recorded in the same transaction.
func beginResume(tx *bolt.Tx, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	conversation, lease, owner, ttl := r.Conversation, r.Lease, r.Owner, r.TTL
	var rs store.ResumeStart
	var rec runRecord
	ok, err := getRun(tx, runID, &rec)
	if err != nil {
		return store.ResumeStart{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	if !ok {
		return rs, store.ErrNotFound
	}
	rs.Run = rec.Run
	rs.Run.State = runState(tx, runID, rec)
	rs.Run.Finished = rec.Finished
	now := time.Now()
	if rec.Finished || rec.Pending > 0 {
		return rs, nil
	}
	// The same attempt, asked again (see store.ResumeBegin.Nonce).
	again := rec.ClaimUntil.After(now)
	if again && (r.Nonce == "" || rec.ClaimNonce != r.Nonce || rec.ClaimOwner != owner) || r.Again && !again {
		return rs, nil
	}
	leases := tx.Bucket(bucketLeases)
	if lease != "" {
		var l leaseRecord
		ok, err := get(leases, lease, &l)
		if err != nil {
			return store.ResumeStart{}, fmt.Errorf("%w: %w", errUnreadable, err)
		}
		if ok && l.Owner != owner && l.Until.After(now) {
			rs.Busy = true
			return rs, nil
		}
	}
	for _, id := range rec.Run.CallIDs {
		var c store.Call
		ok, err := get(tx.Bucket(bucketCalls), id, &c)
		if err != nil {
			return store.ResumeStart{}, fmt.Errorf("%w: %w", errUnreadable, err)
		}
		if !ok {
			return store.ResumeStart{}, fmt.Errorf("%w: call %s: %w", errUnreadable, id, store.ErrNotFound)
		}
		if again && id == rec.ClaimStarted {
			c.Executing = false // as it was before the attempt marked it
		}
		rs.Calls = append(rs.Calls, c)
	}
	var conv convRecord
	if rs.Found, err = get(tx.Bucket(bucketConvs), conversation, &conv); err != nil {
		return store.ResumeStart{}, fmt.Errorf("%w: %w", errUnreadable, err)
	}
	rs.Conversation = conv.Conversation
	rs.Records, _ = recordsOf(tx, r.Kinds) // nil if they cannot be read
	if lease != "" {
		if err := put(leases, lease, leaseRecord{Owner: owner, Until: now.Add(ttl)}); err != nil {
			return rs, err
		}
	}
	rs.Claimed = true
	switch i := store.FirstToStart(rs.Calls, r.Start); {
	case again:
		rs.Started = rec.ClaimStarted
	case i >= 0:
		c := rs.Calls[i]
		// Marked for this attempt, whose nonce alone takes the mark back
		// (see AbandonExecution); an attempt of BeginExecution's is never
		// a resume's nonce.
		c.Executing, c.ExecAttempt = true, r.Nonce
		if err := put(tx.Bucket(bucketCalls), c.ID, c); err != nil {
			return rs, err
		}
		rs.Started = c.ID
	}
	rec.ClaimOwner, rec.ClaimUntil = owner, now.Add(ttl)
	rs.PriorNonce, rs.PriorStarted = rec.ClaimNonce, rec.ClaimStarted
	if again {
		rs.PriorNonce, rs.PriorStarted = rec.ClaimPriorNonce, rec.ClaimPriorStarted
	} else {
		rec.ClaimPriorNonce, rec.ClaimPriorStarted = rec.ClaimNonce, rec.ClaimStarted
		rec.ClaimNonce, rec.ClaimStarted = r.Nonce, rs.Started
	}
	if err := putRun(tx, runID, rec); err != nil {
		return rs, err
	}
	return rs, nil
}

// GetCallWith is one transaction: see storetest.Store for the contract.
func (s *Store) GetCallWith(ctx context.Context, callID string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	if err := ctx.Err(); err != nil {
		return store.Call{}, nil, 0, err
	}
	var c store.Call
	var recs map[string][]store.Record
	var version int64
	err := s.db.View(func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bucketCalls), callID, &c)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		if recs, err = recordsOf(tx, kinds); err != nil {
			recs = nil // they cannot be read: the call stands
			return nil
		}
		version = recordsVersion(tx)
		return nil
	})
	if err != nil {
		return store.Call{}, nil, 0, fmt.Errorf("get call %s: %w", callID, err)
	}
	return c, recs, version, nil
}
