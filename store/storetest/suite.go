package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// Opener opens a new, empty store for one test, and registers with t the
// closing of whatever store of it is open when the test ends. reopen models
// a process restart: it closes the store it last returned and opens the
// same data again. Tests run in parallel, so each call of Opener must use
// a place of its own (a directory, a key prefix).
type Opener func(t *testing.T) (s Store, reopen func() Store)

// Run runs the conformance suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"ConversationRoundTrip", testConversationRoundTrip},
		{"CreateLoadRoundTrip", testCreateLoadRoundTrip},
		{"CreateRunRejectsBadInput", testCreateRunRejectsBadInput},
		{"CreateRunStartsAfresh", testCreateRunStartsAfresh},
		{"DecideSuccess", testDecideSuccess},
		{"DecideRefusals", testDecideRefusals},
		{"DecideExpireAndCancel", testDecideExpireAndCancel},
		{"DecideConcurrent", testDecideConcurrent},
		{"ApproveCounts", testApproveCounts},
		{"ApproveEdit", testApproveEdit},
		{"ApproveEditExpiry", testApproveEditExpiry},
		{"ApproveEditReminders", testApproveEditReminders},
		{"ApproveConcurrent", testApproveConcurrent},
		{"DecideAudited", testDecideAudited},
		{"ApproveAudited", testApproveAudited},
		{"ApproveDrops", testApproveDrops},
		{"BeginResume", testBeginResume},
		{"DecideBegin", testDecideBegin},
		{"DecideIfRecords", testDecideIfRecords},
		{"DecideIfHeld", testDecideIfHeld},
		{"DecideIfRecordsOfADecidedCall", testDecideIfRecordsOfADecidedCall},
		{"ApproveBegin", testApproveBegin},
		{"BeginResumeStarts", testBeginResumeStarts},
		{"BeginResumeAgain", testBeginResumeAgain},
		{"BeginResumeOfAnUnknownRun", testBeginResumeOfAnUnknownRun},
		{"AbandonExecution", testAbandonExecution},
		{"GetCallWith", testGetCallWith},
		{"CompleteOnce", testCompleteOnce},
		{"CompleteOnceConcurrent", testCompleteOnceConcurrent},
		{"ClaimResume", testClaimResume},
		{"ClaimResumeAfterCrash", testClaimResumeAfterCrash},
		{"StalledAfterRestart", testStalledAfterRestart},
		{"BeginExecution", testBeginExecution},
		{"BeginExecutionAskedAgain", testBeginExecutionAskedAgain},
		{"CallNote", testCallNote},
		{"SaveResult", testSaveResult},
		{"SkipExecution", testSkipExecution},
		{"FinishRun", testFinishRun},
		{"Due", testDue},
		{"DueWithinAMillisecond", testDueWithinAMillisecond},
		{"NextPastDecidedCalls", testNextPastDecidedCalls},
		{"NextExpiry", testNextExpiry},
		{"Reminders", testReminders},
		{"RemindersLeaveWithTheCall", testRemindersLeaveWithTheCall},
		{"ClaimReminderConcurrent", testClaimReminderConcurrent},
		{"PendingFilters", testPendingFilters},
		{"PendingLimit", testPendingLimit},
		{"PendingCoRequesters", testPendingCoRequesters},
		{"Restart", testRestart},
		{"RawBytesKept", testRawBytesKept},
		{"Lease", testLease},
		{"SeenEvent", testSeenEvent},
		{"RenewClaim", testRenewClaim},
		{"ReleaseClaim", testReleaseClaim},
		{"AcceptMessage", testAcceptMessage},
		{"AcceptMessageConcurrent", testAcceptMessageConcurrent},
		{"AcceptMessageKnown", testAcceptMessageKnown},
		{"AcceptBegin", testAcceptBegin},
		{"AnswerInbox", testAnswerInbox},
		{"InboxAfterRestart", testInboxAfterRestart},
		{"MarkUnanswered", testMarkUnanswered},
		{"Records", testRecords},
		{"RecordsOf", testRecordsOf},
		{"VersionedRecords", testVersionedRecords},
		{"AuditLog", testAuditLog},
		{"AuditRetention", testAuditRetention},
		{"BeginTurn", testBeginTurn},
		{"CommitTurnPause", testCommitTurnPause},
		{"CommitTurnAnswerAll", testCommitTurnAnswerAll},
		{"CommitTurnFinish", testCommitTurnFinish},
		{"CommitTurnKeepsADecidedStepListed", testCommitTurnKeepsADecidedStepListed},
		{"CommitTurnRefused", testCommitTurnRefused},
		{"CommitTurnHolder", testCommitTurnHolder},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, open)
		})
	}
}

// short is the lease and TTL of tests that wait for something to run out:
// long enough that a loaded machine makes the few calls that must come
// before it runs out in time.
const short = time.Second

// eventually polls cond until it holds, failing the test after a deadline.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after 10s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// fixture builds a run of n calls with distinct fingerprints, expiring in
// an hour, in conversation "C1:100.1" of requester "U_REQ".
func fixture(n int) (store.Run, []store.Call) {
	now := time.Now().Truncate(time.Millisecond)
	r := store.Run{
		ID:           store.NewRunID(),
		Conversation: "C1:100.1",
		Requester:    "U_REQ",
		Channel:      "C1",
		State:        json.RawMessage(`{"messages":[{"role":"user","content":"clean up"}]}`),
		CreatedAt:    now,
	}
	calls := make([]store.Call, n)
	for i := range calls {
		id := store.CallID(r.ID, i)
		r.CallIDs = append(r.CallIDs, id)
		calls[i] = store.Call{
			ID:           id,
			RunID:        r.ID,
			ToolCallID:   fmt.Sprintf("call_%d", i),
			Tool:         "files__delete_file",
			Args:         json.RawMessage(fmt.Sprintf(`{"path":"/srv/%d"}`, i)),
			Fingerprint:  fmt.Sprintf("fp-%d", i),
			Requester:    r.Requester,
			Channel:      r.Channel,
			Conversation: r.Conversation,
			RuleID:       "delete-outside-tmp",
			Reason:       "Deleting outside tmp needs review",
			Approvers:    []string{"U_APPROVER"},
			CreatedAt:    now,
			ExpiresAt:    now.Add(time.Hour + time.Duration(i)*time.Minute),
			Status:       store.Pending,
		}
	}
	return r, calls
}

// create saves a fixture run of n calls, changed by edit if not nil.
func create(t *testing.T, s Store, n int, edit func(*store.Run, []store.Call)) (store.Run, []store.Call) {
	t.Helper()
	r, calls := fixture(n)
	if edit != nil {
		edit(&r, calls)
	}
	if err := s.CreateRun(t.Context(), r, calls); err != nil {
		t.Fatalf("CreateRun(%s): %v", r.ID, err)
	}
	return r, calls
}

func approve(decider string) store.Decision {
	return store.Decision{Kind: "approve", Decider: decider, At: time.Now()}
}

// normCall and normRun make stored values comparable with reflect.DeepEqual.
func normCall(c store.Call) store.Call {
	c.CreatedAt = c.CreatedAt.UTC().Round(0)
	c.ExpiresAt = c.ExpiresAt.UTC().Round(0)
	if !c.RemindAt.IsZero() {
		c.RemindAt = c.RemindAt.UTC().Round(0)
	}
	if c.Decision != nil {
		d := *c.Decision
		d.At = d.At.UTC().Round(0)
		c.Decision = &d
	}
	return c
}

func normRun(r store.Run) store.Run {
	r.CreatedAt = r.CreatedAt.UTC().Round(0)
	r.ExpiresAt = r.ExpiresAt.UTC().Round(0)
	return r
}

// status fails the test unless call id has status want.
func wantStatus(t *testing.T, s Store, id string, want store.Status) store.Call {
	t.Helper()
	c, err := s.GetCall(t.Context(), id)
	if err != nil {
		t.Fatalf("GetCall(%s): %v", id, err)
	}
	if c.Status != want {
		t.Fatalf("GetCall(%s).Status = %q, want %q", id, c.Status, want)
	}
	if want == store.Pending && c.Decision != nil {
		t.Fatalf("GetCall(%s).Decision = %+v, want none on a pending call", id, c.Decision)
	}
	return c
}

func callIDs(cs []store.Call) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func testConversationRoundTrip(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	if _, err := s.LoadConversation(ctx, "C9:1.1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("LoadConversation(unknown) error = %v, want ErrNotFound", err)
	}
	at := time.Now().Truncate(time.Millisecond)
	for _, c := range []store.Conversation{
		{Key: "C9:1.1", State: json.RawMessage(`{"turns":1}`), PausedRun: "abc", UpdatedAt: at},
		{Key: "C9:1.1", State: json.RawMessage(`{"turns":2}`), UpdatedAt: at.Add(time.Second)},
	} {
		if err := s.SaveConversation(ctx, c); err != nil {
			t.Fatalf("SaveConversation(%+v): %v", c, err)
		}
		got, err := s.LoadConversation(ctx, c.Key)
		if err != nil {
			t.Fatalf("LoadConversation(%s): %v", c.Key, err)
		}
		got.UpdatedAt = got.UpdatedAt.UTC()
		c.UpdatedAt = c.UpdatedAt.UTC()
		if !reflect.DeepEqual(got, c) {
			t.Errorf("LoadConversation(%s) = %+v, want %+v", c.Key, got, c)
		}
	}
}

