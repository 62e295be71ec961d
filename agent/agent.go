package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Model is a chat model that may call tools. OpenAIModel implements it.
type Model interface {
	// Complete sends the conversation and returns the model's next message,
	// reporting text fragments to onDelta as they arrive.
	Complete(ctx context.Context, req ModelRequest, onDelta func(text string)) (openai.ChatCompletionMessage, error)
}

// Policy judges tool calls. approvals.Engine implements it.
type Policy interface {
	Evaluate(ctx context.Context, in approvals.Input) (approvals.Verdict, error)
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(ctx context.Context, in approvals.Input) (approvals.Verdict, error)

// Evaluate calls f.
func (f PolicyFunc) Evaluate(ctx context.Context, in approvals.Input) (approvals.Verdict, error) {
	return f(ctx, in)
}

// RecordPolicy is a Policy that judges by records of the store
// (approvals.Engine is one). The agent reads them with the store reads a
// decision and a resume make anyway (the call, the run), so judging them
// costs no round trip of its own.
type RecordPolicy interface {
	// RecordKinds are the kinds of the records it judges by.
	RecordKinds() []string
	// EvaluateRecords is Evaluate on those records, as just read.
	EvaluateRecords(ctx context.Context, in approvals.Input, recs map[string][]store.Record) (approvals.Verdict, error)
}

// Rememberer stores a standing rule after a Remember decision. A Policy
// that also implements it (approvals.Engine does) is used for that.
type Rememberer interface {
	Remember(ctx context.Context, actor string, r approvals.StandingRule) (approvals.StandingRule, error)
}

// GroupResolver expands user-group approvers (Slack user groups).
type GroupResolver = approvals.GroupResolver

// Audience tells whether a user can see a channel (is a member of it, or is
// the other party of a direct message).
type Audience interface {
	CanSee(ctx context.Context, channel, user string) (bool, error)
}

// Conversations keeps the agent's state of each conversation between turns
// (written with CommitTurn).
type Conversations interface {
	LoadConversation(ctx context.Context, key string) (store.Conversation, error)
}

// Runs keeps paused steps and their calls.
type Runs interface {
	LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error)
	GetCall(ctx context.Context, callID string) (store.Call, error)
	GetCallWith(ctx context.Context, callID string, kinds ...string) (store.Call, map[string][]store.Record, int64, error)
	DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error)
	DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error)
	ApproveAudited(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error)
	ApproveBegin(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error)
	BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error)
	RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error)
	ReleaseClaim(ctx context.Context, runID, owner string) error
	BeginExecution(ctx context.Context, callID, attempt string) (bool, error)
	AbandonExecution(ctx context.Context, callID, attempt string) error
	SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error
	SkipExecution(ctx context.Context, callID string, result []byte) error
	Pending(ctx context.Context, f store.Filter) ([]store.Call, error)
	Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error)
	NextExpiry(ctx context.Context) (time.Time, error)
	Stalled(ctx context.Context, limit int) ([]string, error)
}

// Inboxes records people's messages before they are acknowledged, so a
// turn that dies with its process is taken over (see Accept and TakeOver).
type Inboxes interface {
	AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error)
	AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error)
	Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error)
	Inbox(ctx context.Context, conversation string) ([]store.Inbound, error)
}

// Leases serialises work on one conversation across processes.
type Leases interface {
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	// RenewLease extends owner's live lease, and never takes a free one.
	RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, owner string) error
}

// Reminders lists the calls whose next reminder is due and claims each
// reminder once, shared by every process, so that a reminder is sent once
// whichever replica sends it.
type Reminders interface {
	DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error)
	ClaimReminder(ctx context.Context, callID string, n int, next time.Time) (bool, error)
	NextReminder(ctx context.Context) (time.Time, error)
}

// PolicyRecords lists records of several kinds at once: those a
// RecordPolicy judges by, read again before a call runs on a verdict
// judged by records read earlier, and, with their version, to judge the
// pending calls this process recalls (see recall).
type PolicyRecords interface {
	RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error)
	VersionedRecords(ctx context.Context, kinds ...string) (map[string][]store.Record, int64, error)
}

// Auditor records what happened.
type Auditor interface {
	Audit(ctx context.Context, e store.AuditEntry) error
}

