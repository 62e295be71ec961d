package agent_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/store"
)

// unconfirmedDecisions is a store that makes each of its next lose
// audited decisions and answers it with err instead of its answer: a
// reply lost after the store made the step, or a write the primary made
// that its replicas did not confirm (store.ErrNotReplicated).
type unconfirmedDecisions struct {
	agent.Store
	lose atomic.Int32
	err  error
}

func (s *unconfirmedDecisions) DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, err := s.Store.DecideAudited(ctx, callID, fingerprint, d, fx)
	if err == nil && s.lose.Add(-1) >= 0 {
		return store.Call{}, false, s.err
	}
	return c, complete, err
}

// An expiry whose store step was made but not confirmed (its answer lost,
// or its replicas short) is not left there: the call no longer shows as
// due, so the next pass sends the same expiry again, and it is reported
// expired and its run handed on to resume, once, without waiting for the
// stalled-resume sweep.
func TestUnconfirmedExpiryIsSentAgainByTheNextPass(t *testing.T) {
	for _, b := range backends(t) {
		for _, failure := range []error{
			fmt.Errorf("decide: %w", store.ErrNotReplicated),
			errors.New("read tcp: i/o timeout"),
		} {
			t.Run(b.name+"/"+failure.Error(), func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				w.cfg.ApprovalTTL = time.Hour
				st := &unconfirmedDecisions{Store: w.store, err: failure}
				a := w.agentWith(st, w.rec)
				p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
				w.advance(2 * time.Hour)

				st.lose.Store(1)
				var resumed []string
				hand := func(runID, _ string) { resumed = append(resumed, runID) }
				if _, err := a.Expire(ctx, hand); err == nil {
					t.Fatal("Expire whose decision was not confirmed returned no error")
				}
				if len(resumed) != 0 {
					t.Fatalf("an unconfirmed expiry handed on %q", resumed)
				}
				if got, err := w.store.GetCall(ctx, p.ID); err != nil || got.Decision == nil {
					t.Fatalf("the store did not make the expiry: %+v, %v", got.Decision, err)
				}

				if _, err := a.Expire(ctx, hand); err != nil {
					t.Fatalf("the next pass: %v", err)
				}
				if len(resumed) != 1 || resumed[0] != p.RunID {
					t.Errorf("the next pass handed on %q, want %s once", resumed, p.RunID)
				}
				expired := 0
				for _, u := range w.rec.Updates() {
					if u.Call.ID == p.ID && u.Call.Status == agent.CallExpired {
						expired++
					}
				}
				if expired != 1 {
					t.Errorf("%s reported expired %d times, want once: %+v", p.ID, expired, w.rec.Updates())
				}

				if _, err := a.Expire(ctx, hand); err != nil || len(resumed) != 1 {
					t.Errorf("a third pass: handed on %q, %v; want nothing more", resumed, err)
				}
			})
		}
	}
}
