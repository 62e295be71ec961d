package slackapp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// acceptStep is what scriptedAccepts does with one record.
type acceptStep int

const (
	stepPass acceptStep = iota
	// stepFail: nothing written, an error (the store out of reach).
	stepFail
	// stepLand: written, and an error all the same (a reply lost at the
	// deadline, or a write the replicas did not confirm: the real
	// redisstore returns store.ErrNotReplicated for a write it made).
	stepLand
	// stepLandLate: written, and the record's deadline reported (its
	// reply was lost).
	stepLandLate
	// stepLandHang: written, and no answer until the caller gives up.
	stepLandHang
	// stepPanic: nothing written, a panic.
	stepPanic
	// stepHang: nothing written, and no answer until the caller gives up
	// (a store out of reach: a dial or read that times out).
	stepHang
)

// scriptedAccepts applies steps, in order, to the records of messages
// (AcceptMessage and AcceptBegin) once armed, then passes them. It notes
// the MsgIDs the store holds (recorded, or found recorded).
type scriptedAccepts struct {
	fullStore
	mu    sync.Mutex
	steps []acceptStep
	have  map[string]bool
}

func (s *scriptedAccepts) arm(steps ...acceptStep) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

func (s *scriptedAccepts) next() acceptStep {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.steps) == 0 {
		return stepPass
	}
	st := s.steps[0]
	s.steps = s.steps[1:]
	return st
}

// left is how many steps are still to apply.
func (s *scriptedAccepts) left() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.steps)
}

func (s *scriptedAccepts) note(msgID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.have == nil {
		s.have = map[string]bool{}
	}
	s.have[msgID] = true
}

func (s *scriptedAccepts) holds(msgID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.have[msgID]
}

func (s *scriptedAccepts) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	step := s.next()
	if step == stepPanic {
		panic("record of " + m.MsgID)
	}
	if step == stepHang {
		<-ctx.Done()
		return store.Inbound{}, "", fmt.Errorf("accept message in %s: %w", conversation, ctx.Err())
	}
	if step == stepFail {
		return store.Inbound{}, "", errOutage
	}
	got, acc, err := s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
	if err == nil && acc != store.Unknown {
		s.note(m.MsgID)
	}
	if step == stepLand && err == nil {
		return store.Inbound{}, "", fmt.Errorf("accept message in %s: %w: written on the primary, not confirmed", conversation, store.ErrNotReplicated)
	}
	if step == stepLandLate && err == nil {
		return store.Inbound{}, "", fmt.Errorf("accept message in %s: %w", conversation, context.DeadlineExceeded)
	}
	if step == stepLandHang && err == nil {
		<-ctx.Done()
		return store.Inbound{}, "", fmt.Errorf("accept message in %s: %w", conversation, ctx.Err())
	}
	return got, acc, err
}

func (s *scriptedAccepts) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	step := s.next()
	if step == stepFail {
		return store.Inbound{}, "", store.Begun{}, errOutage
	}
	got, acc, b, err := s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
	if err == nil && acc != store.Unknown {
		s.note(m.MsgID)
	}
	if step == stepLand && err == nil {
		return store.Inbound{}, "", store.Begun{}, fmt.Errorf("accept message in %s: %w", conversation, store.ErrNotReplicated)
	}
	if step == stepLandLate && err == nil {
		return store.Inbound{}, "", store.Begun{}, fmt.Errorf("accept message in %s: %w", conversation, context.DeadlineExceeded)
	}
	if step == stepLandHang && err == nil {
		<-ctx.Done()
		return store.Inbound{}, "", store.Begun{}, fmt.Errorf("accept message in %s: %w", conversation, ctx.Err())
	}
	return got, acc, b, err
}

// lateEnv is an app with one turn slot on a store whose records of
// messages follow a script, with the slot held by a turn the fake model
// holds: every other message waits for it.
type lateEnv struct {
	*env
	st   *scriptedAccepts
	reg  *prometheus.Registry
	held *heldModel
	tsA  string
}

