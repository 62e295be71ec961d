package slackapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
)

// Status is the state of an approval card.
type Status string

// Card states.
const (
	StatusPending   Status = "pending"
	StatusDecided   Status = "decided"
	StatusExpired   Status = "expired"
	StatusCancelled Status = "cancelled"
	// StatusUnsaved: the card was posted but its request could not be
	// saved, so nothing can decide it and nothing runs.
	StatusUnsaved Status = "unsaved"
)

// pastTense renders k for "This call was already …".
func pastTense(k approvals.Kind) string {
	switch k {
	case approvals.Approve:
		return "approved"
	case approvals.Edit:
		return "approved with edited arguments"
	case approvals.Refuse:
		return "denied"
	case approvals.Reject:
		return "rejected"
	case approvals.Respond:
		return "answered"
	case approvals.Remember:
		return "approved and allowed from now on"
	case approvals.Expire:
		return "expired"
	case approvals.Cancel:
		return "cancelled"
	}
	return "decided"
}

// Card is everything one approval card shows. It is plain data: CardBlocks
// renders it and keeps no reference to it.
//
// Model-authored fields (Args, Question, EditedArgs, OutputSummary) and
// anything typed by people (RejectReason, Answer) are escaped wherever they
// are shown, with their hidden characters written out (revealHidden;
// revealInProse for people's words). User ids (Requester, Decider) and
// Approvers are mentioned only when they are well-formed Slack ids.
type Card struct {
	// CallID is the opaque id of the tool call; it is the value of every
	// button on the card and must be at most 2000 characters.
	CallID string
	// Tool is the name of the tool the model wants to call.
	Tool string
	// Args are the call's arguments as canonical JSON. They are shown
	// pretty-printed; JSON that does not parse is shown as is.
	Args json.RawMessage
	// Requester is the Slack user id of the person whose turn made the call.
	Requester string
	// Requesters are everyone whose message that turn answers; when set,
	// the card names them all (four eyes forbids each).
	Requesters []string
	// RuleID and Reason name the policy rule that asked for approval.
	RuleID string
	Reason string
	// Approvers are the user (U…, W…) and user-group (S…) ids who may decide.
	// They are mentioned so they are notified; anything else is dropped.
	// Empty means anyone in the channel.
	Approvers []string
	// FourEyes means the requester may not approve their own call.
	FourEyes bool
	// NoAlwaysAllow marks an ask no standing rule may relax.
	NoAlwaysAllow bool
	// RequestedAt is when the call paused; ExpiresAt is when it expires.
	// Either may be zero.
	RequestedAt time.Time
	ExpiresAt   time.Time
	// Human marks an ask_human call: the card shows Question and a Reply
	// button instead of the arguments and Approve/Edit.
	Human    bool
	Question string

	// Status is the card's state; the zero value renders as pending.
	Status Status

	// MinApprovals is how many distinct approvers the call needs (0 or 1:
	// one); Approvals are the user ids counted so far, and ArgsEdited
	// says the arguments shown are an edit that restarted the count.
	MinApprovals int
	Approvals    []string
	ArgsEdited   bool

	// The decision, for a card that is no longer pending.
	Decision  approvals.Kind
	Decider   string // Slack user id
	DecidedAt time.Time
	// RejectReason is the reviewer's reason for a reject decision.
	RejectReason string
	// EditedArgs are the arguments an edit decision ran with.
	EditedArgs json.RawMessage
	// ExactAllow marks a Remember decision whose standing rule allows
	// these exact arguments only.
	ExactAllow bool
	// NoRule marks a Remember decision whose standing rule is not in
	// force when the card is drawn: it could not be saved (its replica
	// stopped first, or the store failed), or it was revoked or expired.
	NoRule bool
	// Answer is the human's reply to an ask_human call.
	Answer string
	// Outcome says what happened to the call after the decision, e.g. "ran",
	// "failed" or "not run"; OutputSummary is a short excerpt of the tool's
	// output. Both are optional.
	Outcome       string
	OutputSummary string

	// Preview is what the tool said the call would do (a diff, the request
	// to be sent), shown on a pending card; PreviewError why it could not
	// say. Both are tool output, escaped where shown.
	Preview      string
	PreviewError string

	// Sealed marks a copy read by people who may not see the call's
	// conversation (in APPROVALS_CHANNEL): it shows who asked what tool
	// under which rule, and the buttons, but none of the call's arguments,
	// question, preview or output, nor people's words about it; "View full
	// arguments" shows them to those who may see them. See Sealed.
	Sealed bool
	// CopyOf is, on a copy of the card outside the call's conversation (an
	// approver's DM, APPROVALS_CHANNEL), the conversation's channel, which
	// "Always allow here" applies to; "" on the conversation's card.
	CopyOf string
	// InDM marks a call made in a direct message with the bot, which only
	// its requester sees: with no approvers named, they decide it.
	InDM bool
}

