package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// Resume continues a paused step whose calls are all decided. Exactly one
// resume runs per step, whichever process calls it and however often: the
// others get Idle. Approved calls execute now (each at most once, even if a
// crashed resume is claimed again), their results and the other decisions'
// results are given to the model in the order of the calls, and the turn
// goes on (it may pause again). Messages queued while the step was paused
// are answered afterwards. A cancelled step ends the turn without calling
// the model.
func (a *Agent) Resume(ctx context.Context, runID string) (Outcome, error) {
	conv, known := a.resumable.take(runID)
	if !known {
		run, calls, err := a.store.LoadRun(ctx, runID)
		if errors.Is(err, store.ErrNotFound) {
			return Outcome{Status: Idle}, nil
		}
		if err != nil {
			return Outcome{}, fmt.Errorf("resume %s: %w", runID, err)
		}
		if run.Finished || slices.ContainsFunc(calls, func(c store.Call) bool { return c.Status == store.Pending }) {
			return Outcome{Status: Idle}, nil // not decided yet; the last decision resumes
		}
		conv = run.Conversation
	}
	var rs claimed
	begin := func(ctx context.Context, key, holder string) (bool, error) {
		var err error
		rs, err = a.beginResume(ctx, runID, conv, key, holder)
		return rs.Claimed, err
	}
	var out Outcome
	err := a.leases.runTaking(ctx, conv, begin, func(ctx context.Context) (err error) {
		out, err = a.resumeStarted(ctx, rs)
		return err
	})
	if errors.Is(err, errNoResume) {
		return Outcome{Status: Idle}, nil
	}
	return out, err
}

// startKinds are the stored decision kinds that run a call: BeginResume
// marks the first call decided with one of them as started, sparing its
// BeginExecution.
var startKinds = func() []string {
	var out []string
	for _, k := range approvals.Kinds {
		if k.Runs() {
			out = append(out, storedKind(k))
		}
	}
	return out
}()

// newNonce names one attempt to begin a resume (store.ResumeBegin.Nonce).
func newNonce() string { return rand.Text() }

// askAgainUntil asks again for the claim of the attempt rb names, which
// failed with err: its answer may have been lost (a reset connection, a
// time-out) after the store step claimed the run and marked the call to
// run, which nothing would run then. It returns that attempt's claim, if
// it took one (claimed); nothing else is taken. The store is asked until
// it answers (answered), ctx ends or deadline, if not zero, passes, with
// backoff. An error the store answered with (see answerLost) ends the
// asking too, as not answered: asking again would get it again, and it
// tells nothing of the claim.
func (a *Agent) askAgainUntil(ctx context.Context, runID string, rb store.ResumeBegin, err error, deadline time.Time) (again store.ResumeStart, claimed, answered bool) {
	rb.Again = true
	wait := 50 * time.Millisecond
	for ctx.Err() == nil {
		again, aerr := a.store.BeginResume(ctx, runID, rb)
		if aerr == nil || errors.Is(aerr, store.ErrNotFound) {
			if aerr == nil && again.Claimed {
				a.log.Warn("a claim was taken but its answer lost; asked again", "run", runID, "err", err)
				return again, true, true
			}
			return store.ResumeStart{}, false, true
		}
		if !answerLost(aerr) {
			a.log.Warn("a claim whose answer was lost was asked again, and the store answered with an error", "run", runID, "err", err, "again_err", aerr)
			break
		}
		if !deadline.IsZero() && time.Now().Add(wait).After(deadline) {
			break
		}
		_ = ctxtime.Sleep(ctx, wait) // the loop ends with ctx
		wait = min(2*wait, 2*time.Second)
	}
	return store.ResumeStart{}, false, false
}

// answerLost reports whether err, from a store step, may stand for an
// answer that was lost after the step was made (a reset connection, a
// time-out, the context ending while it was sent), so that only asking
// again tells whether it was, or stands for a step Redis Cluster did not
// make for now (see store.ClusterBusy). An answer the store gave is not: a refusal
// (see storeAnswered), an error reply of Redis (go-redis's redis.Error,
// a type with a RedisError method: a script error on a damaged record,
// say) or a reply that could not be decoded; asking again gets it again.
// An error of no known kind may be a lost answer.
func answerLost(err error) bool {
	if err == nil || storeAnswered(err) {
		return false
	}
	if transportFailed(err) || store.ClusterBusy(err) {
		return true // whatever else it wraps
	}
	var reply interface{ RedisError() }
	var syntax *json.SyntaxError
	var decode *json.UnmarshalTypeError
	return !errors.As(err, &reply) && !errors.As(err, &syntax) && !errors.As(err, &decode)
}

// transportFailed reports whether err is a transport's failure (a reset
// connection, a time-out, the context ending while a step was sent),
// which may have lost the answer of a step that was made.
func transportFailed(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.As(err, &netErr)
}

// errNoResume ends a wait for the lease of a run that has nothing to
// resume, or that someone else resumes.
var errNoResume = errors.New("nothing to resume")

// errClaimed is errNoResume for a decided run whose resume claim another
// process holds. Found by the holder of the conversation's lease, the
// claim is that of a resume that stopped or died before it finished.
var errClaimed = fmt.Errorf("%w: another process holds the resume claim", errNoResume)

