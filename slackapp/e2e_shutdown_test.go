package slackapp_test

import (
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Work queued behind a long turn when the bot stops is answered, not
// dropped: a follow-up in a thread of the bot's gets a note asking to send
// it again, and a click is told that nothing was recorded.
func TestShutdownAnswersQueuedFollowUpsAndClicks(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.Workers = 1
	e.cfg.ShutdownGrace = 500 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"17"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 17")
	card := e.card(ts, "deploy")

	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Response{Text: "slow", Delay: 2 * time.Second}
	})
	const busy = "CBUSY0009"
	e.slack.AddChannel(fakeslack.Channel{ID: busy, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.Mention(busy, requester, "hi")
	waitUntil(t, "the long turn reaches the model", func() bool { return len(e.model.Requests()) >= 2 })
	e.slack.ThreadReply(channel, ts, requester, "are you still there?")
	click, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	if _, err := e.slack.WaitAck(click, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the click is looked up and queued
	e.stop()

	found := false
	for _, m := range e.slack.Thread(channel, ts) {
		found = found || m.BotID != "" && strings.Contains(m.Text, "I was restarting before I got to this")
	}
	if !found {
		t.Errorf("the queued follow-up got no note; thread:\n%s", dumpThread(e.slack.Thread(channel, ts)))
	}
	e.ephemeral(approver, slackapp.DecisionFailedText())
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times on a click queued at shutdown", n)
	}
}