func testCreateLoadRoundTrip(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)

	gotRun, gotCalls, err := s.LoadRun(ctx, r.ID)
	if err != nil {
		t.Fatalf("LoadRun(%s): %v", r.ID, err)
	}
	wantRun := r
	wantRun.ExpiresAt = calls[1].ExpiresAt // the latest of its calls
	if got, want := normRun(gotRun), normRun(wantRun); !reflect.DeepEqual(got, want) {
		t.Errorf("LoadRun(%s) run = %+v, want %+v", r.ID, got, want)
	}
	if len(gotCalls) != len(calls) {
		t.Fatalf("LoadRun(%s) got %d calls, want %d", r.ID, len(gotCalls), len(calls))
	}
	for i := range calls {
		if got, want := normCall(gotCalls[i]), normCall(calls[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("LoadRun(%s) call %d = %+v, want %+v", r.ID, i, got, want)
		}
		c, err := s.GetCall(ctx, calls[i].ID)
		if err != nil {
			t.Fatalf("GetCall(%s): %v", calls[i].ID, err)
		}
		if got, want := normCall(c), normCall(calls[i]); !reflect.DeepEqual(got, want) {
			t.Errorf("GetCall(%s) = %+v, want %+v", calls[i].ID, got, want)
		}
	}

	conv, err := s.LoadConversation(ctx, r.Conversation)
	if err != nil {
		t.Fatalf("LoadConversation(%s) after CreateRun: %v", r.Conversation, err)
	}
	if conv.PausedRun != r.ID {
		t.Errorf("LoadConversation(%s).PausedRun = %q, want %q", r.Conversation, conv.PausedRun, r.ID)
	}

	if err := s.CreateRun(ctx, r, calls); !errors.Is(err, store.ErrRunExists) {
		t.Errorf("CreateRun(%s) again: error = %v, want ErrRunExists", r.ID, err)
	}
	if _, _, err := s.LoadRun(ctx, store.NewRunID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(unknown) error = %v, want ErrNotFound", err)
	}
	for _, id := range []string{store.CallID(store.NewRunID(), 0), store.CallID(r.ID, 7), "no-run-part"} {
		if _, err := s.GetCall(ctx, id); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetCall(%q) error = %v, want ErrNotFound", id, err)
		}
	}
}

func testCreateRunRejectsBadInput(t *testing.T, open Opener) {
	s, _ := open(t)
	tests := []struct {
		name string
		edit func(*store.Run, []store.Call) []store.Call
	}{
		{"no calls", func(*store.Run, []store.Call) []store.Call { return nil }},
		{"no run id", func(r *store.Run, cs []store.Call) []store.Call { r.ID = ""; return cs }},
		{"call of another run", func(_ *store.Run, cs []store.Call) []store.Call {
			cs[0].ID = store.CallID(store.NewRunID(), 0)
			return cs
		}},
		{"call ids out of order", func(r *store.Run, cs []store.Call) []store.Call {
			r.CallIDs[0], r.CallIDs[1] = r.CallIDs[1], r.CallIDs[0]
			return cs
		}},
		{"no expiry", func(_ *store.Run, cs []store.Call) []store.Call { cs[1].ExpiresAt = time.Time{}; return cs }},
		{"calls not numbered from 0", func(r *store.Run, cs []store.Call) []store.Call {
			cs[0].ID, cs[1].ID = store.CallID(r.ID, 1), store.CallID(r.ID, 2)
			r.CallIDs = []string{cs[0].ID, cs[1].ID}
			return cs
		}},
		{"calls not in their order", func(r *store.Run, cs []store.Call) []store.Call {
			cs[0], cs[1] = cs[1], cs[0]
			r.CallIDs = []string{cs[0].ID, cs[1].ID}
			return cs
		}},
	}
	for _, tt := range tests {
		r, calls := fixture(2)
		calls = tt.edit(&r, calls)
		if err := s.CreateRun(t.Context(), r, calls); err == nil {
			t.Errorf("CreateRun with %s: error = nil, want an error", tt.name)
		}
	}
}

// CreateRun starts each call afresh (no approvals, edit, result or
// execution carried in), and keeps its deadline to the microsecond, so
// that every store judges it alike: a decision less than a microsecond
// before a deadline that is not a whole microsecond is late. An execution
// attempt given with a call is not taken for the one that marked it: a
// call that BeginResume marks is no attempt's own.
func testCreateRunStartsAfresh(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	exp := time.Now().Add(time.Hour).Truncate(time.Microsecond).Add(900 * time.Nanosecond)
	_, calls := create(t, s, 1, func(_ *store.Run, cs []store.Call) {
		cs[0].ExpiresAt = exp
		cs[0].Approvals = []store.Approval{{Approver: "U_A", At: time.Now()}}
		cs[0].Edit = &store.Decision{Kind: "edit", Decider: "U_A", Args: json.RawMessage(`{}`)}
		cs[0].Result = json.RawMessage(`"ran"`)
		cs[0].Executing, cs[0].ExecAttempt = true, "A"
	})
	c := wantStatus(t, s, calls[0].ID, store.Pending)
	if len(c.Approvals) != 0 || c.Edit != nil || len(c.Result) != 0 || c.Executing {
		t.Errorf("a new call has approvals %v, edit %v, result %s, executing %v; want none", c.Approvals, c.Edit, c.Result, c.Executing)
	}
	if want := exp.Truncate(time.Microsecond); !c.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v (whole microseconds)", c.ExpiresAt, want)
	}
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, 2, approve("U_A")); err != nil {
		t.Errorf("the first approval of a new call: %v, want it counted", err)
	}
	late := exp.Add(-800 * time.Nanosecond)
	if _, _, err := s.Decide(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U_B", At: late}); !errors.Is(err, store.ErrExpired) {
		t.Errorf("Decide 800ns before a deadline of 900ns past a microsecond: %v, want ErrExpired", err)
	}
	r, started := create(t, s, 1, func(_ *store.Run, cs []store.Call) {
		cs[0].Executing, cs[0].ExecAttempt = true, "A"
	})
	decideAs(t, s, started[0], "approve")
	rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "a", TTL: time.Minute, Start: []string{"approve"}})
	if err != nil || rs.Started != started[0].ID {
		t.Fatalf("BeginResume(%s) = started %q, %v; want %s", r.ID, rs.Started, err, started[0].ID)
	}
	if ok, err := s.BeginExecution(ctx, started[0].ID, "A"); err != nil || ok {
		t.Errorf("BeginExecution(%s, A) after BeginResume marked it = %v, %v; want false: A, given at CreateRun, marked nothing", started[0].ID, ok, err)
	}
}

func testDecideSuccess(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)
	d := store.Decision{Kind: "reject", Decider: "U_APPROVER", At: time.Now(), Reason: "not today"}
	c, complete, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, d)
	if err != nil {
		t.Fatalf("Decide(%s): %v", calls[0].ID, err)
	}
	if complete {
		t.Errorf("Decide(%s) complete = true with another call pending, want false", calls[0].ID)
	}
	if c.Status != store.Decided || c.Decision == nil || c.Decision.Decider != "U_APPROVER" || c.Decision.Reason != "not today" {
		t.Errorf("Decide(%s) returned %+v (decision %+v), want status decided by U_APPROVER with the reason", c.ID, c, c.Decision)
	}
	got := wantStatus(t, s, calls[0].ID, store.Decided)
	if want := normCall(c); !reflect.DeepEqual(normCall(got), want) {
		t.Errorf("GetCall(%s) = %+v, want the call Decide returned %+v", c.ID, normCall(got), want)
	}
	pending, err := s.Pending(ctx, store.Filter{Conversation: r.Conversation})
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	if got, want := callIDs(pending), []string{calls[1].ID}; !slices.Equal(got, want) {
		t.Errorf("Pending after deciding %s = %v, want %v", calls[0].ID, got, want)
	}
}

