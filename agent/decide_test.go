package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
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

// A decision made with DecideTaking that completes its step begins the
// step's resume in its own store step: ResumeTaken runs the approved call
// once and answers, with no BeginResume. A Taken given back leaves the step
// decided, its call unstarted and its claim free, for Resume to carry on.
func TestDecideTakingBeginsTheResume(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			log := &turnLog{Store: w.store.(storetest.Store)}
			w.store = log
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			log.take()
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete || taken == nil {
				t.Fatalf("DecideTaking = complete %v, taken %v, %v; want complete and taken", res.Complete, taken != nil, err)
			}
			out, err := a.ResumeTaken(ctx, taken)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "deployed" {
				t.Errorf("ResumeTaken = %+v, want the answer", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			calls, _ := log.take()
			if slices.Contains(calls, "BeginResume") || slices.Contains(calls, "BeginExecution") {
				t.Errorf("store calls of the decision and resume = %q, want no BeginResume or BeginExecution", calls)
			}
			if _, err := a.ResumeTaken(ctx, taken); err == nil {
				t.Error("ResumeTaken of a Taken that ran succeeded, want an error")
			}
			if out, err := a.Resume(ctx, p.RunID); err != nil || out.Status != agent.Idle {
				t.Errorf("Resume after ResumeTaken = %+v, %v; want Idle", out, err)
			}

			// Given back: nothing ran, and Resume runs the call once.
			w.model.Reply(fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"3"}`)))
			out, err = a.Run(ctx, request("deploy api 3"))
			must(t, err)
			if out.Status != agent.Paused {
				t.Fatalf("Run = %s, want paused", out.Status)
			}
			p2 := out.Pending[0]
			w.model.Reply(fakeopenai.Text("deployed 3"))
			res, taken, err = a.DecideTaking(ctx, approvals.Decision{CallID: p2.ID, Fingerprint: p2.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete || taken == nil {
				t.Fatalf("DecideTaking of the second call = complete %v, taken %v, %v", res.Complete, taken != nil, err)
			}
			a.ReleaseTaken(ctx, taken)
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times after a Taken was given back, want still once", n)
			}
			out, err = a.Resume(ctx, p2.RunID)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "deployed 3" {
				t.Errorf("Resume after ReleaseTaken = %+v, want the answer", out)
			}
			if n := w.deploys.n.Load(); n != 2 {
				t.Errorf("deploy ran %d times, want twice (once per call)", n)
			}
		})
	}
}
