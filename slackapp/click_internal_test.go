package slackapp

import (
	"fmt"
	"testing"

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
		want bool
	}{
		{"first delivery", click{user: "U1"}, decidedBy("U1", approvals.Approve), approvals.Approve, false},
		{"own approval again", retried, decidedBy("U1", approvals.Approve), approvals.Approve, true},
		{"own always-allow again", retried, decidedBy("U1", approvals.Remember), approvals.Remember, true},
		{"deny after own approval", retried, decidedBy("U1", approvals.Approve), approvals.Refuse, false},
		{"someone else's decision", retried, decidedBy("U2", approvals.Approve), approvals.Approve, false},
		{"own approval counted", retried, fmt.Errorf("x: %w", approvals.ErrAlreadyApproved), approvals.Approve, true},
		{"deny after own counted approval", retried, fmt.Errorf("x: %w", approvals.ErrAlreadyApproved), approvals.Refuse, false},
		{"another refusal", retried, approvals.ErrNotApprover, approvals.Approve, false},
	} {
		if got := tt.c.madeBefore(tt.err, tt.kind); got != tt.want {
			t.Errorf("%s: madeBefore = %v, want %v", tt.name, got, tt.want)
		}
	}
}
