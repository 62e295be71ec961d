package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// click is one button press, with where to answer the clicker.
type click struct {
	user, channel, actionID, value, triggerID string
	// thread is the thread the button is in ("": none), where the
	// clicker's private answers go.
	thread string
	// conversation is the conversation of the thread the button is in ("":
	// none, as for a copy of a card in a direct message).
	conversation string
	// redelivered reports whether the click's envelope was seen before,
	// by any replica; it asks the store at most once per envelope.
	redelivered func() bool
	// retried is set on an envelope Slack delivers again (its ack was
	// missed: a lost connection).
	retried bool
}

// madeBefore reports whether err, the refusal of c's decision of kind,
// refuses the decision c made itself before: a click Slack delivered
// again whose first delivery was decided (which never marked its envelope
// seen). Another decision of the clicker's (Deny after their Approve) is
// not: they are told it changed nothing. An Edit approves too: its first
// delivery may have been counted as its submitter's approval (an edit
// pending on a call that needs several approvers), or, when it changed
// nothing (res.EditUnchanged), taken as an Approve; an Edit that changed
// the arguments is not an Approve of the clicker's, which ran the others.
func (c click) madeBefore(err error, kind approvals.Kind, res agent.DecideResult) bool {
	if !c.retried {
		return false
	}
	approves := kind == approvals.Approve || kind == approvals.Remember || kind == approvals.Edit
	if refused, ok := errors.AsType[*approvals.RefusedError](err); ok && errors.Is(err, approvals.ErrAlreadyDecided) {
		asApprove := approves && (kind != approvals.Edit || res.EditUnchanged)
		return refused.DecidedBy == c.user && (refused.Kind == kind || asApprove && refused.Kind == approvals.Approve)
	}
	return approves && errors.Is(err, approvals.ErrAlreadyApproved)
}

// submitFailedText answers a modal submission whose handler failed
// unexpectedly, perhaps after recording the decision.
const submitFailedText = "Something went wrong, and I can't tell whether your decision was recorded. The card shows where the call stands."

// submitAckWait is how long the ack of a modal submission waits for the
// decision to carry its outcome (Slack wants the ack within 3 s). Past it
// the ack keeps the modal open with submitSlowText, and the outcome is told
// privately once the store answers.
const submitAckWait = 2 * time.Second

// submitSlowText keeps a modal open when the store is too slow to decide
// within submitAckWait.
const submitSlowText = "My state store is slow to answer, so your decision is not recorded yet. I'll tell you in a direct message whether it was; you can close this form."

// submitRecordedLateText tells the submitter that a decision the store was
// slow to record was recorded.
const submitRecordedLateText = "Your decision was recorded after all; the card shows where the call stands."

// onInteractive handles block actions (acked at once, then worked on) and
// view submissions (acked with the outcome: a modal with an invalid input
// stays open with the error shown inline). Each runs in its own goroutine,
// never behind a conversation's turn. A submission that does not decode is
// logged and acked.
func (a *App) onInteractive(ctx context.Context, env *envelope, start time.Time) {
	in := &env.Payload
	switch slack.InteractionType(in.Type) {
	case slack.InteractionTypeBlockActions:
		// The click's work starts first, and runs while the ack is
		// written.
		defer a.ack(env, nil, start)
		a.spawn(ctx, "click", func(ctx context.Context) {
			redelivered := sync.OnceValue(func() bool { return !a.firstTime(ctx, "envelope:"+env.ID) })
			conversation := ""
			if in.Team.ID != "" && in.Channel.ID != "" && in.Container.ThreadTS != "" {
				conversation = ConversationKey(a.conversationTeam(in.Team.ID), in.Channel.ID, in.Container.ThreadTS)
			}
			a.noteTeam(in.User.ID, in.User.TeamID)
			for _, act := range in.Actions {
				c := click{user: in.User.ID, channel: in.Channel.ID, thread: in.Container.ThreadTS, conversation: conversation, actionID: act.ActionID, value: act.Value, triggerID: in.TriggerID, redelivered: redelivered, retried: env.RetryAttempt > 0}
				a.onClick(ctx, c)
			}
		})
	case slack.InteractionTypeViewSubmission:
		var cb slack.InteractionCallback
		if err := env.decodePayload(&cb); err != nil {
			a.malformed(env, err, start)
			return
		}
		// The ack carries the outcome, so it waits for the decision, but
		// never past submitAckWait, whatever the store is doing; that work
		// runs off the event loop, which must keep draining envelopes.
		k := a.acker(env, start)
		a.noteTeam(cb.User.ID, cb.User.TeamID)
		a.spawn(ctx, "submission", func(ctx context.Context) {
			// Deferred here, it runs before spawn recovers a panic: the
			// submission is answered whatever happens.
			defer k.ack(viewError(cb.View.CallbackID, submitFailedText))
			slowAck := func() { k.ack(viewError(cb.View.CallbackID, submitSlowText)) }
			slow := time.AfterFunc(submitAckWait, slowAck)
			resp, text := a.onSubmit(ctx, cb, env.RetryAttempt > 0)
			if slow.Stop() {
				k.ack(resp)
				return
			}
			// The timer fired: the ack goes (or went) without the outcome,
			// which is told privately. Acking here too waits for the
			// timer's ack, or makes it.
			slowAck()
			if resp == nil {
				text = submitRecordedLateText
			}
			a.tell(ctx, cb.User.ID, "", "", text)
		})
	default:
		a.ack(env, nil, start)
	}
}

