package agent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// convState is what a conversation keeps between turns. While the
// conversation is paused its history lives in the run, and Queued holds the
// messages that arrived meanwhile.
type convState struct {
	Messages history         `json:"messages,omitempty"`
	Queued   []queuedMessage `json:"queued,omitempty"`
	// InboxSeq is the last message of the store's inbox that Messages or
	// Queued hold; later ones are still to be answered.
	InboxSeq int64 `json:"inbox_seq,omitempty"`
	// Step is set while a turn runs the calls of a model step that may not
	// be repeated (see stepMark); Messages then end with that step.
	Step *stepMark `json:"step,omitempty"`
	// Skipped counts messages left out of Queued, the oldest first, to
	// keep it within maxQueued (see boundQueued); the turn that answers
	// Queued tells the model.
	Skipped int `json:"skipped,omitempty"`
}

// maxQueued bounds the messages kept for a paused conversation's resume:
// a thread that goes on for days while a card waits would otherwise grow
// its record, rewritten with each message, without end, for a model that
// sees only the newest of them (see fitBudget).
const maxQueued, maxQueuedBytes = 200, 256 << 10

// boundQueued drops the oldest of cs.Queued past maxQueued messages or
// maxQueuedBytes of text (the newest is always kept), counting them in
// cs.Skipped.
func boundQueued(cs *convState) {
	n, size := 0, 0
	for i := len(cs.Queued) - 1; i >= 0; i-- {
		size += len(cs.Queued[i].Text)
		if n > 0 && (n == maxQueued || size > maxQueuedBytes) {
			cs.Skipped += i + 1
			cs.Queued = slices.Clone(cs.Queued[i+1:])
			return
		}
		n++
	}
}

// stepMark records a model step whose calls are running, written before
// each call whose tool may not run twice and once the step's calls are
// done, so that a turn taken over after a crash knows what ran: slots with
// a Result are done, the slot Started (if not -1) was running when the mark
// was written and its outcome is unknown, and the others never started.
type stepMark struct {
	Slots   []slot `json:"slots"`
	Started int    `json:"started"`
	Steps   int    `json:"steps"`
	User    string `json:"user"`
	// Requesters are the people whose messages the turn answers.
	Requesters []string `json:"requesters,omitempty"`
	Channel    string   `json:"channel"`
	// PauseRun is the id of the run the step pauses as if it asks (see
	// turn.pauseRun), named by the request entries written with the
	// mark: a step taken over pauses as it, so that they name its calls.
	PauseRun string `json:"pause_run,omitempty"`
}

// check reports what makes m unfit to finish after the history msgs it
// was recorded with, or nil: the history must end with the assistant's
// message whose calls the slots stand for, one slot per call (a turn
// taken over indexes both by call). A damaged record is read as one
// that cannot be decoded.
func (m *stepMark) check(msgs history) error {
	if m == nil {
		return nil
	}
	if len(msgs) == 0 {
		return errors.New("its running step has no history")
	}
	last := msgs[len(msgs)-1]
	if last.Role != openai.ChatMessageRoleAssistant {
		return fmt.Errorf("its running step follows a message of role %q, not the assistant's", last.Role)
	}
	if len(m.Slots) != len(last.ToolCalls) {
		return fmt.Errorf("its running step has %d slots for %d tool calls", len(m.Slots), len(last.ToolCalls))
	}
	return nil
}

type queuedMessage struct {
	User    string    `json:"user"`
	Channel string    `json:"channel"`
	Text    string    `json:"text"`
	At      time.Time `json:"at"`
}

// runState is everything needed to resume a paused step.
type runState struct {
	// Messages is the history up to and including the assistant message
	// whose tool calls are in Slots.
	Messages history `json:"messages"`
	Slots    []slot  `json:"slots"`
	User     string  `json:"user"`
	// Requesters are everyone whose message the turn answers; empty in
	// runs stored before they were recorded, where User is the only one.
	Requesters []string `json:"requesters,omitempty"`
	Channel    string   `json:"channel"`
	Steps      int      `json:"steps"`
}

// slot is one tool call of a model step: either done (Result set) or
// waiting on the paused call CallID.
type slot struct {
	ToolCallID string  `json:"tool_call_id"`
	Tool       string  `json:"tool"`
	Result     *Result `json:"result,omitempty"`
	CallID     string  `json:"call_id,omitempty"`
	// Ran marks a call that executed before the pause (allowed by policy).
	Ran bool `json:"ran,omitempty"`
}

// turn is a turn in progress.
type turn struct {
	conv     string
	user     string
	askers   []string // everyone whose message the turn answers; see requesters
	channel  string
	messages []openai.ChatCompletionMessage
	steps    int
	queued   []queuedMessage
	// inboxSeq is the last inbox message this turn answers; the inbox is
	// drained up to it when the turn saves its result.
	inboxSeq int64
	// pausedRun is the run the conversation stays paused on while this
	// turn (a resume) runs; step marks keep it.
	pausedRun string
	// step, when set, is a model step interrupted by a crash, to finish
	// before calling the model (the last message holds its calls).
	step []slot
	// later are messages to add once the step is finished.
	later []queuedMessage
	// skipped counts the messages left out of queued (see
	// convState.Skipped).
	skipped int
	// finish is the paused run a resume finishes with its next write
	// that moves the conversation on from it.
	finish string
	// audits are the audit entries noted since the turn's last write,
	// stored with the next one (see note).
	audits []store.AuditEntry
	// recs are the policy's records read when the turn began (see
	// policyKinds), which judge the calls of its first step (see
	// judgeCall); nil once used.
	recs map[string][]store.Record
	// began are the same records, kept for the calls the turn pauses
	// (see pausedCalls), and their version (zero: none known).
	began        map[string][]store.Record
	beganVersion int64
	// saving are the results of the calls the turn ran being saved
	// (see saveResult), saves; the turn's writes wait for them.
	saving sync.WaitGroup
	saves  []*resultSave
	// unsaved are the saves, by call, that saved nothing: their entries
	// wait in audits for the turn's next write (see flushAudits).
	unsaved map[string]*resultSave
	// stepAudits are entries that go with the turn's next write only,
	// never alone, and are logged once it is made (see interrupted).
	stepAudits []store.AuditEntry
	// ran are the calls of the step whose results the messages end with,
	// until the model is asked with them; a turn cut before it answers
	// records them as a finished step (see cut).
	ran []slot
	// pauseRun is the id of the run the step being judged pauses as, if
	// it asks (see judge); pause uses it. markedPauseRun is that of a
	// step taken over, as its mark gives it, for judge to go on with.
	pauseRun, markedPauseRun string
}

// Accept records a person's message in its conversation's inbox, with its
// de-duplication (req.EventID, req.MsgID), before the edge acknowledges the
// event: from then on the message is answered even if this process dies
// (see TakeOver). With requireKnown the message is recorded only in a
// conversation the agent is part of. It returns req with Seq set and
// store.Accepted, or store.Duplicate or store.Unknown with nothing to
// answer. A store error is returned as is; the message was not recorded.
func (a *Agent) Accept(ctx context.Context, req Request, requireKnown bool) (Request, store.Acceptance, error) {
	if req.At.IsZero() {
		req.At = a.cfg.Now()
	}
	got, acc, err := a.store.AcceptMessage(ctx, req.Conversation, inboundOf(req), requireKnown)
	if err != nil {
		return req, "", fmt.Errorf("record message: %w", err)
	}
	req.Seq = got.Seq
	return req, acc, nil
}

// Taken is a conversation's lease taken by AcceptTaking together with the
// record of a message, so that the message's turn starts without another
// store step: pass it to RunTaken, or give it back with ReleaseTaken.
// One of them must be called, once.
type Taken struct {
	conversation string
	// holder names the lease's hold in the store (see leases.newHolder).
	holder string
	// begun is what a turn starts from (AcceptTaking), or resume what a
	// resume starts from (DecideTaking).
	begun  store.Begun
	resume *claimed
	used   atomic.Bool
}

// AcceptTaking is Accept that, for a message accepted in a conversation
// that no turn of this process holds, also takes the conversation's lease
// and reads what its turn starts from, in the same store step. It returns
// a *Taken when it did: the caller must then run the turn at once with
// RunTaken (or ReleaseTaken), since nothing else in this process may work
// on the conversation meanwhile. Otherwise the *Taken is nil and the
// message is recorded as Accept records it.
func (a *Agent) AcceptTaking(ctx context.Context, req Request, requireKnown bool) (Request, store.Acceptance, *Taken, error) {
	if req.At.IsZero() {
		req.At = a.cfg.Now()
	}
	var acc store.Acceptance
	var b store.Begun
	var seq int64
	asked := false
	holder, taken, err := a.leases.take(req.Conversation, func(holder string) (bool, error) {
		asked = true
		got, ac, bg, err := a.store.AcceptBegin(ctx, req.Conversation, inboundOf(req), requireKnown, holder, a.cfg.LeaseTTL, a.policyKinds()...)
		seq, acc, b = got.Seq, ac, bg
		return bg.Acquired, err
	})
	switch {
	case err != nil:
		return req, "", nil, fmt.Errorf("record message: %w", err)
	case !asked:
		// A turn of this process holds the conversation: record only.
		req, acc, err := a.Accept(ctx, req, requireKnown)
		return req, acc, nil, err
	}
	req.Seq = seq
	if !taken {
		return req, acc, nil, nil
	}
	return req, acc, &Taken{conversation: req.Conversation, holder: holder, begun: b}, nil
}

// RunTaken is Run for a message recorded by AcceptTaking (req as it
// returned it), under the lease it took: the turn starts from what
// AcceptTaking read.
func (a *Agent) RunTaken(ctx context.Context, req Request, t *Taken) (out Outcome, err error) {
	if t == nil || t.resume != nil || t.conversation != req.Conversation || !t.used.CompareAndSwap(false, true) {
		return Outcome{}, errors.New("run taken: not a lease taken for this conversation, or used already")
	}
	ctx, end := a.startTurn(ctx, TurnStart{Kind: TurnMessage, Conversation: req.Conversation, User: req.User, Channel: req.Channel})
	defer endTurn(end, &out, &err)
	err = a.leases.runHeld(ctx, req.Conversation, t.holder, func(ctx context.Context) (err error) {
		out, err = a.answer(ctx, req.Conversation, t.begun)
		return err
	})
	return out, err
}