// openAudience names who may decide c when it names no approvers: anyone
// in its channel (the channel named by which: "this" or "the"), or, in a
// direct message, its requester.
func (c Card) openAudience(which string) string {
	if c.InDM {
		return "the requester (no one else sees this direct message)"
	}
	return "anyone in " + which + " channel"
}

// Seal returns c as a sealed copy (see Card.Sealed).
func Seal(c Card) Card {
	c.Sealed = true
	c.Args, c.EditedArgs, c.Question, c.Answer, c.RejectReason = nil, nil, "", "", ""
	c.Preview, c.PreviewError, c.OutputSummary = "", "", ""
	return c
}

// sealedText stands for the arguments or question on a sealed card.
func sealedText(c Card) string {
	what := "*Arguments*"
	if c.Human {
		what = "*Question*"
	}
	return what + "\n_Not shown here: this channel may include people who cannot see the conversation. *View full arguments* shows them to its approvers and its members._"
}

// pending reports whether c still waits for a decision.
func (c Card) pending() bool {
	return c.Status == "" || c.Status == StatusPending
}

// questionCutNote follows a question cut short on a card.
const questionCutNote = "\n_The whole question is shown when you reply._"

// maxOutputSummary bounds the tool output excerpt on a decided card.
const maxOutputSummary = 1500

// maxCardReason bounds a rule's reason on a card, an admin's text that
// nothing else bounds, and the outcome, which may quote it ("not run:
// policy now denies: ..."), so that with the longest arguments and edit a
// decided card stays a message Slack takes. `/approvals policy list`
// shows a reason whole.
const maxCardReason = 500

