package slackapp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// unableApprover is an approver a call names who cannot decide it, and
// why: a user group with no members (or unknown to Slack), a deactivated
// or bot user, or one Slack does not know.
type unableApprover struct{ id, why string }

// whyUndecidable returns the approvers c names who cannot decide it, when
// that leaves fewer who can (able) than the decisions it needs (need): a user
// group that is empty or that Slack does not list, a user who is
// deactivated, a bot or unknown, under four eyes its requesters, whom the
// policy cannot tell apart from a user group's other members before it is
// listed, and, for a call whose deciders must see its conversation (see
// agent.Call.NeedsAudience), those who cannot. None when enough can, when
// its deciders are whoever sees its conversation, or when that cannot be
// told (a group or a user Slack did not answer for).
func (a *App) whyUndecidable(ctx context.Context, c agent.Call, need int) (unable []unableApprover, able int) {
	if len(c.Approvers) == 0 {
		return nil, 0
	}
	deciders := map[string]bool{}
	requester := func(u string) bool { return c.FourEyes && (u == c.Requester || slices.Contains(c.Requesters, u)) }
	// outside reports whether u cannot decide c for not seeing its
	// conversation, and whether that could be told.
	outside := func(u string) (out, known bool) {
		if !c.NeedsAudience {
			return false, true
		}
		sees, err := a.Audience().CanSee(ctx, c.Channel, u)
		return !sees, err == nil
	}
	for _, id := range c.Approvers {
		if requester(id) {
			unable = append(unable, unableApprover{id, "asked for the call, and four eyes keeps them from approving it"})
			continue
		}
		why, members, known := a.approverState(ctx, a.cachedLookup(), id)
		switch {
		case !known:
			return nil, 0
		case why != "":
			unable = append(unable, unableApprover{id, why})
		case !approvals.IsGroup(id):
			out, known := outside(id)
			switch {
			case !known:
				return nil, 0
			case out:
				unable = append(unable, unableApprover{id, seesNotWhy})
			default:
				deciders[id] = true
			}
		default:
			n, left := len(deciders), false
			for _, m := range members {
				if requester(m) {
					continue
				}
				out, known := outside(m)
				switch {
				case !known:
					return nil, 0
				case out:
					left = true
				default:
					deciders[m] = true
				}
			}
			switch {
			case len(deciders) > n:
			case left:
				unable = append(unable, unableApprover{id, "holds no one who can see this conversation and may approve the call, where the rule leaves it to those who can"})
			default:
				unable = append(unable, unableApprover{id, "holds no one but who asked for the call, whom four eyes keeps from approving it"})
			}
		}
	}
	if len(deciders) >= need {
		return nil, 0
	}
	return unable, len(deciders)
}

// seesNotWhy is why a user a call names cannot decide it when its
// deciders must see its conversation and they cannot.
const seesNotWhy = "cannot see this conversation, where the rule leaves the call to those who can"

// approverState says why approver id cannot decide anything ("" when it
// can): a user group that is empty or that Slack does not know, a user
// who is deactivated, a bot (this bot among them) or unknown. A user
// group's members are returned, but the bot. known is false when that
// cannot be told: Slack did not answer.
func (a *App) approverState(ctx context.Context, look approverLookup, id string) (why string, members []string, known bool) {
	if approvals.IsGroup(id) {
		members, err := look.members(ctx, id)
		switch {
		case unknownTo(err, "no_such_subteam"):
			// As a click's look-up of its members: a disabled group is
			// not listed either.
			return "is not a user group Slack lists (unknown, or disabled)", nil, true
		case err != nil:
			return "", nil, false
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
	case unknownTo(err, "user_not_found"):
		return "is not a user Slack knows", nil, true
	case err != nil:
		return "", nil, false
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
			if ctx.Err() != nil {
				return // the shutdown began
			}
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

// unknownTo reports whether err is Slack's answer that it knows no such
// user or group (code: user_not_found, no_such_subteam), not a failure to
// ask it nor another error it named (internal_error, missing_scope,
// user_not_visible...), after which it cannot be told.
func unknownTo(err error, code string) bool {
	e, named := errors.AsType[slack.SlackErrorResponse](err)
	return named && e.Err == code
}

// tellUndecidableLater checks, off the turn that paused c, whether its
// approvers can decide it (see tellUndecidable): the look-ups may wait on
// Slack, and a click's resume waits for the turn. A call whose deciders
// are whoever sees its conversation, naming none, needs no look-up, and
// gets no goroutine.
func (a *App) tellUndecidableLater(ctx context.Context, channel, thread string, c agent.PendingCall) {
	if len(c.Approvers) == 0 {
		return
	}
	// It ends as the shutdown starts: nothing waits on it.
	base := a.checks
	if base == nil {
		base = context.WithoutCancel(ctx)
	}
	nctx, cancel := context.WithTimeout(base, undecidableWait)
	a.spawn(nctx, "undecidable", func(ctx context.Context) {
		defer cancel()
		a.tellUndecidable(ctx, channel, thread, c)
	})
}

// undecidableWait bounds the look-ups of a paused call's approvers.
const undecidableWait = time.Minute

// tellUndecidable tells the thread, and the log, that the approvers the
// call c, just paused, names cannot give the approvals it needs as things
// stand (see whyUndecidable): it would wait unseen until it expires.
// Membership can change meanwhile, so the call stays pending.
func (a *App) tellUndecidable(ctx context.Context, channel, thread string, c agent.PendingCall) {
	// One answer settles a question, whatever its rule's count.
	need := max(1, c.MinApprovals)
	if c.Human {
		need = 1
	}
	unable, able := a.whyUndecidable(ctx, c.Call, need)
	if len(unable) > 0 {
		whys := make([]string, len(unable))
		for i, u := range unable {
			whys[i] = fmt.Sprintf("%s %s", u.id, u.why)
		}
		a.log.Error("the approvers a call names cannot give the approvals it needs: it waits until it expires unless the policy or Slack changes",
			"call", c.ID, "rule", c.RuleID, "approvers", c.Approvers, "can_decide", able, "needed", need, "why", whys)
		a.post(ctx, channel, thread, UndecidableText(c.Tool, c.RuleID, c.Human, c.ExpiresAt, unable, able, need))
	}
	a.log.Debug("checked whether a paused call's approvers can decide it", "call", c.ID, "undecidable", len(unable) > 0)
}