// onClick routes a button by its action id. It runs in a handler, off the
// event loop.
//
// A redelivered envelope is dropped. A decision is not checked for that
// first: the store decides atomically and refuses a second decision, so
// only a refusal asks whether the click was a redelivery, to tell the
// clicker once. A click Slack delivered again that is refused as the
// clicker's own decision is taken for its first delivery's (madeBefore),
// and dropped too; nothing runs twice.
func (a *App) onClick(ctx context.Context, c click) {
	switch c.actionID {
	case ActionApprove, ActionDeny, ActionRemember, ActionRememberExact:
	default:
		if c.redelivered() {
			a.m.duplicate()
			return
		}
	}
	switch c.actionID {
	case ActionApprove:
		a.decideClick(ctx, c, approvals.Approve)
	case ActionDeny:
		a.decideClick(ctx, c, approvals.Refuse)
	case ActionRemember, ActionRememberExact:
		a.decideClick(ctx, c, approvals.Remember)
	case ActionCancel:
		a.cancelClick(ctx, c)
	case ActionRevokeRule:
		a.revokeFromHome(ctx, c)
	case ActionWhy:
		a.whyClick(ctx, c)
	case ActionReject, ActionEdit, ActionRespond, ActionViewArgs, ActionViewModelArgs, ActionViewPreview:
		// A trigger id is good for 3 s: open the modal now.
		a.openModal(ctx, c)
	}
}

// decideClick records a button decision at once (the store decides
// atomically, whatever the conversation is doing) and tells the clicker
// when it was refused.
func (a *App) decideClick(ctx context.Context, c click, kind approvals.Kind) {
	text, again := InvalidRequestText(), false
	if validToken(c.value) {
		callID, fp := parseToken(c.value)
		text, again = a.decide(ctx, c, approvals.Decision{CallID: callID, Fingerprint: fp, Kind: kind, Decider: c.user, Exact: c.actionID == ActionRememberExact})
	} else {
		a.m.decision(string(kind), "invalid", 0)
	}
	switch {
	case text == "" && !again:
	case again || c.redelivered():
		a.m.duplicate()
	default:
		a.tell(ctx, c.user, c.channel, c.thread, text)
	}
}