// beginResume takes the resume claim of a decided run for holder, and the
// lease on key unless it is empty (the caller holds it), and loads what the resume
// needs (see store.ResumeStart). It returns errNoResume if the run is
// gone, finished or not decided, errClaimed if it is decided and claimed
// by someone else, and Claimed false, nil if another process holds the
// lease.
//
// A store step whose answer may have been lost (see answerLost) is asked
// again until the store answers (see askAgainUntil), for up to
// lostDecisionWait: one that the store then answers with no claim of it
// may have marked the call to run before its claim lapsed, and only this
// process knows that the call never ran. That mark is taken back
// (takeBackLostMark) and the resume begun once more, so that the call
// runs instead of being reported as of unknown outcome. An error the
// store answered with (a script error on a damaged run, a reply that
// cannot be decoded) is not asked again, and neither is a step the store
// does not answer within lostDecisionWait: the error is returned, so
// that the turn ends and gives the conversation's lease back, for a later
// takeover or sweep to try again, instead of holding the conversation
// while nothing can come of it. (If such a step did claim the run, its
// claim lapses, and the call it marked is reported by the next resume as
// of unknown outcome: it never runs twice.)
func (a *Agent) beginResume(ctx context.Context, runID, conv, key, holder string) (claimed, error) {
	sent := time.Now()
	rb := store.ResumeBegin{Conversation: conv, Lease: key, Owner: holder, TTL: a.cfg.LeaseTTL, Start: startKinds, Kinds: a.policyKinds(), Nonce: newNonce()}
	st, err := a.store.BeginResume(ctx, runID, rb)
	if answerLost(err) {
		again, ok, answered := a.askAgainUntil(ctx, runID, rb, err, time.Now().Add(lostDecisionWait))
		switch {
		case ok:
			st, err = again, nil // the claim counts from the first ask
		case answered && a.takeBackLostMark(ctx, runID, conv, rb.Nonce):
			sent = time.Now()
			rb.Nonce = newNonce()
			st, err = a.store.BeginResume(ctx, runID, rb)
		}
	}
	rs := claimed{ResumeStart: st, nonce: rb.Nonce, at: sent, owner: holder}
	switch {
	case errors.Is(err, store.ErrNotFound):
		return rs, errNoResume
	case err != nil:
		return rs, fmt.Errorf("begin resume %s: %w", runID, err)
	case !rs.Claimed && !rs.Busy && !rs.Run.Finished:
		// A decided run (callers only resume those): claimed.
		return rs, errClaimed
	case !rs.Claimed && !rs.Busy:
		return rs, errNoResume
	}
	return rs, nil
}

