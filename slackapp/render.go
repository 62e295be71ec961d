package slackapp

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
)

// Action ids of the interactive elements this package renders. Handlers are
// routed by these ids. Every button's value is the opaque call id of the
// call it acts on and nothing else: no arguments, no state. A handler loads
// the call from the store by that id and re-checks everything (who clicked,
// the status, the argument fingerprint) before acting.
const (
	// ActionApprove approves a pending call as shown.
	ActionApprove = "approve"
	// ActionDeny refuses a pending call; the button asks for confirmation.
	ActionDeny = "deny"
	// ActionReject opens RejectModal to refuse a call with a reason.
	ActionReject = "reject"
	// ActionEdit opens EditModal to change a call's arguments before it runs.
	ActionEdit = "edit"
	// ActionRemember approves a call and stores a standing rule for the tool
	// in this channel ("Always allow here").
	ActionRemember = "remember"
	// ActionRememberExact approves a call and stores a standing rule for
	// the tool in the channel with exactly these arguments ("Always allow
	// these arguments here"). Its value is the call's token.
	ActionRememberExact = "remember_exact"
	// ActionRespond opens RespondModal to answer an ask_human call.
	ActionRespond = "respond"
	// ActionCancel is the requester's button to stop the paused turn. It is
	// shown to everyone (Slack cannot show a button to one user only); the
	// handler must check that the clicking user is the call's requester and
	// answer anyone else with NotRequesterText.
	ActionCancel = "cancel"
	// ActionViewArgs opens ArgsModal with a call's full arguments. It is
	// read-only and stays on a card after the decision.
	ActionViewArgs = "view_args"
	// ActionViewModelArgs opens ArgsModal with the model's full arguments
	// of a call decided with an edit, whose ActionViewArgs shows the
	// edited ones.
	ActionViewModelArgs = "view_model_args"
	// ActionWhy asks the model to explain a pending call in its thread
	// ("Why?"); nothing is decided and nothing runs. Anyone who may see
	// the call may click it.
	ActionWhy = "why"
	// ActionViewPreview opens PreviewModal with a call's whole effect
	// preview. It is read-only.
	ActionViewPreview = "view_preview"
)

// Callback ids of the modals this package renders. Each modal's
// PrivateMetadata holds the call id it is about (read it with ReadCallID).
const (
	// CallbackReject identifies the submission of RejectModal.
	CallbackReject = "reject_modal"
	// CallbackEdit identifies the submission of EditModal.
	CallbackEdit = "edit_modal"
	// CallbackRespond identifies the submission of RespondModal.
	CallbackRespond = "respond_modal"
	// CallbackViewArgs identifies ArgsModal, which has nothing to submit.
	CallbackViewArgs = "args_modal"
	// CallbackViewPreview identifies PreviewModal, which has nothing to
	// submit.
	CallbackViewPreview = "preview_modal"
)

// Block and action ids of modal inputs. Submitted values are found in
// View.State.Values[block id][action id]; a handler reporting a validation
// error uses the block id as the key of slack.NewErrorsViewSubmissionResponse.
const (
	BlockRejectReason  = "reject_reason"
	ActionRejectReason = "reject_reason_input"
	BlockEditArgs      = "edit_args"
	ActionEditArgs     = "edit_args_input"
	BlockAnswer        = "answer"
	ActionAnswer       = "answer_input"
)

