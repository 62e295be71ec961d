package approvals

import (
	"encoding/json"
	"strings"
	"testing"
)

// Same rule for two requesters, but one judgement is a fail-closed ask
// whose approvers were narrowed by the rule that decides otherwise: the
// combined ask must keep only approvers every judgement accepts.
func TestStrictestSameRuleKeepsNarrowedApprovers(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "x", Tool: "restart", When: `user == "UB" || args.force == true`, Verdict: Ask, Approvers: []string{"U1", "U2"}},
		{ID: "y", Tool: "restart", Verdict: Ask, Approvers: []string{"U1", "U3"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	alone := p.Evaluate(Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "UA", Channel: "C1"})
	t.Logf("UA alone: %s by %s approvers %v", alone.Action, alone.RuleID, alone.Approvers)
	both := p.Evaluate(Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "UB", Requesters: []string{"UA", "UB"}, Channel: "C1"})
	t.Logf("UA and UB (UB last): %s by %s approvers %v", both.Action, both.RuleID, both.Approvers)
	if strings.Join(both.Approvers, ",") != "U1" {
		t.Errorf("approvers %v: U2 may approve a call UA's judgement gives only to U1", both.Approvers)
	}
}

// One rule asks four eyes of two approvers who are both requesters: no
// one can decide the call, so (as Strictest says) it must be denied.
func TestStrictestSameRuleFourEyesOverRequesters(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "z", Tool: "db", Verdict: Ask, Approvers: []string{"UA", "UB"}, FourEyes: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := p.Evaluate(Input{Tool: "db", Args: json.RawMessage(`{}`), User: "UB", Requesters: []string{"UA", "UB"}, Channel: "C1"})
	t.Logf("%s by %s approvers %v four eyes %v", v.Action, v.RuleID, v.Approvers, v.FourEyes)
	if v.Action != Deny {
		t.Errorf("an ask no one can decide (both approvers are requesters under four eyes): %s", v.Action)
	}
}

// An ask made of two rules' asks, one for each requester, is marked
// Combined: no standing rule is made under it ("Always allow here" is
// refused), since none would ever apply to a verdict of one rule.
func TestCombinedVerdictIsMarked(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "junior-deploys", Tool: "deploy", When: `user == "UJUNIOR"`, Verdict: Ask, Approvers: []string{"U1", "U2"}},
		{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: []string{"U1"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	in := Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UBOB", Requesters: []string{"UJUNIOR", "UBOB"}, Channel: "C1"}
	if v := evalEngine(t, e, in); v.Action != Ask || !v.Combined || strings.Join(v.Approvers, ",") != "U1" {
		t.Errorf("two requesters under two rules: %s approvers %v combined %v, want a combined ask of U1", v.Action, v.Approvers, v.Combined)
	}
	in.Requesters = nil
	if v := evalEngine(t, e, in); v.Combined {
		t.Error("one requester's verdict is marked combined")
	}
}

// A four-eyes rule whose approvers, once the requester is left out, are
// too few for the approvals it needs is denied for one requester as for
// several: a card no one could complete would only wait for its TTL.
func TestFourEyesWithTooFewOtherApproversIsDenied(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: []string{"UALICE", "UBOB"}, FourEyes: true, MinApprovals: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UALICE", Channel: "C1"}
	check := func(what string, v Verdict) {
		t.Helper()
		if v.Action != Deny || !v.FailClosed || v.RuleID != "deploys" {
			t.Errorf("%s: %s by %q (fail closed %v), want a fail-closed deny by deploys", what, v.Action, v.RuleID, v.FailClosed)
		}
		if !strings.Contains(v.Reason, "rule deploys") || strings.Contains(v.Reason, "thread of its own") {
			t.Errorf("%s: reason %q, want it to name the rule and not to suggest a thread of its own", what, v.Reason)
		}
	}
	check("Policy.Evaluate", p.Evaluate(in))
	check("Engine.Evaluate", evalEngine(t, NewEngine(p, newMemStore()), in))
	// Someone who is not an approver may still ask: both approvers remain.
	in.User = "UCAROL"
	if v := p.Evaluate(in); v.Action != Ask {
		t.Errorf("asked by a non-approver: %s, want ask", v.Action)
	}
}

// An ask that names approvers combined with one that names none (anyone
// in the conversation) keeps the approvers, who must also be able to see
// the conversation; two that name approvers need nothing more of them,
// and neither does one rule's ask alone.
func TestCombinedAskWithAnOpenOneNeedsTheAudience(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "eu", Tool: "restart", When: `args.region == "eu"`, Verdict: Ask},
		{ID: "named", Tool: "restart", Verdict: Ask, Approvers: []string{"U1", "U2"}},
		{ID: "junior", Tool: "deploy", When: `user == "UJ"`, Verdict: Ask, Approvers: []string{"U1"}},
		{ID: "deploys", Tool: "deploy", Verdict: Ask},
		{ID: "other", Tool: "drain", When: `user == "UJ"`, Verdict: Ask, Approvers: []string{"U1", "U3"}},
		{ID: "drains", Tool: "drain", Verdict: Ask, Approvers: []string{"U1", "U2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		in   Input
		want bool
	}{
		{"a failed condition of an open rule", Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "UA", Channel: "C1"}, true},
		{"a named rule alone", Input{Tool: "restart", Args: json.RawMessage(`{"region":"us"}`), User: "UA", Channel: "C1"}, false},
		{"two requesters under a named and an open rule", Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UA", Requesters: []string{"UA", "UJ"}, Channel: "C1"}, true},
		{"two requesters under two named rules", Input{Tool: "drain", Args: json.RawMessage(`{}`), User: "UA", Requesters: []string{"UA", "UJ"}, Channel: "C1"}, false},
	} {
		v := p.Evaluate(c.in)
		if v.Action != Ask || len(v.Approvers) == 0 || v.NeedsAudience != c.want {
			t.Errorf("%s: %s by %s, approvers %v, needs the audience %v; want an ask naming approvers, %v", c.name, v.Action, v.RuleID, v.Approvers, v.NeedsAudience, c.want)
		}
	}
}

// In a direct message only the requester can see the conversation: an
// ask combined of one naming approvers and one naming none is denied at
// once when the requester is not among those approvers (no one could
// decide it), and asks when they are.
func TestCombinedAskInADirectMessageNeedsTheRequesterAmongItsApprovers(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "eu", Tool: "restart", When: `args.region == "eu"`, Verdict: Ask},
		{ID: "named", Tool: "restart", Verdict: Ask, Approvers: []string{"U1", "U2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	v := p.Evaluate(Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "UA", Channel: "D0123"})
	if v.Action != Deny || !strings.Contains(v.Reason, "direct message") {
		t.Errorf("UA's call in a DM: %s by %s (%q), approvers %v; want denied, saying why", v.Action, v.RuleID, v.Reason, v.Approvers)
	}
	if v := p.Evaluate(Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "U1", Channel: "D0456"}); v.Action != Ask {
		t.Errorf("U1's call in a DM: %s by %s (%q); want it asked, U1 being an approver who sees the DM", v.Action, v.RuleID, v.Reason)
	}
	if v := p.Evaluate(Input{Tool: "restart", Args: json.RawMessage(`{}`), User: "UA", Channel: "C0123"}); v.Action != Ask {
		t.Errorf("UA's call in a channel: %s by %s (%q); want it asked", v.Action, v.RuleID, v.Reason)
	}
}