// CardBlocks renders an approval card. A pending card has the decision
// buttons (Approve, Deny, Reject with reason, Edit arguments, Always allow
// here, Why?, Cancel; for an ask_human call Reply, Deny, Reject with
// reason, Why?, Cancel), and the effect preview when the tool gave one (cut
// to maxCardPreview, with "View full preview" opening PreviewModal) or why
// it could not. A card in any other state has no decision buttons and says
// who decided what and when, or that it expired or was cancelled, followed
// by the outcome. A call that needs several approvers (MinApprovals > 1)
// shows the count so far, stays pending with its buttons until the count
// is met, and offers no Always allow. When the arguments do not fit in one
// section they are cut and a read-only "View full arguments" button opens
// ArgsModal.
//
// The result is within Block Kit limits for a message: at most 50 blocks,
// section texts of at most 3000 characters and button values of at most
// 2000 (given a CallID within that limit).
func CardBlocks(c Card) []slack.Block {
	blocks := []slack.Block{
		slack.NewHeaderBlock(plain(cardTitle(c), maxHeaderText)),
		section(requestText(c)),
	}

	if c.Sealed {
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(sealedText(c)), nil, slack.NewAccessory(button(ActionViewArgs, "View full arguments", c.CallID))))
	} else if c.Human {
		const title = "*Question*\n"
		shown, warning := revealWarned(c.Question, "the question")
		q, cut := fitQuoted(MarkdownToMrkdwn(shown), maxSectionText-textLen(title)-textLen(questionCutNote)-textLen(warning))
		if cut {
			q += questionCutNote
		}
		blocks = append(blocks, section(title+q+warning))
	} else {
		text, cut := argsSection("*Arguments*", c.Args)
		var acc *slack.Accessory
		switch {
		case cut && c.editedDecided():
			// View full arguments shows the edited ones (below).
			acc = slack.NewAccessory(button(ActionViewModelArgs, "View full arguments", c.CallID))
		case cut:
			acc = slack.NewAccessory(button(ActionViewArgs, "View full arguments", c.CallID))
		}
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(text), nil, acc))
	}

	if c.pending() {
		if b := previewBlock(c); b != nil {
			blocks = append(blocks, b)
		}
		if !c.ExpiresAt.IsZero() {
			blocks = append(blocks, contextBlock(":hourglass_flowing_sand: Expires "+slackDate(c.ExpiresAt)))
		}
		blocks = append(blocks, approvalsBlocks(c)...)
		blocks = append(blocks, slack.NewActionBlock("", cardButtons(c)...))
		return blocks
	}

	blocks = append(blocks, slack.NewDividerBlock(), section(statusText(c)))
	blocks = append(blocks, approvalsBlocks(c)...)
	if c.editedDecided() {
		text, cut := argsSection("*Edited arguments*", c.EditedArgs)
		var acc *slack.Accessory
		if cut {
			acc = slack.NewAccessory(button(ActionViewArgs, "View full arguments", c.CallID))
		}
		blocks = append(blocks, slack.NewSectionBlock(mrkdwn(text), nil, acc))
	}
	if o := outcomeText(c); o != "" {
		blocks = append(blocks, section(o))
	}
	return blocks
}

// editedDecided reports whether c is decided with an edit whose arguments
// it shows beside the model's.
func (c Card) editedDecided() bool {
	return c.Status == StatusDecided && c.Decision == approvals.Edit && !c.Human && !c.Sealed
}

// CardText is the notification text to post with a card's blocks: what is
// asked and, for a pending card, of whom. Slack shows it in notifications
// and in clients that cannot render blocks.
func CardText(c Card) string {
	tool := inlineCode(c.Tool)
	if !c.pending() {
		return tool + ": " + firstLine(statusText(c))
	}
	text := "Approval needed for " + tool
	if c.Human {
		text = "Question from " + tool
	}
	if list := approverList(c.Approvers, ", "); list != "" {
		text += " from " + list
	}
	return text
}

// firstLine returns s up to its first line break.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// cardTitle is the header of a card: the tool name, and what is asked.
func cardTitle(c Card) string {
	if c.Human {
		return "Question: " + c.Tool
	}
	return "Approval: " + c.Tool
}

// requestText describes who asked, under which rule, and who may decide.
// Long lists of requesters and approvers name the first maxListed and
// count the rest; CardText, the message's notification text, names every
// approver.
func requestText(c Card) string {
	var lines []string
	lines = append(lines, "Requested by "+requesterRefs(c.Requester, c.Requesters)+" · tool "+inlineCode(c.Tool))
	if c.RuleID != "" || c.Reason != "" {
		rule := "*Rule:*"
		if c.RuleID != "" {
			rule += " " + inlineCode(c.RuleID)
		}
		if c.Reason != "" {
			if c.RuleID != "" {
				rule += " —"
			}
			// Cut once escaped: an entity takes up to five characters,
			// and the card's text budget counts them.
			rule += " " + clipEscaped(c.Reason, maxCardReason)
		}
		lines = append(lines, rule)
	}
	if c.pending() {
		who := cappedList(approverMentions(c.Approvers), ", ", maxListed)
		if who == "" {
			who = c.openAudience("this")
		}
		label := "*Approvers:* "
		if c.Human {
			label = "*Who may answer:* "
		}
		lines = append(lines, label+who)
		if c.FourEyes {
			lines = append(lines, ":eyes: Four-eyes: "+fourEyesWho(c)+" cannot approve this call.")
		}
	}
	return strings.Join(lines, "\n")
}

