package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// dueReminders fails the test unless DueReminders(at, limit) lists want.
func dueReminders(t *testing.T, s Store, at time.Time, limit int, want ...string) []store.Call {
	t.Helper()
	got, err := s.DueReminders(t.Context(), at, limit)
	if err != nil {
		t.Fatalf("DueReminders(%v, %d): %v", at, limit, err)
	}
	if ids := callIDs(got); !slices.Equal(ids, want) {
		t.Fatalf("DueReminders(%v, %d) = %v, want %v", at, limit, ids, want)
	}
	return got
}

// nextReminder fails the test unless NextReminder is want.
func nextReminder(t *testing.T, s Store, want time.Time) {
	t.Helper()
	got, err := s.NextReminder(t.Context())
	if err != nil || !got.Equal(want) {
		t.Fatalf("NextReminder = %v, %v; want %v, nil", got, err, want)
	}
}

// claimReminder fails the test unless ClaimReminder answers want.
func claimReminder(t *testing.T, s Store, id string, n int, next time.Time, want bool) {
	t.Helper()
	got, err := s.ClaimReminder(t.Context(), id, n, next)
	if err != nil || got != want {
		t.Fatalf("ClaimReminder(%s, %d, %v) = %v, %v; want %v, nil", id, n, next, got, err, want)
	}
}

func testReminders(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	nextReminder(t, s, time.Time{})
	now := time.Now().Truncate(time.Millisecond)
	_, calls := create(t, s, 4, func(_ *store.Run, cs []store.Call) {
		cs[0].RemindAt = now.Add(-2 * time.Minute)
		cs[1].RemindAt = now.Add(-time.Minute)
		cs[2].RemindAt = now.Add(time.Minute)
		// cs[3] has no reminder.
	})
	got := dueReminders(t, s, now, 0, calls[0].ID, calls[1].ID)
	if !got[0].RemindAt.Equal(calls[0].RemindAt) || got[0].Reminded != 0 {
		t.Errorf("DueReminders listed %s with RemindAt %v, Reminded %d; want %v, 0", got[0].ID, got[0].RemindAt, got[0].Reminded, calls[0].RemindAt)
	}
	dueReminders(t, s, now, 1, calls[0].ID)
	dueReminders(t, s, now.Add(-90*time.Second), 0, calls[0].ID)
	dueReminders(t, s, now.Add(-time.Hour), 0)
	nextReminder(t, s, calls[0].RemindAt)

	later := now.Add(30 * time.Minute)
	claimReminder(t, s, calls[0].ID, 1, later, true)
	claimReminder(t, s, calls[0].ID, 1, later, false) // claimed already
	dueReminders(t, s, now, 0, calls[1].ID)
	nextReminder(t, s, calls[1].RemindAt)

	// A restart keeps the index and each call's reminder state.
	s = reopen()
	dueReminders(t, s, now, 0, calls[1].ID)
	c := wantStatus(t, s, calls[0].ID, store.Pending)
	if !c.RemindAt.Equal(later) || c.Reminded != 1 {
		t.Fatalf("after a claim and a restart, GetCall(%s) has RemindAt %v, Reminded %d; want %v, 1", c.ID, c.RemindAt, c.Reminded, later)
	}
	dueReminders(t, s, later, 0, calls[1].ID, calls[2].ID, calls[0].ID)

	// Reminder 2 with no reminder after it: the call leaves the index.
	claimReminder(t, s, calls[0].ID, 2, time.Time{}, true)
	claimReminder(t, s, calls[0].ID, 3, later, false) // no reminder left to send
	if c := wantStatus(t, s, calls[0].ID, store.Pending); !c.RemindAt.IsZero() || c.Reminded != 2 {
		t.Errorf("after the last claim GetCall(%s) has RemindAt %v, Reminded %d; want zero, 2", c.ID, c.RemindAt, c.Reminded)
	}
	dueReminders(t, s, later, 0, calls[1].ID, calls[2].ID)

	// A later reminder claimed first (a pass that found both due) refuses
	// the earlier one.
	claimReminder(t, s, calls[1].ID, 2, time.Time{}, true)
	claimReminder(t, s, calls[1].ID, 1, later, false)
	dueReminders(t, s, later, 0, calls[2].ID)
	nextReminder(t, s, calls[2].RemindAt)

	if _, err := s.ClaimReminder(ctx, store.CallID(store.NewRunID(), 0), 1, later); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ClaimReminder(unknown call) error = %v, want ErrNotFound", err)
	}
	if ok, err := s.ClaimReminder(ctx, calls[2].ID, 0, later); err == nil || ok {
		t.Errorf("ClaimReminder(%s, 0) = %v, %v; want false and an error", calls[2].ID, ok, err)
	}
	dueReminders(t, s, later, 0, calls[2].ID)
}

