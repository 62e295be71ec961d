package telemetry_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/telemetry"
)

// A call whose tool cannot tell whether it did its work is audited
// "unknown" (agent.UnknownOutcomeResult): its span says so too, and is
// not marked failed; a plain failure is.
func TestUnknownOutcomeOnTheSpan(t *testing.T) {
	for _, tt := range []struct {
		res     agent.Result
		outcome string
		status  codes.Code
	}{
		{agent.UnknownOutcomeResult("MCP server s gave no answer: " + agent.UnknownOutcome), "unknown", codes.Unset},
		{agent.Result{Content: "refused", IsError: true}, "error", codes.Error},
		{agent.NotSentResult("MCP server s is unavailable, so the call was not sent"), "not_sent", codes.Error},
	} {
		spans := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		_, end := telemetry.NewTracer(tp, false).StartTool(context.Background(), agent.ToolStart{Tool: "mcp_write"})
		end(tt.res)
		ended := spans.Ended()
		if len(ended) != 1 {
			t.Fatalf("%d spans ended, want 1", len(ended))
		}
		got := ""
		for _, kv := range ended[0].Attributes() {
			if kv.Key == "toolgate.tool.outcome" {
				got = kv.Value.AsString()
			}
		}
		if got != tt.outcome || ended[0].Status().Code != tt.status {
			t.Errorf("result %q: span outcome %q, status %v; want %q, %v", tt.res.Content, got, ended[0].Status().Code, tt.outcome, tt.status)
		}
		_ = tp.Shutdown(context.Background())
	}
}
