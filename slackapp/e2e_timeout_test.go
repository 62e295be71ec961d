package slackapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// An approved call that its time-out cuts, of a tool neither read-only nor
// idempotent, may have done its work: its card says its outcome is
// unknown, as the model is told, not that it failed.
func TestApprovedCallThatTimedOutHasAnUnknownOutcomeOnItsCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.toolTimeout = 50 * time.Millisecond
	e.policy = "policy:\n  rules:\n    - tool: slow\n      verdict: ask\n"
	must(t, e.reg.Register(agent.Tool{Name: "slow", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		}}))
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "slow", `{}`)), fakeopenai.Text("It timed out."))
	ts := e.slack.Mention(channel, requester, "go slow")
	card := e.card(ts, "slow")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "It timed out.")
	// The card says "running…" until the call's result is saved, then
	// what became of it.
	m := e.waitThread(ts, "the card with the call's outcome", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "*Outcome:*") && !strings.Contains(blocksText(m), "running")
	})
	if text := blocksText(m); !strings.Contains(text, "*Outcome:* outcome unknown: it may have done its work") {
		t.Errorf("the card of a call cut by its time-out says:\n%s\nwant its outcome unknown", text)
	}
}

// An approved call its tool did not send (an MCP server that is down, or
// listed its tools otherwise since the call was checked) shows on its card
// as not sent, not as run with an error.
func TestCardOfACallNotSentSaysSo(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: write\n      verdict: ask\n"
	must(t, e.reg.Register(agent.Tool{Name: "write", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.NotSentResult("MCP server s is unavailable, so the call was not sent"), nil
		}}))
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "write", `{}`)), fakeopenai.Text("It was not sent."))
	ts := e.slack.Mention(channel, requester, "write")
	card := e.card(ts, "write")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "It was not sent.")
	m := e.waitThread(ts, "the card with the call's outcome", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "*Outcome:*") && !strings.Contains(blocksText(m), "running")
	})
	if text := blocksText(m); !strings.Contains(text, "*Outcome:* not sent: it did nothing") {
		t.Errorf("the card of a call its tool did not send says:\n%s\nwant it not sent", text)
	}
}
