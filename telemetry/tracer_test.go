package telemetry_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
	"github.com/toolgate/toolgate/telemetry"
)

const policy = `
policy:
  default: ask
  rules:
    - id: reads
      tool: "read_*"
      verdict: allow
    - id: deploys
      tool: deploy
      verdict: ask
      reason: deploys need a look
`

// resumeLog is a store that notes who took each run's last resume (its
// claim, and the conversation's lease with it), so that a test can model
// them running out by releasing them.
type resumeLog struct {
	agent.Store
	mu      sync.Mutex
	holders map[string]string // by run
}

func (s *resumeLog) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := s.Store.BeginResume(ctx, runID, r)
	if err == nil && rs.Claimed {
		s.mu.Lock()
		s.holders[runID] = r.Owner
		s.mu.Unlock()
	}
	return rs, err
}

func (s *resumeLog) holder(runID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holders[runID]
}

// world is an agent on the fake model and a real store, traced into an
// in-memory exporter.
type world struct {
	t     *testing.T
	model *fakeopenai.Server
	spans *tracetest.InMemoryExporter
	agent *agent.Agent
	ran   map[string]json.RawMessage // tool -> arguments it ran with
	// held is told when read_held starts; it runs until its context ends.
	held chan struct{}
	// before, if set, runs before each model request, which fails with
	// its error if it returns one (it may panic instead).
	before func(ctx context.Context) error
	// restart replaces agent with a new one on the same store, as a
	// restarted process with the owner name.
	restart func(owner string)
	st      storetest.Store
	resumes *resumeLog

	mu  sync.Mutex
	now time.Time
}

func newWorld(t *testing.T, capture bool, opts ...telemetry.Option) *world {
	t.Helper()
	w := &world{t: t, model: fakeopenai.New(t), spans: tracetest.NewInMemoryExporter(), ran: map[string]json.RawMessage{}, held: make(chan struct{}, 1),
		now: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(w.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tr := telemetry.NewTracer(tp, capture, opts...)

	st := teststore.Kinds(t)[0].Open(t)()
	reg := agent.NewRegistry()
	handler := func(name, out string) agent.Handler {
		return func(_ context.Context, args json.RawMessage) (agent.Result, error) {
			w.ran[name] = args
			return agent.Result{Content: out}, nil
		}
	}
	must(t, reg.Register(agent.Tool{Name: "read_file", Description: "Read a file", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: handler("read_file", "SECRET-FILE-CONTENT")}))
	must(t, reg.Register(agent.Tool{Name: "read_held", Description: "Read slowly", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			w.held <- struct{}{}
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		}}))
	must(t, reg.Register(agent.Tool{Name: "read_broken", Description: "Fail to read", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{}, errors.New("disk on fire")
		}}))
	must(t, reg.Register(agent.Tool{Name: "deploy", Description: "Deploy", Schema: json.RawMessage(`{"type":"object"}`), Handler: handler("deploy", "deployed")}))
	p, err := approvals.ParseConfig([]byte(policy))
	must(t, err)
	engine := approvals.NewEngine(p, st)
	model := agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL: w.model.URL(), Model: "fake-model", StreamUsage: true, Retries: 2,
		Sleep:   func(context.Context, time.Duration) error { return nil },
		OnRetry: telemetry.RecordRetry,
	})
	hooked := modelFunc(func(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
		if w.before != nil {
			if err := w.before(ctx); err != nil {
				return openai.ChatCompletionMessage{}, err
			}
		}
		return model.Complete(ctx, req, onDelta)
	})
	w.st = st
	w.resumes = &resumeLog{Store: st, holders: map[string]string{}}
	w.restart = func(owner string) {
		w.agent = agent.New(tr.Model(hooked, "fake-model"), reg, engine, w.resumes, nil, agent.Config{Now: w.clock, Tracer: tr, Owner: owner})
	}
	w.restart("replica-1")
	return w
}

type modelFunc func(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error)

