package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// audited is the part of the contract about decisions written with their
// effects, so that a click is decided, audited and, when it completes its
// step, listed for takeover in one step.
type audited interface {
	// DecideAudited is Decide, and, in the same atomic step when the
	// decision is recorded, its effects (see store.Effects): fx.Audit
	// appended to the audit log, and fx.Unanswered listed as
	// MarkUnanswered lists it, at d.At, when complete. A refusal writes
	// none of them. A store that must write the effects in a second step
	// returns the recorded decision with an error wrapping
	// store.ErrEffects when that step failed, and takes it again when the
	// same decision is sent again (see store.Decision.Attempt), its audit
	// entry appended once. With fx.IfRecords, a store that keeps the
	// records' version refuses the decision with store.ErrStale, writing
	// nothing and returning a zero Call, when the records are at another
	// version (see store.Condition); one that keeps none refuses it so
	// whatever the version.
	DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (c store.Call, complete bool, err error)
	// ApproveAudited is Approve with effects as DecideAudited writes them,
	// for a counted approval as for one that decides the call; the audit
	// entry is store.ApprovalAudit(fx.Audit, approvals counted, need), at
	// a.At when its At is zero. Without edit, the approvals of the
	// approvers in drop (counted before, no longer valid) are taken out of
	// Approvals, in the same step, before a is counted. With
	// fx.IfRecords it is conditional as DecideAudited is, and on
	// fx.IfApprovers and fx.IfEdited too: when the records are at that
	// version but the call holds other approvals, or an edit where none
	// was judged (or none where one was), it is refused with
	// store.ErrStale, writing nothing, and returns the call as stored.
	ApproveAudited(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (c store.Call, complete bool, err error)
	// BeginResume takes, in one atomic step, what the resume of a run
	// needs before it starts: the lease on the key r.Lease for r.Owner
	// (taken or renewed as AcquireLease does; an empty lease means the
	// caller holds it already) and the run's resume claim (as
	// ClaimResume takes it), both for r.TTL, and loads the run, its calls
	// and conversation (the run's, which the caller names in
	// r.Conversation). It takes nothing and returns the Run with Claimed
	// false when the run is finished, has a pending call or a live claim
	// (except the claim of the attempt named by r.Nonce, asked again: see
	// store.ResumeBegin), and with Busy set when another owner holds the
	// lease (a store may report Busy before it looks at the run). When it
	// claims, it also lists the records of r.Kinds, as RecordsOf lists
	// them, in Records (nil if they cannot be read: the rest stands), and,
	// unless a call of the run is cancelled, it takes the first call (in
	// CallIDs order) that is decided with a decision whose Kind is one of
	// r.Start: if that call is not executing yet, it marks it executing,
	// as BeginExecution does with r.Nonce as the attempt (see
	// AbandonExecution), and names it in Started. store.ErrNotFound
	// for an unknown run.
	BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error)
	// DecideBegin is DecideAudited and, when the decision is recorded and
	// completes its step, BeginResume(the call's run, r) in the same atomic
	// step (a store may take the second step right after the first, as
	// long as it begins only the resume of the step this decision
	// completed). The ResumeStart is BeginResume's; it is zero, and
	// nothing is taken, when the decision is refused or leaves calls
	// pending, and a zero one may also come back from a store that could
	// not read it (the caller then begins the resume itself). It is
	// conditional on fx.Condition as DecideAudited is.
	DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (c store.Call, complete bool, rs store.ResumeStart, err error)
	// ApproveBegin is ApproveAudited and, when the approval decides the
	// call and completes its step, BeginResume(the call's run, r), as
	// DecideBegin is DecideAudited and BeginResume; a counted approval
	// begins nothing. It is conditional on fx.Condition as ApproveAudited
	// is.
	ApproveBegin(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (c store.Call, complete bool, rs store.ResumeStart, err error)
	// GetCallWith is GetCall and RecordsOf(kinds) in one round trip or
	// transaction, with the version of the records as they were read (see
	// store.Begun.RecordsVersion), on which a decision judged by them is
	// made conditional (store.Condition); store.ErrNotFound for an unknown
	// call. The records are nil, and the version zero, if they cannot be
	// read; the call stands.
	GetCallWith(ctx context.Context, callID string, kinds ...string) (store.Call, map[string][]store.Record, int64, error)
}

// auditedEffects are the effects of a decision on c in its conversation.
func auditedEffects(c store.Call, actor string) store.Effects {
	return store.Effects{
		Audit:      store.AuditEntry{Actor: actor, Action: "decide", Channel: c.Channel, Thread: c.Conversation, Tool: c.Tool, CallID: c.ID, Fingerprint: c.Fingerprint, Decision: "approve"},
		Unanswered: c.Conversation,
	}
}

// auditedCalls returns the call ids and outcomes of the audit log, oldest
// first.
func auditedCalls(t *testing.T, s Store) []string {
	t.Helper()
	log, err := s.AuditLog(t.Context(), 0)
	if err != nil {
		t.Fatalf("AuditLog: %v", err)
	}
	var out []string
	for _, e := range slices.Backward(log) {
		out = append(out, e.CallID+" "+e.Outcome+" "+e.Detail)
	}
	return out
}

// createInThread saves a fixture run of n calls in a thread of its own,
// as the audit and the unanswered index know conversations.
func createInThread(t *testing.T, s Store, n int) []store.Call {
	t.Helper()
	_, calls := create(t, s, n, func(r *store.Run, cs []store.Call) {
		r.Conversation = "T1/C1/" + r.ID
		for i := range cs {
			cs[i].Conversation = r.Conversation
		}
	})
	return calls
}

func testDecideAudited(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	calls := createInThread(t, s, 2)
	conv := calls[0].Conversation
	d := approve("U_APPROVER")
	fx := auditedEffects(calls[0], "U_APPROVER")
	fx.Audit.Outcome = "recorded"
	if _, _, err := s.DecideAudited(ctx, calls[0].ID, "other", d, fx); !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Fatalf("DecideAudited with another fingerprint: error = %v, want ErrFingerprintMismatch", err)
	}
	if got := auditedCalls(t, s); len(got) != 0 {
		t.Errorf("audit log after a refused DecideAudited = %q, want nothing", got)
	}
	got, complete, err := s.DecideAudited(ctx, calls[0].ID, calls[0].Fingerprint, d, fx)
	if err != nil || complete || got.Status != store.Decided {
		t.Fatalf("DecideAudited(%s) = %q, complete %v, %v; want decided, false, nil", calls[0].ID, got.Status, complete, err)
	}
	if got := unanswered(t, s, time.Now().Add(time.Minute)); len(got) != 0 {
		t.Errorf("Unanswered after a decision that left a call pending = %q, want nothing", got)
	}
	if _, _, err := s.DecideAudited(ctx, calls[0].ID, calls[0].Fingerprint, d, fx); !errors.Is(err, store.ErrAlreadyDecided) {
		t.Fatalf("DecideAudited(%s) again: error = %v, want ErrAlreadyDecided", calls[0].ID, err)
	}
	fx = auditedEffects(calls[1], "U_APPROVER")
	fx.Audit.Outcome = "recorded"
	if _, complete, err = s.DecideAudited(ctx, calls[1].ID, calls[1].Fingerprint, d, fx); err != nil || !complete {
		t.Fatalf("DecideAudited(%s) = complete %v, %v; want true, nil", calls[1].ID, complete, err)
	}
	s = reopen()
	want := []string{calls[0].ID + " recorded ", calls[1].ID + " recorded "}
	if got := auditedCalls(t, s); !slices.Equal(got, want) {
		t.Errorf("audit log after two decisions = %q, want %q", got, want)
	}
	if log, _ := s.AuditLog(ctx, 1); len(log) == 1 && (!log[0].At.Equal(d.At) || log[0].Thread != conv || log[0].Fingerprint != calls[1].Fingerprint) {
		t.Errorf("audit entry = %+v, want the fields written, at the decision's time", log[0])
	}
	if got := unanswered(t, s, d.At.Add(-time.Second)); len(got) != 0 {
		t.Errorf("Unanswered(before the decision) = %q, want nothing", got)
	}
	if got := unanswered(t, s, d.At.Add(time.Second)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered after the decision that completed the step = %q, want [%s]", got, conv)
	}
}

