package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

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

// OpenTelemetry's own lines and the exporter's errors are lines of the
// bot's log with its redaction, which hides the OTLP headers' values: a
// collector may quote the key it refused, and OpenTelemetry quotes a value
// it cannot decode.
func TestTracingLinesAreRedacted(t *testing.T) {
	const key = "otlp-key-Zq9pR2mK7w"
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid API key "+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), http.StatusUnauthorized)
	}))
	defer collector.Close()
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL})
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20"+key+",X-Key=%zz"+key)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")

	logs := &syncBuffer{}
	log := newLogger(logs, config{LogLevel: "info", LogFormat: "json"}, newRedactor(envSecrets(os.Getenv)...))
	p, err := telemetry.Start(t.Context(), os.Getenv, "", false, log)
	if err != nil || p == nil {
		t.Fatalf("Start = %v, %v", p, err)
	}
	_, end := p.Tracer().StartTurn(t.Context(), agent.TurnStart{Kind: agent.TurnMessage, Conversation: "T/C/1"})
	end(agent.Outcome{Status: agent.Answered}, nil)
	flushTraces(log, p) // the export is refused, and said so, before it returns

	got := logs.String()
	for _, want := range []string{
		`"level":"ERROR","msg":"tracing: escape header value"`,
		`"level":"WARN","msg":"tracing: traces export: failed to send to ` + collector.URL,
		"invalid API key [redacted]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the log has no %s:\n%s", want, got)
		}
	}
	assertNoSecrets(t, "the log", got, key)
}

// With OTEL_CAPTURE_CONTENT, the spans the bot exports go through its
// redactor, as its logs do: a token a tool printed reaches the collector
// as [redacted].
func TestTracedContentIsRedacted(t *testing.T) {
	const secret = "sk-tool-output-secret-77"
	exported := make(chan *coltracepb.ExportTraceServiceRequest, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if err != nil {
			t.Errorf("decode export request: %v", err)
		}
		exported <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer collector.Close()
	setEnv(t, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": collector.URL})
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p, err := startTracing(t.Context(), config{OTELCapture: true}, log, newRedactor(secret))
	if err != nil || p == nil {
		t.Fatalf("startTracing = %v, %v", p, err)
	}
	_, end := p.Tracer().StartTool(t.Context(), agent.ToolStart{Tool: "read_file", Args: json.RawMessage(`{"key":"` + secret + `"}`)})
	end(agent.Result{Content: "token=" + secret})
	flushTraces(log, p)
	close(exported)

	var result string
	for req := range exported {
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					for _, kv := range s.Attributes {
						if v := kv.Value.GetStringValue(); strings.Contains(v, secret) {
							t.Errorf("span %q exports %s = %q", s.Name, kv.Key, v)
						}
						if kv.Key == "gen_ai.tool.call.result" {
							result = kv.Value.GetStringValue()
						}
					}
				}
			}
		}
	}
	if result != "token=[redacted]" {
		t.Errorf("exported tool result %q, want token=[redacted]", result)
	}
}