// decide records a decision and, when it was the last one pending, has
// the step resumed: at once, by the click's own goroutine (whose stack
// the decision grew already), with the decision's own store step having
// begun the resume, when a turn slot is free and the conversation has no
// work in this process (see decideFast); otherwise on the conversation's
// queue, after whatever the conversation is doing. It returns the text to
// tell the decider when the decision was refused or failed, and "" on
// success, once the resume run at once is over; again is set, with
// nothing counted, for a refusal of the clicker's own decision made by
// an earlier delivery of the click (see click.madeBefore). A click on a
// call that is not saved yet is decided once it is (see afterPause).
func (a *App) decide(ctx context.Context, c click, d approvals.Decision) (text string, again bool) {
	var res agent.DecideResult
	var fast *fastResume
	var err error
	for try := 0; try < 2; try++ {
		res, fast, err = a.decideFast(ctx, c, d)
		if try > 0 || !a.afterPause(ctx, c, d.CallID, err) {
			break
		}
	}
	kind := string(d.Kind)
	if err != nil && c.madeBefore(err, d.Kind, res) {
		return "", true
	}
	if u, ok := errors.AsType[*agent.UnconfirmedError](err); ok {
		// What its step may have taken is given back once the store
		// answers again, however long that takes; a decision found
		// recorded is resumed then.
		a.spawn(ctx, "recover decision", func(ctx context.Context) {
			if u.Recover(ctx) {
				a.resumeLater(ctx, u.Conversation, u.RunID)
			}
		})
	}
	if err != nil {
		text, result := a.refusalFor(ctx, res.Call, d.Decider, err)
		a.m.decision(kind, result, 0)
		if result == "error" {
			a.log.Error("record decision", "call", d.CallID, "err", err)
		}
		return text, false
	}
	a.m.decision(kind, "ok", decidedAfter(res.Call))
	switch {
	case fast != nil:
		fast.run(ctx)
	case res.Complete:
		a.resumeLater(ctx, res.Call.Conversation, res.Call.RunID)
	}
	if res.Unremembered {
		return UnrememberedText(), false
	}
	if res.Unaudited != nil {
		return strings.TrimPrefix(notAudited(res.Unaudited), "\n"), false
	}
	return "", false
}

// fastResume is a resume that a decision began in this process and that
// runs at once, under a turn slot, as the server of its conversation's
// queue: messages the conversation gets meanwhile queue behind it, as
// behind a turn.
type fastResume struct {
	a       *App
	taken   *agent.Taken
	key     string // the conversation
	runID   string
	q       *queue
	release func() // the turn slot
}

// run resumes the step, then gives back the slot and hands what was
// queued behind it to a goroutine of its own (see handOn), a panic
// included.
func (f *fastResume) run(ctx context.Context) {
	a := f.a
	defer func() {
		f.release()
		a.handOn(ctx, f.key, f.q)
	}()
	if ctx.Err() != nil {
		a.ag.ReleaseTaken(ctx, f.taken)
		a.log.Warn("shutting down before a resume; the sweep resumes it", "run", f.runID)
		return
	}
	out, err := a.ag.ResumeTaken(ctx, f.taken)
	a.resumed(ctx, f.key, f.runID, out, err)
}

// decideFast decides d and takes the resume the decision begins
// (agent.DecideTaking) when this process can run it at once: a turn slot
// is free and the conversation has no queue here, which the resume then
// serves. A click in the conversation's thread reserves both before the
// decision, so a message the thread gets meanwhile waits behind the
// resume (and the conversation's other work waits for the decision, one
// store step); a click elsewhere (a copy, the Home tab) learns the conversation
// from the decision, and leaves the resume to the conversation's queue
// when it has one. Otherwise d is only decided.
func (a *App) decideFast(ctx context.Context, c click, d approvals.Decision) (res agent.DecideResult, fast *fastResume, err error) {
	var q *queue
	var release func()
	if c.conversation != "" {
		var s *slot
		if q, s = a.reserve(c.conversation); s != nil {
			release = s.release
		}
	} else if a.slots.TryAcquire(1) {
		release = a.heldSlot().release
	}
	if release == nil {
		res, err = a.ag.Decide(ctx, d)
		return res, nil, err
	}
	var taken *agent.Taken
	// Unless the resume was taken, the slot and the reserved queue go
	// back, a panic included; so does a resume taken but not handed on.
	defer func() {
		if fast != nil {
			return
		}
		release()
		if taken != nil {
			a.ag.ReleaseTaken(context.WithoutCancel(ctx), taken)
		}
		if q != nil {
			a.handOn(ctx, c.conversation, q)
		}
	}()
	res, taken, err = a.ag.DecideTaking(ctx, d)
	if taken == nil {
		return res, nil, err
	}
	key := res.Call.Conversation
	switch {
	case q == nil:
		if q = a.claimQueue(key); q == nil {
			return res, nil, err // the resume waits behind the queue's work
		}
	case key != c.conversation:
		return res, nil, err // not the thread's conversation: on its queue
	}
	return res, &fastResume{a: a, taken: taken, key: key, runID: res.Call.RunID, q: q, release: release}, err
}

// handOn starts a goroutine of the app's to serve q, a queue the caller
// reserved and stops serving, so that the caller does not wait for the
// work queued behind its own. A click hands its conversation's queue on
// before its clicker is told how the decision went: a message queued
// behind the decision meanwhile runs a whole turn, which the answer to the
// clicker must not wait for.
func (a *App) handOn(ctx context.Context, key string, q *queue) {
	a.spawn(ctx, "queue", func(ctx context.Context) { a.serve(ctx, key, q) })
}