// Store is everything the agent keeps. Both store implementations satisfy it.
type Store interface {
	Turns
	Conversations
	Runs
	Inboxes
	Leases
	Reminders
	PolicyRecords
	Auditor
}

// Config tunes an Agent. Zero values get the defaults noted.
type Config struct {
	// SystemPrompt starts every request to the model; DefaultSystemPrompt
	// if empty.
	SystemPrompt string
	// MaxSteps bounds the model calls of one turn (default 10).
	MaxSteps int
	// MaxCalls bounds the tool calls judged in one model step (default
	// 32): the model is told that those past it were not performed, and
	// nothing runs or asks for them.
	MaxCalls int
	// MaxToolOutput caps a tool result in bytes before the model sees it
	// (default 16 KiB).
	MaxToolOutput int
	// MaxArgBytes refuses larger tool arguments from the model (default
	// 256 KiB).
	MaxArgBytes int
	// ContextBudget bounds what a request to the model carries, in
	// estimated tokens (default 64000): the system prompt and the tools
	// offered, then as much of the history as fits (see fitBudget). The
	// estimate is conservative (see textTokens): from about two bytes a
	// token for hex or base64 to four for English, and a token for each
	// character of other scripts. A request the model still refuses as
	// too long is sent again with the history shortened to half.
	ContextBudget int
	// ApprovalTTL is how long a paused call waits when its rule sets no
	// TTL (default 72h).
	ApprovalTTL time.Duration
	// ReminderAfter is how long a paused call waits before its approvers
	// get a reminder (a second one follows when a quarter of its TTL is
	// left); a rule's remind_after overrides it. Zero: no reminders but
	// those rules ask for.
	ReminderAfter time.Duration
	// RememberTTL is how long a standing rule made by a Remember decision
	// lasts when the decision sets no TTL (zero: until revoked).
	RememberTTL time.Duration
	// ToolTimeout bounds one tool execution (default 2m).
	ToolTimeout time.Duration
	// PreviewTimeout bounds one tool's effect preview when its call pauses
	// (default 5s); a preview that takes longer is shown as unavailable.
	PreviewTimeout time.Duration
	// LeaseTTL is the lease on a conversation while a turn runs, and the
	// claim on a resume; both are renewed every LeaseTTL/3 while the work
	// lasts, so those of a process that died lapse within LeaseTTL
	// (default 10s).
	LeaseTTL time.Duration
	// TakeoverAfter is how old an unanswered message must be before
	// Unanswered offers its conversation for TakeOver (default LeaseTTL):
	// a younger one is normally being answered by the process that
	// accepted it.
	TakeoverAfter time.Duration
	// LeaseWait bounds how long a turn waits for another to release the
	// conversation (default 10m).
	LeaseWait time.Duration
	// Owner names this process in leases and claims (default
	// host-pid-random); each hold is named by it and a number of its own.
	Owner string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Groups expands user-group approvers; nil means group approvers match
	// no one.
	Groups GroupResolver
	// Audience tells who can see a conversation's channel. A call whose
	// rule names no approvers may be decided by anyone who can; nil lets
	// anyone decide it.
	Audience Audience
	// ShownInFull reports whether the edge can show the people who decide
	// on a call its (canonical) arguments whole, and, for a tool answered
	// by a person (human, see Tool.Human), its question in the form they
	// answer in. A call that would ask for a decision with arguments it
	// cannot is not paused (the model is told to call again with shorter
	// ones), and an edit into such arguments is refused, as no one could
	// read what they approve. Nil: any.
	ShownInFull func(args json.RawMessage, human bool) bool
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Tracer, if set, observes turns and tool executions (see Tracer).
	Tracer Tracer
	// Judged, if set, is called once for each tool call the model makes,
	// with how it was judged: "allow", "ask" or "deny"; "error" when the
	// policy could not judge it fully (a condition or a record it could not
	// read; the call then asks or is denied); "invalid" when it was
	// refused before judging (an unknown tool, arguments its schema
	// refuses). Decisions and resumes judge calls again; they are not
	// counted. It must not block.
	Judged func(verdict string)
	// Expired, if set, is called once for each call this process expired
	// (Expire), as decided. It must not block.
	Expired func(c Call)
}