// maxListed bounds the people one list on a card names (its requesters,
// its approvers, the approvals counted): with a few hundred, the card's
// section would pass Slack's limit and be cut, losing the rest of the
// list without a word, and the lines after it. Lists one person reads
// (an answer to their click, their Home tab) are bounded alike; notes in a
// thread or DM that mention people to notify them (reminders, "waiting
// for") name everyone, over several messages if need be.
const maxListed = 20

// cappedList joins the first max of items with sep and says how many
// more there are: "<@U1>, <@U2> +3 more".
func cappedList(items []string, sep string, max int) string {
	if len(items) <= max {
		return strings.Join(items, sep)
	}
	return strings.Join(items[:max], sep) + fmt.Sprintf(" +%d more", len(items)-max)
}

// requesterList names the people who asked for a call, one entry each, as
// requesterRefs does.
func requesterList(requester string, requesters []string) []string {
	if len(requesters) == 0 {
		return []string{userRef(requester, "an unknown user")}
	}
	refs := make([]string, len(requesters))
	for i, r := range requesters {
		refs[i] = userRef(r, "an unknown user")
	}
	return refs
}

// fourEyesWho names who a four-eyes rule keeps from approving.
func fourEyesWho(c Card) string {
	if len(c.Requesters) > 1 {
		return "the requesters"
	}
	return "the requester"
}

// oneLine collapses runs of white space, line breaks included.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// maxPrettyJSON is the most JSON prettyJSON indents: indenting grows text
// with its nesting, and what is shown of larger arguments is cut anyway.
const maxPrettyJSON = 64 << 10

