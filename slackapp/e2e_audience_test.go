package slackapp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// home opens user's Home tab and waits until it is published.
func (e *env) home(user string) fakeslack.View {
	e.t.Helper()
	before, _ := e.slack.HomeView(user)
	e.slack.OpenHome(user)
	var home fakeslack.View
	waitUntil(e.t, user+"'s Home tab is published", func() bool {
		var ok bool
		home, ok = e.slack.HomeView(user)
		return ok && (home.ID != before.ID || home.JSON != nil && string(home.JSON) != string(before.JSON))
	})
	return home
}

// A call whose rule names no approvers may be decided by anyone who can see
// its conversation, and only by them: someone outside a private channel
// does not find it in App Home, and their click changes nothing.
func TestOpenCallsStayInTheirConversation(t *testing.T) {
	const private = "CPRIVATE02"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	b := e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"15"}`)), fakeopenai.Text("Deployed vault 15."))
	ts := e.slack.Mention(private, requester, "deploy vault 15")
	card := e.cardIn(private, ts, "deploy")

	outside := e.home(stranger)
	wantIn(t, "the Home tab of someone outside the channel", viewText(outside), "Waiting for your decision* (0)")
	if strings.Contains(viewText(outside), "vault") {
		t.Errorf("someone outside the private channel sees its call in App Home:\n%s", viewText(outside))
	}
	inside := e.home(other)
	wantIn(t, "the Home tab of a channel member", viewText(inside), "Waiting for your decision* (1)", "vault")

	// A click from outside, on a Home tab that lists the call, is refused.
	_, err := e.slack.ClickInView(stranger, inside.ID, slackapp.ActionApprove, "")
	must(t, err)
	dm := e.slack.DMChannel(stranger)
	if _, err := e.slack.WaitMessage(dm, func(m fakeslack.Message) bool {
		return strings.Contains(m.Text, "not part of") && strings.Contains(m.Text, "Nothing changed")
	}, 10*time.Second); err != nil {
		t.Fatalf("the stranger was not told the call is not theirs and their click changed nothing: %v", err)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on a stranger's approval", n)
	}
	if m, _ := e.slack.Message(private, card.TS); !isCard(m) {
		t.Fatalf("the card changed after a refused click: %s", m.Blocks)
	}

	_, err = e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed vault 15.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}

	// In a DM only the other party can see the conversation.
	ctx := context.Background()
	for user, want := range map[string]bool{requester: true, stranger: false, other: false} {
		got, err := b.app.Audience().CanSee(ctx, e.slack.DMChannel(requester), user)
		if err != nil || got != want {
			t.Errorf("CanSee(DM with the requester, %s) = %v, %v; want %v", user, got, err, want)
		}
	}
}

// A card that anyone in the conversation may decide has the conversation's
// members looked up as it is posted, without waiting for them: its first
// click finds them and asks Slack nothing.
func TestOpenCardLooksUpItsDecidersAhead(t *testing.T) {
	const private = "CPRIVATE03"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	// No Home tab round, which also looks the members up, before the click.
	e.cfg.HomeRefreshDelay = time.Hour
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	e.start()
	arrived, release := e.slack.HoldNext("conversations.members")
	defer release()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"16"}`)), fakeopenai.Text("Deployed vault 16."))
	ts := e.slack.Mention(private, requester, "deploy vault 16")
	select {
	case <-arrived:
	case <-time.After(15 * time.Second):
		t.Fatal("the channel's members were not looked up as the card was posted")
	}
	// The look-up is held: the card does not wait for it.
	card := e.cardIn(private, ts, "deploy")
	release()

	_, err := e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed vault 16.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if n := len(e.slack.Calls("conversations.members")); n != 1 {
		t.Errorf("conversations.members was called %d times, want once, as the card was posted", n)
	}
}

