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

// Card approvers are a user group; the rule the edit falls under names two
// of its members and needs two approvals. UTWO, a member of the group and
// named by the rule, can approve: the edit must be taken.
func TestEditIntoTwoPersonRuleWithAGroupCard(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [SSRE000001]}
`
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
}

// The reverse: card names users, the rule the edit falls under names a group.
func TestEditIntoATwoPersonGroupRule(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [SSRE000001], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002]}
`
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
}

// A group lookup that fails once while the second approval is judged eats
// that approval: the call stays pending with 2 of 2 approvals, and neither
