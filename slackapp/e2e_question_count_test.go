package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// isQuestionCard reports whether m is a question's card, with its Reply
// button.
func isQuestionCard(m fakeslack.Message) bool {
	return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
}

// One answer settles a question whatever its rule's approval count: under
// a two-person rule it is put to those who may answer (in a DM, the
// requester), and their answer reaches the model.
func TestQuestionUnderATwoPersonRule(t *testing.T) {
	t.Run("in a DM", func(t *testing.T) {
		e := newEnv(t, storeKinds(t)[0])
		e.policy = "policy:\n  default: ask\n  rules:\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      min_approvals: 2\n"
		e.start()
		e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)), fakeopenai.Text("Going to eu-west."))
		dm := e.slack.DMChannel(requester)
		ts := e.slack.DM(requester, "deploy somewhere")
		first := e.waitIn(dm, ts, "a question card or an answer", func(m fakeslack.Message) bool {
			return isQuestionCard(m) || m.BotID != "" && strings.Contains(m.Text, "Going to")
		})
		if !isQuestionCard(first) {
			t.Fatalf("the question was not put to the requester; the model was told %+v", toolResults(e.request(2)))
		}
		_, err := e.slack.Click(requester, dm, first.TS, slackapp.ActionRespond, "")
		must(t, err)
		view := e.modal(requester, slackapp.CallbackRespond)
		ack, err := e.slack.SubmitView(requester, view.ID, map[string]map[string]string{slackapp.BlockAnswer: {slackapp.ActionAnswer: "eu-west"}}, "")
		must(t, err)
		if strings.Contains(string(ack), "errors") {
			t.Fatalf("the requester's answer was refused: %s", ack)
		}
		e.waitIn(dm, ts, "the answer", func(m fakeslack.Message) bool { return m.BotID != "" && strings.Contains(m.Text, "Going to eu-west.") })
		if got := toolResults(e.request(2)); len(got) != 1 || !strings.Contains(got[0].Content, "eu-west") {
			t.Errorf("the model read %+v, want the answer", got)
		}
	})
	t.Run("four eyes, asked by one of two approvers", func(t *testing.T) {
		e := newEnv(t, storeKinds(t)[0])
		e.policy = "policy:\n  default: ask\n  rules:\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      approvers: [UAPPROVER1, UOTHER0001]\n      four_eyes: true\n      min_approvals: 2\n"
		e.start()
		e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)), fakeopenai.Text("ok then"))
		ts := e.slack.Mention(channel, approver, "deploy somewhere")
		first := e.waitThread(ts, "a question card or an answer", func(m fakeslack.Message) bool {
			return isQuestionCard(m) || m.BotID != "" && strings.Contains(m.Text, "ok then")
		})
		if !isQuestionCard(first) {
			t.Errorf("the question was not put to %s; the model was told %+v", other, toolResults(e.request(2)))
		}
	})
}