func testApproveAudited(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	calls := createInThread(t, s, 1)
	c := calls[0]
	first := approval("U_A")
	if _, _, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, first, nil, nil, 2, approve("U_A"), auditedEffects(c, "U_A")); err != nil {
		t.Fatalf("first ApproveAudited: %v", err)
	}
	if _, _, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, nil, 2, approve("U_A"), auditedEffects(c, "U_A")); !errors.Is(err, store.ErrDuplicateApproval) {
		t.Fatalf("ApproveAudited by the same approver: error = %v, want ErrDuplicateApproval", err)
	}
	if got := unanswered(t, s, time.Now().Add(time.Minute)); len(got) != 0 {
		t.Errorf("Unanswered after a counted approval = %q, want nothing", got)
	}
	second := approval("U_B")
	_, complete, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, second, nil, nil, 2, approve("U_B"), auditedEffects(c, "U_B"))
	if err != nil || !complete {
		t.Fatalf("second ApproveAudited = complete %v, %v; want true, nil", complete, err)
	}
	want := []string{c.ID + " counted 1 of 2 approvals", c.ID + " recorded 2 of 2 approvals"}
	if got := auditedCalls(t, s); !slices.Equal(got, want) {
		t.Errorf("audit log after two approvals = %q, want %q", got, want)
	}
	log, _ := s.AuditLog(ctx, 2)
	if len(log) == 2 && (log[0].Actor != "U_B" || !log[0].At.Equal(second.At) || !log[1].At.Equal(first.At) || log[1].Tool != c.Tool) {
		t.Errorf("audit entries = %+v, want each approver's, at its approval's time", log)
	}
	if got := unanswered(t, s, time.Now().Add(time.Minute)); !slices.Equal(got, []string{c.Conversation}) {
		t.Errorf("Unanswered after the approval that completed the step = %q, want [%s]", got, c.Conversation)
	}
}

// ApproveAudited drops the approvals it is told no longer count in the
// step that counts the new one: the count, the audit's "n of need" and the
// stored approvals leave them out.
func testApproveDrops(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	calls := createInThread(t, s, 1)
	c := calls[0]
	for _, who := range []string{"U_A", "U_B"} {
		if _, _, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval(who), nil, nil, 3, approve(who), auditedEffects(c, who)); err != nil {
			t.Fatalf("ApproveAudited by %s: %v", who, err)
		}
	}
	got, complete, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_C"), []string{"U_A", "U_NONE"}, nil, 3, approve("U_C"), auditedEffects(c, "U_C"))
	if err != nil || complete || got.Status != store.Pending {
		t.Fatalf("ApproveAudited by U_C dropping U_A = %s, complete %v, %v; want pending: 2 of 3", got.Status, complete, err)
	}
	if who := approvers(got); !slices.Equal(who, []string{"U_B", "U_C"}) {
		t.Errorf("approvals after dropping U_A = %v, want [U_B U_C]", who)
	}
	if stored, err := s.GetCall(ctx, c.ID); err != nil || !slices.Equal(approvers(stored), []string{"U_B", "U_C"}) {
		t.Errorf("stored approvals = %v, %v; want [U_B U_C]", approvers(stored), err)
	}
	// U_A approves again and completes the count.
	got, complete, err = s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, nil, 3, approve("U_A"), auditedEffects(c, "U_A"))
	if err != nil || !complete || got.Status != store.Decided {
		t.Fatalf("ApproveAudited by U_A again = %s, complete %v, %v; want decided", got.Status, complete, err)
	}
	want := []string{c.ID + " counted 1 of 3 approvals", c.ID + " counted 2 of 3 approvals", c.ID + " counted 2 of 3 approvals", c.ID + " recorded 3 of 3 approvals"}
	if got := auditedCalls(t, s); !slices.Equal(got, want) {
		t.Errorf("audit log = %q, want %q", got, want)
	}
}

// DecideBegin begins the resume of the step its decision completes, and
// of no other: a decision that leaves a call pending takes nothing, a
// refused decision takes nothing even when the step is complete, and
// another owner's lease is left alone with the decision recorded.
func testDecideBegin(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)
	lease := "conv:" + r.Conversation + "/" + r.ID
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Kinds: []string{"rules"}}
	putRecord(t, s, "rules", "r1")
	_, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, calls[0].Fingerprint, approve("U1"), auditedEffects(calls[0], "U1"), rb)
	if err != nil || complete || rs.Claimed || rs.Busy {
		t.Fatalf("DecideBegin of the first of two calls = complete %v, claimed %v, busy %v, %v; want recorded, nothing begun", complete, rs.Claimed, rs.Busy, err)
	}
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by b after a decision that left a call pending = %v, %v; want true: nothing was taken", ok, err)
	}
	// b holds the lease: the last decision is recorded, the resume busy.
	c, complete, rs, err := s.DecideBegin(ctx, calls[1].ID, calls[1].Fingerprint, approve("U2"), auditedEffects(calls[1], "U2"), rb)
	if err != nil || !complete || rs.Claimed || !rs.Busy || c.Status != store.Decided {
		t.Fatalf("DecideBegin of the last call while b holds the lease = %s, complete %v, claimed %v, busy %v, %v; want decided, complete, busy", c.Status, complete, rs.Claimed, rs.Busy, err)
	}
	if !stalled(t, s, r.ID) {
		t.Errorf("Stalled does not list %s after a busy DecideBegin: it took the claim", r.ID)
	}
	if err := s.ReleaseLease(ctx, lease, "b"); err != nil {
		t.Fatal(err)
	}
	// A second decision on the decided call is refused and begins nothing,
	// although the step is complete and its resume unclaimed.
	if _, _, rs, err := s.DecideBegin(ctx, calls[1].ID, calls[1].Fingerprint, approve("U3"), auditedEffects(calls[1], "U3"), rb); !errors.Is(err, store.ErrAlreadyDecided) || rs.Claimed {
		t.Fatalf("DecideBegin of a decided call = claimed %v, %v; want ErrAlreadyDecided, nothing claimed", rs.Claimed, err)
	}
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease after a refused DecideBegin = %v, %v; want true", ok, err)
	}
	if err := s.ReleaseLease(ctx, lease, "b"); err != nil {
		t.Fatal(err)
	}

	// A run whose one call's decision completes it: the resume is begun
	// with the decision, as BeginResume begins it.
	r2, calls2 := create(t, s, 1, nil)
	lease2 := "conv:" + r2.Conversation + "/" + r2.ID
	rb2 := rb
	rb2.Lease = lease2
	_, complete, rs, err = s.DecideBegin(ctx, calls2[0].ID, calls2[0].Fingerprint, approve("U1"), auditedEffects(calls2[0], "U1"), rb2)
	if err != nil || !complete || !rs.Claimed || rs.Busy {
		t.Fatalf("DecideBegin of a run's one call = complete %v, claimed %v, busy %v, %v; want complete and claimed", complete, rs.Claimed, rs.Busy, err)
	}
	if rs.Run.ID != r2.ID || !slices.Equal(callIDs(rs.Calls), r2.CallIDs) || rs.Calls[0].Status != store.Decided || rs.Started != calls2[0].ID {
		t.Errorf("DecideBegin resume = run %s, calls %v (first %s), started %q; want %s, %v decided, %s started", rs.Run.ID, callIDs(rs.Calls), rs.Calls[0].Status, rs.Started, r2.ID, r2.CallIDs, calls2[0].ID)
	}
	if !rs.Found || rs.Conversation.Key != r2.Conversation {
		t.Errorf("DecideBegin conversation = %+v (found %v), want %s", rs.Conversation, rs.Found, r2.Conversation)
	}
	if got := rs.Records["rules"]; len(got) != 1 || got[0].ID != "r1" {
		t.Errorf("DecideBegin records = %+v, want rules [r1]", rs.Records)
	}
	if ok, err := s.AcquireLease(ctx, lease2, "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after a's DecideBegin = %v, %v; want false: a holds the lease", ok, err)
	}
	if got, err := s.BeginResume(ctx, r2.ID, store.ResumeBegin{Conversation: r2.Conversation, Owner: "b", TTL: time.Minute}); err != nil || got.Claimed {
		t.Errorf("BeginResume by b after a's DecideBegin = claimed %v, %v; want not claimed: a holds the claim", got.Claimed, err)
	}
	if got, err := s.GetCall(ctx, calls2[0].ID); err != nil || !got.Executing {
		t.Errorf("the started call after DecideBegin = executing %v, %v; want marked executing", got.Executing, err)
	}
	_, calls3 := create(t, s, 1, nil)
	if _, _, _, err := s.DecideBegin(ctx, calls3[0].ID, calls3[0].Fingerprint, approve("U1"), store.Effects{}, store.ResumeBegin{}); err == nil {
		t.Error("DecideBegin with a zero resume ttl succeeded, want an error")
	}
	if got, err := s.GetCall(ctx, calls3[0].ID); err != nil || got.Status != store.Pending {
		t.Errorf("the call after a DecideBegin with a zero ttl = %s, %v; want still pending", got.Status, err)
	}
}