// A call open to anyone in a private channel, edited into arguments whose
// rule names approvers, still needs its deciders in the channel (the
// agent checks the card's rule and the edit's): a named approver outside
// it is not shown the call on the Home tab. (The rule also names someone
// in the channel, or the edit, which no one else could then complete,
// would be refused.)
func TestEditIntoNamedApproversKeepsTheCallInItsConversation(t *testing.T) {
	const private = "CPRIVATE92"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(payrollEditPolicy(""), "[UAPPROVER1, USTRANGER1]", "[UAPPROVER1, USTRANGER1, UOTHER0001]", 1)
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, other, e.slack.BotUserID()}})
	e.start()
	e.pausedThenEdited(private)

	home := e.home(stranger)
	if strings.Contains(viewText(home), "SECRET-42") || strings.Contains(viewText(home), "payroll") {
		t.Errorf("the Home tab of a named approver outside the private channel shows its call:\n%s", viewText(home))
	}
}

// A call whose card's rule names a user group, edited into arguments whose
// rule names people none of whom is named on the card, waits on those who
// are both (the agent checks the card's rule and the edit's): a person the
// edit's rule names, outside the group and the private channel, is not
// shown the call on the Home tab, and may not open its forms.
func TestEditIntoOtherApproversShowsTheCallOnlyToThoseOfBoth(t *testing.T) {
	const private = "CPRIVATE93"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = payrollEditPolicy("      approvers: [SOPS00001]\n")
	e.slack.AddUserGroup("SOPS00001", approver, other)
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, other, e.slack.BotUserID()}})
	e.start()
	card := e.pausedThenEdited(private)

	home := e.home(stranger)
	if strings.Contains(viewText(home), "SECRET-42") || strings.Contains(viewText(home), "payroll") {
		t.Errorf("the Home tab of an approver of the edit's rule only, outside the group and the channel, shows the call:\n%s", viewText(home))
	}
	// The approver of both still has it.
	if home := e.home(approver); !strings.Contains(viewText(home), "SECRET-42") {
		t.Errorf("the Home tab of an approver of both rules does not show the call:\n%s", viewText(home))
	}
	// Clicks sent on the card anyway open no form.
	for _, action := range []string{slackapp.ActionReject, slackapp.ActionEdit} {
		_, err := e.slack.Click(stranger, private, card.TS, action, "")
		must(t, err)
	}
	waitUntil(t, "the approver of the edit's rule only is answered twice", func() bool {
		n := 0
		for _, m := range e.slack.Messages(e.slack.DMChannel(stranger)) {
			// Who may decide it is not told to someone who may not see it.
			if strings.Contains(m.Text, "not part of") {
				n++
			}
		}
		return n == 2
	})
	if open := e.slack.OpenModals(stranger); len(open) != 0 {
		t.Errorf("a form opened for an approver of the edit's rule only: %+v", open)
	}
}