// ResumeTaken is Resume for a step whose resume DecideTaking began, under
// the lease and the claim it took.
func (a *Agent) ResumeTaken(ctx context.Context, t *Taken) (Outcome, error) {
	if t == nil || t.resume == nil || !t.used.CompareAndSwap(false, true) {
		return Outcome{}, errors.New("resume taken: not a resume taken, or used already")
	}
	var out Outcome
	err := a.leases.runHeld(ctx, t.conversation, t.holder, func(ctx context.Context) (err error) {
		out, err = a.resumeStarted(ctx, *t.resume)
		return err
	})
	if errors.Is(err, errNoResume) {
		return Outcome{Status: Idle}, nil
	}
	return out, err
}

// ReleaseTaken gives back what a Taken holds when it will not run: for a
// message, the lease (the message stays recorded, for a later turn or the
// takeover to answer); for a resume, the call marked as started, the
// run's resume claim and the lease (the step stays decided and listed,
// for a later Resume, the takeover or the sweep). Releasing a Taken that
// ran, or was released, does nothing.
func (a *Agent) ReleaseTaken(ctx context.Context, t *Taken) {
	if t == nil || !t.used.CompareAndSwap(false, true) {
		return
	}
	if rs := t.resume; rs != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		a.abandon(rctx, &startMark{call: rs.Started, attempt: rs.nonce})
		if err := a.store.ReleaseClaim(rctx, rs.Run.ID, rs.owner); err != nil {
			a.log.Warn("release resume claim", "run", rs.Run.ID, "err", err)
		}
	}
	a.leases.release(ctx, store.TurnLease(t.conversation), t.conversation, t.holder, false)
}

// inboundOf is the store record of a request's message.
func inboundOf(req Request) store.Inbound {
	return store.Inbound{EventID: req.EventID, MsgID: req.MsgID, User: req.User, Channel: req.Channel, Text: req.Text, At: req.At}
}

// Run handles a message from a person: it records the message (unless
// Accept did: req.Seq set) and answers the conversation's unanswered
// messages, this one included, running the model and tools until the model
// answers in text, the step limit is hit, or a call needs a human (then the
// step is persisted and Paused returned). If the conversation is already
// paused, the messages are queued, Waiting is returned, and they are
// answered after the resume. If another turn answered the message first,
// Idle is returned. Work on one conversation is serialised across processes
// by the store's lease.
//
// A model error is returned as is (a *ModelError for the OpenAI client);
// the conversation keeps the message and everything before it, but for a
// request the provider refused for its content (ErrKindContentRefused):
// then the messages and tool outputs the model had not read are kept as a
// note that they were refused, so that the thread's next message is
// answered.
func (a *Agent) Run(ctx context.Context, req Request) (out Outcome, err error) {
	ctx, end := a.startTurn(ctx, TurnStart{Kind: TurnMessage, Conversation: req.Conversation, User: req.User, Channel: req.Channel})
	defer endTurn(end, &out, &err)
	return a.run(ctx, req)
}

func (a *Agent) run(ctx context.Context, req Request) (Outcome, error) {
	if req.Seq == 0 {
		var err error
		req, _, err = a.Accept(ctx, req, false)
		// A record the store made but its replicas did not confirm
		// stands on the primary, which the turn reads: the turn answers
		// it (asking for it again would have it answered twice).
		if err != nil && !errors.Is(err, store.ErrNotReplicated) {
			return Outcome{}, fmt.Errorf("%w: %w", ErrNotRecorded, err)
		}
	}
	var out Outcome
	err := a.leases.turn(ctx, req.Conversation, true, a.policyKinds(), func(ctx context.Context, b store.Begun) (err error) {
		out, err = a.answer(ctx, req.Conversation, b)
		return err
	})
	return out, err
}

// TakeOver answers what a conversation left unanswered when the process
// working on it died: messages recorded by Accept that no turn saved an
// answer to, and a step whose calls were running (a call whose tool is
// neither read-only nor idempotent is not run again: the model is told its
// outcome is unknown). It does not wait: if a live process holds the
// conversation, it returns Idle, as it does when there is nothing to
// answer. Call it for the conversations Unanswered lists.
func (a *Agent) TakeOver(ctx context.Context, conversation string) (Outcome, error) {
	var out Outcome
	err := a.leases.turn(ctx, conversation, false, a.policyKinds(), func(ctx context.Context, b store.Begun) (err error) {
		ts := TurnStart{Kind: TurnTakeover, Conversation: conversation}
		if n := len(b.Inbox); n > 0 {
			ts.User, ts.Channel = b.Inbox[n-1].User, b.Inbox[n-1].Channel
		}
		ctx, end := a.startTurn(ctx, ts)
		defer endTurn(end, &out, &err)
		out, err = a.answer(ctx, conversation, b)
		return err
	})
	if errors.Is(err, errBusy) {
		return Outcome{Status: Idle}, nil
	}
	return out, err
}

// HoldsHere reports whether a turn or resume of this process holds the
// conversation.
func (a *Agent) HoldsHere(conversation string) bool {
	return a.leases.heldHere(conversation) != nil
}

// AwaitTurn returns once no turn, of this process or another, holds the
// conversation (at most the lease wait, then ErrLeaseTimeout). A turn that
// pauses shows its cards before it saves the pause (see Announcer) and
// holds the conversation until then, so a decision that found no such call
// for a card of the conversation finds it after AwaitTurn if the pause was
// saved.
func (a *Agent) AwaitTurn(ctx context.Context, conversation string) error {
	if done := a.leases.heldHere(conversation); done != nil {
		// A turn of this process: its end is known here, with no store
		// step.
		t := time.NewTimer(a.cfg.LeaseWait)
		defer t.Stop()
		select {
		case <-done:
			return nil
		case <-t.C:
			return fmt.Errorf("await the turn of %s: %w", conversation, ErrLeaseTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return a.leases.run(ctx, conversation, func(context.Context) error { return nil })
}

// Unanswered lists up to limit conversations with messages recorded more
// than Config.TakeoverAfter ago and not answered yet, oldest first,
// leaving out the first offset of them: those whose turn may have died
// with its process. Pass each to TakeOver.
func (a *Agent) Unanswered(ctx context.Context, offset, limit int) ([]string, error) {
	keys, err := a.store.Unanswered(ctx, a.cfg.Now().Add(-a.cfg.TakeoverAfter), offset, limit)
	if err != nil {
		return nil, fmt.Errorf("list unanswered conversations: %w", err)
	}
	return keys, nil
}

// answer runs a turn for the conversation's unanswered messages, under its
// lease, from what BeginTurn read.
func (a *Agent) answer(ctx context.Context, conv string, b store.Begun) (Outcome, error) {
	rep := a.reporter(conv)
	cs, pausedRun, err := conversationOf(b.Conversation, b.Found)
	if err != nil {
		return Outcome{}, err
	}
	var fresh []queuedMessage
	var first store.Inbound // the first fresh message
	seq := cs.InboxSeq
	for _, m := range b.Inbox {
		if m.Seq > cs.InboxSeq {
			if len(fresh) == 0 {
				first = m
			}
			fresh = append(fresh, queuedMessage{User: m.User, Channel: m.Channel, Text: m.Text, At: m.At})
		}
		seq = max(seq, m.Seq)
	}
	if pausedRun != "" {
		run, calls, err := a.store.LoadRun(ctx, pausedRun)
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && run.Finished:
			pausedRun = "" // finished (and maybe gone): carry on
		case err != nil:
			return Outcome{}, fmt.Errorf("load paused run: %w", err)
		default:
			// New messages wait in the conversation for the resume,
			// which answers them.
			c := store.Commit{Key: conv, Answer: true, AnswerUpTo: seq}
			if len(fresh) > 0 {
				cs.Queued = append(cs.Queued, fresh...)
				boundQueued(&cs)
				cs.InboxSeq = seq
				c.Conversation = a.convRecord(cs, pausedRun)
			}
			pending := a.pendingOf(calls)
			if len(pending) == 0 {
				// Decided but not resumed: its resumer died or lost the
				// conversation, or has not started yet. The new messages
				// are queued for the resume, which drains them from the
				// inbox when it saves its result; until then they, and
				// the decision's listing, keep the conversation listed.
				if c.Conversation != nil {
					if err := a.commit(ctx, nil, store.Commit{Key: conv, Conversation: c.Conversation}, false); err != nil {
						return Outcome{}, err
					}
					c.Conversation = nil
				}
				out, err := a.claimAndResume(ctx, run)
				if errors.Is(err, errClaimed) {
					// The resumer stopped or died without finishing, and
					// its claim has not been released or lapsed yet: the
					// conversation stays listed, and a later takeover
					// resumes the run once the claim is free.
					return Outcome{Status: Idle, RunID: pausedRun}, nil
				}
				if err != nil || out.Status != Idle {
					return out, err
				}
			}
			if err := a.commit(ctx, nil, c, true); err != nil {
				return Outcome{}, err
			}
			if len(fresh) == 0 {
				return Outcome{Status: Idle, RunID: pausedRun}, nil
			}
			return Outcome{Status: Waiting, RunID: pausedRun, Pending: pending}, nil
		}
	}
	if len(fresh) == 0 && cs.Step == nil && len(cs.Queued) == 0 {
		if err := a.commit(ctx, nil, store.Commit{Key: conv, Answer: true, AnswerUpTo: seq}, true); err != nil {
			a.log.Warn("drain answered messages", "conversation", conv, "err", err)
		}
		return Outcome{Status: Idle}, nil
	}
	if b.RecordsVersion != 0 && b.Records != nil {
		a.read.Store(&readRecords{version: b.RecordsVersion, recs: b.Records})
	}
	t := &turn{conv: conv, messages: cs.Messages, skipped: cs.Skipped, inboxSeq: seq, recs: b.Records, began: b.Records, beganVersion: b.RecordsVersion}
	defer a.flushAudits(ctx, t)
	// Messages queued during a pause whose resume failed are answered
	// now, before the new ones.
	pending := append(cs.Queued, fresh...)
	if cs.Step != nil {
		t.user, t.channel, t.steps = cs.Step.User, cs.Step.Channel, cs.Step.Steps
		t.askers = slices.Clone(cs.Step.Requesters)
		t.step, t.markedPauseRun = a.interrupted(ctx, t, cs.Step), cs.Step.PauseRun
		t.later = pending
	} else {
		if !b.Found && len(cs.Queued) == 0 && len(fresh) > 0 {
			// The conversation's first turn: what was said before it.
			t.messages = a.addEarlier(ctx, t.messages, rep, t.conv, first.MsgID)
		}
		t.addMessages(pending)
	}
	if len(pending) > 0 && cs.Step == nil {
		last := pending[len(pending)-1]
		t.user, t.channel = last.User, last.Channel
	}
	return a.continueTurn(ctx, t, rep)
}

// earlierTimeout bounds reading what was said before a conversation's
// first message (see ThreadReader): the turn goes on without it after.
const earlierTimeout = 5 * time.Second

// addEarlier returns msgs with what was said in the conversation's place
// before its first message msgID (see ThreadReader), as a message of its
// own, where there was any; or a note that it could not be read. The
// history keeps it, for the turns after this one.
func (a *Agent) addEarlier(ctx context.Context, msgs []openai.ChatCompletionMessage, rep Reporter, conv, msgID string) []openai.ChatCompletionMessage {
	r, ok := rep.(ThreadReader)
	if !ok || msgID == "" {
		return msgs
	}
	rctx, cancel := context.WithTimeout(ctx, earlierTimeout)
	text, err := r.Earlier(rctx, msgID)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		return msgs // cut short; the turn ends
	case err != nil:
		a.log.Warn("could not read what was said before the bot was mentioned", "conversation", conv, "err", err)
		text = "[The earlier messages of this thread, before you were mentioned, could not be read.]"
	case text == "":
		return msgs
	}
	return append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: text})
}