// DefaultSystemPrompt is used when Config.SystemPrompt is empty.
const DefaultSystemPrompt = `You are a careful chat-ops assistant working in a Slack thread with a team of engineers.
You can call tools. Some calls run at once, some are refused by policy, and some wait for a human to approve them.
Rules:
- If a call is denied, rejected or expires, it did not run. Do not retry the same call with the same arguments; say what happened and ask how to proceed.
- If a human edited the arguments of a call, the edited call is the one that ran. Do not re-issue the original call.
- Never claim a tool ran unless you have its result.
- Keep answers short and use Markdown sparingly.`

// Agent runs conversations with a model and tools, pausing calls that need a
// human and resuming them once decided. All its state is in the Store, so any
// process sharing the store may decide or resume a call another one paused.
// It is safe for concurrent use.
type Agent struct {
	model    Model
	tools    *Registry
	policy   Policy
	store    Store
	reporter func(conversation string) Reporter
	cfg      Config
	log      *slog.Logger
	leases   *leases
	// resumable knows the conversations of the runs to resume.
	resumable resumable
	// paused remembers the calls this process paused, and those other
	// processes announced (see FollowPauses), for their decision.
	paused pausedCalls
	// unsent are the expiries to send again (see expireDue).
	unsent unconfirmedExpiries
	// read is the latest records a turn of this process read, with their
	// version, for the calls other processes announce.
	read atomic.Pointer[readRecords]
	// budgetWarned is set once the operator was warned that the system
	// prompt and the tools take most of the context budget (see
	// historyBudget).
	budgetWarned atomic.Bool
	// mergeUsers is set once the model server refused two user messages
	// in a row: from then on they are sent merged (see complete).
	mergeUsers atomic.Bool
}

// New returns an Agent. reporter gives the Reporter of a conversation (by
// its opaque key); it is called for every turn, decision and resume.
func New(model Model, tools *Registry, policy Policy, st Store, reporter func(conversation string) Reporter, cfg Config) *Agent {
	if cfg.SystemPrompt == "" {
		cfg.SystemPrompt = DefaultSystemPrompt
	}
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 10
	}
	if cfg.MaxCalls <= 0 {
		cfg.MaxCalls = 32
	}
	if cfg.MaxToolOutput <= 0 {
		cfg.MaxToolOutput = 16 << 10
	}
	if cfg.MaxArgBytes <= 0 {
		cfg.MaxArgBytes = 256 << 10
	}
	if cfg.ContextBudget <= 0 {
		cfg.ContextBudget = 64000
	}
	if cfg.ApprovalTTL <= 0 {
		cfg.ApprovalTTL = 72 * time.Hour
	}
	if cfg.ToolTimeout <= 0 {
		cfg.ToolTimeout = 2 * time.Minute
	}
	if cfg.PreviewTimeout <= 0 {
		cfg.PreviewTimeout = 5 * time.Second
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = cfg.LeaseTTL
	}
	if cfg.LeaseWait <= 0 {
		cfg.LeaseWait = 10 * time.Minute
	}
	if cfg.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if reporter == nil {
		reporter = func(string) Reporter { return NopReporter{} }
	}
	return &Agent{
		model: model, tools: tools, policy: policy, store: st, reporter: reporter, cfg: cfg, log: cfg.Logger,
		leases: newLeases(st, cfg.Owner, cfg.LeaseTTL, cfg.LeaseWait, cfg.Logger),
	}
}

// Tools returns the agent's tool registry.
func (a *Agent) Tools() *Registry { return a.tools }

// ErrLeaseTimeout is returned when a conversation stayed busy longer than
// Config.LeaseWait. The message stays recorded: a takeover answers it once
// the conversation is free.
var ErrLeaseTimeout = errors.New("conversation is busy")

// ErrNotRecorded wraps the error of a Run whose message could not be
// recorded (see Accept): nothing answers it later, so it must be sent
// again. Any other error of Run, RunTaken, TakeOver or a resume leaves the
// work recorded, and a takeover or the sweep carries it on.
var ErrNotRecorded = errors.New("message not recorded")

