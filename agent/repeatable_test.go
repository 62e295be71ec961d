package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// An approved call of a tool that said it was neither read-only nor
// idempotent starts, and the bot dies while it runs; its MCP server then
// redeploys saying idempotentHint. The resume that takes the run over
// reports the call as of unknown outcome, and does not run it again:
// what the tool says of itself only since does not make a call that
// started as neither run twice.
func TestStartedCallIsNotRunAgainForAHintGivenSince(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			scales := &counter{}
			must(t, w.reg.Register(agent.Tool{Name: "scale", Schema: json.RawMessage(envSchema), Handler: scales.handler("scaled")}))
			w.policy = "policy:\n  rules:\n    - id: scale\n      tool: scale\n      verdict: ask\n"
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "scale", `{"env":"prod"}`))
			_, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			// A resume marks it started, and its process dies as it runs.
			if ok, err := w.store.BeginExecution(t.Context(), p.ID, "a1"); err != nil || !ok {
				t.Fatalf("BeginExecution = %v, %v", ok, err)
			}
			must(t, w.reg.Replace(func(n string) bool { return n == "scale" }, []agent.Tool{{Name: "scale", Schema: json.RawMessage(envSchema),
				Annotations: approvals.Hints{Idempotent: true}, Handler: scales.handler("scaled")}}))
			w.model.Reply(fakeopenai.Text("done"))
			_, err = w.restart().Resume(t.Context(), p.RunID)
			must(t, err)
			if n := scales.n.Load(); n != 0 {
				t.Errorf("scale ran %d time(s) after the takeover, want none: it started as neither read-only nor idempotent", n)
			}
			if r := toolResults(t, w.model); len(r) != 1 || !strings.Contains(r[0], "outcome unknown") {
				t.Errorf("the model read %q, want the outcome unknown", r)
			}
		})
	}
}
