package slackapp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// seenStore is one replica's handle on a store the replicas share: it
// notes the events the replica de-duplicates, so that a test can tell
// which replica got one, and the calls whose card locations it read.
type seenStore struct {
	fullStore
	mu    sync.Mutex
	seen  map[string]bool
	notes map[string]bool
}

func (s *seenStore) CallNote(ctx context.Context, callID string) ([]byte, error) {
	s.mu.Lock()
	if s.notes == nil {
		s.notes = map[string]bool{}
	}
	s.notes[callID] = true
	s.mu.Unlock()
	return s.fullStore.CallNote(ctx, callID)
}

// readNote reports whether the replica read where callID's card is.
func (s *seenStore) readNote(callID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notes[callID]
}

func (s *seenStore) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	s.mu.Lock()
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[id] = true
	s.mu.Unlock()
	return s.fullStore.SeenEvent(ctx, id, ttl)
}

func (s *seenStore) saw(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id]
}

// nextEnvelopeTo makes the next envelope go to the replica of to, of two
// replicas (to and other) whose connections the fake serves in turn: it
// opens a Home tab, whose event goes to one of them, once more if that
// was to.
func (e *env) nextEnvelopeTo(to, other *seenStore) {
	e.t.Helper()
	for range 2 {
		env, _ := e.slack.Envelope(e.slack.OpenHome(stranger))
		key := "event:" + env.EventID
		waitUntil(e.t, "a replica takes the Home tab's event", func() bool { return to.saw(key) || other.saw(key) })
		if other.saw(key) {
			return
		}
	}
	e.t.Fatal("two envelopes in a row went to the same replica")
}

// Copies of a card that a replica is still posting when a decision made on
// another replica is rendered (that replica waits for them cardWait, then
// updates the copies recorded so far) are brought up to date by the
// replica that posts them once they are all out: no approver keeps the
// buttons of a decided call.
func TestLateCopiesFollowADecisionOnAnotherReplica(t *testing.T) {
	const private = "CPRIVATE01"
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = threeApproversPolicy
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
			base := e.open()
			e.shared = base
			x, y := &seenStore{fullStore: base}, &seenStore{fullStore: base}
			var bots []*bot
			t.Cleanup(func() {
				for _, b := range bots {
					b.cancel()
					if err := <-b.done; err != nil {
						t.Errorf("replica stopped with %v", err)
					}
				}
			})
			bots = append(bots, e.run(x))

			// The replica that pauses the call (the only one connected
			// yet) opens the DM of the first approver who cannot see the
			// channel slowly.
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
			opened, release := e.slack.HoldNext("conversations.open")
			defer release()
			ts := e.slack.Mention(private, requester, "deploy vault 14")
			card := e.cardIn(private, ts, "deploy")
			<-opened

			bots = append(bots, e.run(y))
			if err := e.slack.WaitConnected(2, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			e.nextEnvelopeTo(y, x)
			_, err := e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			// The other replica decides, waits for the copies, gives up
			// and updates the card in the thread; the call runs.
			e.answerIn(private, ts, "Deployed vault 14.")
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
			if !y.readNote(callID) {
				t.Fatal("the card was not updated by the replica that did not pause the call")
			}
			e.waitIn(private, ts, "with the card approved", func(m fakeslack.Message) bool {
				return m.TS == card.TS && strings.Contains(blocksText(m), "Approved by")
			})

			release() // the copies go out, as the card was when the call paused
			for _, u := range []string{approver, stranger} {
				dm := e.slack.DMChannel(u)
				waitUntil(t, u+"'s copy of the card shows the decision", func() bool {
					copies := 0
					for _, m := range e.slack.Messages(dm) {
						if !strings.Contains(m.Text+blocksText(m), "deploy") {
							continue
						}
						copies++
						if isCard(m) || !strings.Contains(blocksText(m), "Approved by") {
							return false
						}
					}
					return copies == 1
				})
			}
		})
	}
}