// pausedThenEdited has the model ask to deploy api 1 in channel ch, and
// the approver edit the card into payroll SECRET-42; it returns the card.
func (e *env) pausedThenEdited(ch string) fakeslack.Message {
	e.t.Helper()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
	ts := e.slack.Mention(ch, requester, "deploy api 1 before the ACME merger")
	card := e.cardIn(ch, ts, "deploy")
	_, err := e.slack.Click(approver, ch, card.TS, slackapp.ActionEdit, "")
	must(e.t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"payroll","version":"SECRET-42"}`},
	}, "")
	must(e.t, err)
	if strings.Contains(string(ack), "errors") {
		e.t.Fatalf("the edit was refused: %s", ack)
	}
	waitUntil(e.t, "the card shows the edit", func() bool {
		m, _ := e.slack.Message(ch, card.TS)
		return strings.Contains(blocksText(m), "SECRET-42")
	})
	return card
}

// payrollEditPolicy asks two approvals for deploys, with the rule's
// approvers line deployApprovers ("" for anyone in the conversation), and
// names UAPPROVER1 and USTRANGER1 for deploys of payroll.
func payrollEditPolicy(deployApprovers string) string {
	return `
policy:
  default: ask
  rules:
    - id: payroll
      tool: deploy
      when: 'args.service == "payroll"'
      verdict: ask
      approvers: [UAPPROVER1, USTRANGER1]
      min_approvals: 2
    - id: deploys
      tool: deploy
      verdict: ask
` + deployApprovers + `      min_approvals: 2
`
}

// In a channel shared with another organisation, a call open to anyone in
// the conversation is decided by the people of the bot's workspace: a
// member from the other organisation is told so, and their clicks change
// nothing.
func TestOutsidersDoNotDecideOpenCalls(t *testing.T) {
	e, ts, card := sharedChannelCard(t, requester)

	_, err := e.slack.Click(partner, shared, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.ephemeral(partner, "not an approver")
	_, err = e.slack.Click(partner, shared, card.TS, slackapp.ActionReject, "")
	must(t, err)
	e.ephemeral(partner, "guest from another organisation")
	if open := e.slack.OpenModals(partner); len(open) != 0 {
		t.Errorf("a form opened for a guest from another organisation: %+v", open)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on a guest's approval", n)
	}

	_, err = e.slack.Click(other, shared, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(shared, ts, "Deployed api 7.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// Asking grants no right to decide: a guest from another organisation who
// asked for a call open to the conversation may not approve it, nor allow
// its tool for good; someone of this workspace in the channel may.
func TestOutsiderRequesterDoesNotDecideOwnCall(t *testing.T) {
	e, ts, card := sharedChannelCard(t, partner)

	for _, action := range []string{slackapp.ActionRemember, slackapp.ActionApprove} {
		_, err := e.slack.Click(partner, shared, card.TS, action, "")
		must(t, err)
		e.ephemeral(partner, "not an approver")
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on its requester's approval, a guest from another organisation", n)
	}
	_, err := e.slack.Click(other, shared, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(shared, ts, "Deployed api 7.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	ack, err := e.slack.Slash(other, shared, "/approvals", "rules list")
	must(t, err)
	if rules := string(ack); !strings.Contains(rules, "No standing rules") {
		t.Errorf("standing rules after the guest's Always allow: %s, want none", rules)
	}
}

// A requester who left a private channel no longer decides, cancels, opens
// the forms of, or sees on their Home tab, the call they asked for there,
// open to the conversation.
func TestRequesterWhoLeftTheChannelDoesNotDecide(t *testing.T) {
	const private = "CPRIVATE01"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "incident", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	// The requester leaves while the model works, before the card is
	// posted (who can see the channel is kept a minute from then).
	asked, leave := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		if n.Add(1) == 1 {
			close(asked)
			<-leave
			return fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`))
		}
		return fakeopenai.Text("Deployed api 8.")
	})
	e.start()
	ts := e.slack.Mention(private, requester, "deploy api 8")
	<-asked
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "incident", Private: true, Members: []string{other, e.slack.BotUserID()}})
	close(leave)
	card := e.cardIn(private, ts, "deploy")

	// Told in a direct message: Slack shows no private note in a channel
	// to someone not in it.
	told := func(want string) {
		t.Helper()
		waitUntil(t, "the requester is told "+want, func() bool {
			for _, m := range e.slack.Messages(e.slack.DMChannel(requester)) {
				if strings.Contains(m.Text, want) {
					return true
				}
			}
			return false
		})
	}
	_, err := e.slack.Click(requester, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	told("not part of")
	_, err = e.slack.Click(requester, private, card.TS, slackapp.ActionReject, "")
	must(t, err)
	told("not part of")
	// Nor do they cancel it.
	notes := func() int {
		n := 0
		for _, m := range e.slack.Messages(e.slack.DMChannel(requester)) {
			if strings.Contains(m.Text, "not part of") {
				n++
			}
		}
		return n
	}
	before := notes()
	_, err = e.slack.Click(requester, private, card.TS, slackapp.ActionCancel, "")
	must(t, err)
	waitUntil(t, "the requester's Cancel is refused", func() bool {
		m, _ := e.slack.Message(private, card.TS)
		return notes() > before || strings.Contains(blocksText(m), "ancelled")
	})
	if m, _ := e.slack.Message(private, card.TS); strings.Contains(blocksText(m), "ancelled") {
		t.Fatalf("a requester who left the private channel cancelled the call:\n%s", blocksText(m))
	}
	if open := e.slack.OpenModals(requester); len(open) != 0 {
		t.Errorf("a form opened for a requester who left the channel: %+v", open)
	}
	if home := viewText(e.home(requester)); strings.Contains(home, "version") || !strings.Contains(home, "Your requests waiting for approval* (0)") {
		t.Errorf("the Home tab of a requester who left the channel shows the call:\n%s", home)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on the approval of a requester who left the channel", n)
	}
	_, err = e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed api 8.")
}

