package slackapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/slack-go/slack"
)

// Home tab layout bounds. An inbox entry takes 4 blocks and a request 1, so
// with the headings and notes the view stays under the 100-block limit.
const (
	maxHomeInbox    = 14
	maxHomeMine     = 20
	homeArgsPreview = 600
	homeMinePreview = 200
)

// HomeView renders a user's App Home tab: first their approver inbox, the
// pending calls they may decide, each with the same decision buttons as
// the card in the thread (except Cancel, which is the requester's), and the
// call's channel when its card's CopyOf gives it (see inboxEntry); then
// their own requests still waiting for a decision, each with a Cancel
// button. Cards that are not pending are skipped. Each list shows its
// first entries in the order given and says "and N more" for the rest, and
// each has an empty state. The view is within the 100-block limit.
func HomeView(inbox []Card, mine []Card) slack.HomeTabViewRequest {
	return homeViewOf(inbox, mine, 0)
}

// homeViewOf is HomeView of an inbox read from the oldest checked pending
// calls, when that is not all of them (0: all were): it says so, as an
// empty inbox may have calls past them waiting.
func homeViewOf(inbox []Card, mine []Card, checked int) slack.HomeTabViewRequest {
	inbox, mine = pendingOnly(inbox), pendingOnly(mine)

	blocks := []slack.Block{
		slack.NewHeaderBlock(plain("Approvals", maxHeaderText)),
		section(fmt.Sprintf("*Waiting for your decision* (%d)", len(inbox))),
	}
	switch {
	case checked > 0:
		blocks = append(blocks, contextBlock(fmt.Sprintf("More calls are pending than this tab reads: these are from the oldest %d. Calls waiting for you past them are not listed; `/approvals pending` in a channel lists that channel's.", checked)))
	case len(inbox) == 0:
		blocks = append(blocks, contextBlock("Nothing is waiting for you. Calls you may approve appear here."))
	}
	for i, c := range inbox {
		if i == maxHomeInbox {
			blocks = append(blocks, contextBlock(fmt.Sprintf("…and %d more waiting for you. `/approvals pending` in a channel lists that channel's.", len(inbox)-i)))
			break
		}
		blocks = append(blocks, inboxEntry(c)...)
	}

	blocks = append(blocks,
		slack.NewDividerBlock(),
		section(fmt.Sprintf("*Your requests waiting for approval* (%d)", len(mine))),
	)
	if len(mine) == 0 {
		blocks = append(blocks, contextBlock("None of your requests is waiting for approval."))
	}
	for i, c := range mine {
		if i == maxHomeMine {
			blocks = append(blocks, contextBlock(fmt.Sprintf("…and %d more.", len(mine)-i)))
			break
		}
		blocks = append(blocks, mineEntry(c))
	}

	return slack.HomeTabViewRequest{
		Type:   slack.VTHomeTab,
		Blocks: slack.Blocks{BlockSet: blocks},
	}
}

// pendingOnly returns the cards that still wait for a decision.
func pendingOnly(cards []Card) []Card {
	var out []Card
	for _, c := range cards {
		if c.pending() {
			out = append(out, c)
		}
	}
	return out
}