// claimAndResume claims the resume of a decided run and runs it; Idle if
// the run has nothing to resume, errClaimed if someone else holds the
// claim. The caller holds the conversation's lease.
func (a *Agent) claimAndResume(ctx context.Context, run store.Run) (Outcome, error) {
	rs, err := a.beginResume(ctx, run.ID, run.Conversation, "", a.leases.newHolder())
	if errors.Is(err, errClaimed) {
		return Outcome{}, err
	}
	if errors.Is(err, errNoResume) || err == nil && !rs.Claimed {
		return Outcome{Status: Idle}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	return a.resumeStarted(ctx, rs)
}

// resumeStarted runs the resume of a run whose claim (and conversation's
// lease) this process took with rs.
func (a *Agent) resumeStarted(ctx context.Context, rs claimed) (out Outcome, err error) {
	run, calls := rs.Run, rs.Calls
	// Renewed like the lease, so the claim of a process that dies lapses
	// within LeaseTTL; the decision that completed the step listed the
	// conversation for TakeOver until the resumed turn saves its result,
	// so another process (or this one after a restart) takes it over then.
	// A resume that loses the claim or the lease stops and releases the
	// claim, for the takeover to carry the run on at once.
	ctx, stop := a.keepClaim(ctx, run.ID, rs.owner, rs.at)
	defer stop()
	var st runState
	stErr := fastjson.Unmarshal(run.State, &st) // resumeClaimed reports a bad state
	cs, _, csErr := conversationOf(rs.Conversation, rs.Found)
	// The decisions' waits are the first resume's to report: one begun
	// after an earlier resume's claim (cut by a shutdown or a crash, from
	// before its calls ran to a later step), or that finds the
	// conversation moved on, reports none.
	waited := calls
	if rs.PriorNonce != "" || csErr != nil || cs.Step != nil || !rs.Found || rs.Conversation.PausedRun != run.ID {
		waited = nil
	}
	ctx, end := a.startTurn(ctx, TurnStart{Kind: TurnResume, Conversation: run.Conversation, User: st.User, Channel: st.Channel, RunID: run.ID, Calls: waited})
	defer endTurn(end, &out, &err)
	out, err = a.resumeClaimed(ctx, rs.ResumeStart, rs.nonce, st, stErr, cs, csErr, a.reporter(run.Conversation))
	if err != nil && leaseLost(ctx) && !errors.Is(err, ErrLeaseLost) {
		err = errors.Join(err, context.Cause(ctx))
	}
	return out, err
}

// resumeClaimed runs the resume rs began (the attempt named nonce), of a
// run whose state decoded to st, or failed to with stErr, and whose
// conversation's decoded to cs, or failed to with csErr.
func (a *Agent) resumeClaimed(ctx context.Context, rs store.ResumeStart, nonce string, st runState, stErr error, cs convState, csErr error, rep Reporter) (Outcome, error) {
	run, calls := rs.Run, rs.Calls
	runID := run.ID
	// The call BeginResume marked as started runs in settle, which
	// clears started; if it does not run, the mark is taken back, or
	// kept with why it did not run (see notRun in settle).
	started := startMark{call: rs.Started, attempt: nonce}
	defer func() { a.abandon(ctx, &started) }()
	if stErr != nil {
		return Outcome{}, fmt.Errorf("decode run %s: %w", runID, stErr)
	}
	if csErr != nil {
		return Outcome{}, csErr
	}
	if !rs.Found || rs.Conversation.PausedRun != runID {
		// The conversation is not paused on this run. Either it moved on
		// (this step was resumed before, but finishing the run failed),
		// or it never was: on Redis Cluster a pause writes its run before
		// its conversation, and the process that paused died, or lost the
		// conversation, between the two, so the turn is answered again
		// from its recorded messages and may ask again. Finish the run;
		// never run its calls (twice, or as a step nothing recorded).
		for _, c := range calls {
			if c.Status == store.Decided && !c.Executing && c.Decision != nil && kindOf(c.Decision).Runs() {
				rep.Updated(ctx, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Note: "the conversation moved on before it ran"})
			}
		}
		if err := a.commit(ctx, nil, store.Commit{Key: run.Conversation, Finish: runID}, false); err != nil {
			return Outcome{}, fmt.Errorf("finish run %s: %w", runID, err)
		}
		return Outcome{Status: Idle, RunID: runID}, nil
	}
	byID := make(map[string]store.Call, len(calls))
	cancelled := false
	for _, c := range calls {
		byID[c.ID] = c
		cancelled = cancelled || c.Status == store.Cancelled
	}
	t := &turn{conv: run.Conversation, user: st.User, askers: st.Requesters, channel: st.Channel, messages: st.Messages, steps: st.Steps, queued: cs.Queued, skipped: cs.Skipped, inboxSeq: cs.InboxSeq, pausedRun: runID, finish: runID}
	defer a.flushAudits(ctx, t)
	if cs.Step != nil && !cancelled {
		// An earlier resume of this run settled its calls and was running
		// a later step when its process died: go on from that step.
		t.messages, t.steps, t.user, t.channel = cs.Messages, cs.Step.Steps, cs.Step.User, cs.Step.Channel
		if len(cs.Step.Requesters) > 0 {
			t.askers = slices.Clone(cs.Step.Requesters)
		}
		t.step, t.markedPauseRun = a.interrupted(ctx, t, cs.Step), cs.Step.PauseRun
		return a.finishResume(ctx, t, rep)
	}
	if cancelled {
		t.messages = dropUnexecuted(t.messages, st.Slots)
		const note = "the requester cancelled the turn"
		for _, s := range st.Slots {
			c, ok := byID[s.CallID]
			switch {
			case !ok || c.Status == store.Cancelled:
			case c.Status == store.Decided && !c.Executing && c.Decision != nil && kindOf(c.Decision).Runs():
				// An approved call that will not run is saved as such,
				// so that a card drawn again from the store says why.
				res := Result{Content: "not performed: " + note, IsError: true}
				a.saveResult(ctx, t, c.ID, res, store.AuditEntry{}, rep, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Result: res, Note: note}, nil)
			default:
				rep.Updated(ctx, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Note: note})
			}
		}
		if err := a.saveTurn(ctx, t); err != nil {
			return Outcome{}, err
		}
		// A stop ends the step, not the conversation: messages people
		// sent while it waited are still answered.
		return a.answerQueued(ctx, t, Outcome{Status: Stopped, RunID: runID}, rep)
	}
	// The policy's records read with the run judge the first call that
	// would run; the others are judged by a fresh read, after it ran.
	recs := rs.Records
	for i := range st.Slots {
		s := &st.Slots[i]
		if s.CallID == "" {
			continue
		}
		res, stopped := a.settle(ctx, t, byID[s.CallID], st, rep, &recs, &started)
		if stopped || leaseLost(ctx) {
			// Whoever resumes the run next (the process holding it now,
			// or this one after its restart) settles the calls left; a
			// call that started is not run again.
			return Outcome{}, fmt.Errorf("resume %s: %w", runID, context.Cause(ctx))
		}
		s.Result = &res
	}
	t.messages = append(t.messages, toolMessages(st.Slots)...)
	t.ran = st.Slots
	return a.finishResume(ctx, t, rep)
}

// finishResume runs the resumed turn, which finishes the run with the write
// that records its result, and answers the messages queued while it was
// paused. A turn that could not record its result leaves the run to a
// later resume, which does not run its calls again; so does one that lost
// the lease to another process.
func (a *Agent) finishResume(ctx context.Context, t *turn, rep Reporter) (Outcome, error) {
	out, err := a.continueTurn(ctx, t, rep)
	if err != nil || out.Status == Paused {
		return out, err
	}
	return a.answerQueued(ctx, t, out, rep)
}

// answerQueued runs one more turn for messages that arrived while the step
// was paused.
func (a *Agent) answerQueued(ctx context.Context, t *turn, out Outcome, rep Reporter) (Outcome, error) {
	if len(t.queued) == 0 {
		return out, nil
	}
	t.askers = nil
	t.addMessages(t.queued)
	last := t.queued[len(t.queued)-1]
	t.user, t.channel, t.queued, t.steps = last.User, last.Channel, nil, 0
	return a.continueTurn(ctx, t, rep)
}