// Someone who may not see a call (not in its private channel, not one of
// its approvers) and clicks one of its buttons learns nothing of it: not
// who may decide it, nor who asked for it, only that it is not theirs.
func TestRefusalsTellOutsidersNothingOfTheCall(t *testing.T) {
	const private = "CPRIVATE02"
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "payroll", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"payroll","version":"3"}`)), fakeopenai.Text("Deployed payroll 3."))
	ts := e.slack.Mention(private, requester, "deploy payroll 3")
	card := e.cardIn(private, ts, "deploy")

	actions := []string{slackapp.ActionApprove, slackapp.ActionCancel, slackapp.ActionReject, slackapp.ActionEdit}
	for _, action := range actions {
		_, err := e.slack.Click(stranger, private, card.TS, action, "")
		must(t, err)
	}
	var told []string
	waitUntil(t, "the stranger is told of each click", func() bool {
		told = told[:0]
		for _, m := range e.slack.Messages(e.slack.DMChannel(stranger)) {
			told = append(told, m.Text)
		}
		return len(told) == len(actions)
	})
	if open := e.slack.OpenModals(stranger); len(open) != 0 {
		t.Errorf("a form opened for someone who may not see the call: %+v", open)
	}
	for _, text := range told {
		if !strings.Contains(text, "not part of") || strings.Contains(text, approver) || strings.Contains(text, requester) || strings.Contains(text, other) {
			t.Errorf("the stranger was told %q, want only that the call is not theirs", text)
		}
	}
	_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed payroll 3.")
}

// An approver outside the channel, who was sent a copy of the card, and
// whom an edit takes out of those who may decide the call, is not shown
// what the call became on that copy.
func TestEditDoesNotShowItsArgumentsOnACopyOfThoseItTakesOut(t *testing.T) {
	const private = "CPRIVATE94"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = payrollEditPolicy("      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]\n")
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
	e.start()
	e.pausedThenEdited(private)
	dm := e.slack.DMChannel(other)
	var copyOf fakeslack.Message
	waitUntil(t, "the copy in the direct message of the approver outside the channel is updated", func() bool {
		for _, m := range e.slack.Messages(dm) {
			if len(m.Blocks) > 0 && m.Updates > 0 {
				copyOf = m
				return true
			}
		}
		return false
	})
	if text := blocksText(copyOf); strings.Contains(text, "SECRET-42") || strings.Contains(text, "payroll") {
		t.Errorf("the copy of an approver the edit took out shows the edited arguments:\n%s", text)
	}
	// Whose direct message the copy is in was kept when it was opened:
	// updating the copy asks Slack nothing about it.
	for _, c := range e.slack.Calls("conversations.info") {
		if c.Params.Get("channel") == dm {
			t.Errorf("the bot looked up the direct message of a copy it posted: %+v", c)
		}
	}
}

// Members of a channel shared with another organisation (Slack Connect):
// partner is theirs.
const shared, partner = "CSHARED001", "UPARTNER01"

// sharedChannelCard starts a bot whose policy lets anyone in the
// conversation decide, in the channel shared with partner, where asker
// asks to deploy api 7; it returns the thread and the card.
func sharedChannelCard(t *testing.T, asker string) (*env, string, fakeslack.Message) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddUser(fakeslack.User{ID: partner, Name: "partner", TeamID: "T0PARTNER1"})
	e.slack.AddChannel(fakeslack.Channel{ID: shared, Name: "shared-ops", Members: []string{requester, other, partner, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(shared, asker, "deploy api 7")
	return e, ts, e.cardIn(shared, ts, "deploy")
}

// In a direct message with the bot, the requester is the conversation:
// they decide the calls open to it, the bot knowing whose direct message
// it is from their message.
func TestRequesterDecidesOpenCallInTheirDM(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed api 9."))
	dm := e.slack.DMChannel(requester)
	ts := e.slack.DM(requester, "deploy api 9")
	card := e.cardIn(dm, ts, "deploy")
	_, err := e.slack.Click(requester, dm, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(dm, ts, "Deployed api 9.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	// Whose direct message it is came with the message: no look-up.
	for _, c := range e.slack.Calls("conversations.info") {
		if c.Params.Get("channel") == dm {
			t.Errorf("the bot looked up the direct message its requester wrote in: %+v", c)
		}
	}
}

// waitEventAcked waits until the bot acked the first event of type typ:
// it acts on such events before it acks them.
func (e *env) waitEventAcked(typ string) {
	e.t.Helper()
	waitUntil(e.t, "the "+typ+" event is acked", func() bool {
		for _, env := range e.slack.Envelopes() {
			if env.EventType == typ {
				return env.Acked
			}
		}
		return false
	})
}

// Someone who leaves a channel no longer decides the calls that anyone in
// it may decide, at once: the members kept for a minute are asked for
// again once Slack says they left.
func TestWhoLeftTheChannelNoLongerDecides(t *testing.T) {
	const private = "CPRIVATE31"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"16"}`)), fakeopenai.Text("Deployed vault 16."))
	ts := e.slack.Mention(private, requester, "deploy vault 16")
	card := e.cardIn(private, ts, "deploy")
	// The members are looked up, and kept, as the card is posted.
	waitUntil(t, "the channel's members are looked up", func() bool { return len(e.slack.Calls("conversations.members")) > 0 })
	looked := len(e.slack.Calls("conversations.members"))

	e.slack.Leave(private, other)
	e.waitEventAcked("member_left_channel")
	_, err := e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	// Told in a DM, as an ephemeral cannot reach someone outside the
	// channel.
	if _, err := e.slack.WaitMessage(e.slack.DMChannel(other), func(m fakeslack.Message) bool {
		return strings.Contains(m.Text, "Nothing changed")
	}, 10*time.Second); err != nil {
		t.Fatalf("%s, who left the channel, was not told their click changed nothing: %v", other, err)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on the approval of someone who left the channel", n)
	}
	if m, _ := e.slack.Message(private, card.TS); !isCard(m) {
		t.Fatalf("the card changed on the approval of someone who left the channel: %s", m.Blocks)
	}
	if n := len(e.slack.Calls("conversations.members")); n == looked {
		t.Error("the members were not asked for again after someone left")
	}
}

