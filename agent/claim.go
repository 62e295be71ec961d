package agent

import (
	"context"
	"sync/atomic"
	"time"
)

// claim is the resume claim a resume keeps on its run; the resume finds
// it in its context (claimOf).
type claim struct {
	run string
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

// keepClaim keeps the resume claim on runID while the resume runs under
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
func (a *Agent) keepClaim(ctx context.Context, runID string) (_ context.Context, stop func()) {
	c := &claim{run: runID}
	work, lost := context.WithCancelCause(context.WithValue(ctx, claimKey{}, c))
	renewCtx, cancel := context.WithCancel(work)
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(renewCtx, a.cfg.LeaseTTL, a.log, lost, func(ctx context.Context) (bool, error) {
			ok, err := a.store.RenewClaim(ctx, runID, a.cfg.Owner, a.cfg.LeaseTTL)
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
			if err := a.store.ReleaseClaim(rctx, runID, a.cfg.Owner); err != nil {
				a.log.Warn("release resume claim; it lapses within the lease TTL", "run", runID, "err", err)
			}
		}
		lost(nil)
	}
}
