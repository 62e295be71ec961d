package slackapp_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// failingAccepts fails the next left records of a message.
type failingAccepts struct {
	fullStore
	left atomic.Int32
}

func (s *failingAccepts) fail() bool { return s.left.Add(-1) >= 0 }

func (s *failingAccepts) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	if s.fail() {
		return store.Inbound{}, "", errOutage
	}
	return s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
}

func (s *failingAccepts) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	if s.fail() {
		return store.Inbound{}, "", store.Begun{}, errOutage
	}
	return s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
}

// A mention acked without a record (its record failed) is recorded as
// soon as the store answers again, not when its turn gets a slot: while
// every slot is taken, a crash would lose it otherwise.
func TestMentionAckedWithoutARecordIsRecordedBeforeItsTurnWaits(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	held := newHeldModel(e, "hold a")
	st := &failingAccepts{}
	open := e.open
	e.open = func() fullStore { st.fullStore = open(); return st }
	e.start()
	tsA := e.slack.Mention(channel, requester, "hold a")
	held.arrived(t, "hold a") // A's turn holds the only slot

	st.left.Store(1) // B's first record fails
	tsB := e.slack.Mention(channel, requester, "hello")
	waitUntil(t, "both copies of B acked", func() bool {
		envs := e.slack.EnvelopesByTS(tsB)
		return len(envs) == 2 && envs[0].Acked && envs[1].Acked
	})
	keyB := slackapp.ConversationKey(e.slack.TeamID(), channel, tsB)
	waitUntil(t, "B recorded while A's turn holds the slot", func() bool {
		listed, err := st.fullStore.Unanswered(t.Context(), time.Now().Add(time.Hour), 0, 100)
		return err == nil && slices.Contains(listed, keyB)
	})
	held.release("hold a")
	e.answer(tsA, "held: hold a")
	e.answer(tsB, "ok")
}