// A store that keeps a version of the records changes it with every
// record put or deleted, and a decision conditional on a version is
// refused, writing nothing, once the records changed; a store that keeps
// none refuses every conditional decision.
func testDecideIfRecords(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv := "C9:" + store.NewRunID()
	version := func() int64 {
		t.Helper()
		b, err := s.BeginTurn(ctx, conv, "a", time.Minute, "rules")
		if err != nil || !b.Acquired {
			t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
		}
		return b.RecordsVersion
	}
	v1 := version()
	putRecord(t, s, "rules", "r1")
	v2 := version()
	if err := s.DeleteRecord(ctx, "rules", "r1"); err != nil {
		t.Fatalf("DeleteRecord: %v", err)
	}
	v3 := version()
	if _, _, b, err := s.AcceptBegin(ctx, conv, inbound("E1", "M1", "hi", time.Now()), false, "a", time.Minute, "rules"); err != nil || b.RecordsVersion != v3 {
		t.Errorf("AcceptBegin records version = %d, %v; want %d, as BeginTurn's", b.RecordsVersion, err, v3)
	}
	keeps := v1 != 0
	if keeps && (v2 == v1 || v3 == v2 || v3 == v1) {
		t.Fatalf("records versions %d, %d, %d around a put and a delete; want each different", v1, v2, v3)
	}
	if err := s.DeleteRecord(ctx, "rules", "absent"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteRecord of an absent record = %v, want ErrNotFound", err)
	}
	if v := version(); v != v3 {
		t.Errorf("records version after deleting an absent record = %d, want %d: nothing changed", v, v3)
	}
	if !keeps && (v2 != 0 || v3 != 0) {
		t.Fatalf("records versions %d, %d, %d; want all zero or none zero", v1, v2, v3)
	}
	if _, _, v, err := s.GetCallWith(ctx, store.CallID(store.NewRunID(), 0), "rules"); !errors.Is(err, store.ErrNotFound) || v != 0 {
		t.Errorf("GetCallWith of an unknown call = version %d, %v; want ErrNotFound", v, err)
	}
	r, calls := create(t, s, 1, nil)
	if _, _, v, err := s.GetCallWith(ctx, calls[0].ID, "rules"); err != nil || v != v3 {
		t.Errorf("GetCallWith records version = %d, %v; want %d, as BeginTurn's", v, err, v3)
	}
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: "conv:" + r.Conversation + "/" + r.ID, Owner: "a", TTL: time.Minute}
	fx := auditedEffects(calls[0], "U1")
	fx.IfRecords = v2 // stale, or kept by no one
	if !keeps {
		fx.IfRecords = 1
	}
	if _, _, _, err := s.DecideBegin(ctx, calls[0].ID, calls[0].Fingerprint, approve("U1"), fx, rb); !errors.Is(err, store.ErrStale) {
		t.Fatalf("DecideBegin on records of version %d, now %d: error = %v, want ErrStale", fx.IfRecords, v3, err)
	}
	if c, _, err := s.DecideAudited(ctx, calls[0].ID, calls[0].Fingerprint, approve("U1"), fx); !errors.Is(err, store.ErrStale) || c.ID != "" {
		t.Fatalf("DecideAudited on records of version %d, now %d = call %q, %v; want ErrStale and no call", fx.IfRecords, v3, c.ID, err)
	}
	if c, err := s.GetCall(ctx, calls[0].ID); err != nil || c.Status != store.Pending {
		t.Fatalf("the call after a stale decision = %s, %v; want still pending", c.Status, err)
	}
	if log := auditedCalls(t, s); len(log) != 0 {
		t.Errorf("audit log after stale decisions = %q, want empty: nothing written", log)
	}
	if !keeps {
		return
	}
	fx.IfRecords = v3
	if _, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, calls[0].Fingerprint, approve("U1"), fx, rb); err != nil || !complete || !rs.Claimed {
		t.Errorf("DecideBegin on the records' version = complete %v, claimed %v, %v; want both", complete, rs.Claimed, err)
	}
	// Without a resume to begin.
	_, calls = create(t, s, 1, nil)
	fx = auditedEffects(calls[0], "U1")
	fx.IfRecords = v3
	if c, complete, err := s.DecideAudited(ctx, calls[0].ID, calls[0].Fingerprint, approve("U1"), fx); err != nil || !complete || c.Status != store.Decided {
		t.Errorf("DecideAudited on the records' version = %s, complete %v, %v; want decided, complete", c.Status, complete, err)
	}
	// Judged with no edit, on a call that has one since: an edit away
	// and back to the arguments it paused with, which keeps their
	// fingerprint but needs two approvals.
	r, calls = create(t, s, 1, nil)
	c := calls[0]
	away := &store.Proposal{Fingerprint: "fp-away", Edit: store.Decision{Kind: "edit", Decider: "U_A", At: time.Now(), Args: json.RawMessage(`{"path":"/srv/away"}`)}}
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), away, 2, approve("U_A")); err != nil {
		t.Fatalf("Approve(%s) with an edit: %v", c.ID, err)
	}
	back := &store.Proposal{Fingerprint: c.Fingerprint, Edit: store.Decision{Kind: "edit", Decider: "U_B", At: time.Now(), Args: c.Args}}
	if _, _, err := s.Approve(ctx, c.ID, "fp-away", approval("U_B"), back, 2, approve("U_B")); err != nil {
		t.Fatalf("Approve(%s) with an edit back: %v", c.ID, err)
	}
	rb = store.ResumeBegin{Conversation: r.Conversation, Lease: "conv:" + r.Conversation + "/" + r.ID, Owner: "a", TTL: time.Minute}
	fx = auditedEffects(c, "U_B")
	fx.IfRecords = v3
	if got, _, _, err := s.DecideBegin(ctx, c.ID, c.Fingerprint, approve("U_B"), fx, rb); !errors.Is(err, store.ErrStale) || got.Edit == nil || fmt.Sprint(approvers(got)) != "[U_B]" {
		t.Errorf("DecideBegin judged with no edit, on a call with one = edit %v, approvals %v, %v; want ErrStale and the call as stored", got.Edit != nil, approvers(got), err)
	}
	if got, _, err := s.DecideAudited(ctx, c.ID, c.Fingerprint, approve("U_B"), fx); !errors.Is(err, store.ErrStale) || got.Edit == nil {
		t.Errorf("DecideAudited judged with no edit, on a call with one = edit %v, %v; want ErrStale and the call as stored", got.Edit != nil, err)
	}
	if got := wantStatus(t, s, c.ID, store.Pending); fmt.Sprint(approvers(got)) != "[U_B]" {
		t.Errorf("approvals after stale decisions = %v, want [U_B]: nothing written", approvers(got))
	}
	fx.IfApprovers, fx.IfEdited = []string{"U_B"}, true
	if got, complete, err := s.DecideAudited(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "reject", Decider: "U_C", At: time.Now(), Reason: "no"}, fx); err != nil || !complete || got.Status != store.Decided {
		t.Errorf("DecideAudited judged with the edit and approvals held = %s, complete %v, %v; want decided", got.Status, complete, err)
	}
}