func testDecideRefusals(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	tests := []struct {
		name    string
		expired bool                             // the call expired a minute ago
		before  func(t *testing.T, c store.Call) // run first
		id      func(c store.Call) string
		fp      func(c store.Call) string
		d       store.Decision
		want    error
		status  store.Status // of the call afterwards
	}{
		{
			name: "unknown call of a known run",
			id:   func(c store.Call) string { return store.CallID(c.RunID, 9) },
			d:    approve("U_APPROVER"),
			want: store.ErrNotFound, status: store.Pending,
		},
		{
			name: "unknown run",
			id:   func(store.Call) string { return store.CallID(store.NewRunID(), 0) },
			d:    approve("U_APPROVER"),
			want: store.ErrNotFound, status: store.Pending,
		},
		{
			name: "wrong fingerprint",
			fp:   func(store.Call) string { return "fp-of-other-args" },
			d:    approve("U_APPROVER"),
			want: store.ErrFingerprintMismatch, status: store.Pending,
		},
		{
			name: "empty fingerprint",
			fp:   func(store.Call) string { return "" },
			d:    approve("U_APPROVER"),
			want: store.ErrFingerprintMismatch, status: store.Pending,
		},
		{
			name:    "expired",
			expired: true,
			d:       approve("U_APPROVER"),
			want:    store.ErrExpired, status: store.Pending,
		},
		{
			name: "at expiry",
			id:   func(c store.Call) string { return c.ID },
			d:    store.Decision{Kind: "approve", Decider: "U_APPROVER"}, // At set below
			want: store.ErrExpired, status: store.Pending,
		},
		{
			name: "expire before expiry",
			fp:   func(store.Call) string { return "" },
			d:    store.Decision{Kind: "expire", Decider: "system", At: time.Now()},
			want: store.ErrConflict, status: store.Pending,
		},
		{
			name: "already decided",
			before: func(t *testing.T, c store.Call) {
				if _, _, err := s.Decide(ctx, c.ID, c.Fingerprint, approve("U_FIRST")); err != nil {
					t.Fatalf("first Decide(%s): %v", c.ID, err)
				}
			},
			d:    store.Decision{Kind: "deny", Decider: "U_SECOND", At: time.Now()},
			want: store.ErrAlreadyDecided, status: store.Decided,
		},
		{
			name: "already cancelled",
			before: func(t *testing.T, c store.Call) {
				d := store.Decision{Kind: "cancel", Decider: "U_FIRST", At: time.Now()}
				if _, _, err := s.Decide(ctx, c.ID, "", d); err != nil {
					t.Fatalf("cancel Decide(%s): %v", c.ID, err)
				}
			},
			d:    approve("U_SECOND"),
			want: store.ErrAlreadyDecided, status: store.Cancelled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, calls := create(t, s, 2, func(_ *store.Run, cs []store.Call) {
				if tt.expired {
					cs[0].ExpiresAt = time.Now().Add(-time.Minute)
				}
			})
			c := calls[0]
			if tt.before != nil {
				tt.before(t, c)
			}
			id, fp, d := c.ID, c.Fingerprint, tt.d
			if tt.id != nil {
				id = tt.id(c)
			}
			if tt.fp != nil {
				fp = tt.fp(c)
			}
			if tt.name == "at expiry" {
				d.At = c.ExpiresAt
			}
			got, complete, err := s.Decide(ctx, id, fp, d)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decide(%s, %q, %s) error = %v, want %v", id, fp, d.Kind, err, tt.want)
			}
			if complete {
				t.Errorf("Decide(%s) refused with complete = true, want false", id)
			}
			after := wantStatus(t, s, c.ID, tt.status)
			if tt.want == store.ErrAlreadyDecided {
				if got.Decision == nil || got.Decision.Decider != "U_FIRST" {
					t.Errorf("Decide(%s) refused as already decided, returned decision %+v, want the first decider U_FIRST", id, got.Decision)
				}
				if after.Decision == nil || after.Decision.Decider != "U_FIRST" {
					t.Errorf("GetCall(%s).Decision = %+v, want it still by U_FIRST", c.ID, after.Decision)
				}
			}
			wantStatus(t, s, calls[1].ID, store.Pending)
		})
	}
}

func testDecideExpireAndCancel(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 2, func(_ *store.Run, cs []store.Call) {
		cs[0].ExpiresAt = time.Now().Add(-time.Second)
	})
	c, complete, err := s.Decide(ctx, calls[0].ID, "", store.Decision{Kind: "expire", Decider: "system", At: time.Now()})
	if err != nil {
		t.Fatalf("Decide(%s, expire) after expiry: %v", calls[0].ID, err)
	}
	if c.Status != store.Expired || complete {
		t.Errorf("Decide(%s, expire) = status %q complete %v, want %q false", c.ID, c.Status, complete, store.Expired)
	}
	c, complete, err = s.Decide(ctx, calls[1].ID, "", store.Decision{Kind: "cancel", Decider: "U_REQ", At: time.Now()})
	if err != nil {
		t.Fatalf("Decide(%s, cancel): %v", calls[1].ID, err)
	}
	if c.Status != store.Cancelled || !complete {
		t.Errorf("Decide(%s, cancel) = status %q complete %v, want %q true", c.ID, c.Status, complete, store.Cancelled)
	}
	if ok, err := s.BeginExecution(ctx, calls[1].ID, ""); err != nil || ok {
		t.Errorf("BeginExecution(cancelled %s) = %v, %v; want false, nil", calls[1].ID, ok, err)
	}
	// A call past its deadline is the expiry's: a cancel is refused.
	_, late := create(t, s, 1, func(_ *store.Run, cs []store.Call) {
		cs[0].ExpiresAt = time.Now().Add(-time.Second)
	})
	if c, _, err := s.Decide(ctx, late[0].ID, "", store.Decision{Kind: "cancel", Decider: "U_REQ", At: time.Now()}); !errors.Is(err, store.ErrExpired) || c.Status != store.Pending {
		t.Errorf("Decide(%s, cancel) after its deadline = %s, %v; want ErrExpired, still pending", late[0].ID, c.Status, err)
	}
}

func testDecideConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	const n = 50
	type result struct {
		decider string
		call    store.Call
		err     error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			decider := fmt.Sprintf("U%02d", i)
			got, _, err := s.Decide(context.Background(), c.ID, c.Fingerprint, approve(decider))
			results[i] = result{decider, got, err}
		})
	}
	wg.Wait()
	winner, losers := "", 0
	for _, r := range results {
		switch {
		case r.err == nil:
			if winner != "" {
				t.Fatalf("Decide(%s) succeeded for %s and %s, want exactly one success", c.ID, winner, r.decider)
			}
			winner = r.decider
		case errors.Is(r.err, store.ErrAlreadyDecided):
			losers++
		default:
			t.Errorf("Decide(%s) for %s: error = %v, want nil or ErrAlreadyDecided", c.ID, r.decider, r.err)
		}
	}
	if winner == "" || losers != n-1 {
		t.Fatalf("got winner %q and %d ErrAlreadyDecided, want one winner and %d", winner, losers, n-1)
	}
	for _, r := range results {
		if r.err != nil && (r.call.Decision == nil || r.call.Decision.Decider != winner) {
			t.Errorf("loser %s was told decision %+v, want decider %s", r.decider, r.call.Decision, winner)
		}
	}
	if got := wantStatus(t, s, c.ID, store.Decided); got.Decision.Decider != winner {
		t.Errorf("stored decider = %s, want %s", got.Decision.Decider, winner)
	}
}

func testCompleteOnce(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 3, nil)
	steps := []struct {
		call int
		kind string
		want bool
	}{
		{1, "approve", false},
		{0, "deny", false},
		{2, "respond", true},
	}
	for _, st := range steps {
		c := calls[st.call]
		d := store.Decision{Kind: st.kind, Decider: "U_APPROVER", At: time.Now()}
		_, complete, err := s.Decide(ctx, c.ID, c.Fingerprint, d)
		if err != nil {
			t.Fatalf("Decide(%s, %s): %v", c.ID, st.kind, err)
		}
		if complete != st.want {
			t.Errorf("Decide(%s, %s) complete = %v, want %v", c.ID, st.kind, complete, st.want)
		}
	}
	// A refused repeat of the last decision does not complete the run again.
	c := calls[2]
	if _, complete, err := s.Decide(ctx, c.ID, c.Fingerprint, approve("U_OTHER")); !errors.Is(err, store.ErrAlreadyDecided) || complete {
		t.Errorf("Decide(%s) again = complete %v, error %v; want false, ErrAlreadyDecided", c.ID, complete, err)
	}
}

func testCompleteOnceConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	_, calls := create(t, s, 3, nil)
	const perCall = 10
	var mu sync.Mutex
	completes, successes := 0, 0
	var wg sync.WaitGroup
	for _, c := range calls {
		for i := range perCall {
			wg.Go(func() {
				_, complete, err := s.Decide(context.Background(), c.ID, c.Fingerprint, approve(fmt.Sprintf("U%d", i)))
				if err != nil && !errors.Is(err, store.ErrAlreadyDecided) {
					t.Errorf("Decide(%s): %v", c.ID, err)
				}
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					successes++
				}
				if complete {
					completes++
				}
			})
		}
	}
	wg.Wait()
	if successes != len(calls) || completes != 1 {
		t.Errorf("got %d successful decisions and %d complete, want %d and 1", successes, completes, len(calls))
	}
}

// decideAll approves every call.
func decideAll(t *testing.T, s Store, calls []store.Call) {
	t.Helper()
	for _, c := range calls {
		if _, _, err := s.Decide(t.Context(), c.ID, c.Fingerprint, approve("U_APPROVER")); err != nil {
			t.Fatalf("Decide(%s): %v", c.ID, err)
		}
	}
}

func stalled(t *testing.T, s Store, runID string) bool {
	t.Helper()
	ids, err := s.Stalled(t.Context(), 0)
	if err != nil {
		t.Fatalf("Stalled: %v", err)
	}
	return slices.Contains(ids, runID)
}

