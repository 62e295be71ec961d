package agent_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// editBackPolicy has restarts of staging approved by one of two people,
// and of prod by both.
const editBackPolicy = `
policy:
  rules:
    - id: prod
      tool: restart
      when: 'args.env == "prod"'
      verdict: ask
      approvers: [UONE000001, UTWO000002]
      min_approvals: 2
    - id: staging
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002]
`

// editedAwayAndBack pauses a restart of staging on a (the process that
// remembers it as paused, and with ready, once the others that follow
// pauses have heard of it), then has UONE000001 edit it to prod and
// editor edit it back to staging, with Decide, as a form's submission
// is: an edit pending with the card's fingerprint, under the two-person
// rule, editor's approval counted.
func editedAwayAndBack(t *testing.T, w *world, a *agent.Agent, editor string, ready func()) agent.PendingCall {
	t.Helper()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	if ready != nil {
		ready()
	}
	editedBack(t, a, p, editor)
	return p
}

// editedBack has UONE000001 edit p, paused on a, to prod and editor edit
// it back to staging (see editedAwayAndBack).
func editedBack(t *testing.T, a *agent.Agent, p agent.PendingCall, editor string) {
	t.Helper()
	ctx := t.Context()
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
	must(t, err)
	res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Edit, Decider: editor, Args: json.RawMessage(`{"env":"staging"}`)})
	must(t, err)
	if res.Call.Status != agent.CallPending || res.Call.Fingerprint != p.Fingerprint || res.Call.MinApprovals != 2 {
		t.Fatalf("after the edit back: %s, fingerprint %s, needing %d; want pending, the card's fingerprint, needing 2", res.Call.Status, res.Call.Fingerprint, res.Call.MinApprovals)
	}
}

// clickStaysPending clicks kind on p's card as decider, as the Slack app
// sends a click (DecideTaking, on the process d), and checks that it is
// refused with want and the call left pending.
func clickStaysPending(t *testing.T, w *world, d *agent.Agent, p agent.PendingCall, kind approvals.Kind, decider string, want error) {
	t.Helper()
	ctx := t.Context()
	_, taken, err := d.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: kind, Decider: decider})
	if taken != nil {
		d.ReleaseTaken(ctx, taken)
	}
	c, gerr := w.store.GetCall(ctx, p.ID)
	must(t, gerr)
	if !errors.Is(err, want) || c.Status != store.Pending {
		t.Errorf("%s clicked by %s = %v, the call %s with approvals %v; want %v, still pending", kind, decider, err, c.Status, c.Approvals, want)
	}
}

// An edit to prod and back to staging leaves an edit pending with the
// card's fingerprint that needs both approvers, one counted. A click on
// the card is judged from the call as stored, not as the process
// remembers it paused (one approver needed, no edit): the approver
// counted already is told so, and an Always allow is refused, as the
// edited call's is; neither decides it.
func TestClickAfterAnEditAwayAndBackNeedsTheEditsCount(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = editBackPolicy
			a := w.agent()
			p := editedAwayAndBack(t, w, a, "UTWO000002", nil)
			clickStaysPending(t, w, a, p, approvals.Approve, "UTWO000002", approvals.ErrAlreadyApproved)
			clickStaysPending(t, w, a, p, approvals.Remember, "UONE000001", agent.ErrBadDecision)
			if recs, err := w.store.(approvals.RecordStore).Records(t.Context(), approvals.KindStandingRule); err != nil || len(recs) != 0 {
				t.Errorf("standing rules = %d, %v; want none", len(recs), err)
			}
		})
	}
}

// As TestClickAfterAnEditAwayAndBackNeedsTheEditsCount, with the click on
// another process, which remembers the call as announced at its pause.
func TestClickAfterAnEditAwayAndBackOnAnotherProcess(t *testing.T) {
	b := redisBackend(t)
	w := newWorld(t, *b)
	w.policy = editBackPolicy
	a := w.agent()
	f := &following{Store: w.store, heard: make(chan struct{}, 10)}
	other := w.agentWith(f, w.rec)
	follow(t, other)
	p := editedAwayAndBack(t, w, a, "UTWO000002", func() { <-f.heard })
	clickStaysPending(t, w, other, p, approvals.Approve, "UTWO000002", approvals.ErrAlreadyApproved)
}

// An edit away and back that lands between a click's read of the call
// and its decision (the process does not remember the call) is seen on
// every store, a Redis Cluster's included, which keeps no version of the
// records: the decision is conditional on the approvals and edit it was
// judged with, and the click is judged again from the call as stored.
func TestEditAwayAndBackWhileAClickIsCheckedIsSeen(t *testing.T) {
	for _, b := range backends(t) {
		for _, kind := range []approvals.Kind{approvals.Approve, approvals.Remember} {
			t.Run(fmt.Sprintf("%s/%s", b.name, kind), func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = editBackPolicy
				other := w.agent()
				p := pauseOne(t, w, other, call("c1", "restart", `{"env":"staging"}`))
				st := &changedAfterRead{Store: w.store}
				st.change = func(int64) {
					editedBack(t, other, p, "UTWO000002")
				}
				st.left.Store(1)
				a := w.agentWith(st, w.rec)
				want := approvals.ErrAlreadyApproved
				if kind == approvals.Remember {
					want = agent.ErrBadDecision
				}
				clickStaysPending(t, w, a, p, kind, "UTWO000002", want)
				if n := st.reads.Load(); n < 2 {
					t.Errorf("reads of the call = %d, want the click judged again after the edit", n)
				}
			})
		}
	}
}
