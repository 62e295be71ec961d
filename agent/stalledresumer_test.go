package agent_test

import (
	"context"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// stallingStore holds the first BeginExecution until open is closed and
// the caller's context has ended (its lease found lost).
type stallingStore struct {
	agent.Store
	once    sync.Once
	reached chan struct{}
	open    chan struct{}
}

func (g *stallingStore) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.reached)
		<-g.open
		<-ctx.Done()
	}
	return g.Store.BeginExecution(ctx, id, attempt)
}

// A resume that stalls between two approved calls past its lease is taken
// over, and the other process runs the second call. When the stalled one
// goes on, having found its lease lost, it says nothing of that call: its
// card is not marked as of unknown outcome after it ran.
func TestStalledResumerSaysNothingOfACallRunElsewhere(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"1"}`), call("c2", "deploy", `{"service":"web","version":"1"}`)))
			out, err := a.Run(ctx, request("deploy both"))
			must(t, err)
			if len(out.Pending) != 2 {
				t.Fatalf("%d calls pending, want 2", len(out.Pending))
			}
			for _, p := range out.Pending {
				_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				must(t, err)
			}
			runID, c2 := out.Pending[0].RunID, out.Pending[1].ID
			hl := newHoldLog(w.store)
			g := &stallingStore{Store: hl, reached: make(chan struct{}), open: make(chan struct{})}
			stalled := &recorder{}
			cfg := w.cfg
			w.cfg.Owner = "R1"
			r1 := w.agentWith(g, stalled)
			w.cfg = cfg
			w.model.Reply(fakeopenai.Text("Both deployed."), fakeopenai.Text("Both deployed."))
			done := make(chan error, 1)
			go func() { _, err := r1.Resume(context.WithoutCancel(ctx), runID); done <- err }()
			<-g.reached // c1 ran; c2 is about to be marked
			hl.lapse(t, out.Pending[0].Conversation, runID)
			w.cfg.Owner = "R2"
			r2 := w.agentWith(w.store, &recorder{})
			w.cfg = cfg
			if _, err := r2.Resume(ctx, runID); err != nil {
				t.Fatalf("the resume taken over: %v", err)
			}
			if n := w.deploys.n.Load(); n != 2 {
				t.Fatalf("deploy ran %d times, want twice (c1 by the stalled resume, c2 by the one that took it over)", n)
			}
			close(g.open)
			<-done
			for _, u := range stalled.Updates() {
				if u.Call.ID == c2 {
					t.Errorf("the stalled resume reported on c2 after another process ran it: phase %v, note %q", u.Phase, u.Note)
				}
			}
			if n := w.deploys.n.Load(); n != 2 {
				t.Errorf("deploy ran %d times, want twice", n)
			}
		})
	}
}