// afterPause reports whether a click on callID's card that err answered
// should be tried again: the call was not found, and the click's thread is
// a conversation, whose turn may hold it while it saves the pause whose
// card was clicked (the card is posted first, so that where it is is saved
// with the call: see agent.Announcer). It returns true once no turn holds
// the conversation; the call is then saved, or will never be. When a turn
// of this process holds the conversation and is not posting that card, it
// is not the one saving it (only the holder writes the pause): it is tried
// again at once, for a pause saved just before, rather than after a turn
// that may run for minutes.
func (a *App) afterPause(ctx context.Context, c click, callID string, err error) bool {
	if !errors.Is(err, approvals.ErrUnknownCall) || c.conversation == "" {
		return false
	}
	if a.ag.HoldsHere(c.conversation) && !a.cards.announcing(callID) {
		return true
	}
	a.log.Debug("click on a call not found; waiting for the turn that may be saving it", "conversation", c.conversation)
	if err := a.ag.AwaitTurn(ctx, c.conversation); err != nil {
		a.log.Warn("wait for the turn that may be saving the clicked call", "conversation", c.conversation, "err", err)
		return false
	}
	return true
}

// resumeLater queues the resume of a run that a person's decision
// completed on its conversation's queue. Its thread is told if it, or work
// queued ahead of it, waits long for a turn slot (see turnSlot): people
// wait for it.
func (a *App) resumeLater(ctx context.Context, conversation, runID string) {
	a.enqueueAsked(ctx, conversation, func(ctx context.Context) { a.resumeQueued(ctx, conversation, runID, true) })
}

// resumeFound queues the resume of a run that the sweep or the expiry
// found decided on its conversation's queue. Nobody in the thread asked
// for it, so its thread is not told when it waits for a turn slot.
func (a *App) resumeFound(ctx context.Context, conversation, runID string) {
	a.enqueue(ctx, conversation, func(ctx context.Context) { a.resumeQueued(ctx, conversation, runID, false) })
}

// resume runs the resume of a run whose step is decided, on its
// conversation's queue, once a turn slot is free.
func (a *App) resume(ctx context.Context, conversation, runID string) {
	out, err := a.ag.Resume(ctx, runID)
	a.resumed(ctx, conversation, runID, out, err)
}

// resumed reports how a resume ended.
func (a *App) resumed(ctx context.Context, conversation, runID string, out agent.Outcome, err error) {
	if out.Status != agent.Idle {
		a.m.turn(string(out.Status), err)
	}
	switch {
	case err == nil:
	case errors.Is(err, agent.ErrLeaseLost):
		a.handOver(ctx, conversation, err)
	case errors.Is(err, agent.ErrLeaseTimeout):
		// Another process held the conversation all along; the run is
		// still decided and unclaimed, so the sweep resumes it. The
		// thread has nothing to act on.
		a.log.Warn("resume waited too long for the conversation; the sweep retries", "run", runID, "err", err)
	case agent.Interrupted(err):
		a.log.Warn("resume cut short by the shutdown; it goes on after the restart", "run", runID, "err", err)
		a.postFailure(ctx, conversation, err)
	default:
		a.log.Error("resume failed", "run", runID, "err", err)
		a.postFailure(ctx, conversation, err)
	}
}

// resumeQueued is a queued resume: one that had not started by the end of
// the shutdown grace period is left to the sweep of the next process. tell
// is turnSlot's.
func (a *App) resumeQueued(ctx context.Context, conversation, runID string, tell bool) {
	if ctx.Err() != nil {
		a.log.Warn("shutting down before a queued resume; the sweep resumes it", "run", runID)
		return
	}
	s, err := a.turnSlot(ctx, conversation, tell)
	if err != nil {
		a.log.Warn("shutting down before a queued resume; the sweep resumes it", "run", runID)
		return
	}
	defer s.release()
	a.resume(s.during(ctx), conversation, runID)
}

// decidedAfter is how long c waited for its decision, once decided; zero
// for an approval counted toward a call that still waits for more.
func decidedAfter(c agent.Call) time.Duration {
	if c.Status == agent.CallPending {
		return 0
	}
	return time.Since(c.CreatedAt)
}

