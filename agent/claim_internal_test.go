package agent

import (
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
)

// A call marked started with the resume's claim runs only while the claim
// is this process's: a claim confirmed recently is trusted with no store
// call; one confirmed long ago (the process stalled) is renewed first,
// and when another process has claimed the run meanwhile the resume stops
// with ErrLeaseLost and the call does not run.
func TestMarkedCallConfirmsAStaleClaim(t *testing.T) {
	const ttl = 10 * time.Second
	for _, k := range teststore.Kinds(t) {
		t.Run(k.Name, func(t *testing.T) {
			ctx := t.Context()
			st := k.Open(t)()
			now := time.Now()
			run := store.Run{ID: store.NewRunID(), Conversation: "C1:100.1", Requester: "U1", Channel: "C1", State: json.RawMessage(`{}`), CreatedAt: now}
			c := store.Call{ID: store.CallID(run.ID, 0), RunID: run.ID, ToolCallID: "call_0", Tool: "deploy", Args: json.RawMessage(`{}`), Fingerprint: "fp", Requester: "U1", Channel: "C1", Conversation: run.Conversation, Approvers: []string{"U2"}, CreatedAt: now, ExpiresAt: now.Add(time.Hour), Status: store.Pending}
			run.CallIDs = []string{c.ID}
			if err := st.CreateRun(ctx, run, []store.Call{c}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.Decide(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U2", At: now}); err != nil {
				t.Fatal(err)
			}
			a := &Agent{store: st, cfg: Config{Owner: "me", LeaseTTL: ttl}, log: slog.Default()}
			if ok, err := st.ClaimResume(ctx, run.ID, "me", ttl); err != nil || !ok {
				t.Fatalf("ClaimResume = %v, %v", ok, err)
			}

			// Claimed just now: trusted as it is.
			fresh, stop := a.keepClaim(ctx, run.ID, "me", time.Now())
			if err := a.confirmClaim(fresh, run.ID); err != nil {
				t.Errorf("a claim confirmed just now: %v, want nil", err)
			}
			stop()

			// Claimed long ago (past LeaseTTL/2), and still ours:
			// renewed, then trusted.
			stale, stop := a.keepClaim(ctx, run.ID, "me", time.Now().Add(-ttl*6/10))
			if err := a.confirmClaim(stale, run.ID); err != nil {
				t.Errorf("a stale claim still ours: %v, want nil", err)
			}
			if err := a.confirmClaim(stale, run.ID); err != nil {
				t.Errorf("a claim just renewed: %v, want nil", err)
			}

			// Meanwhile the claim lapsed and another process took it.
			if err := st.ReleaseClaim(ctx, run.ID, "me"); err != nil {
				t.Fatal(err)
			}
			if ok, err := st.ClaimResume(ctx, run.ID, "other", ttl); err != nil || !ok {
				t.Fatalf("ClaimResume by another = %v, %v", ok, err)
			}
			late, stopLate := a.keepClaim(ctx, run.ID, "me", time.Now().Add(-ttl))
			defer stopLate()
			if err := a.confirmClaim(late, run.ID); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("a stale claim another process took: %v, want ErrLeaseLost", err)
			}
			if !leaseLost(late) {
				t.Error("the resume's context goes on after its claim was found lost")
			}
			stop()

			// Found lost by the renewer before the check: the check says
			// why, not only that the context ended.
			gone, stopGone := a.keepClaim(ctx, run.ID, "me", time.Now())
			defer stopGone()
			claimOf(gone, run.ID).lose(ErrLeaseLost)
			if err := a.confirmClaim(gone, run.ID); !errors.Is(err, ErrLeaseLost) {
				t.Errorf("a claim the renewer found lost: %v, want ErrLeaseLost", err)
			}
		})
	}
}
