package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// countedAudience is an Audience that counts its lookups; while fail is
// set, the lookup of anyone but the editor UONE000001 fails.
type countedAudience struct {
	audience
	fail    atomic.Bool
	lookups atomic.Int64
}

func (a *countedAudience) CanSee(ctx context.Context, channel, user string) (bool, error) {
	a.lookups.Add(1)
	if a.fail.Load() && user != "UONE000001" {
		return false, errors.New("members lookup failed")
	}
	return a.audience.CanSee(ctx, channel, user)
}

// namedCard's card, for a staging restart, names four approvers, the
// requester among them; prod names none (anyone in the conversation, the
// requester left out) and needs two approvals; qa names two of the card's
// approvers and needs two approvals.
const namedCard = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, four_eyes: true, min_approvals: 2}
    - {id: qa, tool: restart, when: 'args.env == "qa"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [UREQUESTER, UONE000001, UTWO000002, UTHREE0003]}
`

// openCard's card, for a staging restart, names no approvers; prod names
// three and needs two approvals.
const openCard = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, UTWO000002, UTHREE0003], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask}
`

// An edit whose count only people who can see the conversation may
// complete (its new rule names no approvers, or its card's rule names
// none) counts only the approvers in the conversation besides the editor:
// with none of them left it is refused at once, saying so, rather than
// left pending until it expires; with one it is taken, and that one
// completes it. An edit whose card and rule both name approvers counts
// them wherever they are, looking no one up.
func TestEditCompletableOnlyInTheConversation(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		for _, tc := range []struct {
			name, policy, env string
			members           []string
			fail              bool
			// refused is set when the edit must be refused; otherwise
			// completer's approval completes it, and the edit looks up
			// no more than lookups people.
			refused   bool
			completer string
			lookups   int64
		}{
			{name: "into an open rule, no one else in the conversation", policy: namedCard, env: "prod",
				members: []string{"UREQUESTER", "UONE000001"}, refused: true},
			{name: "into an open rule, an approver of the card in the conversation", policy: namedCard, env: "prod",
				members: []string{"UREQUESTER", "UONE000001", "UTHREE0003"}, completer: "UTHREE0003", lookups: 2},
			{name: "into a named rule from an open card, no one else in the conversation", policy: openCard, env: "prod",
				members: []string{"UREQUESTER", "UONE000001"}, refused: true},
			{name: "into a named rule from an open card, an approver of the rule in the conversation", policy: openCard, env: "prod",
				members: []string{"UREQUESTER", "UONE000001", "UTWO000002"}, completer: "UTWO000002", lookups: 3},
			{name: "into a named rule from a named card, its approver outside the conversation", policy: namedCard, env: "qa",
				members: []string{"UREQUESTER", "UONE000001"}, completer: "UTWO000002", lookups: 0},
			{name: "into an open rule, the others' membership not known", policy: namedCard, env: "prod",
				members: []string{"UREQUESTER", "UONE000001", "UTHREE0003"}, fail: true, completer: "UTHREE0003", lookups: 2},
		} {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = tc.policy
				aud := &countedAudience{audience: audience{"C1": tc.members}}
				w.cfg.Audience = aud
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
				aud.lookups.Store(0)
				aud.fail.Store(tc.fail)
				edit := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"` + tc.env + `"}`)}
				res, err := a.Decide(ctx, edit)
				aud.fail.Store(false)
				if tc.refused {
					if !errors.Is(err, agent.ErrBadDecision) || !strings.Contains(err.Error(), "besides you only 0 person(s) may give one") || !strings.Contains(err.Error(), "conversation") {
						t.Fatalf("an edit only the editor could complete in the conversation: %v, want it refused, saying so", err)
					}
					got, err := a.Call(ctx, p.ID)
					must(t, err)
					if got.Fingerprint != p.Fingerprint || got.Status != agent.CallPending || got.Edited {
						t.Errorf("the refused edit changed the call: %+v", got.Call)
					}
					return
				}
				if err != nil || res.Call.Status != agent.CallPending || !res.Call.Edited {
					t.Fatalf("an edit someone else may complete: got %+v, %v; want it pending on the edited arguments", res.Call, err)
				}
				// When the new rule asks someone to decide, the editor is
				// looked up as authorize looks up a decider, and then only
				// those others it takes to know the edit can be completed.
				if n := aud.lookups.Load(); n > tc.lookups {
					t.Errorf("the edit looked up the audience %d times, want at most %d", n, tc.lookups)
				}
				res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Approve, Decider: tc.completer})
				if err != nil || !res.Complete {
					t.Fatalf("the approval of %s after the edit: got %+v, %v; want it to complete the call", tc.completer, res.Call, err)
				}
			})
		}
	}
}