func testClaimResume(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)
	decideAll(t, s, calls[:1])
	if ok, err := s.ClaimResume(ctx, r.ID, "replica-a", time.Minute); err != nil || ok {
		t.Fatalf("ClaimResume(%s) with a call pending = %v, %v; want false, nil", r.ID, ok, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s while a call is pending", r.ID)
	}
	decideAll(t, s, calls[1:])

	const n = 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	var winners []string
	for i := range n {
		wg.Go(func() {
			owner := fmt.Sprintf("replica-%d", i)
			ok, err := s.ClaimResume(context.Background(), r.ID, owner, time.Minute)
			if err != nil {
				t.Errorf("ClaimResume(%s, %s): %v", r.ID, owner, err)
			}
			if ok {
				mu.Lock()
				winners = append(winners, owner)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("ClaimResume(%s) by %d claimers: %d got it (%v), want exactly 1", r.ID, n, len(winners), winners)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, winners[0], time.Minute); err != nil || ok {
		t.Errorf("ClaimResume(%s) again by the holder = %v, %v; want false, nil", r.ID, ok, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s while its resume is claimed", r.ID)
	}
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", r.ID, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "replica-late", time.Minute); err != nil || ok {
		t.Errorf("ClaimResume(%s) after FinishRun = %v, %v; want false, nil", r.ID, ok, err)
	}
	if _, err := s.ClaimResume(ctx, store.NewRunID(), "replica-a", time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("ClaimResume(unknown run) error = %v, want ErrNotFound", err)
	}
}

func testClaimResumeAfterCrash(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 1, nil)
	decideAll(t, s, calls)
	if ok, err := s.ClaimResume(ctx, r.ID, "crashing", short); err != nil || !ok {
		t.Fatalf("ClaimResume(%s) = %v, %v; want true, nil", r.ID, ok, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "other", time.Minute); err != nil || ok {
		t.Fatalf("ClaimResume(%s) during the lease = %v, %v; want false, nil", r.ID, ok, err)
	}
	// "crashing" never calls FinishRun: once its lease runs out the run is
	// stalled and another replica can resume it.
	eventually(t, "Stalled lists the run after the lease ran out", func() (bool, error) {
		return stalled(t, s, r.ID), nil
	})
	if ok, err := s.ClaimResume(ctx, r.ID, "rescuer", time.Minute); err != nil || !ok {
		t.Fatalf("ClaimResume(%s) after the lease ran out = %v, %v; want true, nil", r.ID, ok, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "third", time.Minute); err != nil || ok {
		t.Errorf("ClaimResume(%s) after the rescue claim = %v, %v; want false, nil", r.ID, ok, err)
	}
}

func testStalledAfterRestart(t *testing.T, open Opener) {
	s, reopen := open(t)
	r, calls := create(t, s, 2, nil)
	done, _ := create(t, s, 1, nil) // still pending: not stalled
	decideAll(t, s, calls)          // decided, then the process dies before resuming
	s = reopen()
	ids, err := s.Stalled(t.Context(), 0)
	if err != nil {
		t.Fatalf("Stalled after restart: %v", err)
	}
	if !slices.Contains(ids, r.ID) || slices.Contains(ids, done.ID) {
		t.Errorf("Stalled after restart = %v, want it to list %s and not %s", ids, r.ID, done.ID)
	}
	if ok, err := s.ClaimResume(t.Context(), r.ID, "new-process", time.Minute); err != nil || !ok {
		t.Errorf("ClaimResume(%s) after restart = %v, %v; want true, nil", r.ID, ok, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s after it was claimed", r.ID)
	}
}

func testCallNote(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 2, nil)
	id := calls[0].ID
	if note, err := s.CallNote(ctx, id); err != nil || note != nil {
		t.Errorf("CallNote(%s) before any note = %q, %v; want nil, nil", id, note, err)
	}
	for _, note := range []string{`{"refs":[1]}`, `{"refs":[1,2]}`} {
		if err := s.PutCallNote(ctx, id, []byte(note)); err != nil {
			t.Fatalf("PutCallNote(%s, %s): %v", id, note, err)
		}
		if got, err := s.CallNote(ctx, id); err != nil || string(got) != note {
			t.Errorf("CallNote(%s) = %q, %v; want %s", id, got, err, note)
		}
	}
	if note, err := s.CallNote(ctx, calls[1].ID); err != nil || note != nil {
		t.Errorf("CallNote(%s) of the other call = %q, %v; want nil, nil", calls[1].ID, note, err)
	}
	s = reopen()
	if got, err := s.CallNote(t.Context(), id); err != nil || string(got) != `{"refs":[1,2]}` {
		t.Errorf("CallNote(%s) after restart = %q, %v; want the last note", id, got, err)
	}
	unknown := store.CallID(store.NewRunID(), 0)
	if err := s.PutCallNote(t.Context(), unknown, []byte("{}")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("PutCallNote(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := s.CallNote(t.Context(), unknown); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("CallNote(unknown) after PutCallNote = %v, want ErrNotFound: nothing written", err)
	}
}

func testBeginExecution(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	if ok, err := s.BeginExecution(ctx, c.ID, ""); err != nil || ok {
		t.Errorf("BeginExecution(pending %s) = %v, %v; want false, nil", c.ID, ok, err)
	}
	decideAll(t, s, calls)
	if ok, err := s.BeginExecution(ctx, c.ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) first = %v, %v; want true, nil", c.ID, ok, err)
	}
	if got := wantStatus(t, s, c.ID, store.Decided); !got.Executing {
		t.Errorf("GetCall(%s).Executing = false after BeginExecution, want true", c.ID)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, ""); err != nil || ok {
		t.Errorf("BeginExecution(%s) second = %v, %v; want false, nil", c.ID, ok, err)
	}
	s = reopen()
	if ok, err := s.BeginExecution(t.Context(), c.ID, ""); err != nil || ok {
		t.Errorf("BeginExecution(%s) after restart = %v, %v; want false, nil", c.ID, ok, err)
	}
	if _, err := s.BeginExecution(t.Context(), store.CallID(store.NewRunID(), 0), ""); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BeginExecution(unknown) error = %v, want ErrNotFound", err)
	}
}

// testBeginExecutionAskedAgain: a sending asked again under its attempt's
// name (its answer lost) is told whether its mark stands; any other is
// not, and a mark taken back is no attempt's.
func testBeginExecutionAskedAgain(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	if ok, err := s.BeginExecution(ctx, c.ID, "a1"); err != nil || ok {
		t.Errorf("BeginExecution(pending %s, a1) = %v, %v; want false, nil", c.ID, ok, err)
	}
	decideAll(t, s, calls)
	for _, step := range []struct {
		attempt string
		want    bool
	}{{"a1", true}, {"a1", true}, {"a2", false}, {"", false}} {
		if ok, err := s.BeginExecution(ctx, c.ID, step.attempt); err != nil || ok != step.want {
			t.Errorf("BeginExecution(%s, %q) = %v, %v; want %v, nil", c.ID, step.attempt, ok, err, step.want)
		}
	}
	s = reopen()
	if ok, err := s.BeginExecution(ctx, c.ID, "a1"); err != nil || !ok {
		t.Errorf("BeginExecution(%s, a1) after restart = %v, %v; want true, nil", c.ID, ok, err)
	}
	if err := s.AbandonExecution(ctx, c.ID, "a1"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, "a2"); err != nil || !ok {
		t.Errorf("BeginExecution(%s, a2) after AbandonExecution = %v, %v; want true, nil", c.ID, ok, err)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, "a1"); err != nil || ok {
		t.Errorf("BeginExecution(%s, a1) after a2 marked it = %v, %v; want false, nil", c.ID, ok, err)
	}
}

// SkipExecution marks a decided call started with why it did not run as
// its result, in one step, and refuses a call that is not decided or is
// marked already.
func testSkipExecution(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 3, nil)
	notRun := []byte(`{"content":"not performed: the policy now denies this call","is_error":true,"not_run":"policy now denies"}`)
	if err := s.SkipExecution(ctx, calls[0].ID, notRun); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SkipExecution(pending %s) = %v, want ErrConflict", calls[0].ID, err)
	}
	decideAll(t, s, calls)
	if err := s.SkipExecution(ctx, calls[0].ID, nil); err == nil {
		t.Errorf("SkipExecution(%s) of an empty result = nil, want an error", calls[0].ID)
	}
	if got := wantStatus(t, s, calls[0].ID, store.Decided); got.Executing || len(got.Result) != 0 {
		t.Errorf("GetCall(%s) after an empty result = executing %v, result %s; want neither", calls[0].ID, got.Executing, got.Result)
	}
	if err := s.SkipExecution(ctx, calls[0].ID, notRun); err != nil {
		t.Fatalf("SkipExecution(%s) = %v", calls[0].ID, err)
	}
	// Sent again (its reply was lost): it succeeds and changes nothing.
	if err := s.SkipExecution(ctx, calls[0].ID, notRun); err != nil {
		t.Errorf("SkipExecution(%s) sent again = %v, want nil", calls[0].ID, err)
	}
	s = reopen()
	got := wantStatus(t, s, calls[0].ID, store.Decided)
	if !got.Executing || string(got.Result) != string(notRun) {
		t.Errorf("GetCall(%s) after SkipExecution and a restart = executing %v, result %s; want marked with %s", calls[0].ID, got.Executing, got.Result, notRun)
	}
	if _, loaded, err := s.LoadRun(ctx, r.ID); err != nil || !loaded[0].Executing || string(loaded[0].Result) != string(notRun) {
		t.Errorf("LoadRun(%s) = %+v, %v; want the first call marked with its result", r.ID, loaded, err)
	}
	// The mark stands: nothing runs it, or takes it back.
	if ok, err := s.BeginExecution(ctx, calls[0].ID, "a1"); err != nil || ok {
		t.Errorf("BeginExecution(%s) after SkipExecution = %v, %v; want false, nil", calls[0].ID, ok, err)
	}
	if err := s.AbandonExecution(ctx, calls[0].ID, "a1"); err != nil {
		t.Fatal(err)
	}
	if got := wantStatus(t, s, calls[0].ID, store.Decided); !got.Executing {
		t.Errorf("GetCall(%s).Executing = false after AbandonExecution of a skipped call, want its mark kept", calls[0].ID)
	}
	other := []byte(`{"content":"not performed: tool restart is no longer available","is_error":true,"not_run":"tool unavailable"}`)
	if err := s.SkipExecution(ctx, calls[0].ID, other); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SkipExecution(%s) with another result = %v, want ErrConflict", calls[0].ID, err)
	}
	// A call marked to run is not skipped: it may be running.
	if ok, err := s.BeginExecution(ctx, calls[1].ID, "a1"); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) = %v, %v; want true, nil", calls[1].ID, ok, err)
	}
	if err := s.SkipExecution(ctx, calls[1].ID, notRun); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SkipExecution(%s) of a call marked to run = %v, want ErrConflict", calls[1].ID, err)
	}
	if got := wantStatus(t, s, calls[1].ID, store.Decided); len(got.Result) != 0 {
		t.Errorf("GetCall(%s).Result = %s after a refused SkipExecution, want none", calls[1].ID, got.Result)
	}
	// A call with a result saved is not skipped either.
	if ok, err := s.BeginExecution(ctx, calls[2].ID, "a2"); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) = %v, %v; want true, nil", calls[2].ID, ok, err)
	}
	ran := []byte(`{"content":"restarted"}`)
	if err := s.SaveResult(ctx, calls[2].ID, ran, store.AuditEntry{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SkipExecution(ctx, calls[2].ID, notRun); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SkipExecution(%s) of a call with a result = %v, want ErrConflict", calls[2].ID, err)
	}
	if got := wantStatus(t, s, calls[2].ID, store.Decided); string(got.Result) != string(ran) {
		t.Errorf("GetCall(%s).Result = %s after a refused SkipExecution, want %s", calls[2].ID, got.Result, ran)
	}
	if err := s.SkipExecution(ctx, store.CallID(store.NewRunID(), 0), notRun); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SkipExecution(unknown) = %v, want ErrNotFound", err)
	}
}

