package slackapp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
)

// ActionRevokeRule is the Home tab's button that revokes one of the
// user's standing rules; its value is the standing rule's id.
const ActionRevokeRule = "revoke_rule"

// maxHomeRules bounds the standing rules listed on a Home tab.
const maxHomeRules = 10

// standingIDRE is the shape of a standing rule id a Revoke button may carry.
var standingIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$`)

// revokeStanding revokes the standing rule id for user: its creator may,
// and admins may revoke anyone's. An id that is not listed may still name
// a record that does not decode (see approvals.Engine.StandingRules): an
// admin may revoke it too, so that it can be deleted. It returns the
// answer to give.
func (a *App) revokeStanding(ctx context.Context, user, id string) string {
	rules, err := a.policy.StandingRules(ctx, "")
	if err != nil {
		return "I couldn't read the standing rules right now; nothing changed. Please try again."
	}
	var rule *approvals.StandingRule
	for i := range rules {
		if rules[i].ID == id {
			rule = &rules[i]
		}
	}
	noRule := fmt.Sprintf("There is no standing rule %s. Nothing changed.", inlineCode(id))
	if rule == nil || rule.CreatedBy != user {
		if refusal, ok := a.requireAdmin(ctx, user, adminChange); !ok {
			if strings.HasPrefix(refusal, adminUnchecked) {
				// An admin whose check failed is told so, not that
				// the rule is not theirs or not there.
				return refusal
			}
			if rule == nil {
				return noRule
			}
			return fmt.Sprintf("Only %s, who made standing rule %s, or an admin can revoke it. Nothing changed.", userRef(rule.CreatedBy, "its creator"), inlineCode(id))
		}
	}
	err = a.policy.Revoke(ctx, user, id)
	switch {
	case errors.Is(err, approvals.ErrUnknownRule):
		return noRule
	case errors.Is(err, approvals.ErrUnconfirmed):
		return fmt.Sprintf("I couldn't tell whether standing rule %s was revoked: %s. `/approvals rules list` shows whether it is still there; revoking it again is safe.", inlineCode(id), Escape(err.Error()))
	case err != nil && !madeAnyway(err):
		return "I couldn't revoke the rule: " + Escape(err.Error())
	case rule == nil:
		return fmt.Sprintf("Revoked standing rule %s.", inlineCode(id)) + notAudited(err)
	}
	where := channelRef(rule.Channel)
	if rule.CreatedBy != user && !a.inAudience(ctx, rule.Channel, user) {
		// An admin revoking a rule of a conversation they are not
		// part of: named no more than the rules list named it.
		where = unseenChannel
	}
	// Others of the channel's rules for the tool (made at the same
	// moment by two approvers, or for other arguments) still allow it.
	var others []string
	for _, r := range rules {
		if r.ID != id && r.Tool == rule.Tool && r.Channel == rule.Channel {
			others = append(others, inlineCode(r.ID))
		}
	}
	if len(others) > 0 {
		them := "it"
		if len(others) > 1 {
			them = "them"
		}
		return fmt.Sprintf("Revoked standing rule %s, but %s in %s may still be allowed by standing rule %s: revoke %s too to have it ask again.",
			inlineCode(id), inlineCode(rule.Tool), where, joinAnd(others, "and"), them) + notAudited(err)
	}
	return fmt.Sprintf("Revoked standing rule %s: %s in %s asks again.", inlineCode(id), inlineCode(rule.Tool), where) + notAudited(err)
}

// revokeFromHome handles a Revoke button of the Home tab, then shows the
// tab again without the rule, in its turn with the other publishes of the
// tab (see showHome).
func (a *App) revokeFromHome(ctx context.Context, c click) {
	if !standingIDRE.MatchString(c.value) {
		a.tell(ctx, c.user, c.channel, c.thread, InvalidRequestText())
		return
	}
	a.tell(ctx, c.user, c.channel, c.thread, a.revokeStanding(ctx, c.user, c.value))
	a.showHome(ctx, c.user, "")
}

// channelRef links a channel id, or shows other text in a code span.
func channelRef(id string) string {
	if channelIDRE.MatchString(id) {
		return "<#" + id + ">"
	}
	return inlineCode(id)
}

// StandingRuleBlocks lists a user's standing rules for the Home tab, each
// with a Revoke button, in at most room blocks (nothing when room is too
// small for the title and one rule).
func StandingRuleBlocks(rules []approvals.StandingRule, room int) []slack.Block {
	if room < 3 {
		return nil
	}
	blocks := []slack.Block{
		slack.NewDividerBlock(),
		section(fmt.Sprintf("*Your standing rules* (%d)", len(rules))),
	}
	if len(rules) == 0 {
		return append(blocks, contextBlock("Calls you allow with \"Always allow here\" run without asking; they are listed here to revoke."))
	}
	max := min(maxHomeRules, room-len(blocks)-1)
	for i, r := range rules {
		if i == max {
			blocks = append(blocks, contextBlock(fmt.Sprintf("…and %d more. `/approvals rules list` in a channel lists its rules.", len(rules)-i)))
			break
		}
		text := inlineCode(r.Tool) + " allowed in " + channelRef(r.Channel)
		if r.Fingerprint != "" {
			text += " for exactly the arguments " + inlineCode(r.Fingerprint[:min(12, len(r.Fingerprint))])
		}
		if r.When != "" {
			text += " when " + inlineCode(r.When)
		}
		if !r.ExpiresAt.IsZero() {
			text += ", until " + slackDate(r.ExpiresAt)
		}
		text, _ = truncate(text, maxSectionText)
		revoke := button(ActionRevokeRule, "Revoke", r.ID).WithStyle(slack.StyleDanger)
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(text), nil, slack.NewAccessory(revoke)))
	}
	return blocks
}