// prettyJSON indents JSON for display, returning raw input that does not
// parse, or is larger than maxPrettyJSON, unchanged and "" for empty input.
func prettyJSON(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return ""
	}
	if len(raw) > maxPrettyJSON {
		return string(raw)
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// revealWarned writes out the hidden characters of untrusted text (see
// revealHidden) and returns the line that warns about them, where naming
// the text (see hiddenWarning), after a line break: "" when there were
// none.
func revealWarned(s, where string) (shown, warning string) {
	shown, n := revealHidden(s)
	if shown != s {
		warning = "\n" + hiddenWarning(n, where)
	}
	return shown, warning
}

// argsSection renders arguments as a titled code block within one section,
// reporting whether they were cut. Hidden characters are written out (see
// revealHidden), with a warning line after the block.
func argsSection(title string, args json.RawMessage) (string, bool) {
	pretty := prettyJSON(args)
	if pretty == "" || pretty == "{}" || pretty == "null" {
		return title + "\n_(no arguments)_", false
	}
	shown, warning := revealWarned(pretty, "the arguments")
	block, cut := codeBlock(codeBody(shown), maxSectionText-textLen(title)-1-textLen(warning))
	return title + "\n" + block + warning, cut
}

// maxCardPreview bounds the preview shown on a card; the rest is behind
// "View full preview".
const maxCardPreview = 2000

// previewBlock renders a pending call's effect preview, cut to
// maxCardPreview characters with a "View full preview" button when longer,
// or says why there is none; nil when the tool offers none.
func previewBlock(c Card) slack.Block {
	if c.PreviewError != "" {
		// Tool output (an MCP server's, or the model's own URL quoted in
		// a parse error): shown as code, its hidden characters written
		// out, so it cannot pass for the card's own words.
		shown, _ := revealHidden(clip(oneLine(c.PreviewError), 500))
		return contextBlock(":warning: Preview unavailable: " + inlineCode(shown))
	}
	if strings.TrimSpace(c.Preview) == "" {
		return nil
	}
	const title = "*Preview*"
	shown, warning := revealWarned(c.Preview, "the preview")
	block, cut := codeBlock(codeBody(shown), maxCardPreview)
	var acc *slack.Accessory
	if cut {
		acc = slack.NewAccessory(button(ActionViewPreview, "View full preview", c.CallID))
	}
	return slack.NewSectionBlock(mrkdwn(title+"\n"+block+warning), nil, acc)
}

// cardButtons returns the decision buttons of a pending card: on a copy
// outside the conversation (CopyOf set), Always allow says that it applies
// to the conversation's channel, not the copy's.
func cardButtons(c Card) []slack.BlockElement {
	if c.CopyOf != "" {
		return decisionButtons(c, "in the conversation's channel (not where this copy is)")
	}
	return decisionButtons(c, "")
}

// decisionButtons returns the decision buttons of a pending call. Shown
// away from its conversation (a copy, the Home tab), elsewhere says where
// Always allow applies instead of "in this channel", and the buttons offer
// to allow it "there" rather than "here"; "" on the conversation's card.
func decisionButtons(c Card, elsewhere string) []slack.BlockElement {
	deny := button(ActionDeny, "Deny", c.CallID).
		WithStyle(slack.StyleDanger).
		WithConfirm(slack.NewConfirmationBlockObject(
			plain("Deny this call?", 100),
			plain("The tool will not run, and the assistant will be told not to try the same call again.", 300),
			plain("Deny", 30),
			plain("Keep it pending", 30),
		).WithStyle(slack.StyleDanger))
	reject := button(ActionReject, "Reject with reason", c.CallID)
	cancel := button(ActionCancel, "Cancel request", c.CallID)
	why := button(ActionWhy, "Why?", c.CallID)

	if c.Human {
		return []slack.BlockElement{
			button(ActionRespond, "Reply", c.CallID).WithStyle(slack.StylePrimary),
			deny, reject, why, cancel,
		}
	}
	here, rememberLabel := "in this channel", "Always allow here"
	exactLabel, exactTitle := "Always allow these arguments here", "Always allow these exact arguments here?"
	if elsewhere != "" {
		here, rememberLabel = elsewhere, "Always allow there"
		exactLabel, exactTitle = "Always allow these arguments there", "Always allow these exact arguments "+elsewhere+"?"
	}
	remember := button(ActionRemember, rememberLabel, c.CallID).WithConfirm(slack.NewConfirmationBlockObject(
		plain("Always allow this tool "+here+"?", 100),
		plain("This call runs now, and later calls of this tool "+here+" will run without asking. You or an admin can revoke the rule from the Home tab or with /approvals rules revoke.", 300),
		plain("Allow", 30),
		plain("Cancel", 30),
	))
	exact := button(ActionRememberExact, exactLabel, c.CallID).
		WithConfirm(slack.NewConfirmationBlockObject(
			plain(exactTitle, 100),
			plain("This call runs now, and later calls of this tool "+here+" with exactly these arguments will run without asking. You or an admin can revoke the rule from the Home tab or with /approvals rules revoke.", 300),
			plain("Allow", 30),
			plain("Cancel", 30),
		))
	buttons := []slack.BlockElement{
		button(ActionApprove, "Approve", c.CallID).WithStyle(slack.StylePrimary),
		deny,
		reject,
		button(ActionEdit, "Edit arguments", c.CallID),
	}
	if !c.FourEyes && c.MinApprovals <= 1 && !c.NoAlwaysAllow && !c.ArgsEdited {
		// A standing rule never relaxes a four-eyes or two-person rule,
		// an ask made of several requesters' or forced by a failed
		// condition, or edited arguments, so the card does not offer one;
		// a sealed copy does not offer to allow arguments it does not show.
		buttons = append(buttons, remember)
		if !c.Sealed {
			buttons = append(buttons, exact)
		}
	}
	return append(buttons, why, cancel)
}

// approvalsBlocks shows the count of a call that needs several approvers
// ("1 of 2 approvals: @a"), on a pending card and on one its approvals
// decided; nothing for a call that needs one.
func approvalsBlocks(c Card) []slack.Block {
	if c.MinApprovals <= 1 || c.Human {
		return nil
	}
	if !c.pending() && (c.Status != StatusDecided || !c.Decision.Runs()) {
		return nil
	}
	return []slack.Block{contextBlock(approvalsText(c))}
}

// approvalsText is the count of approvals of a two-person (or more) call,
// naming the first maxListed approvers counted.
func approvalsText(c Card) string {
	text := fmt.Sprintf(":busts_in_silhouette: %d of %d approvals", len(c.Approvals), c.MinApprovals)
	var who []string
	for _, id := range c.Approvals {
		who = append(who, userRef(id, "someone"))
	}
	if len(who) > 0 {
		text += ": " + cappedList(who, ", ", maxListed)
	}
	if c.ArgsEdited && c.pending() {
		text += " · the arguments were edited, so the count started again"
	}
	return text
}

// statusText says how a card that is no longer pending ended.
func statusText(c Card) string {
	switch c.Status {
	case StatusExpired:
		return expiredText(c)
	case StatusCancelled:
		return ":no_entry_sign: Cancelled by the requester. Nothing ran."
	case StatusUnsaved:
		return ":warning: This request could not be saved, so it cannot be decided and nothing ran. Ask again."
	}
	who := userRef(c.Decider, "someone")
	when := ""
	if !c.DecidedAt.IsZero() {
		when = " at " + slackDate(c.DecidedAt)
	}
	switch c.Decision {
	case approvals.Approve:
		return ":white_check_mark: Approved by " + who + when
	case approvals.Remember:
		what, where := "allowed", "this channel"
		if c.ExactAllow {
			what = "these exact arguments allowed"
		}
		if c.CopyOf != "" {
			where = channelRef(c.CopyOf)
		}
		if c.NoRule {
			return ":white_check_mark: Approved by " + who + when + " with *Always allow*, but no rule allows calls like it now (it could not be saved, or was revoked or expired): they still ask"
		}
		return ":white_check_mark: Approved by " + who + when + ", and " + what + " in " + where + " from now on"
	case approvals.Edit:
		if c.Sealed {
			return ":pencil2: Edited by " + who + when + "; *View full arguments* shows the edited arguments"
		}
		return ":pencil2: Edited by " + who + when + "; the edited arguments are below"
	case approvals.Refuse:
		return ":no_entry: Denied by " + who + when
	case approvals.Reject:
		text := ":no_entry: Rejected by " + who + when
		if q := quote(c.RejectReason, 2000); q != "" {
			text += ":\n" + q
		}
		return text
	case approvals.Respond:
		text := ":speech_balloon: Answered by " + who + when
		if q, cut := quoteCut(c.Answer, 2000); q != "" {
			text += ":\n" + q
			if cut {
				// The model read it whole: say so, rather than let the
				// card pass for all of it.
				text += "\n_(cut short here; the model was given the whole answer)_"
			}
		}
		return text
	case approvals.Expire:
		return expiredText(c)
	case approvals.Cancel:
		return ":no_entry_sign: Cancelled by the requester. Nothing ran."
	}
	return "Decided by " + who + when
}

// expiredText says an approval request expired, and after how long when
// the card knows.
func expiredText(c Card) string {
	if !c.RequestedAt.IsZero() && c.ExpiresAt.After(c.RequestedAt) {
		return ":hourglass: Expired after " + humanDuration(c.ExpiresAt.Sub(c.RequestedAt)) + " without a decision. Nothing ran."
	}
	return ":hourglass: Expired without a decision. Nothing ran."
}

// clipEscaped is s on one line, escaped, then cut to at most n characters
// (an entity is never cut).
func clipEscaped(s string, n int) string {
	out, _ := truncate(Escape(oneLine(s)), n)
	return out
}

// outcomeText reports what happened after the decision, with an excerpt of
// the tool output: code like the arguments, its hidden characters written
// out with a warning line after it (see revealWarned).
func outcomeText(c Card) string {
	var parts []string
	if c.Outcome != "" {
		parts = append(parts, "*Outcome:* "+clipEscaped(c.Outcome, maxCardReason))
	}
	if s := strings.TrimSpace(c.OutputSummary); s != "" {
		shown, warning := revealWarned(s, "the output")
		body, _ := truncate(codeBody(shown), maxOutputSummary)
		block, _ := codeBlock(body, maxOutputSummary+10)
		parts = append(parts, block+warning)
	}
	return strings.Join(parts, "\n")
}