// refusalFor is refusalText for a refusal told to user, who learns
// nothing of a call they may not see (who decided it, who may, who asked
// for it: a button's value is all it takes to ask), only that it is not
// theirs.
func (a *App) refusalFor(ctx context.Context, c agent.Call, user string, err error) (text, result string) {
	text, result = refusalText(c, user, err)
	if c.ID != "" && result != "error" && !a.maySee(ctx, c, user) {
		text = NotInConversationText()
	}
	return text, result
}

// refusalText explains a refused decision to the decider, and names the
// refusal for metrics.
func refusalText(c agent.Call, decider string, err error) (text, result string) {
	var refused *approvals.RefusedError
	switch {
	case errors.As(err, &refused) && errors.Is(err, approvals.ErrAlreadyDecided):
		return AlreadyDecidedText(refused.DecidedBy, refused.Kind, refused.DecidedAt), "already_decided"
	case errors.Is(err, approvals.ErrUnverified):
		// Not "not an approver": that may be false, and says nothing of
		// trying again.
		return UnverifiedText(), "error"
	case errors.Is(err, approvals.ErrNotApprover):
		requester := decider == c.Requester || slices.Contains(c.Requesters, decider)
		if c.FourEyes && requester {
			return RequesterCannotApproveText(), "not_approver"
		}
		if rule, ok := errors.AsType[*agent.RuleError](err); ok {
			// The card named the decider: the rule the call falls under
			// now does not, and says who it lets approve.
			if rule.FourEyes && requester {
				return RequesterCannotApproveText(), "not_approver"
			}
			return RuleApproversText(rule.RuleID, rule.Approvers, rule.Edit), "not_approver"
		}
		if c.Edited && len(c.CardApprovers) > 0 && !slices.ContainsFunc(c.Approvers, func(id string) bool { return slices.Contains(c.CardApprovers, id) }) {
			return NotApproverOfBothText(c.Approvers, c.CardApprovers), "not_approver"
		}
		if ms := approverMentions(c.Approvers); c.NeedsAudience && len(ms) > 0 {
			// Being named is not enough: a call edited into a rule that
			// names no approvers, or a card whose rule names none, is
			// decided only by those it names who can see the
			// conversation, as the agent checks on every decision. They
			// are named with that condition rather than each looked up.
			list := joinAnd(ms, "and")
			if len(ms) > maxListed {
				list = cappedList(ms, ", ", maxListed)
			}
			who := "those of " + list + " who are in the conversation"
			if len(ms) == 1 && strings.HasPrefix(ms[0], "<@") {
				who = ms[0] + ", if they are in the conversation"
			}
			return "You are not an approver for this call, so nothing changed. It can be decided by " + who + ".", "not_approver"
		}
		return NotApproverText(c.Approvers), "not_approver"
	case errors.Is(err, approvals.ErrAlreadyApproved):
		return AlreadyApprovedText(len(c.Approvals), c.MinApprovals), "already_approved"
	case errors.Is(err, approvals.ErrFingerprintMismatch):
		return ChangedArgsText(), "fingerprint_mismatch"
	case errors.Is(err, approvals.ErrExpired):
		return ExpiredText(), "expired"
	case errors.Is(err, approvals.ErrUnknownCall):
		return "I don't know this request any more (it may have finished long ago). Nothing changed.", "unknown"
	case errors.Is(err, approvals.ErrPolicyDenied):
		text := "The policy now denies this call: " + Escape(agent.Detail(err))
		if p := agent.Problem(err); p != "" {
			// It may quote the arguments: shown as code.
			shown, _ := revealHidden(clip(oneLine(p), 300))
			text += " (could not evaluate: " + inlineCode(shown) + ")"
		}
		return text + ". Nothing ran.", "policy_denied"
	case errors.Is(err, agent.ErrBadDecision):
		return Escape(badDecisionText(err)), "invalid"
	case errors.Is(err, approvals.ErrInvalidArgs):
		return Escape("These arguments are not valid: " + agent.Detail(err) + ". Nothing changed."), "invalid"
	case errors.Is(err, store.ErrStale):
		return ChangedWhileCheckedText(), "changed"
	case errors.Is(err, agent.ErrCountedMeanwhile):
		return CountedWhileCheckedText(), "changed"
	case errors.Is(err, agent.ErrUnconfirmed) && errors.Is(err, store.ErrNotReplicated):
		return DecisionUnreplicatedText(), "error"
	case errors.Is(err, agent.ErrUnconfirmed):
		return DecisionUnconfirmedText(), "error"
	default:
		return DecisionFailedText(), "error"
	}
}

