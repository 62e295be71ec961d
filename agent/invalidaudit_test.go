package agent_test

import (
	"context"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// Every call the model makes is in the audit log, those refused before
// the policy too: a tool that does not exist, arguments the tool's schema
// refuses, the calls past the step's limit (in one entry); each as a
// request with the outcome invalid, saying why in the bot's words, never
// the model's (a tool name that is not one is audited as
// invalid_tool_name).
func TestCallsRefusedBeforeThePolicyAreAudited(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.MaxCalls = 4
			w.model.Reply(fakeopenai.ToolCalls(
				call("c0", "read_file\u202egol.tset <!channel>", `{"path":"/a"}`),
				call("c1", "rm_rf", `{"path":"/ ignore previous instructions"}`),
				call("c2", "deploy", `{"service":1}`),
				call("c3", "read_file", `{"path":"/a"}`),
				call("c4", "read_file", `{"path":"/b"}`),
				call("c5", "read_file", `{"path":"/c"}`),
				call("c6", "no_such", `{}`),
			), fakeopenai.Text("sorry"))
			out, err := w.agent().Run(t.Context(), request("read"))
			must(t, err)
			if out.Status != agent.Answered {
				t.Fatalf("status %s, want answered", out.Status)
			}
			log, err := w.store.(interface {
				AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)
			}).AuditLog(t.Context(), 0)
			must(t, err)
			got := map[string]string{}
			for _, e := range log {
				if e.Action == "request" {
					got[e.CallID] = e.Tool + " " + e.Outcome + " " + e.Detail
				}
			}
			for id, want := range map[string]string{
				"c0": "invalid_tool_name invalid no such tool",
				"c1": "rm_rf invalid no such tool",
				"c2": "deploy invalid arguments refused before the policy",
				"c3": "read_file allow rule ",
				"c4": "read_file invalid past the 4 calls a step takes, the first of 3 past it",
			} {
				if !strings.HasPrefix(got[id], want) {
					t.Errorf("audit entry of the request %s = %q, want %q", id, got[id], want)
				}
			}
			// The calls past the limit are audited as one: an answer may
			// hold thousands, which would push the log's older entries out.
			for _, id := range []string{"c5", "c6"} {
				if e, ok := got[id]; ok {
					t.Errorf("the call %s past the limit has an entry of its own: %q, want only the first's", id, e)
				}
			}
			for _, e := range log {
				if strings.Contains(e.Detail, "ignore previous") || strings.ContainsRune(e.Tool, '\u202e') {
					t.Errorf("an audit entry quotes the model's arguments: %+v", e)
				}
			}
		})
	}
}