func testSaveResult(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 1, nil)
	c := calls[0]
	result := []byte(`{"content":"deployed"}`)
	entry := store.AuditEntry{At: time.Now().Truncate(time.Millisecond), Actor: "U_APPROVER", Action: "execute", CallID: c.ID, Outcome: "ok"}
	decideAll(t, s, calls)
	executes := func() []store.AuditEntry {
		t.Helper()
		log, err := s.AuditLog(ctx, 0)
		if err != nil {
			t.Fatalf("AuditLog: %v", err)
		}
		return slices.DeleteFunc(log, func(e store.AuditEntry) bool { return e.Action != "execute" })
	}
	if err := s.SaveResult(ctx, c.ID, result, entry); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SaveResult(%s) before BeginExecution = %v, want ErrConflict", c.ID, err)
	}
	if got := executes(); len(got) != 0 {
		t.Errorf("audit entries after a refused SaveResult = %+v, want none", got)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) = %v, %v; want true, nil", c.ID, ok, err)
	}
	if got := wantStatus(t, s, c.ID, store.Decided); len(got.Result) != 0 {
		t.Errorf("GetCall(%s).Result = %s before SaveResult, want empty", c.ID, got.Result)
	}
	// An empty result is refused, and holds nothing: the result saved
	// next is the call's.
	if err := s.SaveResult(ctx, c.ID, nil, entry); err == nil {
		t.Errorf("SaveResult(%s) of an empty result = nil, want an error", c.ID)
	}
	if got := executes(); len(got) != 0 {
		t.Errorf("audit entries after an empty result = %+v, want none", got)
	}
	if err := s.SaveResult(ctx, c.ID, result, entry); err != nil {
		t.Fatalf("SaveResult(%s) = %v", c.ID, err)
	}
	s = reopen()
	if got := executes(); len(got) != 1 || got[0].CallID != c.ID || got[0].Actor != entry.Actor || got[0].Outcome != "ok" {
		t.Errorf("audit entries after SaveResult = %+v, want its entry once", got)
	}
	// Sent again (its reply was lost): nothing more is written.
	if err := s.SaveResult(ctx, c.ID, result, entry); err != nil {
		t.Errorf("SaveResult(%s) sent again = %v, want nil", c.ID, err)
	}
	// Another result (a resume that took the run over saved one first)
	// is refused.
	other := entry
	other.Outcome = "unknown"
	if err := s.SaveResult(ctx, c.ID, []byte(`{"content":"outcome unknown"}`), other); !errors.Is(err, store.ErrConflict) {
		t.Errorf("SaveResult(%s) of another result = %v, want ErrConflict", c.ID, err)
	}
	if got := executes(); len(got) != 1 || got[0].Outcome != "ok" {
		t.Errorf("audit entries after SaveResult sent again and another refused = %+v, want the first entry only", got)
	}
	if got := wantStatus(t, s, c.ID, store.Decided); string(got.Result) != string(result) {
		t.Errorf("GetCall(%s).Result after restart = %s, want %s", c.ID, got.Result, result)
	}
	if _, got, err := s.LoadRun(t.Context(), r.ID); err != nil || string(got[0].Result) != string(result) {
		t.Errorf("LoadRun(%s) call result = %v, %v; want %s", r.ID, got, err, result)
	}
	if err := s.SaveResult(t.Context(), store.CallID(store.NewRunID(), 0), result, entry); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("SaveResult(unknown) = %v, want ErrNotFound", err)
	}
	if got := executes(); len(got) != 1 {
		t.Errorf("audit entries after SaveResult of an unknown call = %+v, want the first call's only", got)
	}
}

func testFinishRun(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv := "C7:200.2"
	r, calls := create(t, s, 2, func(r *store.Run, cs []store.Call) {
		r.Conversation = conv
		for i := range cs {
			cs[i].Conversation = conv
		}
		cs[0].ExpiresAt = time.Now().Add(-time.Minute)
	})
	other, _ := create(t, s, 1, func(r *store.Run, cs []store.Call) {
		r.Conversation, cs[0].Conversation = "C7:300.3", "C7:300.3"
	})
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", r.ID, err)
	}
	pending, err := s.Pending(ctx, store.Filter{})
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	for _, c := range pending {
		if c.RunID == r.ID {
			t.Errorf("Pending lists %s of finished run %s", c.ID, r.ID)
		}
	}
	if len(pending) != 1 || pending[0].RunID != other.ID {
		t.Errorf("Pending = %v, want only the call of %s", callIDs(pending), other.ID)
	}
	due, err := s.Due(ctx, time.Now().Add(48*time.Hour), 0)
	if err != nil {
		t.Fatalf("Due: %v", err)
	}
	for _, c := range due {
		if c.RunID == r.ID {
			t.Errorf("Due lists %s of finished run %s", c.ID, r.ID)
		}
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists finished run %s", r.ID)
	}
	gotConv, err := s.LoadConversation(ctx, conv)
	if err != nil {
		t.Fatalf("LoadConversation(%s): %v", conv, err)
	}
	if gotConv.PausedRun != "" {
		t.Errorf("LoadConversation(%s).PausedRun = %q after FinishRun, want empty", conv, gotConv.PausedRun)
	}
	if gotRun, gotCalls, err := s.LoadRun(ctx, r.ID); err != nil || len(gotCalls) != len(calls) || !gotRun.Finished {
		t.Errorf("LoadRun(%s) after FinishRun = %d calls, finished %v, %v; want it kept with %d calls and finished", r.ID, len(gotCalls), gotRun.Finished, err, len(calls))
	}
	if gotRun, _, err := s.LoadRun(ctx, other.ID); err != nil || gotRun.Finished {
		t.Errorf("LoadRun(%s) of an unfinished run: finished %v, %v; want false", other.ID, gotRun.Finished, err)
	}
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Errorf("FinishRun(%s) again: %v, want nil", r.ID, err)
	}
	if err := s.FinishRun(ctx, store.NewRunID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FinishRun(unknown) error = %v, want ErrNotFound", err)
	}
}

