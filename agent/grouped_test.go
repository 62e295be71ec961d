package agent_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/approvals"
)

// flakyGroups fails the lookup of one group when armed.
type flakyGroups struct {
	mu   sync.Mutex
	m    map[string][]string
	fail map[string]bool
}

func (g *flakyGroups) Members(_ context.Context, id string) ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fail[id] {
		return nil, errors.New("slack: ratelimited")
	}
	return g.m[id], nil
}

// An edit into a two-person rule whose approvers and the card's are a user
// group on one side and two of its members on the other: UTWO, a member of
// the group and named by the other side, can approve, so the edit must be
// taken. Card approvers are the group ("group card"), or the rule the edit
// falls under names it ("group rule").
func TestEditIntoTwoPersonRuleAcrossAGroup(t *testing.T) {
	for name, policy := range map[string]string{
		"group card": `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [SSRE000001]}
`,
		"group rule": `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [SSRE000001], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002]}
`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, backends(t)[0])
			w.policy = policy
			w.cfg.Groups = &flakyGroups{m: map[string][]string{"SSRE000001": {"UONE000001", "UTWO000002", "UTHREE0003"}}}
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: []byte(`{"env":"prod"}`)})
			if err != nil {
				t.Fatalf("edit refused: %v", err)
			}
			res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Approve, Decider: "UTWO000002"})
			if err != nil || !res.Complete {
				t.Fatalf("UTWO's approval: %+v %v", res.Call.Status, err)
			}
		})
	}
}

// A group lookup that fails once while the second approval is judged eats
// that approval: the call stays pending with 2 of 2 approvals, and neither
