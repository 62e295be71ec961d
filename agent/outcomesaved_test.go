package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// unrecordedTurns is a store whose turns are never recorded, as for a
// process that dies before its turn's write.
type unrecordedTurns struct{ agent.Store }

func (unrecordedTurns) CommitTurn(context.Context, store.Commit) error { return errInjected }

// A call its resume found should not run (the policy denies it now) has
// that saved with it: a resume claimed again, after the first died
// before it could record its turn, tells the model and the card the same,
// and does not judge the call anew, though the policy would let it run by
// then. The card's note, and what the model read, are as the first
// resume gave them.
func TestCallNotRunIsToldSoWhenItsResumeIsClaimedAgain(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
			must(t, err)
			_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "frozen", Tool: "restart", Verdict: approvals.Deny, Reason: "change freeze"})
			must(t, err)

			holds := newHoldLog(w.store)
			dying := w.agentWith(unrecordedTurns{holds}, w.rec)
			w.model.Reply(fakeopenai.Text("not restarted"))
			if _, err := dying.Resume(ctx, p.RunID); !errors.Is(err, errInjected) {
				t.Fatalf("the resume whose turn is not recorded returned %v, want the store's failure", err)
			}
			first := toolResults(t, w.model)
			if len(first) != 1 || !strings.Contains(first[0], "not performed: the policy now denies this call") {
				t.Fatalf("the model read %q, want the call not performed because the policy denies it", first)
			}
			news, err := a.News(ctx, p.ID)
			must(t, err)
			if news.Phase != agent.PhaseSkipped || !strings.HasPrefix(news.Note, "policy now denies") || "c1: "+news.Result.Content != first[0] {
				t.Fatalf("the call as stored is %s (%q, %q), want skipped as its resume told", news.Phase, news.Note, news.Result.Content)
			}

			holds.lapse(t, p.Conversation, p.RunID)
			must(t, w.engine.RemoveRule(ctx, "UADMIN0001", "frozen"))
			w.model.Reply(fakeopenai.Text("not restarted, as said"))
			_, err = w.restart().Resume(ctx, p.RunID)
			must(t, err)
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times, want never: its resume said it would not run", n)
			}
			if again := toolResults(t, w.model); len(again) != 1 || again[0] != first[0] {
				t.Errorf("the model read %q the second time, want %q as the first", again, first[0])
			}
			notes := skippedNotes(w)
			if len(notes) != 2 || notes[0] != news.Note || notes[1] != news.Note {
				t.Errorf("the card's notes are %q, want %q twice", notes, news.Note)
			}
		})
	}
}

// A call that is not the one its resume marked as started (the second of
// a step) is marked when its resume finds it should not run, and its
// outcome saved with it, so that the store tells why as its card does.
func TestSecondCallNotRunIsSavedSo(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`), call("c2", "restart", `{"env":"staging"}`)))
			out, err := a.Run(ctx, request("please"))
			must(t, err)
			if len(out.Pending) != 2 {
				t.Fatalf("paused on %d calls, want 2", len(out.Pending))
			}
			for _, p := range out.Pending {
				_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				must(t, err)
			}
			_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "frozen", Tool: "restart", Verdict: approvals.Deny, Reason: "change freeze"})
			must(t, err)
			w.model.Reply(fakeopenai.Text("deployed, not restarted"))
			_, err = a.Resume(ctx, out.RunID)
			must(t, err)
			if d, r := w.deploys.n.Load(), w.restarts.n.Load(); d != 1 || r != 0 {
				t.Errorf("deploy ran %d times and restart %d, want once and never", d, r)
			}
			news, err := a.News(ctx, out.Pending[1].ID)
			must(t, err)
			if news.Phase != agent.PhaseSkipped || !strings.HasPrefix(news.Note, "policy now denies") || !strings.Contains(news.Result.Content, "not performed") {
				t.Errorf("the second call as stored is %s (%q, %q), want skipped because the policy denies it", news.Phase, news.Note, news.Result.Content)
			}
			if got := toolExecutions(t, w.store, "restart"); len(got) != 0 {
				t.Errorf("audited executions of restart: %q, want none", got)
			}
		})
	}
}

// savesAfter is a store whose results are saved only once after is
// closed, noting each call whose result it saved.
type savesAfter struct {
	agent.Store
	after <-chan struct{}
	saved sync.Map // call id -> true
}

func (s *savesAfter) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	<-s.after
	err := s.Store.SaveResult(ctx, callID, result, e)
	s.saved.Store(callID, true)
	return err
}

// savedWhenTold is a Reporter that notes, for each call reported
// executed, whether its result was saved by then.
type savedWhenTold struct {
	agent.NopReporter
	st   *savesAfter
	told atomic.Int64
	mu   sync.Mutex
	bad  []string
}

func (r *savedWhenTold) Updated(_ context.Context, u agent.CallUpdate) {
	if u.Phase != agent.PhaseExecuted {
		return
	}
	r.told.Add(1)
	if _, ok := r.st.saved.Load(u.Call.ID); !ok {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.bad = append(r.bad, u.Call.ID)
	}
}

// A call's card is told it ran once its result is saved with it, not
// before: another process that reads the call once the card shows the
// output (see News) reads the output too. The save is not waited for
// before the model is asked with the result: here it is made only once
// the model was asked.
func TestCardIsToldOfAResultOnceItIsSaved(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			asked := make(chan struct{})
			var once sync.Once
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				once.Do(func() { close(asked) })
				return fakeopenai.Text("Deployed.")
			})
			st := &savesAfter{Store: w.store, after: asked}
			rep := &savedWhenTold{st: st}
			a := w.agentWith(st, rep)
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			_, err = a.Resume(ctx, p.RunID)
			must(t, err)
			if n := w.deploys.n.Load(); n != 1 {
				t.Fatalf("deploy ran %d times, want once", n)
			}
			if n := rep.told.Load(); n != 1 {
				t.Fatalf("the card was told %d times that the call ran, want once", n)
			}
			if len(rep.bad) > 0 {
				t.Errorf("the card was told that %q ran before its result was saved", rep.bad)
			}
		})
	}
}