// NextExpiry and NextReminder find the earliest pending call behind many
// that were decided (entries an index may keep until it is read).
func testNextPastDecidedCalls(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	_, calls := create(t, s, 30, func(_ *store.Run, cs []store.Call) {
		for i := range cs {
			cs[i].ExpiresAt = now.Add(time.Hour + time.Duration(i)*time.Second)
			cs[i].RemindAt = now.Add(time.Minute + time.Duration(i)*time.Second)
		}
	})
	for _, c := range calls[:29] {
		if _, _, err := s.Decide(ctx, c.ID, c.Fingerprint, approve("U_APPROVER")); err != nil {
			t.Fatalf("Decide(%s): %v", c.ID, err)
		}
	}
	last := calls[29]
	for range 2 { // the first read may drop the decided ones' entries
		if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(last.ExpiresAt) {
			t.Errorf("NextExpiry behind 29 decided calls = %v, %v; want %v", next, err, last.ExpiresAt)
		}
		if next, err := s.NextReminder(ctx); err != nil || !next.Equal(last.RemindAt) {
			t.Errorf("NextReminder behind 29 decided calls = %v, %v; want %v", next, err, last.RemindAt)
		}
	}
}

func testDue(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	now := time.Now()
	_, calls := create(t, s, 4, func(_ *store.Run, cs []store.Call) {
		cs[0].ExpiresAt = now.Add(-2 * time.Minute)
		cs[1].ExpiresAt = now.Add(-time.Minute)
		cs[2].ExpiresAt = now.Add(-30 * time.Second) // decided below
		cs[3].ExpiresAt = now.Add(time.Hour)
	})
	c := calls[2]
	d := store.Decision{Kind: "expire", Decider: "system", At: now}
	if _, _, err := s.Decide(ctx, c.ID, "", d); err != nil {
		t.Fatalf("Decide(%s, expire): %v", c.ID, err)
	}
	tests := []struct {
		now   time.Time
		limit int
		want  []string
	}{
		{now, 0, []string{calls[0].ID, calls[1].ID}},
		{now, 1, []string{calls[0].ID}},
		{now.Add(-90 * time.Second), 10, []string{calls[0].ID}},
		{calls[3].ExpiresAt, 10, []string{calls[0].ID, calls[1].ID, calls[3].ID}},
		{now.Add(-time.Hour), 10, nil},
	}
	for _, tt := range tests {
		got, err := s.Due(ctx, tt.now, tt.limit)
		if err != nil {
			t.Fatalf("Due(%v, %d): %v", tt.now, tt.limit, err)
		}
		if ids := callIDs(got); !slices.Equal(ids, tt.want) {
			t.Errorf("Due(now%+v, %d) = %v, want %v", tt.now.Sub(now).Round(time.Second), tt.limit, ids, tt.want)
		}
	}
}

// Calls that expire within one millisecond are listed earliest first,
// and a limit keeps the earliest of them, whatever their ids: more of
// them than a store may read at once (an index that orders them by
// millisecond, then by id, is read past the limit to the millisecond's
// end).
func testDueWithinAMillisecond(t *testing.T, open Opener) {
	s, _ := open(t)
	base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	const n = 201
	_, calls := create(t, s, n, func(_ *store.Run, cs []store.Call) {
		// The later the id, the earlier the expiry.
		byID := slices.SortedFunc(slices.Values(cs), func(a, b store.Call) int { return strings.Compare(a.ID, b.ID) })
		for i, c := range byID {
			j := slices.IndexFunc(cs, func(x store.Call) bool { return x.ID == c.ID })
			cs[j].ExpiresAt = base.Add(time.Duration(n-i) * time.Microsecond)
		}
	})
	want := slices.SortedFunc(slices.Values(calls), func(a, b store.Call) int { return a.ExpiresAt.Compare(b.ExpiresAt) })
	for _, limit := range []int{1, 2, 0} {
		got, err := s.Due(t.Context(), time.Now(), limit)
		if err != nil {
			t.Fatal(err)
		}
		w := want
		if limit > 0 {
			w = want[:limit]
		}
		if ids := callIDs(got); !slices.Equal(ids, callIDs(w)) {
			t.Errorf("Due(limit %d) = %v, want %v", limit, ids, callIDs(w))
		}
	}
}

func testNextExpiry(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	if next, err := s.NextExpiry(ctx); err != nil || !next.IsZero() {
		t.Fatalf("NextExpiry with nothing pending = %v, %v; want the zero time, nil", next, err)
	}
	now := time.Now().Truncate(time.Millisecond)
	_, calls := create(t, s, 3, func(_ *store.Run, cs []store.Call) {
		cs[0].ExpiresAt = now.Add(time.Hour)
		cs[1].ExpiresAt = now.Add(time.Minute)
		cs[2].ExpiresAt = now.Add(2 * time.Hour)
	})
	want := func(w time.Time) {
		t.Helper()
		got, err := s.NextExpiry(ctx)
		if err != nil || !got.Equal(w) {
			t.Errorf("NextExpiry = %v, %v; want %v, nil", got, err, w)
		}
	}
	want(calls[1].ExpiresAt)
	d := store.Decision{Kind: "approve", Decider: "U_APP", At: now}
	if _, _, err := s.Decide(ctx, calls[1].ID, calls[1].Fingerprint, d); err != nil {
		t.Fatalf("Decide(%s): %v", calls[1].ID, err)
	}
	want(calls[0].ExpiresAt)
}

func testPendingFilters(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	// Conversations and users are unique to this test, since stores may be
	// shared by parallel tests.
	u := store.NewRunID()
	convA, convB := "CA:"+u, "CB:"+u
	alice, bob, carol, req1, req2 := "UA"+u, "UB"+u, "UC"+u, "UR1"+u, "UR2"+u
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	_, a := create(t, s, 2, func(r *store.Run, cs []store.Call) {
		r.Conversation, r.Requester = convA, req1
		cs[0].Conversation, cs[0].Requester, cs[0].Approvers, cs[0].CreatedAt = convA, req1, []string{alice, bob}, base
		cs[1].Conversation, cs[1].Requester, cs[1].Approvers, cs[1].CreatedAt = convA, req1, nil, base.Add(2*time.Second)
	})
	_, b := create(t, s, 2, func(r *store.Run, cs []store.Call) {
		r.Conversation, r.Requester = convB, req2
		cs[0].Conversation, cs[0].Requester, cs[0].Approvers, cs[0].CreatedAt = convB, req2, []string{bob}, base.Add(time.Second)
		cs[1].Conversation, cs[1].Requester, cs[1].Approvers, cs[1].CreatedAt = convB, req2, []string{carol}, base.Add(3*time.Second)
	})
	decideAll(t, s, b[1:]) // carol's call is no longer pending

	tests := []struct {
		name string
		f    store.Filter
		want []string
	}{
		{"conversation A", store.Filter{Conversation: convA}, []string{a[0].ID, a[1].ID}},
		{"conversation B", store.Filter{Conversation: convB}, []string{b[0].ID}},
		{"approver alice", store.Filter{Approver: alice}, []string{a[0].ID}},
		{"approver bob, oldest first", store.Filter{Approver: bob}, []string{a[0].ID, b[0].ID}},
		{"approver carol, decided", store.Filter{Approver: carol}, nil},
		{"requester 1", store.Filter{Requester: req1}, []string{a[0].ID, a[1].ID}},
		{"requester 2", store.Filter{Requester: req2}, []string{b[0].ID}},
		{"approver bob in conversation B", store.Filter{Conversation: convB, Approver: bob}, []string{b[0].ID}},
		{"requester 1 with approver bob", store.Filter{Requester: req1, Approver: bob}, []string{a[0].ID}},
		{"conversation A, anyone may approve", store.Filter{Conversation: convA, Approver: "*"}, []string{a[1].ID}},
		{"unknown conversation", store.Filter{Conversation: "CZ:" + u}, nil},
	}
	for _, tt := range tests {
		got, err := s.Pending(ctx, tt.f)
		if err != nil {
			t.Fatalf("Pending(%s): %v", tt.name, err)
		}
		if ids := callIDs(got); !slices.Equal(ids, tt.want) {
			t.Errorf("Pending(%s) = %v, want %v", tt.name, ids, tt.want)
		}
	}

	all, err := s.Pending(ctx, store.Filter{})
	if err != nil {
		t.Fatalf("Pending(all): %v", err)
	}
	ids := callIDs(all)
	for _, id := range []string{a[0].ID, b[0].ID, a[1].ID} {
		if !slices.Contains(ids, id) {
			t.Errorf("Pending(all) = %v, want it to contain %s", ids, id)
		}
	}
	if slices.Contains(ids, b[1].ID) {
		t.Errorf("Pending(all) lists decided call %s", b[1].ID)
	}
	anyone, err := s.Pending(ctx, store.Filter{Approver: "*"})
	if err != nil {
		t.Fatalf("Pending(approver *): %v", err)
	}
	for _, c := range anyone {
		if len(c.Approvers) != 0 {
			t.Errorf("Pending(approver *) lists %s with approvers %v", c.ID, c.Approvers)
		}
	}
	if !slices.Contains(callIDs(anyone), a[1].ID) {
		t.Errorf("Pending(approver *) = %v, want it to contain %s", callIDs(anyone), a[1].ID)
	}
}

