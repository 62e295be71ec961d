package agent_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// A reminder names only those of a card's approvers whom the policy as it
// is now lets approve the call: named by its rule, or in a group it names,
// as a decision is judged; everyone when the rule names no one or the
// policy cannot be read; no one when the policy now denies the call.
func TestStillApproversAreThoseThePolicyNamesNow(t *testing.T) {
	b := backends(t)[0]
	card := []string{"UAPPROVER1", "UOTHER2", "USRE000001", "SSRE000001", "SGONE00001"}
	c := agent.Call{Tool: "deploy", Args: json.RawMessage(`{"service":"api","version":"2"}`), Requester: "UREQUESTER", Channel: "C1"}
	for _, tt := range []struct {
		name, rule string
		want       []string
	}{
		{"the same rule", "approvers: [UAPPROVER1, UOTHER2, SSRE000001, SGONE00001]", card},
		{"one taken out, a group's member", "approvers: [UAPPROVER1, SSRE000001]", []string{"UAPPROVER1", "USRE000001", "SSRE000001"}},
		{"no one named", "reason: anyone here", card},
		{"denied now", "verdict: deny", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.Groups = &mutableGroups{m: map[string][]string{"SSRE000001": {"USRE000001"}}}
			verdict := "verdict: ask\n      "
			if strings.HasPrefix(tt.rule, "verdict") {
				verdict = ""
			}
			w.policy = "policy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      " + verdict + tt.rule + "\n"
			if got := w.agent().StillApprovers(t.Context(), c, card); !slices.Equal(got, tt.want) {
				t.Errorf("StillApprovers = %q, want %q", got, tt.want)
			}
		})
	}
}