// Block Kit limits this package renders within.
const (
	maxMessageBlocks = 50   // blocks in a message
	maxViewBlocks    = 100  // blocks in a modal or the Home tab
	maxSectionText   = 3000 // characters in a section's text
	maxContextText   = 3000 // characters in one context element
	maxHeaderText    = 150  // characters in a header
	maxButtonText    = 75   // characters in a button label
	maxButtonValue   = 2000 // characters in a button value
	maxModalTitle    = 24   // characters in a modal title
	maxInputValue    = 3000 // characters in a plain-text input
	// maxMessageText bounds the characters of all the text objects in
	// one message's blocks. A message's text field takes 40,000, but
	// Slack refuses blocks holding far fewer (msg_blocks_too_long,
	// undocumented): it refused 13,297 characters of markdown blocks
	// alone, and 11,341 in a message of several blocks, whose containers
	// count too. 10,000 stays clear of both and still holds three full
	// sections.
	maxMessageText = 10000
	// maxViewBytes bounds the JSON of the blocks that fill a modal (long
	// arguments, a question, a preview), as slack-go sends it: Slack
	// refuses a view of more than 250 kB (view_too_large), and the rest
	// covers the view's own fields and the few blocks around them.
	maxViewBytes = 240000
)

// slackID matches the Slack ids this package is willing to mention: users
// (U…, W… on Enterprise Grid) and user groups (S…).
var slackID = regexp.MustCompile(`^[UWS][A-Z0-9]+$`)

// mrkdwn returns a mrkdwn text object. verbatim is set so that Slack does not
// auto-link or auto-mention anything in the text: every link or mention
// that appears on a surface rendered here is one this package wrote
// explicitly.
func mrkdwn(text string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.MarkdownType, text, false, true)
}

// plainAngles replaces angle brackets in plain text with look-alike
// quotation marks, so that no text, trusted or not, can spell a Slack
// control sequence such as <!here> anywhere.
var plainAngles = strings.NewReplacer("<", "‹", ">", "›")

// plain returns a plain_text object on one line, cut to max characters.
// Angle brackets become ‹ and ›.
func plain(text string, max int) *slack.TextBlockObject {
	text = plainAngles.Replace(strings.Join(strings.Fields(text), " "))
	if textLen(text) > max {
		text = text[:cutIndex(text, max-textLen(ellipsis))] + ellipsis
	}
	return slack.NewTextBlockObject(slack.PlainTextType, text, true, false)
}

// section returns a section block with mrkdwn text cut to the section limit.
func section(text string) *slack.SectionBlock {
	text, _ = truncate(text, maxSectionText)
	return slack.NewSectionBlock(mrkdwn(text), nil, nil)
}

// contextBlock returns a context block with one mrkdwn element.
func contextBlock(text string) *slack.ContextBlock {
	text, _ = truncate(text, maxContextText)
	return slack.NewContextBlock("", mrkdwn(text))
}

// button returns a button carrying the call id as its value.
func button(actionID, label, callID string) *slack.ButtonBlockElement {
	return slack.NewButtonBlockElement(actionID, callID, plain(label, maxButtonText))
}

// mention renders a user or user-group id as a Slack mention, or reports
// false when id is not a well-formed user (U…, W…) or group (S…) id.
func mention(id string) (string, bool) {
	if !slackID.MatchString(id) {
		return "", false
	}
	if id[0] == 'S' {
		return "<!subteam^" + id + ">", true
	}
	return "<@" + id + ">", true
}

// userRef renders the user who did something: a mention for a well-formed
// user id, the escaped text otherwise, and fallback when id is empty.
func userRef(id, fallback string) string {
	if id == "" {
		return fallback
	}
	if m, ok := mention(id); ok && id[0] != 'S' {
		return m
	}
	return Escape(id)
}

// requesterRefs names the people who asked for a call: requesters when
// known (everyone whose message the turn answers), else requester alone;
// the first maxListed of them, and how many more there are.
func requesterRefs(requester string, requesters []string) string {
	return cappedList(requesterList(requester, requesters), ", ", maxListed)
}

// approverList renders approver ids as mentions joined by sep, dropping any
// id that is not a well-formed user or user-group id. It returns "" when
// none is left.
func approverList(ids []string, sep string) string {
	return strings.Join(approverMentions(ids), sep)
}

// approverMentions renders approver ids as mentions, dropping any id that
// is not a well-formed user or user-group id.
// whoMayDecide mentions the approvers ("<@U1> or <!subteam^S1>"), or says
// that anyone in the channel may decide when no id is well-formed.
func whoMayDecide(approvers []string) string {
	if ms := approverMentions(approvers); len(ms) > 0 {
		return joinAnd(ms, "or")
	}
	return "anyone in this channel"
}