// cancelClick stops a paused turn on behalf of its requester, at once
// (each call is cancelled atomically in the store); the resume that ends
// the step goes on the conversation's queue. A requester who may no
// longer see the call (who left its private channel) no longer cancels
// it, as they no longer decide it; a call that cannot be read (a store
// error, a value naming no call of the run) is not cancelled, as that
// cannot be checked.
func (a *App) cancelClick(ctx context.Context, c click) {
	if !validToken(c.value) {
		a.tell(ctx, c.user, c.channel, c.thread, InvalidRequestText())
		return
	}
	callID, _ := parseToken(c.value)
	pc, err := a.clickedCall(ctx, c, callID)
	if err != nil {
		text, result := refusalText(agent.Call{}, c.user, err)
		if result == "error" {
			a.log.Error("read the call of a Cancel", "call", callID, "err", err)
		}
		a.m.decision("cancel", result, 0)
		a.tell(ctx, c.user, c.channel, c.thread, text)
		return
	}
	switch ok, err := a.maySeeChecked(ctx, pc.Call, c.user); {
	case err != nil:
		a.m.decision("cancel", "error", 0)
		a.tell(ctx, c.user, c.channel, c.thread, UnverifiedText())
		return
	case !ok:
		a.m.decision("cancel", "not_approver", 0)
		a.tell(ctx, c.user, c.channel, c.thread, NotInConversationText())
		return
	}
	runID := store.RunOf(callID)
	res, err := a.ag.Cancel(ctx, runID, c.user)
	if a.afterPause(ctx, c, callID, err) {
		res, err = a.ag.Cancel(ctx, runID, c.user)
	}
	if err != nil {
		text, result := a.refusalFor(ctx, res.Call, c.user, err)
		if errors.Is(err, approvals.ErrNotApprover) {
			text = NotInConversationText()
			if pc, err := a.ag.Call(ctx, callID); err == nil && a.maySee(ctx, pc.Call, c.user) {
				text = NotRequesterText(pc.Requester, pc.Requesters...)
			}
		}
		a.m.decision("cancel", result, 0)
		if result == "error" {
			a.log.Error("cancel", "run", runID, "err", err)
		}
		a.tell(ctx, c.user, c.channel, c.thread, text)
		return
	}
	a.m.decision("cancel", "ok", 0)
	if res.Complete {
		a.resumeLater(ctx, res.Call.Conversation, runID)
	}
}

// clickedCall returns the call whose card's button c is, once it is saved
// (see afterPause).
func (a *App) clickedCall(ctx context.Context, c click, callID string) (agent.PendingCall, error) {
	pc, err := a.ag.Call(ctx, callID)
	if a.afterPause(ctx, c, callID, err) {
		pc, err = a.ag.Call(ctx, callID)
	}
	return pc, err
}

// openModal opens the modal of a Reject, Edit, Reply or View button.
func (a *App) openModal(ctx context.Context, c click) {
	if !validToken(c.value) {
		a.tell(ctx, c.user, c.channel, c.thread, InvalidRequestText())
		return
	}
	callID, _ := parseToken(c.value)
	pc, err := a.clickedCall(ctx, c, callID)
	if err != nil {
		text, _ := refusalText(agent.Call{}, c.user, err)
		a.tell(ctx, c.user, c.channel, c.thread, text)
		return
	}
	if c.actionID == ActionViewArgs || c.actionID == ActionViewModelArgs || c.actionID == ActionViewPreview {
		if !a.maySee(ctx, pc.Call, c.user) {
			a.tell(ctx, c.user, c.channel, c.thread, NotInConversationText())
			return
		}
	} else {
		if pc.Status != agent.CallPending {
			text := NotInConversationText()
			if a.maySee(ctx, pc.Call, c.user) {
				text = refusedText(pc.Call)
			}
			a.tell(ctx, c.user, c.channel, c.thread, text)
			return
		}
		// Check before opening the form, so nobody fills in a form that
		// will be refused. The decision is checked again on submit.
		if text := a.formRefusal(ctx, pc.Call, c.user); text != "" {
			a.tell(ctx, c.user, c.channel, c.thread, text)
			return
		}
	}
	var view slack.ModalViewRequest
	switch c.actionID {
	case ActionReject:
		view = RejectModal(c.value)
	case ActionEdit:
		view = EditModal(c.value, pc.Tool, pc.Args, pc.Schema)
	case ActionRespond:
		view = RespondModal(c.value, cardOf(pc, nil).Question)
	case ActionViewArgs:
		view = ArgsModal(pc.Tool, pc.Args)
		if d := pc.Decision; d != nil && d.Kind == approvals.Edit && len(d.Args) > 0 {
			view = EditedArgsModal(pc.Tool, d.Args)
		}
	case ActionViewModelArgs:
		view = ArgsModal(pc.Tool, pc.Args)
	case ActionViewPreview:
		view = PreviewModal(pc.Tool, pc.Preview)
	}
	if _, err := a.api.OpenViewContext(ctx, c.triggerID, view); err != nil {
		a.log.Warn("open modal", "action", c.actionID, "err", err)
		a.tell(ctx, c.user, c.channel, c.thread, "I couldn't open the form (Slack allows 3 seconds for that). Please click again.")
	}
}

