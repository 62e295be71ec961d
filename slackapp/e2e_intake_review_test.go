package slackapp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// intakeStore records messages as its store does, except that, as a
// sick store would: once hold is set, the next record is held, ignoring
// its context, signalling held, until release is closed, and then fails;
// while down is set, the other records fail at once, each signalled on
// failed; the next panics records panic. recorded is set once a record
// succeeded.
type intakeStore struct {
	fullStore
	hold     atomic.Bool
	held     chan struct{}
	release  chan struct{}
	down     atomic.Bool
	failed   chan struct{}
	panics   atomic.Int64
	recorded atomic.Bool
}

func newIntakeStore() *intakeStore {
	return &intakeStore{held: make(chan struct{}, 1), release: make(chan struct{}), failed: make(chan struct{}, 16)}
}

// gate is what happens to a record before it reaches the store; stop is
// set when it goes no further, with err.
func (s *intakeStore) gate(ctx context.Context) (stop bool, err error) {
	if s.panics.Add(-1) >= 0 {
		panic("record panicked")
	}
	if s.hold.CompareAndSwap(true, false) {
		s.held <- struct{}{}
		<-s.release
		return true, errOutage
	}
	if s.down.Load() {
		select {
		case s.failed <- struct{}{}:
		default:
		}
		return true, errOutage
	}
	return false, nil
}

func (s *intakeStore) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	if stop, err := s.gate(ctx); stop {
		return store.Inbound{}, "", err
	}
	got, acc, err := s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
	if err == nil && acc != store.Unknown {
		s.recorded.Store(true)
	}
	return got, acc, err
}

func (s *intakeStore) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	if stop, err := s.gate(ctx); stop {
		return store.Inbound{}, "", store.Begun{}, err
	}
	got, acc, b, err := s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
	if err == nil && acc != store.Unknown {
		s.recorded.Store(true)
	}
	return got, acc, b, err
}

// newIntakeEnv runs a bot on an intakeStore.
func newIntakeEnv(t *testing.T, opts ...fakeslack.Option) (*env, *intakeStore) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0], opts...)
	s := newIntakeStore()
	open := e.open
	e.open = func() fullStore {
		s.fullStore = open()
		return s
	}
	e.start()
	return e, s
}

// botMessages lists the texts of the bot's messages in a thread.
func (e *env) botMessages(thread string) []string {
	var out []string
	for _, m := range e.slack.Thread(channel, thread) {
		if m.BotID != "" {
			out = append(out, m.Text)
		}
	}
	return out
}

func waitSignal(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting until %s", what)
	}
}

// A copy of a mention (its app_mention and message events) that waits for
// the other copy's record, held by a store that overruns its deadline,
// records the message itself once the wait is over, within what is left
// of its envelope's 3 s, and is acked only then: never acked with the
// message unrecorded. The thread gets one answer. (How soon the acks come
// is cmd/loadbench's to measure.)
func TestCopyOfAStalledRecordIsRecordedBeforeItsAck(t *testing.T) {
	e, s := newIntakeEnv(t)
	e.model.Reply(fakeopenai.Text("Hello there."))
	s.hold.Store(true)
	ts := e.slack.Mention(channel, requester, "hello")
	waitSignal(t, s.held, "the first copy's record reaches the store")
	var acked fakeslack.Envelope
	waitUntil(t, "a copy of the mention is acked while the other's record is held", func() bool {
		for _, env := range e.slack.EnvelopesByTS(ts) {
			if env.Acked {
				acked = env
				return true
			}
		}
		return false
	})
	if !s.recorded.Load() {
		t.Errorf("the %s envelope was acked with the message unrecorded (a crash now would lose it)", acked.EventType)
	}
	close(s.release)
	e.answer(ts, "Hello there.")
	e.stop()
	if got := e.botMessages(ts); len(got) != 1 {
		t.Errorf("the thread got %d messages from the bot, want the one answer: %q", len(got), got)
	}
}

