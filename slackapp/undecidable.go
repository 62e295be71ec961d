package slackapp

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// unableApprover is an approver a call names who cannot decide it, and
// why: a user group with no members (or unknown to Slack), a deactivated
// or bot user, or one Slack does not know.
type unableApprover struct{ id, why string }

// whyUndecidable returns the approvers c names who cannot decide it, when
// that leaves fewer who can than the approvals it needs: a user group
// that is empty or that Slack does not know, a user who is deactivated, a
// bot or unknown, and, under four eyes, its requesters, whom the policy
// cannot tell apart from a user group's other members before it is
// listed. None when enough can, when its deciders are whoever sees its
// conversation, or when that cannot be told (a group that cannot be
// listed, a user who cannot be looked up, count as able to decide).
func (a *App) whyUndecidable(ctx context.Context, c agent.Call) []unableApprover {
	named := namedDeciders(c)
	if len(named) == 0 {
		return nil
	}
	var unable []unableApprover
	able := map[string]bool{}
	requester := func(u string) bool { return c.FourEyes && (u == c.Requester || slices.Contains(c.Requesters, u)) }
	for _, id := range named {
		if requester(id) {
			unable = append(unable, unableApprover{id, "asked for the call, and four eyes keeps them from approving it"})
			continue
		}
		why, members, known := a.approverState(ctx, a.cachedLookup(), id)
		switch {
		case !known:
			return nil
		case why != "":
			unable = append(unable, unableApprover{id, why})
		case !approvals.IsGroup(id):
			able[id] = true
		default:
			n := len(able)
			for _, m := range members {
				if !requester(m) {
					able[m] = true
				}
			}
			if len(able) == n {
				unable = append(unable, unableApprover{id, "holds no one but who asked for the call, whom four eyes keeps from approving it"})
			}
		}
	}
	if len(able) >= max(1, c.MinApprovals) {
		return nil
	}
	return unable
}

// approverState says why approver id cannot decide anything ("" when it
// can): a user group that is empty or that Slack does not know, a user
// who is deactivated, a bot (this bot among them) or unknown. A user
// group's members are returned, but the bot. known is false when that
// cannot be told: Slack did not answer.
func (a *App) approverState(ctx context.Context, look approverLookup, id string) (why string, members []string, known bool) {
	if approvals.IsGroup(id) {
		members, err := look.members(ctx, id)
		switch {
		case err != nil && !slackSays(err):
			return "", nil, false
		case err != nil:
			return "is not a user group Slack knows", nil, true
		}
		members = slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == a.botUserID })
		if len(members) == 0 {
			return "has no members", nil, true
		}
		return "", members, true
	}
	if id == a.botUserID {
		return "is a bot", nil, true
	}
	u, err := look.user(ctx, id)
	switch {
	case err != nil && !slackSays(err):
		return "", nil, false
	case err != nil:
		return "is not a user Slack knows", nil, true
	case u.deactivated:
		return "is deactivated", nil, true
	case u.bot:
		return "is a bot", nil, true
	}
	return "", nil, true
}

// approverLookup looks up a user group's members and a user.
type approverLookup struct {
	members func(ctx context.Context, id string) ([]string, error)
	user    func(ctx context.Context, id string) (userFacts, error)
}

// cachedLookup looks up through the caches clicks use.
func (a *App) cachedLookup() approverLookup {
	return approverLookup{members: a.groups.Members, user: a.audience.user}
}

// freshLookup asks Slack, keeping nothing: a check of every approver the
// policy names does not fill the caches with people no call awaits.
func (a *App) freshLookup() approverLookup {
	return approverLookup{
		members: func(ctx context.Context, id string) ([]string, error) {
			return a.api.GetUserGroupMembersContext(ctx, id)
		},
		user: func(ctx context.Context, id string) (userFacts, error) {
			u, err := a.api.GetUserInfoContext(ctx, id)
			if err != nil {
				return userFacts{}, err
			}
			return factsOf(u), nil
		},
	}
}

// unableNamed returns the approvers among ids who cannot decide anything
// (see approverState), looked up with look; those that cannot be told are
// left out.
func (a *App) unableNamed(ctx context.Context, look approverLookup, ids []string) []unableApprover {
	var out []unableApprover
	for _, id := range ids {
		if why, _, _ := a.approverState(ctx, look, id); why != "" {
			out = append(out, unableApprover{id, why})
		}
	}
	return out
}

// checkApprovers logs an error for each approver the policy's rules name
// who cannot decide anything (see approverState), so a typo in an id, an
// empty user group or someone who left is found at start, not when a
// call waits on them.
func (a *App) checkApprovers(ctx context.Context) {
	rules, err := a.policy.Rules(ctx)
	if err != nil {
		a.log.Warn("list the policy's rules to check their approvers", "err", err)
		return
	}
	seen := map[string][]unableApprover{}
	for _, r := range rules {
		for _, id := range r.Approvers {
			u, ok := seen[id]
			if !ok {
				u = a.unableNamed(ctx, a.freshLookup(), []string{id})
				seen[id] = u
			}
			for _, u := range u {
				a.log.Error("a policy rule names an approver who cannot decide: calls it asks for wait on the others, or until they expire", "rule", r.ID, "approver", u.id, "why", u.why)
			}
		}
	}
}

// slackSays reports whether err is an error Slack named in its answer (a
// user or group it does not know), not a failure to ask it.
func slackSays(err error) bool {
	_, named := errors.AsType[slack.SlackErrorResponse](err)
	return named
}

// tellUndecidable tells the thread, and the log, that no one can decide
// the call c, just paused, as things stand (see whyUndecidable): it would
// wait unseen until it expires. Membership can change meanwhile, so the
// call stays pending.
func (a *App) tellUndecidable(ctx context.Context, channel, thread string, c agent.PendingCall) {
	unable := a.whyUndecidable(ctx, c.Call)
	if len(unable) == 0 {
		return
	}
	whys := make([]string, len(unable))
	for i, u := range unable {
		whys[i] = fmt.Sprintf("%s %s", u.id, u.why)
	}
	a.log.Error("no approver named can decide a call: it waits until it expires unless the policy or Slack changes",
		"call", c.ID, "rule", c.RuleID, "approvers", c.Approvers, "why", whys)
	a.post(ctx, channel, thread, UndecidableText(c.Tool, c.RuleID, c.Human, c.ExpiresAt, unable))
}
