package agent

import (
	"context"
	"time"
)

// keepClaim keeps the resume claim on runID while the resume runs under
// the returned context: it renews the claim every LeaseTTL/3, like the
// conversation's lease, so the claim of a process that died lapses within
// LeaseTTL. If the claim is found lost (it ran out, and another process
// may have claimed the run), or renewing fails until it may have run out,
// the context is cancelled with ErrLeaseLost as its cause and the resume
// stops where it is. stop stops renewing and waits for the renewer; after
// a resume that stopped on a lost lease or claim it also releases the
// claim, so that the takeover of the conversation (listed until the resume
// saves its result) can claim the run at once instead of after LeaseTTL.
func (a *Agent) keepClaim(ctx context.Context, runID string) (_ context.Context, stop func()) {
	work, lost := context.WithCancelCause(ctx)
	renewCtx, cancel := context.WithCancel(work)
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(renewCtx, a.cfg.LeaseTTL, a.log, lost, func(ctx context.Context) (bool, error) {
			return a.store.RenewClaim(ctx, runID, a.cfg.Owner, a.cfg.LeaseTTL)
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
