package slackapp_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// outageStore fails the decision path while down is set, as an
// unreachable Redis would.
type outageStore struct {
	fullStore
	down *atomic.Bool
}

var errOutage = errors.New("store unreachable")

func (s *outageStore) GetCall(ctx context.Context, id string) (store.Call, error) {
	if s.down.Load() {
		return store.Call{}, errOutage
	}
	return s.fullStore.GetCall(ctx, id)
}

func (s *outageStore) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	if s.down.Load() {
		return store.Call{}, nil, 0, errOutage
	}
	return s.fullStore.GetCallWith(ctx, id, kinds...)
}

func (s *outageStore) DecideAudited(ctx context.Context, id, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	if s.down.Load() {
		return store.Call{}, false, errOutage
	}
	return s.fullStore.DecideAudited(ctx, id, fp, d, fx)
}

func (s *outageStore) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if s.down.Load() {
		return store.Call{}, false, store.ResumeStart{}, errOutage
	}
	return s.fullStore.DecideBegin(ctx, id, fp, d, fx, r)
}

// A click during a store outage is refused with a clear message and the
// call stays pending; once the store is back, the same click works.
func TestStoreOutageLosesNoApproval(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			var down atomic.Bool
			open := e.open
			e.open = func() fullStore { return &outageStore{fullStore: open(), down: &down} }
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("deployed at last"))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")

			down.Store(true)
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.ephemeral(approver, "try again") // the refused click's last step
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times during the outage", n)
			}
			if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 {
				t.Error("the card changed although nothing was recorded")
			}

			down.Store(false)
			_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "deployed at last")
			e.stop() // every click's work is done by then
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1 (none during the outage)", n)
			}
		})
	}
}

// acceptOutage fails recording messages, as an unreachable Redis would,
// until it is released; each failed attempt is signalled on failed.
type acceptOutage struct {
	fullStore
	down   *atomic.Bool
	failed chan<- struct{}
	// err is what the store answers while down: errOutage when nil.
	err error
}

// deliveriesFailed waits until n deliveries of what (a message) failed to
// be recorded, as failed signals them.
func deliveriesFailed(t *testing.T, failed <-chan struct{}, n int, what string) {
	t.Helper()
	for attempt := range n {
		select {
		case <-failed:
		case <-time.After(15 * time.Second):
			t.Fatalf("delivery %d of %s never reached the store", attempt+1, what)
		}
	}
}

func (s *acceptOutage) failure() error {
	if s.err != nil {
		return s.err
	}
	return errOutage
}

func (s *acceptOutage) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	if s.down.Load() {
		s.failed <- struct{}{}
		return store.Inbound{}, "", s.failure()
	}
	return s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
}

func (s *acceptOutage) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	if s.down.Load() {
		s.failed <- struct{}{}
		return store.Inbound{}, "", store.Begun{}, s.failure()
	}
	return s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
}

// A thread reply that does not mention the bot, sent while the store
// cannot record it, is left unacked (the bot cannot tell whether the
// thread is one of its conversations), so Slack delivers it again; the
// first delivery once the store is back records it and the thread gets its
// answer.
func TestThreadReplyDuringStoreOutageIsAnsweredOnceTheStoreIsBack(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			// Slack retries an event not acked in time; here sooner.
			e := newEnv(t, kind, fakeslack.WithEventRetry(200*time.Millisecond))
			var down atomic.Bool
			failed := make(chan struct{}, 10)
			open := e.open
			e.open = func() fullStore { return &acceptOutage{fullStore: open(), down: &down, failed: failed} }
			e.start()
			e.model.Reply(fakeopenai.Text("api is at version 2"), fakeopenai.Text("web is at version 5"))
			ts := e.slack.Mention(channel, requester, "which version is api at?")
			e.answer(ts, "api is at version 2")

			down.Store(true)
			reply := e.slack.ThreadReply(channel, ts, requester, "and web?")
			// The first delivery and the retry fail to be recorded; had
			// the first been acked, there would be no retry.
			deliveriesFailed(t, failed, 2, "the reply")
			down.Store(false)
			e.answer(ts, "web is at version 5")
			if last := e.request(2).Messages; !strings.Contains(last[len(last)-1].Content, "and web?") {
				t.Errorf("the model was last asked %q, want the reply", last[len(last)-1].Content)
			}
			envs := e.slack.EnvelopesByTS(reply)
			if len(envs) != 1 || !envs[0].Acked || envs[0].RetryAttempt < 2 {
				t.Errorf("the reply's envelopes: %+v; want one, acked on a retry after the outage", envs)
			}
		})
	}
}

// heldStore holds decisions while hold is set, as a store that stopped
// answering would, ignoring their context: each held decision signals
// arrived and waits for its outcome on release (nil lets it through).
type heldStore struct {
	fullStore
	hold    *atomic.Bool
	arrived chan struct{}
	release chan error
}

func (s *heldStore) DecideAudited(ctx context.Context, id, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	if s.hold.Load() {
		s.arrived <- struct{}{}
		if err := <-s.release; err != nil {
			return store.Call{}, false, err
		}
	}
	return s.fullStore.DecideAudited(ctx, id, fp, d, fx)
}

func (s *heldStore) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if s.hold.Load() {
		s.arrived <- struct{}{}
		if err := <-s.release; err != nil {
			return store.Call{}, false, store.ResumeStart{}, err
		}
	}
	return s.fullStore.DecideBegin(ctx, id, fp, d, fx, r)
}

