package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
)

// "Always allow these arguments here" stores a rule for exactly the card's
// arguments: the card the whole channel reads must not say the tool is
// allowed in the channel from now on (a call of it with other arguments
// still asks).
func TestExactAllowCardInTheThreadSaysTheseArgumentsOnly(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.start()
	const args = `{"service":"api","version":"7"}`
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("Deployed 7."))
	ts := e.slack.Mention(channel, requester, "deploy 7")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRememberExact, "")
	must(t, err)
	e.answer(ts, "Deployed 7.")
	updated, _ := e.slack.Message(channel, card.TS)
	text := blocksText(updated)
	if !strings.Contains(text, "Approved by") {
		t.Fatalf("card not decided: %s", text)
	}
	if !strings.Contains(text, "these exact arguments allowed in this channel from now on") {
		t.Errorf("the card says the tool is allowed in the channel from now on, but the rule stored allows only these exact arguments:\n%s", text)
	}
}

// A call decided with an edit, whose model's and edited arguments are both
// too long for the card, offers each whole: View full arguments beside the
// model's opens theirs, beside the edited ones the arguments that ran.
func TestEditedCallsLongArgumentsCanBothBeViewed(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.start()
	model, edited := strings.Repeat("a", 4000), strings.Repeat("b", 4000)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"`+model+`","version":"7"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	if ack := e.submitEdit(approver, card.TS, `{"service":"`+edited+`","version":"7"}`); strings.Contains(ack, "errors") {
		t.Fatalf("the edit was refused: %s", ack)
	}
	e.answer(ts, "Deployed.")
	waitUntil(t, "the card shows the edit decided", func() bool {
		m, _ := e.slack.Message(channel, card.TS)
		return strings.Contains(blocksText(m), "Edited by")
	})
	for _, v := range []struct{ action, want, not string }{
		{slackapp.ActionViewModelArgs, model, edited},
		{slackapp.ActionViewArgs, edited, model},
	} {
		_, err := e.slack.Click(approver, channel, card.TS, v.action, "")
		must(t, err)
		view := e.modal(approver, slackapp.CallbackViewArgs)
		if text := string(view.JSON); !strings.Contains(text, v.want[:100]) || strings.Contains(text, v.not[:100]) {
			t.Errorf("%s opened the wrong arguments:\n%.300s", v.action, text)
		}
		must(t, e.slack.CloseView(approver, view.ID))
	}
}