// refusedText explains that a call is no longer pending.
func refusedText(c agent.Call) string {
	if c.Decision != nil {
		return AlreadyDecidedText(c.Decision.Decider, c.Decision.Kind, c.Decision.At)
	}
	var kind approvals.Kind
	switch c.Status {
	case agent.CallExpired:
		kind = approvals.Expire
	case agent.CallCancelled:
		kind = approvals.Cancel
	}
	return AlreadyDecidedText("", kind, time.Time{})
}

// onSubmit handles a modal submission. It returns the ack payload (nil to
// close the modal, or errors to show inline) and, with errors, their text
// in mrkdwn, to tell the submitter privately once the ack has gone. A
// submission Slack delivered again (retried: its first ack was missed)
// that is refused as the submitter's own decision of the same kind is
// taken for its first delivery's, as a click is (see click.madeBefore):
// the form closes, and nothing is counted twice.
func (a *App) onSubmit(ctx context.Context, cb slack.InteractionCallback, retried bool) (*slack.ViewSubmissionResponse, string) {
	value := ReadCallID(cb.View)
	callID, fp := parseToken(value)
	d := approvals.Decision{CallID: callID, Fingerprint: fp, Decider: cb.User.ID}
	block := submitBlock(cb.View.CallbackID)
	refuse := func(plain string) (*slack.ViewSubmissionResponse, string) {
		return slack.NewErrorsViewSubmissionResponse(map[string]string{block: clip(plain, 1000)}), Escape(plain)
	}
	if !validToken(value) {
		return refuse(InvalidRequestText())
	}
	switch cb.View.CallbackID {
	case CallbackReject:
		d.Kind, d.Reason = approvals.Reject, ReadRejectReason(cb.View)
	case CallbackRespond:
		d.Kind, d.Answer = approvals.Respond, ReadAnswer(cb.View)
	case CallbackEdit:
		d.Kind = approvals.Edit
		raw := strings.TrimSpace(ReadEditedArgs(cb.View))
		if !json.Valid([]byte(raw)) {
			return refuse(jsonProblem(raw))
		}
		d.Args = json.RawMessage(raw)
	default:
		return nil, ""
	}
	res, err := a.ag.Decide(ctx, d)
	if err != nil && (click{user: d.Decider, retried: retried}).madeBefore(err, d.Kind, res) {
		a.m.duplicate()
		return nil, ""
	}
	if err != nil {
		// Someone who may no longer see the call (they left its channel
		// since the form opened) learns only that it is not theirs.
		text, result := a.refusalFor(ctx, res.Call, d.Decider, err)
		a.m.decision(string(d.Kind), result, 0)
		if result == "error" {
			a.log.Error("record decision", "call", d.CallID, "err", err)
		}
		if result == "invalid" || result == "policy_denied" {
			// Plain text made from the words the refusal carries for
			// a person, never from the error's own text.
			if errors.Is(err, agent.ErrBadDecision) {
				return refuse(badDecisionText(err))
			}
			plain := agent.Detail(err)
			if p := agent.Problem(err); p != "" {
				plain += " (could not evaluate: " + clip(oneLine(p), 300) + ")"
			}
			if result == "policy_denied" {
				what := "this call"
				if d.Kind == approvals.Edit {
					what = "the call with these arguments"
				}
				plain = "The policy denies " + what + ": " + plain + ". Nothing ran."
			}
			return refuse(plain)
		}
		// An error under a modal input is plain text, not mrkdwn.
		resp, _ := refuse(modalText(text))
		return resp, text
	}
	a.m.decision(string(d.Kind), "ok", decidedAfter(res.Call))
	if res.Complete {
		a.resumeLater(ctx, res.Call.Conversation, res.Call.RunID)
	}
	return nil, ""
}

