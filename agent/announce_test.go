package agent_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// announcer is a recorder that is also an agent.Announcer: it notes, for
// each call it announces, whether the store had the call yet, and gives
// each a note.
type announcer struct {
	recorder
	st agent.Store

	mu        sync.Mutex
	events    []string
	announced []string
}

func (a *announcer) Announce(ctx context.Context, calls []agent.PendingCall) map[string][]byte {
	notes := map[string][]byte{}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range calls {
		_, err := a.st.GetCall(ctx, c.ID)
		a.events = append(a.events, "announce")
		if !errors.Is(err, store.ErrNotFound) {
			a.events = append(a.events, "the call was saved before its card: "+errString(err))
		}
		a.announced = append(a.announced, c.ID)
		notes[c.ID] = []byte(`{"card":"` + c.ID + `"}`)
	}
	return notes
}

func (a *announcer) Paused(ctx context.Context, calls []agent.PendingCall) {
	a.mu.Lock()
	a.events = append(a.events, "paused")
	a.mu.Unlock()
	a.recorder.Paused(ctx, calls)
}

func (a *announcer) Unsaved(_ context.Context, calls []agent.PendingCall) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.events = append(a.events, "unsaved")
}

func (a *announcer) Events() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.events)
}

func errString(err error) string {
	if err == nil {
		return "found"
	}
	return err.Error()
}

// noteReader reads a call's note (both stores have CallNote).
type noteReader interface {
	CallNote(ctx context.Context, callID string) ([]byte, error)
}

// A reporter that announces its cards is told of the pause before it is
// saved, and the notes it returns are saved with the calls; Paused follows
// the save.
func TestAnnouncedPauseSavesTheNotes(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			rep := &announcer{st: w.store}
			a := w.agentWith(w.store, rep)
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`), call("c2", "deploy", `{"service":"web","version":"3"}`)))
			out, err := a.Run(t.Context(), request("deploy both"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 2 {
				t.Fatalf("Run = %s with %d pending, want paused on 2", out.Status, len(out.Pending))
			}
			if got, want := rep.Events(), []string{"announce", "announce", "paused"}; !slices.Equal(got, want) {
				t.Errorf("reporter events = %q, want %q", got, want)
			}
			for _, p := range out.Pending {
				note, err := w.store.(noteReader).CallNote(t.Context(), p.ID)
				if err != nil || string(note) != `{"card":"`+p.ID+`"}` {
					t.Errorf("CallNote(%s) = %s, %v; want the note Announce gave", p.ID, note, err)
				}
			}
		})
	}
}

// failingPause fails the commit that saves a pause.
type failingPause struct {
	agent.Store
}

func (s failingPause) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Run != nil {
		return errors.New("store unreachable")
	}
	return s.Store.CommitTurn(ctx, c)
}

// A pause that cannot be saved is reported as Unsaved, never Paused: its
// announced cards must say that nothing will run.
func TestAnnouncedPauseThatIsNotSavedIsReportedUnsaved(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			rep := &announcer{st: w.store}
			a := w.agentWith(failingPause{w.store}, rep)
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
			if _, err := a.Run(t.Context(), request("deploy")); err == nil {
				t.Fatal("Run with a pause that cannot be saved succeeded")
			}
			if got, want := rep.Events(), []string{"announce", "unsaved"}; !slices.Equal(got, want) {
				t.Errorf("reporter events = %q, want %q", got, want)
			}
			if n := w.deploys.n.Load(); n != 0 {
				t.Errorf("deploy ran %d times", n)
			}
		})
	}
}

// AwaitTurn returns once no turn holds the conversation, in the process
// that runs the turn and in another one: a pause is saved by then, and its
// call is found.
func TestAwaitTurnReturnsOnceTheTurnEnds(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			entered, release := make(chan struct{}), make(chan struct{})
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				close(entered)
				<-release
				return fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`))
			})
			rep := &announcer{st: w.store}
			w.cfg.Owner = "holder"
			holder := w.agentWith(w.store, rep)
			w.cfg.Owner = "other"
			other := w.agentWith(w.store, &recorder{})
			req := request("deploy api 2")
			ran := make(chan error, 1)
			go func() {
				_, err := holder.Run(context.Background(), req)
				ran <- err
			}()
			<-entered
			awaited := make(chan string, 2)
			for name, a := range map[string]*agent.Agent{"same process": holder, "other process": other} {
				go func() {
					err := a.AwaitTurn(context.Background(), req.Conversation)
					// The card was announced and its call saved before
					// AwaitTurn returned.
					rep.mu.Lock()
					ids := slices.Clone(rep.announced)
					rep.mu.Unlock()
					if err != nil || len(ids) != 1 {
						t.Errorf("%s: AwaitTurn = %v with calls %v announced; want nil once the one call is saved", name, err, ids)
					}
					for _, id := range ids {
						if _, gerr := w.store.GetCall(context.Background(), id); gerr != nil {
							t.Errorf("%s: after AwaitTurn, call %s: %v; want it saved", name, id, gerr)
						}
					}
					awaited <- name
				}()
			}
			close(release)
			must(t, <-ran)
			<-awaited
			<-awaited
		})
	}
}

