package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// instrumentation names the tracer.
const instrumentation = "github.com/toolgate/toolgate/telemetry"

// maxContent bounds a captured argument, result or message attribute.
const maxContent = 8 << 10

// Attribute keys outside the GenAI conventions.
const (
	keyConversation = attribute.Key("toolgate.conversation")
	keyUser         = attribute.Key("toolgate.user")
	keyChannel      = attribute.Key("toolgate.channel")
	keyRunID        = attribute.Key("toolgate.run_id")
	keyTurnKind     = attribute.Key("toolgate.turn.kind")
	keyTurnOutcome  = attribute.Key("toolgate.turn.outcome")
	keyPending      = attribute.Key("toolgate.turn.pending_calls")
	keyVerdict      = attribute.Key("toolgate.verdict")
	keyRule         = attribute.Key("toolgate.rule_id")
	keyOutcome      = attribute.Key("toolgate.tool.outcome")
	keyDecision     = attribute.Key("toolgate.decision.kind")
	keyDecider      = attribute.Key("toolgate.decision.decider")
	keyWait         = attribute.Key("toolgate.decision.wait_seconds")
	keyRetries      = attribute.Key("toolgate.model.retries")
)

// Tracer records the bot's spans; it implements agent.Tracer. It is safe
// for concurrent use.
type Tracer struct {
	tracer  trace.Tracer
	capture bool
	// clean takes the secrets out of every text a span exports (see
	// WithRedaction); it is never nil.
	clean func(string) string
}

var (
	_ agent.Tracer      = (*Tracer)(nil)
	_ agent.TraceLinker = (*Tracer)(nil)
)

// Option configures a Tracer (see NewTracer and Start).
type Option func(*Tracer)

// WithRedaction has clean take the secrets out of every text the spans
// export: the string attributes (with capture, the tools' arguments and
// output and the model's messages, which quote whatever a tool printed)
// and the error texts of failed spans. The bot passes its redactor's
// String, so that spans hide what its logs and errors hide. clean must be
// safe for concurrent use; nil leaves the texts as they are.
func WithRedaction(clean func(string) string) Option {
	return func(t *Tracer) {
		if clean != nil {
			t.clean = clean
		}
	}
}

// NewTracer returns a Tracer on tp. With capture, spans carry the tools'
// arguments and output and the model's messages.
func NewTracer(tp trace.TracerProvider, capture bool, opts ...Option) *Tracer {
	t := &Tracer{tracer: tp.Tracer(instrumentation), capture: capture, clean: func(s string) string { return s }}
	for _, o := range opts {
		o(t)
	}
	return t
}

// text is the string attribute k with v cleaned.
func (t *Tracer) text(k attribute.Key, v string) attribute.KeyValue {
	return k.String(t.clean(v))
}

// content is the captured text attribute k with v cleaned, then clipped
// to maxContent: in this order, since a secret the clip cuts would no
// longer be recognised, and its head would be exported.
func (t *Tracer) content(k attribute.Key, v string) attribute.KeyValue {
	return k.String(clip(t.clean(v)))
}

// contentJSON is the captured attribute k with v in JSON, cleaned and
// clipped as content is. HTML characters are left unescaped, so that a
// secret with a '<', '>' or '&' is still found in the text.
func (t *Tracer) contentJSON(k attribute.Key, v any) attribute.KeyValue {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return t.content(k, strings.TrimSuffix(b.String(), "\n"))
}

