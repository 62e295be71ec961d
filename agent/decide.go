package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/store"
)

// ErrBadDecision is wrapped by decisions that do not fit the call: an empty
// reject reason, an answer to a tool that asks no question, an edit that is
// not valid arguments. Each such refusal is a *DetailError whose Detail
// tells the decider what is wrong (see Detail).
var ErrBadDecision = errors.New("invalid decision")

// ErrCountedMeanwhile is returned by an approval refused because other
// approvals of the call kept being counted while it was checked (see
// countTries): nothing was recorded.
var ErrCountedMeanwhile = errors.New("other approvals were counted while the approval was checked")

// badDecision is the refusal of a decision that does not fit the call,
// with the words that tell the decider why.
func badDecision(format string, args ...any) error {
	return &DetailError{Err: ErrBadDecision, Detail: fmt.Sprintf(format, args...)}
}

// System is the decider recorded for decisions the agent makes itself
// (expiry).
const System = "system"

// Decide records a person's decision on a paused call. Nothing runs here:
// approved calls execute when the step resumes. It is refused, changing
// nothing, with an error wrapping:
//   - approvals.ErrUnknownCall: no such call;
//   - approvals.ErrAlreadyDecided (as *approvals.RefusedError naming who
//     decided first): the call is not pending;
//   - approvals.ErrFingerprintMismatch: d.Fingerprint is not the one of the
//     stored arguments (the decider saw other arguments), but for an Edit
//     that is the pending edit itself (see below);
//   - approvals.ErrExpired: the call expired;
//   - approvals.ErrNotApprover: the decider may not decide this call (as a
//     *RuleError when the card names them but the rule the call, or its
//     edited arguments, fall under now does not);
//   - approvals.ErrPolicyDenied: edited arguments the policy denies;
//   - ErrBadDecision: the decision does not fit the call;
//   - approvals.ErrAlreadyApproved: on a call that needs several approvers,
//     the decider's approval of these arguments is already counted; for an
//     Edit, also when the edit pending is the decider's own into the same
//     arguments, their approval counted (the same edit sent again);
//   - anything else: the store failed, and the call is still pending.
//
// Of the concurrent decisions on one call exactly one succeeds. The one that
// leaves no call of its step pending has Complete set: its caller should
// then call Resume.
//
// A call under a rule with min_approvals N > 1 (on the card or in the
// policy now, whichever is more) is decided by an Approve only once N
// distinct approvers approved the arguments it shows; before that an
// Approve succeeds with the call still pending and its approval counted.
// An Edit replaces the pending arguments and restarts the count with the
// editor. Deny, Reject and Respond decide at once. An Edit into arguments
// that are the pending ones once canonical (the same fingerprint) changes
// nothing: it is the editor's Approve, authorized and counted as one.
func (a *Agent) Decide(ctx context.Context, d approvals.Decision) (DecideResult, error) {
	return a.decide(ctx, d, nil)
}

// DecideTaking is Decide that, for a decision that leaves nothing pending
// in a conversation that no turn of this process holds, also begins the
// step's resume in the same store step (the conversation's lease, the
// run's resume claim, the approved call marked as started). It returns a
// *Taken when it did: the caller must then run the resume at once with
// ResumeTaken (or ReleaseTaken), since nothing else in this process may
// work on the conversation meanwhile; otherwise the *Taken is nil and a
// Complete result is resumed with Resume as usual.
func (a *Agent) DecideTaking(ctx context.Context, d approvals.Decision) (DecideResult, *Taken, error) {
	var t *Taken
	res, err := a.decide(ctx, d, &t)
	return res, t, err
}

// decide is Decide and, with taken set, DecideTaking, which sets *taken.
func (a *Agent) decide(ctx context.Context, d approvals.Decision, taken **Taken) (DecideResult, error) {
	res, err := a.decideJudged(ctx, d, taken)
	if err != nil && d.Kind == approvals.Edit && res.Call.ID != "" {
		_, _, fp, cerr := a.check(res.Call.Tool, d.Args)
		res.EditUnchanged = cerr == nil && fp == res.Call.Fingerprint
	}
	return res, err
}

// decideJudged is decide, but for telling a refused Edit that changed
// nothing.
func (a *Agent) decideJudged(ctx context.Context, d approvals.Decision, taken **Taken) (DecideResult, error) {
	// The decision time is this process's clock, never the caller's: a
	// caller's clock must not reopen an expired call.
	d.At = a.cfg.Now()
	if !d.Kind.Valid() || d.Kind == approvals.Expire || d.Kind == approvals.Cancel {
		return DecideResult{}, badDecision("a decision of kind %q cannot be made by a person here", d.Kind)
	}
	if taken != nil {
		if pc, ok := a.paused.take(d.CallID); ok {
			res, err := a.decidePaused(ctx, d, pc, taken)
			if !errors.Is(err, errReadCall) {
				return res, err
			}
		}
	}
	judged, counted := 0, 0
	for {
		res, err := a.decideStored(ctx, d, taken)
		switch {
		case errors.Is(err, errCountChanged):
			// Another approval was counted meanwhile, judged by the
			// same records: this one is judged again with it, and the
			// policy did not change.
			if counted++; counted > countTries {
				return DecideResult{}, fmt.Errorf("decide %s: %d times: %w", d.CallID, countTries, ErrCountedMeanwhile)
			}
		case !errors.Is(err, errJudgeAgain):
			return res, err
		default:
			if judged++; judged == judgeTries {
				return DecideResult{}, fmt.Errorf("decide %s: the policy changed while the decision was checked, %d times: %w", d.CallID, judged, store.ErrStale)
			}
		}
	}
}

// judgeTries bounds how many times a decision is judged from the call
// and the records as stored when the records change before it is made;
// countTries how many times an approval is, when other approvals are
// counted before it (each one progress of another decider's).
const judgeTries, countTries = 3, 50

// errJudgeAgain is returned by decideStored when the store refused the
// decision, writing nothing, because the policy's records changed since
// they were read with the call; errCountChanged, which wraps it, when
// the records are the same but the call's approvals changed.
var (
	errJudgeAgain   = errors.New("judge the decision again")
	errCountChanged = fmt.Errorf("the call's approvals changed: %w", errJudgeAgain)
)