// interrupted returns the slots of a step of t taken over after a crash:
// the call that was running gets an "outcome unknown" result. A step is
// marked as starting a call only for a tool that was neither read-only nor
// idempotent then (one that is runs again, from the step recorded before
// it), so the tool's hints now, which its server may have changed since,
// do not make it run again. The calls that never started are judged again.
// The unknown outcome is audited with the turn's next
// write, which records it (the crashed process wrote no entry), and only
// with it: a turn that ends without writing leaves it to the next
// takeover, which finds the step as this one did.
func (a *Agent) interrupted(ctx context.Context, t *turn, m *stepMark) []slot {
	slots := append([]slot(nil), m.Slots...)
	if m.Started < 0 || m.Started >= len(slots) || slots[m.Started].Result != nil {
		return slots
	}
	s := &slots[m.Started]
	r := interruptedResult(s.Tool)
	s.Result = &r
	s.Ran = true
	e := store.AuditEntry{Actor: m.User, Action: "execute", Channel: m.Channel, Thread: t.conv, Tool: s.Tool, CallID: s.ToolCallID, Outcome: outcomeOf(r), Detail: "allowed; the bot stopped while it ran"}
	if args, ok := callArgs(t.messages, s.ToolCallID); ok {
		if _, _, fp, err := a.check(s.Tool, args); err == nil {
			e.Fingerprint = fp
		}
	}
	e.At = a.cfg.Now()
	t.stepAudits = append(t.stepAudits, e) // logged once written (see commit)
	return slots
}

// callArgs returns the arguments of the tool call id in the last assistant
// message of msgs that has calls.
func callArgs(msgs []openai.ChatCompletionMessage, id string) (json.RawMessage, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role != openai.ChatMessageRoleAssistant || len(msgs[i].ToolCalls) == 0 {
			continue
		}
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID == id {
				return json.RawMessage(tc.Function.Arguments), true
			}
		}
		return nil, false
	}
	return nil, false
}

// repeatable reports whether a call of t may run again after a crash
// interrupted it: its tool is read-only or idempotent (MCP readOnlyHint,
// idempotentHint).
func repeatable(t Tool) bool { return t.Annotations.ReadOnly || t.Annotations.Idempotent }

// addAsker records that the turn answers a message of user.
func (t *turn) addAsker(user string) {
	if user != "" && !slices.Contains(t.askers, user) {
		t.askers = append(t.askers, user)
	}
}

// requesters are the people whose messages the turn answers: four eyes
// forbids each of them from deciding a call the turn makes.
func (t *turn) requesters() []string {
	if len(t.askers) == 0 && t.user != "" {
		return []string{t.user}
	}
	return slices.Clone(t.askers)
}

// addMessages adds people's messages to the history, their writers to the
// turn's askers, and, to the first, how many earlier ones were left out
// (see convState.Skipped), once.
func (t *turn) addMessages(qs []queuedMessage) {
	for i, q := range qs {
		if i == 0 && t.skipped > 0 {
			q.Text = fmt.Sprintf("[%d earlier messages sent to the thread while it waited were left out: too many to keep]\n%s", t.skipped, q.Text)
			t.skipped = 0
		}
		t.messages = append(t.messages, userMessage(q))
		t.addAsker(q.User)
	}
}

func userMessage(q queuedMessage) openai.ChatCompletionMessage {
	m := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: q.Text}
	if ValidName(q.User) {
		m.Name = q.User
	}
	return m
}

// saveTurn saves the result of a turn, with the messages it answered
// drained from the inbox and the run it resumed finished, in one write. It
// releases the lease unless queued messages are left, which a resume
// answers next (see answerQueued): those keep the conversation listed for
// a takeover (the decision that completed the step listed it; the inbox is
// drained, and the conversation unlisted, by the turn that answers them),
// so that a process that dies before answering them leaves them to
// another.
func (a *Agent) saveTurn(ctx context.Context, t *turn) error {
	t.queued = append(t.queued, t.later...)
	t.later = nil
	left := len(t.queued) > 0
	c := store.Commit{
		Key:          t.conv,
		Conversation: a.convRecord(convState{Messages: t.messages, Queued: t.queued, InboxSeq: t.inboxSeq, Skipped: t.skipped}, ""),
		Finish:       t.finish,
		Answer:       !left,
		AnswerUpTo:   t.inboxSeq,
	}
	if err := a.commit(ctx, t, c, !left); err != nil {
		return err
	}
	t.finish, t.pausedRun = "", ""
	return nil
}

// saveAndAnswer shows text as the answer, then saves the turn that ends
// with it (see saveTurn), and returns the save's error. The answer's text
// was streamed as the model wrote it; the save comes after the stream is
// ended (or the answer posted), so that until an answer is shown the
// conversation stays listed and leased: a crash in between leaves an
// answer shown and not recorded, which a takeover answers again, as it
// does an answer streamed before a crash, never one recorded and not
// shown; and a reply that another replica answers next is answered after
// this one.
func (a *Agent) saveAndAnswer(ctx context.Context, t *turn, rep Reporter, text string) error {
	// The cards of the calls the turn ran are told their outcome once it
	// is saved (see saveResult): before the answer that builds on it, as
	// a model is slower than the store.
	t.saving.Wait()
	rep.Answer(ctx, text)
	if ctx.Err() != nil {
		// Cut short (a shutdown, a lost lease) while the answer was
		// shown: it may not be, so the turn is left unrecorded, for a
		// takeover or a restart to answer again.
		return fmt.Errorf("turn cut short while its answer was shown: %w", context.Cause(ctx))
	}
	return a.saveTurn(ctx, t)
}

// markStep records the step whose calls are running (see stepMark); started
// is the call about to run, or -1 once all are done. The turn goes on
// either way only if the mark was saved. The messages to answer after the
// step (t.later: drained from the inbox up to t.inboxSeq, as the mark
// records) are saved as queued, where a takeover of the step finds them.
func (a *Agent) markStep(ctx context.Context, t *turn, slots []slot, started int) error {
	m := &stepMark{Slots: slots, Started: started, Steps: t.steps, User: t.user, Requesters: t.requesters(), Channel: t.channel, PauseRun: t.pauseRun}
	cs := convState{Messages: t.messages, Queued: append(slices.Clip(t.queued), t.later...), InboxSeq: t.inboxSeq, Step: m, Skipped: t.skipped}
	return a.commit(ctx, t, store.Commit{Key: t.conv, Conversation: a.convRecord(cs, t.pausedRun)}, false)
}

// cut ends a turn whose work ctx ended (the shutdown) before the model
// answered, with an error that wraps ctx.Err(). Nothing runs again: the
// calls of the step that ran last (t.ran) are recorded as a finished step
// of steps model calls, whose results a takeover or the restarted bot
// gives the model; with none, nothing is saved and the messages stay
// unanswered, for a takeover to answer them. The inbox is not drained
// either way.
func (a *Agent) cut(ctx context.Context, t *turn, steps int) error {
	err := fmt.Errorf("turn cut short before the model answered: %w", ctx.Err())
	if len(t.ran) == 0 {
		return err
	}
	m := &stepMark{Slots: t.ran, Started: -1, Steps: steps, User: t.user, Requesters: t.requesters(), Channel: t.channel}
	msgs := t.messages[:len(t.messages)-len(t.ran)] // up to the assistant message with the step's calls
	cs := convState{Messages: msgs, Queued: append(slices.Clip(t.queued), t.later...), InboxSeq: t.inboxSeq, Step: m, Skipped: t.skipped}
	if serr := a.commit(context.WithoutCancel(ctx), t, store.Commit{Key: t.conv, Conversation: a.convRecord(cs, t.pausedRun)}, false); serr != nil {
		return errors.Join(err, fmt.Errorf("record the step: %w", serr))
	}
	return err
}

