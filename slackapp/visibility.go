package slackapp

import (
	"context"
	"slices"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// formRefusal says why user may not open a decision form (Reject, Edit,
// Reply) of the pending call c, or "" when they may: they must be allowed
// to decide it, as the agent checks on submit, so nobody fills in a form
// that will be refused. A call open to anyone in its conversation needs
// someone who can see that conversation.
func (a *App) formRefusal(ctx context.Context, c agent.Call, user string) string {
	who := approvals.Approvable{Approvers: c.Approvers, FourEyes: c.FourEyes, Requester: c.Requester, Requesters: c.Requesters}
	if err := approvals.Authorize(ctx, who, user, a.groups); err != nil {
		text, _ := refusalText(c, user, err)
		return text
	}
	if len(c.Approvers) == 0 && !a.inAudience(ctx, c.Channel, c.Requester, user) {
		return NotInConversationText()
	}
	return ""
}

// maySee reports whether user may see the call c in full: a requester,
// someone who may decide it under its named approvers, or someone who can
// see its conversation.
func (a *App) maySee(ctx context.Context, c agent.Call, user string) bool {
	if user == c.Requester || slices.Contains(c.Requesters, user) {
		return true
	}
	if len(c.Approvers) > 0 && approvals.Authorize(ctx, approvals.Approvable{Approvers: c.Approvers}, user, a.groups) == nil {
		return true
	}
	return a.inAudience(ctx, c.Channel, c.Requester, user)
}

// NotInConversationText answers someone who asked for a call in a
// conversation they cannot see.
func NotInConversationText() string {
	return "This call belongs to a conversation you are not part of, and you are not one of its approvers, so I can't show it to you. Nothing changed."
}