func newLateEnv(t *testing.T, hold ...string) *lateEnv {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Hour
	e.cfg.ShutdownGrace = 300 * time.Millisecond
	e.cfg.TakeoverInterval = 50 * time.Millisecond
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	held := newHeldModel(e, append([]string{"hold a"}, hold...)...)
	st := &scriptedAccepts{}
	open := e.open
	e.open = func() fullStore { st.fullStore = open(); return st }
	e.start()
	tsA := e.slack.Mention(channel, requester, "hold a")
	held.arrived(t, "hold a") // A's turn holds the only slot
	return &lateEnv{env: e, st: st, reg: reg, held: held, tsA: tsA}
}

// queued waits until n turns have waited for the slot.
func (e *lateEnv) queued(t *testing.T, what string, n int) {
	t.Helper()
	waitUntil(t, what, func() bool { return counter(t, e.reg, "toolgate_turns_queued_total", "") == float64(n) })
}

// acked waits until every copy of the message ts is acked.
func (e *lateEnv) acked(t *testing.T, ts string) {
	t.Helper()
	for _, env := range e.slack.EnvelopesByTS(ts) {
		if _, err := e.slack.WaitAck(env.ID, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// restart stops the app, frees A's turn, and starts it again.
func (e *lateEnv) restart() {
	e.stop()
	e.held.release("hold a")
	e.cfg.Metrics = slackapp.NewMetrics(prometheus.NewRegistry())
	e.start()
}

// A mention acked without a record (its record failed) is recorded as
// soon as the store answers again, not when its turn gets a slot: while
// every slot is taken, a crash would lose it otherwise.
func TestMentionAckedWithoutARecordIsRecordedBeforeItsTurnWaits(t *testing.T) {
	e := newLateEnv(t)
	e.st.arm(stepFail) // B's first record fails
	tsB := e.slack.Mention(channel, requester, "hello")
	e.acked(t, tsB)
	keyB := slackapp.ConversationKey(e.slack.TeamID(), channel, tsB)
	waitUntil(t, "B recorded while A's turn holds the slot", func() bool {
		listed, err := e.st.fullStore.Unanswered(t.Context(), time.Now().Add(time.Hour), 0, 100)
		return err == nil && slices.Contains(listed, keyB)
	})
	e.held.release("hold a")
	e.answer(e.tsA, "held: hold a")
	e.answer(tsB, "ok")
}

// The same for a reply in a thread whose earlier message waits for the
// slot: the reply's record is made again at once, not once the work ahead
// of it on its conversation's queue is done.
func TestReplyAckedWithoutARecordIsRecordedBeforeTheWorkAheadOfIt(t *testing.T) {
	e := newLateEnv(t)
	tsB := e.slack.Mention(channel, requester, "hello")
	e.queued(t, "B's turn waits for the slot", 1)
	e.st.arm(stepFail) // the reply's first record fails
	reply := e.slack.ThreadReply(channel, tsB, requester, "<@"+e.slack.BotUserID()+"> and again")
	e.acked(t, reply)
	waitUntil(t, "the reply recorded while B waits for the slot", func() bool { return e.st.holds(channel + ":" + reply) })
	if n := counter(t, e.reg, "toolgate_turns_queued_total", ""); n != 1 {
		t.Fatalf("%v turns queued; want B's alone, still waiting", n)
	}
	e.held.release("hold a")
	e.answer(e.tsA, "held: hold a")
	e.answer(tsB, "ok")
}

// A late record that the store made on its primary without its replicas'
// confirmation (store.ErrNotReplicated) counts as a record, as a first
// record does: the thread is not asked to send the message again (it
// would be answered twice), whether the turn runs here (its own record
// finds the same) or after a restart.
func TestLateRecordOnThePrimaryIsNotAskedAgain(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			e := newLateEnv(t)
			// B's first record fails; its late record, and the turn's
			// own, are made and not confirmed.
			e.st.arm(stepFail, stepLand, stepLand)
			tsB := e.slack.Mention(channel, requester, "hello")
			waitUntil(t, "B's late record made", func() bool { return e.st.holds(channel + ":" + tsB) })
			if restart {
				e.queued(t, "B's turn waits for the slot", 1)
				e.restart()
			} else {
				e.held.release("hold a")
			}
			e.answer(e.tsA, "held: hold a")
			e.answer(tsB, "ok")
			thread := dumpThread(e.slack.Thread(channel, tsB))
			if strings.Contains(thread, "again") {
				t.Errorf("B was recorded and answered, and yet the thread was asked to send it again:\n%s", thread)
			}
		})
	}
}