// decideStored decides d from the call as the store has it now and the
// policy's records read with it, on the condition that neither changed
// before the decision is made (store.Condition); errJudgeAgain if they
// did (a store that keeps no version of the records, a Redis Cluster,
// makes it unconditionally).
func (a *Agent) decideStored(ctx context.Context, d approvals.Decision, taken **Taken) (DecideResult, error) {
	c, recs, version, err := a.store.GetCallWith(ctx, d.CallID, a.policyKinds()...)
	if errors.Is(err, store.ErrNotFound) {
		return DecideResult{}, fmt.Errorf("decide %s: %w", d.CallID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return DecideResult{}, fmt.Errorf("decide %s: %w", d.CallID, err)
	}
	if c.Status != store.Pending {
		return DecideResult{Call: viewOf(c)}, refusedByOther(c)
	}
	if d.Fingerprint != c.Fingerprint {
		if a.ownEditCounted(c, d) {
			return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", d.CallID, approvals.ErrAlreadyApproved)
		}
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", d.CallID, approvals.ErrFingerprintMismatch)
	}
	if !d.At.Before(c.ExpiresAt) {
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", d.CallID, approvals.ErrExpired)
	}
	d = a.unchangedEdit(c, d)
	v, err := a.authorize(ctx, c, d, recs)
	if err != nil {
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", d.CallID, err)
	}
	sd, need, err := a.checkDecision(ctx, c, d, v, recs)
	if err != nil {
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", d.CallID, err)
	}
	if (need > 1 || c.Edit != nil) && (d.Kind == approvals.Approve || d.Kind == approvals.Edit) {
		// Counted; a call with a pending edit is always decided here,
		// where the approval that decides it runs the edit's arguments.
		return a.approve(ctx, c, d, sd, v, need, taken, version, nil)
	}
	return a.record(ctx, c, d.Fingerprint, sd, v, taken, version, false)
}

// unchangedEdit returns d as an Approve when it is an Edit of c whose
// arguments, once canonical, are the pending ones (those of c's
// fingerprint): such an edit changes nothing, so it is its decider's
// approval of the arguments, authorized and counted as an Approve is (four
// eyes, the rule that asks now), and neither restarts a count nor tells
// the model or the card that a person changed the arguments. Arguments
// that cannot be made canonical leave d an Edit, refused as one.
func (a *Agent) unchangedEdit(c store.Call, d approvals.Decision) approvals.Decision {
	if d.Kind != approvals.Edit || len(d.Args) == 0 {
		return d
	}
	if _, _, fp, err := a.check(c.Tool, d.Args); err != nil || fp != c.Fingerprint {
		return d
	}
	d.Kind, d.Args = approvals.Approve, nil
	return d
}

// ownEditCounted reports whether d, an Edit refused because c's
// fingerprint is no longer the one of the card d was made from, is the
// edit pending on c: made by d's decider, whose approval of it is
// counted, into the arguments of d once canonical. It is then that edit
// sent again (a form Slack delivered again, its first ack missed), which
// changes nothing: its decider is told their approval is counted.
func (a *Agent) ownEditCounted(c store.Call, d approvals.Decision) bool {
	if d.Kind != approvals.Edit || c.Edit == nil || c.Edit.Decider != d.Decider || len(d.Args) == 0 ||
		!slices.ContainsFunc(c.Approvals, func(x store.Approval) bool { return x.Approver == d.Decider }) {
		return false
	}
	_, _, fp, err := a.check(c.Tool, d.Args)
	if err != nil {
		return false
	}
	_, pending, err := approvals.Fingerprint(c.Edit.Args)
	return err == nil && fp == pending
}

// lostDecisionWait bounds how long a decision whose store step answered
// with no answer (a reset connection, a failover) asks the store again
// before the decider is told that it could not be recorded.
var lostDecisionWait = 10 * time.Second

// recoverDecision finds out, once the store answers again, whether the
// decision on c whose store step's answer was lost (the attempt rb names)
// was recorded, when asking again found no claim of that attempt: its
// step may have claimed the resume and marked the step's first call to
// run as started (see store.FirstToStart: the first decided with a kind
// that runs, which is not c when an earlier approval is waiting), and its
// claim lapsed before the store answered. This process never ran that
// call, so, holding a fresh claim of the run, it takes the mark back if
// the claim before its fresh one was that attempt's (not a resume of
// another process, which may have started the call since) and the call
// has no result, and releases the claim: the resume that follows runs the
// call. It returns
// the call as stored, whether its step is complete, and whether the
// decision was recorded (as mine tells from the call as stored); an error
// if the store could not tell.
func (a *Agent) recoverDecision(ctx context.Context, c store.Call, rb store.ResumeBegin, mine func(store.Call) bool) (got store.Call, complete, recorded bool, err error) {
	_, calls, err := a.store.LoadRun(ctx, c.RunID)
	if err != nil {
		return store.Call{}, false, false, err
	}
	i := slices.IndexFunc(calls, func(x store.Call) bool { return x.ID == c.ID })
	if i < 0 || !mine(calls[i]) {
		return store.Call{}, false, false, nil
	}
	got = calls[i]
	complete = !slices.ContainsFunc(calls, func(x store.Call) bool { return x.Status == store.Pending })
	if !complete {
		return got, false, true, nil // no resume was begun
	}
	// The step was completed by this decision, so no resume had begun
	// before it; one of another process may have since (see
	// takeBackLostMark).
	a.takeBackLostMark(ctx, c.RunID, c.Conversation, rb.Nonce)
	return got, true, true, nil
}

// takeBackLostMark takes back, holding a fresh claim of run runID, the
// mark of a call that the store step of the lost attempt named lost (whose
// answer never came, and whose claim lapsed before the store answered
// again) set as started, which this process never ran: only if the claim
// before the fresh one was that attempt's (not a resume of another
// process, which may have started the call since, its claim lapsed too in
// a crash) and the call has no result. It then releases the claim, so
// that a resume begun after it runs the call. It reports whether it took
// the claim (false: another process holds it, or the store failed).
func (a *Agent) takeBackLostMark(ctx context.Context, runID, conv, lost string) bool {
	owner := a.leases.newHolder()
	// It marks no call of its own (no Start): it runs none, and a failure
	// before its release then leaves no second mark to lapse.
	fresh, err := a.store.BeginResume(ctx, runID, store.ResumeBegin{Conversation: conv, Owner: owner,
		TTL: a.cfg.LeaseTTL, Kinds: a.policyKinds(), Nonce: newNonce()})
	if err != nil || !fresh.Claimed {
		return false // someone else resumes it
	}
	if mark := fresh.PriorStarted; fresh.PriorNonce == lost && lost != "" && mark != "" && unfinished(fresh.Calls, mark) {
		a.abandon(ctx, &startMark{call: mark, attempt: lost})
		a.log.Warn("a store step that began a resume was made but its answer lost, and its claim lapsed; the call it marked as started, which never ran, is marked as not started", "call", fresh.PriorStarted)
	}
	if err := a.store.ReleaseClaim(context.WithoutCancel(ctx), runID, owner); err != nil {
		a.log.Warn("release resume claim; it lapses within the lease TTL", "run", runID, "err", err)
	}
	return true
}

// unfinished reports whether the call id among calls is marked as
// executing and has no saved result.
func unfinished(calls []store.Call, id string) bool {
	i := slices.IndexFunc(calls, func(c store.Call) bool { return c.ID == id })
	return i >= 0 && calls[i].Executing && len(calls[i].Result) == 0
}

// errReadCall is returned by decidePaused when the decision must be made
// from the call as the store has it now; nothing was written.
var errReadCall = errors.New("decide from the stored call")

// decidePaused decides a call this process paused from the call as it
// paused it and the records its turn read (see pausedCalls), with no read
// of its own. Only a decision that all of them accept is made, on the
// condition that the records have not changed since (IfRecords), and, for
// an approval of a call that needs several, that the call holds the
// approvals remembered (IfApprovers; when only those changed, the
// approval is judged again, once, from the call as the store returned
// it); the store's decision checks the rest (the call still pending, with
// these arguments, not expired). Anything else, a refusal included,
// returns errReadCall, having written nothing: the caller then decides
// from the stored call, which also words any refusal from what is stored.
func (a *Agent) decidePaused(ctx context.Context, d approvals.Decision, pc pausedCall, taken **Taken) (DecideResult, error) {
	for again := false; ; again = true {
		c, recs := pc.call, pc.recs
		if c.Status != store.Pending || d.Fingerprint != c.Fingerprint || !d.At.Before(c.ExpiresAt) {
			return DecideResult{}, errReadCall
		}
		d = a.unchangedEdit(c, d)
		v, err := a.authorize(ctx, c, d, recs)
		if err != nil {
			return DecideResult{}, errReadCall
		}
		sd, need, err := a.checkDecision(ctx, c, d, v, recs)
		if err != nil {
			return DecideResult{}, errReadCall
		}
		if (need <= 1 && c.Edit == nil) || (d.Kind != approvals.Approve && d.Kind != approvals.Edit) {
			return a.record(ctx, c, d.Fingerprint, sd, v, taken, pc.version, true)
		}
		res, err := a.approve(ctx, c, d, sd, v, need, taken, pc.version, &pc)
		var changed *judgeAgain
		if !errors.As(err, &changed) {
			return res, err
		}
		if again {
			return DecideResult{}, errReadCall
		}
		pc.call = changed.call
	}
}

// approve counts one approval (or an edit, which restarts the count) of a
// call that needs need distinct approvers, and records the decision once
// the count is met: the one that runs the pending arguments, an edit's
// when the pending arguments are one. The approvals counted before are
// judged again, as the decider's is, under v, the policy as it is now: one
// it would refuse (four eyes added, an approver taken out of the rule or
// its group, out of the conversation) no longer counts, and the store
// drops it in the step that counts the new one.
func (a *Agent) approve(ctx context.Context, c store.Call, d approvals.Decision, sd store.Decision, v approvals.Verdict, need int, taken **Taken, version int64, pc *pausedCall) (DecideResult, error) {
	var stale []string
	if d.Kind == approvals.Approve {
		var err error
		if stale, err = a.staleApprovals(ctx, c, v, d.Decider); err != nil {
			return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", c.ID, err)
		}
	}
	ap := store.Approval{Approver: d.Decider, At: d.At}
	var edit *store.Proposal
	final := sd
	switch {
	case d.Kind == approvals.Edit:
		_, fp, err := approvals.Fingerprint(sd.Args)
		if err != nil {
			return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", c.ID, err)
		}
		// The pending card shows the edited arguments: so does its
		// preview.
		if tool, ok := a.tools.Lookup(c.Tool); ok {
			sd.Preview, sd.PreviewError = a.previewWithin(ctx, tool, sd.Args, min(a.cfg.PreviewTimeout, editPreviewTimeout))
		}
		sd.MinApprovals = need
		edit = &store.Proposal{Fingerprint: fp, Edit: sd}
	case c.Edit != nil:
		final = store.Decision{Kind: storedKind(approvals.Edit), Decider: c.Edit.Decider, At: d.At, Args: c.Edit.Args}
	}
	fp := d.Fingerprint
	if edit != nil {
		fp = edit.Fingerprint
	}
	fx := decisionEffects(c, d.Decider, storedKind(d.Kind), fp, d.At)
	fx.Condition = judgedBy(c, version)
	// Names the decision this approval may complete, as record does.
	final.Attempt = newNonce()
	// An approval that cannot meet the count begins no resume: it is
	// sent alone, unless it is judged from the remembered call, whose
	// conditions only ApproveBegin takes.
	kept := len(store.Dropped(c.Approvals, stale))
	if edit != nil {
		kept = 0 // an edit restarts the count
	}
	counted := kept+1 < need
	if edit != nil && counted {
		if next := store.Counted(c, ap, stale, edit); dueEarlier(next, c) {
			// An edit brought the deadline forward: the processes that
			// follow pauses learn of it, so that the call expires on time
			// should this one stop first.
			fx.Announce = a.announce(announcement{Due: dueOf([]store.Call{next})}, nil)
		}
	}
	var s sent
	if taken != nil && (pc != nil || !counted) {
		rb := a.resumeBegin(c, final.Attempt)
		if pc != nil && counted {
			a.announceCounted(&rb, store.Counted(c, ap, stale, edit), *pc)
		}
		if counted {
			rb.Kinds = nil // nothing to begin, so nothing to read
		}
		s = a.send(ctx, c, rb, !counted, approvedBy(ap, final.Attempt), func(rb store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
			return a.store.ApproveBegin(ctx, c.ID, d.Fingerprint, ap, stale, edit, need, final, fx, rb)
		}, func(ctx context.Context) error {
			_, _, err := a.store.ApproveAudited(ctx, c.ID, d.Fingerprint, ap, stale, edit, need, final, unconditional(fx))
			return err
		})
	}
	switch {
	case pc != nil && s.asked && errors.Is(s.err, store.ErrStale) && s.got.ID == c.ID:
		// The records are those judged by, the approvals not: judged
		// again from the call as stored.
		return DecideResult{}, &judgeAgain{call: s.got}
	case pc != nil && (!s.asked || refusedWithoutWrite(s.err)):
		return DecideResult{}, errReadCall
	case !s.asked:
		s.got, s.complete, s.err = a.sendUntilAnswered(ctx, func(ctx context.Context) (store.Call, bool, error) {
			return a.store.ApproveAudited(ctx, c.ID, d.Fingerprint, ap, stale, edit, need, final, fx)
		})
	}
	switch {
	case errors.Is(s.err, store.ErrStale) && s.got.ID == c.ID:
		return DecideResult{}, errCountChanged
	case errors.Is(s.err, store.ErrStale):
		return DecideResult{}, errJudgeAgain
	}
	held := a.held(s)
	defer a.releaseOnPanic(ctx, held)
	if err := a.decided(ctx, store.ApprovalAudit(fx.Audit, len(s.got.Approvals), need), s.err); err != nil {
		a.ReleaseTaken(ctx, held)
		return refused(c, s.got, err)
	}
	a.resumeLater(s, taken, held)
	u := CallUpdate{Call: viewOf(s.got), Phase: PhaseCounted}
	if s.got.Status != store.Pending {
		u.Phase, u.StepPending = PhaseDecided, !s.complete
	} else if pc != nil {
		// Counted: the next approval is judged from the call as it is
		// now, against the same records.
		a.paused.remember(s.got, pc.recs, pc.version, false)
	}
	a.reporter(s.got.Conversation).Updated(ctx, u)
	return DecideResult{Call: viewOf(s.got), Complete: s.complete}, nil
}

// judgedBy is the condition of a decision on c judged by the records of
// version (see store.Condition): the records and the call's approvals
// and edit must be as judged; the approvals and edit alone when the store
// keeps no version (version zero: Redis Cluster).
func judgedBy(c store.Call, version int64) store.Condition {
	cond := store.Condition{IfRecords: version, IfHeld: true, IfEdited: c.Edit != nil}
	for _, x := range c.Approvals {
		cond.IfApprovers = append(cond.IfApprovers, x.Approver)
	}
	return cond
}

// unconditional is fx without its condition: the effects of a decision
// found made, sent again (see followUp), whose condition held when it
// was made.
func unconditional(fx store.Effects) store.Effects {
	fx.Condition = store.Condition{}
	return fx
}

// announceCounted has rb, an approval's of a call judged from the call as
// remembered (pc) that cannot meet the count, tell the processes that
// follow pauses of next, the call once the approval is counted, when it
// is counted, so that they remember the call with this count, as this
// one does: the next approval, wherever it is clicked, is judged from it.
func (a *Agent) announceCounted(rb *store.ResumeBegin, next store.Call, pc pausedCall) {
	if an := rememberable([]store.Call{next}, pc.recs, pc.version); len(an.IDs) == 1 {
		rb.Announce = a.announce(an, pc.recs)
	}
}

// dueEarlier reports whether next, c once an approval is counted, has an
// expiry or a reminder earlier than c's.
func dueEarlier(next, c store.Call) bool {
	return next.ExpiresAt.Before(c.ExpiresAt) || !next.RemindAt.IsZero() && (c.RemindAt.IsZero() || next.RemindAt.Before(c.RemindAt))
}

// judgeAgain is returned by approve when an approval judged from a
// remembered call was refused, nothing written, because the call holds
// other approvals than remembered while the records are the same: the
// approval is judged again from call, the call as stored.
type judgeAgain struct{ call store.Call }

func (e *judgeAgain) Error() string { return "the call's approvals changed" }

// staleApprovals returns the approvers of c, other than decider, whose
// approvals the policy as it is now would refuse (see authorize; v is the
// verdict on the pending arguments): they may no longer decide the call.
// One that cannot be checked (a group or audience lookup that failed) is
// an error: nothing is recorded, and the decider may try again.
func (a *Agent) staleApprovals(ctx context.Context, c store.Call, v approvals.Verdict, decider string) ([]string, error) {
	var stale []string
	for _, ap := range c.Approvals {
		if ap.Approver == decider {
			continue
		}
		err := a.cardApprover(ctx, c, ap.Approver)
		if err == nil && v.Action == approvals.Ask {
			err = a.authorizeUnder(ctx, c, v, ap.Approver)
		}
		if lookupFailed(err) {
			return nil, fmt.Errorf("check that the approval of %s still counts: %w", ap.Approver, err)
		}
		if err != nil {
			a.log.Info("an approval counted before no longer counts", "call", c.ID, "approver", ap.Approver, "err", err)
			stale = append(stale, ap.Approver)
		}
	}
	return stale, nil
}

// lookupFailed reports whether an authorization error is a lookup that
// failed (a user group's members, a channel's) rather than a refusal: it
// wraps the lookup's error beside approvals.ErrNotApprover.
func lookupFailed(err error) bool {
	for err != nil {
		if m, ok := err.(interface{ Unwrap() []error }); ok {
			return len(m.Unwrap()) > 1
		}
		err = errors.Unwrap(err)
	}
	return false
}

// authorize checks that the decider may decide c: under the approvers the
// card showed, as someone who can see the conversation when the rule names
// no approvers (or a pending edit's rule names none), and, for a decision
// that runs the call or gives the model someone's words (a rejection's
// reason, an answer), under the policy as it is now (an admin may have
// tightened it since the card was posted): one that runs the call is
// refused when the policy now denies it, and each when the rule that asks
// now leaves the decider out. A plain deny stays with the card's approvers
// (those in the conversation, when a pending edit needs them there: see
// cardApprover), and an edit is judged on its new arguments (checkEdit).
// For a decision that runs the call it returns the current verdict. The
// policy judges by recs, read with the call.
func (a *Agent) authorize(ctx context.Context, c store.Call, d approvals.Decision, recs map[string][]store.Record) (approvals.Verdict, error) {
	if err := a.cardApprover(ctx, c, d.Decider); err != nil {
		return approvals.Verdict{}, err
	}
	switch d.Kind {
	case approvals.Edit:
		return approvals.Verdict{}, nil // judged on its new arguments in checkEdit
	case approvals.Refuse:
		// Saying no stays with the card's approvers (of those who can
		// see the conversation, when a pending edit needs them in it).
		return approvals.Verdict{}, nil
	}
	runs := d.Kind == approvals.Approve || d.Kind == approvals.Remember
	// A tool not registered now (its MCP server not connected yet, its
	// list changed) is settled as "no longer available" at resume if it
	// is still missing then; the decision is judged all the same, with
	// no hints, so a policy tightened since the card holds meanwhile.
	var hints approvals.Hints
	human := false
	if tool, ok := a.tools.Lookup(c.Tool); ok {
		hints, human = tool.Annotations, tool.Human
	}
	args := c.Args
	if c.Edit != nil {
		args = c.Edit.Args // the pending arguments are an edit's
	}
	v, err := a.evaluateStrict(ctx, approvals.Input{Tool: c.Tool, Args: args, User: c.Requester, Requesters: c.Requesters, Channel: c.Channel, Hints: hints, Question: human}, recs)
	if err != nil {
		return v, err
	}
	switch v.Action {
	case approvals.Deny:
		if runs {
			return v, deniedBy(v)
		}
	case approvals.Ask:
		if err := a.authorizeUnder(ctx, c, v, d.Decider); err != nil {
			return v, ruleRefusal(v, err, false)
		}
	}
	if !runs {
		return approvals.Verdict{}, nil
	}
	return v, nil
}

// cardApprover checks that who may decide c under the approvers its card
// shows, and, when the card names none, or its pending edit fell under a
// rule that names none (see store.Decision.NeedsAudience), as someone who
// can see its conversation: the card's approvers outside it neither
// decide the edited call, a Deny or Reject of it included, nor see it,
// even once the rule the edit fell under is changed.
func (a *Agent) cardApprover(ctx context.Context, c store.Call, who string) error {
	if err := approvals.Authorize(ctx, approvals.Approvable{Approvers: c.Approvers, FourEyes: c.FourEyes, Requester: c.Requester, Requesters: c.Requesters}, who, a.cfg.Groups); err != nil {
		return err
	}
	if len(c.Approvers) == 0 || c.NeedsAudience || c.Edit != nil && c.Edit.NeedsAudience {
		return a.inAudience(ctx, c, who)
	}
	return nil
}

// authorizeUnder checks that decider may decide c under v, a verdict that
// asks, after authorize's checks against the card: as one of v's
// approvers, and, when v lets anyone in the conversation decide but the
// card named approvers, as someone who can see the conversation too.
func (a *Agent) authorizeUnder(ctx context.Context, c store.Call, v approvals.Verdict, decider string) error {
	if err := approvals.Authorize(ctx, approvals.Approvable{Approvers: v.Approvers, FourEyes: v.FourEyes, Requester: c.Requester, Requesters: c.Requesters}, decider, a.cfg.Groups); err != nil {
		return err
	}
	if (len(v.Approvers) == 0 || v.NeedsAudience) && len(c.Approvers) > 0 {
		return a.inAudience(ctx, c, decider)
	}
	return nil
}

// inAudience checks that decider may decide c as someone who can see its
// conversation now: the requester too, who may have left the channel, or
// be a guest of another organisation (whom the Slack app's audience never
// lets decide), since asking grants no right to decide.
func (a *Agent) inAudience(ctx context.Context, c store.Call, decider string) error {
	if a.cfg.Audience == nil {
		return nil
	}
	ok, err := a.cfg.Audience.CanSee(ctx, c.Channel, decider)
	if err != nil {
		return fmt.Errorf("%w (%w): could not check that you can see the conversation: %w", approvals.ErrNotApprover, approvals.ErrUnverified, err)
	}
	if !ok {
		return fmt.Errorf("%w: only people in the conversation may decide this call", approvals.ErrNotApprover)
	}
	return nil
}

// DetailError is a refused decision with the words that explain it to the
// decider (the policy's reason, what is wrong with edited arguments). Err
// is the sentinel to test with errors.Is.
type DetailError struct {
	Err    error
	Detail string
	// Problem, when set, is an evaluation's error that Detail refers to;
	// it may quote the call's arguments (see approvals.Verdict.Problem).
	Problem string
}

func (e *DetailError) Error() string {
	if e.Problem != "" {
		return e.Err.Error() + ": " + e.Detail + " (" + e.Problem + ")"
	}
	return e.Err.Error() + ": " + e.Detail
}
func (e *DetailError) Unwrap() error { return e.Err }

// Detail returns the words that explain a refused decision to the
// decider: those of a *DetailError in err's chain or, for a refusal that
// carries none, general words for its kind; never err's text, which names
// the call and the steps that refused it.
func Detail(err error) string {
	var d *DetailError
	if errors.As(err, &d) {
		return d.Detail
	}
	switch {
	case errors.Is(err, approvals.ErrPolicyDenied):
		return "no reason was given"
	case errors.Is(err, approvals.ErrInvalidArgs):
		return "these arguments are not valid for this tool"
	}
	return "this decision does not fit the call"
}

// RuleError is the refusal (wrapping approvals.ErrNotApprover) of a
// decider whom the card lets decide but the rule that asks for the call
// now leaves out: the rule its edited arguments fall under (Edit), or one
// an admin added or changed since the card was posted. It names the rule
// and who it lets approve.
type RuleError struct {
	// Err is the refusal under the rule; it wraps approvals.ErrNotApprover.
	Err    error
	RuleID string
	// Approvers are the rule's; none leaves the call to the people who
	// can see its conversation.
	Approvers []string
	// FourEyes is set when the rule keeps the call's requesters from
	// approving it.
	FourEyes bool
	// Edit is set when the rule is the one of edited arguments.
	Edit bool
}

func (e *RuleError) Error() string {
	what := "the call now falls"
	if e.Edit {
		what = "the edited call falls"
	}
	return what + " under rule " + e.RuleID + ": " + e.Err.Error()
}
func (e *RuleError) Unwrap() error { return e.Err }

// ruleRefusal is the refusal err of a decider under v, the verdict of a
// rule that asks (for edited arguments when edit is set).
func ruleRefusal(v approvals.Verdict, err error, edit bool) error {
	return &RuleError{Err: err, RuleID: v.RuleID, Approvers: slices.Clone(v.Approvers), FourEyes: v.FourEyes, Edit: edit}
}

// Problem returns the evaluation's error carried by a *DetailError in
// err's chain, or "".
func Problem(err error) string {
	var d *DetailError
	if errors.As(err, &d) {
		return d.Problem
	}
	return ""
}

// deniedBy is the error for a call the policy denies.
func deniedBy(v approvals.Verdict) error {
	return &DetailError{Err: approvals.ErrPolicyDenied, Detail: v.Words(), Problem: v.Problem}
}

// checkDecision validates a decision against the call and returns what is
// stored, and how many distinct approvers the arguments it would run need
// (those of the card, of a pending edit when it was made, or of the rule
// that asks now, whichever is most: an edit cannot take a call out from
// under a two-person rule, nor can a rule removed after it); the policy
// judges an edit by recs, read with the call.
func (a *Agent) checkDecision(ctx context.Context, c store.Call, d approvals.Decision, v approvals.Verdict, recs map[string][]store.Record) (store.Decision, int, error) {
	sd := store.Decision{Kind: storedKind(d.Kind), Decider: d.Decider, At: d.At}
	need := max(c.MinApprovals, v.MinApprovals)
	if c.Edit != nil {
		need = max(need, c.Edit.MinApprovals)
	}
	tool, known := a.tools.Lookup(c.Tool)
	human := known && tool.Human
	switch d.Kind {
	case approvals.Reject:
		sd.Reason = strings.TrimSpace(d.Reason)
		if sd.Reason == "" {
			return sd, need, badDecision("a rejection needs a reason: say why the call should not run")
		}
	case approvals.Respond:
		if !human {
			return sd, need, badDecision("%s asks no question to answer", c.Tool)
		}
		sd.Answer = strings.TrimSpace(d.Answer)
		if sd.Answer == "" {
			return sd, need, badDecision("the answer is empty: write the answer to the question")
		}
	case approvals.Approve, approvals.Remember, approvals.Edit:
		if human {
			return sd, need, badDecision("%s is a question; answer it instead", c.Tool)
		}
		if d.Kind == approvals.Remember {
			if !known {
				// Judged with no annotations, the call would be relaxed
				// from now on as a tool that says nothing.
				return sd, need, badDecision("tool %s is not available now, so it cannot be allowed from now on; approve it instead", c.Tool)
			}
			if c.Edit != nil {
				return sd, need, badDecision("this call's arguments were edited, so it cannot be allowed from now on; approve it instead")
			}
			// Four eyes as the card shows it, or as the rule asks now (an
			// admin added it since): no standing rule relaxes it.
			if c.FourEyes || v.Action == approvals.Ask && v.FourEyes {
				return sd, need, badDecision("a four-eyes call cannot be allowed from now on; approve it instead")
			}
			if need > 1 {
				return sd, need, badDecision("this call needs %d approvers, so it cannot be allowed from now on; approve it instead", need)
			}
			switch {
			case v.Action == approvals.Allow && strings.HasPrefix(v.RuleID, approvals.StandingPrefix):
				// Allowed from now on already, by a standing rule made
				// since the card was posted (an Always allow on another
				// card of the tool): the call is approved, and no second
				// rule is saved.
				sd.Kind = storedKind(approvals.Approve)
			case v.Action != approvals.Ask || v.FailClosed || v.Combined:
				return sd, need, badDecision("this call is not asked under a rule that can be relaxed now; approve it instead")
			default:
				sd.Conditions, sd.TTL, sd.Exact = d.Conditions, d.TTL, d.Exact
			}
		}
		if d.Kind == approvals.Edit {
			args, ev, err := a.checkEdit(ctx, c, d, recs)
			if err != nil {
				return sd, need, err
			}
			sd.Args = args
			if ev.Action == approvals.Ask {
				need = max(need, ev.MinApprovals)
				sd.Approvers = ev.Approvers
				// A rule that names no approvers leaves the edited
				// arguments to people who can see the conversation,
				// whoever the card names (see authorizeUnder); the edit
				// says so, as its empty Approvers would also be those
				// of arguments the policy allows.
				sd.NeedsAudience = len(ev.Approvers) == 0 || ev.NeedsAudience
				// Edited arguments that wait for approvals wait no
				// longer than their rule lets a call wait.
				if exp := d.At.Add(a.askTTL(ev)); exp.Before(c.ExpiresAt) {
					sd.ExpiresAt = exp
				}
			}
			if n := a.othersWhoCanApprove(ctx, c, ev, d.Decider, need-1); n >= 0 && n < need-1 {
				why := fmt.Sprintf("the card's approvers and those of rule %s have too few in common", ev.RuleID)
				switch {
				case len(c.Approvers) == 0 || c.NeedsAudience:
					why = fmt.Sprintf("the card leaves the call to people in the conversation, and too few of rule %s's approvers are in it", ev.RuleID)
				case editNeedsAudience(c, ev):
					why = fmt.Sprintf("rule %s leaves the edited call to people in the conversation, and too few of the card's approvers are in it", ev.RuleID)
				}
				return sd, need, badDecision("the edited call needs %d approvals, and besides you only %d person(s) may give one: %s; edit it otherwise, or ask an admin", need, n, why)
			}
		}
	}
	return sd, need, nil
}

// othersWhoCanApprove counts the people other than editor who could
// approve c once edited into a call judged ev, up to enough (it looks for
// no more): approvals after an edit are checked against the card's
// approvers and the rule that asks now, four eyes of either keeping the
// requesters out, and, when either names no approvers, against who can
// see the conversation (see cardApprover and authorizeUnder), so that an
// approver outside it is not counted. It returns -1 when that cannot be
// told (a user group, anyone who can see the conversation, or a
// membership lookup that failed): the edit is then taken, each approval
// after it being checked as it comes.
func (a *Agent) othersWhoCanApprove(ctx context.Context, c store.Call, ev approvals.Verdict, editor string, enough int) int {
	if slices.ContainsFunc(c.Approvers, approvals.IsGroup) || ev.Action == approvals.Ask && slices.ContainsFunc(ev.Approvers, approvals.IsGroup) {
		return -1
	}
	users := c.Approvers
	if ev.Action == approvals.Ask && len(ev.Approvers) > 0 {
		if len(users) == 0 {
			users = ev.Approvers
		} else {
			users = slices.DeleteFunc(slices.Clone(users), func(u string) bool { return !slices.Contains(ev.Approvers, u) })
		}
	}
	if len(users) == 0 && (len(c.Approvers) > 0 || len(ev.Approvers) > 0) {
		return 0 // the two name no one in common
	}
	fourEyes := c.FourEyes || (ev.Action == approvals.Ask && ev.FourEyes)
	eligible, known := approvals.Eligible(users, fourEyes, append([]string{c.Requester}, c.Requesters...)...)
	if !known {
		return -1
	}
	others := slices.DeleteFunc(eligible, func(u string) bool { return u == editor })
	if !editNeedsAudience(c, ev) {
		return len(others)
	}
	// The editor was looked up as a decider is (see checkEdit and
	// authorize), so the conversation's members are at hand at the edge;
	// the others are looked up only until enough are found.
	n := 0
	for _, u := range others {
		if n >= enough {
			break
		}
		err := a.inAudience(ctx, c, u)
		if lookupFailed(err) {
			return -1
		}
		if err == nil {
			n++
		}
	}
	return n
}

// editNeedsAudience reports whether the approvals after an edit of c into
// a call judged ev must come from people who can see the conversation:
// the card's rule names no approvers (see cardApprover), or the rule that
// asks now names none (see authorizeUnder).
func editNeedsAudience(c store.Call, ev approvals.Verdict) bool {
	return len(c.Approvers) == 0 || c.NeedsAudience || ev.Action == approvals.Ask && (len(ev.Approvers) == 0 || ev.NeedsAudience)
}

// checkEdit validates edited arguments against the tool's schema and
// re-judges them: an edit cannot turn a call into one the policy denies,
// and if the edited call falls under another rule that asks, the decider
// must be an approver under that rule too. It returns the canonical
// arguments and the policy's verdict on them.
func (a *Agent) checkEdit(ctx context.Context, c store.Call, d approvals.Decision, recs map[string][]store.Record) (json.RawMessage, approvals.Verdict, error) {
	args := d.Args
	if len(args) == 0 {
		return nil, approvals.Verdict{}, badDecision("an edit needs arguments")
	}
	tool, canonical, _, err := a.check(c.Tool, args)
	if err != nil {
		return nil, approvals.Verdict{}, &DetailError{Err: approvals.ErrInvalidArgs, Detail: personText(err)}
	}
	if !a.shownInFull(tool, canonical) {
		return nil, approvals.Verdict{}, &DetailError{Err: approvals.ErrInvalidArgs, Detail: "the edited arguments are too long to be shown in full to the people who decide on them"}
	}
	v, err := a.evaluateStrict(ctx, approvals.Input{Tool: c.Tool, Args: canonical, User: c.Requester, Requesters: c.Requesters, Channel: c.Channel, Hints: tool.Annotations, Question: tool.Human}, recs)
	if err != nil {
		return nil, v, err
	}
	if v.Action == approvals.Deny {
		return nil, v, deniedBy(v)
	}
	if v.Action == approvals.Ask {
		if err := a.authorizeUnder(ctx, c, v, d.Decider); err != nil {
			return nil, v, ruleRefusal(v, err, true)
		}
	}
	return canonical, v, nil
}

// refused is what Decide returns when the store refused or failed the
// decision on c; got is the call as the store has it.
func refused(c, got store.Call, err error) (DecideResult, error) {
	switch {
	case errors.Is(err, store.ErrDuplicateApproval):
		return DecideResult{Call: viewOf(got)}, fmt.Errorf("decide %s: %w", c.ID, approvals.ErrAlreadyApproved)
	case errors.Is(err, store.ErrAlreadyDecided):
		return DecideResult{Call: viewOf(got)}, refusedByOther(got)
	case errors.Is(err, store.ErrFingerprintMismatch):
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", c.ID, approvals.ErrFingerprintMismatch)
	case errors.Is(err, store.ErrExpired):
		return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", c.ID, approvals.ErrExpired)
	case errors.Is(err, store.ErrNotFound):
		return DecideResult{}, fmt.Errorf("decide %s: %w", c.ID, approvals.ErrUnknownCall)
	}
	return DecideResult{Call: viewOf(c)}, fmt.Errorf("decide %s: %w", c.ID, err)
}

// record writes a checked decision and reports it. With taken set, the
// decision that completes its step also begins the step's resume when no
// turn of this process holds the conversation (see DecideTaking). It is
// conditional on the records of version (none when zero), judged by:
// errJudgeAgain when the store refused it because they changed. A
// decision on the call as remembered (see decidePaused) is made only when
// it can begin its resume: errReadCall when it was not sent or the store
// refused it without a write.
func (a *Agent) record(ctx context.Context, c store.Call, fp string, sd store.Decision, v approvals.Verdict, taken **Taken, version int64, remembered bool) (DecideResult, error) {
	// The entry names the arguments decided: an edit's, which run.
	audited := c.Fingerprint
	if kindOf(&sd) == approvals.Edit && len(sd.Args) > 0 {
		if _, efp, err := approvals.Fingerprint(sd.Args); err == nil {
			audited = efp
		}
	}
	fx := decisionEffects(c, sd.Decider, sd.Kind, audited, sd.At)
	fx.Audit.Detail = sd.Reason
	if kindOf(&sd) != approvals.Refuse {
		// A plain deny is judged by the card's approvers, never by the
		// records (see authorize): a change of theirs does not hold it.
		// Any other is judged by the call's approvals and edit too: an
		// edit away and back to the arguments it paused with keeps their
		// fingerprint, and may need more approvers than judged.
		fx.Condition = judgedBy(c, version)
	}
	// Names this sending, for a store whose client sends it again after
	// a lost reply (see store.Decision.Attempt), and the resume it begins.
	sd.Attempt = newNonce()
	resend := func(ctx context.Context) error {
		_, _, err := a.store.DecideAudited(ctx, c.ID, fp, sd, unconditional(fx))
		if kindOf(&sd) == approvals.Remember {
			// Found made after its answer was lost: its standing rule,
			// which only a confirmed decision saves below, is saved
			// here (once: see remember).
			a.remember(ctx, c, sd, v)
		}
		return err
	}
	var s sent
	if taken != nil {
		s = a.send(ctx, c, a.resumeBegin(c, sd.Attempt), true, decidedBy(sd.Attempt), func(rb store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
			return a.store.DecideBegin(ctx, c.ID, fp, sd, fx, rb)
		}, resend)
	}
	switch {
	case remembered && (!s.asked || refusedWithoutWrite(s.err)):
		// Not sent (a turn of this process holds the conversation), or
		// refused: decided again from the stored call.
		return DecideResult{}, errReadCall
	case !s.asked:
		s.got, s.complete, s.err = a.sendUntilAnswered(ctx, func(ctx context.Context) (store.Call, bool, error) {
			return a.store.DecideAudited(ctx, c.ID, fp, sd, fx)
		})
	}
	switch {
	case errors.Is(s.err, store.ErrStale) && s.got.ID == c.ID:
		// The records are those judged by, the call's approvals or edit
		// not (others' approvals counted meanwhile): judged again from
		// the call as stored, the policy unchanged.
		return DecideResult{}, errCountChanged
	case errors.Is(s.err, store.ErrStale):
		return DecideResult{}, errJudgeAgain
	}
	held := a.held(s)
	defer a.releaseOnPanic(ctx, held)
	if err := a.decided(ctx, fx.Audit, s.err); err != nil {
		a.ReleaseTaken(ctx, held)
		return refused(c, s.got, err)
	}
	remembered, unaudited := true, error(nil)
	if kindOf(&sd) == approvals.Remember {
		remembered, unaudited = a.remember(ctx, s.got, sd, v)
	}
	a.resumeLater(s, taken, held)
	u := CallUpdate{Call: viewOf(s.got), Phase: PhaseDecided, StepPending: !s.complete}
	if !kindOf(&sd).Runs() {
		u.Phase = PhaseSkipped
	}
	a.reporter(s.got.Conversation).Updated(ctx, u)
	return DecideResult{Call: viewOf(s.got), Complete: s.complete, Unremembered: !remembered, Unaudited: unaudited}, nil
}

// sendUntilAnswered makes step, the store step of a decision or approval
// that begins no resume, and, while its answer is lost to a transport's
// failure (see transportFailed; a failure of no known kind is told to the
// decider at once, as nothing hangs on it here), makes it again, naming the same attempt, until the store answers or
// lostDecisionWait passes: the store answers a sending it made before as
// it answered that one (see store.Decision.Attempt), so the decider
// learns whether it was recorded, and a store that writes a decision's
// effects in a step after its own (Redis Cluster) writes them then. Past
// the wait the last error stands: the decider is told it failed, and a
// decision that was made all the same refuses their next try as theirs.
func (a *Agent) sendUntilAnswered(ctx context.Context, step func(context.Context) (store.Call, bool, error)) (store.Call, bool, error) {
	got, complete, err := step(ctx)
	deadline := time.Now().Add(lostDecisionWait)
	for wait := 50 * time.Millisecond; err != nil && !storeAnswered(err) && transportFailed(err) && ctx.Err() == nil && time.Now().Add(wait).Before(deadline); wait = min(2*wait, 2*time.Second) {
		if ctxtime.Sleep(ctx, wait) != nil {
			break
		}
		first := err
		got, complete, err = step(ctx)
		a.log.Warn("a decision's store step whose answer was lost was sent again", "err", first, "again_err", err)
	}
	return got, complete, err
}

// sent is what the store step of a decision or approval answered.
type sent struct {
	got      store.Call
	complete bool
	rs       claimed
	// asked is set when the step was sent (see send).
	asked bool
	err   error
}

// resumeBegin is what a decision (its attempt named nonce) on c takes to
// begin the resume of the step it completes; send names its holder.
func (a *Agent) resumeBegin(c store.Call, nonce string) store.ResumeBegin {
	return store.ResumeBegin{Conversation: c.Conversation, Lease: store.TurnLease(c.Conversation),
		TTL: a.cfg.LeaseTTL, Start: startKinds, Kinds: a.policyKinds(), Nonce: nonce}
}

// send writes a checked decision or approval on c with step, which also
// begins the resume of the step it completes as rb asks (DecideBegin,
// ApproveBegin). With begins, the step may complete, so it is sent only
// if no turn of this process holds the conversation (otherwise nothing
// is sent: asked is false); an approval that cannot meet the count, and
// so begins nothing, is sent whoever holds it. A step whose answer was
// lost is asked again until the store answers (see lostDecisionWait),
// and found recorded when mine holds for the call as stored (see
// recoverDecision), or by the claim it took; then resend sends it again,
// for its effects (see followUp).
func (a *Agent) send(ctx context.Context, c store.Call, rb store.ResumeBegin, begins bool, mine func(store.Call) bool, step func(store.ResumeBegin) (store.Call, bool, store.ResumeStart, error), resend func(context.Context) error) sent {
	var s sent
	run := func(holder string) (bool, error) {
		rb.Owner = holder
		s.asked = true
		s.rs.at, s.rs.owner, s.rs.nonce = time.Now(), holder, rb.Nonce
		s.got, s.complete, s.rs.ResumeStart, s.err = step(rb)
		if s.err != nil && !storeAnswered(s.err) {
			// Perhaps recorded, and its resume begun: then the
			// decision stands, with the claim it took. The store is
			// asked until it answers (see lostDecisionWait).
			again, claimed, answered := a.askAgainUntil(ctx, c.RunID, rb, s.err, time.Now().Add(lostDecisionWait))
			switch {
			case claimed:
				if i := slices.IndexFunc(again.Calls, func(x store.Call) bool { return x.ID == c.ID }); i >= 0 {
					s.got, s.complete, s.rs.ResumeStart, s.err = again.Calls[i], true, again, nil
					a.followUp(ctx, c.ID, resend)
				}
			case answered:
				cur, done, recorded, rerr := a.recoverDecision(ctx, c, rb, mine)
				switch {
				case rerr != nil:
					s.err = a.unconfirmed(c, rb, mine, resend, rerr)
				case recorded:
					s.got, s.complete, s.err = cur, done, nil
					a.followUp(ctx, c.ID, resend)
				}
			default:
				s.err = a.unconfirmed(c, rb, mine, resend, s.err)
			}
		}
		// A decision recorded with effects missing (see decided)
		// stands, and so does the resume it began.
		s.rs.Claimed = s.rs.Claimed && (s.err == nil || errors.Is(s.err, store.ErrEffects))
		if errors.Is(s.err, ErrUnconfirmed) {
			// The step may have taken the lease, its answer lost: it is
			// given back (see leases.begin).
			return false, s.err
		}
		return s.rs.Claimed, nil
	}
	if !begins {
		_, _ = run(a.leases.newHolder())
		return s
	}
	_, _, _ = a.leases.take(c.Conversation, run)
	return s
}

// unconfirmed is the error of a decision on c whose step, the attempt rb
// names, failed with err, its answer lost, when the store did not answer
// again in time to tell whether it was made (see UnconfirmedError). Its
// Recover asks until the store answers: a claim of that attempt that
// still stands is let go with the mark it set (this process runs nothing
// of it: its lease went back already, see send); one that lapsed meanwhile
// is found as recoverDecision finds it, which takes its mark back. A
// decision found made is sent again with resend, for its effects (see
// followUp).
func (a *Agent) unconfirmed(c store.Call, rb store.ResumeBegin, mine func(store.Call) bool, resend func(context.Context) error, err error) error {
	return &UnconfirmedError{Err: err, RunID: c.RunID, Conversation: c.Conversation, Recover: func(ctx context.Context) bool {
		again, claimed, answered := a.askAgainUntil(ctx, c.RunID, rb, err, time.Time{})
		switch {
		case claimed:
			a.abandon(ctx, &startMark{call: again.Started, attempt: rb.Nonce})
			if rerr := a.store.ReleaseClaim(context.WithoutCancel(ctx), c.RunID, rb.Owner); rerr != nil {
				a.log.Warn("release the claim of a decision not confirmed; it lapses within the lease TTL", "run", c.RunID, "err", rerr)
			}
			a.followUp(ctx, c.ID, resend)
			return true
		case answered:
			_, complete, recorded, rerr := a.recoverDecision(ctx, c, rb, mine)
			if rerr != nil {
				a.log.Warn("find out whether a decision not confirmed was recorded", "call", c.ID, "err", rerr)
			}
			if recorded {
				a.followUp(ctx, c.ID, resend)
			}
			return recorded && complete
		}
		return false
	}}
}

// followUp sends again, with resend, a decision on call callID whose
// store step's answer was lost and that was then found made: the same
// attempt (store.Decision.Attempt), with the same effects and no resume
// to begin. A store that writes a decision's effects in a step after the
// decision's own (Redis Cluster) makes that follow-up then, which the
// lost answer left unmade, with the decision's audit entry written once
// whether or not it was made before; one that wrote them with the
// decision answers as the first sending was, or refuses the decision
// made, writing nothing. A failure is logged: the decision stands,
// without its effects.
func (a *Agent) followUp(ctx context.Context, callID string, resend func(context.Context) error) {
	err := resend(ctx)
	if err != nil && !errors.Is(err, store.ErrAlreadyDecided) && !errors.Is(err, store.ErrDuplicateApproval) {
		a.log.Warn("write the effects of a decision whose answer was lost", "call", callID, "err", err)
	}
}

// decidedBy reports whether a call holds the decision of the attempt
// nonce names.
func decidedBy(nonce string) func(store.Call) bool {
	return func(c store.Call) bool { return c.Decision != nil && c.Decision.Attempt == nonce }
}

// approvedBy reports whether a call holds approval ap, counted, or the
// decision it completed (of the attempt nonce names).
func approvedBy(ap store.Approval, nonce string) func(store.Call) bool {
	decided := decidedBy(nonce)
	return func(c store.Call) bool {
		return decided(c) || slices.ContainsFunc(c.Approvals, func(x store.Approval) bool { return x.Approver == ap.Approver && x.At.Equal(ap.At) })
	}
}

// held is the conversation's lease and the run's resume claim that the
// step s began, until the caller of DecideTaking has them; nil if it
// began none.
func (a *Agent) held(s sent) *Taken {
	if !s.rs.Claimed {
		return nil
	}
	rs := s.rs
	return &Taken{conversation: s.got.Conversation, holder: rs.owner, resume: &rs}
}

// releaseOnPanic, deferred, gives back what held holds when the decision
// panics before its caller has it: the conversation would stay held in
// this process for good.
func (a *Agent) releaseOnPanic(ctx context.Context, held *Taken) {
	if held == nil {
		return
	}
	if p := recover(); p != nil {
		a.ReleaseTaken(context.WithoutCancel(ctx), held)
		panic(p)
	}
}

// resumeLater hands the step that s completed to whoever resumes it: the
// caller of DecideTaking, through *taken, when s began its resume, and
// otherwise the resume that follows Decide.
func (a *Agent) resumeLater(s sent, taken **Taken, held *Taken) {
	switch {
	case s.complete && held != nil:
		*taken = held
	case s.complete:
		a.resumable.add(s.got.RunID, s.got.Conversation)
	}
}

// storeAnswered reports whether err is the store's answer to a decision
// (a refusal, or a decision recorded without all of its effects), not a
// failure to get one.
func storeAnswered(err error) bool {
	return refusedWithoutWrite(err) || errors.Is(err, store.ErrEffects) || errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrDuplicateApproval)
}

