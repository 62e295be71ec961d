package agent_test

import (
	"context"
	"errors"
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

// unrecordedTurns is a store whose turns are never recorded, as for a
// process that dies before its turn's write.
type unrecordedTurns struct{ agent.Store }

func (unrecordedTurns) CommitTurn(context.Context, store.Commit) error { return errInjected }

// approvedThenFrozen pauses on a restart of staging, which UOTHER2
// approves, then freezes restarts (see freeze): the call's resume finds
// it should not run.
func approvedThenFrozen(t *testing.T, w *world, a *agent.Agent) agent.PendingCall {
	t.Helper()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	_, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
	must(t, err)
	freeze(t, w)
	return p
}

// approvedStepThenFrozen pauses on a restart of staging, after a deploy
// of api 2 if second, each of which UAPPROVER1 approves, then freezes
// restarts (see freeze): the step's resume finds the restart, its last
// pending call, should not run.
func approvedStepThenFrozen(t *testing.T, w *world, a *agent.Agent, second bool) agent.Outcome {
	t.Helper()
	calls := []fakeopenai.ToolCall{call("c1", "deploy", `{"service":"api","version":"2"}`), call("c2", "restart", `{"env":"staging"}`)}
	if !second {
		calls = calls[1:]
	}
	w.model.Reply(fakeopenai.ToolCalls(calls...))
	out, err := a.Run(t.Context(), request("please"))
	must(t, err)
	if len(out.Pending) != len(calls) {
		t.Fatalf("paused on %d calls, want %d", len(out.Pending), len(calls))
	}
	for _, p := range out.Pending {
		_, err = a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
		must(t, err)
	}
	freeze(t, w)
	return out
}

// freeze adds the rule frozen, which denies restarts; thaw removes it.
func freeze(t *testing.T, w *world) {
	t.Helper()
	_, err := w.engine.AddRule(t.Context(), "UADMIN0001", approvals.Rule{ID: "frozen", Tool: "restart", Verdict: approvals.Deny, Reason: "change freeze"})
	must(t, err)
}

func thaw(t *testing.T, w *world) {
	t.Helper()
	must(t, w.engine.RemoveRule(t.Context(), "UADMIN0001", "frozen"))
}

// thawedRunsOnce lapses the holds a first resume of runID took, thaws
// restarts, and resumes the run in another process, which judges the
// restart afresh: it runs once, and the model reads that it ran, not that
// it was not performed or that its outcome is unknown.
func thawedRunsOnce(t *testing.T, w *world, holds *holdLog, conversation, runID string) {
	t.Helper()
	holds.lapse(t, conversation, runID)
	thaw(t, w)
	w.model.Reply(fakeopenai.Text("restarted"))
	_, err := w.restart().Resume(t.Context(), runID)
	must(t, err)
	if n := w.restarts.n.Load(); n != 1 {
		t.Errorf("restart ran %d times, want once", n)
	}
	for _, r := range toolResults(t, w.model) {
		if strings.Contains(r, "not performed") || strings.Contains(r, "outcome unknown") {
			t.Errorf("the model read %q, want the restart run", r)
		}
	}
}

// A call its resume found should not run (the policy denies it now) has
// that saved with it: a resume claimed again, after the first died
// before it could record its turn, tells the model and the card the same,
// and does not judge the call anew, though the policy would let it run by
// then. The card's note, and what the model read, are as the first
// resume gave them. So for the first call of a step, which the resume
// marked with its claim, and for a later one, after a call that ran.
func TestCallNotRunIsToldSoWhenItsResumeIsClaimedAgain(t *testing.T) {
	for _, b := range backends(t) {
		for _, second := range []bool{false, true} {
			name := b.name + "/first_of_its_step"
			if second {
				name = b.name + "/second_of_its_step"
			}
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				a := w.agent()
				out := approvedStepThenFrozen(t, w, a, second)
				p := out.Pending[len(out.Pending)-1]
				holds := newHoldLog(w.store)
				dying := w.agentWith(unrecordedTurns{holds}, w.rec)
				w.model.Reply(fakeopenai.Text("not restarted"))
				if _, err := dying.Resume(ctx, p.RunID); !errors.Is(err, errInjected) {
					t.Fatalf("the resume whose turn is not recorded returned %v, want the store's failure", err)
				}
				first := toolResults(t, w.model)
				if len(first) != len(out.Pending) || !strings.Contains(first[len(first)-1], "not performed: the policy now denies this call") {
					t.Fatalf("the model read %q, want the restart not performed because the policy denies it", first)
				}
				told := first[len(first)-1]
				news, err := a.News(ctx, p.ID)
				must(t, err)
				if news.Phase != agent.PhaseSkipped || !strings.HasPrefix(news.Note, "policy now denies") || "c2: "+news.Result.Content != told {
					t.Fatalf("the call as stored is %s (%q, %q), want skipped as its resume told", news.Phase, news.Note, news.Result.Content)
				}

				holds.lapse(t, p.Conversation, p.RunID)
				thaw(t, w)
				w.model.Reply(fakeopenai.Text("not restarted, as said"))
				_, err = w.restart().Resume(ctx, p.RunID)
				must(t, err)
				if n := w.restarts.n.Load(); n != 0 {
					t.Errorf("restart ran %d times, want never: its resume said it would not run", n)
				}
				if again := toolResults(t, w.model); len(again) != len(out.Pending) || again[len(again)-1] != told {
					t.Errorf("the model read %q the second time, want %q as the first", again, told)
				}
				notes := skippedNotes(w)
				if len(notes) != 2 || notes[0] != news.Note || notes[1] != news.Note {
					t.Errorf("the card's notes are %q, want %q twice", notes, news.Note)
				}
				if second {
					if got := toolExecutions(t, w.store, "deploy"); len(got) != 1 {
						t.Errorf("audited executions of deploy: %q, want the one run", got)
					}
				}
			})
		}
	}
}

