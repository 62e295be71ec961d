package storetest

import (
	"context"
	"time"

	"github.com/toolgate/toolgate/store"
)

// Store is the whole contract of a store implementation.
type Store interface {
	// SaveConversation writes the conversation record, replacing any other.
	// Conversations expire a while (days) after their last save.
	SaveConversation(ctx context.Context, c store.Conversation) error
	// LoadConversation returns store.ErrNotFound for an unknown key.
	LoadConversation(ctx context.Context, key string) (store.Conversation, error)

	// CreateRun saves a paused run and its calls (all Pending) in one
	// atomic step, and marks the conversation as paused on it. It returns
	// store.ErrRunExists if the run id is taken.
	//
	// The calls' ids must be store.CallID(r.ID, i) values, listed in
	// r.CallIDs in order (filled in when empty), and each call needs an
	// ExpiresAt. The store fills in a call's RunID, and its Conversation,
	// Requester and Channel from the run when empty, and sets r.ExpiresAt
	// to the latest ExpiresAt of the calls. Invalid input is an error that
	// changes nothing. A call with a RemindAt is listed by DueReminders
	// from then on (see ClaimReminder). The run and its calls are kept until some retention
	// time (days) after r.ExpiresAt.
	CreateRun(ctx context.Context, r store.Run, calls []store.Call) error
	// LoadRun returns the run and its calls in CallIDs order, or
	// store.ErrNotFound.
	LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error)
	// GetCall returns one call or store.ErrNotFound.
	GetCall(ctx context.Context, callID string) (store.Call, error)
	// PutCallNote keeps note, a small opaque document of another package
	// (the Slack edge keeps where a call's card is), with a call,
	// replacing the one it had. The note lives as long as the call: it
	// is gone with the call's run, with nothing to delete. ErrNotFound
	// for an unknown call, and nothing is written.
	PutCallNote(ctx context.Context, callID string, note []byte) error
	// CallNote returns the note kept with a call, nil if it has none;
	// ErrNotFound for an unknown call.
	CallNote(ctx context.Context, callID string) ([]byte, error)

	// Decide is one atomic compare-and-set of a call from Pending to a final
	// status, checked in this order: ErrNotFound (unknown call),
	// ErrAlreadyDecided (not Pending; the returned Call says who decided and
	// how), ErrFingerprintMismatch (fingerprint differs from the stored one;
	// "expire" and "cancel" pass "" and skip this check), ErrExpired (d.At is
	// at or after ExpiresAt and the kind is not "expire": a call past its
	// deadline is the expiry's, even before the expiry pass). Kind
	// "expire" sets Status Expired and is refused with ErrConflict before
	// ExpiresAt; "cancel" sets Cancelled; every other kind sets Decided.
	// The returned Call is the stored one after the change. complete is true
	// for exactly one decision of a run: the one that left no call Pending.
	// On a refusal other than ErrNotFound the returned Call is the stored,
	// unchanged one; a refusal changes nothing.
	Decide(ctx context.Context, callID, fingerprint string, d store.Decision) (c store.Call, complete bool, err error)
	// Approve counts one approval of a call that needs several (a
	// two-person rule), atomically like Decide: it is refused as Decide
	// refuses (ErrNotFound, ErrAlreadyDecided, ErrFingerprintMismatch
	// against the current Fingerprint, ErrExpired when a.At is at or after
	// ExpiresAt), and with ErrDuplicateApproval when a.Approver is already
	// among the Approvals (nothing changes; the returned Call is the
	// stored one). With edit set, the pending arguments are replaced
	// (Call.Edit = edit.Edit, Fingerprint = edit.Fingerprint) and the
	// count restarts with a alone; an edit.Edit.ExpiresAt before the
	// call's ExpiresAt moves it there, and RemindAt to
	// store.NextRemindAt of the call so edited, in the same step (the
	// reminder index lists it there). Otherwise a is appended to
	// Approvals.
	// Once Approvals holds need approvals the call is decided with d
	// exactly as Decide would (complete as there); before that it stays
	// Pending and complete is false. Of concurrent approvals each approver
	// is counted once and exactly one of those reaching need decides.
	Approve(ctx context.Context, callID, fingerprint string, a store.Approval, edit *store.Proposal, need int, d store.Decision) (c store.Call, complete bool, err error)
	audited
	// ClaimResume claims the single resume of a run whose calls are all
	// decided. It returns true to exactly one caller while the claim (held
	// for lease) is live; a claim whose lease ran out without FinishRun can
	// be claimed again (the claimer crashed). False if the run has a pending
	// call, is finished, or is claimed by someone else (a live claim is not
	// granted again, not even to its owner). store.ErrNotFound for an
	// unknown run.
	ClaimResume(ctx context.Context, runID, owner string, lease time.Duration) (bool, error)
	// RenewClaim extends the live resume claim of owner on a run by lease
	// from now, so a resume that runs longer than one lease keeps it while
	// a crashed one loses it soon. False (and nothing changes) if owner
	// does not hold a live claim: it ran out, someone else holds it, or the
	// run is finished. store.ErrNotFound for an unknown run.
	RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error)
	// ReleaseClaim ends owner's live resume claim on a run at once, so
	// that the run can be claimed again (and Stalled lists it) without
	// waiting for the claim to run out: a resume that stopped before it
	// finished the run (it lost the conversation's lease) hands the run
	// over. Nothing changes if owner holds no live claim on the run (it
	// ran out, someone else holds it, the run is finished or unknown).
	ReleaseClaim(ctx context.Context, runID, owner string) error
	// BeginExecution marks a decided call as executing; true the first time
	// only, so a tool runs at most once even if a resume is claimed again.
	// attempt names the sending: asked again with the same non-empty
	// attempt (its answer was lost: a reset connection, a time-out, a
	// context that ended while it was sent), it answers true while the
	// mark that attempt set stands, so the caller knows whether the call
	// is its own to run (or to take back). False for a call that is not
	// Decided (pending, expired, cancelled); store.ErrNotFound for an
	// unknown call.
	BeginExecution(ctx context.Context, callID, attempt string) (bool, error)
	// AbandonExecution takes back the mark that attempt set on a call
	// whose tool was not started after all (BeginExecution's attempt, or
	// the r.Nonce of the BeginResume, DecideBegin or ApproveBegin that
	// marked it), so that a resume claimed again judges it afresh. A call
	// with a saved result, not executing, or marked by another attempt
	// (or by none) is left as it is: a sending made again after the mark
	// was taken back, and another process marked the call to run it,
	// must not take that mark. store.ErrNotFound for an unknown call.
	AbandonExecution(ctx context.Context, callID, attempt string) error
	// SaveResult keeps what an executing call's tool returned, so a resume
	// claimed again after a crash reports it instead of running the tool
	// again, and appends e (if its Action is set; a zero At is the time
	// of the save), the execution's audit entry, to the audit log with
	// it: the entry is written exactly when the result is. Saving the result a call has already (a sending
	// made again) writes nothing and succeeds. It fails with ErrConflict
	// for a call that is not executing or has another result, and
	// ErrNotFound for an unknown one, and an error for an empty result
	// (a result is what the tool returned, encoded), writing nothing. A
	// store that appends the entry in a second step returns an error
	// wrapping ErrEffects if that step fails: the result stands.
	SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error
	// SkipExecution marks a decided call that will not run (its resume
	// found it should not) as started, and keeps result, why it did not
	// run, encoded, as its result, in one step: a resume claimed again
	// reports that, and never runs the call, as for a call that ran. A
	// store never holds the mark without the result. Finding the result
	// it is given saved already (a sending made again) writes nothing and
	// succeeds. ErrConflict for a call that is not Decided, or marked
	// already (by BeginExecution, BeginResume, or with another result);
	// ErrNotFound for an unknown one; an error for an empty result,
	// writing nothing.
	SkipExecution(ctx context.Context, callID string, result []byte) error
	// FinishRun ends a run after its resume: it is no longer listed
	// anywhere, and its records expire after the retention time. It also
	// clears the conversation's PausedRun if that still names the run.
	// Finishing a finished run changes nothing more (a store may make its
	// clean-up again); store.ErrNotFound for an unknown run.
	FinishRun(ctx context.Context, runID string) error

	// Pending lists pending calls matching f, oldest first (by CreatedAt,
	// then id): with f.Limit > 0 the oldest f.Limit of them. It reads an
	// index in that order and stops once it has f.Limit calls, so that a
	// bounded listing costs the same however many calls are pending.
	Pending(ctx context.Context, f store.Filter) ([]store.Call, error)
	// Due lists up to limit pending calls whose ExpiresAt is at or before now,
	// earliest first.
	Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error)
	// NextExpiry returns the earliest ExpiresAt of a pending call; the zero
	// time when none is pending. An expiry timer sleeps until then.
	NextExpiry(ctx context.Context) (time.Time, error)
	// DueReminders lists up to limit pending calls whose RemindAt is set
	// and at or before now, earliest RemindAt first (limit <= 0: all). It
	// reads an index of the calls with a reminder to send, not every
	// pending call; a call that left Pending (decided, expired,
	// cancelled, its run finished) is never listed.
	DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error)
	// ClaimReminder claims reminder n (n >= 1) of a call and moves its
	// RemindAt to next (zero: no more reminders; the call leaves the
	// index), atomically: true to exactly one of concurrent callers, and
	// only if the call is pending, has a RemindAt set and no reminder n or
	// later was claimed (Reminded < n; Reminded becomes n). False, and
	// nothing changes, otherwise. store.ErrNotFound for an unknown call.
	// A store that updates its index in a second step may return true
	// with an error when that step failed: the reminder is claimed (send
	// it) and readers repair the index.
	ClaimReminder(ctx context.Context, callID string, n int, next time.Time) (bool, error)
	// NextReminder returns the earliest RemindAt of a pending call; the
	// zero time when none has a reminder to send. A reminder timer sleeps
	// until then.
	NextReminder(ctx context.Context) (time.Time, error)
	// Stalled lists up to limit runs that have no pending call, are not
	// finished and have no live resume claim: resumes lost to a crash.
	Stalled(ctx context.Context, limit int) ([]string, error)

	// AcquireLease takes or renews the lease on key for owner; false if
	// someone else holds it. RenewLease extends owner's lease that has
	// not run out, and never takes a free one: false if the lease ran out
	// or is someone else's (whoever held it since may have done the work
	// it guarded). ReleaseLease frees it if owner holds it and does
	// nothing otherwise.
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, owner string) error

	// Audit appends an entry; AuditLog returns the newest limit entries,
	// newest first.
	Audit(ctx context.Context, e store.AuditEntry) error
	AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)

	// PutRecord stores a record (Version set to the stored one + 1, returned);
	// if expectVersion >= 0 and differs from the stored version (0 when
	// absent) it fails with store.ErrConflict. Records lists a kind's
	// records by id; DeleteRecord returns ErrNotFound when absent.
	PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error)
	Records(ctx context.Context, kind string) ([]store.Record, error)
	// RecordsOf lists several kinds at once (one round trip or
	// transaction), each kind's records as Records lists them; a kind
	// with none maps to an empty list.
	RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error)
	// VersionedRecords is RecordsOf with the version of the records (as
	// a Begun's RecordsVersion: zero from a store that keeps none), read
	// in the same step, never newer than the records listed.
	VersionedRecords(ctx context.Context, kinds ...string) (map[string][]store.Record, int64, error)
	DeleteRecord(ctx context.Context, kind, id string) error

	// SeenEvent records an event id for ttl; true if it was new (used to
	// drop redelivered or duplicate events across replicas).
	SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error)

	// AcceptMessage records a person's message in the conversation's inbox
	// before its event is acknowledged, in one atomic step with its
	// de-duplication: store.Duplicate if m.EventID or m.MsgID (each
	// checked when not empty, and remembered for store.DedupeTTL) was
	// accepted before in this conversation; store.Unknown, recording only
	// m.EventID, if requireKnown and the conversation has neither a record
	// (SaveConversation) nor an accepted message; otherwise
	// store.Accepted: m is appended with the next Seq of the conversation
	// (1 for the first; returned in the Inbound) and the conversation is
	// listed by Unanswered from m.At (an earlier listing keeps its time).
	// A Duplicate of a conversation whose inbox is not empty lists it
	// again if it was missing, so a crash between the two steps of a
	// store that needs two is repaired by the redelivery.
	AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error)
	// AcceptBegin is AcceptMessage and, when the message is Accepted,
	// BeginTurn(conversation, owner, ttl, kinds...) in the same atomic
	// step: the Begun is that of BeginTurn, the message in its Inbox. A
	// Duplicate or Unknown message takes no lease and reads nothing
	// (Begun is zero). A Begun that could not be read after the message
	// was recorded is zero too, with no error: the caller begins the turn
	// itself.
	AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error)
	// Inbox returns the conversation's recorded messages not yet answered
	// (AnswerInbox), in Seq order; none for an unknown conversation.
	Inbox(ctx context.Context, conversation string) ([]store.Inbound, error)
	// AnswerInbox removes the messages up to Seq upTo from the inbox (a
	// turn answered them and saved its result). Once the inbox is empty
	// the conversation is no longer listed by Unanswered; a message
	// accepted meanwhile keeps it listed. Answering what was answered
	// already does nothing.
	AnswerInbox(ctx context.Context, conversation string, upTo int64) error
	// MarkUnanswered lists the conversation in Unanswered from at (an
	// earlier listing keeps its time) whatever its inbox holds: work on it
	// is in progress (a resume) and must be taken over if its process
	// dies. AnswerInbox unlists it once the inbox is empty.
	MarkUnanswered(ctx context.Context, conversation string, at time.Time) error
	// Unanswered lists up to limit (0: all) conversations with a message
	// in the inbox accepted at or before the given time (the oldest
	// listing time counts), oldest first, leaving out the first offset of
	// them: a scan pages through a long listing with it.
	Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error)

	Turns

	// Ping checks the store is reachable.
	Ping(ctx context.Context) error
	Close() error
}
