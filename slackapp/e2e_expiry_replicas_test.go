package slackapp_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// pauseNoted is one replica's handle on a shared store that notes whether
// the replica saved a pause, and passes the store's pause feed on.
type pauseNoted struct {
	*seenStore
	paused atomic.Bool
}

func (s *pauseNoted) CommitTurn(ctx context.Context, c store.Commit) error {
	err := s.seenStore.CommitTurn(ctx, c)
	if err == nil && c.Run != nil {
		s.paused.Store(true)
	}
	return err
}

func (s *pauseNoted) FollowPauses(ctx context.Context, live func(), fn func([]byte)) error {
	if f, ok := s.seenStore.fullStore.(agent.PauseFeed); ok {
		return f.FollowPauses(ctx, live, fn)
	}
	live()
	<-ctx.Done()
	return nil
}

// Of two replicas on one Redis (a node or a Cluster), the one that paused
// a call is stopped (a scale-down, a rolling restart, a crash) before the
// call's deadline. The replica left expires it on time, not at its next
// sweep (README: "Every replica expires approvals on time"; SPEC §6:
// "Expired cards say so within 1 s of the deadline"): the pause's
// announcement told it of the deadline.
func TestCallPausedOnAStoppedReplicaExpiresOnTime(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = strings.Replace(ttlPolicy, "ttl: 1s", "ttl: 3s", 1)
			e.cfg.SweepInterval = 30 * time.Second // the default
			m := newScriptedModel()
			m.unblock()
			e.model.Handle(m.answer)
			base := e.open()
			e.shared = base
			// Both replicas run before the call is paused.
			stores := []*pauseNoted{{seenStore: &seenStore{fullStore: base}}, {seenStore: &seenStore{fullStore: base}}}
			stop := e.runReplicas(t, stores[0], stores[1])
			must(t, e.slack.WaitConnected(2, 10*time.Second))
			ts := e.slack.Mention(channel, requester, "deploy api 7")
			card := e.card(ts, "deploy")
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
			c, err := base.GetCall(t.Context(), callID)
			must(t, err)
			// The call is in the store a moment before the commit that
			// saved it returns to the replica's handle.
			waitUntil(t, "a replica's commit of the pause returns", func() bool {
				return stores[0].paused.Load() || stores[1].paused.Load()
			})
			pauser := 0
			if stores[1].paused.Load() {
				pauser = 1
			}
			if !stores[pauser].paused.Load() || stores[1-pauser].paused.Load() {
				t.Fatal("could not tell which replica paused the call")
			}
			// The replica that paused it stops; the other one runs on.
			stop(pauser)
			if !time.Now().Before(c.ExpiresAt) {
				t.Fatal("the pausing replica stopped only after the deadline: nothing tested")
			}
			expired := func(m fakeslack.Message) bool {
				return m.TS == card.TS && strings.Contains(blocksText(m), "Expired")
			}
			// Within a second of the deadline, and some slack for a
			// loaded machine: far less than the sweep's 30 s.
			if _, err := e.slack.WaitMessage(channel, expired, time.Until(c.ExpiresAt.Add(3*time.Second))); err != nil {
				st, _ := base.GetCall(t.Context(), callID)
				t.Errorf("3 s past the deadline the card does not say it expired (the call is %s): the replica left waits for its next sweep (SWEEP_INTERVAL) although it runs", st.Status)
			}
		})
	}
}

// runReplicas runs a bot on each of stores, and returns what stops the
// one of index i (checking that it stopped cleanly); those not stopped so
// stop at the test's end.
func (e *env) runReplicas(t *testing.T, stores ...fullStore) (stop func(i int)) {
	bots := make([]*bot, len(stores))
	for i, st := range stores {
		bots[i] = e.run(st)
	}
	stopped := make([]bool, len(bots))
	t.Cleanup(func() {
		for i, b := range bots {
			if !stopped[i] {
				b.cancel()
				<-b.done
			}
		}
	})
	return func(i int) {
		bots[i].cancel()
		must(t, <-bots[i].done)
		stopped[i] = true
	}
}