// A decision or an approval conditional on the approvals and edit it was
// judged with, with no version of the records (Condition.IfHeld), as a
// store that keeps none (Redis Cluster) is sent them: refused with
// ErrStale, writing nothing and returning the call as stored, when the
// call holds others; made when it holds those, on every store.
func testDecideIfHeld(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	// An edit away and back to the arguments the call paused with keeps
	// their fingerprint, with U_B's approval counted and two needed.
	r, calls := create(t, s, 1, nil)
	c := calls[0]
	away := &store.Proposal{Fingerprint: "fp-away", Edit: store.Decision{Kind: "edit", Decider: "U_A", At: time.Now(), Args: json.RawMessage(`{"path":"/srv/away"}`)}}
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), away, 2, approve("U_A")); err != nil {
		t.Fatalf("Approve(%s) with an edit: %v", c.ID, err)
	}
	back := &store.Proposal{Fingerprint: c.Fingerprint, Edit: store.Decision{Kind: "edit", Decider: "U_B", At: time.Now(), Args: c.Args}}
	if _, _, err := s.Approve(ctx, c.ID, "fp-away", approval("U_B"), back, 2, approve("U_B")); err != nil {
		t.Fatalf("Approve(%s) with an edit back: %v", c.ID, err)
	}
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: "conv:" + r.Conversation + "/" + r.ID, Owner: "a", TTL: time.Minute}
	fx := auditedEffects(c, "U_B")
	fx.IfHeld = true // judged from the call as paused: no approvals, no edit
	if got, _, _, err := s.DecideBegin(ctx, c.ID, c.Fingerprint, approve("U_B"), fx, rb); !errors.Is(err, store.ErrStale) || got.Edit == nil || fmt.Sprint(approvers(got)) != "[U_B]" {
		t.Errorf("DecideBegin judged with no edit, on a call with one = edit %v, approvals %v, %v; want ErrStale and the call as stored", got.Edit != nil, approvers(got), err)
	}
	if got, _, err := s.DecideAudited(ctx, c.ID, c.Fingerprint, approve("U_B"), fx); !errors.Is(err, store.ErrStale) || got.Edit == nil {
		t.Errorf("DecideAudited judged with no edit, on a call with one = edit %v, %v; want ErrStale and the call as stored", got.Edit != nil, err)
	}
	if got, _, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_C"), nil, nil, 1, approve("U_C"), fx); !errors.Is(err, store.ErrStale) || got.Edit == nil {
		t.Errorf("ApproveAudited judged with no edit and one approval needed, on a call with an edit = edit %v, %v; want ErrStale and the call as stored", got.Edit != nil, err)
	}
	if got, _, _, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_C"), nil, nil, 1, approve("U_C"), fx, rb); !errors.Is(err, store.ErrStale) || got.Edit == nil {
		t.Errorf("ApproveBegin judged with no edit and one approval needed, on a call with an edit = edit %v, %v; want ErrStale and the call as stored", got.Edit != nil, err)
	}
	if got := wantStatus(t, s, c.ID, store.Pending); fmt.Sprint(approvers(got)) != "[U_B]" {
		t.Errorf("approvals after stale decisions = %v, want [U_B]: nothing written", approvers(got))
	}
	if log := auditedCalls(t, s); len(log) != 0 {
		t.Errorf("audit log after stale decisions = %q, want empty: nothing written", log)
	}
	fx.IfApprovers, fx.IfEdited = []string{"U_B"}, true
	if got, complete, _, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_C"), nil, nil, 2, approve("U_C"), fx, rb); err != nil || !complete || got.Status != store.Decided {
		t.Errorf("ApproveBegin judged with the edit and approvals held = %s, complete %v, %v; want decided", got.Status, complete, err)
	}
	// A decision, the same way.
	_, calls = create(t, s, 1, nil)
	c = calls[0]
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, 2, approve("U_A")); err != nil {
		t.Fatalf("Approve(%s): %v", c.ID, err)
	}
	fx = auditedEffects(c, "U_C")
	fx.IfHeld = true
	if _, _, err := s.DecideAudited(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "reject", Decider: "U_C", At: time.Now(), Reason: "no"}, fx); !errors.Is(err, store.ErrStale) {
		t.Errorf("DecideAudited judged with no approvals, on a call with one = %v; want ErrStale", err)
	}
	fx.IfApprovers = []string{"U_A"}
	if got, complete, err := s.DecideAudited(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "reject", Decider: "U_C", At: time.Now(), Reason: "no"}, fx); err != nil || !complete || got.Status != store.Decided {
		t.Errorf("DecideAudited judged with the approvals held = %s, complete %v, %v; want decided", got.Status, complete, err)
	}
}

// A decision made on records of a version they no longer have
// (Condition.IfRecords) is refused as any decision is when its call is
// decided or unknown: ErrAlreadyDecided with the call as stored, which
// says who decided, or ErrNotFound; not ErrStale, which would have the
// decider judged again on the new records for a decision that cannot be
// made.
func testDecideIfRecordsOfADecidedCall(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 1, nil)
	b, err := s.BeginTurn(ctx, r.Conversation, "a", time.Minute, "rules")
	if err != nil || !b.Acquired {
		t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
	}
	if b.RecordsVersion == 0 {
		return // a store that keeps no version refuses every such decision
	}
	putRecord(t, s, "rules", "r1")
	if _, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, approve("U_FIRST")); err != nil {
		t.Fatalf("Decide(%s): %v", calls[0].ID, err)
	}
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: "conv:" + r.Conversation + "/" + r.ID, Owner: "a", TTL: time.Minute}
	fx := auditedEffects(calls[0], "U_SECOND")
	fx.IfRecords = b.RecordsVersion
	c, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, calls[0].Fingerprint, approve("U_SECOND"), fx, rb)
	if !errors.Is(err, store.ErrAlreadyDecided) || complete || rs.Claimed {
		t.Errorf("DecideBegin of a decided call on stale records = complete %v, claimed %v, %v; want ErrAlreadyDecided", complete, rs.Claimed, err)
	}
	if c.Decision == nil || c.Decision.Decider != "U_FIRST" {
		t.Errorf("DecideBegin of a decided call on stale records returned decision %+v, want the first decider U_FIRST", c.Decision)
	}
	for _, id := range []string{store.CallID(r.ID, 9), store.CallID(store.NewRunID(), 0)} {
		if _, _, _, err := s.DecideBegin(ctx, id, "fp", approve("U_SECOND"), store.Effects{Condition: fx.Condition}, rb); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DecideBegin of unknown call %s on stale records = %v, want ErrNotFound", id, err)
		}
	}
}

