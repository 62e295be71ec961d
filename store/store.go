package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Errors returned by both implementations; check them with errors.Is.
var (
	ErrNotFound            = errors.New("not found")
	ErrAlreadyDecided      = errors.New("already decided")
	ErrExpired             = errors.New("expired")
	ErrFingerprintMismatch = errors.New("fingerprint mismatch")
	ErrRunExists           = errors.New("run already exists")
	ErrConflict            = errors.New("version conflict")
	// ErrDuplicateApproval: Approve found the approver's approval of these
	// arguments already counted.
	ErrDuplicateApproval = errors.New("approval already counted")
	// ErrStale: a decision or an approval was told to be made only on
	// records of a version they no longer have, or on a call holding
	// other approvals (see Condition).
	ErrStale = errors.New("records changed")
	// ErrNotHolder: CommitTurn was told to write only while its holder
	// holds the conversation's lease (Commit.Holder), and another owner
	// holds it.
	ErrNotHolder = errors.New("the conversation's lease is held by another owner")
	// ErrNotReplicated: a write the store made, but could not confirm
	// was copied to as many replicas as it was told to wait for (Redis
	// with REDIS_WAIT_REPLICAS): it stands, unless a failover loses it.
	// A caller takes the step as neither done nor refused, as when the
	// store's answer was lost.
	ErrNotReplicated = errors.New("not replicated")
)

// Status is the state of one paused call.
type Status string

// A call is pending until it is decided (by a person) or expired or
// cancelled; the last three are final.
const (
	Pending   Status = "pending"
	Decided   Status = "decided"
	Expired   Status = "expired"
	Cancelled Status = "cancelled"
)

// Decision is the stored record of how a call was decided. Kind is opaque to
// the store except for "expire" (allowed only once ExpiresAt has passed, sets
// Status Expired) and "cancel" (sets Status Cancelled).
type Decision struct {
	Kind       string          `json:"kind"`
	Decider    string          `json:"decider"`
	At         time.Time       `json:"at"`
	Reason     string          `json:"reason,omitempty"`
	Args       json.RawMessage `json:"args,omitempty"`
	Answer     string          `json:"answer,omitempty"`
	Conditions string          `json:"conditions,omitempty"`
	TTL        time.Duration   `json:"ttl,omitempty"`
	// Exact marks a Remember decision for these exact arguments only.
	Exact bool `json:"exact,omitempty"`
	// Preview and PreviewError are, for an edit that restarted a count
	// (see Call.Edit), what the tool said the edited arguments would do,
	// or why it could not; opaque to the store.
	Preview      string `json:"preview,omitempty"`
	PreviewError string `json:"preview_error,omitempty"`
	// MinApprovals is, for an edit that restarted a count, how many
	// distinct approvers its arguments needed when it was made: a floor
	// for the count it restarted, as Call.MinApprovals is for the call's;
	// opaque to the store.
	MinApprovals int `json:"min_approvals,omitempty"`
	// Approvers are, for an edit that restarted a count or decided the
	// call at once, those of the rule its arguments fell under (empty: anyone in the conversation
	// when NeedsAudience is set); opaque to the store.
	Approvers []string `json:"approvers,omitempty"`
	// NeedsAudience is, for an edit that restarted a count or decided the
	// call at once, set when the rule its arguments fell under asks and names no approvers: only
	// people who can see the conversation may decide them then, even
	// where the card's rule names approvers. An empty Approvers cannot
	// say so, as it is also what a rule that allowed them leaves. Edits
	// stored before it was recorded do not have it. Opaque to the store.
	NeedsAudience bool `json:"needs_audience,omitempty"`
	// ExpiresAt is, for an edit that restarted a count, when the call
	// expires if that is before its ExpiresAt (the edited arguments fell
	// under a rule with a shorter ttl): the store moves the call's
	// ExpiresAt to it, and its RemindAt with it (see NextRemindAt). Zero:
	// unchanged.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Attempt, when set, names this sending of the decision (unique to
	// it), and of the approval that ApproveAudited counts with it: a
	// store that finds the call decided with the same Attempt (or the
	// approval counted by it) knows that its client sent the decision
	// again after a lost reply, or its caller, which found it recorded
	// after its answer was lost, and answers as the first sending
	// recorded it. A store that writes a decision's effects in a step
	// after the decision's own (see storetest.Store's DecideAudited)
	// makes that step then, which the lost answer may have left unmade,
	// appending the audit entry once for the Attempt.
	Attempt string `json:"attempt,omitempty"`
}