// failsSaveOf is a store that fails the save of call id's result, and,
// with turns, every turn's write: an outage as a resume settles its step.
type failsSaveOf struct {
	agent.Store
	id    string
	turns bool
}

func (s failsSaveOf) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	if callID == s.id {
		return errInjected
	}
	return s.Store.SaveResult(ctx, callID, result, e)
}

func (s failsSaveOf) SkipExecution(ctx context.Context, callID string, result []byte) error {
	if callID == s.id {
		return errInjected
	}
	return s.Store.SkipExecution(ctx, callID, result)
}

func (s failsSaveOf) CommitTurn(ctx context.Context, c store.Commit) error {
	if s.turns {
		return errInjected
	}
	return s.Store.CommitTurn(ctx, c)
}

// A call not run whose outcome could not be saved with it is left
// unmarked, as a call that never started: the second call of a step (its
// mark is made in the step that saves, which failed), and the first (its
// mark, made with the claim, is taken back).
// A resume claimed again after the first died judges it afresh: with the
// rule that denied it gone, it runs, once, never reported as of unknown
// outcome.
func TestCallNotRunWithNothingSavedIsJudgedAgain(t *testing.T) {
	for _, b := range backends(t) {
		for _, second := range []bool{true, false} {
			name := b.name + "/first_whose_save_failed"
			if second {
				name = b.name + "/second_of_its_step"
			}
			t.Run(name, func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				a := w.agent()
				out := approvedStepThenFrozen(t, w, a, second)
				restart := out.Pending[len(out.Pending)-1]
				log := &turnLog{Store: w.store.(storetest.Store)}
				holds := newHoldLog(log)
				dying := w.agentWith(failsSaveOf{Store: holds, id: restart.ID, turns: true}, w.rec)
				w.model.Reply(fakeopenai.Text("not restarted"))
				if _, err := dying.Resume(ctx, out.RunID); !errors.Is(err, errInjected) {
					t.Fatalf("the resume whose turn is not recorded returned %v, want the store's failure", err)
				}
				if calls, _ := log.take(); slices.Contains(calls, "BeginExecution") {
					t.Errorf("store calls of the resume = %q, want no mark of a call that does not run", calls)
				}
				news, err := a.News(ctx, restart.ID)
				must(t, err)
				if news.Phase != agent.PhaseDecided || !news.Unstarted {
					t.Errorf("the call as stored is %s (unstarted %v), want decided, not started", news.Phase, news.Unstarted)
				}

				thawedRunsOnce(t, w, holds, restart.Conversation, out.RunID)
				if got := toolExecutions(t, w.store, "restart"); len(got) != 1 {
					t.Errorf("audited executions of restart: %q, want one", got)
				}
			})
		}
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

// endsAfterClaim is a store whose resume's context ends (end) once the
// resume is claimed: a shutdown, or a claim found lost, as it settles.
type endsAfterClaim struct {
	agent.Store
	end func()
}

func (s endsAfterClaim) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := s.Store.BeginResume(ctx, runID, r)
	s.end()
	return rs, err
}