// While the store is down, a copy of a mention whose wait for the other
// copy's record (held past its deadline) is over cannot record the message
// either: it is left unacked for Slack to deliver again, and the thread is
// told once that the message could not be saved, by the first copy.
func TestCopyOfAStalledRecordAddsNoSecondNote(t *testing.T) {
	e, s := newIntakeEnv(t)
	s.down.Store(true)
	s.hold.Store(true)
	ts := e.slack.Mention(channel, requester, "hello")
	waitSignal(t, s.held, "the first copy's record reaches the store")
	waitSignal(t, s.failed, "the other copy tries to record the message itself")
	close(s.release)
	e.answer(ts, "couldn't save your message")
	// Slack delivers a copy left unacked again; here at once.
	for _, env := range e.slack.EnvelopesByTS(ts) {
		if env.Acked {
			continue
		}
		must(t, e.slack.Redeliver(env.ID))
		if _, err := e.slack.WaitAck(env.ID, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.stop()
	if got := e.botMessages(ts); len(got) != 1 {
		t.Errorf("the thread got %d messages from the bot, want one note: %q", len(got), got)
	}
}

// A thread reply whose first record panicked (once) is recorded and
// answered at Slack's next delivery: the panic does not leave later
// copies waiting for a record that never ends.
func TestReplyWhoseRecordPanickedIsAnsweredAtTheNextDelivery(t *testing.T) {
	e, s := newIntakeEnv(t, fakeslack.WithEventRetry(300*time.Millisecond))
	e.model.Reply(fakeopenai.Text("api is at version 2"), fakeopenai.Text("web is at version 5"))
	ts := e.slack.Mention(channel, requester, "which version is api at?")
	e.answer(ts, "api is at version 2")
	s.panics.Store(1)
	reply := e.slack.ThreadReply(channel, ts, requester, "and web?")
	e.answer(ts, "web is at version 5")
	envs := e.slack.EnvelopesByTS(reply)
	if len(envs) != 1 || !envs[0].Acked || envs[0].RetryAttempt < 1 {
		t.Errorf("the reply's envelopes: %+v; want one, acked on a retry", envs)
	}
}

// A card update Slack rate-limits with a Retry-After past the update's
// 30 s is not dropped: it is made once Slack allows it. Both updates of
// the decision (approved, running; then ran) are refused; the card ends
// showing the latest.
func TestCardUpdateRateLimitedPastItsBudgetIsMadeLater(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed api 9."))
	ts := e.slack.Mention(channel, requester, "deploy api 9")
	card := e.card(ts, "deploy")
	const retryAfter = 31
	e.slack.RateLimit("chat.update", 2, retryAfter)
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 9.")
	m, err := e.slack.WaitMessage(channel, func(m fakeslack.Message) bool { return m.TS == card.TS && m.Updates > 0 }, 2*retryAfter*time.Second)
	if err != nil {
		var statuses []int
		for _, c := range e.slack.Calls("chat.update") {
			statuses = append(statuses, c.Status)
		}
		t.Fatalf("the card was never updated (chat.update answered %v): %v", statuses, err)
	}
	if isCard(m) {
		t.Errorf("the card keeps its buttons after the approval: %s", blocksText(m))
	}
	if text := blocksText(m); !strings.Contains(text, "*Outcome:* ran") || strings.Contains(text, "running") {
		t.Errorf("the card does not show the latest update (the call ran): %s", text)
	}
	calls := e.slack.Calls("chat.update")
	if len(calls) < 3 || calls[0].Status != 429 || calls[1].Status != 429 || !calls[len(calls)-1].OK() {
		t.Fatalf("chat.update calls: %+v; want two refused, then one made", calls)
	}
	if wait := calls[len(calls)-1].At.Sub(calls[1].At); wait < retryAfter*time.Second {
		t.Errorf("the update was made again %v after it was refused, before its Retry-After of %d s", wait, retryAfter)
	}
}

// A form submission Slack delivers again (its first ack was missed) after
// its decision was recorded is taken for the first delivery's, as a
// click is: the form closes, with no error naming the submitter's own
// decision.
func TestRedeliveredSubmissionOfOwnDecisionClosesTheForm(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("No deploy then."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	if ack := e.reject(approver, channel, card.TS, "not today"); strings.Contains(string(ack), "errors") {
		t.Fatalf("the submission was refused: %s", ack)
	}
	var id string
	for _, env := range e.slack.Envelopes() {
		if env.InteractionType == "view_submission" {
			id = env.ID
		}
	}
	must(t, e.slack.Redeliver(id))
	ack, err := e.slack.WaitAck(id, 10*time.Second)
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Errorf("the redelivered submission was answered with an error: %s", ack)
	}
	e.answer(ts, "No deploy then.")
}