// settle turns the decision on one paused call into the result the model
// reads, executing the tool if the decision runs it. The policy judges it
// by *recs if set (see policyKinds), which are then used up. If c is the
// call *started names, BeginResume marked it as started: it runs without
// BeginExecution; if it does not, its mark is taken back, or kept with
// why it did not run (see notRun in settle).
//
// stopped reports that ctx ended (a shutdown, a lost lease) before an
// approved call could start: the call is not settled, and the resume
// stops for the next one to run it, instead of telling the model it was
// not performed.
func (a *Agent) settle(ctx context.Context, t *turn, c store.Call, st runState, rep Reporter, recs *map[string][]store.Record, started *startMark) (_ Result, stopped bool) {
	marked := c.ID == started.call
	skip := func(res Result, note string) (Result, bool) {
		if marked {
			a.abandon(ctx, started)
		}
		rep.Updated(ctx, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Result: res, Note: note})
		return res, false
	}
	if c.Status == store.Expired || c.Decision == nil {
		res := Result{Content: fmt.Sprintf("not performed: approval expired after %s", c.ExpiresAt.Sub(c.CreatedAt).Round(time.Second)), IsError: true}
		return skip(res, "expired")
	}
	d := *c.Decision
	who := d.Decider
	switch kindOf(&d) {
	case approvals.Refuse:
		return skip(Result{Content: fmt.Sprintf("not performed: user %s denied this call. Do not retry the same call; ask how to proceed instead.", who), IsError: true}, "denied")
	case approvals.Reject:
		return skip(Result{Content: fmt.Sprintf("not performed: user %s rejected this call with the reason: %s", who, d.Reason), IsError: true}, "rejected")
	case approvals.Respond:
		// Who answered is named, as for a denial: anyone who may decide
		// the question may answer it, not only who asked.
		return skip(Result{Content: fmt.Sprintf("User %s answered: %s", who, d.Answer)}, "answered")
	}
	args := c.Args
	if kindOf(&d) == approvals.Edit {
		args = d.Args
	}
	// noted tells the model, before res, which arguments a person's edit
	// gave the call (how being what happened with them: "The call ran
	// with"). An edit back to the original arguments (after an edit of
	// them was pending) ran what the model asked for: nothing to tell.
	noted := func(res Result, how string) Result {
		if kindOf(&d) == approvals.Edit && !sameArgs(args, c.Args) {
			res.Content = fmt.Sprintf("Note: user %s edited the arguments before approving. %s %s instead of the original %s. Do not re-issue the original call.\n\n%s", who, how, args, c.Args, res.Content)
		}
		return res
	}
	withNote := func(res Result) Result { return noted(res, "The call ran with") }
	// notRun skips a call that does not run (and did not start), with
	// the outcome saved as its result and the call marked as started:
	// the call this resume marked keeps its mark in place of taking it
	// back (a save that fails takes it back: see saveResult), and a
	// later call of the step is marked in the step that saves its
	// outcome (store SkipExecution), so that no call is ever marked with
	// nothing saved. A card rendered again from the store (see News)
	// then says why the call did not run, as its resume's update did,
	// and a resume claimed again reports it so instead of judging the
	// call anew, which could run a call its card and the model were told
	// would not run.
	//
	// A resume that is stopping (a shutdown, its claim lost) settles
	// nothing: as for a call it would run, the call is left to whoever
	// resumes the run next, who judges it (its mark, if this resume's,
	// taken back on the way out), and its card is not told it did not
	// run.
	notRun := func(res Result, note string) (Result, bool) {
		err := a.confirmClaim(ctx, c.RunID)
		if err != nil && (ctx.Err() != nil || errors.Is(err, ErrLeaseLost)) {
			return Result{}, true
		}
		res = noted(res, "It was approved with")
		if err != nil {
			return skip(res, note)
		}
		var taken *startMark
		if marked {
			taken = new(*started)
		}
		*started = startMark{}
		a.saveResult(ctx, t, c.ID, res, store.AuditEntry{}, rep, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Result: res, Note: note}, taken)
		return res, false
	}
	// unrecorded skips a call whose start the store could not record
	// (err): it may still be marked by another process, so nothing is
	// saved.
	unrecorded := func(err error) (Result, bool) {
		return skip(noted(Result{Content: fmt.Sprintf("not performed: could not record the execution of %s: %v", c.Tool, err), IsError: true}, "It was approved with"), "store error")
	}
	// unknown settles a call that started before and will not run again
	// (why, if not only because it started), whose outcome is not known:
	// the first resume to find it so saves that, with the execution's
	// audit entry, for a resume claimed again to report and write no
	// second entry. A call whose tool may run again (again) is saved with
	// no entry: its attempt is audited by the run that made it when a
	// shutdown cut it, and by none after a crash, as when it runs again.
	unknown := func(why string, again bool) (Result, bool) {
		res := interruptedResult(c.Tool)
		if why != "" {
			res.Content += " (" + why + ")"
		}
		res = noted(res, "It was started with")
		var e store.AuditEntry
		if !again {
			e = executed(c, d, args, res, "the bot stopped while it ran")
		}
		// Not marked by this resume: it started before, or its mark was
		// used by an attempt that was cut, so there is no mark to take
		// back.
		a.saveResult(ctx, t, c.ID, res, e, rep, CallUpdate{Call: viewOf(c), Phase: PhaseSkipped, Result: res, Note: NoteInterrupted}, nil)
		return res, false
	}
	reg, ok := a.tools.lookup(c.Tool)
	var tool Tool
	if ok {
		tool = reg.tool
	}
	// settled settles the call, as stored (got), as the saved result
	// says it ended, if one is saved (ok): its audit entry was written
	// with it.
	settled := func(got store.Call) (_ Result, stopped, ok bool) {
		var saved savedResult
		if len(got.Result) == 0 || json.Unmarshal(got.Result, &saved) != nil {
			return Result{}, false, false
		}
		var res Result
		switch {
		case saved.Interrupted:
			res, stopped = skip(saved.interruptedResult(c.Tool), NoteInterrupted)
		case saved.NotRun != "":
			// Saved by a resume that found it should not run (see
			// notRun): it started nothing.
			res, stopped = skip(saved.result(), saved.NotRun)
		default:
			res = saved.result()
			rep.Updated(ctx, CallUpdate{Call: viewOf(got), Phase: PhaseExecuted, Result: res})
			res = withNote(res)
		}
		return res, stopped, true
	}
	again := false
	if c.Executing {
		// A resume claimed again: the call started before. Its saved
		// result says how it ended, if it got that far; if not, it runs
		// again only if its tool may (read-only or idempotent), as it
		// said when the call paused and says still: a hint its MCP
		// server gives only since (it redeployed after the crash) does
		// not make a call that started as neither run twice.
		if res, stopped, ok := settled(c); ok {
			return res, stopped
		}
		if !ok || !repeatable(tool) || !c.Repeatable {
			return unknown("", false)
		}
		again = true
	}
	if !ok {
		return notRun(Result{Content: fmt.Sprintf("not performed: tool %s is no longer available", c.Tool), IsError: true}, "tool unavailable")
	}
	// The arguments are checked again against the tool as it is now: its
	// MCP server may have changed it since the call paused (a
	// tools/list_changed, a reconnect), so that its schema refuses them,
	// or has the server fill in a default the card never showed and the
	// policy never judged. Either way it does not run.
	why := changedArgs(reg, args)
	if c.ToolDigest != "" && c.ToolDigest != definitionDigest(tool) {
		why = "its description, hints or server are not those it had when this call was asked"
	}
	if why != "" {
		if again {
			// An attempt began before the bot stopped: it may have run.
			return unknown(fmt.Sprintf("the definition of tool %s changed since this call was approved (%s); call the tool again, for a new approval, if it is still needed", c.Tool, why), true)
		}
		return notRun(Result{Content: fmt.Sprintf("not performed: the definition of tool %s changed since this call was approved (%s), so nothing ran; ask again: call the tool again, for a new approval, if it is still needed", c.Tool, why), IsError: true}, NoteToolChanged)
	}
	// The verdict is checked again: a call approved under a rule that now
	// denies does not run.
	v, err := a.evaluateStrict(ctx, approvals.Input{Tool: c.Tool, Args: args, User: st.User, Requesters: st.Requesters, Channel: st.Channel, Hints: tool.Annotations, Question: tool.Human}, *recs)
	*recs = nil
	if err != nil && ctx.Err() != nil {
		return Result{}, true // its mark, if any, is taken back on the way out
	}
	switch {
	case err != nil && again:
		return unknown(fmt.Sprintf("the policy could not be checked to run it again: %v", err), true)
	case err != nil:
		return notRun(Result{Content: fmt.Sprintf("not performed: the policy could not be checked (%v), so nothing ran; ask again later", err), IsError: true}, "policy could not be checked")
	case v.Action == approvals.Deny && again:
		return unknown("the policy now denies running it again: "+v.Why(), true)
	case v.Action == approvals.Deny:
		// The card's note gives the rule's words only: an evaluation's
		// error may quote the arguments (a sealed copy shows none).
		return notRun(Result{Content: "not performed: the policy now denies this call: " + v.Why(), IsError: true}, "policy now denies: "+v.Words())
	}
	// mine is the mark this resume set on the call, if it set one.
	first, mine := marked, startMark{}
	if marked {
		// Marked with the claim: it runs only while the claim is still
		// this process's (see claim.confirm). A resume cut short takes the
		// mark back, so whoever resumes the run next runs the call.
		if err := a.confirmClaim(ctx, c.RunID); err != nil {
			if ctx.Err() != nil {
				return Result{}, true // its mark is taken back on the way out
			}
			return unrecorded(err)
		}
		mine, *started = *started, startMark{}
	} else {
		if !repeatable(tool) {
			// The results of the calls run before it are saved first, as
			// an allowed call's are: one that returned is never reported
			// as of unknown outcome because the bot stopped while this
			// one ran.
			t.saving.Wait()
		}
		var attempt string
		first, attempt, err = a.beginExecution(ctx, c.ID)
		mine = startMark{call: c.ID, attempt: attempt}
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, true // its card is left to whoever settles the call
			}
			if again {
				return unknown(fmt.Sprintf("could not record running it again: %v", err), true)
			}
			return unrecorded(err)
		}
	}
	if !first && !again {
		if a.confirmClaim(ctx, c.RunID) != nil {
			// Marked by another process: this one's claim was lost (or
			// it is shutting down, or the store cannot say) before it
			// could mark it, and the one that took over has run it, or
			// reports it.
			return Result{}, true
		}
		// Marked since this resume read it, by a process whose claim
		// lapsed: one that found it should not run saved that as it
		// marked it (see notRun), and its word stands, as a resume
		// claimed again would read it.
		if got, err := a.store.GetCall(ctx, c.ID); err == nil {
			if res, stopped, ok := settled(got); ok {
				return res, stopped
			}
		}
		return unknown("", false)
	}
	if ctx.Err() != nil {
		// Ended as the call was marked: it has not started, and the next
		// resume runs it.
		a.abandon(ctx, &mine)
		return Result{}, true
	}
	rep.Status(ctx, "is running "+c.Tool+"…")
	res := a.execute(ctx, tool, args, c.ID, v)
	if res.interrupted && !repeatable(tool) {
		// Cut by a shutdown or a lost lease while it ran: as after a
		// crash, its outcome is unknown, and a resume claimed again
		// reports it so too.
		return unknown("", false)
	}
	if res.interrupted {
		// No result is saved: the resume stops, and the next one runs it
		// again, and audits that execution.
		a.note(ctx, t, executed(c, d, args, res, "the bot stopped while it ran"))
		res, _ = skip(res, NoteInterrupted)
		return res, true
	}
	a.saveResult(ctx, t, c.ID, res, executed(c, d, args, res, ""), rep, CallUpdate{Call: viewOf(c), Phase: PhaseExecuted, Result: res}, nil)
	return withNote(res), false
}

