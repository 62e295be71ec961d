package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Reject with reason: the modal's reason reaches the model verbatim with
// the reviewer's id, nothing runs, and the card says who rejected and why.
func TestRejectWithReasonModal(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Understood, no deploy today."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")

	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackReject)
	const reason = "Not on a Friday: wait for Monday's change window (ticket OPS-42)."
	ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: reason},
	}, "")
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Fatalf("the reject modal was refused: %s", ack)
	}

	e.answer(ts, "Understood, no deploy today.")
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times after a reject", n)
	}
	results := toolResults(e.request(2))
	if len(results) != 1 {
		t.Fatalf("the model got %d tool results, want 1", len(results))
	}
	got := results[0].Content
	if !strings.Contains(got, reason) || !strings.Contains(got, approver) || !strings.HasPrefix(got, "not performed") {
		t.Errorf("the model read %q; want the reason verbatim, by %s", got, approver)
	}

	updated := e.waitThread(ts, "with the rejected card", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Rejected by <@"+approver+">")
	})
	if isCard(updated) || strings.Contains(string(updated.Blocks), `"action_id":"reject"`) {
		t.Errorf("the rejected card still has decision buttons: %s", updated.Blocks)
	}
	if !strings.Contains(blocksText(updated), reason) {
		t.Errorf("the rejected card does not show the reason: %s", updated.Blocks)
	}
}

// Edit arguments: invalid JSON and schema errors are shown inline and run
// nothing; valid edited arguments run once, and the model is told they
// were edited.
func TestEditArgumentsModal(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1.0.0"}`)), fakeopenai.Text("Deployed the edited version."))
	ts := e.slack.Mention(channel, requester, "deploy api")
	card := e.card(ts, "deploy")

	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	if !strings.Contains(string(view.JSON), "initial_value") || !strings.Contains(string(view.JSON), `\"version\": \"1.0.0\"`) {
		t.Errorf("the edit modal is not prefilled with the arguments: %s", view.JSON)
	}

	submit := func(text string) string {
		t.Helper()
		ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
			slackapp.BlockEditArgs: {slackapp.ActionEditArgs: text},
		}, "")
		must(t, err)
		return string(ack)
	}
	inlineError := func(ack, want string) {
		t.Helper()
		if !strings.Contains(ack, `"response_action":"errors"`) || !strings.Contains(ack, `"`+slackapp.BlockEditArgs+`":`) {
			t.Fatalf("the submission was not refused inline on the edit block: %s", ack)
		}
		if !strings.Contains(ack, want) {
			t.Errorf("the inline error does not mention %q: %s", want, ack)
		}
		if open := e.slack.OpenModals(approver); len(open) == 0 {
			t.Error("the modal closed although the input was refused")
		}
	}

	inlineError(submit(`{"service":`), "JSON")
	inlineError(submit(`{"service":"api"}`), "version is required")
	wrongType := submit(`{"service":"api","version":3}`)
	inlineError(wrongType, `version must be a string, got 3`)
	if strings.Contains(wrongType, "call the tool") || strings.Contains(wrongType, "at /") {
		t.Errorf("the edit form's error speaks to the model, not to a person: %s", wrongType)
	}
	// A refused edit is refused in its ack, with nothing left running (the
	// edited deploy below runs once, and only with the edit).
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times on refused edits", n)
	}
	if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 {
		t.Errorf("a refused edit changed the card")
	}

	if ack := submit(`{"service": "api", "version": "1.0.1"}`); strings.Contains(ack, "errors") {
		t.Fatalf("valid edited arguments were refused: %s", ack)
	}
	e.answer(ts, "Deployed the edited version.")
	if got := e.deployArgs(); len(got) != 1 || got[0] != `{"service":"api","version":"1.0.1"}` {
		t.Errorf("deploy ran with %q, want the edited arguments once", got)
	}
	results := toolResults(e.request(2))
	if len(results) != 1 || !strings.HasPrefix(results[0].Content, "Note: user "+approver+" edited the arguments") {
		t.Errorf("the model's tool result does not start with the edit note: %+v", results)
	} else if !strings.Contains(results[0].Content, "deployed ") {
		t.Errorf("the model's tool result lacks the output: %q", results[0].Content)
	}
	updated, _ := e.slack.Message(channel, card.TS)
	if !strings.Contains(blocksText(updated), "Edited by <@"+approver+">") || !strings.Contains(blocksText(updated), "1.0.1") {
		t.Errorf("the card does not show the edit: %s", updated.Blocks)
	}
}

// ask_human: the card shows the question with a Reply button; the answer
// typed in the modal is the tool result.
func TestAskHumanReply(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)), fakeopenai.Text("Deploying to eu-west-1."))
	ts := e.slack.Mention(channel, requester, "deploy somewhere")
	card := e.waitThread(ts, "with a question card", func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
	})
	if !strings.Contains(blocksText(card), "Which region?") {
		t.Errorf("the card does not show the question: %s", card.Blocks)
	}
	if isCard(card) {
		t.Errorf("a question card has an Approve button: %s", card.Blocks)
	}

	_, err := e.slack.Click(requester, channel, card.TS, slackapp.ActionRespond, "")
	must(t, err)
	view := e.modal(requester, slackapp.CallbackRespond)
	if !strings.Contains(string(view.JSON), "Which region?") {
		t.Errorf("the reply modal does not show the question: %s", view.JSON)
	}
	ack, err := e.slack.SubmitView(requester, view.ID, map[string]map[string]string{
		slackapp.BlockAnswer: {slackapp.ActionAnswer: "eu-west-1, please"},
	}, "")
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Fatalf("the answer was refused: %s", ack)
	}
	e.answer(ts, "Deploying to eu-west-1.")
	results := toolResults(e.request(2))
	if len(results) != 1 || results[0].Content != "User "+requester+" answered: eu-west-1, please" || results[0].ToolCallID != "q1" {
		t.Errorf("the model's tool results are %+v, want the answer, and who gave it, for q1", results)
	}
	updated, _ := e.slack.Message(channel, card.TS)
	if !strings.Contains(blocksText(updated), "Answered by <@"+requester+">") {
		t.Errorf("the card does not say who answered: %s", updated.Blocks)
	}
}
