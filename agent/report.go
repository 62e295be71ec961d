package agent

import (
	"context"
	"encoding/json"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Reporter receives the progress of one conversation, so that whoever drives
// the agent (the Slack app) can render it without the agent knowing how.
// Calls come from the goroutine running the turn, in order, but for
// Updated, which also comes from a decision's goroutine, and from the save
// of a call's result (after the save, before the turn ends), so it must be
// safe for concurrent use. A Reporter must not block for long; failures to
// render are its own to log.
type Reporter interface {
	// Status says what the agent is doing ("thinking", "running x").
	Status(ctx context.Context, text string)
	// Delta is a fragment of the answer being streamed.
	Delta(ctx context.Context, text string)
	// Answer is the final text of a model step that called no tool (or
	// the agent's own closing words when the step limit is hit).
	Answer(ctx context.Context, text string)
	// Stopped says the model step whose answer Delta was streaming ended
	// without one (the model failed, or the turn was cut short): what was
	// streamed stays as it is, and no Answer follows. ctx may be done.
	Stopped(ctx context.Context)
	// Paused says the turn waits on these calls, one card each.
	Paused(ctx context.Context, calls []PendingCall)
	// Updated says a paused call was decided, executed, or ended without
	// running.
	Updated(ctx context.Context, u CallUpdate)
}

// Announcer is a Reporter that shows the cards of a pause before the pause
// is saved, so that where they are is saved with the calls, in the pause's
// own store step. The turn holds its conversation until the save, so a
// decision on an announced call that finds no such call can wait for the
// conversation (AwaitTurn) and try again.
type Announcer interface {
	// Announce shows the calls' cards and returns the note to save with
	// each call (see store.Commit.Notes), by call id; a call may have
	// none. Paused follows once the pause is saved.
	Announce(ctx context.Context, calls []PendingCall) map[string][]byte
	// Unsaved follows Announce, in place of Paused, when the pause could
	// not be saved: nothing can decide the calls, and nothing runs.
	Unsaved(ctx context.Context, calls []PendingCall)
}

// ThreadReader is a Reporter whose conversation may hold what was said
// before the bot was part of it (a thread it was mentioned in midway).
type ThreadReader interface {
	// Earlier returns what was said in the conversation's place before
	// the message msgID (see Request.MsgID), written for the model to
	// read as context: "" where there was nothing before it (the message
	// began the conversation's place). An error is a failure to read it.
	Earlier(ctx context.Context, msgID string) (string, error)
}

// NopReporter reports nothing.
type NopReporter struct{}

func (NopReporter) Status(context.Context, string)        {}
func (NopReporter) Delta(context.Context, string)         {}
func (NopReporter) Answer(context.Context, string)        {}
func (NopReporter) Stopped(context.Context)               {}
func (NopReporter) Paused(context.Context, []PendingCall) {}
func (NopReporter) Updated(context.Context, CallUpdate)   {}

// PendingCall is a paused call as shown to approvers.
type PendingCall struct {
	Call
	// Human is set for ask_human-style tools: the card asks for an answer.
	Human bool
	// Schema is the tool's argument schema, for the edit form.
	Schema json.RawMessage
}

// Phase says where a paused call is.
type Phase string

// The phases a CallUpdate reports.
const (
	// PhaseDecided: a decision was recorded; for a decision that runs the
	// tool, execution follows when the step resumes.
	PhaseDecided Phase = "decided"
	// PhaseCounted: an approval was counted toward the call's
	// MinApprovals; it is still pending and its card stays live.
	PhaseCounted Phase = "counted"
	// PhaseExecuted: the tool ran; Result holds its output.
	PhaseExecuted Phase = "executed"
	// PhaseSkipped: the call will not run (denied, rejected, answered,
	// expired, cancelled, or refused by policy at execution).
	PhaseSkipped Phase = "skipped"
)

// CallUpdate is the news about one paused call.
type CallUpdate struct {
	Call  Call
	Phase Phase
	// Result is what the model reads as the call's result.
	Result Result
	// Note explains a skip (e.g. "policy now denies: ...").
	Note string
	// StepPending is set on PhaseDecided while other calls of the same
	// step still wait on a decision: nothing runs before they are decided.
	StepPending bool
	// Unstarted is set by News on PhaseDecided when the call's tool has
	// not started: its step's resume has not begun it yet, or did not
	// run it for a reason the resume's own update told (the policy denies
	// it now, its tool is gone) and the store does not keep: the save of
	// that outcome failed (see settle).
	Unstarted bool
}

// OutcomeStatus says how a turn, decision or resume ended.
type OutcomeStatus string

// The outcomes of Run and Resume.
const (
	// Answered: the model answered in text.
	Answered OutcomeStatus = "answered"
	// Paused: at least one call waits on a human; see Outcome.Pending.
	Paused OutcomeStatus = "paused"
	// Waiting: the conversation was already paused; the message is queued
	// and will be answered after the resume. Outcome.Pending lists what it
	// waits on.
	Waiting OutcomeStatus = "waiting"
	// StepLimit: the turn stopped after Config.MaxSteps model calls.
	StepLimit OutcomeStatus = "step_limit"
	// Stopped: the requester cancelled the paused step.
	Stopped OutcomeStatus = "stopped"
	// Idle: there was nothing to do (the resume was claimed elsewhere or is
	// not due yet).
	Idle OutcomeStatus = "idle"
)

// Outcome is the result of Run or Resume.
type Outcome struct {
	Status  OutcomeStatus
	Answer  string
	RunID   string
	Pending []PendingCall
}

// Request is a message from a person starting or continuing a conversation.
type Request struct {
	// Conversation is the opaque key of the conversation (the Slack app uses
	// team/channel/thread).
	Conversation string
	// User is the requester's id; Channel where the conversation is. Both
	// are given to the policy.
	User    string
	Channel string
	Text    string
	At      time.Time
	// EventID and MsgID de-duplicate the message in Accept (see
	// store.Inbound); both may be empty.
	EventID string
	MsgID   string
	// Seq is set by Accept once the message is recorded; Run records a
	// message with Seq 0 itself.
	Seq int64
}

// DecideResult is the outcome of a recorded decision.
type DecideResult struct {
	// Call is the call after the decision.
	Call Call
	// Complete is true for exactly one decision of a step: the one that
	// left nothing pending. Its caller should call Resume(Call.RunID).
	Complete bool
	// Unremembered is set on an Always-allow decision whose standing rule
	// could not be saved: the call is approved, and later calls like it
	// still ask.
	Unremembered bool
	// Unaudited is set on an Always-allow decision whose standing rule was
	// saved, and is in force, but whose audit entry was not: it wraps
	// approvals.ErrAuditFailed.
	Unaudited error
	// EditUnchanged is set on the refusal of an Edit whose arguments,
	// once canonical, are Call's (those of its fingerprint): such an edit
	// is its decider's Approve, so an Approve of theirs that decided the
	// call is what it would have recorded. An Edit refused without it
	// would have run other arguments than those that ran.
	EditUnchanged bool
}

func refusedByOther(c store.Call) error {
	e := &approvals.RefusedError{Err: approvals.ErrAlreadyDecided}
	if c.Status == store.Expired {
		e.Err = approvals.ErrExpired
	}
	if c.Decision != nil {
		e.DecidedBy = c.Decision.Decider
		e.DecidedAt = c.Decision.At
		e.Kind = kindOf(c.Decision)
	}
	return e
}