// A resume that is stopping (a shutdown, its claim lost) as it finds its
// call should not run settles nothing, as for a call it would run: the
// call is left, unmarked and with nothing saved, to the next resume, which
// judges it (the rule that denied it is gone by then: it runs, once); its
// card was not told it did not run, nor the model that it was not
// performed.
func TestCallNotRunAsTheResumeStopsIsLeftToTheNext(t *testing.T) {
	for _, b := range backends(t) {
		for _, cause := range []error{context.Canceled, agent.ErrLeaseLost} {
			t.Run(b.name+"/"+cause.Error(), func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				a := w.agent()
				p := approvedThenFrozen(t, w, a)
				rctx, cancel := context.WithCancelCause(ctx)
				defer cancel(nil)
				holds := newHoldLog(w.store)
				if _, err := w.agentWith(endsAfterClaim{Store: holds, end: func() { cancel(cause) }}, w.rec).Resume(rctx, p.RunID); err == nil {
					t.Fatal("the resume whose context ended returned no error")
				}
				news, err := a.News(ctx, p.ID)
				must(t, err)
				if news.Phase != agent.PhaseDecided || !news.Unstarted {
					t.Errorf("the call as stored is %s (unstarted %v, %q), want decided, not started", news.Phase, news.Unstarted, news.Note)
				}
				if notes := skippedNotes(w); len(notes) != 0 {
					t.Errorf("the card was told %q, want nothing: the call was left to the next resume", notes)
				}
				thawedRunsOnce(t, w, holds, p.Conversation, p.RunID)
			})
		}
	}
}

// heldSaveOf is a store whose save of call id's result waits, once it has
// arrived, until release is closed.
type heldSaveOf struct {
	agent.Store
	id      string
	arrived chan struct{}
	release chan struct{}
}

func (s heldSaveOf) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	if callID == s.id {
		close(s.arrived)
		<-s.release
	}
	return s.Store.SaveResult(ctx, callID, result, e)
}

// The save of a call's "not run" is in flight when the resume's claim
// lapses (a stalled process), and the process that takes the run over
// settles the call first (it finds it started, with no result: outcome
// unknown). The first save is refused; its card is told what the store
// holds, not the "not run" it could not save, so that the card ends as
// the store says.
func TestNotRunRefusedByAnotherResultTellsTheCardWhatIsStored(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			p := approvedThenFrozen(t, w, a)
			w.model.Reply(fakeopenai.Text("not restarted"), fakeopenai.Text("outcome unknown"))
			holds := newHoldLog(w.store)
			st := heldSaveOf{Store: holds, id: p.ID, arrived: make(chan struct{}), release: make(chan struct{})}
			first := w.agentWith(st, w.rec)
			done := make(chan error, 1)
			go func() { _, err := first.Resume(context.WithoutCancel(ctx), p.RunID); done <- err }()
			<-st.arrived
			holds.lapse(t, p.Conversation, p.RunID)
			_, err := w.agent().Resume(ctx, p.RunID)
			must(t, err)
			close(st.release)
			<-done
			var last agent.CallUpdate
			for _, u := range w.rec.Updates() {
				if u.Call.ID == p.ID {
					last = u
				}
			}
			news, err := a.News(ctx, p.ID)
			must(t, err)
			if news.Note != agent.NoteInterrupted {
				t.Fatalf("the call as stored is %s %q, want the other resume's outcome unknown", news.Phase, news.Note)
			}
			if last.Phase != news.Phase || last.Note != news.Note {
				t.Errorf("the card was told last %s %q, while the store holds %s %q", last.Phase, last.Note, news.Phase, news.Note)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times, want never", n)
			}
		})
	}
}

// holdsAfterClaim is a store whose BeginResume, once it has claimed,
// waits for goOn and then ends the resume's context (end): a process that
// stalls right after claiming, and finds its claim lost when it wakes.
type holdsAfterClaim struct {
	agent.Store
	claimed chan struct{}
	goOn    chan struct{}
	end     func()
}

func (s holdsAfterClaim) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := s.Store.BeginResume(ctx, runID, r)
	close(s.claimed)
	<-s.goOn
	s.end()
	return rs, err
}