// Raw JSON (arguments, edited arguments, results, state, records) comes
// back byte for byte, before and after a restart: no '<', '>' or '&'
// rewritten as \u003c, \u003e or \u0026 on the way through.
func testRawBytesKept(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	const (
		args   = `{"filter":"a<b && c>d","path":"/srv/<x>&y"}`
		edited = `{"filter":"x>1&y<2"}`
		state  = `{"messages":[{"role":"user","content":"<&>"}],"raw":{"q":"<b>"}}`
		result = `{"output":"<done> & ok"}`
		data   = `{"when":"args.n > 5 && args.s < \"x\""}`
	)
	r, calls := create(t, s, 1, func(r *store.Run, calls []store.Call) {
		r.State = json.RawMessage(state)
		calls[0].Args = json.RawMessage(args)
	})
	d := approve("U_APPROVER")
	d.Kind, d.Args = "edit", json.RawMessage(edited)
	if _, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, d); err != nil {
		t.Fatalf("Decide(%s): %v", calls[0].ID, err)
	}
	if ok, err := s.BeginExecution(ctx, calls[0].ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) = %v, %v; want true, nil", calls[0].ID, ok, err)
	}
	if err := s.SaveResult(ctx, calls[0].ID, json.RawMessage(result), store.AuditEntry{}); err != nil {
		t.Fatalf("SaveResult(%s): %v", calls[0].ID, err)
	}
	conv := store.Conversation{Key: "C6:1.6", State: json.RawMessage(state), UpdatedAt: time.Now()}
	if err := s.SaveConversation(ctx, conv); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	if _, err := s.PutRecord(ctx, store.Record{Kind: "rule", ID: "r1", Data: json.RawMessage(data)}, 0); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	check := func(when string, s Store) {
		t.Helper()
		gotRun, gotCalls, err := s.LoadRun(ctx, r.ID)
		if err != nil {
			t.Fatalf("LoadRun(%s) %s: %v", r.ID, when, err)
		}
		for _, c := range []struct{ what, got, want string }{
			{"run state", string(gotRun.State), state},
			{"call arguments", string(gotCalls[0].Args), args},
			{"edited arguments", string(gotCalls[0].Decision.Args), edited},
			{"result", string(gotCalls[0].Result), result},
		} {
			if c.got != c.want {
				t.Errorf("%s %s: got %s, want %s", c.what, when, c.got, c.want)
			}
		}
		if got, err := s.LoadConversation(ctx, conv.Key); err != nil || string(got.State) != state {
			t.Errorf("conversation state %s: got %s (%v), want %s", when, got.State, err, state)
		}
		if recs, err := s.Records(ctx, "rule"); err != nil || len(recs) != 1 || string(recs[0].Data) != data {
			t.Errorf("record %s: got %+v (%v), want data %s", when, recs, err, data)
		}
	}
	check("before a restart", s)
	check("after a restart", reopen())
}

func testRestart(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)
	decided, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, approve("U_APPROVER"))
	if err != nil {
		t.Fatalf("Decide(%s): %v", calls[0].ID, err)
	}
	conv := store.Conversation{Key: "C5:1.5", State: json.RawMessage(`{"n":5}`), UpdatedAt: time.Now()}
	if err := s.SaveConversation(ctx, conv); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	entry := store.AuditEntry{At: time.Now(), Actor: "U_APPROVER", Action: "decide", CallID: calls[0].ID, Outcome: "approve"}
	if err := s.Audit(ctx, entry); err != nil {
		t.Fatalf("Audit: %v", err)
	}
	rec, err := s.PutRecord(ctx, store.Record{Kind: "rule", ID: "r1", Data: json.RawMessage(`{"tool":"x"}`)}, 0)
	if err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	if ok, err := s.SeenEvent(ctx, "Ev1", time.Hour); err != nil || !ok {
		t.Fatalf("SeenEvent(Ev1) = %v, %v; want true, nil", ok, err)
	}
	if ok, err := s.AcquireLease(ctx, "C5:1.5", "old-process", time.Hour); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v; want true, nil", ok, err)
	}

	s = reopen()
	ctx = t.Context()
	gotRun, gotCalls, err := s.LoadRun(ctx, r.ID)
	if err != nil {
		t.Fatalf("LoadRun(%s) after restart: %v", r.ID, err)
	}
	if gotRun.ID != r.ID || string(gotRun.State) != string(r.State) || len(gotCalls) != 2 {
		t.Errorf("LoadRun(%s) after restart = %+v with %d calls, want the saved run with 2", r.ID, gotRun, len(gotCalls))
	}
	if got, want := normCall(gotCalls[0]), normCall(decided); !reflect.DeepEqual(got, want) {
		t.Errorf("decided call after restart = %+v, want %+v", got, want)
	}
	if gotCalls[1].Status != store.Pending {
		t.Errorf("call %s after restart has status %q, want pending", gotCalls[1].ID, gotCalls[1].Status)
	}
	gotConv, err := s.LoadConversation(ctx, conv.Key)
	if err != nil || string(gotConv.State) != string(conv.State) {
		t.Errorf("LoadConversation(%s) after restart = %+v, %v; want state %s", conv.Key, gotConv, err, conv.State)
	}
	log, err := s.AuditLog(ctx, 10)
	if err != nil || len(log) != 1 || log[0].CallID != entry.CallID || log[0].Action != entry.Action {
		t.Errorf("AuditLog after restart = %+v, %v; want the one entry", log, err)
	}
	recs, err := s.Records(ctx, "rule")
	if err != nil || len(recs) != 1 || recs[0].Version != rec.Version || string(recs[0].Data) != string(rec.Data) {
		t.Errorf("Records(rule) after restart = %+v, %v; want %+v", recs, err, rec)
	}
	if ok, err := s.SeenEvent(ctx, "Ev1", time.Hour); err != nil || ok {
		t.Errorf("SeenEvent(Ev1) after restart = %v, %v; want false, nil", ok, err)
	}
	if ok, err := s.AcquireLease(ctx, "C5:1.5", "new-process", time.Hour); err != nil || ok {
		t.Errorf("AcquireLease held before restart = %v, %v; want false, nil", ok, err)
	}
	pending, err := s.Pending(ctx, store.Filter{Conversation: r.Conversation})
	if err != nil || !slices.Equal(callIDs(pending), []string{calls[1].ID}) {
		t.Errorf("Pending after restart = %v, %v; want [%s]", callIDs(pending), err, calls[1].ID)
	}
	_, complete, err := s.Decide(ctx, calls[1].ID, calls[1].Fingerprint, approve("U_APPROVER"))
	if err != nil || !complete {
		t.Errorf("Decide(%s) after restart = complete %v, %v; want true, nil", calls[1].ID, complete, err)
	}
}

func testLease(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	key := "conv:" + store.NewRunID()
	acquire := func(owner string, ttl time.Duration, want bool) {
		t.Helper()
		ok, err := s.AcquireLease(ctx, key, owner, ttl)
		if err != nil || ok != want {
			t.Fatalf("AcquireLease(%s) = %v, %v; want %v, nil", owner, ok, err, want)
		}
	}
	renew := func(owner string, ttl time.Duration, want bool) {
		t.Helper()
		ok, err := s.RenewLease(ctx, key, owner, ttl)
		if err != nil || ok != want {
			t.Fatalf("RenewLease(%s) = %v, %v; want %v, nil", owner, ok, err, want)
		}
	}
	release := func(owner string) {
		t.Helper()
		if err := s.ReleaseLease(ctx, key, owner); err != nil {
			t.Fatalf("ReleaseLease(%s): %v", owner, err)
		}
	}
	renew("a", time.Minute, false) // a free lease is not taken by a renewal
	acquire("b", time.Minute, true)
	release("b")
	acquire("a", short, true)
	acquire("b", time.Minute, false)
	renew("b", time.Minute, false)
	acquire("a", short, true) // renew
	renew("a", short, true)
	eventually(t, "b takes the lease after a's ran out", func() (bool, error) {
		return s.AcquireLease(ctx, key, "b", time.Minute)
	})
	renew("a", time.Minute, false) // a's ran out, and is b's
	acquire("a", time.Minute, false)
	release("a") // not the owner: nothing happens
	acquire("c", time.Minute, false)
	release("b")
	renew("b", time.Minute, false) // released: not taken back
	acquire("c", time.Minute, true)
	release("c")
	release("c") // releasing a free lease is fine

	// A lease that ran out is not renewed, even when nobody took it since.
	acquire("d", short, true)
	eventually(t, "d's lease runs out", func() (bool, error) {
		ok, err := s.AcquireLease(ctx, key, "e", time.Minute)
		if ok {
			release("e")
		}
		return ok, err
	})
	renew("d", time.Minute, false)
}

