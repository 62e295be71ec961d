package agent

import (
	"context"
	"sync"
	"time"
)

// keepClaim renews the resume claim on runID every LeaseTTL/3 until the
// returned stop is called (stop waits for the renewer). The claim lasts one
// LeaseTTL, so the claim of a process that died lapses within seconds and
// the stalled-resume sweep takes the run over. A failed renewal is logged
// and retried; a claim found lost is logged once and not renewed again.
func (a *Agent) keepClaim(ctx context.Context, runID string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.cfg.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				ok, err := a.store.RenewClaim(ctx, runID, a.cfg.Owner, a.cfg.LeaseTTL)
				switch {
				case ctx.Err() != nil:
					return
				case err != nil:
					a.log.Warn("renew resume claim", "run", runID, "err", err)
				case !ok:
					a.log.Warn("resume claim lost; another process may resume this run", "run", runID)
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}