func testBeginResume(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 2, nil)
	lease := "conv:" + r.Conversation + "/" + r.ID
	if _, err := s.BeginResume(ctx, store.NewRunID(), store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BeginResume of an unknown run: error = %v, want ErrNotFound", err)
	}
	if rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute}); err != nil || rs.Claimed || rs.Busy || rs.Run.ID != r.ID {
		t.Fatalf("BeginResume with a call pending = %+v, %v; want the run, not claimed", rs, err)
	}
	decideAll(t, s, calls)
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease after a BeginResume that took nothing = %v, %v; want true, nil", ok, err)
	}
	if rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute}); err != nil || rs.Claimed || !rs.Busy {
		t.Fatalf("BeginResume while b holds the lease = claimed %v busy %v, %v; want busy", rs.Claimed, rs.Busy, err)
	}
	if !stalled(t, s, r.ID) {
		t.Errorf("Stalled does not list %s after a busy BeginResume: it took the claim", r.ID)
	}
	if err := s.ReleaseLease(ctx, lease, "b"); err != nil {
		t.Fatal(err)
	}
	putRecord(t, s, "rules", "r1")
	rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: short, Kinds: []string{"rules", "none"}})
	if err != nil || !rs.Claimed || rs.Busy {
		t.Fatalf("BeginResume of a decided run = claimed %v busy %v, %v; want claimed", rs.Claimed, rs.Busy, err)
	}
	if got := rs.Records; len(got) != 2 || len(got["rules"]) != 1 || got["rules"][0].ID != "r1" || len(got["none"]) != 0 {
		t.Errorf("BeginResume records = %+v, want rules [r1] and none []", got)
	}
	if got := callIDs(rs.Calls); !slices.Equal(got, r.CallIDs) || rs.Calls[0].Status != store.Decided || rs.Calls[0].Decision == nil {
		t.Errorf("BeginResume calls = %v (first %+v), want the decided calls %v", got, rs.Calls[0], r.CallIDs)
	}
	if !rs.Found || rs.Conversation.Key != r.Conversation || rs.Conversation.PausedRun != r.ID {
		t.Errorf("BeginResume conversation = %+v (found %v), want %s paused on %s", rs.Conversation, rs.Found, r.Conversation, r.ID)
	}
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after a's BeginResume = %v, %v; want false: a holds the lease", ok, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Minute); err != nil || ok {
		t.Errorf("ClaimResume by b after a's BeginResume = %v, %v; want false: a holds the claim", ok, err)
	}
	if ok, err := s.RenewClaim(ctx, r.ID, "a", short); err != nil || !ok {
		t.Errorf("RenewClaim by a after its BeginResume = %v, %v; want true", ok, err)
	}
	if rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute}); err != nil || rs.Claimed {
		t.Errorf("BeginResume again while the claim is live = claimed %v, %v; want false", rs.Claimed, err)
	}
	// Without a lease the caller holds it: the claim of a process that
	// died (its claim ran out) is taken over under the caller's lease.
	eventually(t, "BeginResume without a lease claims the run once a's claim ran out", func() (bool, error) {
		rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "c", TTL: time.Minute})
		return rs.Claimed && len(rs.Calls) == 2, err
	})
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "d", TTL: time.Minute}); err != nil || rs.Claimed || !rs.Run.Finished {
		t.Errorf("BeginResume of a finished run = claimed %v finished %v, %v; want finished, not claimed", rs.Claimed, rs.Run.Finished, err)
	}
	// With the lease held by another owner, a finished or unknown run is
	// answered as such, not as busy: there is no resume to wait for.
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by b = %v, %v", ok, err)
	}
	if rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "d", TTL: time.Minute}); err != nil || rs.Claimed || rs.Busy || !rs.Run.Finished {
		t.Errorf("BeginResume of a finished run while b holds the lease = claimed %v busy %v finished %v, %v; want finished", rs.Claimed, rs.Busy, rs.Run.Finished, err)
	}
	if _, err := s.BeginResume(ctx, store.NewRunID(), store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "d", TTL: time.Minute}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("BeginResume of an unknown run while b holds the lease: error = %v, want ErrNotFound", err)
	}
}

// BeginResume marks the first call whose decision is of a start kind as
// executing, once, and none in a cancelled run.
func testBeginResumeStarts(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	start := []string{"approve", "edit"}
	r, calls := create(t, s, 3, nil)
	decideAs(t, s, calls[0], "deny")
	decideAs(t, s, calls[1], "approve")
	decideAs(t, s, calls[2], "approve")
	rs, err := s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "a", TTL: short, Start: start, Nonce: "n1"})
	if err != nil || !rs.Claimed {
		t.Fatalf("BeginResume(%s) = claimed %v, %v; want claimed", r.ID, rs.Claimed, err)
	}
	if rs.Started != calls[1].ID {
		t.Errorf("BeginResume(%s).Started = %q, want %s: the first call approved", r.ID, rs.Started, calls[1].ID)
	}
	if rs.Calls[1].Executing {
		t.Errorf("BeginResume(%s) shows %s executing, want it as it was before the mark", r.ID, calls[1].ID)
	}
	s = reopen()
	for i, want := range []bool{false, true, false} {
		if c := getCall(t, s, calls[i].ID); c.Executing != want {
			t.Errorf("GetCall(%s).Executing = %v after BeginResume, want %v", calls[i].ID, c.Executing, want)
		}
	}
	if ok, err := s.BeginExecution(ctx, calls[1].ID, ""); err != nil || ok {
		t.Errorf("BeginExecution(%s) after BeginResume marked it = %v, %v; want false, nil", calls[1].ID, ok, err)
	}
	// Claimed again (the first claim ran out): the call to start is
	// executing already, so nothing is marked.
	eventually(t, "BeginResume claims the run again once the claim ran out", func() (bool, error) {
		rs, err = s.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: r.Conversation, Owner: "b", TTL: short, Start: start})
		return rs.Claimed, err
	})
	if rs.Started != "" || !rs.Calls[1].Executing {
		t.Errorf("BeginResume claimed again: Started = %q, calls[1] executing %v; want none marked and %s executing", rs.Started, rs.Calls[1].Executing, calls[1].ID)
	}
	if c := getCall(t, s, calls[2].ID); c.Executing {
		t.Errorf("GetCall(%s).Executing = true, want false: only the first call to start is marked", calls[2].ID)
	}
	// The mark is the first attempt's, named by its nonce, to take back.
	for _, attempt := range []string{"", "n2", "n1"} {
		if err := s.AbandonExecution(ctx, calls[1].ID, attempt); err != nil {
			t.Fatalf("AbandonExecution(%s, %q): %v", calls[1].ID, attempt, err)
		}
		if c := getCall(t, s, calls[1].ID); c.Executing != (attempt != "n1") {
			t.Errorf("GetCall(%s).Executing = %v after AbandonExecution(%q) of the mark n1 set, want %v", calls[1].ID, c.Executing, attempt, attempt != "n1")
		}
	}
	// A cancelled run starts nothing.
	r2, calls2 := create(t, s, 2, nil)
	decideAs(t, s, calls2[0], "approve")
	decideAs(t, s, calls2[1], "cancel")
	rs, err = s.BeginResume(ctx, r2.ID, store.ResumeBegin{Conversation: r2.Conversation, Owner: "a", TTL: time.Minute, Start: start})
	if err != nil || !rs.Claimed || rs.Started != "" {
		t.Errorf("BeginResume of a cancelled run = claimed %v started %q, %v; want claimed, nothing started", rs.Claimed, rs.Started, err)
	}
	if c := getCall(t, s, calls2[0].ID); c.Executing {
		t.Errorf("GetCall(%s).Executing = true in a cancelled run, want false", calls2[0].ID)
	}
	// Without start kinds nothing is marked.
	r3, calls3 := create(t, s, 1, nil)
	decideAs(t, s, calls3[0], "approve")
	if rs, err := s.BeginResume(ctx, r3.ID, store.ResumeBegin{Conversation: r3.Conversation, Owner: "a", TTL: time.Minute}); err != nil || !rs.Claimed || rs.Started != "" {
		t.Errorf("BeginResume with no start kinds = claimed %v started %q, %v; want claimed, nothing started", rs.Claimed, rs.Started, err)
	}
}