// Someone taken out of the user group a rule names no longer decides its
// calls, at once: the members kept for a minute are asked for again once
// Slack says the group changed.
func TestWhoLeftTheUserGroupNoLongerDecides(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [SOPS00002]
`
	e.slack.AddUserGroup("SOPS00002", approver, other)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"17"}`)), fakeopenai.Text("Deployed api 17."))
	ts := e.slack.Mention(channel, requester, "deploy api 17")
	card := e.card(ts, "deploy")
	// The group's members are looked up, and kept, as the call pauses.
	waitUntil(t, "the group's members are kept", func() bool { return e.bot.app.KeepsGroupMember("SOPS00002", other) })

	e.slack.AddUserGroup("SOPS00002", approver)
	e.waitEventAcked("subteam_members_changed")
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.ephemeral(other, "nothing changed")
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on the approval of someone taken out of the group", n)
	}
	_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 17.")
}

// warmBoth has user click Reject on the card twice, which opens the reason
// form once user is checked as one who may decide: single envelopes sent
// one after the other go to the two replicas' connections in turn, so
// each replica looks up, and keeps, what user is a member of; kept reports
// whether a replica keeps it.
func (e *env) warmBoth(bots []*bot, user, channel, cardTS string, kept func(*bot) bool) {
	e.t.Helper()
	opened := len(e.slack.Calls("views.open"))
	for range 2 {
		_, err := e.slack.Click(user, channel, cardTS, slackapp.ActionReject, "")
		must(e.t, err)
	}
	// Both forms open once the clicks are answered (what a replica keeps
	// may have been looked up before them, at its start).
	waitUntil(e.t, "both replicas keep the members and open the form", func() bool {
		return kept(bots[0]) && kept(bots[1]) && len(e.slack.Calls("views.open")) == opened+2
	})
}

