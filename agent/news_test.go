package agent_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// News tells what became of a call from the store alone, as a process
// that did not decide or run it would render its card: counted while it
// is pending, skipped once denied or expired, decided (and not started)
// once approved and not run, executed with its result once it ran.
func TestNewsOfACallIsWhatTheStoreHolds(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			phase := func(id string) agent.CallUpdate {
				t.Helper()
				u, err := w.agent().News(ctx, id)
				must(t, err)
				return u
			}
			if _, err := a.News(ctx, store.CallID(store.NewRunID(), 0)); !errors.Is(err, approvals.ErrUnknownCall) {
				t.Errorf("News of an unknown call: error = %v, want ErrUnknownCall", err)
			}

			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			if u := phase(p.ID); u.Phase != agent.PhaseCounted || u.Call.Status != agent.CallPending {
				t.Errorf("News of a pending call = %s %s, want counted, pending", u.Phase, u.Call.Status)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if u := phase(p.ID); u.Phase != agent.PhaseDecided || !u.Unstarted {
				t.Errorf("News of an approved call not run yet = %s (unstarted %v), want decided, unstarted", u.Phase, u.Unstarted)
			}
			if !res.Complete {
				t.Fatal("the approval did not complete the step")
			}
			w.model.Reply(fakeopenai.Text("Deployed."))
			_, err = a.Resume(ctx, p.RunID)
			must(t, err)
			if u := phase(p.ID); u.Phase != agent.PhaseExecuted || !strings.Contains(u.Result.Content, "deployed") {
				t.Errorf("News of a call that ran = %s with result %q, want executed with its output", u.Phase, u.Result.Content)
			}

			p = pauseOne(t, w, a, call("c2", "deploy", `{"service":"api","version":"3"}`))
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Refuse, Decider: "UAPPROVER1"})
			must(t, err)
			if u := phase(p.ID); u.Phase != agent.PhaseSkipped || u.Call.Decision == nil || u.Call.Decision.Kind != approvals.Refuse {
				t.Errorf("News of a denied call = %s, want skipped, denied", u.Phase)
			}
			w.model.Reply(fakeopenai.Text("Not deployed."))
			_, err = a.Resume(ctx, p.RunID)
			must(t, err)

			p = pauseOne(t, w, a, call("c3", "deploy", `{"service":"api","version":"4"}`))
			w.advance(p.ExpiresAt.Sub(w.clock()) + time.Second)
			if _, err := a.Expire(ctx, func(string, string) {}); err != nil {
				t.Fatal(err)
			}
			if u := phase(p.ID); u.Phase != agent.PhaseSkipped || u.Note != "expired" || u.Call.Status != agent.CallExpired {
				t.Errorf("News of an expired call = %s %q %s, want skipped, expired", u.Phase, u.Note, u.Call.Status)
			}
		})
	}
}