// beginExecution marks call id as started (BeginExecution) and reports
// whether the mark is this attempt's, and the attempt's name, which takes
// the mark back (see abandon). A store step whose answer was lost
// (a reset connection, a time-out, ctx ending while it was sent) may have
// set the mark: it is asked again under the same attempt's name, whether
// or not ctx ended, until the store answers or lostDecisionWait passes,
// so that a call this process marked and never ran is run (or its mark
// taken back by a resume that stops) instead of being reported later as
// of unknown outcome. An error means the store never answered.
func (a *Agent) beginExecution(ctx context.Context, id string) (_ bool, attempt string, _ error) {
	attempt = newNonce()
	first, err := a.store.BeginExecution(ctx, id, attempt)
	if err == nil || errors.Is(err, store.ErrNotFound) {
		return first, attempt, err
	}
	actx := context.WithoutCancel(ctx)
	deadline := time.Now().Add(lostDecisionWait)
	for wait := time.Duration(0); time.Now().Add(wait).Before(deadline); wait = min(max(2*wait, 50*time.Millisecond), 2*time.Second) {
		time.Sleep(wait)
		if again, aerr := a.store.BeginExecution(actx, id, attempt); aerr == nil || errors.Is(aerr, store.ErrNotFound) {
			a.log.Warn("the mark of a call's start was asked again after its answer was lost", "call", id, "err", err, "marked", again)
			return again, attempt, aerr
		}
	}
	return false, attempt, err
}