func (f modelFunc) Complete(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
	return f(ctx, req, onDelta)
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var request = agent.Request{Conversation: "T1/C1/1.2", User: "UREQ", Channel: "C1", Text: "what is in the file?"}

// byName returns the ended spans with the name, in end order.
func (w *world) byName(name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range w.spans.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func (w *world) one(name string) tracetest.SpanStub {
	w.t.Helper()
	s := w.byName(name)
	if len(s) != 1 {
		w.t.Fatalf("%d spans %q, want 1; all: %v", len(s), name, w.names())
	}
	return s[0]
}

func (w *world) names() []string {
	var n []string
	for _, s := range w.spans.GetSpans() {
		n = append(n, s.Name)
	}
	return n
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// wantAttrs checks attributes of a span by their printed value.
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[attribute.Key(k)]; !ok || g.Emit() != v {
			t.Errorf("span %q: %s = %q (set %v), want %q", s.Name, k, g.Emit(), ok, v)
		}
	}
}

func childOf(t *testing.T, child, parent tracetest.SpanStub) {
	t.Helper()
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Errorf("span %q is not a child of %q", child.Name, parent.Name)
	}
}

func TestTurnWithAnAllowedCall(t *testing.T) {
	w := newWorld(t, false)
	w.model.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"/etc/token"}`}),
		fakeopenai.Text("the file holds a token"),
	)
	out, err := w.agent.Run(context.Background(), request)
	must(t, err)
	if out.Status != agent.Answered {
		t.Fatalf("outcome %v", out.Status)
	}
	turn := w.one("invoke_agent toolgate")
	if turn.Parent.IsValid() {
		t.Error("the turn span has a parent")
	}
	wantAttrs(t, turn, map[string]string{
		"gen_ai.operation.name": "invoke_agent", "toolgate.turn.kind": "message", "toolgate.turn.outcome": "answered",
		"toolgate.user": "UREQ", "toolgate.channel": "C1",
	})
	chats := w.byName("chat fake-model")
	if len(chats) != 2 {
		t.Fatalf("%d model spans, want 2: %v", len(chats), w.names())
	}
	for _, c := range chats {
		childOf(t, c, turn)
		if c.SpanKind != trace.SpanKindClient {
			t.Errorf("model span kind %v, want client", c.SpanKind)
		}
		wantAttrs(t, c, map[string]string{"gen_ai.operation.name": "chat", "gen_ai.request.model": "fake-model"})
		a := attrs(c)
		if a["gen_ai.usage.input_tokens"].AsInt64() <= 0 || a["gen_ai.usage.output_tokens"].AsInt64() <= 0 {
			t.Errorf("model span usage %v / %v, want the fake's counts", a["gen_ai.usage.input_tokens"].Emit(), a["gen_ai.usage.output_tokens"].Emit())
		}
	}
	tool := w.one("execute_tool read_file")
	childOf(t, tool, turn)
	wantAttrs(t, tool, map[string]string{"gen_ai.tool.name": "read_file", "toolgate.verdict": "allow", "toolgate.rule_id": "reads", "toolgate.tool.outcome": "ok"})
	// The tool ran between the two model calls.
	if !(chats[0].EndTime.Compare(tool.StartTime) <= 0 && tool.EndTime.Compare(chats[1].StartTime) <= 0) {
		t.Error("the tool span is not between the model calls")
	}
	// No content without OTEL_CAPTURE_CONTENT.
	for _, s := range w.spans.GetSpans() {
		for _, kv := range s.Attributes {
			if v := kv.Value.Emit(); strings.Contains(v, "/etc/token") || strings.Contains(v, "SECRET-FILE-CONTENT") || strings.Contains(v, "what is in the file") {
				t.Errorf("span %q attribute %s carries content: %q", s.Name, kv.Key, v)
			}
		}
	}
}

// A tool that fails is marked failed; one cut while it ran (here the
// turn's context ends, as at a shutdown) has an unknown outcome, not an
// error: its span says it was interrupted and leaves the status unset.
func TestToolOutcomeOnTheSpan(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		w := newWorld(t, false)
		w.model.Reply(fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_broken", Arguments: `{}`}), fakeopenai.Text("it failed"))
		_, err := w.agent.Run(context.Background(), request)
		must(t, err)
		tool := w.one("execute_tool read_broken")
		wantAttrs(t, tool, map[string]string{"toolgate.tool.outcome": "error"})
		if tool.Status.Code != codes.Error || len(tool.Events) != 0 {
			t.Errorf("span status %v, events %v; want failed, with no event", tool.Status, tool.Events)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		w := newWorld(t, false)
		w.model.Reply(fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_held", Arguments: `{}`}))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = w.agent.Run(ctx, request)
		}()
		<-w.held
		cancel()
		<-done
		tool := w.one("execute_tool read_held")
		wantAttrs(t, tool, map[string]string{"toolgate.tool.outcome": "unknown"})
		if tool.Status.Code != codes.Unset {
			t.Errorf("span status %v, want unset", tool.Status)
		}
		if len(tool.Events) != 1 || tool.Events[0].Name != "interrupted" {
			t.Errorf("span events %v, want one interrupted", tool.Events)
		}
		// The turn the shutdown cut is not failed either: it goes on
		// after the restart.
		turn := w.one("invoke_agent toolgate")
		wantAttrs(t, turn, map[string]string{"toolgate.turn.outcome": "interrupted"})
		if turn.Status.Code != codes.Unset || len(turn.Events) != 1 || turn.Events[0].Name != "interrupted" {
			t.Errorf("turn span status %v, events %v; want unset, one interrupted", turn.Status, turn.Events)
		}
	})
}

func TestCapturedContent(t *testing.T) {
	w := newWorld(t, true)
	w.model.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"/etc/token"}`}),
		fakeopenai.Text("done"),
	)
	_, err := w.agent.Run(context.Background(), request)
	must(t, err)
	a := attrs(w.one("execute_tool read_file"))
	if a["gen_ai.tool.call.arguments"].AsString() != `{"path":"/etc/token"}` || a["gen_ai.tool.call.result"].AsString() != "SECRET-FILE-CONTENT" {
		t.Errorf("tool span arguments %q, result %q", a["gen_ai.tool.call.arguments"].Emit(), a["gen_ai.tool.call.result"].Emit())
	}
	chat := w.byName("chat fake-model")[1]
	if in := attrs(chat)["gen_ai.input.messages"].AsString(); !strings.Contains(in, "what is in the file?") {
		t.Errorf("model span input messages %q, want the question", in)
	}
	if out := attrs(chat)["gen_ai.output.messages"].AsString(); !strings.Contains(out, "done") {
		t.Errorf("model span output messages %q, want the answer", out)
	}
}

