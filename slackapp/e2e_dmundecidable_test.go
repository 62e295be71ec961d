package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// In a DM only the requester can see the conversation, so a four-eyes rule
// naming no approvers leaves no one who could approve the call: the model
// is told so at once, and no card that would wait out its TTL is posted.
func TestOpenFourEyesCallInDMIsDeniedAtOnce(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n  rules:\n    - id: eyes\n      tool: deploy\n      verdict: ask\n      four_eyes: true\n"
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("I could not deploy."))
	dm := e.slack.DMChannel(requester)
	ts := e.slack.DM(requester, "deploy api 9")
	first := e.waitIn(dm, ts, "with a card or the answer", func(m fakeslack.Message) bool {
		return isCard(m) || m.BotID != "" && strings.Contains(m.Text+blocksText(m), "I could not deploy.")
	})
	if isCard(first) {
		t.Fatalf("a card only its requester can see, who may not approve it, was posted in the DM: %s", blocksText(first))
	}
	results := toolResults(e.request(2))
	if len(results) != 1 || !strings.Contains(results[0].Content, "rule eyes") || !strings.Contains(results[0].Content, "direct message") {
		t.Errorf("the model was told %+v, want the deny of rule eyes saying why a direct message leaves no approver", results)
	}
	if cards := e.cards(dm, ts); len(cards) > 0 {
		t.Errorf("%d approval card(s) in the DM", len(cards))
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times", n)
	}
}