// continueTurn calls the model until the turn ends or pauses.
func (a *Agent) continueTurn(ctx context.Context, t *turn, rep Reporter) (Outcome, error) {
	ctx = context.WithValue(ctx, requesterKey{}, t.user)
	for {
		if t.step != nil {
			// A step taken over after a crash: finish its calls first.
			slots := t.step
			t.step = nil
			last := &t.messages[len(t.messages)-1]
			slots, asks, err := a.judge(ctx, t, last.ToolCalls, slots, rep)
			if err != nil {
				return Outcome{}, err
			}
			a.sanitizeCalls(last)
			if len(asks) > 0 {
				t.queued = append(t.queued, t.later...)
				t.later = nil
				return a.pause(ctx, t, slots, asks, rep)
			}
			t.messages = append(t.messages, toolMessages(slots)...)
			t.addMessages(t.later)
			if n := len(t.later); n > 0 {
				// The policy judges what follows as asked by the one
				// who wrote last, as a resume that answers queued
				// messages does.
				t.user, t.channel = t.later[n-1].User, t.later[n-1].Channel
				ctx = context.WithValue(ctx, requesterKey{}, t.user)
			}
			t.later = nil
			continue
		}
		if t.steps >= a.cfg.MaxSteps {
			text := fmt.Sprintf("I stopped after %d steps without finishing. Tell me how you would like to continue.", a.cfg.MaxSteps)
			t.messages = append(t.messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text})
			// The step's results are no longer the last messages: a cut
			// of a later step (a resume answering queued messages) must
			// not take back what follows them.
			t.ran = nil
			if err := a.saveAndAnswer(ctx, t, rep, text); err != nil {
				return Outcome{}, err
			}
			return Outcome{Status: StepLimit, Answer: text}, nil
		}
		if ctx.Err() != nil && !leaseLost(ctx) {
			// The work was cut (the shutdown) after a step ran: the
			// model is not asked with a context that has ended.
			return Outcome{}, a.cut(ctx, t, t.steps)
		}
		rep.Status(ctx, "is thinking…")
		// The history the model answered, fitted to the budget (and
		// shortened again if the model found it too long), is the one
		// kept; when it fails, the history is kept as it was.
		var msg openai.ChatCompletionMessage
		var err error
		t.messages, msg, err = a.completeFitted(ctx, t.messages, a.tools.modelTools(), "", func(d string) { rep.Delta(ctx, d) })
		t.steps++
		if err != nil {
			rep.Stopped(ctx)
			if leaseLost(ctx) {
				return Outcome{}, fmt.Errorf("model: %w", err)
			}
			if ctx.Err() != nil {
				return Outcome{}, a.cut(ctx, t, t.steps-1)
			}
			var me *ModelError
			if errors.As(err, &me) && me.Kind == ErrKindContentRefused {
				// Kept as they are, the messages the provider refused
				// would be sent, and refused, with every later message
				// of the thread.
				t.messages = withholdUnread(t.messages)
			}
			if serr := a.saveTurn(context.WithoutCancel(ctx), t); serr != nil {
				return Outcome{}, errors.Join(fmt.Errorf("model: %w", err), serr)
			}
			return Outcome{}, fmt.Errorf("model: %w", err)
		}
		t.ran = nil
		msg = normalizeAssistant(msg, t.messages)
		if len(msg.ToolCalls) == 0 && strings.TrimSpace(msg.Content) == "" {
			// A refusal is the answer; an empty answer is said to be one.
			// Either way the history keeps an answer with content, which
			// some servers require of an assistant message with no calls.
			msg.Content = "(the model gave no answer)"
			if r := strings.TrimSpace(msg.Refusal); r != "" {
				msg.Content = r
			}
			msg.Refusal = ""
		}
		t.messages = append(t.messages, msg)
		if len(msg.ToolCalls) == 0 {
			if err := a.saveAndAnswer(ctx, t, rep, msg.Content); err != nil {
				return Outcome{}, err
			}
			return Outcome{Status: Answered, Answer: msg.Content}, nil
		}
		slots, asks, err := a.judge(ctx, t, msg.ToolCalls, make([]slot, len(msg.ToolCalls)), rep)
		if err != nil {
			return Outcome{}, err
		}
		a.sanitizeCalls(&t.messages[len(t.messages)-1])
		if len(asks) == 0 {
			t.messages = append(t.messages, toolMessages(slots)...)
			t.ran = slots
			continue
		}
		return a.pause(ctx, t, slots, asks, rep)
	}
}

// What stands in the history for a person's message or a tool output
// that the model provider refused a request for (see withholdUnread).
const (
	refusedMessage = "[not kept: the model provider refused a request with this message for its content]"
	refusedOutput  = "[not kept: the model provider refused a request with this tool output for its content]"
)

// withholdUnread returns msgs with the text the model had not read
// replaced by a note that the provider refused it: the people's messages
// and tool outputs after the model's last message, which are what the
// refused request brought (the model read the rest, in requests the
// provider took). Each keeps its place, so that a tool output still
// answers its call; the thread still shows what people wrote, and the
// audit log what tools did. The slice is new; msgs is not changed.
func withholdUnread(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	out := slices.Clone(msgs)
	for i := len(out) - 1; i >= 0 && out[i].Role != openai.ChatMessageRoleAssistant; i-- {
		switch out[i].Role {
		case openai.ChatMessageRoleUser:
			out[i].Content, out[i].MultiContent = refusedMessage, nil
		case openai.ChatMessageRoleTool:
			out[i].Content, out[i].MultiContent = refusedOutput, nil
		}
	}
	return out
}

// completeFitted asks the model for the next message after msgs, offering
// tools with toolChoice (see ModelRequest), and returns the history to
// keep with the model's message: the history it sent, msgs fitted to the
// budget left beside the system prompt and the tools (see historyBudget).
// A request the server refuses as longer than the model's context (see
// ModelError.ContextExceeded) is sent again with the history fitted to
// half its estimate, then a quarter, then an eighth (see maxContextCuts),
// until one is answered: no estimate matches every tokenizer, and a
// history kept too long would be refused with every later message of the
// thread. It stops when a cut would leave the history as long as the last
// one sent (fitBudget keeps the last exchange). The shortened history is
// kept only when it is answered; when the model fails, the returned
// history is msgs as given, so that a refusal no shorter history cures
// (vLLM words a max_tokens as large as the context as a request too long
// for it) does not lose the thread's earlier exchanges, more with each
// message. The error is then the last request's. Each request is sent
// as complete sends it: with user messages in a row merged for a server
// that refuses them, before and after a cut. onDelta is passed on: a
// refused request streamed nothing.
func (a *Agent) completeFitted(ctx context.Context, msgs []openai.ChatCompletionMessage, tools []openai.Tool, toolChoice string, onDelta func(string)) ([]openai.ChatCompletionMessage, openai.ChatCompletionMessage, error) {
	fitted := fitBudget(msgs, a.historyBudget(tools))
	msg, err := a.complete(ctx, fitted, tools, toolChoice, onDelta)
	if err == nil {
		return fitted, msg, nil
	}
	estimate := totalTokens(fitted)
	sent := estimate
	for cut := 1; cut <= maxContextCuts; cut++ {
		var me *ModelError
		if ctx.Err() != nil || !errors.As(err, &me) || !me.ContextExceeded() {
			break
		}
		shorter := fitBudget(fitted, estimate>>cut)
		after := totalTokens(shorter)
		if after >= sent {
			break
		}
		a.log.Warn("the model found the history too long for its context; sending it again shortened",
			"estimated_tokens", sent, "shortened_to", after, "retry", cut, "budget", a.cfg.ContextBudget, "err", err)
		msg, err = a.complete(ctx, shorter, tools, toolChoice, onDelta)
		if err == nil {
			return shorter, msg, nil
		}
		sent = after
	}
	return msgs, msg, err
}

// maxContextCuts is how many times completeFitted sends again, each time
// shorter, a request the model refuses as too long: to half the history's
// estimate, a quarter, an eighth. A history that an eighth does not bring
// within the model's context has a budget far too large for it, or a
// refusal no shorter history cures.
const maxContextCuts = 3

// complete asks the model once for the message after msgs, offering tools
// with toolChoice (see modelRequest). A server that refuses two user
// messages in a row (see ModelError.RolesMustAlternate: the chat templates
// of Mistral, Gemma and Llama 2, Anthropic's API, Gemini's) would refuse
// every later message of a thread where people wrote while a turn ran, or
// after a turn that failed: the request is sent again with them merged
// (see mergeUsers), and from then on the agent sends them merged in every
// request, warning the operator once. The history is not changed: it
// keeps each message as its writer sent it.
func (a *Agent) complete(ctx context.Context, msgs []openai.ChatCompletionMessage, tools []openai.Tool, toolChoice string, onDelta func(string)) (openai.ChatCompletionMessage, error) {
	merge := a.mergeUsers.Load()
	req := a.modelRequest(msgs, tools, toolChoice, merge)
	msg, err := a.model.Complete(ctx, req, onDelta)
	var me *ModelError
	if err == nil || merge || ctx.Err() != nil || !errors.As(err, &me) || !me.RolesMustAlternate() {
		return msg, err
	}
	merged := a.modelRequest(msgs, tools, toolChoice, true)
	if len(merged.Messages) == len(req.Messages) {
		return msg, err // no user messages in a row: merging cures nothing
	}
	if a.mergeUsers.CompareAndSwap(false, true) {
		a.log.Warn("the model server refuses two user messages in a row; from now on they are sent merged into one, each writer named", "err", err)
	}
	return a.model.Complete(ctx, merged, onDelta)
}