func approverMentions(ids []string) []string {
	var ms []string
	for _, id := range ids {
		if m, ok := mention(id); ok {
			ms = append(ms, m)
		}
	}
	return ms
}

// slackDate renders t as a Slack date token that each reader sees in their
// own time zone, with a UTC fallback for clients that cannot format it.
func slackDate(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{date_short_pretty} at {time}|%s>",
		t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

// slackAgo renders t as Slack's live relative date ("3 hours ago"), which
// each client keeps current, with the UTC time as the fallback.
func slackAgo(t time.Time) string {
	return fmt.Sprintf("<!date^%d^{ago}|%s>", t.Unix(), t.UTC().Format("2006-01-02 15:04 UTC"))
}

// humanDuration renders d for people: "3 days", "1 hour 30 minutes",
// "45 seconds". It keeps the two largest non-zero units.
func humanDuration(d time.Duration) string {
	if d < time.Second {
		return "less than a second"
	}
	units := []struct {
		name string
		size time.Duration
	}{
		{"day", 24 * time.Hour},
		{"hour", time.Hour},
		{"minute", time.Minute},
		{"second", time.Second},
	}
	var parts []string
	for _, u := range units {
		if n := d / u.size; n > 0 {
			d -= n * u.size
			name := u.name
			if n != 1 {
				name += "s"
			}
			parts = append(parts, fmt.Sprintf("%d %s", n, name))
		} else if len(parts) > 0 {
			break
		}
		if len(parts) == 2 {
			break
		}
	}
	return strings.Join(parts, " ")
}

// toolList renders tool names as `a`, `b` and `c`.
func toolList(tools []string) string {
	names := make([]string, 0, len(tools))
	for _, t := range tools {
		names = append(names, inlineCode(t))
	}
	return joinAnd(names, "and")
}

// joinAnd joins items as "a", "a and b" or "a, b and c".
func joinAnd(items []string, word string) string {
	switch len(items) {
	case 0:
		return ""
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + word + " " + items[len(items)-1]
}

// Waiting is a paused call a thread waits on: its tool and who may decide.
type Waiting struct {
	Tool      string
	Approvers []string
	// Human marks a question (ask_human), which is answered, not approved.
	Human bool
}

// WaitingText is the reply to a new message in a thread whose turn is paused
// on approval of calls, or on answers to questions, which the message does
// not give: they are given with Reply on the question's card. Calls with
// the same approvers are named together. With mention, approvers are
// mentioned so they are reminded; ids that are not well-formed user or
// group ids are dropped, and with none left the text says anyone in the
// channel may decide (in a direct message, inDM: you). Without it, only
// the tools are named: the cards say who may decide, and no one is pinged.
func WaitingText(waits []Waiting, mention, inDM bool) string {
	anyone := "anyone in this channel"
	if inDM {
		anyone = "you"
	}
	type group struct {
		tools []string
		who   string
	}
	var asks, questions []*group
	byWho := map[string]*group{}
	for _, w := range waits {
		who := ""
		if mention {
			who = anyone
			if ms := approverMentions(w.Approvers); len(ms) > 0 {
				who = joinAnd(ms, "or")
			}
		}
		key := fmt.Sprint(w.Human, who)
		g := byWho[key]
		if g == nil {
			g = &group{who: who}
			byWho[key] = g
			if w.Human {
				questions = append(questions, g)
			} else {
				asks = append(asks, g)
			}
		}
		if !slices.Contains(g.tools, w.Tool) {
			g.tools = append(g.tools, w.Tool)
		}
	}
	// named lists the groups' tools, each with who may decide them.
	named := func(groups []*group, by string) string {
		each := make([]string, 0, len(groups))
		for _, g := range groups {
			part := toolList(g.tools)
			if g.who != "" {
				part += " " + by + " " + g.who
			}
			each = append(each, part)
		}
		return joinAnd(each, "and")
	}
	var parts []string
	if len(asks) > 0 {
		part := "on approval of " + named(asks, "by")
		if !mention {
			part += " (the cards above say who may decide)"
		}
		parts = append(parts, part)
	}
	if len(questions) > 0 {
		parts = append(parts, "for an answer to the question of "+named(questions, "from")+" (answer with *Reply* on its card: a message in the thread does not answer it)")
	}
	if len(parts) == 0 {
		return "This thread is waiting on approval; I'll answer your message after that."
	}
	return "This thread is waiting " + strings.Join(parts, ", and ") + "; I'll answer your message after that."
}

// CardNotPostedText tells a thread that a call waits on a decision
// although its card could not be posted there: it can be decided in the
// App Home of whoever may decide it. Approvers are mentioned as in
// WaitingText.
func CardNotPostedText(tool string, approvers []string, human bool) string {
	if human {
		return "I have a question for this thread, but I couldn't post it here. It is in my App Home (the Home tab), where it can be answered."
	}
	return "I need approval of " + toolList([]string{tool}) + " by " + whoMayDecide(approvers) + ", but I couldn't post its approval card here. It can be decided in my App Home (the Home tab), and `/approvals pending` lists it."
}

// CopiesNotPostedText tells a thread that the card of a call to tool could
// not reach some approvers who cannot see the conversation: those whose
// DM failed (user set), or everyone in APPROVALS_CHANNEL (user empty).
func CopiesNotPostedText(tool string, unreached []copyPlace) string {
	var users []string
	channel := ""
	for _, p := range unreached {
		if p.user != "" {
			users = append(users, p.user)
		} else {
			channel = p.channel
		}
	}
	var who []string
	if len(users) > 0 {
		who = append(who, "to "+approverList(users, ", "))
	}
	if channel != "" && channelIDRE.MatchString(channel) {
		who = append(who, "in "+channelRef(channel))
	}
	if len(who) == 0 {
		who = append(who, "to the approvers")
	}
	return ":warning: I couldn't send the approval card of " + toolList([]string{tool}) + " " + strings.Join(who, " or ") + ", for approvers who cannot see this conversation. They can decide it in my App Home (the Home tab)."
}

// unableText names each approver who cannot decide and why ("<@U1> is
// deactivated; <!subteam^S1> has no members").
func unableText(unable []unableApprover) string {
	whys := make([]string, 0, len(unable))
	for _, u := range unable {
		if m, ok := mention(u.id); ok {
			whys = append(whys, m+" "+u.why)
		}
	}
	return strings.Join(whys, "; ")
}

// UndecidableText tells a thread that the approvers the rule ruleID names
// cannot give the call to tool (a question when human) the approvals it
// needs as things stand: able of needed, and why for each who cannot (see
// whyUndecidable). It waits until expires unless the policy or who is in
// a user group changes.
func UndecidableText(tool, ruleID string, human bool, expires time.Time, unable []unableApprover, able, needed int) string {
	what := "approve " + toolList([]string{tool})
	if human {
		what = "answer this question"
	}
	text := ":warning: No one can " + what + " as things stand"
	if able > 0 {
		text = fmt.Sprintf(":warning: Only %d of the %d approvals %s needs can be given as things stand", able, needed, toolList([]string{tool}))
	}
	if why := unableText(unable); why != "" {
		text += ": " + why
	}
	text += ". An admin can change rule " + inlineCode(ruleID) + " (`/approvals policy`), or who is in a user group it names"
	if !expires.IsZero() {
		text += "; else it expires " + slackDate(expires)
	}
	return text + "."
}

// NotApproverText is the ephemeral answer to someone who clicked a decision
// button without being an approver of the call. Nothing changed. It names
// the first maxListed approvers.
func NotApproverText(approvers []string) string {
	text := "You are not an approver for this call, so nothing changed."
	if list := cappedList(approverMentions(approvers), ", ", maxListed); list != "" {
		text += " It can be decided by " + list + "."
	}
	return text
}

// RuleApproversText is the answer to someone the card lets decide whom
// the rule that asks for the call now leaves out: the rule its edited
// arguments fall under (edit), or one an admin added or changed since the
// card was posted. approvers are the rule's; none leaves the call to the
// people in the conversation.
func RuleApproversText(rule string, approvers []string, edit bool) string {
	text := "This call now falls under "
	if edit {
		text = "The edited arguments fall under "
	}
	if rule != "" {
		text += "rule " + inlineCode(rule)
	} else {
		text += "a rule"
	}
	ms := approverMentions(approvers)
	switch {
	case len(approvers) == 0:
		return text + ", which leaves the call to people in the conversation, so nothing changed."
	case len(ms) == 0:
		return text + ", which does not let you approve it, so nothing changed."
	}
	list := joinAnd(ms, "or")
	if len(ms) > maxListed {
		list = cappedList(ms, ", ", maxListed)
	}
	return text + ", which only " + list + " may approve, so nothing changed."
}

// UnrememberedText tells the approver of an Always-allow decision whose
// standing rule could not be saved that the call is approved all the same
// and that later calls will still ask.
func UnrememberedText() string {
	return "The call is approved, but I couldn't save the rule to allow calls like it from now on: later ones will still ask for approval. Try Always allow again on the next one."
}

// NotApproverOfBothText is NotApproverText for a pending edit whose rule
// names approvers none of whom the card's rule names: a decider must be
// among both.
func NotApproverOfBothText(edit, card []string) string {
	return "You are not an approver for this call, so nothing changed. It can be decided by someone among " +
		cappedList(approverMentions(edit), ", ", maxListed) + " (for the edited arguments) who is also among " +
		cappedList(approverMentions(card), ", ", maxListed) + " (for the call)."
}

// RequesterCannotApproveText is the ephemeral answer to the requester of a
// four-eyes call who tried to approve it. Nothing changed.
func RequesterCannotApproveText() string {
	return "This call needs a second pair of eyes: you requested it, so someone else has to approve it. Nothing changed."
}

// NotRequesterText is the ephemeral answer to someone other than the
// requesters (requester, or requesters when known) who clicked Cancel.
// Nothing changed.
func NotRequesterText(requester string, requesters ...string) string {
	who := userRef(requester, "the requester")
	if len(requesters) > 1 {
		who = requesterRefs(requester, requesters) + " (whoever of them)"
	}
	return "Only " + who + " can cancel this request. Nothing changed."
}

// AlreadyDecidedText is the ephemeral answer to someone who acted on a call
// that was decided first by decider (a user id) at at. A zero at and an
// empty decider are left out.
func AlreadyDecidedText(decider string, kind approvals.Kind, at time.Time) string {
	switch kind {
	case approvals.Expire:
		return ExpiredText()
	case approvals.Cancel:
		return CancelledText()
	}
	text := "This call was already " + pastTense(kind)
	if decider != "" {
		text += " by " + userRef(decider, "")
	}
	if !at.IsZero() {
		text += " at " + slackDate(at)
	}
	return text + ". Nothing changed."
}

// ExpiredText is the ephemeral answer to an action on a call whose approval
// request expired.
func ExpiredText() string {
	return "This approval request has expired; the call was not run. Nothing changed."
}

// CancelledText is the ephemeral answer to an action on a call whose
// requester cancelled it.
func CancelledText() string {
	return "The requester cancelled this request; the call was not run. Nothing changed."
}

// ChangedArgsText is the ephemeral answer to a decision whose argument
// fingerprint does not match the stored call: the card the approver saw is
// not the call that would run, so the decision was refused.
func ChangedArgsText() string {
	return "The arguments of this call are not the ones this card showed, so your decision was not applied. Nothing ran; please review the current card."
}

// DecisionFailedText is the ephemeral answer when a decision could not be
// recorded (for example the store is unreachable). The call stays pending.
func DecisionFailedText() string {
	return "I could not record your decision right now; the call is still pending. Please try again in a moment."
}

// ChangedWhileCheckedText is the ephemeral answer when the policy's
// rules kept changing while a decision was checked against them, so that
// it was not recorded.
func ChangedWhileCheckedText() string {
	return "The policy changed while your decision was checked, so nothing was recorded and the call is still pending. Please look at the card and try again."
}

// CountedWhileCheckedText is the ephemeral answer when other approvals of
// the call kept being counted while an approval was checked, so that it
// was not recorded.
func CountedWhileCheckedText() string {
	return "Other approvals of this call were being counted while yours was checked, so nothing was recorded and the call is still pending. Please try again."
}

// DecisionUnconfirmedText is the ephemeral answer when the store did not
// answer whether a decision was recorded (its answer was lost, and the
// store stayed unreachable): the card says so if it was.
func DecisionUnconfirmedText() string {
	return "I could not confirm your decision: my state store did not answer. If the card still shows its buttons once it is back, nothing was decided; please try again then."
}

// DecisionUnreplicatedText is the ephemeral answer when a decision was
// recorded but the store could not confirm that its replicas have it
// (REDIS_WAIT_REPLICAS): it stands, and takes effect once they do.
func DecisionUnreplicatedText() string {
	return "Your decision is recorded, but my state store could not yet confirm it on its replicas, so nothing has run yet. It is carried out once they confirm it, and the card shows what became of it; you need not click again."
}

// AlreadyApprovedText is the ephemeral answer to a second approval by the
// same person on a call that needs several approvers: it counts once.
func AlreadyApprovedText(have, need int) string {
	text := "You already approved this call; an approval counts once per person."
	if need > 1 {
		text += fmt.Sprintf(" It has %d of %d approvals and needs another approver.", have, need)
	}
	return text
}

// ReminderText reminds the approvers of a pending card that it still
// waits: reminder n (1 after the remind-after time, 2 when a quarter of
// its TTL is left) names those who may still approve (mentioned, so they
// are notified; see stillAwaited) and when it expires.
func ReminderText(c Card, n int) string {
	list := approverList(remindedApprovers(c), ", ")
	if len(c.Approvers) == 0 {
		list = c.openAudience("this")
	}
	what := "approval"
	if c.Human {
		what = "an answer to its question (with *Reply* on its card)"
	}
	text := ":bell: Reminder: " + inlineCode(c.Tool) + " is still waiting for " + what
	if n > 1 {
		text = ":bell: Last reminder: " + inlineCode(c.Tool) + " is still waiting for " + what
	}
	if list != "" {
		text += " from " + list
	}
	if c.MinApprovals > 1 && !c.Human {
		// One answer settles a question, whatever its rule's count.
		text += fmt.Sprintf(" (%d of %d approvals)", len(c.Approvals), c.MinApprovals)
	}
	text += "."
	switch {
	case c.ExpiresAt.IsZero():
	case c.Human:
		text += " It expires " + slackDate(c.ExpiresAt) + "."
	default:
		text += " It expires " + slackDate(c.ExpiresAt) + "; nothing runs without a decision."
	}
	return text
}

// remindedApprovers are the approvers of a pending card a reminder names:
// those it still awaits (see stillAwaited). A user group stays: who in it
// approved cannot be told from the group's mention.
func remindedApprovers(c Card) []string {
	var who []string
	for _, id := range c.Approvers {
		if stillAwaited(id, c.Approvals, c.FourEyes, c.Requester, c.Requesters) {
			who = append(who, id)
		}
	}
	return who
}

// stillAwaited reports whether a pending call still awaits approver id:
// their approval is not counted yet and, under four eyes, they are not
// one of its requesters (requester, or one of requesters), who may not
// decide it.
func stillAwaited(id string, counted []string, fourEyes bool, requester string, requesters []string) bool {
	if slices.Contains(counted, id) {
		return false
	}
	return !fourEyes || id != requester && !slices.Contains(requesters, id)
}
