package agent_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// An edit that moves a call whose card's rule names approvers under a rule
// that asks and names none is decided only by people who can see the
// conversation, as authorize checks: the call as reported and as read
// again says so, still listing the card's approvers. An edit under a rule
// that names approvers, or one that allows it, leaves the call to the
// approvers named, as before.
func TestEditIntoARuleNamingNoApproversNeedsTheAudience(t *testing.T) {
	const policy = `
policy:
  rules:
    - {id: open, tool: restart, when: 'args.env == "prod"', verdict: ask, min_approvals: 2}
    - {id: named, tool: restart, when: 'args.env == "qa"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2}
    - {id: allowed, tool: restart, when: 'args.env == "dev"', verdict: allow}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002, UTHREE0003], min_approvals: 2}
`
	card := []string{"UONE000001", "UTWO000002", "UTHREE0003"}
	ctx := context.Background()
	for _, b := range backends(t) {
		for _, tc := range []struct {
			env           string
			needsAudience bool
			approvers     []string
		}{
			{env: "prod", needsAudience: true, approvers: card},
			{env: "qa", needsAudience: false, approvers: []string{"UONE000001", "UTWO000002"}},
			{env: "dev", needsAudience: false, approvers: card},
		} {
			t.Run(b.name+"/"+tc.env, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = policy
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
				if p.NeedsAudience {
					t.Fatalf("the staging call, whose rule names approvers, needs the audience before any edit")
				}
				res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"` + tc.env + `"}`)})
				if err != nil || res.Call.Status != agent.CallPending || !res.Call.Edited {
					t.Fatalf("the edit to %s: got %+v, %v; want the call pending on the edited arguments", tc.env, res, err)
				}
				got, err := a.Call(ctx, p.ID)
				must(t, err)
				for what, c := range map[string]agent.Call{"as reported": res.Call, "as read again": got.Call} {
					if c.NeedsAudience != tc.needsAudience || !slices.Equal(c.Approvers, tc.approvers) || !slices.Equal(c.CardApprovers, card) {
						t.Errorf("the call edited to %s, %s: NeedsAudience %v, approvers %v, card's %v; want %v, %v, %v",
							tc.env, what, c.NeedsAudience, c.Approvers, c.CardApprovers, tc.needsAudience, tc.approvers, card)
					}
				}
			})
		}
	}
}