// pauseReplyLost applies (or, with drop, does not apply) a pause's commit,
// then answers with an error and cannot be read until up is set: the reply
// of a store step lost, with the store unreachable for a while.
type pauseReplyLost struct {
	storetest.Store
	drop bool
	down atomic.Bool
}

func (s *pauseReplyLost) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Run == nil || s.down.Load() {
		return s.Store.CommitTurn(ctx, c)
	}
	if !s.drop {
		if err := s.Store.CommitTurn(ctx, c); err != nil {
			return err
		}
	}
	s.down.Store(true)
	return errors.New("i/o timeout")
}

func (s *pauseReplyLost) LoadConversation(ctx context.Context, key string) (store.Conversation, error) {
	if s.down.Load() {
		return store.Conversation{}, errors.New("i/o timeout")
	}
	return s.Store.LoadConversation(ctx, key)
}

// A pause whose commit answered with an error, when the store cannot then
// tell whether it was saved, keeps its cards: saved, its call is decided
// and runs as any other; not saved, a decision on it is refused as unknown
// and nothing runs. Never does a card say "not saved" of a call that was.
func TestPauseOfUnknownFateKeepsItsCards(t *testing.T) {
	for _, b := range backends(t) {
		for _, saved := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/saved=%v", b.name, saved), func(t *testing.T) {
				w := newWorld(t, b)
				rep := &announcer{st: w.store}
				st := &pauseReplyLost{Store: w.store.(storetest.Store), drop: !saved}
				a := w.agentWith(st, rep)
				w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
				out, err := a.Run(t.Context(), request("deploy"))
				if err != nil || out.Status != agent.Paused || len(out.Pending) != 1 {
					t.Fatalf("Run = %s with %d pending, %v; want paused on the one call", out.Status, len(out.Pending), err)
				}
				if got, want := rep.Events(), []string{"announce", "paused"}; !slices.Equal(got, want) {
					t.Errorf("reporter events = %q, want %q", got, want)
				}
				st.down.Store(false)
				p := out.Pending[0]
				w.model.Reply(fakeopenai.Text("deployed"))
				res, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				if !saved {
					if !errors.Is(err, approvals.ErrUnknownCall) {
						t.Fatalf("a decision on a call that was never saved: got %v, want ErrUnknownCall", err)
					}
					if n := w.deploys.n.Load(); n != 0 {
						t.Errorf("deploy ran %d times", n)
					}
					return
				}
				must(t, err)
				if !res.Complete {
					t.Fatal("the one approval did not complete the step")
				}
				_, err = a.Resume(t.Context(), p.RunID)
				must(t, err)
				if n := w.deploys.n.Load(); n != 1 {
					t.Errorf("deploy ran %d times, want once", n)
				}
			})
		}
	}
}

// A pause that cannot be saved is not logged as pending (msg=audit
// action=pause), as it is not in the stored audit log: log pipelines
// would show a call waiting that no one can decide.
func TestPauseNotSavedIsNotLoggedAsPending(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	var buf syncBuffer
	w.cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := w.agentWith(failingPause{w.store}, w.rec)
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
	if _, err := a.Run(t.Context(), request("deploy")); err == nil {
		t.Fatal("Run with a pause that cannot be saved succeeded")
	}
	log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
	must(t, err)
	for _, e := range log {
		if e.Action == "pause" {
			t.Errorf("stored pause entry %+v for a pause never saved", e)
		}
	}
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "msg=audit") && strings.Contains(line, "action=pause") {
			t.Errorf("audit log line for a pause never saved: %s", line)
		}
	}
	// A pause saved is logged.
	from := len(buf.String())
	b := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"3"}`)))
	if out, err := b.Run(t.Context(), request("deploy")); err != nil || out.Status != agent.Paused {
		t.Fatalf("Run = %+v, %v; want it paused", out, err)
	}
	if logged := buf.String()[from:]; !strings.Contains(logged, "action=pause") {
		t.Errorf("no audit log line for the pause saved:\n%s", logged)
	}
}