// A BeginResume asked again with its Nonce (its answer was lost) answers
// as it would have: claimed, the same call started and shown as it was
// before the mark, the lease kept. Another nonce, no nonce, or another
// owner with the same nonce gets nothing; nor does a DecideBegin's
// attempt asked again by another nonce.
func testBeginResumeAgain(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	start := []string{"approve"}
	r, calls := create(t, s, 2, nil)
	decideAs(t, s, calls[0], "deny")
	decideAs(t, s, calls[1], "approve")
	lease := store.TurnLease(r.Conversation)
	begin := store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: start, Nonce: "n1"}
	first, err := s.BeginResume(ctx, r.ID, begin)
	if err != nil || !first.Claimed || first.Started != calls[1].ID {
		t.Fatalf("BeginResume = claimed %v started %q, %v; want claimed, %s started", first.Claimed, first.Started, err, calls[1].ID)
	}
	s = reopen()
	for _, other := range []store.ResumeBegin{
		{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: start, Nonce: "n2"},
		{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: start},
		{Conversation: r.Conversation, Owner: "b", TTL: time.Minute, Start: start, Nonce: "n1"},
	} {
		if rs, err := s.BeginResume(ctx, r.ID, other); err != nil || rs.Claimed {
			t.Errorf("BeginResume(owner %s, nonce %q) of a run claimed by another attempt = claimed %v, %v; want not claimed", other.Owner, other.Nonce, rs.Claimed, err)
		}
	}
	again, err := s.BeginResume(ctx, r.ID, begin)
	if err != nil || !again.Claimed {
		t.Fatalf("BeginResume asked again with its nonce = claimed %v, %v; want claimed", again.Claimed, err)
	}
	if again.Started != calls[1].ID || again.Calls[1].Executing {
		t.Errorf("asked again: Started %q, %s executing %v; want %s started, shown as before the mark", again.Started, calls[1].ID, again.Calls[1].Executing, calls[1].ID)
	}
	if c := getCall(t, s, calls[1].ID); !c.Executing {
		t.Errorf("GetCall(%s).Executing = false after BeginResume marked it", calls[1].ID)
	}
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by another owner after the attempt was asked again = %v, %v; want the lease still a's", ok, err)
	}

	// The same for the resume a decision begins.
	r2, calls2 := create(t, s, 1, nil)
	got, complete, rs, err := s.DecideBegin(ctx, calls2[0].ID, calls2[0].Fingerprint, store.Decision{Kind: "approve", Decider: "U1", At: time.Now()}, store.Effects{},
		store.ResumeBegin{Conversation: r2.Conversation, Lease: store.TurnLease(r2.Conversation), Owner: "a", TTL: time.Minute, Start: start, Nonce: "d1"})
	if err != nil || !complete || !rs.Claimed || rs.Started != calls2[0].ID || got.Status != store.Decided {
		t.Fatalf("DecideBegin = %v complete %v claimed %v started %q, %v; want decided, claimed, %s started", got.Status, complete, rs.Claimed, rs.Started, err, calls2[0].ID)
	}
	if rs, err := s.BeginResume(ctx, r2.ID, store.ResumeBegin{Conversation: r2.Conversation, Lease: store.TurnLease(r2.Conversation), Owner: "a", TTL: time.Minute, Start: start, Nonce: "d2"}); err != nil || rs.Claimed {
		t.Errorf("BeginResume with another nonce after DecideBegin claimed = claimed %v, %v; want not claimed", rs.Claimed, err)
	}
	rs, err = s.BeginResume(ctx, r2.ID, store.ResumeBegin{Conversation: r2.Conversation, Lease: store.TurnLease(r2.Conversation), Owner: "a", TTL: time.Minute, Start: start, Nonce: "d1", Again: true})
	if err != nil || !rs.Claimed || rs.Started != calls2[0].ID || rs.Calls[0].Executing {
		t.Errorf("DecideBegin's attempt asked again = claimed %v started %q, %v; want claimed, %s started and shown as before the mark", rs.Claimed, rs.Started, err, calls2[0].ID)
	}

	// Again takes nothing when the attempt took no claim, and an
	// attempt's claim is not given again once another was taken, with a
	// nonce or without.
	r3, calls3 := create(t, s, 1, nil)
	decideAs(t, s, calls3[0], "approve")
	b3 := store.ResumeBegin{Conversation: r3.Conversation, Owner: "a", TTL: short, Start: start, Nonce: "e1"}
	again3 := b3
	again3.Again = true
	if rs, err := s.BeginResume(ctx, r3.ID, again3); err != nil || rs.Claimed {
		t.Errorf("Again for an attempt that took no claim = claimed %v, %v; want nothing taken", rs.Claimed, err)
	}
	if rs, err := s.BeginResume(ctx, r3.ID, b3); err != nil || !rs.Claimed || rs.Started != calls3[0].ID {
		t.Fatalf("BeginResume = claimed %v started %q, %v; want claimed, %s started", rs.Claimed, rs.Started, err, calls3[0].ID)
	}
	var fresh store.ResumeStart
	eventually(t, "the first claim runs out and owner a claims again with no nonce", func() (bool, error) {
		rs, err := s.BeginResume(ctx, r3.ID, store.ResumeBegin{Conversation: r3.Conversation, Owner: "a", TTL: time.Minute, Start: start})
		fresh = rs
		return rs.Claimed, err
	})
	if fresh.PriorNonce != "e1" || fresh.PriorStarted != calls3[0].ID {
		t.Errorf("the claim after the first = prior nonce %q, prior started %q; want e1 and %s", fresh.PriorNonce, fresh.PriorStarted, calls3[0].ID)
	}
	if rs, err := s.BeginResume(ctx, r3.ID, again3); err != nil || rs.Claimed {
		t.Errorf("the first attempt asked again after another claim = claimed %v started %q, %v; want nothing given", rs.Claimed, rs.Started, err)
	}
	// An attempt asked again is told of the claim before its own, as its
	// first sending was: a process whose attempt's answer was lost tells
	// from it whether a mark it finds is its own.
	r5, calls5 := create(t, s, 1, nil)
	decideAs(t, s, calls5[0], "approve")
	if rs, err := s.BeginResume(ctx, r5.ID, store.ResumeBegin{Conversation: r5.Conversation, Owner: "a", TTL: short, Start: start, Nonce: "h1"}); err != nil || !rs.Claimed || rs.Started != calls5[0].ID {
		t.Fatalf("BeginResume = claimed %v started %q, %v; want claimed, %s started", rs.Claimed, rs.Started, err, calls5[0].ID)
	}
	b5 := store.ResumeBegin{Conversation: r5.Conversation, Owner: "b", TTL: time.Minute, Nonce: "h2"}
	eventually(t, "the first claim runs out and owner b claims", func() (bool, error) {
		rs, err := s.BeginResume(ctx, r5.ID, b5)
		return rs.Claimed, err
	})
	for _, asked := range []bool{false, true} {
		b5.Again = asked
		rs, err := s.BeginResume(ctx, r5.ID, b5)
		if err != nil || !rs.Claimed || rs.PriorNonce != "h1" || rs.PriorStarted != calls5[0].ID {
			t.Errorf("b's attempt asked again (Again %v) = claimed %v, prior nonce %q, prior started %q, %v; want claimed, h1 and %s", asked, rs.Claimed, rs.PriorNonce, rs.PriorStarted, err, calls5[0].ID)
		}
	}
	r4, calls4 := create(t, s, 1, nil)
	decideAs(t, s, calls4[0], "approve")
	b4 := store.ResumeBegin{Conversation: r4.Conversation, Owner: "a", TTL: short, Start: start, Nonce: "f1"}
	if rs, err := s.BeginResume(ctx, r4.ID, b4); err != nil || !rs.Claimed {
		t.Fatalf("BeginResume = claimed %v, %v; want claimed", rs.Claimed, err)
	}
	eventually(t, "the claim runs out and ClaimResume takes another", func() (bool, error) {
		return s.ClaimResume(ctx, r4.ID, "a", time.Minute)
	})
	b4.Again = true
	if rs, err := s.BeginResume(ctx, r4.ID, b4); err != nil || rs.Claimed {
		t.Errorf("an attempt asked again after ClaimResume took the run = claimed %v, %v; want nothing given", rs.Claimed, err)
	}
}