// approveOnBoth has user click Approve on the card twice, once on each
// replica (see warmBoth), and waits until told twice, in what told
// returns, that nothing changed.
func (e *env) approveOnBoth(user, channel, cardTS string, told func() []string) {
	e.t.Helper()
	for range 2 {
		_, err := e.slack.Click(user, channel, cardTS, slackapp.ActionApprove, "")
		must(e.t, err)
	}
	waitUntil(e.t, "both clicks are answered", func() bool {
		n := 0
		for _, text := range told() {
			if strings.Contains(strings.ToLower(text), "nothing changed") {
				n++
			}
		}
		return n == 2
	})
}

// Slack tells one replica that someone left a channel: every replica
// stops counting them as a member at once, rather than for up to the
// minute it keeps the members, and neither lets them decide.
func TestWhoLeftTheChannelNoLongerDecidesOnAnyReplica(t *testing.T) {
	const private = "CPRIVATE32"
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = "policy:\n  default: ask\n"
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
			bots := e.startReplicas(2)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"16"}`)), fakeopenai.Text("Deployed vault 16."))
			ts := e.slack.Mention(private, requester, "deploy vault 16")
			card := e.cardIn(private, ts, "deploy")
			member := func(b *bot) bool { return b.app.KeepsMember(private, other) }
			e.warmBoth(bots, other, private, card.TS, member)

			e.slack.Leave(private, other)
			waitUntil(t, "no replica keeps who left as a member", func() bool { return !member(bots[0]) && !member(bots[1]) })
			e.approveOnBoth(other, private, card.TS, func() (texts []string) {
				for _, m := range e.slack.Messages(e.slack.DMChannel(other)) {
					texts = append(texts, m.Text)
				}
				return texts
			})
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times on the approval of someone who left the channel", n)
			}
			if m, _ := e.slack.Message(private, card.TS); !isCard(m) {
				t.Fatalf("the card changed on the approval of someone who left the channel: %s", m.Blocks)
			}
		})
	}
}

// The same for someone taken out of the user group a rule names.
func TestWhoLeftTheUserGroupNoLongerDecidesOnAnyReplica(t *testing.T) {
	const group = "SOPS00003"
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [` + group + `]
`
			e.slack.AddUserGroup(group, approver, other)
			bots := e.startReplicas(2)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"18"}`)), fakeopenai.Text("Deployed api 18."))
			ts := e.slack.Mention(channel, requester, "deploy api 18")
			card := e.card(ts, "deploy")
			member := func(b *bot) bool { return b.app.KeepsGroupMember(group, other) }
			e.warmBoth(bots, other, channel, card.TS, member)

			e.slack.AddUserGroup(group, approver)
			waitUntil(t, "no replica keeps who left the group as a member", func() bool { return !member(bots[0]) && !member(bots[1]) })
			e.approveOnBoth(other, channel, card.TS, func() (texts []string) {
				for _, m := range e.slack.Ephemerals(other) {
					texts = append(texts, m.Text)
				}
				return texts
			})
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times on the approval of someone taken out of the group", n)
			}
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 18.")
		})
	}
}

// Someone who opened a form while in the channel and left it before
// submitting learns only that the call is not theirs: not who decided it.
func TestFormSubmittedAfterLeavingTellsNothingOfTheCall(t *testing.T) {
	const private = "CPRIVATE33"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, other, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"19"}`)), fakeopenai.Text("Deployed api 19."))
	ts := e.slack.Mention(private, requester, "deploy api 19")
	card := e.cardIn(private, ts, "deploy")
	_, err := e.slack.Click(other, private, card.TS, slackapp.ActionReject, "")
	must(t, err)
	form := e.modal(other, slackapp.CallbackReject)
	e.slack.Leave(private, other)
	e.waitEventAcked("member_left_channel")
	_, err = e.slack.Click(approver, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed api 19.")
	ack, err := e.slack.SubmitView(other, form.ID, map[string]map[string]string{slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "no"}}, "")
	must(t, err)
	if strings.Contains(string(ack), approver) || strings.Contains(string(ack), "approved") {
		t.Errorf("someone who left the channel is told about the call: %s", ack)
	}
	if !strings.Contains(string(ack), "errors") {
		t.Errorf("the submission was not refused: %s", ack)
	}
}

