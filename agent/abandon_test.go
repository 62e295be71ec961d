package agent_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// resentAbandon sends AbandonExecution twice, running between in
// between: a Redis client sending the script again after its reply was
// lost.
type resentAbandon struct {
	agent.Store
	between func()
}

func (s resentAbandon) AbandonExecution(ctx context.Context, callID, attempt string) error {
	if err := s.Store.AbandonExecution(ctx, callID, attempt); err != nil {
		return err
	}
	s.between()
	return s.Store.AbandonExecution(ctx, callID, attempt)
}

// A's resume marks the approved restart with its claim, finds its claim
// lost and takes the mark back, and its sending is made twice. In
// between, B claims the run, marks the restart, runs it, and dies before
// saving anything. A's second sending leaves B's mark, which is not A's:
// C, resuming once B's claim lapses, finds the restart started and does
// not run it again.
func TestMarkTakenBackTwiceLeavesAnotherResumesMark(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
			must(t, err)

			holdsA, holdsB := newHoldLog(w.store), newHoldLog(w.store)
			actx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			between := func() {
				holdsA.lapse(t, p.Conversation, p.RunID) // A's claim ran out
				w.model.Reply(fakeopenai.Text("restarted"))
				dying := w.agentWith(failsSaveOf{Store: holdsB, id: p.ID, turns: true}, w.rec)
				if _, err := dying.Resume(ctx, p.RunID); err == nil {
					t.Error("B's resume, which dies before its writes, returned no error")
				}
				if n := w.restarts.n.Load(); n != 1 {
					t.Fatalf("B ran restart %d times, want once", n)
				}
			}
			stA := resentAbandon{Store: endsAfterClaim{Store: holdsA, end: func() { cancel(agent.ErrLeaseLost) }}, between: between}
			if _, err := w.agentWith(stA, w.rec).Resume(actx, p.RunID); err == nil {
				t.Fatal("A's resume, its claim lost, returned no error")
			}
			holdsB.lapse(t, p.Conversation, p.RunID) // B died mid-run
			w.model.Reply(fakeopenai.Text("outcome unknown"))
			_, err = w.restart().Resume(ctx, p.RunID)
			must(t, err)
			if n := w.restarts.n.Load(); n != 1 {
				t.Errorf("restart ran %d times, want once", n)
			}
		})
	}
}