func testSeenEvent(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	id := "Ev" + store.NewRunID()
	for i, want := range []bool{true, false, false} {
		if ok, err := s.SeenEvent(ctx, id, short); err != nil || ok != want {
			t.Fatalf("SeenEvent(%s) #%d = %v, %v; want %v, nil", id, i+1, ok, err, want)
		}
	}
	if ok, err := s.SeenEvent(ctx, id+"-other", time.Minute); err != nil || !ok {
		t.Errorf("SeenEvent(other id) = %v, %v; want true, nil", ok, err)
	}
	eventually(t, "SeenEvent is new again after the ttl", func() (bool, error) {
		return s.SeenEvent(ctx, id, time.Minute)
	})
}

func testRecords(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	put := func(id, data string, expect, want int64, wantErr error) {
		t.Helper()
		r, err := s.PutRecord(ctx, store.Record{Kind: "policy", ID: id, Data: json.RawMessage(data)}, expect)
		if !errors.Is(err, wantErr) {
			t.Fatalf("PutRecord(%s, expect %d) error = %v, want %v", id, expect, err, wantErr)
		}
		if err == nil && r.Version != want {
			t.Fatalf("PutRecord(%s, expect %d) version = %d, want %d", id, expect, r.Version, want)
		}
	}
	put("b", `{"v":1}`, 0, 1, nil)
	put("b", `{"v":2}`, 0, 0, store.ErrConflict)
	put("b", `{"v":2}`, 1, 2, nil)
	put("b", `{"v":3}`, -1, 3, nil)
	put("a", `{"v":1}`, 5, 0, store.ErrConflict)
	put("a", `{"v":1}`, -1, 1, nil)
	if _, err := s.PutRecord(ctx, store.Record{Kind: "rule", ID: "a", Data: json.RawMessage(`{}`)}, 0); err != nil {
		t.Fatalf("PutRecord(rule/a): %v", err)
	}

	recs, err := s.Records(ctx, "policy")
	if err != nil {
		t.Fatalf("Records(policy): %v", err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s/%s v%d %s", r.Kind, r.ID, r.Version, r.Data))
	}
	want := []string{`policy/a v1 {"v":1}`, `policy/b v3 {"v":3}`}
	if !slices.Equal(got, want) {
		t.Errorf("Records(policy) = %q, want %q", got, want)
	}
	if recs, err := s.Records(ctx, "nothing"); err != nil || len(recs) != 0 {
		t.Errorf("Records(nothing) = %v, %v; want none", recs, err)
	}
	if err := s.DeleteRecord(ctx, "policy", "b"); err != nil {
		t.Fatalf("DeleteRecord(policy/b): %v", err)
	}
	if err := s.DeleteRecord(ctx, "policy", "b"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteRecord(policy/b) again error = %v, want ErrNotFound", err)
	}
	put("b", `{"v":1}`, 0, 1, nil) // a deleted record starts again at version 1
	if recs, err := s.Records(ctx, "rule"); err != nil || len(recs) != 1 {
		t.Errorf("Records(rule) = %v, %v; want the one rule", recs, err)
	}
}

func testAuditLog(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	if log, err := s.AuditLog(ctx, 10); err != nil || len(log) != 0 {
		t.Fatalf("AuditLog on an empty store = %v, %v; want none", log, err)
	}
	start := time.Now()
	for i := range 5 {
		e := store.AuditEntry{
			At: start.Add(time.Duration(i) * time.Second), Actor: "U1", Action: "decide",
			Tool: "files__delete_file", CallID: fmt.Sprintf("run.%d", i), Fingerprint: "fp", Outcome: "approve",
		}
		if err := s.Audit(ctx, e); err != nil {
			t.Fatalf("Audit(%d): %v", i, err)
		}
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{3, []string{"run.4", "run.3", "run.2"}},
		{1, []string{"run.4"}},
		{10, []string{"run.4", "run.3", "run.2", "run.1", "run.0"}},
	}
	for _, tt := range tests {
		log, err := s.AuditLog(ctx, tt.limit)
		if err != nil {
			t.Fatalf("AuditLog(%d): %v", tt.limit, err)
		}
		var got []string
		for _, e := range log {
			got = append(got, e.CallID)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("AuditLog(%d) = %v, want %v", tt.limit, got, tt.want)
		}
	}
	log, _ := s.AuditLog(ctx, 1)
	if len(log) == 1 && (!log[0].At.Equal(start.Add(4*time.Second)) || log[0].Tool != "files__delete_file" || log[0].Outcome != "approve") {
		t.Errorf("AuditLog(1)[0] = %+v, want the fields written", log[0])
	}
}

// Audit entries older than the retention (store.DefaultAuditRetention
// unless the store was told otherwise) are trimmed and never listed, also
// after a restart; the fields of an entry come back as written.
func testAuditRetention(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	now := time.Now()
	old := store.AuditEntry{At: now.Add(-store.DefaultAuditRetention - time.Hour), Actor: "U1", Action: "decide", CallID: "old"}
	recent := store.AuditEntry{At: now, Actor: "U2", Action: "execute", Channel: "C1", Thread: "100.1", Tool: "deploy",
		CallID: "new", Fingerprint: "fp-edited", Decision: "edit", Outcome: "ok", Detail: "rule r1"}
	for _, e := range []store.AuditEntry{old, recent} {
		if err := s.Audit(ctx, e); err != nil {
			t.Fatalf("Audit(%s): %v", e.CallID, err)
		}
	}
	for _, when := range []string{"before", "after"} {
		if when == "after" {
			s = reopen()
		}
		log, err := s.AuditLog(ctx, 0)
		if err != nil {
			t.Fatalf("AuditLog %s a restart: %v", when, err)
		}
		if len(log) != 1 {
			t.Fatalf("AuditLog %s a restart = %+v, want only the recent entry", when, log)
		}
		got := log[0]
		got.At = got.At.Round(0)
		want := recent
		if !got.At.Equal(want.At) {
			t.Errorf("entry time %s a restart = %v, want %v", when, got.At, want.At)
		}
		got.At, want.At = time.Time{}, time.Time{}
		if got != want {
			t.Errorf("entry %s a restart = %+v, want %+v", when, got, want)
		}
	}
}

func testRecordsOf(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	for _, r := range []store.Record{
		{Kind: "a", ID: "2", Data: json.RawMessage(`{"n":2}`)},
		{Kind: "a", ID: "1", Data: json.RawMessage(`{"n":1}`)},
		{Kind: "b", ID: "x", Data: json.RawMessage(`{}`)},
	} {
		if _, err := s.PutRecord(ctx, r, -1); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RecordsOf(ctx, "a", "b", "empty")
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"a", "b", "empty"} {
		want, err := s.Records(ctx, kind)
		if err != nil {
			t.Fatal(err)
		}
		if len(got[kind]) != len(want) {
			t.Fatalf("RecordsOf kind %s: got %d records, want %d", kind, len(got[kind]), len(want))
		}
		for i := range want {
			if got[kind][i].ID != want[i].ID || got[kind][i].Version != want[i].Version || string(got[kind][i].Data) != string(want[i].Data) {
				t.Errorf("RecordsOf kind %s record %d: got %+v, want %+v", kind, i, got[kind][i], want[i])
			}
		}
	}
	if len(got["a"]) == 2 {
		if ids := []string{got["a"][0].ID, got["a"][1].ID}; ids[0] != "1" || ids[1] != "2" {
			t.Errorf("RecordsOf kind a: got ids %v, want sorted [1 2]", ids)
		}
	}
}

// VersionedRecords lists the records as RecordsOf does, with the version
// a turn begun at the same time reads, which a change of records moves.
func testVersionedRecords(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv := "C9:" + store.NewRunID()
	versions := func() (int64, int64, map[string][]store.Record) {
		t.Helper()
		recs, v, err := s.VersionedRecords(ctx, "a", "empty")
		if err != nil {
			t.Fatalf("VersionedRecords: %v", err)
		}
		b, err := s.BeginTurn(ctx, conv, "a", time.Minute, "a")
		if err != nil || !b.Acquired {
			t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
		}
		return v, b.RecordsVersion, recs
	}
	v1, begun1, recs := versions()
	if _, listed := recs["empty"]; v1 != begun1 || len(recs["a"]) != 0 || !listed {
		t.Fatalf("VersionedRecords before any record = %v at version %d, want none at %d (BeginTurn's)", recs, v1, begun1)
	}
	if _, err := s.PutRecord(ctx, store.Record{Kind: "a", ID: "1", Data: json.RawMessage(`{"n":1}`)}, -1); err != nil {
		t.Fatal(err)
	}
	v2, begun2, recs := versions()
	if v2 != begun2 || len(recs["a"]) != 1 || recs["a"][0].ID != "1" || string(recs["a"][0].Data) != `{"n":1}` {
		t.Fatalf("VersionedRecords after a put = %+v at version %d, want record 1 at %d (BeginTurn's)", recs, v2, begun2)
	}
	if v1 != 0 && v2 == v1 {
		t.Errorf("VersionedRecords version %d before and after a put, want it changed", v1)
	}
}