// A message whose records were all made but answered with an error (the
// first at the ack's deadline, the late one cut by the shutdown) is
// asked about once more before the shutdown tells its thread anything: it
// is promised an answer, which the next process gives, and not asked for
// again.
func TestRecordCutByTheShutdownIsNotAskedAgain(t *testing.T) {
	e := newLateEnv(t)
	e.st.arm(stepLandLate, stepLandHang)
	tsB := e.slack.Mention(channel, requester, "hello")
	e.acked(t, tsB)
	waitUntil(t, "B's late record under way", func() bool { return e.st.left() == 0 })
	e.restart()
	e.answer(e.tsA, "held: hold a")
	e.answer(tsB, "ok")
	thread := dumpThread(e.slack.Thread(channel, tsB))
	if strings.Contains(thread, "send your message again") || !strings.Contains(thread, "as soon as I'm back") {
		t.Errorf("B was recorded and is answered after the restart; want it promised, not asked for again:\n%s", thread)
	}
}

// A late record that finds the message recorded already (the first
// record was made, its answer lost) carries no sequence number; at
// shutdown the message is looked for among those waiting, so one that an
// earlier turn of its thread answered already is not promised an answer
// again.
func TestLateDuplicateAnsweredAlreadyIsNotPromisedAgain(t *testing.T) {
	e := newLateEnv(t, "hold c")
	tsB := e.slack.Mention(channel, requester, "hello")
	e.queued(t, "B waits", 1)
	e.slack.Mention(channel, requester, "hold c")
	e.queued(t, "C waits", 2)
	e.st.arm(stepLandLate) // the reply is recorded; its record reports the deadline
	again := e.slack.ThreadReply(channel, tsB, requester, "<@"+e.slack.BotUserID()+"> and again")
	e.acked(t, again)
	waitUntil(t, "the reply's late record made", func() bool { return e.st.holds(channel + ":" + again) })
	e.held.release("hold a")
	e.answer(e.tsA, "held: hold a")
	e.held.arrived(t, "hold c")
	e.answer(tsB, "ok") // B's turn answers both of B's messages
	e.queued(t, "the reply's own turn waits for the slot", 3)
	e.stop()
	if thread := dumpThread(e.slack.Thread(channel, tsB)); strings.Contains(thread, "as soon as I'm back") {
		t.Errorf("the thread is promised an answer it has already:\n%s", thread)
	}
}

// A late record that panics (spawn logs it) does not leave the message's
// turn waiting for its outcome: the turn records the message itself and
// answers it.
func TestLateRecordThatPanicsLetsTheTurnGoOn(t *testing.T) {
	e := newLateEnv(t)
	e.st.arm(stepFail, stepPanic)
	tsB := e.slack.Mention(channel, requester, "hello")
	e.acked(t, tsB)
	e.held.release("hold a")
	e.answer(e.tsA, "held: hold a")
	e.answer(tsB, "ok")
}

// At shutdown, the last record of a message never recorded is bounded:
// with the store not answering, the thread is still told, in the time the
// shutdown leaves for notes, to send the message again.
func TestUnrecordedMessageIsToldAtShutdownWhileTheStoreHangs(t *testing.T) {
	e := newLateEnv(t)
	e.st.arm(stepFail, stepFail, stepHang)
	tsB := e.slack.Mention(channel, requester, "hello")
	e.acked(t, tsB)
	e.queued(t, "B's turn waits for the slot", 1)
	if n := e.st.left(); n != 1 {
		t.Fatalf("%d steps left; want B's late record failed, the last to come", n)
	}
	e.stop()
	if thread := dumpThread(e.slack.Thread(channel, tsB)); !strings.Contains(thread, "send your message again") {
		t.Errorf("a message never recorded was not answered at shutdown:\n%s", thread)
	}
}
