package store

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Effects are what DecideAudited and ApproveAudited (and DecideBegin and
// ApproveBegin) write in the same atomic step as a decision, or a counted
// approval, that succeeds, and the condition that step is made on;
// nothing of them is written when it is refused or fails.
type Effects struct {
	// Condition, when its IfRecords is set, makes the step conditional on
	// what the decision was judged by.
	Condition
	// Audit, when its Action is set, is appended to the audit log as Audit
	// appends it (a zero At is the decision's time). ApproveAudited sets
	// its Outcome and Detail (see ApprovalAudit).
	Audit AuditEntry
	// Unanswered, when set, is the conversation listed as MarkUnanswered
	// lists it, at the decision's time, if the decision leaves no call of
	// its run pending: the resume is then work in progress that another
	// process takes over if this one dies before it answers.
	Unanswered string
	// Announce, if set, is published as ResumeBegin.Announce is when an
	// approval conditional on what it was judged by (Condition) is
	// counted without deciding the call, by ApproveAudited, and by
	// ApproveBegin when its ResumeBegin has none; a store that announces
	// nothing ignores it.
	Announce []byte
}

// Condition makes a decision or an approval conditional on what it was
// judged by: the policy's records of one version and, for an approval,
// the approvals the call held.
type Condition struct {
	// IfRecords, when not zero, makes the decision itself conditional:
	// it is refused with ErrStale, writing nothing, unless the records
	// are still at this version (a Begun's RecordsVersion, or the one
	// GetCallWith read), so that a decider checked against records read
	// earlier is checked against the records of the decision's time. It
	// is checked after the refusals of an unknown call (ErrNotFound) and
	// of one not pending (ErrAlreadyDecided, with the call as stored):
	// ErrStale, with a zero Call, refuses only a decision that could be
	// made. A store that keeps no version refuses every such decision.
	IfRecords int64
	// IfApprovers and IfEdited, with IfRecords or IfHeld, make a decision
	// or an approval (DecideAudited, DecideBegin, ApproveAudited,
	// ApproveBegin) conditional on the approvals it was judged with too:
	// it is refused with ErrStale, writing nothing and returning the call
	// as stored, unless the call holds the approvals of exactly
	// IfApprovers, in this order, and a pending edit exactly when
	// IfEdited is set. (An edit back to the arguments the call paused
	// with has the fingerprint they had, and needs what the edit's rule
	// needs.)
	IfApprovers []string
	IfEdited    bool
	// IfHeld makes the decision conditional on IfApprovers and IfEdited
	// without IfRecords: every store checks them, one that keeps no
	// version of the records (Redis Cluster) included.
	IfHeld bool
}

// HeldAsJudged reports whether c makes a decision conditional on the
// approvals and edit it was judged with (IfApprovers, IfEdited).
func (c Condition) HeldAsJudged() bool { return c.IfRecords != 0 || c.IfHeld }

// ErrEffects is wrapped by the error of a decision that was recorded but
// whose effects could not all be written (a store that writes them in a
// second step); the returned call and completeness are those of the
// recorded decision. SaveResult wraps it likewise when the result was
// saved but its audit entry not appended.
var ErrEffects = errors.New("recorded, but not all of its effects")

// Audit outcomes that ApproveAudited writes.
const (
	// OutcomeCounted: the approval was counted and the call still waits
	// for more.
	OutcomeCounted = "counted"
	// OutcomeRecorded: the decision was recorded.
	OutcomeRecorded = "recorded"
)

// ApprovalAudit is the audit entry ApproveAudited writes for e after an
// approval that left n of need approvals counted.
func ApprovalAudit(e AuditEntry, n, need int) AuditEntry {
	e.Outcome = OutcomeRecorded
	if n < need {
		e.Outcome = OutcomeCounted
	}
	e.Detail = fmt.Sprintf("%d of %d approvals", n, need)
	return e
}

// Dropped returns approvals without those of the approvers in drop (see
// ApproveAudited), in order.
func Dropped(approvals []Approval, drop []string) []Approval {
	if len(drop) == 0 {
		return approvals
	}
	return slices.DeleteFunc(slices.Clone(approvals), func(a Approval) bool { return slices.Contains(drop, a.Approver) })
}

// Counted returns c once approval a is counted toward it, as
// ApproveAudited counts it: with edit, the edit pending and the count
// restarted with a (its expiry brought forward when the edit's is
// earlier, and its next reminder set again by the new expiry, see
// NextRemindAt); without, a after the approvals kept (those of drop taken
// out).
func Counted(c Call, a Approval, drop []string, edit *Proposal) Call {
	if edit != nil {
		e := edit.Edit
		e.ExpiresAt = e.ExpiresAt.Truncate(time.Microsecond) // as a call's (see CreateRun)
		c.Edit, c.Fingerprint, c.Approvals = &e, edit.Fingerprint, []Approval{a}
		if !e.ExpiresAt.IsZero() && e.ExpiresAt.Before(c.ExpiresAt) {
			c.ExpiresAt = e.ExpiresAt
			c.RemindAt = NextRemindAt(c)
		}
		return c
	}
	c.Approvals = append(slices.Clone(Dropped(c.Approvals, drop)), a)
	return c
}

// Reminders returns when the approvers of c are reminded: once
// RemindAfter after it paused, and again when a quarter of its TTL is
// left, each only before it expires and the second only after the first;
// none when RemindAfter is not positive. Reminder n is the nth of them.
// The times are whole milliseconds, which every store keeps exactly, so a
// RemindAt read back is one of them.
func Reminders(c Call) []time.Time {
	if c.RemindAfter <= 0 {
		return nil
	}
	first := c.CreatedAt.Add(c.RemindAfter).Truncate(time.Millisecond)
	if !first.Before(c.ExpiresAt.Truncate(time.Millisecond)) {
		return nil // as it expires, or after: cut, it would come just before
	}
	out := []time.Time{first}
	if last := c.ExpiresAt.Add(-c.ExpiresAt.Sub(c.CreatedAt) / 4).Truncate(time.Millisecond); last.After(first) {
		out = append(out, last)
	}
	return out
}

// NextRemindAt is the RemindAt of c by its own times: the first of its
// Reminders after the Reminded claimed, or zero if none is left. A call
// with no RemindAt gets none: it has no reminder left to send, and an
// earlier expiry takes reminders away, never adds one.
func NextRemindAt(c Call) time.Time {
	times := Reminders(c)
	if c.RemindAt.IsZero() || c.Reminded >= len(times) {
		return time.Time{}
	}
	return times[c.Reminded]
}

// HoldsApprovals reports whether c holds the approvals of exactly
// approvers, in order, and a pending edit exactly when edited (see
// Condition.IfApprovers).
func HoldsApprovals(c Call, approvers []string, edited bool) bool {
	return (c.Edit != nil) == edited && slices.EqualFunc(c.Approvals, approvers, func(a Approval, id string) bool { return a.Approver == id })
}

// FirstToStart returns the index of the call that BeginResume marks as
// executing (see storetest.Store), or -1: FirstToRun's, if it is not
// executing yet.
func FirstToStart(calls []Call, start []string) int {
	i := FirstToRun(calls, start)
	if i >= 0 && calls[i].Executing {
		return -1
	}
	return i
}

// FirstToRun returns the index of the call a resume of calls runs first,
// marked as executing or not, or -1: unless one of calls is cancelled, the
// first that is decided with a decision whose Kind is in start.
func FirstToRun(calls []Call, start []string) int {
	if len(start) == 0 || slices.ContainsFunc(calls, func(c Call) bool { return c.Status == Cancelled }) {
		return -1
	}
	return slices.IndexFunc(calls, func(c Call) bool {
		return c.Status == Decided && c.Decision != nil && slices.Contains(start, c.Decision.Kind)
	})
}

// ResumeStart is what BeginResume found, and whether it took the resume.
type ResumeStart struct {
	// Run is the run (Finished set once FinishRun ended it).
	Run Run
	// Claimed: the resume claim, and the lease when one was asked for,
	// are the caller's now; only then are Calls and Conversation set.
	Claimed bool
	// Busy: another owner holds the lease; nothing was taken.
	Busy bool
	// Calls are the run's calls in CallIDs order.
	Calls []Call
	// Conversation is the run's conversation, if Found.
	Conversation Conversation
	Found        bool
	// Records are the records of the kinds asked for, by kind, read with
	// the rest when Claimed; nil if they could not be read.
	Records map[string][]Record
	// Started is the call that BeginResume marked as executing, as
	// BeginExecution does, when Claimed (empty: none); Calls show it as
	// it was before.
	Started string
	// PriorNonce and PriorStarted are, when Claimed, the Nonce of the
	// claim taken before this one and the call that claim marked (empty:
	// none, or not known): a process whose own attempt's answer was lost
	// tells from them whether a mark it finds is that attempt's, or
	// another process's since.
	PriorNonce, PriorStarted string
}

// ResumeBegin is what BeginResume takes (the conversation's lease, when
// Lease is set, and the run's resume claim, for Owner for TTL; Start and
// Kinds as there), and what DecideBegin takes to begin the resume of the
// step that the decision completes as BeginResume begins it.
type ResumeBegin struct {
	Conversation string
	Lease        string
	Owner        string
	TTL          time.Duration
	Start        []string
	Kinds        []string
	// Announce, if set, is published to the processes that follow pauses
	// (see Commit.Announce) when an approval conditional on the records
	// (Effects.IfRecords) is counted without deciding the call, in the
	// same step (ApproveBegin); a store that announces nothing ignores it.
	Announce []byte
	// Nonce, when set, names this attempt, so that it can be asked again
	// when its answer was lost (a reset connection, a time-out): a
	// BeginResume with the same Owner and Nonce and Again set that finds
	// the claim this attempt took still held answers as the attempt
	// would have, Claimed, with the call it marked in Started (and in
	// Calls as it was before the mark). Any other claim, the owner's own
	// included, is not given again: only the attempt that took it knows
	// that the call it marked has not started.
	Nonce string
	// Again asks for the claim of the attempt named by Nonce only: when
	// that attempt took none (it failed before, or another claim has
	// been taken since), nothing is taken.
	Again bool
}