// saveResult saves the result of a call that ran with the call, and e, the
// execution's audit entry, with it, so that a resume claimed again after
// this process died reports how the call ended instead of "outcome
// unknown", and writes no second entry; then it reports u, the call's
// update, to rep. The turn goes on meanwhile (the model is asked with the
// result at once); its next write, and its end, wait for the save and
// the report (see commit and flushAudits). The update follows the save so
// that another process that reads the call once the card shows it (see
// News) reads what it shows, if the save was made. A save that fails is
// logged: the turn's own write records the result anyway, and the entry
// if the store did not append it (a call not run has its mark taken
// back).
//
// A call that did not run (u skips it) is saved as such: marked by this
// resume (taken: the mark, taken back if the save fails), or marked in
// the step that saves it (store SkipExecution).
func (a *Agent) saveResult(ctx context.Context, t *turn, callID string, res Result, e store.AuditEntry, rep Reporter, u CallUpdate, taken *startMark) {
	if e.Action != "" {
		e = a.logged(ctx, e)
	}
	saved := savedOf(res)
	if u.Phase == PhaseSkipped && u.Note != NoteInterrupted {
		saved.NotRun = u.Note
	}
	s := &resultSave{entry: e, callID: callID, result: mustJSON(saved)}
	t.saves = append(t.saves, s)
	t.saving.Go(func() {
		sctx := context.WithoutCancel(ctx)
		var err error
		mark := saved.NotRun != "" && taken == nil
		if mark {
			err = a.store.SkipExecution(sctx, callID, s.result)
		} else {
			err = a.store.SaveResult(sctx, callID, s.result, s.entry)
		}
		if err != nil {
			a.log.Warn("save tool result", "call", callID, "err", err)
		}
		s.audited = err == nil
		s.saved = err == nil || errors.Is(err, store.ErrEffects)
		if !s.saved && taken != nil {
			// Not kept: the mark of a call that never ran is taken
			// back, so that the call is not taken for one that started.
			a.abandon(sctx, taken)
		}
		if errors.Is(err, store.ErrConflict) && u.Note == NoteInterrupted {
			// Settled by another process first (another result is
			// saved, with its own entry if the call ran, or the mark
			// was taken back): no execution of this resume's to audit.
			s.entry = store.AuditEntry{}
		}
		if errors.Is(err, store.ErrConflict) && u.Phase == PhaseSkipped {
			// Another process settled the call first (this one's claim
			// lapsed as it saved): the card shows what the store holds,
			// when that is final. A call whose mark another process took
			// back (it stopped) keeps this resume's word, which its model
			// read; one that another process marked (to run it, or
			// skipped) is that process's to report.
			news, nerr := a.News(sctx, callID)
			switch {
			case nerr == nil && (news.Phase == PhaseExecuted || news.Phase == PhaseSkipped):
				u = news
			case mark:
				return
			}
		}
		rep.Updated(ctx, u)
	})
}

