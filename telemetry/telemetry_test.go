package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/telemetry"
)

func TestEnabled(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "otlp"}, true},
	}
	for _, tt := range tests {
		if got := telemetry.Enabled(func(k string) string { return tt.env[k] }); got != tt.want {
			t.Errorf("Enabled(%v) = %v, want %v", tt.env, got, tt.want)
		}
	}
}

// Settings the bot would misread are refused, naming the variable and
// quoting no value; with no endpoint, none is read.
func TestCheckEnv(t *testing.T) {
	const endpoint = "http://collector:4318"
	tests := []struct {
		env     map[string]string
		refused string // the variable the error names; "" for none
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "OTLP", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"}, ""},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "otlp,console"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint, "OTEL_TRACES_EXPORTER": "console"}, "OTEL_TRACES_EXPORTER"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_HEADERS": "api-key"}, "OTEL_EXPORTER_OTLP_HEADERS"},
	}
	for _, tt := range tests {
		err := telemetry.CheckEnv(func(k string) string { return tt.env[k] })
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("CheckEnv(%v) = %v, want accepted", tt.env, err)
		case tt.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.refused)):
			t.Errorf("CheckEnv(%v) = %v, want refused naming %s", tt.env, err, tt.refused)
		case err != nil:
			for k, v := range tt.env {
				if k != "OTEL_EXPORTER_OTLP_PROTOCOL" && k != "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" && strings.Contains(err.Error(), v) {
					t.Errorf("CheckEnv(%v) = %q, which quotes %s", tt.env, err, k)
				}
			}
		}
	}
}

