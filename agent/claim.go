package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// claim is the resume claim a resume keeps on its run; the resume finds
// it in its context (claimOf).
type claim struct {
	run string
	// owner names the claim in the store.
	owner string
	// confirmed is when the claim was last taken or renewed.
	confirmed confirmation
	lose      context.CancelCauseFunc
	// finishing is set before the write that finishes the run: the claim
	// is no longer needed then, and a renewal refused for a finished run
	// stops renewing without stopping the resume, which may go on to
	// answer messages queued while the run was paused.
	finishing atomic.Bool
}

type claimKey struct{}

// claimOf returns the claim on runID that ctx runs under, or nil.
func claimOf(ctx context.Context, runID string) *claim {
	c, _ := ctx.Value(claimKey{}).(*claim)
	if c == nil || c.run != runID {
		return nil
	}
	return c
}

// keepClaim keeps the resume claim on runID, which owner names, while the resume runs under
// the returned context: it renews the claim every LeaseTTL/3, like the
// conversation's lease, so the claim of a process that died lapses within
// LeaseTTL, until the resume finishes the run (see claim.finishing). If
// the claim is found lost before (it ran out, and another process may
// have claimed the run), or renewing fails until it may have run out, the
// context is cancelled with ErrLeaseLost as its cause and the resume
// stops where it is. stop stops renewing and waits for the renewer; after
// a resume that stopped on a lost lease or claim it also releases the
// claim, so that the takeover of the conversation (listed until the resume
// saves its result) can claim the run at once instead of after LeaseTTL.
func (a *Agent) keepClaim(ctx context.Context, runID, owner string, claimedAt time.Time) (_ context.Context, stop func()) {
	c := &claim{run: runID, owner: owner, confirmed: confirmation{base: claimedAt}}
	work, lost := context.WithCancelCause(context.WithValue(ctx, claimKey{}, c))
	c.lose = lost
	renewCtx, cancel := context.WithCancel(work)
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(renewCtx, wallClock{}, a.cfg.LeaseTTL, claimedAt, a.log, lost, func(ctx context.Context) (bool, error) {
			sent := holdClock()
			ok, err := a.store.RenewClaim(ctx, runID, owner, a.cfg.LeaseTTL)
			if err == nil && ok {
				c.confirmed.confirm(sent)
			}
			if err == nil && !ok && c.finishing.Load() {
				return false, errNothingToRenew
			}
			return ok, err
		}, "resume claim", "run", runID)
	}()
	return work, func() {
		cancel()
		<-done
		if leaseLost(work) {
			rctx, cancelRelease := context.WithTimeout(context.WithoutCancel(work), 5*time.Second)
			defer cancelRelease()
			if err := a.store.ReleaseClaim(rctx, runID, owner); err != nil {
				a.log.Warn("release resume claim; it lapses within the lease TTL", "run", runID, "err", err)
			}
		}
		lost(nil)
	}
}

// confirmClaim checks, before a call marked with the claim runs, that the
// claim on runID that ctx runs under is still this process's. A claim
// confirmed less than LeaseTTL/2 ago is (it lasts LeaseTTL); an older one
// (the process stalled, or renewals failed) is renewed first, since it
// may have lapsed and another process may have claimed the run and found
// the call started. A claim found lost stops the resume (ErrLeaseLost);
// an error otherwise (a context already ended, the store unreachable) is
// returned, and the call does not run.
func (a *Agent) confirmClaim(ctx context.Context, runID string) error {
	if ctx.Err() != nil {
		// ErrLeaseLost when the renewer found the claim lost first.
		return context.Cause(ctx)
	}
	c := claimOf(ctx, runID)
	if c == nil || c.confirmed.age() < a.cfg.LeaseTTL/2 {
		return nil
	}
	sent := holdClock()
	ok, err := a.store.RenewClaim(ctx, runID, c.owner, a.cfg.LeaseTTL)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("renew resume claim: %w", context.Cause(ctx))
	case err != nil:
		return fmt.Errorf("renew resume claim: %w", err)
	case !ok:
		c.lose(ErrLeaseLost)
		return ErrLeaseLost
	}
	c.confirmed.confirm(sent)
	return nil
}