// savedResult is a call's result as saveResult saves it.
type savedResult struct {
	Result
	// Interrupted: the bot stopped while the call ran (see
	// interruptedResult).
	Interrupted bool `json:"interrupted,omitempty"`
	// Unknown: the call may have done its work and its outcome is not
	// known (see Result.OutcomeUnknown); named for the first such
	// results, of calls cut by their time-out.
	Unknown bool `json:"timed_out,omitempty"`
	// NotSent: its tool did not send the call (see Result.NotSent).
	NotSent bool `json:"not_sent,omitempty"`
	// NotRun, if set, is why the call did not run, as its card's note
	// gave it: its resume found that it should not (see settle).
	NotRun string `json:"not_run,omitempty"`
}

// savedOf is res as it is saved.
func savedOf(res Result) savedResult {
	return savedResult{Result: res, Interrupted: res.interrupted, Unknown: res.unknown, NotSent: res.notSent}
}

// result is the saved result as the run that saved it had it.
func (s savedResult) result() Result {
	r := s.Result
	r.unknown, r.notSent = s.Unknown, s.NotSent
	return r
}

// interruptedResult is the result of an interrupted call of tool, saved
// so: as the first resume to find it so told it.
func (s savedResult) interruptedResult(tool string) Result {
	res := interruptedResult(tool)
	if s.Result.Content != "" {
		res.Content = s.Result.Content
	}
	return res
}

// startMark is a call marked as started by one attempt: BeginExecution's,
// or the step that claimed its run's resume (store.ResumeBegin.Nonce).
// Only that attempt takes the mark back (store AbandonExecution): a
// sending made again after another process marked the call since leaves
// that process's mark.
type startMark struct{ call, attempt string }

// abandon takes back the mark *m, on a call whose tool did not start, and
// clears *m. If that fails, a resume claimed again reports the call's
// outcome as unknown: it never runs twice.
func (a *Agent) abandon(ctx context.Context, m *startMark) {
	if m.call == "" {
		return
	}
	mark := *m
	*m = startMark{}
	if err := a.store.AbandonExecution(context.WithoutCancel(ctx), mark.call, mark.attempt); err != nil {
		a.log.Warn("take back the start of a call that did not run", "call", mark.call, "err", err)
	}
}

// NoteToolChanged is the note of an approved call that did not run
// because its tool's definition changed since it was approved (see
// changedArgs).
const NoteToolChanged = "the tool's definition changed since it was approved; ask again"

// changedArgs checks approved arguments, canonical as the call paused
// with them (or as an edit gave them), against the tool reg registers now:
// it says why they can no longer run as approved (the schema or the
// tool's own check refuses them, or the tool would get other arguments,
// such as a default it fills in that the card never showed), or returns
// "" if they can. What does not depend on the tool (their depth, text and
// keys) was checked when they were approved.
func changedArgs(reg *registered, args json.RawMessage) string {
	filled, err := reg.validate(args)
	if err != nil {
		return "it now refuses the approved arguments: " + err.Error()
	}
	if bytes.Equal(filled, args) {
		return "" // nothing filled in: the arguments as approved
	}
	// Defaults filled in, or arguments stored spelled otherwise than this
	// version's canonical form (by an earlier version's, say): the same
	// arguments if their canonical forms are.
	_, now, err := checkArgs(filled, func(a json.RawMessage) (json.RawMessage, error) { return a, nil })
	if err != nil {
		return "it now refuses the approved arguments: " + err.Error()
	}
	if _, approved, err := approvals.Fingerprint(args); err == nil && approved == now {
		return ""
	}
	return fmt.Sprintf("it would now run with %s instead of the approved %s", filled, args)
}

// sameArgs reports whether two calls' arguments are the same once
// canonical (the same fingerprint).
func sameArgs(x, y json.RawMessage) bool {
	_, fx, errX := approvals.Fingerprint(x)
	_, fy, errY := approvals.Fingerprint(y)
	return errX == nil && errY == nil && fx == fy
}

// executed is the audit entry of an approved call that ran with args.
func executed(c store.Call, d store.Decision, args json.RawMessage, res Result, detail string) store.AuditEntry {
	ranFP := c.Fingerprint
	if kindOf(&d) == approvals.Edit {
		if _, fp, err := approvals.Fingerprint(args); err == nil {
			ranFP = fp
		}
	}
	return store.AuditEntry{Actor: d.Decider, Action: "execute", Channel: c.Channel, Thread: c.Conversation, Tool: c.Tool, CallID: c.ID, Fingerprint: ranFP, Decision: d.Kind, Outcome: outcomeOf(res), Detail: detail}
}

// interruptedText is the result of an approved call that was running when
// the bot stopped, and is not run again.
// NoteInterrupted is the note of a call whose run was cut by a crash while
// it ran: its outcome is unknown, and it is not run again.
const NoteInterrupted = "interrupted: outcome unknown"

const interruptedText = "outcome unknown: the bot stopped while %s was running, so it may or may not have completed; it was not run again"

// interruptedResult is the result of a call of tool that the bot stopped
// while it ran (a crash, a shutdown, a lost lease), and that is not run
// again: it is reported as skipped with NoteInterrupted and audited with
// the outcome "unknown", not as a failure.
func interruptedResult(tool string) Result {
	return Result{Content: fmt.Sprintf(interruptedText, tool), IsError: true, interrupted: true}
}

