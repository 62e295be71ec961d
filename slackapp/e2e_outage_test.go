package slackapp_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
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

func (s *outageStore) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, error) {
	if s.down.Load() {
		return store.Call{}, nil, errOutage
	}
	return s.fullStore.GetCallWith(ctx, id, kinds...)
}

func (s *outageStore) DecideAudited(ctx context.Context, id, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	if s.down.Load() {
		return store.Call{}, false, errOutage
	}
	return s.fullStore.DecideAudited(ctx, id, fp, d, fx)
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