// fileSecret is the secret the redaction of the tests below knows of;
// read_file's output holds it.
const fileSecret = "SECRET-FILE-CONTENT"

// redactFileSecret is a clean-up function that knows of fileSecret, as
// the bot's redactor knows of its tokens.
func redactFileSecret(s string) string { return strings.ReplaceAll(s, fileSecret, "[redacted]") }

// leaks lists where the spans export text that contains secret: their
// names, attributes, events, links and status.
func leaks(spans tracetest.SpanStubs, secret string) []string {
	var out []string
	check := func(span, where string, kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			if strings.Contains(kv.Value.Emit(), secret) {
				out = append(out, span+" "+where+" "+string(kv.Key))
			}
		}
	}
	for _, s := range spans {
		if strings.Contains(s.Name, secret) {
			out = append(out, s.Name+" name")
		}
		if strings.Contains(s.Status.Description, secret) {
			out = append(out, s.Name+" status")
		}
		check(s.Name, "attribute", s.Attributes)
		for _, e := range s.Events {
			check(s.Name, "event "+e.Name, e.Attributes)
		}
		for _, l := range s.Links {
			check(s.Name, "link", l.Attributes)
		}
	}
	return out
}

// With capture, the tracer's clean-up function has the last word on the
// text spans export, as the redactor has on logs: a secret in a tool's
// arguments or output, the model's messages or an error text (a server
// error that echoes the request) is not exported.
func TestCapturedContentIsCleaned(t *testing.T) {
	w := newWorld(t, true, telemetry.WithRedaction(redactFileSecret))
	w.model.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"/srv/` + fileSecret + `"}`}),
		fakeopenai.Error(422, "invalid input: "+fileSecret),
	)
	if _, err := w.agent.Run(context.Background(), request); err == nil {
		t.Fatal("Run succeeded, want the model's error")
	}
	spans := w.spans.GetSpans()
	for _, l := range leaks(spans, fileSecret) {
		t.Errorf("exported: %s", l)
	}
	// The text is there, cleaned: capture is on.
	a := attrs(w.one("execute_tool read_file"))
	if a["gen_ai.tool.call.result"].AsString() != "[redacted]" || a["gen_ai.tool.call.arguments"].AsString() != `{"path":"/srv/[redacted]"}` {
		t.Errorf("tool span arguments %q, result %q; want them cleaned", a["gen_ai.tool.call.arguments"].Emit(), a["gen_ai.tool.call.result"].Emit())
	}
	var status []string
	for _, s := range w.byName("chat fake-model") {
		status = append(status, s.Status.Description)
	}
	if len(status) != 2 || !strings.Contains(status[1], "invalid input: [redacted]") {
		t.Errorf("model spans' status %q, want the second failed with the server's text cleaned", status)
	}
}

// Content is cleaned before it is clipped: a secret across the clip is
// not exported in part either.
func TestCapturedContentIsCleanedBeforeItIsClipped(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := telemetry.NewTracer(tp, true, telemetry.WithRedaction(redactFileSecret))
	// The secret starts 5 bytes before the 8 KiB a captured text keeps.
	long := strings.Repeat("x", 8<<10-5) + fileSecret
	_, end := tr.StartTool(context.Background(), agent.ToolStart{Tool: "read_file", Args: json.RawMessage(`{"path":"` + long + `"}`)})
	end(agent.Result{Content: long})
	got := spans.GetSpans()
	for _, l := range leaks(got, fileSecret[:5]) {
		t.Errorf("exported a part of the secret: %s", l)
	}
	// Then clipped: what is kept of the stand-in shows where it was.
	if res := attrs(got[0])["gen_ai.tool.call.result"].AsString(); !strings.HasSuffix(res, "x[reda…") {
		t.Errorf("result ends %q, want the stand-in of the secret, clipped", res[max(0, len(res)-20):])
	}
}

func TestPausedCallApprovedLater(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	w.model.Reply(fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "deploy", Arguments: `{"service":"api"}`}))
	out, err := w.agent.Run(ctx, request)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("outcome %v with %d pending, want paused with 1", out.Status, len(out.Pending))
	}
	pausing := w.one("invoke_agent toolgate")
	wantAttrs(t, pausing, map[string]string{"toolgate.turn.outcome": "paused", "toolgate.turn.pending_calls": "1", "toolgate.run_id": out.RunID})
	if ev := pausing.Events; len(ev) != 1 || ev[0].Name != "paused" {
		t.Errorf("pausing turn events %v, want one paused", ev)
	}
	if len(w.byName("execute_tool deploy")) != 0 {
		t.Fatal("the deploy ran before the decision")
	}

	w.advance(90 * time.Minute)
	call := out.Pending[0]
	res, err := w.agent.Decide(ctx, approvals.Decision{CallID: call.ID, Fingerprint: call.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER"})
	must(t, err)
	if !res.Complete {
		t.Fatal("decision not complete")
	}
	w.model.Reply(fakeopenai.Text("deployed api"))
	_, err = w.agent.Resume(ctx, out.RunID)
	must(t, err)

	turns := w.byName("invoke_agent toolgate")
	if len(turns) != 2 {
		t.Fatalf("%d turn spans, want 2", len(turns))
	}
	resume := turns[1]
	wantAttrs(t, resume, map[string]string{"toolgate.turn.kind": "resume", "toolgate.turn.outcome": "answered", "toolgate.run_id": out.RunID})
	tool := w.one("execute_tool deploy")
	childOf(t, tool, resume)
	wantAttrs(t, tool, map[string]string{"gen_ai.tool.call.id": call.ID, "toolgate.tool.outcome": "ok"})
	childOf(t, w.byName("chat fake-model")[1], resume)

	wait := w.one("approval_wait deploy")
	if wait.Parent.IsValid() {
		t.Error("the wait span has a parent; want a root linked to the turn")
	}
	wantAttrs(t, wait, map[string]string{
		"toolgate.decision.kind": "approve", "toolgate.decision.decider": "UAPPROVER",
		"toolgate.decision.wait_seconds": "5400", "gen_ai.tool.call.id": call.ID, "toolgate.rule_id": "deploys",
	})
	if !wait.StartTime.Equal(call.CreatedAt) || wait.EndTime.Sub(wait.StartTime) != 90*time.Minute {
		t.Errorf("wait span %v to %v, want from the pause (%v) for 90m", wait.StartTime, wait.EndTime, call.CreatedAt)
	}
	if !slices.ContainsFunc(wait.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == resume.SpanContext.SpanID() }) {
		t.Error("the wait span is not linked to the resuming turn")
	}
	if !slices.ContainsFunc(resume.Links, func(l sdktrace.Link) bool { return l.SpanContext.SpanID() == wait.SpanContext.SpanID() }) {
		t.Error("the resuming turn is not linked to the wait span")
	}
	// And back to the turn that paused the call, whose trace the call
	// names in the store: the two halves of the request are one story.
	if !slices.ContainsFunc(wait.Links, func(l sdktrace.Link) bool {
		return l.SpanContext.TraceID() == pausing.SpanContext.TraceID() && l.SpanContext.SpanID() == pausing.SpanContext.SpanID() &&
			slices.Contains(l.Attributes, attribute.String("toolgate.link", "paused_by"))
	}) {
		t.Errorf("the wait span's links %v do not lead to the pausing turn %s", wait.Links, pausing.SpanContext.SpanID())
	}
}

func TestModelRetryOnTheModelSpan(t *testing.T) {
	w := newWorld(t, false)
	w.model.Reply(fakeopenai.Error(503, "busy"), fakeopenai.Text("hello"))
	_, err := w.agent.Run(context.Background(), request)
	must(t, err)
	chat := w.one("chat fake-model")
	childOf(t, chat, w.one("invoke_agent toolgate"))
	if chat.Status.Code == codes.Error {
		t.Errorf("model span status %v after a successful retry", chat.Status)
	}
	wantAttrs(t, chat, map[string]string{"toolgate.model.retries": "1"})
	if len(chat.Events) != 1 || chat.Events[0].Name != "retry" {
		t.Fatalf("model span events %v, want one retry", chat.Events)
	}
	ev := map[attribute.Key]string{}
	for _, kv := range chat.Events[0].Attributes {
		ev[kv.Key] = kv.Value.Emit()
	}
	if ev["toolgate.retry"] != "1" || ev["http.response.status_code"] != "503" || ev["error.type"] != "http error" {
		t.Errorf("retry event %v", ev)
	}
}

func TestModelFailureOnTheSpans(t *testing.T) {
	w := newWorld(t, false)
	w.model.Reply(fakeopenai.Error(400, "bad request"))
	_, err := w.agent.Run(context.Background(), request)
	if err == nil {
		t.Fatal("Run succeeded")
	}
	chat := w.one("chat fake-model")
	wantAttrs(t, chat, map[string]string{"error.type": "http error", "http.response.status_code": "400"})
	if chat.Status.Code != codes.Error || w.one("invoke_agent toolgate").Status.Code != codes.Error {
		t.Error("the model and turn spans are not marked failed")
	}
}

// Without capture, a failed model call's spans say what failed, not the
// server's error text, which can quote the request (a validation error
// that echoes a message back).
func TestModelFailureWithoutCaptureKeepsContentOut(t *testing.T) {
	const said = "my card number is 4111 1111 1111 1111"
	w := newWorld(t, false)
	w.model.Reply(fakeopenai.Error(422, "invalid input: "+said))
	if _, err := w.agent.Run(context.Background(), request); err == nil {
		t.Fatal("Run succeeded")
	}
	for _, name := range []string{"chat fake-model", "invoke_agent toolgate"} {
		s := w.one(name)
		if s.Status.Code != codes.Error || strings.Contains(s.Status.Description, "4111") || !strings.Contains(s.Status.Description, "422") {
			t.Errorf("span %q status = %v %q; want failed, with the status and not the server's text", name, s.Status.Code, s.Status.Description)
		}
	}
}

// A resume cut after its calls ran (a shutdown during the next model
// request) goes on after the restart, which records no second wait for
// the decision: each paused call has one approval_wait span.
func TestResumeGoingOnRecordsTheWaitOnce(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	w.model.Reply(fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "deploy", Arguments: `{"service":"api"}`}))
	out, err := w.agent.Run(ctx, request)
	must(t, err)
	call := out.Pending[0]
	_, err = w.agent.Decide(ctx, approvals.Decision{CallID: call.ID, Fingerprint: call.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER"})
	must(t, err)
	cut, stop := context.WithCancel(ctx)
	w.before = func(context.Context) error {
		stop()
		return &agent.ModelError{Kind: agent.ErrKindCanceled, Err: context.Canceled}
	}
	if _, err := w.agent.Resume(cut, out.RunID); !agent.Interrupted(err) {
		t.Fatalf("Resume = %v, want it cut", err)
	}
	if w.ran["deploy"] == nil {
		t.Fatal("the deploy did not run before the cut")
	}
	w.before = nil
	// The cut process's lease and resume claim lapse; the restarted one's
	// sweep resumes the run.
	holder := w.resumes.holder(out.RunID)
	must(t, w.st.ReleaseClaim(ctx, out.RunID, holder))
	must(t, w.st.ReleaseLease(ctx, store.TurnLease(request.Conversation), holder))
	w.restart("replica-2")
	w.model.Reply(fakeopenai.Text("deployed api"))
	res, err := w.agent.Resume(ctx, out.RunID)
	must(t, err)
	if res.Status != agent.Answered {
		t.Fatalf("Resume after the restart: %v, want answered", res.Status)
	}
	if n := len(w.byName("approval_wait deploy")); n != 1 {
		t.Errorf("%d approval_wait spans, want 1", n)
	}
	if n := len(w.byName("invoke_agent toolgate")); n != 3 {
		t.Errorf("%d turn spans, want 3 (the pause and both resumes)", n)
	}
}

// A model request the bot cut (its turn's context ended: a shutdown) is
// interrupted on both spans, not failed: a rolling upgrade is no model
// failure.
func TestModelRequestCutByTheBotIsNoFailure(t *testing.T) {
	w := newWorld(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	w.before = func(context.Context) error {
		cancel()
		return &agent.ModelError{Kind: agent.ErrKindCanceled, Err: context.Canceled}
	}
	if _, err := w.agent.Run(ctx, request); !agent.Interrupted(err) {
		t.Fatalf("Run = %v, want the turn interrupted", err)
	}
	for _, name := range []string{"chat fake-model", "invoke_agent toolgate"} {
		s := w.one(name)
		interrupted := slices.ContainsFunc(s.Events, func(e sdktrace.Event) bool { return e.Name == "interrupted" })
		if s.Status.Code == codes.Error || !interrupted {
			t.Errorf("span %q: status %v, events %v; want no error and an interrupted event", name, s.Status.Code, s.Events)
		}
	}
}

// A turn cut by a panic (the bot's own fault) is still ended, failed, so
// that its span, the one an operator needs, is exported with its
// children.
func TestTurnCutByAPanicIsEnded(t *testing.T) {
	w := newWorld(t, false)
	w.before = func(context.Context) error { panic("model wrapper broke") }
	func() {
		defer func() {
			if p := recover(); p != "model wrapper broke" {
				t.Errorf("recovered %v, want the panic to go on", p)
			}
		}()
		_, _ = w.agent.Run(context.Background(), request)
	}()
	turn := w.one("invoke_agent toolgate")
	if turn.Status.Code != codes.Error || !strings.Contains(turn.Status.Description, "panic") {
		t.Errorf("turn span status %v %q, want failed by the panic", turn.Status.Code, turn.Status.Description)
	}
	childOf(t, w.one("chat fake-model"), turn)
}

// A message recorded and never answered (its process died) is answered by
// TakeOver in a turn span of its own, with the model call under it.
func TestTakeOverIsATurn(t *testing.T) {
	w := newWorld(t, false)
	ctx := context.Background()
	if _, _, err := w.agent.Accept(ctx, request, false); err != nil {
		t.Fatal(err)
	}
	w.model.Reply(fakeopenai.Text("it holds the motd"))
	out, err := w.agent.TakeOver(ctx, request.Conversation)
	must(t, err)
	if out.Status != agent.Answered {
		t.Fatalf("TakeOver: %v, want answered", out.Status)
	}
	turn := w.one("invoke_agent toolgate")
	wantAttrs(t, turn, map[string]string{"toolgate.turn.kind": "takeover", "toolgate.turn.outcome": "answered",
		"toolgate.conversation": request.Conversation, "toolgate.user": request.User, "toolgate.channel": request.Channel})
	childOf(t, w.one("chat fake-model"), turn)
}

// A turn handed over (its lease lost to the process that took the
// conversation over) or that waited out another's hold on it (busy) is
// not a failed span: the metrics count neither as a failure, and what
// the turn was for goes on elsewhere, or once the conversation is free.
func TestTurnHandedOverOrBusyIsNoFailedSpan(t *testing.T) {
	for _, tt := range []struct {
		name, outcome string
		err           error
	}{
		{"lease lost", "interrupted", fmt.Errorf("commit turn: %w: %w", agent.ErrLeaseLost, store.ErrNotHolder)},
		{"lease timeout", "busy", fmt.Errorf("turn: %w", agent.ErrLeaseTimeout)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			defer tp.Shutdown(context.Background())
			tr := telemetry.NewTracer(tp, false)
			_, end := tr.StartTurn(context.Background(), agent.TurnStart{Kind: agent.TurnMessage, Conversation: "T1/C1/1.2", User: "U1", Channel: "C1"})
			end(agent.Outcome{}, tt.err)
			s := spans.GetSpans()[0]
			if s.Status.Code == codes.Error {
				t.Errorf("turn span status %v %q, want no error", s.Status.Code, s.Status.Description)
			}
			wantAttrs(t, s, map[string]string{"toolgate.turn.outcome": tt.outcome})
		})
	}
}
