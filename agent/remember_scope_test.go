package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// An admin makes a tool's rule four-eyes after its card was posted: an
// Always allow on the card, judged under the policy as it is at the
// click, is refused (it would save a standing rule that never applies,
// while the card said later calls run without asking), and no standing
// rule is saved.
func TestRememberRefusedWhenFourEyesAddedSinceTheCard(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			if p.FourEyes {
				t.Fatal("the card is four-eyes already")
			}
			r, err := approvals.ParseRule(`tool=restart verdict=ask four_eyes=true reason="two people"`)
			must(t, err)
			if _, err := w.engine.AddRule(ctx, "UADMIN", r); err != nil {
				t.Fatal(err)
			}
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
			if err == nil {
				t.Error("Always allow on a call whose rule is four-eyes now was accepted")
			}
			if rules, _ := w.engine.StandingRules(ctx, "C1"); len(rules) != 0 {
				t.Errorf("%d standing rule(s) saved: %+v", len(rules), rules)
			}
		})
	}
}

// An Always allow given on a tool that asked because it said nothing of
// itself does not carry over to the tool once its server lists it as
// destructive: the call asks again.
func TestStandingRuleEndsWhenTheToolBecomesDestructive(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	if p.RuleID != approvals.RuleAnnotations {
		t.Fatalf("the call asked under rule %s, want the annotations", p.RuleID)
	}
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
	must(t, err)
	w.model.Reply(fakeopenai.Text("ok"))
	_, err = a.Resume(ctx, res.Call.RunID)
	must(t, err)
	yes := true
	must(t, w.reg.Replace(func(n string) bool { return n == "restart" }, []agent.Tool{{Name: "restart", Description: "Restart", Schema: json.RawMessage(envSchema),
		Annotations: approvals.Hints{Destructive: &yes}, Handler: w.restarts.handler("restarted")}}))
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "restart", `{"env":"staging"}`)), fakeopenai.Text("done"))
	req := request("again")
	req.Conversation = "T1/C1/2"
	out, err := a.Run(ctx, req)
	must(t, err)
	if out.Status != agent.Paused {
		t.Errorf("once the tool said it is destructive, its call was %s under the standing rule made when it said nothing; want it asked", out.Status)
	}
}

// Always allow on a call whose tool is not available at the click (its
// server is down) is refused: judged with no annotations, the standing
// rule would cover the tool as one that says nothing of itself.
func TestRememberRefusedWhileTheToolIsUnavailable(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	must(t, w.reg.Replace(func(n string) bool { return n == "restart" }, nil))
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"}); err == nil {
		t.Error("Always allow on a call whose tool is not available was accepted")
	}
	if rules, _ := w.engine.StandingRules(ctx, "C1"); len(rules) != 0 {
		t.Errorf("%d standing rule(s) saved: %+v", len(rules), rules)
	}
}

