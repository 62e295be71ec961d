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
)

// editOpenPolicy leaves deploys of staging to anyone in the conversation,
// two of them, and names three approvers for the others.
const editOpenPolicy = `
policy:
  rules:
    - {id: staging, tool: restart, when: 'args.env == "staging"', verdict: ask, min_approvals: 2}
    - {id: named, tool: restart, verdict: ask, approvers: [UNAMED001, UNAMED002, UNAMED003]}
`

// cardOfThree are the approvers the card of a restart of prod names.
var cardOfThree = []string{"UNAMED001", "UNAMED002", "UNAMED003"}

// editedOpen pauses on a restart of prod, whose card names cardOfThree,
// in C1, where UNAMED001 is not, and has UNAMED002 edit it into staging,
// whose rule names no approvers. It returns the agent and the call.
func editedOpen(t *testing.T, b backend) (*world, *agent.Agent, agent.Call) {
	t.Helper()
	w := newWorld(t, b)
	w.policy = editOpenPolicy
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UNAMED002", "UNAMED003"}}
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
	if !slices.Equal(p.Approvers, cardOfThree) || p.NeedsAudience {
		t.Fatalf("the card names %v (needs the audience: %v), want the three of rule named", p.Approvers, p.NeedsAudience)
	}
	res, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UNAMED002", Args: json.RawMessage(`{"env":"staging"}`)})
	if err != nil || res.Call.Status != agent.CallPending || !res.Call.NeedsAudience {
		t.Fatalf("the edit into staging: got %+v, %v; want the call pending, needing the audience", res.Call, err)
	}
	return w, a, res.Call
}

// A card's approver outside the conversation, whom an edit into a rule
// that names no approvers leaves out, decides the edited call in no way:
// not a Deny, a Reject, nor (the rule removed since) an approval. A card
// approver in the conversation still denies it. Without a pending edit,
// the card's approvers deny as before, wherever they are.
func TestDenyOfAnEditOpenToTheConversationNeedsTheAudience(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w, a, c := editedOpen(t, b)
			for _, d := range []approvals.Decision{
				{Kind: approvals.Refuse},
				{Kind: approvals.Reject, Reason: "not now"},
			} {
				d.CallID, d.Fingerprint, d.Decider = c.ID, c.Fingerprint, "UNAMED001"
				if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "only people in the conversation") {
					t.Errorf("a %s of the edit open to the conversation by the card's approver outside it: got %v, want ErrNotApprover", d.Kind, err)
				}
			}
			// The edit needs the conversation from then on, even once
			// a rule added since names approvers for its arguments.
			_, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "tight", Tool: "restart", Verdict: approvals.Ask, Approvers: []string{"UNAMED001", "UNAMED003"}})
			must(t, err)
			approve := approvals.Decision{CallID: c.ID, Fingerprint: c.Fingerprint, Kind: approvals.Approve, Decider: "UNAMED001"}
			if _, err := a.Decide(ctx, approve); !errors.Is(err, approvals.ErrNotApprover) {
				t.Errorf("an approval of the edit by the card's approver outside the conversation, under a rule naming them added since: got %v, want ErrNotApprover", err)
			}
			got, err := a.Call(ctx, c.ID)
			must(t, err)
			if got.Status != agent.CallPending {
				t.Fatalf("the call is %s after refused decisions, want pending", got.Status)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: c.ID, Fingerprint: c.Fingerprint, Kind: approvals.Refuse, Decider: "UNAMED003"})
			if err != nil || res.Call.Status != agent.CallDecided {
				t.Fatalf("a Deny by the card's approver in the conversation: got %+v, %v", res.Call, err)
			}
		})
	}
	t.Run("no edit", func(t *testing.T) {
		w := newWorld(t, backends(t)[0])
		w.policy = editOpenPolicy
		w.cfg.Audience = audience{"C1": {"UREQUESTER", "UNAMED002", "UNAMED003"}}
		a := w.agent()
		p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
		if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Refuse, Decider: "UNAMED001"}); err != nil {
			t.Fatalf("a Deny, with no edit pending, by a card's approver outside the conversation: got %v", err)
		}
	})
}

// A call decided after an edit into a rule that names no approvers (with
// the edit, or by a Deny or a Reject of it) is seen as the edit was: by
// people who can see the conversation, the card's approvers still listed;
// only its arguments are the model's again, the decision holding the
// edited ones.
func TestCallDecidedAfterAnEditOpenToTheConversationNeedsTheAudience(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		for _, d := range []approvals.Decision{
			{Kind: approvals.Approve},
			{Kind: approvals.Refuse},
			{Kind: approvals.Reject, Reason: "not now"},
		} {
			t.Run(b.name+"/"+string(d.Kind), func(t *testing.T) {
				_, a, c := editedOpen(t, b)
				d.CallID, d.Fingerprint, d.Decider = c.ID, c.Fingerprint, "UNAMED003"
				res, err := a.Decide(ctx, d)
				if err != nil || res.Call.Status != agent.CallDecided {
					t.Fatalf("the %s by the card's approver in the conversation: got %+v, %v", d.Kind, res.Call, err)
				}
				got, err := a.Call(ctx, c.ID)
				must(t, err)
				for what, v := range map[string]agent.Call{"as reported": res.Call, "as read again": got.Call} {
					if !v.NeedsAudience || !slices.Equal(v.Approvers, cardOfThree) || !slices.Equal(v.CardApprovers, cardOfThree) {
						t.Errorf("the call decided by a %s, %s: NeedsAudience %v, approvers %v, card's %v; want true and the card's three",
							d.Kind, what, v.NeedsAudience, v.Approvers, v.CardApprovers)
					}
					if v.Edited || string(v.Args) != `{"env":"prod"}` {
						t.Errorf("the call decided by a %s, %s: edited %v, arguments %s; want the model's", d.Kind, what, v.Edited, v.Args)
					}
				}
				if d.Kind == approvals.Approve && (got.Decision == nil || got.Decision.Kind != approvals.Edit || string(got.Decision.Args) != `{"env":"staging"}`) {
					t.Errorf("the approved edit was decided as %+v, want an edit to staging", got.Decision)
				}
			})
		}
	}
}
