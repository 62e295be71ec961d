package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// A call whose card's rule names approvers, edited into arguments whose
// rule names none (anyone in the conversation decides), needs its
// deciders in the conversation from then on, as the agent checks on
// every decision: an approver the card names, outside the private
// channel, is not shown what the call became on their copy of the card
// nor on their Home tab, and neither decides it nor opens its forms; an
// approver in the channel still sees it and completes the count.
func TestEditIntoAnOpenRuleKeepsTheCallInItsConversation(t *testing.T) {
	const private = "CPRIVATE95"
	e, card := editedIntoAnOpenRule(t, private)
	e.model.Reply(fakeopenai.Text("Deployed payroll SECRET-42."))

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
		t.Errorf("the copy of an approver outside the channel shows the arguments of an edit open to the conversation:\n%s", text)
	}
	if home := viewText(e.home(other)); strings.Contains(home, "SECRET-42") || strings.Contains(home, "payroll") {
		t.Errorf("the Home tab of an approver outside the channel shows the arguments of an edit open to the conversation:\n%s", home)
	}

	// Clicks on the copy change nothing, open no form, and tell the
	// approver outside the channel only that the call is not theirs.
	for _, action := range []string{slackapp.ActionApprove, slackapp.ActionReject} {
		_, err := e.slack.Click(other, dm, copyOf.TS, action, "")
		must(t, err)
	}
	waitUntil(t, "the approver outside the channel is answered twice", func() bool {
		var told []string
		for _, m := range e.slack.Ephemerals(other) {
			told = append(told, m.Text)
		}
		for _, m := range e.slack.Messages(dm) {
			if m.TS != copyOf.TS {
				told = append(told, m.Text)
			}
		}
		n := 0
		for _, text := range told {
			if strings.Contains(text, "UAPPROVER1") || strings.Contains(text, "USTRANGER1") {
				t.Fatalf("the approver outside the channel was told who may decide the call: %q", text)
			}
			if strings.Contains(text, "not part of") {
				n++
			}
		}
		return n == 2
	})
	if open := e.slack.OpenModals(other); len(open) != 0 {
		t.Errorf("a form opened for an approver outside the channel: %+v", open)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on the approval of an approver outside the channel", n)
	}

	// The approvers in the channel still see the edit and decide it.
	if home := viewText(e.home(approver)); !strings.Contains(home, "SECRET-42") {
		t.Errorf("the Home tab of the editor, in the channel, does not show the edit:\n%s", home)
	}
	_, err := e.slack.Click(stranger, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, card.ThreadTS, "Deployed payroll SECRET-42.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// editedIntoAnOpenRule starts a bot whose card rule, deploys, names three
// approvers, one of them (other) outside the private channel ch, and whose
// rule for the edited arguments, payroll, names none and needs two
// approvals; the approver edits the card into payroll SECRET-42. It
// returns the card.
func editedIntoAnOpenRule(t *testing.T, ch string) (*env, fakeslack.Message) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: payroll
      tool: deploy
      when: 'args.service == "payroll"'
      verdict: ask
      min_approvals: 2
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]
`
	e.slack.AddChannel(fakeslack.Channel{ID: ch, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
	e.start()
	return e, e.pausedThenEdited(ch)
}
