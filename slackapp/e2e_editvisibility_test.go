package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// outsideCopy waits until the copy of the card in the direct message of
// user holds want, and returns it.
func outsideCopy(t *testing.T, e *env, user, want string) fakeslack.Message {
	t.Helper()
	dm := e.slack.DMChannel(user)
	var copyOf fakeslack.Message
	waitUntil(t, "the copy in the direct message of "+user+" shows "+want, func() bool {
		for _, m := range e.slack.Messages(dm) {
			if len(m.Blocks) > 0 && strings.Contains(blocksText(m), "deploy") && strings.Contains(blocksText(m), want) {
				copyOf = m
				return true
			}
		}
		return false
	})
	return copyOf
}

// toldOutside waits until user, answered in their direct message or
// privately, has been told n times that the call is not theirs (the
// messages other than the card's copy at copyTS), and fails if any of
// those answers names who may decide the call.
func toldOutside(t *testing.T, e *env, user, copyTS string, n int) {
	t.Helper()
	dm := e.slack.DMChannel(user)
	waitUntil(t, user+" is told the call is not theirs", func() bool {
		var told []string
		for _, m := range e.slack.Ephemerals(user) {
			told = append(told, m.Text)
		}
		for _, m := range e.slack.Messages(dm) {
			if m.TS != copyTS {
				told = append(told, m.Text)
			}
		}
		got := 0
		for _, text := range told {
			if strings.Contains(text, approver) || strings.Contains(text, stranger) {
				t.Fatalf("the approver outside the channel was told who may decide the call: %q", text)
			}
			if strings.Contains(text, "not part of") {
				got++
			}
		}
		return got >= n
	})
}

