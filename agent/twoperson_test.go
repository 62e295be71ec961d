package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
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

// An edit that moves a call under a rule needing two approvers counts as
// the editor's approval only: one person cannot take a call out from under
// a two-person rule by editing it. The second approver's approval of the
// edited arguments decides it, and the edited arguments run.
func TestEditUnderATwoPersonRuleNeedsTheSecondApprover(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - id: prod
      tool: restart
      when: 'args.env == "prod"'
      verdict: ask
      approvers: [UONE000001, UTWO000002]
      min_approvals: 2
    - id: staging
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002]
`
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			if p.MinApprovals > 1 {
				t.Fatalf("the staging call needs %d approvers, want 1", p.MinApprovals)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
			if err != nil || res.Complete || res.Call.Status != agent.CallPending || !res.Call.Edited {
				t.Fatalf("an edit to prod by one approver: got %+v, %v; want the call pending on the edited arguments", res, err)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Fatalf("restart ran %d times after one approver's edit", n)
			}
			res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Approve, Decider: "UTWO000002"})
			if err != nil || !res.Complete || res.Call.Status != agent.CallDecided || len(res.Call.Approvals) != 2 {
				t.Fatalf("the second approver's approval of the edit: got %+v, %v; want the call decided with 2 approvals", res, err)
			}
			w.model.Reply(fakeopenai.Text("restarted prod"))
			if _, err := a.Resume(ctx, res.Call.RunID); err != nil {
				t.Fatal(err)
			}
			if n := w.restarts.n.Load(); n != 1 {
				t.Fatalf("restart ran %d times, want once", n)
			}
			if got := w.restarts.Args(); len(got) != 1 || got[0] != `{"env":"prod"}` {
				t.Errorf("restart ran with %v, want the edited arguments", got)
			}
		})
	}
}