// StartTurn starts the span of a turn, "invoke_agent toolgate". For a
// resume it also records, for each decided call, an "approval_wait" span
// from the pause to the decision (decision kind, decider, wait time) in a
// trace of its own, linked both ways with the turn.
func (t *Tracer) StartTurn(ctx context.Context, ts agent.TurnStart) (context.Context, func(agent.Outcome, error)) {
	ctx, span := t.tracer.Start(ctx, "invoke_agent toolgate", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "invoke_agent"),
		attribute.String("gen_ai.agent.name", "toolgate"),
		t.text(keyTurnKind, string(ts.Kind)),
		t.text(keyConversation, ts.Conversation),
		t.text(keyUser, ts.User),
		t.text(keyChannel, ts.Channel),
	))
	if ts.RunID != "" {
		span.SetAttributes(t.text(keyRunID, ts.RunID))
	}
	for _, c := range ts.Calls {
		wait := t.waitSpan(ctx, span.SpanContext(), c)
		span.AddLink(trace.Link{SpanContext: wait, Attributes: []attribute.KeyValue{attribute.String("toolgate.link", "approval_wait")}})
	}
	return ctx, func(out agent.Outcome, err error) {
		span.SetAttributes(t.text(keyTurnOutcome, string(out.Status)))
		if out.RunID != "" && ts.RunID == "" {
			span.SetAttributes(t.text(keyRunID, out.RunID))
		}
		if len(out.Pending) > 0 {
			span.SetAttributes(keyPending.Int(len(out.Pending)))
			for _, p := range out.Pending {
				span.AddEvent("paused", trace.WithAttributes(
					t.text("gen_ai.tool.name", p.Tool),
					t.text("gen_ai.tool.call.id", p.ID),
					t.text(keyRule, p.RuleID),
				))
			}
		}
		switch {
		case agent.Interrupted(err) || errors.Is(err, agent.ErrLeaseLost):
			// Stopped by the bot (a shutdown), or handed over to the
			// process that took the conversation over, not failed: the
			// turn goes on after the restart, or there.
			span.SetAttributes(keyTurnOutcome.String("interrupted"))
			span.AddEvent("interrupted")
		case errors.Is(err, agent.ErrLeaseTimeout):
			// The conversation was held elsewhere all along: what the
			// turn was for is carried on once it is free.
			span.SetAttributes(keyTurnOutcome.String("busy"))
			span.AddEvent("busy")
		default:
			t.setError(span, err)
		}
		span.End()
	}
}

// TraceID names the span of ctx, a turn's, as a W3C traceparent (see
// agent.TraceLinker): the resume's approval_wait spans link to it.
func (t *Tracer) TraceID(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// pausedBy is the span named by a call's Trace (see TraceID), if it names
// one.
func pausedBy(c store.Call) (trace.SpanContext, bool) {
	if c.Trace == "" {
		return trace.SpanContext{}, false
	}
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": c.Trace})
	sc := trace.SpanContextFromContext(ctx)
	return sc, sc.IsValid()
}

// waitSpan records the wait of one paused call for its decision and
// returns the span's context. It is linked to the turn that resumes the
// call and, when the call names it, to the turn that paused it.
func (t *Tracer) waitSpan(ctx context.Context, turn trace.SpanContext, c store.Call) trace.SpanContext {
	links := []trace.Link{{SpanContext: turn, Attributes: []attribute.KeyValue{attribute.String("toolgate.link", "resumed_by")}}}
	if paused, ok := pausedBy(c); ok {
		links = append(links, trace.Link{SpanContext: paused, Attributes: []attribute.KeyValue{attribute.String("toolgate.link", "paused_by")}})
	}
	kind, decider, at := string(approvals.Expire), agent.System, c.ExpiresAt
	if d := c.Decision; d != nil {
		kind, decider, at = d.Kind, d.Decider, d.At
	}
	if at.Before(c.CreatedAt) {
		at = c.CreatedAt
	}
	_, span := t.tracer.Start(ctx, "approval_wait "+c.Tool,
		trace.WithNewRoot(),
		trace.WithTimestamp(c.CreatedAt),
		trace.WithLinks(links...),
		trace.WithAttributes(
			t.text("gen_ai.tool.name", c.Tool),
			t.text("gen_ai.tool.call.id", c.ID),
			t.text(keyRunID, c.RunID),
			t.text(keyRule, c.RuleID),
			t.text(keyDecision, kind),
			t.text(keyDecider, decider),
			keyWait.Float64(at.Sub(c.CreatedAt).Seconds()),
		))
	span.End(trace.WithTimestamp(at))
	return span.SpanContext()
}

// StartTool starts the span of one tool execution, "execute_tool NAME".
// Its outcome is "ok", "error" or "not_sent" (the span's status is Error:
// its tool did not send the call) or "unknown", with the status left
// unset, as audited: for a run cut by a shutdown or a
// lost lease, with an event "interrupted", and for a run that may have
// done its work that its tool, or its time-out, left unknown.
func (t *Tracer) StartTool(ctx context.Context, ts agent.ToolStart) (context.Context, func(agent.Result)) {
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		t.text("gen_ai.tool.name", ts.Tool),
		t.text(keyVerdict, string(ts.Verdict.Action)),
		t.text(keyRule, ts.Verdict.RuleID),
	}
	if ts.CallID != "" {
		attrs = append(attrs, t.text("gen_ai.tool.call.id", ts.CallID))
	}
	if t.capture {
		attrs = append(attrs, t.content("gen_ai.tool.call.arguments", string(ts.Args)))
	}
	ctx, span := t.tracer.Start(ctx, "execute_tool "+ts.Tool, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(res agent.Result) {
		outcome := "ok"
		switch {
		case res.Interrupted():
			// Cut by a shutdown or a lost lease: it may have done its
			// work, so the span is not marked failed (as the audit
			// says "unknown").
			outcome = "unknown"
			span.AddEvent("interrupted")
		case res.OutcomeUnknown():
			// It may have done its work, and its tool cannot tell (see
			// agent.UnknownOutcomeResult): not marked failed either.
			outcome = "unknown"
		case res.NotSent():
			// Its tool did not send it (see agent.NotSentResult): it
			// did nothing, and failed to.
			outcome = "not_sent"
			span.SetStatus(codes.Error, "the tool did not send the call")
		case res.IsError:
			outcome = "error"
			span.SetStatus(codes.Error, "the tool reported an error")
		}
		span.SetAttributes(keyOutcome.String(outcome))
		if t.capture {
			span.SetAttributes(t.content("gen_ai.tool.call.result", res.Content))
		}
		span.End()
	}
}

// Model wraps m so that each call is a client span "chat MODEL" under the
// turn's span, with the GenAI attributes and the token counts the server
// reports (see agent.ModelConfig.StreamUsage). model is the model name
// sent in requests.
func (t *Tracer) Model(m agent.Model, model string) agent.Model {
	return tracedModel{next: m, t: t, model: model}
}

type tracedModel struct {
	next  agent.Model
	t     *Tracer
	model string
}

func (m tracedModel) Complete(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
	ctx, span := m.t.tracer.Start(ctx, "chat "+m.model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.provider.name", "openai"),
		m.t.text("gen_ai.request.model", m.model),
	))
	defer span.End()
	if m.t.capture {
		span.SetAttributes(m.t.contentJSON("gen_ai.input.messages", req.Messages))
	}
	var usage agent.Usage
	msg, err := m.next.Complete(agent.WithUsage(ctx, &usage), req, onDelta)
	span.SetAttributes(
		attribute.Int("gen_ai.usage.input_tokens", usage.InputTokens),
		attribute.Int("gen_ai.usage.output_tokens", usage.OutputTokens),
	)
	if agent.Interrupted(err) {
		// Cut by the bot (a shutdown, a lost lease), not failed, as its
		// turn is: a rolling upgrade is no model failure.
		span.AddEvent("interrupted")
		return msg, err
	}
	if err != nil {
		var me *agent.ModelError
		if errors.As(err, &me) {
			span.SetAttributes(attribute.String("error.type", me.Kind.String()))
			if me.StatusCode != 0 {
				span.SetAttributes(attribute.Int("http.response.status_code", me.StatusCode))
			}
		}
		m.t.setError(span, err)
		return msg, err
	}
	span.SetAttributes(attribute.Int("toolgate.model.tool_calls", len(msg.ToolCalls)))
	if m.t.capture {
		span.SetAttributes(m.t.contentJSON("gen_ai.output.messages", []openai.ChatCompletionMessage{msg}))
	}
	return msg, nil
}