func testRemindersLeaveWithTheCall(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	_, calls := create(t, s, 4, func(_ *store.Run, cs []store.Call) {
		for i := range cs {
			cs[i].RemindAt = now.Add(-time.Duration(4-i) * time.Minute)
		}
		cs[2].ExpiresAt = now.Add(-time.Second)
	})
	finished, other := create(t, s, 1, func(_ *store.Run, cs []store.Call) { cs[0].RemindAt = now })
	dueReminders(t, s, now, 0, calls[0].ID, calls[1].ID, calls[2].ID, calls[3].ID, other[0].ID)

	steps := []struct {
		name   string
		decide func() (store.Call, error)
	}{
		{"decided", func() (store.Call, error) {
			c, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, approve("U_APPROVER"))
			return c, err
		}},
		{"approved by enough approvers", func() (store.Call, error) {
			c, _, err := s.Approve(ctx, calls[1].ID, calls[1].Fingerprint, store.Approval{Approver: "U_APPROVER", At: time.Now()}, nil, 1, approve("U_APPROVER"))
			return c, err
		}},
		{"expired", func() (store.Call, error) {
			c, _, err := s.Decide(ctx, calls[2].ID, "", store.Decision{Kind: "expire", Decider: "system", At: time.Now()})
			return c, err
		}},
		{"cancelled", func() (store.Call, error) {
			c, _, err := s.Decide(ctx, calls[3].ID, "", store.Decision{Kind: "cancel", Decider: "U_REQ", At: time.Now()})
			return c, err
		}},
	}
	for i, st := range steps {
		c, err := st.decide()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if !c.RemindAt.IsZero() {
			t.Errorf("%s: the returned call has RemindAt %v, want zero", st.name, c.RemindAt)
		}
		want := append(callIDs(calls[i+1:]), other[0].ID)
		dueReminders(t, s, now, 0, want...)
		claimReminder(t, s, calls[i].ID, 1, time.Time{}, false)
	}
	if err := s.FinishRun(ctx, finished.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", finished.ID, err)
	}
	dueReminders(t, s, now, 0)
	nextReminder(t, s, time.Time{})
	s = reopen()
	dueReminders(t, s, now.Add(time.Hour), 0)
	nextReminder(t, s, time.Time{})
}

func testClaimReminderConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	now := time.Now().Truncate(time.Millisecond)
	_, calls := create(t, s, 1, func(_ *store.Run, cs []store.Call) { cs[0].RemindAt = now.Add(-time.Minute) })
	c := calls[0]
	next := now.Add(time.Hour)
	const n = 30
	var wg sync.WaitGroup
	won := make([]bool, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			won[i], errs[i] = s.ClaimReminder(context.Background(), c.ID, 1, next)
		})
	}
	wg.Wait()
	winners := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("ClaimReminder %d: %v", i, errs[i])
		}
		if won[i] {
			winners++
		}
	}
	if winners != 1 {
		t.Fatalf("%d of %d concurrent ClaimReminder(%s, 1) got true, want exactly 1", winners, n, c.ID)
	}
	dueReminders(t, s, now, 0)
	dueReminders(t, s, next, 0, c.ID)
	nextReminder(t, s, next)
}

// testApproveEditReminders: an edit that brings a call's expiry forward
// sets its next reminder again, in the same step, to the one due under
// the new expiry after the reminders claimed (none if none is left), and
// the reminder index lists it then.
func testApproveEditReminders(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	// Each call is reminded 150m after it paused and again with a
	// quarter of its 4h left, at 3h.
	_, calls := create(t, s, 5, func(_ *store.Run, cs []store.Call) {
		for i := range cs {
			cs[i].ExpiresAt = cs[i].CreatedAt.Add(4 * time.Hour)
			cs[i].RemindAfter = 150 * time.Minute
			cs[i].RemindAt = cs[i].CreatedAt.Add(150 * time.Minute)
		}
	})
	start := calls[0].CreatedAt
	tests := []struct {
		name    string
		claimed bool          // the first reminder was claimed, the call moved to 3h
		exp     time.Duration // the edit's expiry
		want    time.Duration // the next reminder after the edit (0: none)
	}{
		// 3h06: a quarter left comes before the first reminder.
		{"first sent, none left", true, 186 * time.Minute, 0},
		// 3h36: a quarter left comes at 2h42.
		{"first sent, the second sooner", true, 216 * time.Minute, 162 * time.Minute},
		// 2h: the first would come after it.
		{"none before the expiry", false, 2 * time.Hour, 0},
		// 3h06: the first still comes, and no second.
		{"the first kept", false, 186 * time.Minute, 150 * time.Minute},
		// 5h: the expiry is kept, and so is the reminder.
		{"the expiry kept", true, 5 * time.Hour, 3 * time.Hour},
	}
	for i, tt := range tests {
		c := calls[i]
		if tt.claimed {
			claimReminder(t, s, c.ID, 1, start.Add(3*time.Hour), true)
		}
		edit := &store.Proposal{Fingerprint: "fp-edit", Edit: store.Decision{Kind: "edit", Decider: "U_B", At: time.Now(),
			Args: json.RawMessage(`{"path":"/srv/edited"}`), ExpiresAt: start.Add(tt.exp)}}
		got, complete, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_B"), edit, 2, approve("U_B"))
		if err != nil || complete {
			t.Fatalf("%s: Approve with an edit = complete %v, %v; want pending", tt.name, complete, err)
		}
		var want time.Time
		if tt.want != 0 {
			want = start.Add(tt.want)
		}
		if !got.RemindAt.Equal(want) {
			t.Errorf("%s: Approve returned RemindAt %v, want %v", tt.name, got.RemindAt, want)
		}
	}
	s = reopen()
	for i, tt := range tests {
		c := wantStatus(t, s, calls[i].ID, store.Pending)
		var want time.Time
		if tt.want != 0 {
			want = start.Add(tt.want)
		}
		if !c.RemindAt.Equal(want) {
			t.Errorf("%s: stored RemindAt %v, want %v", tt.name, c.RemindAt, want)
		}
	}
	nextReminder(t, s, start.Add(150*time.Minute))
	dueReminders(t, s, start.Add(170*time.Minute), 0, calls[3].ID, calls[1].ID)
	dueReminders(t, s, start.Add(4*time.Hour), 0, calls[3].ID, calls[1].ID, calls[4].ID)
	// The second reminder of the call whose first was sent is its last.
	claimReminder(t, s, calls[1].ID, 2, time.Time{}, true)
	claimReminder(t, s, calls[3].ID, 1, time.Time{}, true)
	dueReminders(t, s, start.Add(4*time.Hour), 0, calls[4].ID)
	nextReminder(t, s, start.Add(3*time.Hour))
}