// modelRequest is the request that sends msgs after the system prompt,
// offering tools with toolChoice. With no tools to offer, the history's
// calls and results are sent as text (see callsAsText): some servers
// (LiteLLM in front of Anthropic or Bedrock) refuse tool calls in a
// request that offers no tools. With merge, user messages in a row are
// sent as one (see mergeUsers).
func (a *Agent) modelRequest(msgs []openai.ChatCompletionMessage, tools []openai.Tool, toolChoice string, merge bool) ModelRequest {
	if len(tools) == 0 {
		msgs, toolChoice = callsAsText(msgs), ""
	}
	if merge {
		msgs = mergeUsers(msgs)
	}
	return ModelRequest{Messages: a.withSystem(msgs), Tools: tools, ToolChoice: toolChoice}
}

// mergeUsers returns msgs with each run of user messages in a row sent as
// one (see mergedUser), for servers that refuse two in a row (see
// ModelError.RolesMustAlternate). Other messages are left as they are: a
// tool result followed by a person's message is taken, and the system
// prompt is not among msgs. The slice is new; msgs is not changed.
func mergeUsers(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(msgs))
	for i := 0; i < len(msgs); {
		j := i + 1
		for msgs[i].Role == openai.ChatMessageRoleUser && j < len(msgs) && msgs[j].Role == openai.ChatMessageRoleUser {
			j++
		}
		if j-i == 1 {
			out = append(out, msgs[i])
		} else {
			out = append(out, mergedUser(msgs[i:j]))
		}
		i = j
	}
	return out
}

// mergedUser is the user messages ms as one, in order, so that the model
// still knows who wrote what: when any of them has a writer (Name), each
// one's words follow a line naming its writer (see writerLine). The merged
// message keeps the Name only when all share it. When any is sent in
// parts, the merged one is too: theirs in order, the lines and the others'
// text as text parts.
func mergedUser(ms []openai.ChatCompletionMessage) openai.ChatCompletionMessage {
	out := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Name: ms[0].Name}
	named, inParts := false, false
	for _, m := range ms {
		named = named || m.Name != ""
		inParts = inParts || len(m.MultiContent) > 0
		if m.Name != out.Name {
			out.Name = ""
		}
	}
	var texts []string
	for _, m := range ms {
		head := ""
		if named {
			head = writerLine(m.Name) + "\n"
		}
		switch {
		case !inParts:
			texts = append(texts, head+ownWords(m.Content))
		case len(m.MultiContent) > 0:
			if head != "" {
				out.MultiContent = append(out.MultiContent, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: head})
			}
			for _, p := range m.MultiContent {
				if p.Type == openai.ChatMessagePartTypeText {
					p.Text = ownWords(p.Text)
				}
				out.MultiContent = append(out.MultiContent, p)
			}
		default:
			out.MultiContent = append(out.MultiContent, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: head + ownWords(m.Content)})
		}
	}
	out.Content = strings.Join(texts, "\n\n")
	return out
}

// writerLines matches, in a person's words, a line that reads as a
// writer line (see writerLine).
var writerLines = regexp.MustCompile(`(?m)^\[(<@[^>\n]*>|someone) wrote:\]`)

// ownWords returns a person's words for a merged message with any line
// that reads as a writer line quoted ("> "): written by one person, it
// would pass for the start of another's message.
func ownWords(text string) string {
	return writerLines.ReplaceAllString(text, "> $0")
}

// writerLine names the writer of a message in a merged one: the user id as
// a Slack mention, the form in which people's words name others (see
// slackapp's cleanText).
func writerLine(name string) string {
	if name == "" {
		return "[someone wrote:]"
	}
	return "[<@" + name + "> wrote:]"
}

// callsAsText returns msgs with every tool call written in its
// assistant message's text, and the results of each step's calls in one
// user message after it, marked as tool output rather than a person's
// words. Results a person's message follows (a turn that failed after its
// tools ran, messages that waited, the question of Why?) are sent in that
// message, before the person's words, so that the roles alternate: chat
// templates such as Gemma's and Mistral's, and Anthropic's API, refuse
// two user messages in a row. The slice is new when a message changes;
// msgs is not changed.
func callsAsText(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	if !slices.ContainsFunc(msgs, func(m openai.ChatCompletionMessage) bool {
		return len(m.ToolCalls) > 0 || m.Role == openai.ChatMessageRoleTool
	}) {
		return msgs
	}
	out := make([]openai.ChatCompletionMessage, 0, len(msgs))
	names := map[string]string{}
	var results *strings.Builder
	for _, m := range msgs {
		if m.Role == openai.ChatMessageRoleTool {
			if results == nil {
				results = &strings.Builder{}
				results.WriteString("[Results of the tool calls above, as the tools returned them (not a person's words):]")
			}
			fmt.Fprintf(results, "\n\n[%s, call %s:]\n%s", cmp.Or(names[m.ToolCallID], "a tool"), m.ToolCallID, m.Content)
			continue
		}
		if results != nil {
			if m.Role == openai.ChatMessageRoleUser {
				m = withResults(m, results.String())
			} else {
				out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: results.String()})
			}
			results = nil
		}
		if len(m.ToolCalls) > 0 {
			var b strings.Builder
			b.WriteString(m.Content)
			for _, tc := range m.ToolCalls {
				names[tc.ID] = tc.Function.Name
				if b.Len() > 0 {
					b.WriteString("\n")
				}
				fmt.Fprintf(&b, "[I called the tool %s (call %s) with the arguments %s]", tc.Function.Name, tc.ID, tc.Function.Arguments)
			}
			m.Content, m.ToolCalls = b.String(), nil
		}
		out = append(out, m)
	}
	if results != nil {
		out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: results.String()})
	}
	return out
}

// resultsEnd separates, in a person's message that callsAsText sends
// tool results in, the results from the person's words.
const resultsEnd = "\n\n[End of the tool results. The message that follows them:]\n"

// withResults returns the person's message m with the tool results
// before their words: at the start of its text, or as its first part when
// it is sent in parts. m's parts are not changed.
func withResults(m openai.ChatCompletionMessage, results string) openai.ChatCompletionMessage {
	if len(m.MultiContent) > 0 {
		parts := make([]openai.ChatMessagePart, 0, len(m.MultiContent)+1)
		parts = append(parts, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeText, Text: results + resultsEnd})
		m.MultiContent = append(parts, m.MultiContent...)
		return m
	}
	m.Content = results + resultsEnd + m.Content
	return m
}

func (a *Agent) withSystem(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(msgs)+1)
	out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: a.cfg.SystemPrompt})
	return append(out, msgs...)
}

// normalizeAssistant makes the model's message safe to persist and send
// back after history: role set, stream indexes cleared, every tool call
// with an id unique in the whole history (servers that make up ids, or
// give none, may repeat one across turns; some servers refuse a history
// with an id twice).
func normalizeAssistant(m openai.ChatCompletionMessage, history []openai.ChatCompletionMessage) openai.ChatCompletionMessage {
	m.Role = openai.ChatMessageRoleAssistant
	if len(m.ToolCalls) == 0 {
		return m
	}
	seen := map[string]bool{}
	for _, h := range history {
		for _, tc := range h.ToolCalls {
			seen[tc.ID] = true
		}
	}
	for i := range m.ToolCalls {
		tc := &m.ToolCalls[i]
		tc.Index = nil
		tc.Type = openai.ToolTypeFunction
		if tc.ID == "" || seen[tc.ID] {
			tc.ID = "call_" + rand.Text()
		}
		seen[tc.ID] = true
	}
	return m
}

// sanitizeCalls keeps what the history holds of a model step sendable: a
// tool name that is not a valid function name, arguments over the size
// limit, arguments that are not JSON (cut by the token limit, say), or
// arguments that are JSON but not an object (a double-encoded string, an
// array) would make every later request fail: some servers (Ollama's and
// vLLM's OpenAI endpoints) decode the arguments of every call of the
// history into an object and refuse the request. The model already got an
// error result for those calls; arguments that are not JSON, or not an
// object, are kept as a string in an object, their text still there for
// the model to read.
func (a *Agent) sanitizeCalls(m *openai.ChatCompletionMessage) {
	for i := range m.ToolCalls {
		f := &m.ToolCalls[i].Function
		if !ValidName(f.Name) {
			f.Name = "invalid_tool_name"
		}
		switch n := len(f.Arguments); {
		case n > a.cfg.MaxArgBytes:
			f.Arguments = fmt.Sprintf(`{"omitted":"%d bytes of arguments, over the limit"}`, n)
		case strings.TrimSpace(f.Arguments) == "":
			f.Arguments = "{}"
		case !json.Valid([]byte(f.Arguments)):
			b, _ := json.Marshal(map[string]string{"invalid_json": strings.ToValidUTF8(f.Arguments, "\uFFFD")})
			f.Arguments = string(b)
		case strings.TrimLeft(f.Arguments, " \t\r\n")[0] != '{':
			// Valid JSON whose first byte, past JSON's white space, is not
			// '{' is another value than an object.
			b, _ := json.Marshal(map[string]string{"not_an_object": f.Arguments})
			f.Arguments = string(b)
		}
	}
}

type requesterKey struct{}

// RequesterOf returns the user whose turn ctx belongs to, for the Reporter
// methods the agent calls ("" outside a turn).
func RequesterOf(ctx context.Context) string {
	u, _ := ctx.Value(requesterKey{}).(string)
	return u
}

// ask is a call that needs a human.
type ask struct {
	slot      int
	tool      Tool
	canonical json.RawMessage
	fp        string
	verdict   approvals.Verdict
}

