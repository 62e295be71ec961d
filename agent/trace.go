package agent

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Tracer observes an agent's turns and tool executions, for tracing (see
// Config.Tracer). Its methods may be called concurrently; they must not
// block. The telemetry package implements it with OpenTelemetry.
type Tracer interface {
	// StartTurn is called when a turn begins: a message (Run), a claimed
	// resume (Resume) or a takeover (TakeOver). Its context is used for all of the turn's work
	// (model calls, tool executions); end is called once, with the turn's
	// outcome and error, when it ends. A turn that pauses ends with status
	// Paused and the pending calls.
	StartTurn(ctx context.Context, t TurnStart) (_ context.Context, end func(Outcome, error))
	// StartTool is called before a tool runs; its context is the tool's,
	// and end is called once with the result.
	StartTool(ctx context.Context, t ToolStart) (_ context.Context, end func(Result))
}

// TraceLinker is a Tracer that can name the trace of a turn, so that the
// turn resuming a paused call links to the turn that paused it, hours and
// restarts later: TraceID returns what to store with the call for ctx, a
// turn's context ("" for none), which TurnStart.Calls then carry back
// (store.Call.Trace).
type TraceLinker interface {
	TraceID(ctx context.Context) string
}

// TurnKind says what started a turn.
type TurnKind string

// The kinds of turn.
const (
	TurnMessage TurnKind = "message" // a person's message (Run)
	TurnResume  TurnKind = "resume"  // the decisions on a paused step (Resume)
	// TurnTakeover answers what a process that died left unanswered
	// (TakeOver); it starts once the conversation is held, and its User and
	// Channel are those of the latest message recorded.
	TurnTakeover TurnKind = "takeover"
)

// TurnStart describes a turn that begins.
type TurnStart struct {
	Kind         TurnKind
	Conversation string
	// User and Channel are the requester and the conversation's channel.
	User    string
	Channel string
	// RunID and Calls are, for a resume, the paused step and its calls as
	// decided (each with its Decision, CreatedAt being when it paused).
	RunID string
	Calls []store.Call
}

// ToolStart describes a tool execution that begins.
type ToolStart struct {
	Tool string
	// CallID is the paused call's id for a call run after a decision, empty
	// for one the policy allowed at once.
	CallID string
	// Verdict is the policy's verdict on the call as it runs.
	Verdict approvals.Verdict
	// Args are the exact arguments the tool gets.
	Args json.RawMessage
}

// endTurn is deferred by each turn's start: it calls end, from startTurn,
// with the turn's outcome and error, or, when a panic cuts the turn, with
// an error naming it before the panic goes on, so that the turn is
// reported ended either way.
func endTurn(end func(Outcome, error), out *Outcome, err *error) {
	if p := recover(); p != nil {
		end(Outcome{}, fmt.Errorf("panic: %v", p))
		panic(p)
	}
	end(*out, *err)
}

// startTurn calls the tracer, if any.
func (a *Agent) startTurn(ctx context.Context, t TurnStart) (context.Context, func(Outcome, error)) {
	if a.cfg.Tracer == nil {
		return ctx, func(Outcome, error) {}
	}
	return a.cfg.Tracer.StartTurn(ctx, t)
}

// traceID names the trace of ctx's turn for the calls it pauses, if the
// tracer can (see TraceLinker).
func (a *Agent) traceID(ctx context.Context) string {
	if l, ok := a.cfg.Tracer.(TraceLinker); ok {
		return l.TraceID(ctx)
	}
	return ""
}

// startTool calls the tracer, if any.
func (a *Agent) startTool(ctx context.Context, t ToolStart) (context.Context, func(Result)) {
	if a.cfg.Tracer == nil {
		return ctx, func(Result) {}
	}
	return a.cfg.Tracer.StartTool(ctx, t)
}