// AbandonExecution takes the mark an attempt set back from a call with no
// result, and leaves one with a result, or marked by another attempt,
// alone.
func testAbandonExecution(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 2, nil)
	decideAll(t, s, calls)
	for _, c := range calls {
		if ok, err := s.BeginExecution(ctx, c.ID, "a1"); err != nil || !ok {
			t.Fatalf("BeginExecution(%s, a1) = %v, %v; want true, nil", c.ID, ok, err)
		}
	}
	if err := s.SaveResult(ctx, calls[1].ID, json.RawMessage(`{"ok":true}`), store.AuditEntry{}); err != nil {
		t.Fatalf("SaveResult(%s): %v", calls[1].ID, err)
	}
	for _, c := range calls {
		if err := s.AbandonExecution(ctx, c.ID, "a2"); err != nil {
			t.Fatalf("AbandonExecution(%s, a2): %v", c.ID, err)
		}
	}
	if c := getCall(t, s, calls[0].ID); !c.Executing {
		t.Errorf("GetCall(%s).Executing = false after AbandonExecution by another attempt, want the mark kept", calls[0].ID)
	}
	for _, c := range calls {
		if err := s.AbandonExecution(ctx, c.ID, "a1"); err != nil {
			t.Fatalf("AbandonExecution(%s, a1): %v", c.ID, err)
		}
	}
	if c := getCall(t, s, calls[0].ID); c.Executing {
		t.Errorf("GetCall(%s).Executing = true after AbandonExecution, want false", calls[0].ID)
	}
	if c := getCall(t, s, calls[1].ID); !c.Executing || len(c.Result) == 0 {
		t.Errorf("GetCall(%s) = executing %v result %s after AbandonExecution, want its saved result kept", calls[1].ID, c.Executing, c.Result)
	}
	if ok, err := s.BeginExecution(ctx, calls[0].ID, ""); err != nil || !ok {
		t.Errorf("BeginExecution(%s) after AbandonExecution = %v, %v; want true, nil", calls[0].ID, ok, err)
	}
	// A mark made for no attempt is taken back by none.
	if err := s.AbandonExecution(ctx, calls[0].ID, ""); err != nil {
		t.Fatal(err)
	}
	if c := getCall(t, s, calls[0].ID); !c.Executing {
		t.Errorf("GetCall(%s).Executing = false after AbandonExecution naming no attempt, want the mark kept", calls[0].ID)
	}
	if err := s.AbandonExecution(ctx, store.CallID(store.NewRunID(), 0), "a1"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("AbandonExecution(unknown) = %v, want ErrNotFound", err)
	}
}

// decideAs decides c with a decision of kind.
func decideAs(t *testing.T, s Store, c store.Call, kind string) {
	t.Helper()
	if _, _, err := s.Decide(t.Context(), c.ID, c.Fingerprint, store.Decision{Kind: kind, Decider: "U_APPROVER", At: time.Now()}); err != nil {
		t.Fatalf("Decide(%s, %s): %v", c.ID, kind, err)
	}
}

func getCall(t *testing.T, s Store, id string) store.Call {
	t.Helper()
	c, err := s.GetCall(t.Context(), id)
	if err != nil {
		t.Fatalf("GetCall(%s): %v", id, err)
	}
	return c
}

// putRecord stores a record of kind with id.
func putRecord(t *testing.T, s Store, kind, id string) {
	t.Helper()
	if _, err := s.PutRecord(t.Context(), store.Record{Kind: kind, ID: id, Data: []byte(`{"n":1}`)}, -1); err != nil {
		t.Fatalf("PutRecord(%s/%s): %v", kind, id, err)
	}
}

func testGetCallWith(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 1, nil)
	putRecord(t, s, "rules", "r1")
	putRecord(t, s, "rules", "r2")
	c, recs, _, err := s.GetCallWith(ctx, calls[0].ID, "rules", "none")
	if err != nil {
		t.Fatalf("GetCallWith(%s): %v", calls[0].ID, err)
	}
	if c.ID != calls[0].ID || c.Fingerprint != calls[0].Fingerprint || c.Status != store.Pending {
		t.Errorf("GetCallWith call = %+v, want %s pending", c, calls[0].ID)
	}
	if len(recs) != 2 || len(recs["rules"]) != 2 || recs["rules"][0].ID != "r1" || recs["rules"][1].Version != 1 || len(recs["none"]) != 0 {
		t.Errorf("GetCallWith records = %+v, want rules [r1 r2] and none []", recs)
	}
	if _, _, _, err := s.GetCallWith(ctx, store.CallID(store.NewRunID(), 0), "rules"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCallWith of an unknown call: error = %v, want ErrNotFound", err)
	}
}

// BeginResume of a run the store does not know is ErrNotFound and takes
// nothing, not even the lease it was asked to take, whether the attempt is
// named or not.
func testBeginResumeOfAnUnknownRun(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	for _, nonce := range []string{"", "n1"} {
		conv := "C1:" + store.NewRunID()
		key := store.TurnLease(conv)
		_, err := s.BeginResume(ctx, store.NewRunID(), store.ResumeBegin{Conversation: conv, Lease: key, Owner: "a", TTL: time.Minute, Nonce: nonce})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("BeginResume(unknown run, nonce %q) = %v, want ErrNotFound", nonce, err)
		}
		if ok, err := s.AcquireLease(ctx, key, "b", time.Minute); err != nil || !ok {
			t.Errorf("AcquireLease by b after BeginResume(unknown run, nonce %q) by a = %v, %v; want true: nothing taken", nonce, ok, err)
		}
	}
}

