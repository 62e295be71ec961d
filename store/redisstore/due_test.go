package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// topologies are the Redis deployments the tests run on: a single node
// and a Cluster.
func topologies(t *testing.T) []struct{ name, url string } {
	return []struct{ name, url string }{
		{"node", redisURL(t)},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")},
	}
}

// pausedUntil pauses a new conversation on a new run with one call whose
// fingerprint is fp and that expires at exp.
func pausedUntil(t *testing.T, s *redisstore.Store, fp string, exp time.Time) store.Call {
	t.Helper()
	conv := "C1:" + store.NewRunID()
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	calls := []store.Call{{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: fp, Requester: "U1", Conversation: conv, ExpiresAt: exp}}
	paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
	if err := s.CommitTurn(t.Context(), store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls}); err != nil {
		t.Fatal(err)
	}
	return calls[0]
}

// An approval carrying an edit with an earlier expiry lists the call in
// the due index at that expiry before its script runs; when the script
// refuses the edit the call keeps its later expiry. Its entry, earlier
// than the retention time, is not trimmed by a later pause as if its call
// were deleted: Due lists the call when its real expiry comes, and moves
// the early entry to it meanwhile.
func TestRefusedEarlierEditKeepsTheCallDue(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			prefix := newPrefix(t, topo.url)
			s := newStore(t, topo.url, redisstore.Options{Prefix: prefix, Retention: time.Second})
			t.Cleanup(func() { _ = s.Close() })
			c, err := redisstore.NewClient(topo.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			now := time.Now().Truncate(time.Millisecond)
			call := pausedUntil(t, s, "fp0", now.Add(time.Hour))
			// Its expiry, older than the retention time (as one an edit
			// set before the retention time passed).
			edit := &store.Proposal{Fingerprint: "fp1", Edit: store.Decision{Kind: "edit", Decider: "U1", Args: []byte(`{}`), ExpiresAt: now.Add(-time.Minute)}}
			_, _, err = s.Approve(ctx, call.ID, "fp-stale", store.Approval{Approver: "U1"}, edit, 2, store.Decision{Kind: "approve", Decider: "U1"})
			if !errors.Is(err, store.ErrFingerprintMismatch) {
				t.Fatalf("Approve with a stale fingerprint = %v; want ErrFingerprintMismatch", err)
			}
			pausedUntil(t, s, "fpx", now.Add(90*time.Minute)) // a later pause, which once trimmed the due index
			if next, err := s.NextExpiry(ctx); err != nil || next.UnixMilli() != call.ExpiresAt.UnixMilli() {
				t.Errorf("NextExpiry = %v, %v; want the call's expiry %v", next, err, call.ExpiresAt)
			}
			due, err := s.Due(ctx, now, 0)
			if err != nil || len(due) != 0 {
				t.Errorf("Due(now) = %v, %v; want none (the edit was refused)", due, err)
			}
			if score, err := c.ZScore(ctx, s.IndexKeys()[0], call.ID).Result(); err != nil || int64(score) != call.ExpiresAt.UnixMilli() {
				t.Errorf("due index entry of the call at %v, %v after Due; want moved to its expiry %d", int64(score), err, call.ExpiresAt.UnixMilli())
			}
			due, err = s.Due(ctx, now.Add(2*time.Hour), 0)
			found := false
			for _, d := range due {
				found = found || d.ID == call.ID
			}
			if err != nil || !found {
				t.Errorf("Due(now+2h) = %v, %v; want it to list the pending call %s", due, err, call.ID)
			}
		})
	}
}

// NextExpiry reads past a batch that holds a pending call whose entry is
// scored earlier than its expiry (an approval's refused edit): a call
// scored later in a batch after it, due sooner than that call's expiry,
// is the next to expire.
func TestNextExpiryReadsPastAnEarlyEntry(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			t.Cleanup(func() { _ = s.Close() })
			now := time.Now().Truncate(time.Millisecond)
			early := pausedUntil(t, s, "fpa", now.Add(time.Hour))
			edit := &store.Proposal{Fingerprint: "fp1", Edit: store.Decision{Kind: "edit", Decider: "U1", Args: []byte(`{}`), ExpiresAt: now.Add(time.Minute)}}
			if _, _, err := s.Approve(ctx, early.ID, "fp-stale", store.Approval{Approver: "U1"}, edit, 2, store.Decision{Kind: "approve", Decider: "U1"}); !errors.Is(err, store.ErrFingerprintMismatch) {
				t.Fatalf("Approve with a stale fingerprint = %v; want ErrFingerprintMismatch", err)
			}
			// Decided calls scored after the early entry, enough to fill
			// the first batch NextExpiry reads with it.
			for range 10 {
				c := pausedUntil(t, s, "fp", now.Add(2*time.Minute))
				if _, _, err := s.Decide(ctx, c.ID, "fp", store.Decision{Kind: "approve", Decider: "U1", Attempt: "a"}); err != nil {
					t.Fatal(err)
				}
			}
			sooner := pausedUntil(t, s, "fpb", now.Add(3*time.Minute))
			next, err := s.NextExpiry(ctx)
			if err != nil || !next.Equal(sooner.ExpiresAt) {
				t.Errorf("NextExpiry = %v, %v; want %v, the expiry of %s (the early entry's call expires at %v)", next, err, sooner.ExpiresAt, sooner.ID, early.ExpiresAt)
			}
		})
	}
}

// NextReminder reads past a batch that holds a pending call whose entry
// is scored earlier than its reminder (ClaimReminder's index update
// failed): a call scored later in a batch after it, whose reminder comes
// sooner than that call's, is the next reminder.
func TestNextReminderReadsPastAnEarlyEntry(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			t.Cleanup(func() { _ = s.Close() })
			c, err := redisstore.NewClient(topo.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			now := time.Now().Truncate(time.Millisecond)
			run := func(remindAt time.Time) store.Call {
				r := store.Run{ID: store.NewRunID(), Conversation: "C1:" + store.NewRunID(), Requester: "U1", Channel: "C1"}
				c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: r.Conversation, ExpiresAt: now.Add(2 * time.Hour), RemindAt: remindAt}
				if err := s.CreateRun(ctx, r, []store.Call{c}); err != nil {
					t.Fatal(err)
				}
				return c
			}
			early := run(now.Add(time.Hour))
			// Its entry left at an earlier reminder, as by a claim whose
			// index update failed.
			if err := c.ZAdd(ctx, s.RemindKey(), redis.Z{Score: float64(now.Add(time.Minute).UnixMilli()), Member: early.ID}).Err(); err != nil {
				t.Fatal(err)
			}
			for range 10 {
				d := run(now.Add(2 * time.Minute))
				if _, _, err := s.Decide(ctx, d.ID, "fp", store.Decision{Kind: "approve", Decider: "U1", Attempt: "a"}); err != nil {
					t.Fatal(err)
				}
			}
			sooner := run(now.Add(3 * time.Minute))
			next, err := s.NextReminder(ctx)
			if err != nil || !next.Equal(sooner.RemindAt) {
				t.Errorf("NextReminder = %v, %v; want %v, the reminder of %s (the early entry's call is reminded at %v)", next, err, sooner.RemindAt, sooner.ID, early.RemindAt)
			}
		})
	}
}
