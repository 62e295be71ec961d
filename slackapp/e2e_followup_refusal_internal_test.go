package slackapp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// A refusal names who may decide the call: for a call whose deciders must
// be in the conversation besides being named (an edit into a rule that
// names no approvers, or a card whose rule names none edited into one that
// names some), those named who are in the conversation.
func TestRefusalNamesWhoMayDecide(t *testing.T) {
	refused := fmt.Errorf("decide c1: %w", approvals.ErrNotApprover)
	for _, tc := range []struct {
		name string
		call agent.Call
		want []string
		not  []string
	}{
		{"named approvers", agent.Call{Approvers: []string{"UA", "UB"}},
			[]string{"It can be decided by <@UA>, <@UB>."}, []string{"conversation"}},
		{"edit into an open rule", agent.Call{Approvers: []string{"UA", "UB"}, CardApprovers: []string{"UA", "UB"}, Edited: true, NeedsAudience: true},
			[]string{"<@UA>", "<@UB>", "in the conversation"}, []string{"It can be decided by <@UA>, <@UB>."}},
		{"open card edited into a named rule", agent.Call{Approvers: []string{"UA"}, Edited: true, NeedsAudience: true},
			[]string{"<@UA>", "in the conversation"}, nil},
		{"open to the conversation", agent.Call{NeedsAudience: true},
			[]string{"You are not an approver for this call, so nothing changed."}, []string{"decided by"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, result := refusalText(tc.call, "UX", refused)
			if result != "not_approver" {
				t.Errorf("result = %q, want not_approver", result)
			}
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("%q does not say %q", text, w)
				}
			}
			for _, w := range tc.not {
				if strings.Contains(text, w) {
					t.Errorf("%q says %q", text, w)
				}
			}
		})
	}
}
