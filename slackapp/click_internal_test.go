package slackapp

import (
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// A click Slack delivered again is taken for its first delivery's
// decision only when the refusal names the clicker's own decision of the
// same kind.
func TestClickMadeBefore(t *testing.T) {
	decidedBy := func(user string, kind approvals.Kind) error {
		return fmt.Errorf("decide c1: %w", &approvals.RefusedError{Err: approvals.ErrAlreadyDecided, DecidedBy: user, Kind: kind})
	}
	retried := click{user: "U1", retried: true}
	for _, tt := range []struct {
		name string
		c    click
		err  error
		kind approvals.Kind
		res  agent.DecideResult
		want bool
	}{
		{"first delivery", click{user: "U1"}, decidedBy("U1", approvals.Approve), approvals.Approve, agent.DecideResult{}, false},
		{"own approval again", retried, decidedBy("U1", approvals.Approve), approvals.Approve, agent.DecideResult{}, true},
		{"own always-allow again", retried, decidedBy("U1", approvals.Remember), approvals.Remember, agent.DecideResult{}, true},
		{"deny after own approval", retried, decidedBy("U1", approvals.Approve), approvals.Refuse, agent.DecideResult{}, false},
		{"someone else's decision", retried, decidedBy("U2", approvals.Approve), approvals.Approve, agent.DecideResult{}, false},
		{"own approval counted", retried, fmt.Errorf("x: %w", approvals.ErrAlreadyApproved), approvals.Approve, agent.DecideResult{}, true},
		{"deny after own counted approval", retried, fmt.Errorf("x: %w", approvals.ErrAlreadyApproved), approvals.Refuse, agent.DecideResult{}, false},
		{"another refusal", retried, approvals.ErrNotApprover, approvals.Approve, agent.DecideResult{}, false},
		{"own edit again", retried, decidedBy("U1", approvals.Edit), approvals.Edit, agent.DecideResult{}, true},
		{"own edit that changed nothing, taken as an approval, again", retried, decidedBy("U1", approvals.Approve), approvals.Edit, agent.DecideResult{EditUnchanged: true}, true},
		{"edit after own approval", retried, decidedBy("U1", approvals.Approve), approvals.Edit, agent.DecideResult{}, false},
		{"own edit counted", retried, fmt.Errorf("x: %w", approvals.ErrAlreadyApproved), approvals.Edit, agent.DecideResult{}, true},
	} {
		if got := tt.c.madeBefore(tt.err, tt.kind, tt.res); got != tt.want {
			t.Errorf("%s: madeBefore = %v, want %v", tt.name, got, tt.want)
		}
	}
}
