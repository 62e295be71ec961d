package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// pauseHeldStore holds the commit that saves a pause until it is released
// (nil lets it through), signalling arrived first; while it is held, each
// read of a call (GetCallWith, GetCall) signals looked. It counts PutCallNote calls.
type pauseHeldStore struct {
	fullStore
	arrived chan struct{}
	release chan error
	looked  chan string
	holding atomic.Bool
	notes   atomic.Int64
}

func (s *pauseHeldStore) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Run != nil {
		s.holding.Store(true)
		s.arrived <- struct{}{}
		err := <-s.release
		s.holding.Store(false)
		if err != nil {
			return err
		}
	}
	return s.fullStore.CommitTurn(ctx, c)
}

func (s *pauseHeldStore) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	c, recs, version, err := s.fullStore.GetCallWith(ctx, id, kinds...)
	if s.holding.Load() {
		s.looked <- id
	}
	return c, recs, version, err
}

func (s *pauseHeldStore) GetCall(ctx context.Context, id string) (store.Call, error) {
	c, err := s.fullStore.GetCall(ctx, id)
	if s.holding.Load() {
		s.looked <- id
	}
	return c, err
}

func (s *pauseHeldStore) PutCallNote(ctx context.Context, callID string, note []byte) error {
	s.notes.Add(1)
	return s.fullStore.PutCallNote(ctx, callID, note)
}

func newPauseHeldEnv(t *testing.T, kind storeKind) (*env, *pauseHeldStore) {
	held := &pauseHeldStore{arrived: make(chan struct{}, 1), release: make(chan error), looked: make(chan string, 4)}
	e := newEnvWith(t, kind, func(s fullStore) fullStore {
		held.fullStore = s
		return held
	})
	return e, held
}

// heldCard mentions the bot asking for a deploy, which the model calls
// (then answering with after, if the step resumes), and waits until the
// pause's commit is held and its card posted; it returns the thread, the
// card and its call's id.
func heldCard(t *testing.T, e *env, held *pauseHeldStore, after ...fakeopenai.Response) (string, fakeslack.Message, string) {
	t.Helper()
	e.model.Reply(append([]fakeopenai.Response{fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`))}, after...)...)
	ts := e.slack.Mention(channel, requester, "deploy")
	<-held.arrived
	card := e.waitThread(ts, "with the card", isCard)
	callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
	return ts, card, callID
}

// The card is posted before its pause is saved, and where it is is saved
// with the call, in the pause's own store step: no note is written after
// it. An Approve clicked before the save finds no call, waits for the turn
// that holds the conversation, and is decided once the pause is saved: the
// tool runs once and the clicker is not told the request is unknown.
func TestClickBeforeThePauseIsSavedIsDecidedOnceItIs(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, held := newPauseHeldEnv(t, kind)
			ts, card, callID := heldCard(t, e, held, fakeopenai.Text("deployed at last"))
			if _, err := held.fullStore.GetCall(t.Context(), callID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("GetCall(%s) while the pause is held = %v, want ErrNotFound: the card comes first", callID, err)
			}

			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			if got := <-held.looked; got != callID {
				t.Fatalf("the click read call %s, want %s", got, callID)
			}
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times before the pause was saved", n)
			}
			held.release <- nil

			e.answer(ts, "deployed at last")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			for _, m := range e.slack.Ephemerals(approver) {
				t.Errorf("the approver was told %q; want nothing: the click was decided", m.Text)
			}
			note, err := held.fullStore.CallNote(t.Context(), callID)
			must(t, err)
			var refs struct {
				Posting bool `json:"posting"`
				Refs    []struct {
					Channel string `json:"channel"`
					TS      string `json:"ts"`
				} `json:"refs"`
			}
			must(t, json.Unmarshal(note, &refs))
			if refs.Posting || len(refs.Refs) != 1 || refs.Refs[0].Channel != channel || refs.Refs[0].TS != card.TS {
				t.Errorf("the call's note = %s, want the card at %s %s", note, channel, card.TS)
			}
			if n := held.notes.Load(); n != 0 {
				t.Errorf("PutCallNote was called %d times; want none: the card's place is saved with the pause", n)
			}
		})
	}
}

// A Reject clicked before the pause is saved opens its modal, for that
// call, once the pause is saved, and the clicker is not told the
// request is unknown.
func TestModalClickBeforeThePauseIsSavedOpensOnceItIs(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, held := newPauseHeldEnv(t, kind)
			_, card, callID := heldCard(t, e, held)

			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
			must(t, err)
			if got := <-held.looked; got != callID {
				t.Fatalf("the click read call %s, want %s", got, callID)
			}
			if calls := e.slack.Calls("views.open"); len(calls) != 0 {
				t.Fatalf("a modal opened before the pause was saved: %s", calls[0].Body)
			}
			held.release <- nil

			open, err := e.slack.WaitCall("views.open", nil, 10*time.Second)
			must(t, err)
			if !strings.Contains(string(open.Body), `"private_metadata":"`+callID+"~") || !strings.Contains(string(open.Body), `"callback_id":"reject_modal"`) {
				t.Errorf("the modal opened is not the Reject of call %s: %s", callID, open.Body)
			}
			for _, m := range e.slack.Ephemerals(approver) {
				t.Errorf("the approver was told %q; want the modal only", m.Text)
			}
		})
	}
}

// A pause that cannot be saved turns its card, posted already, into a
// notice with no buttons that the request could not be saved; the thread
// is told to ask again, not promised a retry (the turn is recorded with
// the call not performed: nothing is left to carry on), and nothing runs.
func TestUnsavedPauseMarksItsCard(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, held := newPauseHeldEnv(t, kind)
			ts, card, _ := heldCard(t, e, held)
			held.release <- errOutage

			got := e.waitThread(ts, "with the card marked as not saved", func(m fakeslack.Message) bool {
				return m.TS == card.TS && strings.Contains(blocksText(m), "could not be saved")
			})
			if _, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, ""); err == nil || isCard(got) {
				t.Errorf("the unsaved card can still be approved: %s", got.Blocks)
			}
			note := e.answer(ts, "my state store may be unavailable")
			if !strings.Contains(note.Text, "ask again") || strings.Contains(note.Text, "try again shortly") {
				t.Errorf("the thread was told %q; want to ask again", note.Text)
			}
			listed, err := held.fullStore.Unanswered(t.Context(), time.Now().Add(time.Hour), 0, 100)
			must(t, err)
			if key := slackapp.ConversationKey(e.slack.TeamID(), channel, ts); slices.Contains(listed, key) {
				t.Errorf("the conversation is still listed as unanswered: the turn was not recorded")
			}
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times; want none: the request was never saved", n)
			}
		})
	}
}