// dropUnexecuted removes from the last assistant message the tool calls
// that did not run, so a stopped step leaves only what happened.
func dropUnexecuted(msgs []openai.ChatCompletionMessage, slots []slot) []openai.ChatCompletionMessage {
	if len(msgs) == 0 {
		return msgs
	}
	last := msgs[len(msgs)-1]
	ran := map[string]bool{}
	var kept []slot
	for _, s := range slots {
		if s.Ran {
			ran[s.ToolCallID] = true
			kept = append(kept, s)
		}
	}
	var calls []openai.ToolCall
	for _, tc := range last.ToolCalls {
		if ran[tc.ID] {
			calls = append(calls, tc)
		}
	}
	out := append([]openai.ChatCompletionMessage(nil), msgs[:len(msgs)-1]...)
	last.ToolCalls = calls
	if len(calls) == 0 && strings.TrimSpace(last.Content) == "" {
		return out
	}
	out = append(out, last)
	return append(out, toolMessages(kept)...)
}

// Sweep expires due calls and resumes steps that are decided but were never
// resumed (their resumer crashed). It is safe to run on every replica at
// once: expiry is a compare-and-set and each resume is claimed once. Each
// run to resume is passed to resume with its conversation key, so it may be
// scheduled with the conversation's other work; with a nil resume, Sweep
// calls Resume itself. It returns every error after doing
// what it can.
func (a *Agent) Sweep(ctx context.Context, resume func(runID, conversation string)) error {
	runs, err := a.expireDue(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	stalled, err := a.store.Stalled(ctx, 100)
	if err != nil {
		errs = append(errs, fmt.Errorf("list stalled runs: %w", err))
	}
	for _, id := range stalled {
		run, _, err := a.store.LoadRun(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("load stalled run %s: %w", id, err))
			continue
		}
		a.resumable.add(id, run.Conversation)
		runs = append(runs, runRef{id, run.Conversation})
	}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.run] {
			continue
		}
		seen[r.run] = true
		if resume != nil {
			resume(r.run, r.conversation)
			continue
		}
		if _, err := a.Resume(ctx, r.run); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Pending lists pending calls matching f (for inboxes and /approvals
// pending), with what a card needs.
func (a *Agent) Pending(ctx context.Context, f store.Filter) ([]PendingCall, error) {
	calls, err := a.store.Pending(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("list pending calls: %w", err)
	}
	return a.pendingOf(calls), nil
}

// Call returns a paused call (pending or decided) with what a card needs.
func (a *Agent) Call(ctx context.Context, callID string) (PendingCall, error) {
	c, err := a.store.GetCall(ctx, callID)
	if errors.Is(err, store.ErrNotFound) {
		return PendingCall{}, fmt.Errorf("call %s: %w", callID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return PendingCall{}, fmt.Errorf("call %s: %w", callID, err)
	}
	p := PendingCall{Call: viewOf(c)}
	if t, ok := a.tools.Lookup(c.Tool); ok {
		p.Human, p.Schema = t.Human, t.Schema
	}
	return p, nil
}

// News is the news about call callID as the store has it now, for a card
// that may show older news than another process rendered (see
// slackapp): PhaseCounted for a pending call; PhaseSkipped for one that
// expired, was cancelled, or was decided not to run (its decision says
// how), for one cut by a crash as it ran (NoteInterrupted), and for one
// its resume found should not run (its note says why: see settle);
// PhaseExecuted, with its result, for one whose result is saved; and
// PhaseDecided for one decided to run whose result is not saved: running,
// or, with Unstarted, not started (StepPending is not known).
// approvals.ErrUnknownCall for an unknown call.
func (a *Agent) News(ctx context.Context, callID string) (CallUpdate, error) {
	c, err := a.store.GetCall(ctx, callID)
	if errors.Is(err, store.ErrNotFound) {
		return CallUpdate{}, fmt.Errorf("call %s: %w", callID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return CallUpdate{}, fmt.Errorf("call %s: %w", callID, err)
	}
	u := CallUpdate{Call: viewOf(c), Phase: PhaseDecided}
	var saved savedResult
	isSaved := len(c.Result) > 0 && json.Unmarshal(c.Result, &saved) == nil
	switch {
	case c.Status == store.Pending:
		u.Phase = PhaseCounted
	case c.Status == store.Expired || c.Decision == nil:
		u.Phase, u.Note = PhaseSkipped, "expired"
	case c.Status == store.Cancelled:
		u.Phase, u.Note = PhaseSkipped, "cancelled by the requester"
	case !kindOf(c.Decision).Runs():
		u.Phase = PhaseSkipped
	case isSaved && saved.Interrupted:
		u.Phase, u.Note, u.Result = PhaseSkipped, NoteInterrupted, saved.interruptedResult(c.Tool)
	case isSaved && saved.NotRun != "":
		u.Phase, u.Note, u.Result = PhaseSkipped, saved.NotRun, saved.result()
	case isSaved:
		u.Phase, u.Result = PhaseExecuted, saved.result()
	default:
		u.Unstarted = !c.Executing
	}
	return u, nil
}

// claimed is what BeginResume started, with the time its request was
// sent: the claim is this process's for LeaseTTL from then.
type claimed struct {
	store.ResumeStart
	// nonce names the attempt that took the claim (and the mark of the
	// call in Started).
	nonce string
	at    time.Time
	// owner names the claim in the store: the lease's holder when it
	// took the lease too (see leases.newHolder).
	owner string
}