// judge validates and judges each call of a model step in order: allowed
// calls run now, denied and invalid ones get their result, asked ones are
// returned. Calls whose slot has a Result already (done before a crash)
// are kept as they are. Before an allowed call whose tool may not run
// twice, the step is recorded (markStep), so a turn taken over after a
// crash does not run it again; once such a call has returned, its result
// is recorded before anything else of the step starts (a read-only call,
// which may take long, or the previews and cards of a pause), and once
// the step's calls are done, so a turn taken over after a crash gives the
// model that result instead of an unknown outcome. A step whose calls
// that may not run twice come last records nothing more than before. The
// error is that of a mark when the lease was lost, or the context's when
// it ended (a shutdown) as a call was marked: the call did not run, and
// the step is recorded with it not started, for the restart to run it.
func (a *Agent) judge(ctx context.Context, t *turn, calls []openai.ToolCall, slots []slot, rep Reporter) ([]slot, []ask, error) {
	var asks []ask
	// unrecorded: a call that may not run twice returned, and its result
	// is in no mark yet.
	unrecorded := false
	record := func() error {
		switch {
		case !unrecorded:
			return nil
		case leaseLost(ctx):
			// Another process carries the turn on: nothing more is
			// written.
			return fmt.Errorf("record the results of a step: %w", context.Cause(ctx))
		}
		mctx := ctx
		if ctx.Err() != nil {
			// Cut by a shutdown: the results are recorded all the same,
			// as cut records them.
			mctx = context.WithoutCancel(ctx)
		}
		if err := a.markStep(mctx, t, slots, -1); err != nil {
			if leaseLost(ctx) {
				return fmt.Errorf("record the results of a step: %w", err)
			}
			a.log.Warn("record the results of a step", "conversation", t.conv, "err", err)
			return nil
		}
		unrecorded = false
		return nil
	}
	t.pauseRun, t.markedPauseRun = t.markedPauseRun, ""
	for i, tc := range calls {
		if i < len(slots) && slots[i].Result != nil {
			continue
		}
		name, args := tc.Function.Name, json.RawMessage(tc.Function.Arguments)
		// A step taken over after a crash holds the slots of the calls
		// judged before it: each call the model makes is counted once.
		counted := i < len(slots) && slots[i].ToolCallID != ""
		judged := func(verdict string) {
			if !counted {
				a.judged(verdict)
			}
		}
		slots[i] = slot{ToolCallID: tc.ID, Tool: name}
		fail := func(format string, v ...any) {
			slots[i].Result = &Result{Content: cutText(fmt.Sprintf(format, v...), a.cfg.MaxToolOutput, "error"), IsError: true}
		}
		// refused audits a call refused before it could be put to anyone,
		// saying why in words of the bot's (the model's are in its
		// result, not in the log); a tool name that is not a valid one
		// (any text the model wrote) is audited as invalid_tool_name, as
		// the history keeps it.
		refused := func(fp, why string) {
			tool := name
			if !ValidName(tool) {
				tool = "invalid_tool_name"
			}
			a.note(ctx, t, store.AuditEntry{Actor: t.user, Action: "request", Channel: t.channel, Thread: t.conv, Tool: tool, CallID: tc.ID, Fingerprint: fp, Outcome: "invalid", Detail: why})
		}
		if i >= a.cfg.MaxCalls {
			judged("invalid")
			if i == a.cfg.MaxCalls {
				// One entry for them all: an answer may hold thousands,
				// which would push older entries out of the capped log.
				refused("", fmt.Sprintf("past the %d calls a step takes, the first of %d past it", a.cfg.MaxCalls, len(calls)-a.cfg.MaxCalls))
			}
			fail("not performed: the step asked for %d tool calls and at most %d are taken in one step; call %s again in a later step if it is still needed", len(calls), a.cfg.MaxCalls, name)
			continue
		}
		tool, canonical, fp, err := a.check(name, args)
		if err != nil {
			judged("invalid")
			if _, known := a.tools.Lookup(name); known {
				refused("", "arguments refused before the policy")
			} else {
				refused("", "no such tool")
			}
			fail("%v", err)
			continue
		}
		in := approvals.Input{Tool: name, Args: canonical, User: t.user, Requesters: t.requesters(), Channel: t.channel, Hints: tool.Annotations, Question: tool.Human}
		v := a.judgeCall(ctx, in, tool, t.recs)
		verdict := v.Action
		if tool.Human && v.Action == approvals.Allow {
			v.Action = approvals.Ask // a question for people cannot be answered by running it
		}
		if v.Action != approvals.Allow && v.Action != approvals.Deny && !a.shownInFull(tool, canonical) {
			judged("invalid")
			refused(fp, fmt.Sprintf("rule %s asks, and the arguments are too long to show in full", v.RuleID))
			fail("not performed: the arguments of this call to %s are too long to be shown in full to the people who would decide on it, so it was not put to them; call it again with shorter arguments (split the work over several calls if need be)", name)
			continue
		}
		// Every entry of a call names it by one id: a call that pauses by
		// the id pause gives it (that of its card and decisions), any other
		// by the model's tool call id (unique in the conversation; see
		// normalizeAssistant).
		callID := tc.ID
		if v.Action != approvals.Allow && v.Action != approvals.Deny {
			if t.pauseRun == "" {
				t.pauseRun = store.NewRunID()
			}
			callID = store.CallID(t.pauseRun, len(asks))
		}
		if !counted {
			// A call counted was requested before the crash, in the
			// entries written with the step's mark.
			a.note(ctx, t, store.AuditEntry{Actor: t.user, Action: "request", Channel: t.channel, Thread: t.conv, Tool: name, CallID: callID, Fingerprint: fp, Outcome: string(verdict), Detail: "rule " + v.RuleID})
		}
		if v.FailClosed {
			judged("error")
			if v.Problem != "" {
				// It may quote the arguments, which the log leaves out
				// unless asked for.
				a.log.Debug("a rule could not be evaluated", "conversation", t.conv, "tool", name, "rule", v.RuleID, "problem", v.Problem)
			}
		} else {
			judged(string(v.Action))
		}
		switch v.Action {
		case approvals.Allow:
			if repeatable(tool) {
				// Nothing is written before it starts: a process that
				// stalled past its lease, which another process may have
				// taken over, finds that out first.
				if err := a.leases.confirm(ctx, t.conv); errors.Is(err, ErrLeaseLost) {
					return slots, nil, err
				} else if err != nil {
					a.log.Warn("confirm the conversation's lease before a call", "conversation", t.conv, "tool", name, "err", err)
					fail("not performed: the bot could not confirm that it still holds this conversation (%v), so it did not run %s; try again later", err, name)
					continue
				}
				// It may take long: what ran before it is recorded first.
				if err := record(); err != nil {
					return slots, nil, err
				}
			} else {
				err := a.markStep(ctx, t, slots, i)
				if errors.Is(err, ErrLeaseLost) {
					return nil, nil, err // another process carries the turn on
				}
				if ctx.Err() != nil {
					// Ended as the mark was written: the call does not
					// start (see unstarted).
					return nil, nil, a.unstarted(ctx, t, slots, name)
				}
				if err != nil {
					a.log.Warn("record a running step", "conversation", t.conv, "tool", name, "err", err)
					fail("not performed: the bot could not record that %s was starting (%v), so it did not run it; try again later", name, err)
					continue
				}
				unrecorded = false // the mark holds the results so far
			}
			rep.Status(ctx, "is running "+name+"…")
			res := a.execute(ctx, tool, canonical, "", v)
			slots[i].Result, slots[i].Ran = &res, true
			a.note(ctx, t, store.AuditEntry{Actor: t.user, Action: "execute", Channel: t.channel, Thread: t.conv, Tool: name, CallID: callID, Fingerprint: fp, Outcome: outcomeOf(res), Detail: "allowed by rule " + v.RuleID})
			unrecorded = unrecorded || !repeatable(tool)
		case approvals.Deny:
			reason := v.Why()
			if v.Reason == "" {
				reason = fmt.Sprintf("not performed: the call to %s is denied by policy (rule %s)", name, v.RuleID)
			}
			fail("%s", reason)
		default:
			asks = append(asks, ask{slot: i, tool: tool, canonical: canonical, fp: fp, verdict: v})
		}
	}
	t.recs = nil // later steps come after a model call, or calls that ran
	// The pause records the results with the run, unless it first shows
	// previews or cards, which may take long, or it will not be saved (a
	// shutdown): they are recorded before.
	if len(asks) == 0 || slowPause(asks, rep) || ctx.Err() != nil {
		if err := record(); err != nil {
			return slots, nil, err
		}
	}
	return slots, asks, nil
}

// slowPause reports whether the pause of asks does slow work before its
// store step: a tool's preview, or cards shown by an Announcer.
func slowPause(asks []ask, rep Reporter) bool {
	if _, ok := rep.(Announcer); ok {
		return true
	}
	return slices.ContainsFunc(asks, func(q ask) bool { return q.tool.Preview != nil })
}

// unstarted ends a turn whose context ended (a shutdown, a lost lease)
// as the call of tool was marked as starting, before it started, with an
// error that wraps the context's end. On a shutdown the step is recorded
// again, as cut records one, without the call marked, so that whoever
// takes the conversation over (the restarted bot) judges it and runs it,
// instead of reporting an outcome unknown for a call that never ran. A
// turn that lost its lease writes nothing: the conversation is another
// holder's, which finds the call marked, as after a crash, and reports
// its outcome as unknown.
func (a *Agent) unstarted(ctx context.Context, t *turn, slots []slot, tool string) error {
	if leaseLost(ctx) {
		return fmt.Errorf("turn stopped as %s was to start: %w", tool, context.Cause(ctx))
	}
	err := fmt.Errorf("turn cut short as %s was to start: %w", tool, ctx.Err())
	if serr := a.markStep(context.WithoutCancel(ctx), t, slots, -1); serr != nil {
		return errors.Join(err, fmt.Errorf("record the step: %w", serr))
	}
	return err
}

// check validates a call from the model: a known tool, arguments of a sane
// size that are a JSON object passing the tool's schema, with no keys that
// look like others (see checkArgs). It returns the
// canonical arguments and their fingerprint. Refused arguments are an
// *argsError, worded for the model and for a person.
func (a *Agent) check(name string, args json.RawMessage) (Tool, json.RawMessage, string, error) {
	tool, ok := a.tools.Lookup(name)
	if !ok {
		return Tool{}, nil, "", fmt.Errorf("unknown tool %q; %s", name, a.toolList())
	}
	if len(args) > a.cfg.MaxArgBytes {
		return Tool{}, nil, "", argsProblem("arguments for %s are too large (%d bytes; the limit is %d)", name, len(args), a.cfg.MaxArgBytes)
	}
	canonical, fp, err := checkArgs(args, func(args json.RawMessage) (json.RawMessage, error) { return a.tools.Filled(name, args) })
	if err != nil {
		return Tool{}, nil, "", &argsError{Model: fmt.Sprintf("invalid arguments for %s: %v. Fix them and call the tool again", name, err), Person: personText(err)}
	}
	return tool, canonical, fp, nil
}