// Call is one tool call of a paused step that waits on people.
type Call struct {
	ID          string          `json:"id"`           // opaque id, see CallID
	RunID       string          `json:"run_id"`       // the run it belongs to
	ToolCallID  string          `json:"tool_call_id"` // the model's id for the call
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"` // canonical JSON
	Fingerprint string          `json:"fingerprint"`
	Requester   string          `json:"requester"`
	// Requesters are everyone whose message the turn that made the call
	// answers (Requester among them); empty in calls stored before it was
	// recorded, where Requester is the only one known.
	Requesters   []string `json:"requesters,omitempty"`
	Channel      string   `json:"channel"`
	Conversation string   `json:"conversation"`
	RuleID       string   `json:"rule_id"`
	Reason       string   `json:"reason,omitempty"`
	Approvers    []string `json:"approvers,omitempty"`
	FourEyes     bool     `json:"four_eyes,omitempty"`
	// NoAlwaysAllow marks an ask no standing rule may relax (one made of
	// several requesters' asks, or forced by a condition that failed), so
	// its card does not offer Always allow; opaque to the store.
	NoAlwaysAllow bool `json:"no_always_allow,omitempty"`
	// NeedsAudience marks a call whose Approvers must also be able to see
	// the conversation (an ask made of one that names them and one that
	// names none); opaque to the store.
	NeedsAudience bool `json:"needs_audience,omitempty"`
	// Repeatable records that the tool said, when the call paused, that
	// it is read-only or idempotent: a call cut by a crash runs again only
	// if its tool said so then and says so still; opaque to the store.
	Repeatable bool `json:"repeatable,omitempty"`
	// ToolDigest is the digest of the tool's definition when the call
	// paused: an approved call runs only on the tool it was asked of
	// (empty in calls stored before it was recorded); opaque to the
	// store.
	ToolDigest string `json:"tool_digest,omitempty"`
	// Trace names the trace of the turn that paused the call (a W3C
	// traceparent), when traces are exported, so that the turn resuming
	// it links to it; opaque to the store.
	Trace     string    `json:"trace,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Status    Status    `json:"status"`
	Decision  *Decision `json:"decision,omitempty"`
	// Executing is set by BeginExecution: the tool was started at most once.
	Executing bool `json:"executing,omitempty"`
	// ExecAttempt names the BeginExecution sending that set Executing, for
	// the store's own use (see BeginExecution's attempt); a store that
	// keeps it beside the call (Redis) does not return it.
	ExecAttempt string `json:"exec_attempt,omitempty"`
	// Result is what the tool returned, as saved by SaveResult (opaque to
	// the store); empty while it runs or if the runner died.
	Result json.RawMessage `json:"result,omitempty"`
	// MinApprovals is how many distinct approvers the call needs (0 or 1:
	// one, decided by Decide); set at CreateRun.
	MinApprovals int `json:"min_approvals,omitempty"`
	// Approvals are the approvals counted by Approve toward MinApprovals,
	// all of the arguments with the current Fingerprint, in order.
	Approvals []Approval `json:"approvals,omitempty"`
	// Edit is the edit that restarted the count (set by Approve): the
	// pending arguments are Edit.Args, and Fingerprint is theirs; Args
	// stays what the model asked for.
	Edit *Decision `json:"edit,omitempty"`
	// RemindAfter is how long after CreatedAt the approvers are reminded
	// (zero: never); the store reads it only to set RemindAt again when an
	// edit moves ExpiresAt (see Reminders).
	RemindAfter time.Duration `json:"remind_after,omitempty"`
	// RemindAt is when the next reminder of the call is due (zero: none),
	// set by the caller at CreateRun and moved by ClaimReminder, and by
	// an edit that moves ExpiresAt (to NextRemindAt, in the same step);
	// the store keeps the time and lists the call by it (DueReminders)
	// while the call is pending, and sets it to zero when the call leaves
	// Pending.
	RemindAt time.Time `json:"remind_at,omitzero"`
	// Reminded is the number of the last reminder claimed with
	// ClaimReminder (zero: none).
	Reminded int `json:"reminded,omitempty"`
	// Preview is what the tool said the call would do, computed for Args
	// when the call paused (opaque to the store); PreviewError why it
	// could not say. Both are empty for a tool that offers no preview.
	Preview      string `json:"preview,omitempty"`
	PreviewError string `json:"preview_error,omitempty"`
}

// RequestedBy lists the people whose request c is: its Requesters, or its
// Requester alone in a call stored before Requesters were recorded. A
// call is listed under each of them (see Filter.Requester).
func (c Call) RequestedBy() []string {
	if len(c.Requesters) > 0 {
		return c.Requesters
	}
	if c.Requester == "" {
		return nil
	}
	return []string{c.Requester}
}

// IsRequester reports whether user is among those whose request c is (see
// RequestedBy).
func (c Call) IsRequester(user string) bool {
	return user != "" && slices.Contains(c.RequestedBy(), user)
}

// Approval is one approver's approval counted toward a call's
// MinApprovals.
type Approval struct {
	Approver string    `json:"approver"`
	At       time.Time `json:"at"`
}

// Proposal is an edit handed to Approve: arguments that replace the pending
// ones, with their fingerprint, as Decision records them.
type Proposal struct {
	Fingerprint string
	Edit        Decision
}

// Run is a paused step of a conversation: the agent's whole state (opaque to
// the store) and the ids of the calls it waits on.
type Run struct {
	ID           string          `json:"id"`
	Conversation string          `json:"conversation"`
	Requester    string          `json:"requester"`
	Channel      string          `json:"channel"`
	State        json.RawMessage `json:"state"`
	CallIDs      []string        `json:"call_ids"`
	CreatedAt    time.Time       `json:"created_at"`
	// ExpiresAt is the latest ExpiresAt of its calls.
	ExpiresAt time.Time `json:"expires_at"`
	// Finished is set by LoadRun once FinishRun ended the run; it is not
	// stored by CreateRun.
	Finished bool `json:"-"`
}

// Conversation is the agent's state of one conversation between turns
// (opaque to the store), and the run it is paused on, if any.
type Conversation struct {
	Key       string          `json:"key"`
	State     json.RawMessage `json:"state"`
	PausedRun string          `json:"paused_run,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// Filter selects pending calls. Empty fields match everything.
// Approver matches calls that name that id among their approvers, and calls
// with no approvers (open to anyone in the channel) when it is "*".
// Requester matches the calls requested by that id, alone or with others
// (see Call.RequestedBy). Limit bounds the listing to the oldest Limit
// matching calls (0: all).
type Filter struct {
	Conversation string
	Approver     string
	Requester    string
	Limit        int
}

// AnyApprover is the Filter.Approver that selects calls open to anyone.
const AnyApprover = "*"

// Match reports whether c matches every field of f.
func (f Filter) Match(c Call) bool {
	if f.Conversation != "" && c.Conversation != f.Conversation {
		return false
	}
	if f.Requester != "" && !c.IsRequester(f.Requester) {
		return false
	}
	switch {
	case f.Approver == "":
	case f.Approver == AnyApprover && len(c.Approvers) == 0:
	case !slices.Contains(c.Approvers, f.Approver):
		return false
	}
	return true
}

// AuditEntry is one line of the audit log.
type AuditEntry struct {
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"` // request, decide, execute, policy_add, ...
	// Channel and Thread say where the call was made: the channel id and
	// the conversation key of its thread (empty for a change made outside
	// a conversation, such as a policy change).
	Channel string `json:"channel,omitempty"`
	Thread  string `json:"thread,omitempty"`
	Tool    string `json:"tool,omitempty"`
	CallID  string `json:"call_id,omitempty"`
	// Fingerprint is that of the arguments the entry is about: for an
	// execution, the arguments that ran (an edit's, not the original's).
	Fingerprint string `json:"fingerprint,omitempty"`
	// Decision is the decision kind of a decide or execute entry.
	Decision string `json:"decision,omitempty"`
	Outcome  string `json:"outcome,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// LevelAudit is the level of audit log lines: above slog.LevelError, so
// that no level set for the rest of the log drops them. Handlers show it
// as "ERROR+4" unless told to name it (see NameAuditLevel).
const LevelAudit = slog.LevelError + 4

// NameAuditLevel is a slog.HandlerOptions.ReplaceAttr that shows
// LevelAudit as "AUDIT"; it leaves every other attribute alone.
func NameAuditLevel(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.LevelKey && len(groups) == 0 {
		if l, ok := a.Value.Any().(slog.Level); ok && l == LevelAudit {
			return slog.String(slog.LevelKey, "AUDIT")
		}
	}
	return a
}

// Log writes e as one structured log line with the message "audit", at
// LevelAudit, so the audit reaches a log pipeline as well as the store.
// Empty fields are left out.
func (e AuditEntry) Log(ctx context.Context, l *slog.Logger) {
	attrs := []slog.Attr{slog.Time("at", e.At), slog.String("actor", e.Actor), slog.String("action", e.Action)}
	for _, f := range []struct{ k, v string }{
		{"channel", e.Channel}, {"thread", e.Thread}, {"tool", e.Tool}, {"call", e.CallID},
		{"fingerprint", e.Fingerprint}, {"decision", e.Decision}, {"outcome", e.Outcome}, {"detail", e.Detail},
	} {
		if f.v != "" {
			attrs = append(attrs, slog.String(f.k, f.v))
		}
	}
	l.LogAttrs(ctx, LevelAudit, "audit", attrs...)
}

// DefaultAuditRetention is how long stores keep audit entries unless told
// otherwise.
const DefaultAuditRetention = 90 * 24 * time.Hour

// Record is a small named JSON document the store keeps for other packages:
// policy changes from the slash command, standing rules, and the like.
// Version increases by one on each Put.
type Record struct {
	Kind      string          `json:"kind"`
	ID        string          `json:"id"`
	Data      json.RawMessage `json:"data"`
	Version   int64           `json:"version"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// NewRunID returns a random run id (16 hex characters).
func NewRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// CallID returns the opaque id of the i-th call of a run: runID + "." + i.
func CallID(runID string, i int) string {
	return runID + "." + strconv.Itoa(i)
}

// RunOf returns the run id of a call id made by CallID, or "" for any other
// string.
func RunOf(callID string) string {
	run, _, ok := strings.Cut(callID, ".")
	if !ok || run == "" {
		return ""
	}
	return run
}

// LeaseWatch is a subscription to the releases of one lease, by any
// process sharing the store. A store that serves several processes (Redis)
// offers one, so that a waiter learns of a release at once instead of
// polling; a release made while nobody is subscribed is not kept.
type LeaseWatch interface {
	// Released receives a value after each release announced since the
	// subscription (several releases may be merged into one value).
	Released() <-chan struct{}
	// Close ends the subscription.
	Close() error
}

// Inbound is a person's message, recorded in its conversation's inbox by
// AcceptMessage before its event is acknowledged, so that a turn that dies
// with its process is answered by another one.
type Inbound struct {
	// Seq numbers the messages of one conversation 1, 2, ...; set by
	// AcceptMessage.
	Seq int64 `json:"seq"`
	// EventID and MsgID de-duplicate: the same event delivered again has
	// the same EventID, and the two events of one message (app_mention and
	// message) the same MsgID. Empty ones are not checked.
	EventID string    `json:"event_id,omitempty"`
	MsgID   string    `json:"msg_id,omitempty"`
	User    string    `json:"user"`
	Channel string    `json:"channel"`
	Text    string    `json:"text"`
	At      time.Time `json:"at"`
}

// Acceptance says what AcceptMessage did with a message.
type Acceptance string

// The answers of AcceptMessage.
const (
	// Accepted: the message is in the inbox and the conversation in the
	// index of unanswered ones.
	Accepted Acceptance = "accepted"
	// Duplicate: its EventID or MsgID was accepted before; nothing changed.
	Duplicate Acceptance = "duplicate"
	// Unknown: a message that needed a known conversation arrived in one
	// with no record and no accepted message; nothing was recorded but
	// its EventID.
	Unknown Acceptance = "unknown"
)

// DedupeTTL is how long AcceptMessage remembers an EventID or MsgID.
const DedupeTTL = 24 * time.Hour

// ClusterBusy reports whether err is Redis Cluster's answer that a step
// was not made for now, and may be later: keys of its slot being moved to
// another node (TRYAGAIN, for keys of which some have moved already), or
// the cluster or a node not serving yet (CLUSTERDOWN, LOADING,
// MASTERDOWN). It knows an error reply of Redis by its RedisError method
// (go-redis's redis.Error).
func ClusterBusy(err error) bool {
	var reply interface {
		error
		RedisError()
	}
	if !errors.As(err, &reply) {
		return false
	}
	code, _, _ := strings.Cut(reply.Error(), " ")
	return code == "TRYAGAIN" || code == "CLUSTERDOWN" || code == "LOADING" || code == "MASTERDOWN"
}