// CheckEnv judges the settings as otlptracehttp reads them: the TRACES_
// variant of a setting, when set (spaces around it are trimmed), replaces
// the general one, which is then not read at all; http/json is a protocol
// it speaks; a user name, password or query in the endpoint, and a header
// whose name is not an HTTP token, it drops without a word, so the
// collector would refuse every batch as unauthenticated. The errors name
// the variable at fault and quote none of the values.
func TestCheckEnvAsTheExporterReadsIt(t *testing.T) {
	const (
		endpoint       = "http://collector:4318"
		tracesEndpoint = "https://collector:4318/v1/traces"
	)
	tests := []struct {
		name    string
		env     map[string]string
		refused string // the variable the error names; "" for none
		want    string // part of the error
	}{
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}},
		{name: "http/json for traces", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}},
		{name: "grpc overridden for traces", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}},
		{name: "grpc for traces over http/protobuf", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, refused: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"},
		{name: "protocol of spaces is unset", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "  "}, refused: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "unknown protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/xml"}, refused: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "malformed general endpoint overridden", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tracesEndpoint}},
		{name: "general endpoint with a password overridden", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:Pw-in-general@collector:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tracesEndpoint}},
		{name: "malformed traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "collector:4318/v1/traces"}, refused: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"},
		{name: "endpoint with spaces around it", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": " " + endpoint + " "}},
		{name: "endpoint with a user and password", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:Pw-in-endpoint@collector:4318"},
			refused: "OTEL_EXPORTER_OTLP_ENDPOINT", want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "endpoint with a user name", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://api-key-as-user@collector:4318"},
			refused: "OTEL_EXPORTER_OTLP_ENDPOINT", want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "traces endpoint with a password", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://u:Pw-in-traces@collector:4318/v1/traces"},
			refused: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "endpoint with a query", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://collector:4318/?api_key=Key-in-query"},
			refused: "OTEL_EXPORTER_OTLP_ENDPOINT", want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "malformed endpoint with credentials", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:Pw%zz@collector:4318"},
			refused: "OTEL_EXPORTER_OTLP_ENDPOINT", want: "OTEL_EXPORTER_OTLP_HEADERS"},
		{name: "header name with a space", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_HEADERS": "X-Scope=ok,Api Key=Spaced-key"}, refused: "OTEL_EXPORTER_OTLP_HEADERS", want: "entry 2"},
		{name: "header name with a colon", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_HEADERS": "Authorization:Bearer=Colon-key"}, refused: "OTEL_EXPORTER_OTLP_HEADERS", want: "entry 1"},
		{name: "header name not ascii", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Schlüssel=Umlaut-key"}, refused: "OTEL_EXPORTER_OTLP_TRACES_HEADERS", want: "entry 1"},
		{name: "header names of every token character", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_HEADERS": " Authorization =Bearer%20abc,x!#$%&'*+-.^_`|~9=1"}},
		{name: "malformed general headers overridden", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
			"OTEL_EXPORTER_OTLP_HEADERS": "Api Key=Spaced-key", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "Authorization=Bearer%20abc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := telemetry.CheckEnv(func(k string) string { return tt.env[k] })
			switch {
			case tt.refused == "" && err != nil:
				t.Fatalf("CheckEnv(%v) = %v, want accepted", tt.env, err)
			case tt.refused != "" && (err == nil || !strings.HasPrefix(err.Error(), tt.refused)):
				t.Fatalf("CheckEnv(%v) = %v, want refused naming %s", tt.env, err, tt.refused)
			case err == nil:
				return
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("CheckEnv(%v) = %q, want it to say %q", tt.env, err, tt.want)
			}
			if strings.Contains(err.Error(), "percent-encode any user name or password") {
				t.Errorf("CheckEnv(%v) = %q, which advises credentials in the endpoint", tt.env, err)
			}
			for _, secret := range []string{"Pw-in", "Pw%zz", "Key-in-query", "Spaced-key", "Colon-key", "Umlaut-key", "api-key-as-user", "Schlüssel", "Api Key"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("CheckEnv(%v) = %q, which quotes %q", tt.env, err, secret)
				}
			}
		})
	}
}

// Unset, nothing starts and the nil Provider is safe to use.
func TestStartOff(t *testing.T) {
	p, err := telemetry.Start(context.Background(), func(string) string { return "" }, "1.0", false, slog.Default())
	if p != nil || err != nil {
		t.Fatalf("Start = %v, %v; want nil, nil", p, err)
	}
	if p.Tracer() != nil {
		t.Error("a nil Provider gave a Tracer")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of nil: %v", err)
	}
}

// The exporter sends OTLP/HTTP protobuf to the endpoint of the standard
// variable, with the service name and the spans of a turn.
func TestExportsOverOTLPHTTP(t *testing.T) {
	got := make(chan *coltracepb.ExportTraceServiceRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" || err != nil {
			t.Errorf("got %s %s (%s), want POST /v1/traces in protobuf", r.Method, r.URL.Path, r.Header.Get("Content-Type"))
			http.Error(w, "no", http.StatusBadRequest)
			return
		}
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(body, req); err != nil {
			t.Errorf("decode export request: %v", err)
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")

	ctx := context.Background()
	p, err := telemetry.Start(ctx, os.Getenv, "1.2.3", false, slog.Default())
	if err != nil || p == nil {
		t.Fatalf("Start = %v, %v", p, err)
	}
	tr := p.Tracer()
	tctx, endTurn := tr.StartTurn(ctx, agent.TurnStart{Kind: agent.TurnMessage, Conversation: "T/C/1", User: "U1", Channel: "C1"})
	_, endTool := tr.StartTool(tctx, agent.ToolStart{Tool: "read_file", Verdict: approvals.Verdict{Action: approvals.Allow, RuleID: "reads"}})
	endTool(agent.Result{Content: "x"})
	endTurn(agent.Outcome{Status: agent.Answered}, nil)
	if err := p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	close(got)

	var names []string
	resAttrs := map[string]string{}
	for req := range got {
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.Attributes {
				resAttrs[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					names = append(names, s.Name)
				}
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"execute_tool read_file", "invoke_agent toolgate"}) {
		t.Errorf("exported spans %q, want the turn and the tool", names)
	}
	if resAttrs["service.name"] != "toolgate" || resAttrs["service.version"] != "1.2.3" || resAttrs["deployment.environment"] != "test" {
		t.Errorf("resource %v, want service toolgate 1.2.3 and the OTEL_RESOURCE_ATTRIBUTES", resAttrs)
	}
}

// A collector that cannot be reached is reported in the bot's log, as a
// warning, not as OpenTelemetry's own plain line on stderr.
func TestExportErrorsGoToTheLog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500")
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	p, logged := startLogged(t)
	_, end := p.Tracer().StartTurn(context.Background(), agent.TurnStart{Kind: agent.TurnMessage, Conversation: "T/C/1"})
	end(agent.Outcome{Status: agent.Answered}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := logged()
		if strings.Contains(got, `"level":"WARN","msg":"tracing: `) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no warning about the failed export in the log: %s", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = p.Shutdown(ctx)
}

// What OpenTelemetry's own logger says (here: a setting it cannot read)
// is a line of the bot's log, in its format, not a plain line on stderr.
func TestOpenTelemetryLinesGoToTheLog(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "soon")
	p, logged := startLogged(t)
	defer func() { _ = p.Shutdown(context.Background()) }()
	got := logged()
	if !strings.Contains(got, `"level":"ERROR","msg":"tracing: parse duration"`) || !strings.Contains(got, `"input":"soon"`) {
		t.Errorf("log = %s; want an error line saying the timeout could not be read", got)
	}
}

// startLogged starts tracing as the environment says, with the bot's
// JSON log; logged returns what was logged so far.
func startLogged(t *testing.T) (p *telemetry.Provider, logged func() string) {
	t.Helper()
	var logs strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))
	p, err := telemetry.Start(context.Background(), os.Getenv, "1", false, log)
	if err != nil || p == nil {
		t.Fatalf("Start = %v, %v", p, err)
	}
	return p, func() string {
		mu.Lock()
		defer mu.Unlock()
		return logs.String()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Resource attributes that do not all read are said in the log; the
// others apply.
func TestPartlyReadResourceAttributesAreLogged(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,oops")
	p, logged := startLogged(t)
	defer func() { _ = p.Shutdown(context.Background()) }()
	if got := logged(); !strings.Contains(got, `"level":"WARN","msg":"tracing: OTEL_RESOURCE_ATTRIBUTES holds entries`) {
		t.Errorf("log = %s; want a warning that some resource attributes were not read", got)
	}
}
