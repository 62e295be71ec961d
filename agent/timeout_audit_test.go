package agent_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// A call cut by TOOL_TIMEOUT is audited as the model is told of it: of
// unknown outcome for a tool that is neither read-only nor idempotent,
// which may have done its work; an error for a read-only one.
func TestTimedOutCallIsAuditedAsTheModelIsTold(t *testing.T) {
	for _, tt := range []struct {
		hints approvals.Hints
		want  string
	}{{approvals.Hints{}, "slow unknown"}, {approvals.Hints{ReadOnly: true}, "slow error"}} {
		w := newWorld(t, backends(t)[0])
		w.cfg.ToolTimeout = 50 * time.Millisecond
		w.policy = "policy:\n  rules:\n    - tool: slow\n      verdict: allow\n"
		must(t, w.reg.Register(agent.Tool{Name: "slow", Description: "Takes its time.", Schema: json.RawMessage(`{"type":"object"}`), Annotations: tt.hints,
			Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
				<-ctx.Done()
				return agent.Result{}, ctx.Err()
			}}))
		w.model.Reply(fakeopenai.ToolCalls(call("c1", "slow", `{}`)), fakeopenai.Text("done"))
		_, err := w.agent().Run(context.Background(), request("go"))
		must(t, err)
		if got := toolExecutions(t, w.store, "slow"); len(got) != 1 || got[0] != tt.want {
			t.Errorf("read-only %v: audited executions %q, want %q (the model was told %q)", tt.hints.ReadOnly, got, tt.want, toolResults(t, w.model))
		}
	}
}

// A call whose tool says it cannot tell whether it did its work (an MCP
// server that gave no answer, a request sent whose answer never came) is
// audited as of unknown outcome, as the model is told, not as a failure;
// one its tool did not send as not sent; a plain failure stays an error.
func TestToolsUnknownOutcomeIsAudited(t *testing.T) {
	for _, tt := range []struct {
		res  agent.Result
		want string
	}{
		{agent.UnknownOutcomeResult("no answer: " + agent.UnknownOutcome), "write unknown"},
		{agent.Result{Content: "refused", IsError: true}, "write error"},
		{agent.NotSentResult("not sent"), "write not_sent"},
	} {
		w := newWorld(t, backends(t)[0])
		w.policy = "policy:\n  rules:\n    - tool: write\n      verdict: allow\n"
		must(t, w.reg.Register(agent.Tool{Name: "write", Description: "Writes.", Schema: json.RawMessage(`{"type":"object"}`),
			Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return tt.res, nil }}))
		w.model.Reply(fakeopenai.ToolCalls(call("c1", "write", `{}`)), fakeopenai.Text("done"))
		_, err := w.agent().Run(context.Background(), request("go"))
		must(t, err)
		if got := toolExecutions(t, w.store, "write"); len(got) != 1 || got[0] != tt.want {
			t.Errorf("result %q: audited executions %q, want %q", tt.res.Content, got, tt.want)
		}
	}
}