// refusedWithoutWrite reports whether err is the store refusing a
// decision, having written nothing.
func refusedWithoutWrite(err error) bool {
	for _, e := range []error{store.ErrStale, store.ErrNotFound, store.ErrAlreadyDecided, store.ErrFingerprintMismatch, store.ErrExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// remember stores the standing rule of a Remember decision, and reports
// whether it did. The decision stands even if this fails; the failure is
// logged. A rule stored without its audit entry is in force, so it counts
// as stored; the error, which wraps approvals.ErrAuditFailed, is logged
// and returned.
func (a *Agent) remember(ctx context.Context, c store.Call, sd store.Decision, v approvals.Verdict) (bool, error) {
	r, ok := a.policy.(Rememberer)
	if !ok {
		a.log.Warn("remember decision without a rule store", "call", c.ID)
		return false, nil
	}
	ttl := sd.TTL
	if ttl <= 0 {
		ttl = a.cfg.RememberTTL
	}
	d := approvals.Decision{Kind: approvals.Remember, Fingerprint: c.Fingerprint, Decider: sd.Decider, At: sd.At, Conditions: sd.Conditions, TTL: ttl, Exact: sd.Exact}
	sr := approvals.RememberedRule(d, c.Tool, c.Channel, v)
	// The call's own id: a decision whose answer was lost, then found
	// made, saves its rule where the first sending may have saved it.
	sr.ID = StandingRuleID(c.ID)
	_, err := r.Remember(ctx, sd.Decider, sr)
	if errors.Is(err, approvals.ErrRuleExists) {
		return true, nil
	}
	if errors.Is(err, approvals.ErrAuditFailed) {
		a.log.Warn("write the audit entry of a standing rule", "call", c.ID, "tool", c.Tool, "err", err)
		return true, err
	}
	if errors.Is(err, store.ErrNotReplicated) {
		// In force on the primary, audited: a failover may lose it.
		a.log.Warn("a standing rule the store's replicas did not acknowledge", "call", c.ID, "tool", c.Tool, "err", err)
		return true, nil
	}
	if err != nil {
		a.log.Error("store standing rule", "call", c.ID, "tool", c.Tool, "err", err)
		return false, nil
	}
	return true, nil
}

// StandingRuleID is the id of the standing rule an Always allow of call
// callID makes: "sr-" and 12 hex digits of its digest (so that two calls'
// rules share no id, where a shared one would be taken for the rule saved
// already).
func StandingRuleID(callID string) string {
	sum := sha256.Sum256([]byte("standing rule of " + callID))
	return "sr-" + hex.EncodeToString(sum[:6])
}

// Cancel stops a paused step on behalf of its requester: every pending call
// of the run is cancelled, but for those past their deadline, which are
// left to the expiry (ErrExpired when that is all of them). Only a requester may cancel: the run's, or any
// of its calls' (everyone whose message the turn that paused answers). Calls that already
// ran keep their results; the others are dropped from the history when the
// step resumes. Complete is set when this left nothing pending; then call
// Resume, which ends the step without calling the model (messages queued
// while it waited are still answered).
func (a *Agent) Cancel(ctx context.Context, runID, user string) (DecideResult, error) {
	run, calls, err := a.store.LoadRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return DecideResult{}, fmt.Errorf("cancel %s: %w", runID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return DecideResult{}, fmt.Errorf("cancel %s: %w", runID, err)
	}
	if user != run.Requester && !slices.ContainsFunc(calls, func(c store.Call) bool { return c.IsRequester(user) }) {
		return DecideResult{}, fmt.Errorf("cancel %s: %w: only the requester can cancel", runID, approvals.ErrNotApprover)
	}
	var res DecideResult
	cancelled, expired := 0, 0
	var lost *store.Call // the latest decision that ended a call before this cancel
	loser := func(c store.Call) {
		if c.Decision != nil && (lost == nil || c.Decision.At.After(lost.Decision.At)) {
			lost = &c
		}
	}
	for _, c := range calls {
		if c.Status != store.Pending {
			loser(c)
			continue
		}
		// Attempt names this sending, for a store whose client sends it
		// again after a lost reply (see store.Decision.Attempt).
		d := store.Decision{Kind: storedKind(approvals.Cancel), Decider: user, At: a.cfg.Now(), Attempt: newNonce()}
		fx := decisionEffects(c, user, d.Kind, c.Fingerprint, d.At)
		got, complete, err := a.store.DecideAudited(ctx, c.ID, "", d, fx)
		if errors.Is(err, store.ErrAlreadyDecided) {
			if now, gerr := a.store.GetCall(ctx, c.ID); gerr == nil {
				loser(now)
			}
			continue
		}
		if errors.Is(err, store.ErrExpired) {
			expired++ // the expiry pass ends it
			continue
		}
		if err = a.decided(ctx, fx.Audit, err); err != nil {
			return res, fmt.Errorf("cancel %s: %w", c.ID, err)
		}
		cancelled++
		if complete {
			a.resumable.add(got.RunID, got.Conversation)
		}
		a.reporter(got.Conversation).Updated(ctx, CallUpdate{Call: viewOf(got), Phase: PhaseSkipped, Note: "cancelled by the requester"})
		res = DecideResult{Call: viewOf(got), Complete: res.Complete || complete}
	}
	switch {
	case cancelled == 0 && expired > 0:
		return res, fmt.Errorf("cancel %s: %w", runID, approvals.ErrExpired)
	case cancelled == 0 && lost != nil:
		return DecideResult{Call: viewOf(*lost)}, fmt.Errorf("cancel %s: %w", runID, refusedByOther(*lost))
	case cancelled == 0:
		return res, fmt.Errorf("cancel %s: %w", runID, &approvals.RefusedError{Err: approvals.ErrAlreadyDecided})
	}
	return res, nil
}