// A call asked under a rule that names approvers and one that names none
// (whose condition could not be evaluated) is decided, and seen, only by
// those of its approvers who can see the conversation: an approver
// outside the private channel gets no copy of its card by DM, arguments
// and all, nor finds it on the Home tab.
func TestCombinedAskSendsNoCopyToApproversOutside(t *testing.T) {
	const private = "CPRIVSEE01"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - {id: eu-anyone-here, tool: deploy, when: 'args.region == "eu"', verdict: ask}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1, USTRANGER1]}
`
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"SECRET-77"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(private, requester, "deploy vault")
	e.cardIn(private, ts, "deploy")
	if h := e.home(stranger); strings.Contains(viewText(h), "SECRET-77") {
		t.Errorf("the Home tab of the approver outside lists the call:\n%s", viewText(h))
	}
	e.stop() // every copy that would be posted is posted by then
	for _, m := range e.slack.Messages(e.slack.DMChannel(stranger)) {
		if strings.Contains(blocksText(m)+m.Text, "SECRET-77") {
			t.Errorf("the approver outside the private channel, who may neither decide nor see the call, got its arguments by DM:\n%s", blocksText(m))
		}
	}
}

// approvedByAGroupsMember starts a call that needs two approvals of
// UAPPROVER1, USTRANGER1 and the members of user group SOPS00003, and has
// the group's one member, other, approve it.
func approvedByAGroupsMember(t *testing.T) (e *env, ts string, card fakeslack.Message) {
	t.Helper()
	e = newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, USTRANGER1, SOPS00003]
      min_approvals: 2
`
	e.slack.AddUserGroup("SOPS00003", other)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed api 1."))
	ts = e.slack.Mention(channel, requester, "deploy api 1")
	card = e.card(ts, "deploy")
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.waitCount(ts, "1 of 2 approvals: <@"+other+">")
	return e, ts, card
}

// A user group that gave one of two approvals is deleted (or disabled:
// Slack then answers no_such_subteam for it). Its member's approval no
// longer counts, and the other named approvers still decide the call:
// they are not told, click after click, that Slack could not be asked.
func TestDeletedGroupDoesNotBlockTheCount(t *testing.T) {
	e, ts, card := approvedByAGroupsMember(t)

	// The group is deleted: Slack says its members changed, and lists it
	// no more.
	e.slack.AddUserGroup("SOPS00003")
	e.waitEventAcked("subteam_members_changed")
	for range 50 {
		e.slack.ErrorNext("usergroups.users.list", "no_such_subteam")
	}
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	waitUntil(t, "the approver's click is counted or refused", func() bool {
		if len(e.slack.Ephemerals(approver)) > 0 {
			return true
		}
		for _, m := range e.cards(channel, ts) {
			if strings.Contains(blocksText(m), "1 of 2 approvals: <@"+approver+">") {
				return true
			}
		}
		return false
	})
	for _, m := range e.slack.Ephemerals(approver) {
		t.Errorf("the approver's approval was refused: %q", m.Text)
	}
}

// A user group disabled after one of its members gave one of two
// approvals no longer counts that approval, at once: Slack's
// subteam_updated event drops the members kept, as taking the member out
// of the group would. The next approval is then the first of two, not the
// one that runs the call.
func TestDisabledGroupsApprovalNoLongerCounts(t *testing.T) {
	e, ts, card := approvedByAGroupsMember(t)
	e.slack.DisableUserGroup("SOPS00003")
	e.waitEventAcked("subteam_updated")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.waitCount(ts, "1 of 2 approvals: <@"+approver+">")
	if args := e.deployArgs(); len(args) != 0 {
		t.Errorf("deploy ran with %q on the approval of a disabled group's member", args)
	}
}