// A stalls after marking the call, and its claim lapses; B takes the run
// over and finds the call started with no result (outcome unknown, which
// its model reads); A wakes, finds its claim lost, stops, and takes its
// mark back before B's save lands, which is refused. B's card is told
// the outcome unknown its model read, not the store's bare "decided"
// (shown as running), which nothing would render again.
func TestUnknownRefusedAfterAMarkTakenBackKeepsItsWord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
			must(t, err)
			holds := newHoldLog(w.store)
			actx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			sa := holdsAfterClaim{Store: holds, claimed: make(chan struct{}), goOn: make(chan struct{}), end: func() { cancel(agent.ErrLeaseLost) }}
			aDone := make(chan error, 1)
			go func() { _, err := w.agentWith(sa, w.rec).Resume(actx, p.RunID); aDone <- err }()
			<-sa.claimed
			holds.lapse(t, p.Conversation, p.RunID)

			sb := heldSaveOf{Store: w.store, id: p.ID, arrived: make(chan struct{}), release: make(chan struct{})}
			w.model.Reply(fakeopenai.Text("outcome unknown"))
			bDone := make(chan error, 1)
			go func() { _, err := w.agentWith(sb, w.rec).Resume(ctx, p.RunID); bDone <- err }()
			<-sb.arrived
			close(sa.goOn)
			if err := <-aDone; err == nil {
				t.Fatal("A's resume, its claim lost, returned no error")
			}
			close(sb.release)
			must(t, <-bDone)
			var last agent.CallUpdate
			for _, u := range w.rec.Updates() {
				if u.Call.ID == p.ID {
					last = u
				}
			}
			if last.Phase != agent.PhaseSkipped || last.Note != agent.NoteInterrupted {
				t.Errorf("the card was told last %s (unstarted %v, %q), want skipped, outcome unknown, as B's model read", last.Phase, last.Unstarted, last.Note)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times, want never", n)
			}
		})
	}
}

// heldSkipOf is a store whose step that marks call id not run (store
// SkipExecution) waits, once it has arrived, until release is closed.
type heldSkipOf struct {
	agent.Store
	id      string
	arrived chan struct{}
	release chan struct{}
}

func (s heldSkipOf) SkipExecution(ctx context.Context, callID string, result []byte) error {
	if callID == s.id {
		close(s.arrived)
		<-s.release
	}
	return s.Store.SkipExecution(ctx, callID, result)
}

// skipLandsAsBHolds has resume A of run find the restart, the second call
// of its step, should not run, and holds A's step that marks it so until
// A's claim has lapsed, restarts are thawed, and resume B, which takes
// the run over, is held by the store hold makes of w's (hold closes
// arrived when it holds, and waits for release); then A's step lands, A
// ends (its claim lost), and B goes on.
func skipLandsAsBHolds(t *testing.T, w *world, run string, restart agent.PendingCall, hold func(st agent.Store, arrived, release chan struct{}) agent.Store) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	w.model.Reply(fakeopenai.Text("done"), fakeopenai.Text("done"))
	holds := newHoldLog(w.store)
	stA := heldSkipOf{Store: holds, id: restart.ID, arrived: make(chan struct{}), release: make(chan struct{})}
	doneA := make(chan error, 1)
	go func() { _, err := w.agentWith(stA, w.rec).Resume(ctx, run); doneA <- err }()
	<-stA.arrived
	holds.lapse(t, restart.Conversation, run)
	thaw(t, w)
	arrived, release := make(chan struct{}), make(chan struct{})
	stB := hold(w.store, arrived, release)
	doneB := make(chan error, 1)
	go func() { _, err := w.agentWith(stB, w.rec).Resume(ctx, run); doneB <- err }()
	<-arrived
	close(stA.release)
	if err := <-doneA; err == nil {
		t.Error("A's resume, whose claim lapsed, returned no error")
	}
	close(release)
	must(t, <-doneB)
}

// A's resume finds the second call of its step should not run, and its
// step marking it so is in flight when A's claim lapses (a stalled
// process); B takes the run over, judges the call afresh and runs it,
// and A's step lands while B saves the result. A's step is refused, and
// A tells the card nothing: the call is B's to report, and its card ends
// saying it ran, never that it did not.
func TestLaterCallNotRunRefusedAsAnotherRunsItIsNotToldSo(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			a := w.agent()
			out := approvedStepThenFrozen(t, w, a, true)
			restart := out.Pending[1]
			skipLandsAsBHolds(t, w, out.RunID, restart, func(st agent.Store, arrived, release chan struct{}) agent.Store {
				return heldSaveOf{Store: st, id: restart.ID, arrived: arrived, release: release}
			})
			if n := w.restarts.n.Load(); n != 1 {
				t.Errorf("restart ran %d times, want once, by B", n)
			}
			var phases []agent.Phase
			for _, u := range w.rec.Updates() {
				if u.Call.ID == restart.ID {
					phases = append(phases, u.Phase)
				}
			}
			if slices.Contains(phases, agent.PhaseSkipped) || len(phases) == 0 || phases[len(phases)-1] != agent.PhaseExecuted {
				t.Errorf("the restart's card was told %q, want it ran, and never that it did not", phases)
			}
		})
	}
}

