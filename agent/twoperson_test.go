package agent_test

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// A call that needs two approvers is not decided by the first approval,
// offers no Always allow, counts each person once, and is decided by the
// second distinct approver; a requester is still kept out by four eyes.
func TestTwoPersonDecide(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - id: two
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002, UREQUESTER]
      four_eyes: true
      min_approvals: 2
`
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			d := func(who string, kind approvals.Kind) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: kind, Decider: who}
			}
			if _, err := a.Decide(ctx, d("UONE000001", approvals.Remember)); !errors.Is(err, agent.ErrBadDecision) {
				t.Fatalf("Remember on a two-person call: got %v, want ErrBadDecision", err)
			}
			if _, err := a.Decide(ctx, d(p.Requester, approvals.Approve)); !errors.Is(err, approvals.ErrNotApprover) {
				t.Fatalf("the requester approving: got %v, want ErrNotApprover", err)
			}
			res, err := a.Decide(ctx, d("UONE000001", approvals.Approve))
			if err != nil || res.Complete || res.Call.Status != agent.CallPending {
				t.Fatalf("first approval: got %+v, %v; want the call still pending", res, err)
			}
			if _, err := a.Decide(ctx, d("UONE000001", approvals.Approve)); !errors.Is(err, approvals.ErrAlreadyApproved) {
				t.Fatalf("the same approver again: got %v, want ErrAlreadyApproved", err)
			}
			res, err = a.Decide(ctx, d("UTWO000002", approvals.Approve))
			if err != nil || !res.Complete || res.Call.Status != agent.CallDecided || len(res.Call.Approvals) != 2 {
				t.Fatalf("second approval: got %+v, %v; want the call decided with 2 approvals", res, err)
			}
		})
	}
}