// A call edited into a rule that names no approvers, or into one that
// names approvers the card's approver outside the conversation is not
// among, and then decided with the edit stays out of sight of that
// approver: the copy of the card in their direct message, updated with
// the decision and the outcome, is still sealed (neither the edited
// arguments nor the model's), and "View full arguments" on it shows them
// nothing, as while the edit was pending.
func TestEditDecidedStaysSealedForThoseItTookOut(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setUp func(t *testing.T, ch string) (*env, fakeslack.Message)
	}{
		{name: "open to the conversation", setUp: editedIntoAnOpenRule},
		{name: "named approvers", setUp: func(t *testing.T, ch string) (*env, fakeslack.Message) {
			e := newEnv(t, storeKinds(t)[0])
			e.policy = payrollEditPolicy("      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]\n")
			e.slack.AddChannel(fakeslack.Channel{ID: ch, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
			e.start()
			return e, e.pausedThenEdited(ch)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const private = "CPRIVATE97"
			e, card := tc.setUp(t, private)
			e.model.Reply(fakeopenai.Text("Deployed payroll."))
			outsideCopy(t, e, other, "Not shown here")

			_, err := e.slack.Click(stranger, private, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answerIn(private, card.ThreadTS, "Deployed payroll.")
			if n := e.deploy.Load(); n != 1 {
				t.Fatalf("deploy ran %d times, want 1", n)
			}
			// An update of the copy after the decision: the outcome.
			copyOf := outsideCopy(t, e, other, "Outcome")
			text := blocksText(copyOf)
			if !strings.Contains(text, "Edited by") {
				t.Fatalf("the copy of the approver outside the channel does not show the decision:\n%s", text)
			}
			if strings.Contains(text, "SECRET-42") || strings.Contains(text, "payroll") || !strings.Contains(text, "Not shown here") {
				t.Fatalf("once the edit was decided, the copy of the approver outside the channel is not sealed:\n%s", text)
			}
			if home := viewText(e.home(other)); strings.Contains(home, "SECRET-42") || strings.Contains(home, "payroll") {
				t.Errorf("the Home tab of the approver outside the channel shows the decided edit:\n%s", home)
			}

			dm := e.slack.DMChannel(other)
			_, err = e.slack.Click(other, dm, copyOf.TS, slackapp.ActionViewArgs, "")
			must(t, err)
			toldOutside(t, e, other, copyOf.TS, 1)
			if open := e.slack.OpenModals(other); len(open) != 0 {
				t.Errorf("the arguments of the decided edit opened for the approver outside the channel: %+v", open)
			}
		})
	}
}

// A rejection of a call edited into a rule that names no approvers is
// not shown, with its reason, to the card's approvers outside the
// conversation.
func TestEditOpenToTheConversationRejectedStaysSealedOutside(t *testing.T) {
	const private = "CPRIVATE98"
	e, card := editedIntoAnOpenRule(t, private)
	e.model.Reply(fakeopenai.Text("Not deploying."))
	outsideCopy(t, e, other, "Not shown here")

	if ack := e.reject(stranger, private, card.TS, "not before the ACME merger closes"); strings.Contains(string(ack), "errors") {
		t.Fatalf("the rejection was refused: %s", ack)
	}
	e.answerIn(private, card.ThreadTS, "Not deploying.")
	copyOf := outsideCopy(t, e, other, "Rejected by")
	if text := blocksText(copyOf); strings.Contains(text, "ACME") || strings.Contains(text, "SECRET-42") || strings.Contains(text, "payroll") || !strings.Contains(text, "Not shown here") {
		t.Errorf("once the edit was rejected, the copy of the approver outside the channel is not sealed:\n%s", text)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times after a rejection", n)
	}
}

// A card's approver outside the conversation, whom an edit into a rule
// that names no approvers leaves out, cannot deny the edited call either:
// they are told it is not theirs, the call stays pending, and the
// approvers in the channel decide it.
func TestEditOpenToTheConversationIsNotDeniedFromOutside(t *testing.T) {
	const private = "CPRIVATE99"
	e, card := editedIntoAnOpenRule(t, private)
	e.model.Reply(fakeopenai.Text("Deployed payroll."))
	copyOf := outsideCopy(t, e, other, "Not shown here")

	_, err := e.slack.Click(other, e.slack.DMChannel(other), copyOf.TS, slackapp.ActionDeny, "")
	must(t, err)
	toldOutside(t, e, other, copyOf.TS, 1)
	if m, _ := e.slack.Message(private, card.TS); strings.Contains(blocksText(m), "Denied") {
		t.Fatalf("the approver outside the channel denied the edited call:\n%s", blocksText(m))
	}

	_, err = e.slack.Click(stranger, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, card.ThreadTS, "Deployed payroll.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if m, _ := e.slack.Message(private, card.TS); strings.Contains(blocksText(m), "Denied") || !strings.Contains(blocksText(m), "Edited by") {
		t.Errorf("the card does not show the edit decided by the approvers in the channel:\n%s", blocksText(m))
	}
}

// A call whose card's rule names a user group, edited into arguments whose
// rule names people none of whom the card names, and then denied, is
// seen, as the edit was, by those of both: a person the edit's rule names,
// outside the group and the private channel, is not shown its arguments
// ("View full arguments" on the card), while an approver of both is.
func TestEditIntoOtherApproversDecidedShowsTheCallOnlyToThoseOfBoth(t *testing.T) {
	const private = "CPRIVATE9A"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = payrollEditPolicy("      approvers: [SOPS00001]\n")
	e.slack.AddUserGroup("SOPS00001", approver, other)
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, other, e.slack.BotUserID()}})
	e.start()
	// Arguments too long for the card: "View full arguments" shows them.
	long := strings.Repeat("9", 4000)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"`+long+`"}`)))
	ts := e.slack.Mention(private, requester, "deploy api")
	card := e.cardIn(private, ts, "deploy")
	_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"payroll","version":"SECRET-42"}`},
	}, "")
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Fatalf("the edit was refused: %s", ack)
	}
	waitUntil(t, "the card shows the edit", func() bool {
		m, _ := e.slack.Message(private, card.TS)
		return strings.Contains(blocksText(m), "SECRET-42")
	})
	e.model.Reply(fakeopenai.Text("Not deploying."))
	_, err = e.slack.Click(other, private, card.TS, slackapp.ActionDeny, "")
	must(t, err)
	e.answerIn(private, ts, "Not deploying.")
	waitUntil(t, "the card shows the Deny", func() bool {
		m, _ := e.slack.Message(private, card.TS)
		return strings.Contains(blocksText(m), "Denied by")
	})

	_, err = e.slack.Click(stranger, private, card.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	toldOutside(t, e, stranger, "", 1)
	if open := e.slack.OpenModals(stranger); len(open) != 0 {
		t.Errorf("the arguments of the denied call opened for an approver of the edit's rule only: %+v", open)
	}
	_, err = e.slack.Click(approver, private, card.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	waitUntil(t, "the arguments open for an approver of both rules", func() bool {
		return len(e.slack.OpenModals(approver)) > 0
	})
}

// An edit that decides a one-approval call at once, into a rule that names
// no approvers or leaves a card approver out, is not shown to that
// approver's copy outside the conversation: only people who could have
// decided the edit see its arguments, as when it waits on approvals.
func TestEditDecidedAtOnceStaysSealedForThoseItTookOut(t *testing.T) {
	for _, cs := range []struct{ name, payroll string }{
		{"open to the conversation", ""},
		{"other named approvers", "      approvers: [UAPPROVER1, USTRANGER1]\n"},
	} {
		t.Run(cs.name, func(t *testing.T) {
			const private = "CPRIVATEV1"
			e := newEnv(t, storeKinds(t)[0])
			e.policy = `
policy:
  default: ask
  rules:
    - id: payroll
      tool: deploy
      when: 'args.service == "payroll"'
      verdict: ask
` + cs.payroll + `    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]
`
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
			ts := e.slack.Mention(private, requester, "deploy api 1")
			card := e.cardIn(private, ts, "deploy")
			outsideCopy(t, e, other, "deploy")

			e.model.Reply(fakeopenai.Text("Deployed payroll."))
			_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionEdit, "")
			must(t, err)
			view := e.modal(approver, slackapp.CallbackEdit)
			ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
				slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"payroll","version":"SECRET-42"}`},
			}, "")
			must(t, err)
			if strings.Contains(string(ack), "errors") {
				t.Fatalf("the edit was refused: %s", ack)
			}
			e.answerIn(private, ts, "Deployed payroll.")
			if n := e.deploy.Load(); n != 1 {
				t.Fatalf("deploy ran %d times, want 1", n)
			}
			copyOf := outsideCopy(t, e, other, "Outcome")
			if text := blocksText(copyOf); strings.Contains(text, "SECRET-42") || strings.Contains(text, "payroll") {
				t.Errorf("the copy of the card approver outside the channel shows the edit only people of the conversation could decide:\n%s", text)
			}
		})
	}
}