// heldBeginOf is a store whose BeginExecution of call id waits, once it
// has arrived, until release is closed.
type heldBeginOf struct {
	agent.Store
	id      string
	arrived chan struct{}
	release chan struct{}
}

func (s heldBeginOf) BeginExecution(ctx context.Context, callID, attempt string) (bool, error) {
	if callID == s.id {
		close(s.arrived)
		<-s.release
	}
	return s.Store.BeginExecution(ctx, callID, attempt)
}

// A (stalled) finds the second call of its step should not run, and its
// step marking it so is in flight when its claim lapses. B claims the
// run, reads the call unmarked, judges it afresh (restarts thawed: it may
// run), and A's step lands just before B marks the call. B finds it
// marked, reads what A saved, and tells its model and the card that: not
// "outcome unknown", and no execution audited, for a call that never ran.
func TestCallMarkedNotRunAsATakeoverMarksItKeepsItsWord(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			out := approvedStepThenFrozen(t, w, a, true)
			restart := out.Pending[1]
			skipLandsAsBHolds(t, w, out.RunID, restart, func(st agent.Store, arrived, release chan struct{}) agent.Store {
				return heldBeginOf{Store: st, id: restart.ID, arrived: arrived, release: release}
			})
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times, want never", n)
			}
			news, err := a.News(ctx, restart.ID)
			must(t, err)
			if news.Phase != agent.PhaseSkipped || !strings.HasPrefix(news.Note, "policy now denies") {
				t.Fatalf("the restart as stored is %s %q, want skipped as A saved it", news.Phase, news.Note)
			}
			results := toolResults(t, w.model)
			if len(results) != 2 || results[1] != "c2: "+news.Result.Content {
				t.Errorf("B's model read %q, want the restart as A saved it: %q", results, news.Result.Content)
			}
			if got := toolExecutions(t, w.store, "restart"); len(got) != 0 {
				t.Errorf("audited executions of restart: %q, want none: it never ran", got)
			}
			var last agent.CallUpdate
			for _, u := range w.rec.Updates() {
				if u.Call.ID == restart.ID {
					last = u
				}
			}
			if last.Phase != news.Phase || last.Note != news.Note {
				t.Errorf("the card was told last %s %q, while the store holds %s %q", last.Phase, last.Note, news.Phase, news.Note)
			}
		})
	}
}

// A runs the approved restart and stalls as it saves the result; its
// claim lapses, and B, claiming the run, finds the restart started with
// no result: outcome unknown, which it saves with an entry of its own,
// held until A's save lands first. B's save is refused, and its entry
// goes with it: the audit log has the one execution, A's, not a second
// of unknown outcome.
func TestUnknownRefusedByTheResultSavedFirstIsNotAudited(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
			must(t, err)
			w.model.Reply(fakeopenai.Text("done"), fakeopenai.Text("done"))
			holds := newHoldLog(w.store)
			stA := heldSaveOf{Store: holds, id: p.ID, arrived: make(chan struct{}), release: make(chan struct{})}
			doneA := make(chan error, 1)
			go func() { _, err := w.agentWith(stA, w.rec).Resume(context.WithoutCancel(ctx), p.RunID); doneA <- err }()
			<-stA.arrived
			holds.lapse(t, p.Conversation, p.RunID)
			stB := heldSaveOf{Store: w.store, id: p.ID, arrived: make(chan struct{}), release: make(chan struct{})}
			doneB := make(chan error, 1)
			go func() { _, err := w.agentWith(stB, w.rec).Resume(context.WithoutCancel(ctx), p.RunID); doneB <- err }()
			<-stB.arrived
			close(stA.release)
			<-doneA
			close(stB.release)
			<-doneB
			if n := w.restarts.n.Load(); n != 1 {
				t.Errorf("restart ran %d times, want once, by A", n)
			}
			if got := toolExecutions(t, w.store, "restart"); len(got) != 1 || !strings.HasSuffix(got[0], " ok") {
				t.Errorf("audited executions of restart: %q, want A's only", got)
			}
		})
	}
}
