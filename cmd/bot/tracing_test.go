package main

import (
	"context"
	"io"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/telemetry"
)

func TestNewModelTracing(t *testing.T) {
	s := fakeopenai.New(t)
	cfg := config{OpenAIBaseURL: s.URL(), OpenAIModel: "m1", ModelRetries: 1}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// Off: no tracer at all, not a typed nil the agent would call.
	_, tr := newModel(cfg, log, nil)
	if tr != nil {
		t.Errorf("tracer %#v with tracing off, want nil", tr)
	}

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	m, tr := newModel(cfg, log, telemetry.NewTracer(tp, false))
	if tr == nil {
		t.Fatal("no tracer with tracing on")
	}
	s.Reply(fakeopenai.Error(500, "x"), fakeopenai.Text("hi"))
	if _, err := m.Complete(context.Background(), agent.ModelRequest{}, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got := spans.GetSpans()
	if len(got) != 1 || got[0].Name != "chat m1" || len(got[0].Events) != 1 || got[0].Events[0].Name != "retry" {
		t.Fatalf("spans %v, want one chat m1 span with a retry event", got)
	}
	if reqs := s.Requests(); len(reqs) != 2 || reqs[1].StreamOptions == nil || !reqs[1].StreamOptions.IncludeUsage {
		t.Errorf("requests %d, want 2 asking for usage", len(reqs))
	}
}
