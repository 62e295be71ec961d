package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

func approval(who string) store.Approval {
	return store.Approval{Approver: who, At: time.Now()}
}

func approvers(c store.Call) []string {
	var out []string
	for _, a := range c.Approvals {
		out = append(out, a.Approver)
	}
	return out
}

func testApproveCounts(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 2, nil)
	c := calls[0]
	got, complete, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, 2, approve("U_A"))
	if err != nil || complete {
		t.Fatalf("first Approve(%s) = complete %v, %v; want false, nil", c.ID, complete, err)
	}
	if got.Status != store.Pending || fmt.Sprint(approvers(got)) != "[U_A]" {
		t.Fatalf("after the first approval: status %q approvals %v, want pending [U_A]", got.Status, approvers(got))
	}
	_, _, err = s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, 2, approve("U_A"))
	if !errors.Is(err, store.ErrDuplicateApproval) {
		t.Fatalf("Approve(%s) by U_A again: error = %v, want ErrDuplicateApproval", c.ID, err)
	}
	_, _, err = s.Approve(ctx, c.ID, "other", approval("U_B"), nil, 2, approve("U_B"))
	if !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Fatalf("Approve(%s) with another fingerprint: error = %v, want ErrFingerprintMismatch", c.ID, err)
	}
	late := store.Approval{Approver: "U_B", At: c.ExpiresAt}
	if _, _, err = s.Approve(ctx, c.ID, c.Fingerprint, late, nil, 2, approve("U_B")); !errors.Is(err, store.ErrExpired) {
		t.Fatalf("Approve(%s) at expiry: error = %v, want ErrExpired", c.ID, err)
	}
	if _, _, err = s.Approve(ctx, "nope.0", "x", approval("U_B"), nil, 2, approve("U_B")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Approve(unknown): error = %v, want ErrNotFound", err)
	}
	s = reopen()
	if got := wantStatus(t, s, c.ID, store.Pending); fmt.Sprint(approvers(got)) != "[U_A]" {
		t.Fatalf("after refusals and a restart: approvals %v, want [U_A]", approvers(got))
	}
	got, complete, err = s.Approve(ctx, c.ID, c.Fingerprint, approval("U_B"), nil, 2, approve("U_B"))
	if err != nil || complete {
		t.Fatalf("second Approve(%s) = complete %v, %v; want false (another call pending), nil", c.ID, complete, err)
	}
	if got.Status != store.Decided || got.Decision == nil || got.Decision.Decider != "U_B" || fmt.Sprint(approvers(got)) != "[U_A U_B]" {
		t.Fatalf("after the second approval: status %q decision %+v approvals %v, want decided by U_B with [U_A U_B]", got.Status, got.Decision, approvers(got))
	}
	if _, _, err = s.Approve(ctx, c.ID, c.Fingerprint, approval("U_C"), nil, 2, approve("U_C")); !errors.Is(err, store.ErrAlreadyDecided) {
		t.Fatalf("Approve(%s) once decided: error = %v, want ErrAlreadyDecided", c.ID, err)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution(%s) after enough approvals = %v, %v; want true", c.ID, ok, err)
	}

	// One Deny after one approval ends the call.
	o := calls[1]
	if _, _, err := s.Approve(ctx, o.ID, o.Fingerprint, approval("U_A"), nil, 2, approve("U_A")); err != nil {
		t.Fatalf("Approve(%s): %v", o.ID, err)
	}
	got, complete, err = s.Decide(ctx, o.ID, o.Fingerprint, store.Decision{Kind: "deny", Decider: "U_B", At: time.Now()})
	if err != nil || !complete {
		t.Fatalf("Decide(%s, deny) after one approval = complete %v, %v; want true, nil", o.ID, complete, err)
	}
	if got.Decision.Kind != "deny" || fmt.Sprint(approvers(got)) != "[U_A]" {
		t.Fatalf("denied call: decision %+v approvals %v, want deny, with [U_A] kept", got.Decision, approvers(got))
	}
}

func testApproveEdit(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_A"), nil, 2, approve("U_A")); err != nil {
		t.Fatalf("Approve(%s): %v", c.ID, err)
	}
	args := json.RawMessage(`{"path":"/srv/edited"}`)
	edit := &store.Proposal{Fingerprint: "fp-edited", Edit: store.Decision{Kind: "edit", Decider: "U_B", At: time.Now(), Args: args}}
	got, complete, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_B"), edit, 2, approve("U_B"))
	if err != nil || complete {
		t.Fatalf("Approve(%s) with an edit = complete %v, %v; want false, nil", c.ID, complete, err)
	}
	s = reopen()
	got = wantStatus(t, s, c.ID, store.Pending)
	if got.Fingerprint != "fp-edited" || got.Edit == nil || string(got.Edit.Args) != string(args) || string(got.Args) != string(c.Args) {
		t.Fatalf("after an edit: fingerprint %q edit %+v args %s, want fp-edited, the edit, and the original args %s", got.Fingerprint, got.Edit, got.Args, c.Args)
	}
	if fmt.Sprint(approvers(got)) != "[U_B]" {
		t.Fatalf("after an edit: approvals %v, want the count restarted at [U_B]", approvers(got))
	}
	if _, _, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_C"), nil, 2, approve("U_C")); !errors.Is(err, store.ErrFingerprintMismatch) {
		t.Fatalf("Approve(%s) of the original arguments after an edit: error = %v, want ErrFingerprintMismatch", c.ID, err)
	}
	got, complete, err = s.Approve(ctx, c.ID, "fp-edited", approval("U_A"), nil, 2, approve("U_A"))
	if err != nil || !complete || got.Status != store.Decided {
		t.Fatalf("Approve(%s) of the edited arguments by U_A = status %q complete %v, %v; want decided, true", c.ID, got.Status, complete, err)
	}
}

func testApproveConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	// Two approvers, each click delivered several times, all at once.
	const copies = 10
	type result struct {
		who      string
		complete bool
		status   store.Status
		err      error
	}
	results := make([]result, 2*copies)
	var wg sync.WaitGroup
	for i := range results {
		who := []string{"U_A", "U_B"}[i%2]
		wg.Go(func() {
			got, complete, err := s.Approve(context.Background(), c.ID, c.Fingerprint, approval(who), nil, 2, approve(who))
			results[i] = result{who, complete, got.Status, err}
		})
	}
	wg.Wait()
	deciders := 0
	for _, r := range results {
		switch {
		case r.err == nil && r.status == store.Decided:
			deciders++
			if !r.complete {
				t.Errorf("the approval that decided the only call had complete = false")
			}
		case r.err == nil && r.status == store.Pending:
		case errors.Is(r.err, store.ErrDuplicateApproval), errors.Is(r.err, store.ErrAlreadyDecided):
		default:
			t.Errorf("Approve by %s: status %q, error %v; want counted, decided, duplicate or already decided", r.who, r.status, r.err)
		}
	}
	if deciders != 1 {
		t.Fatalf("%d approvals decided the call, want exactly 1", deciders)
	}
	got := wantStatus(t, s, c.ID, store.Decided)
	if len(got.Approvals) != 2 || got.Approvals[0].Approver == got.Approvals[1].Approver {
		t.Fatalf("stored approvals %v, want U_A and U_B once each", approvers(got))
	}
}

// An edit whose arguments fall under a rule with a shorter ttl brings the
// call's expiry forward (Decision.ExpiresAt), in the call and in the
// expiry index; a later one never moves it back.
func testApproveEditExpiry(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	_, calls := create(t, s, 1, nil)
	c := calls[0]
	now := time.Now().Truncate(time.Millisecond)
	sooner := now.Add(10 * time.Minute)
	edit := func(who, fp string, exp time.Time) *store.Proposal {
		return &store.Proposal{Fingerprint: fp, Edit: store.Decision{Kind: "edit", Decider: who, At: now, Args: json.RawMessage(`{"path":"/srv/` + fp + `"}`), ExpiresAt: exp}}
	}
	got, complete, err := s.Approve(ctx, c.ID, c.Fingerprint, approval("U_B"), edit("U_B", "fp-sooner", sooner), 2, approve("U_B"))
	if err != nil || complete {
		t.Fatalf("Approve with an edit that expires sooner = complete %v, %v; want pending", complete, err)
	}
	if !got.ExpiresAt.Equal(sooner) {
		t.Errorf("Approve returned ExpiresAt %v, want the edit's %v", got.ExpiresAt, sooner)
	}
	s = reopen()
	if got = wantStatus(t, s, c.ID, store.Pending); !got.ExpiresAt.Equal(sooner) {
		t.Errorf("stored ExpiresAt %v after the edit, want %v", got.ExpiresAt, sooner)
	}
	if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(sooner) {
		t.Errorf("NextExpiry = %v, %v; want the edit's %v", next, err, sooner)
	}
	if due, err := s.Due(ctx, sooner, 0); err != nil || len(due) != 1 || due[0].ID != c.ID {
		t.Errorf("Due(at the edit's expiry) = %d calls, %v; want %s", len(due), err, c.ID)
	}
	// A later edit under a longer ttl does not move it back.
	if _, _, err := s.Approve(ctx, c.ID, "fp-sooner", approval("U_C"), edit("U_C", "fp-later", now.Add(2*time.Hour)), 2, approve("U_C")); err != nil {
		t.Fatalf("Approve with a second edit: %v", err)
	}
	if got = wantStatus(t, s, c.ID, store.Pending); !got.ExpiresAt.Equal(sooner) {
		t.Errorf("ExpiresAt %v after an edit that expires later, want it kept at %v", got.ExpiresAt, sooner)
	}
	late := store.Approval{Approver: "U_A", At: sooner}
	if _, _, err := s.Approve(ctx, c.ID, "fp-later", late, nil, 2, approve("U_A")); !errors.Is(err, store.ErrExpired) {
		t.Errorf("Approve at the edit's expiry: error = %v, want ErrExpired", err)
	}
	if _, _, err := s.Decide(ctx, c.ID, "fp-later", store.Decision{Kind: "approve", Decider: "U_A", At: sooner}); !errors.Is(err, store.ErrExpired) {
		t.Errorf("Decide at the edit's expiry: error = %v, want ErrExpired", err)
	}
	if _, complete, err := s.Decide(ctx, c.ID, "", store.Decision{Kind: "expire", Decider: "system", At: sooner}); err != nil || !complete {
		t.Errorf("expire at the edit's expiry = complete %v, %v; want expired", complete, err)
	}
	if due, err := s.Due(ctx, now.Add(3*time.Hour), 0); err != nil || len(due) != 0 {
		t.Errorf("Due after the call expired = %d calls, %v; want none", len(due), err)
	}
}
