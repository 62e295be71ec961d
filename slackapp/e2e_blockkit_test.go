package slackapp_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
)

// A long answer posted when it could not be streamed reaches the thread
// whole: it is split into messages whose blocks Slack takes, not one Slack
// refuses as msg_blocks_too_long (which is not retried, and would lose it).
func TestLongPostedAnswerIsNotRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "Paragraph %d: %s\n\n", i, strings.Repeat("the quick brown fox jumps over the lazy dog ", 12))
	}
	b.WriteString("THE END")
	e.model.Reply(fakeopenai.Response{Text: b.String(), Chunks: 4})
	ts := e.slack.Mention(channel, requester, "tell me everything")
	e.answer(ts, "THE END")
	var shown strings.Builder
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" {
			shown.WriteString(blocksText(m))
		}
	}
	for i := range 60 {
		if !strings.Contains(shown.String(), fmt.Sprintf("Paragraph %d:", i)) {
			t.Errorf("paragraph %d of the answer is not in the thread", i)
		}
	}
	for _, c := range e.slack.Calls("chat.postMessage") {
		if c.Error != "" {
			t.Errorf("chat.postMessage failed with %s", c.Error)
		}
	}
}

// A Why? whose explanation renders to nothing (the model answered an empty
// heading) is still posted: Slack refuses a block with empty text.
func TestWhyWithAnEmptyExplanationIsPosted(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("#"))
	ts := e.slack.Mention(channel, requester, "deploy api 7")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.answer(ts, "Explanation")
	for _, c := range e.slack.Calls("chat.postMessage") {
		if c.Error != "" {
			t.Errorf("chat.postMessage failed with %s", c.Error)
		}
	}
}