// checkArgs checks a call's arguments, empty ones standing for {}: nested
// at most maxArgDepth deep, then validate (the tool's schema, which also
// checks that they are one JSON object, and returns them as the tool runs
// them: see Registry.Filled), then no key given twice or looking like
// another (see checkKeys), as written and as filled. It returns the canonical arguments
// the policy judges and their fingerprint (see approvals.Fingerprint).
func checkArgs(args json.RawMessage, validate func(json.RawMessage) (json.RawMessage, error)) (json.RawMessage, string, error) {
	if len(strings.TrimSpace(string(args))) == 0 {
		args = json.RawMessage("{}")
	}
	if err := checkDepth(args); err != nil {
		return nil, "", err
	}
	// Decoded to be validated and have defaults filled in, invalid UTF-8
	// and half a surrogate pair would become U+FFFD before Fingerprint
	// could refuse them.
	if err := approvals.CheckText(args); err != nil {
		return nil, "", err
	}
	if err := checkKeys(args); err != nil {
		return nil, "", err
	}
	filled, err := validate(args)
	if err != nil {
		return nil, "", err
	}
	// A default filled in beside a key given that looks like its own
	// ("Path" given, "path" filled) would let the policy judge one and
	// the tool read the other.
	if err := checkKeys(filled); err != nil {
		return nil, "", err
	}
	return approvals.Fingerprint(filled)
}

// CheckArgs judges a call's arguments as the agent does before the policy
// sees them, but for what depends on the tool (its schema and own checks)
// or on Config.MaxArgBytes: they must be one JSON object (empty arguments
// stand for {}), nested at most 64 deep, with no key given twice or
// looking like another. It returns the canonical arguments the agent gives
// the policy; the error says what is wrong, as the model is told. Numbers
// are kept as written: one the policy cannot see exactly (1e400) makes
// its conditions fail closed, not the arguments refused.
func CheckArgs(args json.RawMessage) (json.RawMessage, error) {
	canonical, _, err := checkArgs(args, func(args json.RawMessage) (json.RawMessage, error) {
		_, err := parseObject(args)
		return args, err
	})
	return canonical, err
}

// UnknownOutcome ends the result of a call that may have done its work
// but did not say what became of it (cut by TOOL_TIMEOUT, a write whose
// answer never came): the model is to check before it calls again.
const UnknownOutcome = "whether the call took effect is unknown. Do not call it again before checking whether it did; tell the user."

// maxListedTools bounds the tools an unknown tool's error names: the
// model has the whole list in its request, and a few unknown calls must
// not fill its context with it.
const maxListedTools = 40

// toolList names the available tools for an unknown tool's error, at most
// maxListedTools of them.
func (a *Agent) toolList() string {
	names := a.toolNames()
	if len(names) <= maxListedTools {
		return "the available tools are: " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("the available tools include %s and %d more, listed in the request", strings.Join(names[:maxListedTools], ", "), len(names)-maxListedTools)
}

func (a *Agent) toolNames() []string {
	var names []string
	for _, t := range a.tools.List() {
		names = append(names, t.Name)
	}
	sort.Strings(names)
	return names
}

// evaluateStrict asks the policy and returns its error too: before a call
// runs on a human's decision, a policy that could not be fully read stops it.
// With recs (see policyKinds) a RecordPolicy judges by them.
func (a *Agent) evaluateStrict(ctx context.Context, in approvals.Input, recs map[string][]store.Record) (approvals.Verdict, error) {
	v, err := a.policyVerdict(ctx, in, recs)
	if err != nil {
		if v.Action == approvals.Deny {
			return v, nil // a deny stands whatever else failed
		}
		return v, fmt.Errorf("check the policy: %w", err)
	}
	if !v.Action.Valid() {
		return v, fmt.Errorf("check the policy: invalid verdict %q", v.Action)
	}
	return v, nil
}

// judgeCall is the verdict on a call of a turn's step. With recs (the
// policy's records, read when the turn began) a RecordPolicy judges by
// them. A call that runs now is judged by the policy as it is when it
// runs: its verdict stands only if the records read again are the same,
// else it is judged by those, so a rule an admin added while the model was
// thinking stops it. A verdict that runs nothing is checked again before
// anything runs on it: decisions are authorized, and approved calls
// judged, by the policy of their time.
func (a *Agent) judgeCall(ctx context.Context, in approvals.Input, tool Tool, recs map[string][]store.Record) approvals.Verdict {
	p, ok := a.policy.(RecordPolicy)
	if !ok || recs == nil {
		return a.evaluate(ctx, in, nil)
	}
	v := a.evaluate(ctx, in, recs)
	if v.Action != approvals.Allow || tool.Human {
		return v
	}
	now, err := a.store.RecordsOf(ctx, p.RecordKinds()...)
	if err != nil {
		return a.evaluate(ctx, in, nil) // the policy reads them itself, failing closed
	}
	if sameRecords(recs, now) {
		return v
	}
	return a.evaluate(ctx, in, now)
}

// sameRecords reports whether two listings of records (by kind, as
// RecordsOf lists them) hold the same versions of the same records.
func sameRecords(a, b map[string][]store.Record) bool {
	if len(a) != len(b) {
		return false
	}
	for kind, as := range a {
		bs, ok := b[kind]
		if !ok || !slices.EqualFunc(as, bs, func(x, y store.Record) bool {
			return x.ID == y.ID && x.Version == y.Version && bytes.Equal(x.Data, y.Data)
		}) {
			return false
		}
	}
	return true
}

// policyVerdict asks the policy; with recs (see policyKinds) a
// RecordPolicy judges by them.
func (a *Agent) policyVerdict(ctx context.Context, in approvals.Input, recs map[string][]store.Record) (approvals.Verdict, error) {
	if p, ok := a.policy.(RecordPolicy); ok && recs != nil {
		return p.EvaluateRecords(ctx, in, recs)
	}
	return a.policy.Evaluate(ctx, in)
}

// shownInFull reports whether args of tool can be shown whole to the
// people who decide on a call (see Config.ShownInFull).
func (a *Agent) shownInFull(tool Tool, args json.RawMessage) bool {
	return a.cfg.ShownInFull == nil || a.cfg.ShownInFull(args, tool.Human)
}

// judged reports how a call of the model was judged (see Config.Judged).
func (a *Agent) judged(verdict string) {
	if a.cfg.Judged != nil {
		a.cfg.Judged(verdict)
	}
}

// evaluate asks the policy, failing closed: a policy that cannot answer
// makes the call ask. With recs (see policyKinds) a RecordPolicy judges
// by them.
func (a *Agent) evaluate(ctx context.Context, in approvals.Input, recs map[string][]store.Record) approvals.Verdict {
	v, err := a.policyVerdict(ctx, in, recs)
	if err != nil {
		a.log.Warn("evaluate policy", "tool", in.Tool, "err", err)
		if !v.Action.Valid() {
			v = approvals.Verdict{Action: approvals.Ask, RuleID: "error", FailClosed: true, Reason: "the policy could not be evaluated: " + err.Error()}
		}
	}
	if !v.Action.Valid() {
		v.Action = approvals.Ask
	}
	return v
}

// execute runs a tool with a timeout; errors and panics become error
// results, and the output is capped.
func (a *Agent) execute(ctx context.Context, tool Tool, args json.RawMessage, callID string, v approvals.Verdict) (res Result) {
	ctx, end := a.startTool(ctx, ToolStart{Tool: tool.Name, CallID: callID, Verdict: v, Args: args})
	defer func() { end(res) }()
	if tool.Handler == nil {
		return Result{Content: fmt.Sprintf("tool %s cannot be run", tool.Name), IsError: true}
	}
	turn := ctx
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ToolTimeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("tool panicked", "tool", tool.Name, "panic", r, "stack", string(debug.Stack()))
			res = capResult(Result{Content: fmt.Sprintf("tool %s failed: internal error (%v)", tool.Name, r), IsError: true}, a.cfg.MaxToolOutput)
		}
	}()
	r, err := tool.Handler(ctx, args)
	if turn.Err() != nil && (err != nil || r.IsError) {
		// Cut by the turn's end (a shutdown, a lost lease), not by a
		// failure of its own: what it did before it stopped is not
		// known, as after a crash.
		return interruptedResult(tool.Name)
	}
	if ctx.Err() != nil && (err != nil || r.IsError) {
		// Cut by TOOL_TIMEOUT: a tool that is neither read-only nor
		// idempotent may have done its work, or part of it.
		msg := fmt.Sprintf("tool %s timed out after %s", tool.Name, a.cfg.ToolTimeout)
		if !repeatable(tool) {
			msg += ": " + UnknownOutcome
		}
		if err == nil && r.Content != "" {
			msg += " The tool said: " + cutText(r.Content, timeoutDetailBytes, "output")
		}
		return Result{Content: msg, IsError: true, unknown: !repeatable(tool)}
	}
	if err != nil {
		// A handler's error may carry what it read (a command's stderr,
		// a response's body): cut as its output would be.
		return capResult(Result{Content: fmt.Sprintf("tool %s failed: %v", tool.Name, err), IsError: true}, a.cfg.MaxToolOutput)
	}
	return capResult(r, a.cfg.MaxToolOutput)
}

// timeoutDetailBytes is how much of what a timed-out tool said is kept.
const timeoutDetailBytes = 1 << 10

func capResult(r Result, limit int) Result {
	r.Content = cutText(r.Content, limit, "output")
	return r
}

