package slackapp

import (
	"context"
	"errors"
	"fmt"
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
	switch err := a.mayDecide(ctx, c, user); {
	case errors.Is(err, errNotInConversation):
		return NotInConversationText()
	case errors.Is(err, errOutsider):
		return OutsiderText()
	case err != nil:
		text, _ := a.refusalFor(ctx, c, user, err)
		return text
	}
	return ""
}

// errNotInConversation refuses someone who would decide a call open to its
// conversation without seeing it, errOutsider an outsider (see outsiders).
var (
	errNotInConversation = errors.New("not in the conversation")
	errOutsider          = errors.New("of another organisation")
)

// mayDecide checks that user may decide the pending call c, as the agent
// checks on a decision: under the approvers it names (authorizeNamed),
// and, for a call open to its conversation, as someone of this workspace
// (errOutsider otherwise) who can see it (errNotInConversation).
func (a *App) mayDecide(ctx context.Context, c agent.Call, user string) error {
	if err := a.authorizeNamed(ctx, c, user); err != nil {
		return err
	}
	if len(namedDeciders(c)) == 0 {
		if a.outsiders.has(user) {
			return errOutsider
		}
		ok, err := a.canSee(ctx, c.Channel, user)
		if err != nil {
			return fmt.Errorf("%w (%w): %w", approvals.ErrNotApprover, approvals.ErrUnverified, err)
		}
		if !ok {
			return errNotInConversation
		}
	}
	return nil
}

// maySee reports whether user may see the call c in full: someone who
// may decide it under its named approvers without seeing the
// conversation, or someone who can see its conversation now (a requester
// who left a private channel no longer sees what goes on in it).
func (a *App) maySee(ctx context.Context, c agent.Call, user string) bool {
	ok, err := a.maySeeChecked(ctx, c, user)
	return ok && err == nil
}

// maySeeChecked is maySee, with the error of a lookup that could not say
// whether user can see the conversation (Slack did not list its members).
func (a *App) maySeeChecked(ctx context.Context, c agent.Call, user string) (bool, error) {
	if len(namedDeciders(c)) > 0 && a.authorizeNamed(ctx, c, user) == nil {
		return true, nil
	}
	return a.canSee(ctx, c.Channel, user)
}

// authorizeNamed checks that user may decide c under the approvers it
// names, as the agent checks a decision (with its four eyes): those shown
// and, for a call with an edit, the card's rule's too (an edit's rule may
// name people the card's does not). A call decided with an edit, or
// after one, is seen by the same people as the edit was (see
// agent.Call.Approvers). Whether a call open to its conversation needs
// user in it is checked apart (see namedDeciders).
func (a *App) authorizeNamed(ctx context.Context, c agent.Call, user string) error {
	who := approvals.Approvable{Approvers: c.Approvers, FourEyes: c.FourEyes, Requester: c.Requester, Requesters: c.Requesters}
	if err := approvals.Authorize(ctx, who, user, a.Groups()); err != nil {
		return err
	}
	if !byEdit(c) || len(c.CardApprovers) == 0 {
		return nil
	}
	who.Approvers = c.CardApprovers
	return approvals.Authorize(ctx, who, user, a.Groups())
}

// byEdit reports whether the approvers c shows may be an edit's, whom a
// decider must be among as well as the card's (CardApprovers): the call's
// arguments are a pending edit, or its approvers differ from the card's
// (the edit it was decided with, or after).
func byEdit(c agent.Call) bool {
	return c.Edited || len(c.CardApprovers) > 0 && !slices.Equal(c.Approvers, c.CardApprovers)
}

// deciders are those c names who may decide it (see authorizeNamed), user
// groups expanded for an edit, whose rule and the card's must both admit
// them; none when its deciders must be in the conversation.
func (a *App) deciders(ctx context.Context, c agent.Call) []string {
	named := namedDeciders(c)
	if !byEdit(c) || len(named) == 0 {
		return named
	}
	var out []string
	for _, u := range a.expand(ctx, named) {
		if a.authorizeNamed(ctx, c, u) == nil {
			out = append(out, u)
		}
	}
	return out
}

// namedDeciders are the approvers c names who may decide it without seeing
// its conversation; none when its deciders must be in the conversation
// (see agent.Call.NeedsAudience), as the agent checks on every decision.
func namedDeciders(c agent.Call) []string {
	if c.NeedsAudience {
		return nil
	}
	return c.Approvers
}

// OutsiderText answers someone of another organisation, met in a shared
// channel, who would decide a call open to the people of the conversation.
func OutsiderText() string {
	return "This call can be decided by the people of this workspace in the conversation; you are a guest from another organisation, so it isn't yours to decide. Nothing changed."
}

// NotInConversationText answers someone who asked for a call in a
// conversation they cannot see.
// UnverifiedText answers a decision refused because Slack did not say
// whether its decider may make it (who is in a user group, or in the
// conversation).
func UnverifiedText() string {
	return "I couldn't check with Slack whether you may decide this call, so nothing changed. Please try again in a moment."
}

// NotInConversationText answers someone who may not see a call.
func NotInConversationText() string {
	return "This call belongs to a conversation you are not part of, and you are not one of its approvers, so I can't show it to you. Nothing changed."
}