// cutFeed is a replica's pauseNoted handle whose pause subscription can
// be cut (announcements published meanwhile are lost, as Redis pub/sub
// loses them) and restored (go-redis subscribes again and the follower's
// live is called, as after a reconnection).
type cutFeed struct {
	*pauseNoted
	mu   sync.Mutex
	cut  bool
	live func()
}

func (s *cutFeed) FollowPauses(ctx context.Context, live func(), fn func([]byte)) error {
	s.mu.Lock()
	s.live = live
	s.mu.Unlock()
	f := s.pauseNoted.seenStore.fullStore.(agent.PauseFeed)
	return f.FollowPauses(ctx, live, func(b []byte) {
		s.mu.Lock()
		cut := s.cut
		s.mu.Unlock()
		if !cut {
			fn(b)
		}
	})
}

func (s *cutFeed) setCut(cut bool) {
	s.mu.Lock()
	s.cut = cut
	live := s.live
	s.mu.Unlock()
	if !cut && live != nil {
		live() // the subscription is live again
	}
}

// A replica whose pause subscription was cut while another replica paused
// a call gets it back (its live is called: "announcements made meanwhile
// are not replayed", so it recalls the pending calls). The pauser then
// stops before the call's deadline: the replica left must still expire
// the call on time, as it does when it heard the announcement.
// Of two replicas on one Redis, the one whose pause subscription was cut
// while the other paused a call (the announcement, and its due time, lost)
// expires the call on time once subscribed again, should the pausing
// replica stop: not at its next sweep, SWEEP_INTERVAL later.
func TestCallWhoseAnnouncementWasMissedExpiresOnTime(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = strings.Replace(ttlPolicy, "ttl: 1s", "ttl: 4s", 1)
			e.cfg.SweepInterval = 30 * time.Second // the default
			m := newScriptedModel()
			m.unblock()
			e.model.Handle(m.answer)
			base := e.open()
			e.shared = base
			stores := []*cutFeed{
				{pauseNoted: &pauseNoted{seenStore: &seenStore{fullStore: base}}},
				{pauseNoted: &pauseNoted{seenStore: &seenStore{fullStore: base}}},
			}
			stop := e.runReplicas(t, stores[0], stores[1])
			must(t, e.slack.WaitConnected(2, 10*time.Second))
			waitUntil(t, "both replicas follow the pauses", func() bool {
				stores[0].mu.Lock()
				defer stores[0].mu.Unlock()
				stores[1].mu.Lock()
				defer stores[1].mu.Unlock()
				return stores[0].live != nil && stores[1].live != nil
			})
			// Both subscriptions are cut while the call is paused.
			stores[0].setCut(true)
			stores[1].setCut(true)
			ts := e.slack.Mention(channel, requester, "deploy api 7")
			card := e.card(ts, "deploy")
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
			c, err := base.GetCall(t.Context(), callID)
			must(t, err)
			waitUntil(t, "a replica's commit of the pause returns", func() bool {
				return stores[0].paused.Load() || stores[1].paused.Load()
			})
			pauser := 0
			if stores[1].paused.Load() {
				pauser = 1
			}
			// The other replica's subscription comes back (it recalls the
			// pending calls), then the pauser stops.
			stores[1-pauser].setCut(false)
			stop(pauser)
			if !time.Now().Before(c.ExpiresAt) {
				t.Fatal("the pausing replica stopped only after the deadline: nothing tested")
			}
			expired := func(m fakeslack.Message) bool {
				return m.TS == card.TS && strings.Contains(blocksText(m), "Expired")
			}
			if _, err := e.slack.WaitMessage(channel, expired, time.Until(c.ExpiresAt.Add(3*time.Second))); err != nil {
				st, _ := base.GetCall(t.Context(), callID)
				t.Errorf("3 s past the deadline the card does not say it expired (the call is %s): the replica whose subscription came back waits for its next sweep (SWEEP_INTERVAL)", st.Status)
			}
		})
	}
}
