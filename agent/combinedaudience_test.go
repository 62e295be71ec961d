package agent_test

import (
	"errors"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// decidedOnlyInTheConversation checks that p, whose ask is made of one
// that names UOUTSIDER1 and UAPPROVER1 and one that names no approvers
// (anyone in the conversation), is refused to UOUTSIDER1, who is not in
// the conversation, and approved by UAPPROVER1, who is.
func decidedOnlyInTheConversation(t *testing.T, a *agent.Agent, p agent.PendingCall) {
	t.Helper()
	ctx := t.Context()
	if !p.NeedsAudience {
		t.Errorf("the call's deciders need not see the conversation, want them to")
	}
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOUTSIDER1"})
	if !errors.Is(err, approvals.ErrNotApprover) {
		t.Errorf("UOUTSIDER1, not in the conversation, approving = %v, want ErrNotApprover", err)
	}
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Errorf("UAPPROVER1, in the conversation, approving = %v, want it decided", err)
	}
}

// A rule whose condition cannot be evaluated (a missing key) might have
// matched; it names no approvers, so only people in the conversation
// could have approved under it. Combined with the rule that matches,
// which names approvers, the call is decided by those of them who can see
// the conversation: whoever approves it could have approved it either
// way.
func TestFailedConditionKeepsTheConversationsDeciders(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UAPPROVER1"}}
	w.policy = `
policy:
  default: ask
  rules:
    - {id: eu-anyone-here, tool: restart, when: 'args.region == "eu"', verdict: ask}
    - {id: restarts, tool: restart, verdict: ask, approvers: [UOUTSIDER1, UAPPROVER1]}
`
	a := w.agent()
	decidedOnlyInTheConversation(t, a, pauseOne(t, w, a, call("c1", "restart", `{"env":"dev"}`)))
}

// A call that answers two people's messages is asked under each one's
// rule: one names approvers, the other none. Only the approvers who can
// see the conversation may decide it, as each rule accepts them.
func TestCombinedAskKeepsTheConversationsDeciders(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, backends(t)[0])
	w.cfg.Audience = audience{"C1": {"UBOB", "UJUNIOR", "UAPPROVER1"}}
	w.policy = `
policy:
  default: ask
  rules:
    - {id: junior-deploys, tool: deploy, when: 'user == "UJUNIOR"', verdict: ask, approvers: [UOUTSIDER1, UAPPROVER1]}
    - {id: deploys, tool: deploy, verdict: ask}
`
	a := w.agent()
	p := pauseWith(t, w, a, inThread("UBOB", "restart api"), call("c1", "restart", `{"env":"dev"}`))
	sayAll(t, a, inThread("UBOB", "then deploy api 2"), inThread("UJUNIOR", "yes, api 2"))
	w.model.Reply(fakeopenai.Text("restarted"), fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"2"}`)))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	out, err := a.Resume(ctx, p.RunID)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("the resume = %s, %d pending; want paused on the deploy", out.Status, len(out.Pending))
	}
	decidedOnlyInTheConversation(t, a, out.Pending[0])
}