// ApproveBegin counts an approval and begins nothing; the approval that
// decides the call and completes its step begins its resume. Conditional
// on the records' version, it is refused, writing nothing, when the call
// holds other approvals than those judged (returning the call as stored)
// or the records changed; a store that keeps no version refuses every
// conditional approval.
func testApproveBegin(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv := "C9:" + store.NewRunID()
	b, err := s.BeginTurn(ctx, conv, "a", time.Minute, "rules")
	if err != nil || !b.Acquired {
		t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
	}
	version := b.RecordsVersion
	keeps := version != 0
	r, calls := create(t, s, 1, nil)
	c := calls[0]
	lease := "conv:" + r.Conversation + "/" + r.ID
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Kinds: []string{"rules"}}
	cond := store.Condition{IfRecords: version}
	// with is the effects of an approval by approver on condition cond.
	with := func(approver string, cond store.Condition) store.Effects {
		fx := auditedEffects(c, approver)
		fx.Condition = cond
		return fx
	}
	if !keeps {
		if _, _, _, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, nil, 2, approve("U_A"), with("U_A", store.Condition{IfRecords: 1}), rb); !errors.Is(err, store.ErrStale) {
			t.Fatalf("conditional ApproveBegin on a store that keeps no version: error = %v, want ErrStale", err)
		}
		if _, _, err := s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, nil, 2, approve("U_A"), with("U_A", store.Condition{IfRecords: 1})); !errors.Is(err, store.ErrStale) {
			t.Fatalf("conditional ApproveAudited on a store that keeps no version: error = %v, want ErrStale", err)
		}
	}
	got, complete, rs, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, nil, 2, approve("U_A"), with("U_A", cond), rb)
	if err != nil || complete || rs.Claimed || rs.Busy || got.Status != store.Pending || !slices.Equal(approvers(got), []string{"U_A"}) {
		t.Fatalf("first ApproveBegin of 2 = %s %v, complete %v, claimed %v, busy %v, %v; want counted, pending, nothing begun", got.Status, approvers(got), complete, rs.Claimed, rs.Busy, err)
	}
	if keeps {
		// Judged with no approvals, or with an edit: the call as stored
		// comes back, nothing written.
		for _, judged := range []struct {
			approvers []string
			edited    bool
		}{{nil, false}, {[]string{"U_A"}, true}, {[]string{"U_X"}, false}, {[]string{"U_A", "U_X"}, false}} {
			stale := store.Condition{IfRecords: version, IfApprovers: judged.approvers, IfEdited: judged.edited}
			got, complete, rs, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, nil, 2, approve("U_B"), with("U_B", stale), rb)
			if !errors.Is(err, store.ErrStale) || complete || rs.Claimed || got.ID != c.ID || !slices.Equal(approvers(got), []string{"U_A"}) {
				t.Fatalf("ApproveBegin judged with approvals %v, edited %v = %q %v, complete %v, claimed %v, %v; want ErrStale with the call as stored ([U_A])", judged.approvers, judged.edited, got.ID, approvers(got), complete, rs.Claimed, err)
			}
			got, complete, err = s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, nil, 2, approve("U_B"), with("U_B", stale))
			if !errors.Is(err, store.ErrStale) || complete || got.ID != c.ID || !slices.Equal(approvers(got), []string{"U_A"}) {
				t.Fatalf("ApproveAudited judged with approvals %v, edited %v = %q %v, complete %v, %v; want ErrStale with the call as stored ([U_A])", judged.approvers, judged.edited, got.ID, approvers(got), complete, err)
			}
		}
		// The records changed: nothing comes back.
		putRecord(t, s, "rules", "r1")
		stale := store.Condition{IfRecords: version, IfApprovers: []string{"U_A"}}
		got, _, _, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, nil, 2, approve("U_B"), with("U_B", stale), rb)
		if !errors.Is(err, store.ErrStale) || got.ID != "" {
			t.Fatalf("ApproveBegin on records changed since = %q, %v; want ErrStale and no call", got.ID, err)
		}
		got, _, err = s.ApproveAudited(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, nil, 2, approve("U_B"), with("U_B", stale))
		if !errors.Is(err, store.ErrStale) || got.ID != "" {
			t.Fatalf("ApproveAudited on records changed since = %q, %v; want ErrStale and no call", got.ID, err)
		}
		b, err := s.BeginTurn(ctx, conv, "a", time.Minute, "rules")
		if err != nil || !b.Acquired {
			t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
		}
		cond = store.Condition{IfRecords: b.RecordsVersion, IfApprovers: []string{"U_A"}}
	} else {
		putRecord(t, s, "rules", "r1")
		cond = store.Condition{}
	}
	if now, err := s.GetCall(ctx, c.ID); err != nil || now.Status != store.Pending || !slices.Equal(approvers(now), []string{"U_A"}) {
		t.Fatalf("the call after refused approvals = %s %v, %v; want pending with U_A's approval only", now.Status, approvers(now), err)
	}
	final := approve("U_B")
	final.Attempt = "attempt-1"
	got, complete, rs, err = s.ApproveBegin(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, nil, 2, final, with("U_B", cond), rb)
	if err != nil || !complete || !rs.Claimed || rs.Busy || got.Status != store.Decided {
		t.Fatalf("the approval that decides the call = %s, complete %v, claimed %v, busy %v, %v; want decided, complete, its resume begun", got.Status, complete, rs.Claimed, rs.Busy, err)
	}
	if rs.Run.ID != r.ID || rs.Started != c.ID || !rs.Found || rs.Conversation.Key != r.Conversation {
		t.Errorf("ApproveBegin resume = run %s, started %q, conversation %q (found %v); want %s, %s started, %s", rs.Run.ID, rs.Started, rs.Conversation.Key, rs.Found, r.ID, c.ID, r.Conversation)
	}
	if recs := rs.Records["rules"]; len(recs) != 1 || recs[0].ID != "r1" {
		t.Errorf("ApproveBegin records = %+v, want rules [r1]", rs.Records)
	}
	if ok, err := s.AcquireLease(ctx, lease, "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after a's ApproveBegin = %v, %v; want false: a holds the lease", ok, err)
	}
	if now, err := s.GetCall(ctx, c.ID); err != nil || !now.Executing || now.Decision == nil || now.Decision.Attempt != "attempt-1" {
		t.Errorf("the call after ApproveBegin = executing %v, decision %+v, %v; want marked executing, with the approval's decision", now.Executing, now.Decision, err)
	}

	// Another owner's lease is left alone, the approval recorded.
	r2, calls2 := create(t, s, 1, nil)
	lease2 := "conv:" + r2.Conversation + "/" + r2.ID
	if ok, err := s.AcquireLease(ctx, lease2, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by b = %v, %v", ok, err)
	}
	rb2 := store.ResumeBegin{Conversation: r2.Conversation, Lease: lease2, Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
	got, complete, rs, err = s.ApproveBegin(ctx, calls2[0].ID, calls2[0].Fingerprint, approval("U_A"), nil, nil, 1, approve("U_A"), auditedEffects(calls2[0], "U_A"), rb2)
	if err != nil || !complete || rs.Claimed || !rs.Busy || got.Status != store.Decided {
		t.Fatalf("ApproveBegin while b holds the lease = %s, complete %v, claimed %v, busy %v, %v; want decided, complete, busy", got.Status, complete, rs.Claimed, rs.Busy, err)
	}
	if !stalled(t, s, r2.ID) {
		t.Errorf("Stalled does not list %s after a busy ApproveBegin: it took the claim", r2.ID)
	}
	_, calls3 := create(t, s, 1, nil)
	if _, _, _, err := s.ApproveBegin(ctx, calls3[0].ID, calls3[0].Fingerprint, approval("U_A"), nil, nil, 1, approve("U_A"), store.Effects{}, store.ResumeBegin{}); err == nil {
		t.Error("ApproveBegin with a zero resume ttl succeeded, want an error")
	}
}
