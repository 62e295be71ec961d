package slackapp_test

import (
	"context"
	"errors"
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

func (s *outageStore) Decide(ctx context.Context, id, fp string, d store.Decision) (store.Call, bool, error) {
	if s.down.Load() {
		return store.Call{}, false, errOutage
	}
	return s.fullStore.Decide(ctx, id, fp, d)
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
			e.ephemeral(approver, "try again")
			time.Sleep(100 * time.Millisecond)
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
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
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
}

func (s *acceptOutage) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	if s.down.Load() {
		s.failed <- struct{}{}
		return store.Inbound{}, "", errOutage
	}
	return s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
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
			for attempt := range 2 {
				select {
				case <-failed:
				case <-time.After(15 * time.Second):
					t.Fatalf("delivery %d of the reply never reached the store", attempt+1)
				}
			}
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
