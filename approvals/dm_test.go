package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// dmChannel is a 1:1 direct message with the bot.
const dmChannel = "D0DIRECT01"

// In a direct message only the requester can see the conversation, so a
// rule naming no approvers that needs someone besides them (four eyes) or
// more than one approval leaves no one who could approve: the call is
// denied at once, saying why, instead of waiting on a card for its TTL.
func TestOpenRuleNeedingAnotherApproverIsDeniedInDM(t *testing.T) {
	for _, tc := range []struct {
		name string
		rule Rule
	}{
		{"four eyes", Rule{ID: "eyes", Tool: "deploy", Verdict: Ask, FourEyes: true}},
		{"two approvals", Rule{ID: "eyes", Tool: "deploy", Verdict: Ask, MinApprovals: 2}},
		{"both", Rule{ID: "eyes", Tool: "deploy", Verdict: Ask, FourEyes: true, MinApprovals: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPolicy(Ask, []Rule{tc.rule})
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UALICE", Channel: dmChannel}
			check := func(what string, v Verdict) {
				t.Helper()
				if v.Action != Deny || !v.FailClosed || v.RuleID != "eyes" {
					t.Errorf("%s: %s by %q (fail closed %v), want a fail-closed deny by eyes", what, v.Action, v.RuleID, v.FailClosed)
				}
				if !strings.Contains(v.Reason, "rule eyes") || !strings.Contains(v.Reason, "direct message") || !strings.Contains(v.Reason, "only the requester") {
					t.Errorf("%s: reason %q, want it to name the rule and say that in a direct message only the requester decides", what, v.Reason)
				}
			}
			check("Policy.Evaluate", p.Evaluate(in))
			check("Engine.Evaluate", evalEngine(t, NewEngine(p, newMemStore()), in))
			// In a channel its other members may approve.
			in.Channel = "C0GENERAL1"
			if v := p.Evaluate(in); v.Action != Ask {
				t.Errorf("in a channel: %s by %s (%s), want ask", v.Action, v.RuleID, v.Reason)
			}
		})
	}
}

// The requester alone may decide a call in their direct message under a
// rule naming no approvers, and named approvers are reached outside it
// (a copy of the card): neither is denied.
func TestDecidableRulesStandInDM(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "open", Tool: "restart", Verdict: Ask},
		{ID: "named", Tool: "deploy", Verdict: Ask, Approvers: []string{"UBOB"}, FourEyes: true, MinApprovals: 1},
		{ID: "group", Tool: "migrate", Verdict: Ask, Approvers: []string{"SSRE"}, FourEyes: true, MinApprovals: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	for _, tool := range []string{"restart", "deploy", "migrate"} {
		in := Input{Tool: tool, Args: json.RawMessage(`{}`), User: "UALICE", Channel: dmChannel}
		if v := evalEngine(t, e, in); v.Action != Ask {
			t.Errorf("%s in a DM: %s by %s (%s), want ask", tool, v.Action, v.RuleID, v.Reason)
		}
	}
}

// Across the two layers the combined ask counts: a runtime rule adding
// four eyes to an open file rule leaves no one in a DM, while one naming
// approvers gives the call people who can approve it there.
func TestDMDecidabilityOfRuntimeTightening(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{{ID: "open", Tool: "deploy", Verdict: Ask}, {ID: "open-eyes", Tool: "migrate", Verdict: Ask, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	if _, err := e.AddRule(ctx, "UADMIN", Rule{ID: "deploy-eyes", Tool: "deploy", Verdict: Ask, FourEyes: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "UADMIN", Rule{ID: "migrate-sre", Tool: "migrate", Verdict: Ask, Approvers: []string{"UBOB"}}); err != nil {
		t.Fatal(err)
	}
	deploy := Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UALICE", Channel: dmChannel}
	if v := evalEngine(t, e, deploy); v.Action != Deny || !strings.Contains(v.Reason, "direct message") {
		t.Errorf("runtime four eyes over an open rule in a DM: %s by %s (%s), want a deny saying why", v.Action, v.RuleID, v.Reason)
	}
	migrate := Input{Tool: "migrate", Args: json.RawMessage(`{}`), User: "UALICE", Channel: dmChannel}
	if v := evalEngine(t, e, migrate); v.Action != Ask || strings.Join(v.Approvers, ",") != "UBOB" || !v.FourEyes {
		t.Errorf("runtime approvers over an open four-eyes rule in a DM: %s by %s approvers %v four eyes %v (%s), want a four-eyes ask of UBOB", v.Action, v.RuleID, v.Approvers, v.FourEyes, v.Reason)
	}
}

// While the stored rules cannot be read, the file's verdict is the floor:
// an open four-eyes rule in a DM is denied as it is when they can be.
func TestDMOpenFourEyesDeniedDuringStoreOutage(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{{ID: "eyes", Tool: "deploy", Verdict: Ask, FourEyes: true}})
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	st.fail = errors.New("store down")
	v, err := NewEngine(p, st).Evaluate(context.Background(), Input{Tool: "deploy", Args: json.RawMessage(`{}`), User: "UALICE", Channel: dmChannel})
	if err == nil || v.Action != Deny || v.RuleID != "eyes" {
		t.Errorf("got %s by %s (%s), %v; want the deny of eyes and the error", v.Action, v.RuleID, v.Reason, err)
	}
}

// IsDM tells a direct message's id from a channel's or a group DM's.
func TestIsDM(t *testing.T) {
	for id, want := range map[string]bool{"D0DIRECT01": true, "C0GENERAL1": false, "G0GROUPDM1": false, "": false} {
		if got := IsDM(id); got != want {
			t.Errorf("IsDM(%q) = %v, want %v", id, got, want)
		}
	}
}