// An Always allow stands only while its maker may still approve under the
// rule it relaxes: once they are taken out of the rule's user group, the
// next call of the tool asks again; back in the group, their standing
// rule lets it run.
func TestStandingRuleLapsesWithItsMakersRight(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - {id: grp, tool: restart, verdict: ask, approvers: [SSRE000001]}
`
			g := &mutableGroups{m: map[string][]string{"SSRE000001": {"UOLD000001", "UONE000001"}}}
			w.cfg.Groups = g
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UOLD000001"})
			must(t, err)
			w.model.Reply(fakeopenai.Text("ok"))
			_, err = a.Resume(ctx, res.Call.RunID)
			must(t, err)
			// restart asks for a restart in a new conversation; the model
			// answers once it ran (runs).
			restart := func(n int, runs bool) agent.OutcomeStatus {
				t.Helper()
				w.model.Reply(fakeopenai.ToolCalls(call(fmt.Sprintf("c%d", n+1), "restart", `{"env":"prod"}`)))
				if runs {
					w.model.Reply(fakeopenai.Text("done"))
				}
				req := request("again")
				req.Conversation = fmt.Sprintf("T1/C1/%d", n)
				out, err := a.Run(ctx, req)
				must(t, err)
				return out.Status
			}
			if got := restart(2, true); got != agent.Answered {
				t.Fatalf("restart under UOLD's standing rule = %s, want answered (run)", got)
			}
			g.set("SSRE000001", "UONE000001")
			if got := restart(3, false); got != agent.Paused {
				t.Errorf("restart under the standing rule of UOLD, out of the group now = %s, want paused (asked)", got)
			}
			g.set("SSRE000001", "UONE000001", "UOLD000001")
			if got := restart(4, true); got != agent.Answered {
				t.Errorf("restart under UOLD's standing rule, back in the group = %s, want answered (run)", got)
			}
			if n := w.restarts.n.Load(); n != 3 {
				t.Errorf("restarts run = %d, want 3: the first approval's and two under the standing rule", n)
			}
		})
	}
}

// A call made for several people is judged as each of them: a lapsed
// standing rule settles no one's part. Here UOLD, who made an Always allow
// of restarts under grp, has left grp's group; a restart made for UBOB
// (grp) and UJUNIOR (junior, UJLEAD) needs an approver both rules accept,
// and there is none: it is denied, not put to UJLEAD alone.
func TestLapsedStandingRuleSettlesNoRequesterOfACallForSeveral(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.policy = `
policy:
  default: ask
  rules:
    - {id: junior, tool: restart, when: 'user == "UJUNIOR"', verdict: ask, approvers: [UJLEAD]}
    - {id: grp, tool: restart, verdict: ask, approvers: [SSRE000001]}
`
			g := &mutableGroups{m: map[string][]string{"SSRE000001": {"UOLD000001", "UONE000001"}}}
			w.cfg.Groups = g
			a := w.agent()
			p := pauseWith(t, w, a, inThread("UBOB", "restart prod"), call("c0", "restart", `{"env":"prod"}`))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UOLD000001"})
			must(t, err)
			w.model.Reply(fakeopenai.Text("ok"))
			_, err = a.Resume(ctx, res.Call.RunID)
			must(t, err)
			g.set("SSRE000001", "UONE000001")

			p = pauseWith(t, w, a, inThread("UBOB", "deploy api 2"), call("c1", "deploy", `{"service":"api","version":"2"}`))
			sayAll(t, a, inThread("UBOB", "then restart prod"), inThread("UJUNIOR", "yes restart prod"))
			w.model.Reply(fakeopenai.Text("deployed"), fakeopenai.ToolCalls(call("c2", "restart", `{"env":"prod"}`)), fakeopenai.Text("not restarted"))
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			out, err := a.Resume(ctx, p.RunID)
			must(t, err)
			if out.Status == agent.Paused {
				t.Fatalf("the restart for UBOB and UJUNIOR paused for %v under %s; want it denied: no one both rules accept", out.Pending[0].Approvers, out.Pending[0].RuleID)
			}
			if got := strings.Join(toolResults(t, w.model), "\n"); !strings.Contains(got, "c2: ") || !strings.Contains(got, "leave no approver") {
				t.Errorf("the model was told %q, want c2 denied for leaving no approver", got)
			}
			if n := w.restarts.n.Load(); n != 1 {
				t.Errorf("restarts run = %d, want 1 (the first approval's)", n)
			}
		})
	}
}

// restartAfterRemembered has UOLD000001 allow restarts from now on under
// policy, changes the world (change, before a process is built anew), and
// returns how a restart asked for in a new conversation then ends.
func restartAfterRemembered(t *testing.T, w *world, policy string, change func()) agent.OutcomeStatus {
	t.Helper()
	ctx := t.Context()
	w.policy = policy
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UOLD000001"})
	must(t, err)
	w.model.Reply(fakeopenai.Text("ok"))
	_, err = a.Resume(ctx, res.Call.RunID)
	must(t, err)
	change()
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "restart", `{"env":"prod"}`)))
	req := request("again")
	req.Conversation = "T1/C1/2"
	out, err := w.agent().Run(ctx, req)
	must(t, err)
	return out.Status
}

// failingGroups cannot list any group's members.
type failingGroups struct{}

func (failingGroups) Members(context.Context, string) ([]string, error) {
	return nil, errors.New("users.list failed")
}

// A standing rule whose maker cannot be checked (their group's members
// cannot be listed) lets nothing run unasked.
func TestStandingRuleWhoseMakerCannotBeCheckedAsks(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.Groups = &mutableGroups{m: map[string][]string{"SSRE000001": {"UOLD000001"}}}
	policy := `
policy:
  rules:
    - {id: grp, tool: restart, verdict: ask, approvers: [SSRE000001]}
`
	if got := restartAfterRemembered(t, w, policy, func() { w.cfg.Groups = failingGroups{} }); got != agent.Paused {
		t.Errorf("restart under a standing rule whose maker's group cannot be listed = %s, want paused (asked)", got)
	}
}

// seesNothing is an audience in which no one can see any conversation.
type seesNothing struct{}

func (seesNothing) CanSee(context.Context, string, string) (bool, error) { return false, nil }

// Under a rule that names no approvers, a standing rule stands only while
// its maker can see the conversation.
func TestStandingRuleOfAMakerOutOfTheConversationAsks(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	policy := `
policy:
  rules:
    - {id: anyone, tool: restart, verdict: ask}
`
	if got := restartAfterRemembered(t, w, policy, func() { w.cfg.Audience = seesNothing{} }); got != agent.Paused {
		t.Errorf("restart under a standing rule whose maker left the conversation = %s, want paused (asked)", got)
	}
}
