// Package agent runs conversations between people, a chat model and tools,
// and pauses the tool calls that need a human until someone decides them.
// It knows nothing of Slack: whoever drives it passes messages in with Run,
// decisions with Decide and Cancel, and renders progress through a Reporter.
//
// # Turns
//
// Run takes a message and loops: it sends the history to the Model, and if
// the model answers in text the turn ends (Answered). Otherwise every tool
// call of the step is validated against its tool's schema, reduced to
// canonical arguments and a fingerprint (approvals.Fingerprint), and judged
// by the Policy, in the order the model made them:
//
//   - allow: the tool runs at once and its result goes back to the model;
//   - deny: nothing runs; the model reads the rule's reason (or a note
//     naming the rule when it gives none);
//   - ask: the call waits for a person. A tool marked Human (a question
//     for the people in the thread) always asks.
//
// A call to an unknown tool or with invalid arguments gets an error result
// worded for the model, which may try again. The loop goes on until the
// model answers, a step asks, or Config.MaxSteps model calls were made
// (StepLimit).
//
// # Pausing
//
// When at least one call of a step asks, the step pauses: the whole history,
// the results of the step's calls that were already settled and one
// store.Call per asked call are written to the Store as a run, the
// conversation is marked as paused on it, Reporter.Paused is told, and Run
// returns Paused with the pending calls. A tool with a Preview says first,
// within Config.PreviewTimeout, what each call would do; the preview (or why
// there is none) is stored with the call, so every card of it, also after a
// restart, shows the preview of exactly the stored arguments. Explain asks
// the model, offering no tools, why it wants a pending call, and changes
// nothing. Nothing is kept in memory, so any
// process sharing the store may decide the calls and resume the step, also
// after a restart. A message that arrives while the conversation is paused
// is queued (Waiting) and answered after the resume.
//
// # Decisions
//
// Decide records one person's decision on one call. It is refused, changing
// nothing, if the call is unknown, no longer pending (the error says who
// decided first), expired, if the decision's fingerprint is not the one of
// the stored arguments (the decider saw other arguments), if the decider is
// not an approver, or if the decision does not fit the call; see Decide for
// the errors. Recording is a compare-and-set in the store, so of any number
// of concurrent decisions on a call exactly one succeeds, and of all the
// decisions on a step's calls (expiry and cancellation included) exactly
// one reports Complete: the one that left nothing pending. Its caller calls
// Resume.
//
// A decision reads the call and the policy's records, checks the decider
// against them, then writes. DecideTaking skips the read for a call this
// process paused recently, where the store keeps a version of the records
// (one Redis node): it checks the decider against the call as paused and
// the records its turn read, and the store writes the decision only if
// those records are still at the version read with them (and the call is
// still pending, with these arguments, not expired, as always). Any
// refusal is decided again from the stored call, so a policy changed since
// the pause is applied, and every refusal is worded from what is stored.
//
// Nothing runs in Decide. When the step resumes, every call is settled in
// order and the model reads, per decision kind (approvals.Kind):
//
//   - Approve, Remember: the tool runs and the model reads its result.
//     Remember also stores a standing rule (approvals.StandingRule): calls
//     of the same tool in the same channel that would ask are allowed from
//     then on, within the decision's conditions and TTL.
//   - Edit: the tool runs with the edited arguments (checked against the
//     schema and the policy when decided), and the result starts with a
//     note saying the arguments were edited and the original call must not
//     be issued again.
//   - Reject: "not performed: user U rejected this call with the reason: R".
//   - Refuse (a plain deny): "not performed: user U denied this call. ...",
//     telling the model not to retry.
//   - Respond: the person's answer to a Human tool's question.
//   - Expire: "not performed: approval expired after D".
//
// Before an approved call runs, the policy judges it again: a call whose
// rule now denies it does not run. Each approved call is started at most
// once (marked by the resume's store BeginResume or DecideBegin, or
// BeginExecution; a mark whose call did not run is taken back with
// AbandonExecution when the resume stops before it; a call the resume
// found should not run is marked, or keeps its mark, with why saved as
// its result, in one store step (SkipExecution, SaveResult)), and
// its result is saved as soon as it returns, with the execution's audit
// entry (store SaveResult): if a resume crashed or
// lost its lease after starting a call, the next resume gives the model
// the saved result, or says its outcome is unknown (and saves that, with
// its entry), instead of running it again (a read-only or idempotent
// tool's call without a saved result runs again, and only that run is
// audited). A resume whose context ends before an approved call starts
// stops there, and the next resume runs the call.
//
// # Resuming
//
// Resume runs exactly once per step, whichever process calls it and however
// often: the store grants a single claim, and every other call returns Idle,
// as does a call made while some call of the step is still pending.
// The claimed resume settles the calls, gives the model their results in
// the order the model made the calls, and continues the turn, which may
// pause again. Then the run is finished and, unless the turn paused again,
// the messages queued meanwhile are answered.
//
// Cancel lets the requester stop a paused step: its pending calls are
// cancelled. On resume, the calls that did not run before the pause are
// dropped from the history (the calls allowed and run at once keep their
// results) and the model is not called for the step: the outcome is
// Stopped, unless messages were queued while the step waited, which are
// then answered.
//
// Sweep is meant to run periodically on every replica: it expires the calls
// whose time is up and resumes the steps left complete but never resumed
// (their resumer crashed, or the decider never called Resume). Expiry is a
// compare-and-set like any decision and resumes are claimed once, so
// replicas sweeping together do no harm. The caller may schedule each
// resume itself (the Slack app puts it on the conversation's queue). A
// resume finds a run whose conversation has moved on (it was resumed before
// but could not be marked finished) and only finishes it: a step never runs
// twice. Expire does the expiry part alone, sends the reminders that are
// due (Config.ReminderAfter, a rule's remind_after; found through the
// store's reminder index and each claimed once there, so replicas send it
// once and a pass reads nothing about calls already reminded), and returns
// the next deadline of a pending call or reminder, so that a caller can
// sleep until then and expire calls and remind approvers on time.
//
// A rule with min_approvals N > 1 is decided by the N-th distinct approval
// of the same arguments (Store.Approve counts them atomically); an Edit
// restarts the count, and a Deny or Reject decides at once.
//
// Work on one conversation holds its lease (see Config.LeaseTTL): one
// holder at a time, in this process and across processes. A turn waiting
// for the lease learns of its release at once: from this process directly,
// and from other processes through the store when it announces releases
// (Redis, by pub/sub); in case an announcement is missed it re-checks every
// LeaseTTL/3.
//
// A turn reads and writes the store in few, composite steps (Turns): it
// takes the lease and reads the conversation and its inbox in one
// (BeginTurn, or AcceptBegin together with the record of the message that
// starts it: see AcceptTaking), and records each result in one
// (CommitTurn): a step mark;
// a pause (the run, the conversation paused on it, the audit entries, the
// answered messages drained, the lease released); an answer (the
// conversation, the run a resume finishes, the audit entries, the drained
// messages, the lease). Audit entries are logged at once and stored with
// the next of these writes (an approved call's execution with its saved
// result: see SaveResult below), so an entry is in the audit log exactly
// when what it describes was recorded.
//
// # Crashes
//
// Nothing acknowledged is lost when a process dies. The edge records each
// person's message with Accept before it acknowledges the event (Run
// records a message itself when given one Accept did not record); a turn
// answers every recorded message not yet answered and drains them once it
// has saved its result. AcceptTaking records the message and takes the
// conversation's lease for its turn in one store step, and DecideTaking
// records a decision and claims the resume of the step it completes in
// one: the caller then runs that turn or resume at once (RunTaken,
// ResumeTaken) or gives back what it took (ReleaseTaken); if the process
// dies first, the lease and claim lapse and the work is taken over as any
// other. Before an allowed call whose tool is neither
// read-only nor idempotent (approvals.Hints) runs, the turn records its
// step; once such a call has returned, its result is recorded before
// anything else of the step starts (another call that adds no write, a
// pause's previews and cards), or when the step's calls are done. A
// shutdown that ends the turn as a call is being marked leaves it to the
// restart, which runs it. A resume claims
// its run for Config.LeaseTTL, renews the claim with the lease, and lists
// its conversation for takeover until it has saved its result.
//
// Unanswered lists the conversations whose recorded work is older than
// Config.TakeoverAfter; TakeOver tries each one's lease once, so it takes
// only work whose process died (its lease lapsed), and answers it: it runs
// the turn again from what was recorded, finishes a recorded step (a call
// that was running is reported to the model as of unknown outcome and not
// run again, unless its tool is read-only or idempotent), or resumes a
// decided run whose resumer died. A run whose claim is still held (its
// resumer died a moment ago) stays listed for the next try.
//
// A process that is alive but loses a conversation's lease or a run's
// resume claim (its renewal found it taken or run out, as under CPU
// starvation) stops the turn or resume at once, writes nothing more,
// releases the claim and returns ErrLeaseLost; the work is still listed,
// so TakeOver carries it on, in the process holding the conversation now
// or in any other once the lease is free.
//
// # Reporting
//
// The Reporter of a conversation (given to New as a function of the
// conversation key) hears, in order, what the agent is doing (Status), the
// answer as it streams (Delta) and when it is final (Answer), the calls a
// step waits on (Paused), and each paused call's news (Updated: decided,
// executed, or skipped with a note). The Slack app implements it. Its
// methods are called synchronously by the goroutine doing the work, so they
// must return quickly.
//
// # Concurrency
//
// An Agent is safe for concurrent use. Run and Resume hold a lease on the
// conversation in the store for as long as they work on it, renewed every
// third of Config.LeaseTTL, so turns of one conversation never overlap, not
// even across processes; a turn that finds the lease taken waits for it up
// to Config.LeaseWait and then fails with ErrLeaseTimeout. A lease left by a
// crashed process lapses after LeaseTTL. If the lease cannot be renewed for
// a whole LeaseTTL, or another process took it, the turn's context is
// cancelled and the turn fails with ErrLeaseLost rather than overwrite the
// other's work.
//
// A decision that runs a call is checked against the policy as it is then;
// if the policy cannot be read, nothing runs on a decision (the call stays
// pending, or, at resume, is reported not performed), while the policy
// file's denies still hold. A standing rule made by Remember is tied to the
// rule that asked (its id and content) and lasts Config.RememberTTL.
//
// Decisions are stamped with the agent's clock (Config.Now), never the
// caller's, so a decider's clock cannot reopen an expired call. Edited
// arguments are judged again: if they fall under another rule that asks,
// the decider must be one of its approvers too.
package agent
