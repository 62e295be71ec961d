package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// The decision that completes a step is audited and lists the conversation
// for takeover in the same store step, so a process that dies right after
// it, before the resume starts, is taken over and the call runs once.
func TestDecisionListsItsResumeForTakeover(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("resumed by the survivor"))
			a, d := w.doomed()
			res, err := a.Decide(context.Background(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete {
				t.Fatalf("Decide = %+v, %v; want complete", res, err)
			}
			d.kill() // before its Resume

			log, err := w.store.(interface {
				AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)
			}).AuditLog(t.Context(), 1)
			must(t, err)
			if len(log) != 1 || log[0].Action != "decide" || log[0].CallID != p.ID || log[0].Actor != "UAPPROVER1" || log[0].Outcome != store.OutcomeRecorded {
				t.Errorf("newest audit entry = %+v, want the decision by UAPPROVER1", log)
			}
			s := w.restart()
			out := takeOver(t, w, s, p.Conversation)
			if out.Status != agent.Answered || out.Answer != "resumed by the survivor" {
				t.Fatalf("TakeOver = %+v, want the resumed answer", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// A resume whose conversation another process holds waits for it, and
// runs the call once it is released.
func TestResumeWaitsForTheConversationsLease(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			key := "conv:" + p.Conversation
			ok, err := w.store.AcquireLease(ctx, key, "another-process", time.Minute)
			if err != nil || !ok {
				t.Fatalf("AcquireLease = %v, %v", ok, err)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete {
				t.Fatalf("Decide = %+v, %v; want complete", res, err)
			}
			done := make(chan agent.Outcome, 1)
			go func() {
				out, err := a.Resume(ctx, p.RunID)
				if err != nil {
					t.Errorf("Resume: %v", err)
				}
				done <- out
			}()
			if n := w.deploys.n.Load(); n != 0 {
				t.Fatalf("deploy ran %d times while another process held the conversation", n)
			}
			must(t, w.store.ReleaseLease(ctx, key, "another-process"))
			if out := <-done; out.Status != agent.Answered || out.Answer != "deployed" {
				t.Errorf("Resume = %+v, want the answer after the release", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}
