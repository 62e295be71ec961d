package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store/storetest"
)

// twoOfThreeFourEyes asks two of three approvers, the requester among
// them, to approve a restart; four eyes keeps the requester out.
const twoOfThreeFourEyes = `
policy:
  rules:
    - id: two
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002, UREQUESTER]
      four_eyes: true
      min_approvals: 2
`

// An edit whose arguments are the pending ones once canonical is its
// editor's approval: refused where an Approve is (four eyes), counted
// beside the approvals before it, and deciding the call with nothing
// edited.
func TestEditToTheSameArgumentsIsCountedAsAnApproval(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = twoOfThreeFourEyes
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			same := func(who string) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: who, Args: json.RawMessage(`{ "env" : "\u0070rod" }`)}
			}
			if _, err := a.Decide(ctx, same("UREQUESTER")); !errors.Is(err, approvals.ErrNotApprover) {
				t.Fatalf("the requester's unchanged edit under four eyes: got %v, want ErrNotApprover", err)
			}
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"})
			must(t, err)
			if _, err := a.Decide(ctx, same("UONE000001")); !errors.Is(err, approvals.ErrAlreadyApproved) {
				t.Fatalf("an unchanged edit by who approved already: got %v, want ErrAlreadyApproved", err)
			}
			res, err := a.Decide(ctx, same("UTWO000002"))
			must(t, err)
			if !res.Complete || res.Call.Status != agent.CallDecided || res.Call.Edited || !slices.Equal(res.Call.Approvals, []string{"UONE000001", "UTWO000002"}) {
				t.Fatalf("the second approver's unchanged edit: got %+v; want the call decided by both approvals", res.Call)
			}
			if d := res.Call.Decision; d.Kind != approvals.Approve || len(d.Args) != 0 {
				t.Errorf("the call was decided by %+v, want an Approve with no edited arguments", d)
			}
		})
	}
}

// An edit sent again once it is pending on a call that needs two
// approvals (its card's fingerprint is no longer the call's) is its
// editor's own, counted: not arguments changed under them. Another
// person's, or other arguments, are refused as made on arguments that
// changed.
func TestSameEditSentAgainIsTheEditorsOwn(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = twoOfThreeFourEyes
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			edit := func(who, args string) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: who, Args: json.RawMessage(args)}
			}
			res, err := a.Decide(ctx, edit("UONE000001", `{"env":"staging"}`))
			must(t, err)
			if !res.Call.Edited || res.Call.Status != agent.CallPending {
				t.Fatalf("the edit: got %+v, want it pending", res.Call)
			}
			if _, err := a.Decide(ctx, edit("UONE000001", `{ "env": "staging" }`)); !errors.Is(err, approvals.ErrAlreadyApproved) {
				t.Errorf("the same edit sent again: got %v, want ErrAlreadyApproved", err)
			}
			if _, err := a.Decide(ctx, edit("UONE000001", `{"env":"qa"}`)); !errors.Is(err, approvals.ErrFingerprintMismatch) {
				t.Errorf("another edit of the editor's on the old card: got %v, want ErrFingerprintMismatch", err)
			}
			if _, err := a.Decide(ctx, edit("UTWO000002", `{"env":"staging"}`)); !errors.Is(err, approvals.ErrFingerprintMismatch) {
				t.Errorf("the same edit by someone else on the old card: got %v, want ErrFingerprintMismatch", err)
			}
			c, err := a.Call(ctx, p.ID)
			must(t, err)
			if !slices.Equal(c.Approvals, []string{"UONE000001"}) || string(c.Args) != `{"env":"staging"}` {
				t.Errorf("the refused sendings changed the call: %+v", c.Call)
			}
		})
	}
}

// Someone the card lets decide (its rule leaves the call to the
// conversation) who is refused under the rule that asks for the call now
// is refused with that rule and its approvers: the rule of edited
// arguments, or one an admin added since the card was posted.
func TestRefusalUnderAnotherRuleNamesIt(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - {id: billing, tool: restart, when: 'args.env == "billing"', verdict: ask, approvers: [UTWO000002]}
    - {id: restarts, tool: restart, verdict: ask}
`
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"billing"}`)})
	var rule *agent.RuleError
	if !errors.Is(err, approvals.ErrNotApprover) || !errors.As(err, &rule) {
		t.Fatalf("an edit into rule billing by UONE000001: got %v, want a *RuleError", err)
	}
	if rule.RuleID != "billing" || !rule.Edit || !slices.Equal(rule.Approvers, []string{"UTWO000002"}) {
		t.Errorf("the refusal names %+v, want rule billing of the edit, approved by UTWO000002", rule)
	}

	if _, err := w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: "frozen", Tool: "restart", Verdict: approvals.Ask, Approvers: []string{"UTWO000002"}}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"})
	if !errors.Is(err, approvals.ErrNotApprover) || !errors.As(err, &rule) {
		t.Fatalf("an approval the added rule leaves out: got %v, want a *RuleError", err)
	}
	if rule.RuleID != "frozen" || rule.Edit || !slices.Equal(rule.Approvers, []string{"UTWO000002"}) {
		t.Errorf("the refusal names %+v, want rule frozen, approved by UTWO000002", rule)
	}
}

// A decision that does not fit the call carries words for the person who
// made it (Detail), which name neither the call nor the error's chain; a
// refusal that carries none is told in general words.
func TestBadDecisionsCarryWordsForAPerson(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	for _, d := range []approvals.Decision{
		{Kind: approvals.Reject, Reason: " \n\t"},
		{Kind: approvals.Respond, Answer: "x"},
		{Kind: approvals.Edit},
	} {
		d.CallID, d.Fingerprint, d.Decider = p.ID, p.Fingerprint, "UAPPROVER1"
		_, err := a.Decide(ctx, d)
		if !errors.Is(err, agent.ErrBadDecision) {
			t.Fatalf("%s: got %v, want ErrBadDecision", d.Kind, err)
		}
		if words := agent.Detail(err); words == "" || strings.Contains(words, p.ID) || strings.Contains(words, "invalid decision") {
			t.Errorf("%s: Detail = %q, want words for a person", d.Kind, words)
		}
	}
	plain := errors.Join(errors.New("decide "+p.ID), agent.ErrBadDecision)
	if words := agent.Detail(plain); strings.Contains(words, p.ID) || strings.Contains(words, "invalid decision") {
		t.Errorf("Detail of a refusal carrying no words = %q, want general words", words)
	}
}

// A call decided by one approver's edit is audited with the fingerprint of
// the edited arguments, which run, as its execution is, on every store.
func TestEditDecisionIsAuditedWithTheEditedFingerprint(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			edited := json.RawMessage(`{"service":"api","version":"3"}`)
			_, want, err := approvals.Fingerprint(edited)
			must(t, err)
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UAPPROVER1", Args: edited})
			must(t, err)
			w.model.Reply(fakeopenai.Text("done"))
			_, err = a.Resume(ctx, res.Call.RunID)
			must(t, err)
			log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
			must(t, err)
			n := 0
			for _, e := range log {
				if e.CallID != p.ID || e.Action != "decide" && e.Action != "execute" {
					continue
				}
				n++
				if e.Fingerprint != want {
					t.Errorf("%s entry (decision %s) has fingerprint %.12s, want the edited arguments' %.12s (the model's are %.12s)", e.Action, e.Decision, e.Fingerprint, want, p.Fingerprint)
				}
			}
			if n != 2 {
				t.Errorf("%d decide and execute entries of the call, want 2: %+v", n, log)
			}
		})
	}
}