// ErrPauseNotSaved wraps the error of a turn whose approval request could
// not be saved: the turn was recorded with its calls as not performed and
// its messages answered, so nothing carries it on, and the request must be
// made again. (When the turn could not be recorded either, its messages
// stay unanswered for a takeover, and the error does not wrap it.)
var ErrPauseNotSaved = errors.New("approval request not saved")

// ErrUnconfirmed wraps the error of a decision whose store step may have
// been made, its answer lost, when the store did not answer again in time
// to tell: the decision may stand (its card then says so) or not. The
// error is an *UnconfirmedError.
var ErrUnconfirmed = errors.New("decision not confirmed")

// UnconfirmedError is the error of a decision that is not confirmed (see
// ErrUnconfirmed). Its step may have claimed the resume and marked the
// call to run, which this process will not run now; Recover, which the
// caller runs once the decider is told (it takes as long as the store
// stays unreachable, until ctx ends), asks the store until it answers and
// gives back what the step took: the claim, and the mark of the call,
// which never ran. It reports whether the decision was recorded and
// completed its step: the caller then resumes RunID, which runs the call,
// instead of a later resume reporting its outcome as unknown.
type UnconfirmedError struct {
	Err          error
	RunID        string
	Conversation string
	Recover      func(ctx context.Context) (resume bool)
}

func (e *UnconfirmedError) Error() string   { return ErrUnconfirmed.Error() + ": " + e.Err.Error() }
func (e *UnconfirmedError) Unwrap() []error { return []error{ErrUnconfirmed, e.Err} }

// ErrLeaseLost is returned when the lease on a conversation, or a
// resume's claim on its run, ran out or was taken while a turn or resume
// was running: it stopped where it was and wrote nothing more. The work is
// not lost: the conversation stays listed by Unanswered until it is
// answered, and the resume's claim was released, so TakeOver, here or in
// the process that holds the conversation now, carries it on (a call that
// started is not run again unless its tool is read-only or idempotent).
// Nothing needs to be said in the thread.
var ErrLeaseLost = errors.New("lost the lease on the conversation")

// DefaultLeaseTTL is the default Config.LeaseTTL.
const DefaultLeaseTTL = 10 * time.Second

// decisionEffects are the effects written with a decision of kind on c by
// actor at at: its audit entry (of the arguments with fingerprint fp), and the conversation listed
// for takeover once the step is complete, so that a resume that dies with
// its process is taken over.
func decisionEffects(c store.Call, actor, kind, fp string, at time.Time) store.Effects {
	return store.Effects{
		Audit:      store.AuditEntry{At: at, Actor: actor, Action: "decide", Channel: c.Channel, Thread: c.Conversation, Tool: c.Tool, CallID: c.ID, Fingerprint: fp, Decision: kind, Outcome: store.OutcomeRecorded},
		Unanswered: c.Conversation,
	}
}

// decided logs the audit entry a decision wrote with the store, and
// returns err unless it only says that the decision's effects were not all
// written: the decision stands then, and that is logged.
func (a *Agent) decided(ctx context.Context, e store.AuditEntry, err error) error {
	if err != nil && !errors.Is(err, store.ErrEffects) {
		return err
	}
	if err != nil {
		a.log.Warn("write the audit entry of a decision", "call", e.CallID, "err", err)
	}
	e.Log(ctx, a.log)
	return nil
}

// policyKinds are the record kinds the policy judges by, to read with a
// call or a run; none unless it is a RecordPolicy.
func (a *Agent) policyKinds() []string {
	if p, ok := a.policy.(RecordPolicy); ok {
		return p.RecordKinds()
	}
	return nil
}

func (a *Agent) audit(ctx context.Context, e store.AuditEntry) {
	if e.At.IsZero() {
		e.At = a.cfg.Now()
	}
	e.Log(ctx, a.log)
	if err := a.store.Audit(ctx, e); err != nil {
		a.log.Warn("write audit entry", "action", e.Action, "call", e.CallID, "err", err)
	}
}

// leaseLost reports whether ctx ended because the conversation's lease was
// lost; then nothing more may be written for the conversation.
func leaseLost(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrLeaseLost)
}

// mustJSON encodes agent state without HTML escaping, so the raw arguments
// it holds keep their bytes (see store.EncodeJSON).
func mustJSON(v any) json.RawMessage {
	b, err := store.EncodeJSON(v)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", v, err))
	}
	return b
}