// badDecisionText explains a decision refused as not fitting the call
// (agent.ErrBadDecision), in plain text: the words the agent gives for a
// person (agent.Detail), as a sentence.
func badDecisionText(err error) string {
	s := strings.TrimSpace(agent.Detail(err))
	if s == "" {
		return "This decision does not fit the call, so nothing changed."
	}
	r, n := utf8.DecodeRuneInString(s)
	s = string(unicode.ToUpper(r)) + s[n:]
	if !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s + " Nothing changed."
}

// submitBlock is the input block of a decision modal, where its errors
// show.
func submitBlock(callbackID string) string {
	switch callbackID {
	case CallbackReject:
		return BlockRejectReason
	case CallbackRespond:
		return BlockAnswer
	case CallbackEdit:
		return BlockEditArgs
	}
	return ""
}

// jsonProblem says, in plain words, why raw, typed into a form, is not
// valid JSON, and where. JSON typed in Slack on a phone, or with smart
// punctuation on, has typographic quotes: it is told so, and not read as
// if its quotes were straight, which would change any inside its strings.
func jsonProblem(raw string) string {
	if json.Valid([]byte(approvals.NormalizeText(raw))) {
		return "Not valid JSON: its quotes are typographic (“ ” or ‘ ’), as Slack may write them on a phone or with smart punctuation on. Type them as straight quotes (\")."
	}
	var v any
	err := json.Unmarshal([]byte(raw), &v)
	se, ok := errors.AsType[*json.SyntaxError](err)
	if !ok || se.Offset <= 0 || se.Offset > int64(len(raw)) {
		return "Not valid JSON: " + errString(err)
	}
	// The offset is past the byte that was refused: the line and column
	// are those of the character it begins, counted in characters.
	at := int(se.Offset) - 1
	for at > 0 && !utf8.RuneStart(raw[at]) {
		at--
	}
	before := raw[:at]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	what := se.Error()
	if r, _ := utf8.DecodeRuneInString(raw[at:]); r >= utf8.RuneSelf {
		// Go names a character by its first byte ('â' for “).
		what = fmt.Sprintf("unexpected character %q (U+%04X)", r, r)
	}
	return fmt.Sprintf("Not valid JSON at line %d, column %d: %s", line, col, what)
}

func errString(err error) string {
	if err == nil {
		return "unexpected input"
	}
	return err.Error()
}

// plainText strips mrkdwn escapes for a plain-text error under a modal input.
func plainText(s string) string {
	return unescapeEntities.Replace(s)
}

// clip shortens s to at most n characters, marking the cut.
func clip(s string, n int) string {
	out, _ := truncate(s, n)
	return out
}

// tell answers one person privately: an ephemeral message in the channel
// (in the thread, when thread is set: where they clicked), or a DM where
// there is no channel (a click in App Home). Like post, it
// is not cancelled with ctx: the answer to a click matters most when the
// bot is shutting down. It ends at the shutdown deadline, and past it the
// answer is logged instead.
func (a *App) tell(ctx context.Context, user, channel, thread, text string) {
	ctx, cancel, ok := a.noteContext(ctx, 10*time.Second)
	defer cancel()
	if !ok {
		a.log.Warn("shutdown deadline passed; answer not sent", "user", user, "text", clip(text, 200))
		return
	}
	if channel != "" {
		opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
		if thread != "" {
			opts = append(opts, slack.MsgOptionTS(thread))
		}
		if _, err := a.api.PostEphemeralContext(ctx, channel, user, opts...); err == nil {
			return
		} else {
			a.log.Warn("post ephemeral", "channel", channel, "err", err)
		}
	}
	ch, _, _, err := a.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{user}, ReturnIM: true})
	if err != nil {
		a.log.Error("open DM", "user", user, "err", err)
		return
	}
	a.post(ctx, ch.ID, "", text)
}