// inboxEntry renders one call an approver may decide: a summary, the
// arguments (or question) cut short, the decision buttons and a divider.
// The Home tab is no channel: as on a copy of the card, CopyOf is the
// conversation's channel, which the summary names, and Always allow says
// that it applies there.
func inboxEntry(c Card) []slack.Block {
	var lines []string
	kind := "*Approval:* "
	if c.Human {
		kind = "*Question:* "
	}
	summary := kind + inlineCode(c.Tool) + " · requested by " + requesterRefs(c.Requester, c.Requesters)
	if c.CopyOf != "" {
		summary += " in " + channelRef(c.CopyOf)
	}
	lines = append(lines, summary)
	if c.RuleID != "" || c.Reason != "" {
		rule := "Rule"
		if c.RuleID != "" {
			rule += " " + inlineCode(c.RuleID)
		}
		if c.Reason != "" {
			rule += ": " + Escape(oneLine(c.Reason))
		}
		lines = append(lines, rule)
	}
	if c.FourEyes {
		lines = append(lines, ":eyes: Four-eyes: the requester cannot approve this call.")
	}
	if c.MinApprovals > 1 && !c.Human {
		lines = append(lines, approvalsText(c))
	}
	if age := ageLine(c); age != "" {
		lines = append(lines, age)
	}

	var detail string
	cut := false
	if c.Human {
		shown, warning := revealWarned(c.Question, "the question")
		detail, _ = fitQuoted(MarkdownToMrkdwn(shown), homeArgsPreview)
		detail += warning
	} else if pretty := prettyJSON(c.Args); pretty == "" || pretty == "{}" || pretty == "null" {
		detail = "_(no arguments)_"
	} else {
		shown, warning := revealWarned(pretty, "the arguments")
		detail, cut = codeBlock(codeBody(shown), homeArgsPreview)
		detail += warning
	}

	buttons := decisionButtons(c, "in the conversation's channel")
	buttons = buttons[:len(buttons)-1] // Cancel belongs to the requester.
	if cut {
		buttons = append(buttons, button(ActionViewArgs, "View full arguments", c.CallID))
	}
	return []slack.Block{
		section(strings.Join(lines, "\n")),
		section(detail),
		slack.NewActionBlock("", buttons...),
		slack.NewDividerBlock(),
	}
}

// mineEntry renders one of the user's own waiting requests, with a Cancel
// button.
func mineEntry(c Card) slack.Block {
	var lines []string
	line := inlineCode(c.Tool)
	if c.Human {
		line = "Question via " + line
	}
	who := cappedList(approverMentions(c.Approvers), ", ", maxListed)
	switch {
	case who != "":
	case c.InDM:
		who = "you, in your direct message with the bot"
	default:
		who = c.openAudience("the")
	}
	lines = append(lines, line+" · waiting on "+who)
	if c.Human {
		if q := strings.TrimSpace(c.Question); q != "" {
			line := oneLine(q)
			shown, n := revealHidden(line)
			// Converted as on the card: the model's Markdown left as it
			// is would be read as mrkdwn (a ``` opening a code block).
			q, _ = fitMrkdwn(MarkdownToMrkdwn(shown), homeMinePreview)
			lines = append(lines, quoteLines(q))
			if shown != line {
				lines = append(lines, hiddenWarning(n, "the question"))
			}
		}
	} else if compact := compactJSON(c.Args); compact != "" {
		shown, n := revealHidden(compact)
		args, _ := truncate(Escape(strings.ReplaceAll(shown, "`", "ˋ")), homeMinePreview)
		lines = append(lines, "`"+args+"`")
		if shown != compact {
			lines = append(lines, hiddenWarning(n, "the arguments"))
		}
	}
	if age := ageLine(c); age != "" {
		lines = append(lines, age)
	}
	text, _ := truncate(strings.Join(lines, "\n"), maxSectionText)
	cancel := button(ActionCancel, "Cancel request", c.CallID)
	return slack.NewSectionBlock(mrkdwn(text), nil, slack.NewAccessory(cancel))
}

// ageLine says how long a call has waited (live, as Slack renders relative
// dates) and when it expires; "" parts are left out.
func ageLine(c Card) string {
	var parts []string
	if !c.RequestedAt.IsZero() {
		parts = append(parts, ":stopwatch: Waiting since "+slackAgo(c.RequestedAt))
	}
	if !c.ExpiresAt.IsZero() {
		parts = append(parts, "expires "+slackDate(c.ExpiresAt))
	}
	return strings.Join(parts, " · ")
}

// compactJSON returns JSON without insignificant white space, raw input that
// does not parse on one line, and "" for empty input.
func compactJSON(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return oneLine(string(raw))
	}
	return buf.String()
}