// cutText cuts s to at most max bytes, at a character boundary, saying
// how much of what was shown.
func cutText(s string, max int, what string) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[%s truncated: %d of %d bytes shown]", what, cut, len(s))
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// outcomeOf is the audit outcome of a call that ran with result r: "ok",
// "error", "unknown" when the bot stopped while it ran, or it may have
// done its work and its outcome is not known (see Result.OutcomeUnknown),
// or "not_sent" when its tool did not send it (see Result.NotSent).
func outcomeOf(r Result) string {
	if r.interrupted || r.unknown {
		return "unknown"
	}
	if r.notSent {
		return "not_sent"
	}
	if r.IsError {
		return "error"
	}
	return "ok"
}

func toolMessages(slots []slot) []openai.ChatCompletionMessage {
	out := make([]openai.ChatCompletionMessage, 0, len(slots))
	for _, s := range slots {
		content := ""
		if s.Result != nil {
			content = s.Result.Content
		}
		if content == "" {
			content = "(no output)"
		}
		out = append(out, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: s.ToolCallID, Content: content})
	}
	return out
}

// askTTL is how long a call asked under v waits for its approvers: the
// rule's ttl, or APPROVAL_TTL, bounded by approvals.MaxTTL (a rule stored
// before the bound, or a configuration set in code, may ask for more).
func (a *Agent) askTTL(v approvals.Verdict) time.Duration {
	ttl := v.TTL
	if ttl <= 0 {
		ttl = a.cfg.ApprovalTTL
	}
	return min(ttl, approvals.MaxTTL)
}

// pause persists the step and reports its pending calls.
func (a *Agent) pause(ctx context.Context, t *turn, slots []slot, asks []ask, rep Reporter) (Outcome, error) {
	now := a.cfg.Now()
	runID := t.pauseRun // the id judge named the calls' requests by
	if runID == "" {
		runID = store.NewRunID()
	}
	t.pauseRun = ""
	calls := make([]store.Call, len(asks))
	pending := make([]PendingCall, len(asks))
	run := store.Run{ID: runID, Conversation: t.conv, Requester: t.user, Channel: t.channel, CreatedAt: now}
	previews, trace := a.previews(ctx, asks), a.traceID(ctx)
	for k, q := range asks {
		ttl := a.askTTL(q.verdict)
		remind := q.verdict.RemindAfter
		if remind <= 0 {
			remind = a.cfg.ReminderAfter
		}
		c := store.Call{
			ID: store.CallID(runID, k), RunID: runID, ToolCallID: slots[q.slot].ToolCallID,
			Tool: q.tool.Name, Args: q.canonical, Fingerprint: q.fp,
			Requester: t.user, Requesters: t.requesters(), Channel: t.channel, Conversation: t.conv,
			RuleID: q.verdict.RuleID, Reason: q.verdict.Reason, Approvers: q.verdict.Approvers, FourEyes: q.verdict.FourEyes,
			NoAlwaysAllow: q.verdict.FailClosed || q.verdict.Combined, NeedsAudience: q.verdict.NeedsAudience && len(q.verdict.Approvers) > 0, Repeatable: repeatable(q.tool), ToolDigest: definitionDigest(q.tool), Trace: trace,
			MinApprovals: q.verdict.MinApprovals, RemindAfter: remind, CreatedAt: now, ExpiresAt: now.Add(ttl), Status: store.Pending,
		}
		c.Preview, c.PreviewError = previews[k].text, previews[k].problem
		if times := reminders(c); len(times) > 0 {
			c.RemindAt = times[0]
		}
		slots[q.slot].CallID = c.ID
		calls[k] = c
		run.CallIDs = append(run.CallIDs, c.ID)
		if c.ExpiresAt.After(run.ExpiresAt) {
			run.ExpiresAt = c.ExpiresAt
		}
		pending[k] = PendingCall{Call: viewOf(c), Human: q.tool.Human, Schema: q.tool.Schema}
	}
	run.State = encodeState(runState{Messages: t.messages, Slots: slots, User: t.user, Requesters: t.requesters(), Channel: t.channel, Steps: t.steps})
	// The pause entries go with the commit, and are logged once it
	// saved the pause: a pause not saved is no pending call.
	paused := len(t.audits) // where the pause entries begin
	pauses := make([]store.AuditEntry, len(calls))
	for i, c := range calls {
		pauses[i] = store.AuditEntry{At: a.cfg.Now(), Actor: c.Requester, Action: "pause", Channel: c.Channel, Thread: c.Conversation, Tool: c.Tool, CallID: c.ID, Fingerprint: c.Fingerprint, Outcome: "pending", Detail: "rule " + c.RuleID}
	}
	t.audits = append(t.audits, pauses...)
	t.queued = append(t.queued, t.later...)
	t.later = nil
	// The cards first, when the reporter can show them before the save:
	// where they are is then saved with the calls.
	an, _ := rep.(Announcer)
	var notes map[string][]byte
	if an != nil {
		notes = an.Announce(ctx, pending)
	}
	// One write: the run, the conversation paused on it with the messages
	// that wait for the resume, the audit entries, the inbox drained, the
	// run this turn resumed finished, and the lease released.
	c := store.Commit{
		Key:          t.conv,
		Conversation: a.convRecord(convState{Queued: t.queued, InboxSeq: t.inboxSeq, Skipped: t.skipped}, runID),
		Run:          &run,
		Calls:        calls,
		Notes:        notes,
		Finish:       t.finish,
		Answer:       true,
		AnswerUpTo:   t.inboxSeq,
	}
	remember := rememberable(calls, t.began, t.beganVersion)
	if _, ok := a.store.(PauseFeed); ok {
		// The other processes remember the calls too, those that can be,
		// and their expiry timers learn when the calls are due (see
		// FollowPauses).
		c.Announce = a.announce(remember, t.began)
	}
	// The entries the commit carries: the results being saved are
	// waited for first, so that their entries are among them.
	t.waitSaves()
	carried := len(t.audits)
	cerr := a.commit(ctx, t, c, true)
	if err := cerr; err != nil && !a.pauseSaved(ctx, t.conv, runID, err) {
		if an != nil {
			an.Unsaved(context.WithoutCancel(ctx), pending)
		}
		// The pause entries describe a run that does not exist; entries
		// the commit added after them (executions whose result was not
		// saved with their entry) stay.
		t.audits = slices.Delete(t.audits, paused, paused+len(calls))
		// Keep what happened (calls already allowed may have run) with
		// every call answered, so the history stays valid.
		for _, q := range asks {
			slots[q.slot].Result = &Result{Content: "not performed: the approval request could not be saved, so nothing ran; say so and let the user ask again", IsError: true}
		}
		t.messages = append(t.messages, toolMessages(slots)...)
		err = fmt.Errorf("save paused step: %w", err)
		if ctx.Err() != nil {
			// Stopped (its lease lost, or cut by a shutdown): nothing
			// more is written, and the messages stay unanswered for the
			// turn that takes the conversation over, or the restarted
			// bot, as after a cut before the model answered.
			return Outcome{}, err
		}
		if serr := a.saveTurn(context.WithoutCancel(ctx), t); serr != nil {
			return Outcome{}, errors.Join(err, serr)
		}
		return Outcome{}, fmt.Errorf("%w: %w", ErrPauseNotSaved, err)
	}
	for _, e := range pauses {
		e.Log(ctx, a.log)
	}
	t.finish, t.pausedRun = "", ""
	a.paused.addAll(remember, t.began)
	if cerr != nil {
		// Saved although the step answered with an error, which may have
		// cancelled ctx as a lost lease: the pause stands, with the
		// audit entries it carried (not to be written again when the
		// turn ends), and its cards' copies still go out.
		a.committed(ctx, t, carried)
		ctx = context.WithoutCancel(ctx)
	}
	rep.Paused(ctx, pending)
	return Outcome{Status: Paused, RunID: runID, Pending: pending}, nil
}

// pauseSaved reports whether the pause on runID that a commit failed
// with err to save was saved all the same: the reply of a store step that
// was made can be lost (a cut connection; a Redis client that sends it
// again then finds its own work done and refuses it). A run id is this
// pause's alone, so a conversation paused on it was paused by this commit.
// When the store cannot tell (the conversation cannot be read, a few times
// over a second or two), the pause counts as saved: its cards keep their
// buttons, and a click on a call that was not saved is refused as unknown,
// whereas a card that said "not saved" of a call that was could still be
// approved elsewhere (App Home, a copy) and run.
func (a *Agent) pauseSaved(ctx context.Context, conv, runID string, err error) bool {
	ctx = context.WithoutCancel(ctx)
	var lerr error
	for i, wait := range pauseReadWaits {
		if i > 0 {
			time.Sleep(wait)
		}
		var c store.Conversation
		c, lerr = a.store.LoadConversation(ctx, conv)
		if errors.Is(lerr, store.ErrNotFound) {
			return false
		}
		if lerr == nil {
			if c.PausedRun != runID {
				return false
			}
			a.log.Warn("a pause's store step answered with an error, but the pause is saved", "conversation", conv, "run", runID, "err", err)
			return true
		}
	}
	a.log.Warn("a pause's store step answered with an error, and the store cannot tell whether it was saved; its cards stay", "conversation", conv, "run", runID, "err", err, "read_err", lerr)
	return true
}

// pauseReadWaits are the waits before each read of pauseSaved.
var pauseReadWaits = []time.Duration{0, 200 * time.Millisecond, 500 * time.Millisecond, time.Second}

// pendingOf returns the still pending calls of a run, as PendingCalls.
func (a *Agent) pendingOf(calls []store.Call) []PendingCall {
	var out []PendingCall
	for _, c := range calls {
		if c.Status != store.Pending {
			continue
		}
		p := PendingCall{Call: viewOf(c)}
		if t, ok := a.tools.Lookup(c.Tool); ok {
			p.Human, p.Schema = t.Human, t.Schema
		}
		out = append(out, p)
	}
	return out
}