// newHeldEnv runs a bot whose store decisions can be held.
func newHeldEnv(t *testing.T, kind storeKind) (*env, *heldStore) {
	held := &heldStore{hold: new(atomic.Bool), arrived: make(chan struct{}, 1), release: make(chan error)}
	e := newEnvWith(t, kind, func(s fullStore) fullStore {
		held.fullStore = s
		return held
	})
	return e, held
}

// A click is acked while the store holds its decision, and once the store
// fails it, the clicker is told privately that nothing was decided; the
// same click works once the store answers again.
func TestClickIsAckedWhileTheStoreHoldsItsDecision(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, held := newHeldEnv(t, kind)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("deployed at last"))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")

			held.hold.Store(true)
			id, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			<-held.arrived
			if _, err := e.slack.WaitAck(id, 15*time.Second); err != nil {
				t.Fatalf("the click was not acked while the store held its decision: %v", err)
			}
			held.release <- errOutage
			e.ephemeral(approver, "could not record your decision")
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times although nothing was decided", n)
			}

			held.hold.Store(false)
			_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "deployed at last")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// A modal submission is acked while the store holds its decision, with
// the modal kept open and a note that the decision is not recorded yet;
// the outcome, once the store answers, is told in a direct message.
func TestSubmissionIsAckedWhileTheStoreHoldsItsDecision(t *testing.T) {
	e, held := newHeldEnv(t, storeKinds(t)[0])
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Understood, no deploy today."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackReject)
	reason := map[string]map[string]string{slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "Not on a Friday."}}
	dm := e.slack.DMChannel(approver)
	toldDM := func(text string) {
		t.Helper()
		if _, err := e.slack.WaitMessage(dm, func(m fakeslack.Message) bool { return strings.Contains(m.Text, text) }, 15*time.Second); err != nil {
			t.Fatalf("%s was not told %q in a DM: %v", approver, text, err)
		}
	}

	held.hold.Store(true)
	for _, outcome := range []error{errOutage, nil} {
		// SubmitView returns once the submission is acked: the store
		// still holds the decision.
		ack, err := e.slack.SubmitView(approver, view.ID, reason, "")
		must(t, err)
		if !strings.Contains(string(ack), "not recorded yet") {
			t.Fatalf("the submission was acked with %s; want the modal kept open with a note that nothing is recorded yet", ack)
		}
		<-held.arrived
		held.release <- outcome
		if outcome != nil {
			toldDM("could not record your decision")
			if m, _ := e.slack.Message(channel, card.TS); !isCard(m) {
				t.Fatalf("the card changed although nothing was recorded: %s", m.Text)
			}
		}
	}
	toldDM("recorded after all")
	e.answer(ts, "Understood, no deploy today.")
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times after a reject", n)
	}
}

// A mention the store cannot record is answered without a record, once:
// its second copy (Slack sends a mention as app_mention and as message)
// is dropped, not answered again with a second note.
func TestMentionDuringStoreOutageIsAnsweredOnce(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	var down atomic.Bool
	down.Store(true)
	failed := make(chan struct{}, 100)
	open := e.open
	e.open = func() fullStore { return &acceptOutage{fullStore: open(), down: &down, failed: failed} }
	e.start()
	ts := e.slack.Mention(channel, requester, "deploy api")
	waitUntil(t, "both copies of the mention are acked", func() bool {
		envs := e.slack.EnvelopesByTS(ts)
		return len(envs) == 2 && envs[0].Acked && envs[1].Acked
	})
	e.waitThread(ts, "saying the message could not be saved", func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text, "send it again")
	})
	e.stop() // every note of the work in flight is posted by then
	var notes []string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" {
			notes = append(notes, m.Text)
		}
	}
	if len(notes) != 1 {
		t.Errorf("the thread got %d notes, want 1: %q", len(notes), notes)
	}
}

// An answer Slack refuses through every retry is posted later: it is kept
// in the conversation's history as given, so the thread must show it.
func TestRefusedAnswerIsPostedLater(t *testing.T) {
	// Restored once the bot has stopped (cleanups run last first).
	t.Cleanup(slackapp.SetLaterWaits(100*time.Millisecond, 100*time.Millisecond))
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	for range 5 {
		e.slack.FailNext("chat.postMessage", 503)
	}
	e.model.Reply(fakeopenai.Text("The answer is 42."))
	ts := e.slack.Mention(channel, requester, "the answer?")
	e.answer(ts, "The answer is 42.")
}

// A mention the store recorded but whose replicas did not confirm it
// (REDIS_WAIT_REPLICAS) is left unacked for Slack to deliver again, not
// answered with a request to send it again (which would have it answered
// twice once the replicas have it); a delivery once they are back is
// answered, once.
func TestMentionNotYetReplicatedIsLeftForSlackToDeliverAgain(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0], fakeslack.WithEventRetry(200*time.Millisecond))
	var down atomic.Bool
	down.Store(true)
	failed := make(chan struct{}, 100)
	open := e.open
	e.open = func() fullStore {
		return &acceptOutage{fullStore: open(), down: &down, failed: failed, err: fmt.Errorf("accept: %w", store.ErrNotReplicated)}
	}
	e.start()
	e.model.Reply(fakeopenai.Text("api is at version 2"))
	ts := e.slack.Mention(channel, requester, "which version is api at?")
	deliveriesFailed(t, failed, 3, "the mention") // both copies, and a retry
	down.Store(false)
	e.answer(ts, "api is at version 2")
	e.stop()
	var notes []string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" {
			notes = append(notes, m.Text+blocksText(m))
		}
	}
	if len(notes) != 1 || strings.Contains(notes[0], "send it again") {
		t.Errorf("the thread got %q, want the answer alone", notes)
	}
	if n := len(e.model.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want once", n)
	}
}