// RecordRetry notes a retried model request on the model call's span in
// ctx, as an event "retry" with the retry's number, the wait and the error
// kind. It fits agent.ModelConfig.OnRetry.
func RecordRetry(ctx context.Context, retry int, wait time.Duration, err *agent.ModelError) {
	span := trace.SpanFromContext(ctx)
	attrs := []attribute.KeyValue{
		attribute.Int("toolgate.retry", retry),
		attribute.Float64("toolgate.retry.wait_seconds", wait.Seconds()),
		attribute.String("error.type", err.Kind.String()),
	}
	if err.StatusCode != 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", err.StatusCode))
	}
	span.AddEvent("retry", trace.WithAttributes(attrs...))
	span.SetAttributes(keyRetries.Int(retry))
}

// setError marks a span failed. The message is the error's text, cleaned
// as every text the spans export (an error may quote a URL with its
// password, or what a tool printed), but for a model error without
// capture only its kind and status: the text of a model server's error can
// quote the request (a validation error that echoes a message back).
func (t *Tracer) setError(span trace.Span, err error) {
	if err == nil {
		return
	}
	var me *agent.ModelError
	if !t.capture && errors.As(err, &me) {
		desc := "model error: " + me.Kind.String()
		if me.StatusCode != 0 {
			desc += fmt.Sprintf(" (HTTP %d)", me.StatusCode)
		}
		span.SetStatus(codes.Error, desc)
		return
	}
	span.SetStatus(codes.Error, t.clean(err.Error()))
}

// clip shortens s to maxContent bytes on a rune boundary.
func clip(s string) string {
	if len(s) <= maxContent {
		return s
	}
	cut := maxContent
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
