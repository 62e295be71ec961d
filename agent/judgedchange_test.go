package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// changedAfterRead is a store whose reads of a call for a decision
// (GetCallWith) run change right after the read, the first left times:
// the policy changes between a decision's read and its store step, as
// when an admin adds a rule while the decider's groups are looked up.
type changedAfterRead struct {
	agent.Store
	change func(n int64)
	left   atomic.Int64
	reads  atomic.Int64
}

func (s *changedAfterRead) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	c, recs, version, err := s.Store.GetCallWith(ctx, id, kinds...)
	n := s.reads.Add(1)
	if s.left.Add(-1) >= 0 {
		s.change(n)
	}
	return c, recs, version, err
}

// pausedElsewhere pauses a restart under policy on one process (other),
// and returns the world, the call, and another process, which does not
// remember the call, on st, a handle on the store whose reads of a call
// change what st.change says.
func pausedElsewhere(t *testing.T, b backend, policy string) (w *world, p agent.PendingCall, st *changedAfterRead, a, other *agent.Agent) {
	t.Helper()
	w = newWorld(t, b)
	w.policy = policy
	other = w.agent()
	p = pauseOne(t, w, other, call("c1", "restart", `{"env":"prod"}`))
	st = &changedAfterRead{Store: w.store}
	return w, p, st, w.agentWith(st, w.rec), other
}

// oneOfTwo asks one of two approvers to approve a restart.
const oneOfTwo = `
policy:
  rules:
    - {id: one, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002]}
`

// A decision on a call the process does not remember is judged by the
// records read with the call and made only if they are still those: a
// rule an admin adds between the read and the decision's store step (here
// one asking two approvers) is seen, the decision judged again under it
// (the approval counted, the call left pending), whether the decision
// begins its resume (DecideTaking) or not (Decide, as a form's is). A
// Redis Cluster keeps no version of the records, so it is left out.
func TestRuleAddedWhileADecisionIsCheckedIsSeen(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "redis-cluster" {
			continue
		}
		for _, taking := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/taking=%v", b.name, taking), func(t *testing.T) {
				ctx := t.Context()
				w, p, st, a, _ := pausedElsewhere(t, b, oneOfTwo)
				st.change = func(int64) {
					if _, err := w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: "two", Tool: "restart", Verdict: approvals.Ask,
						Approvers: []string{"UONE000001", "UTWO000002"}, MinApprovals: 2}); err != nil {
						t.Errorf("AddRule: %v", err)
					}
				}
				st.left.Store(1)
				d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"}
				var res agent.DecideResult
				var err error
				if taking {
					var tk *agent.Taken
					res, tk, err = a.DecideTaking(ctx, d)
					if tk != nil {
						a.ReleaseTaken(ctx, tk)
						t.Error("the approval began a resume")
					}
				} else {
					res, err = a.Decide(ctx, d)
				}
				if err != nil || res.Complete || res.Call.Status != agent.CallPending || len(res.Call.Approvals) != 1 {
					t.Fatalf("UONE's approval with a two-person rule added after its read = %+v, %v; want counted, the call pending", res, err)
				}
				if n := st.reads.Load(); n != 2 {
					t.Errorf("reads of the call = %d, want 2: judged again once", n)
				}
				c, err := w.store.GetCall(ctx, p.ID)
				if err != nil || c.Status != store.Pending || len(c.Approvals) != 1 {
					t.Fatalf("the call = %s with %d approvals, %v; want pending with UONE's", c.Status, len(c.Approvals), err)
				}
				res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UTWO000002"})
				if err != nil || !res.Complete {
					t.Fatalf("UTWO's approval = %+v, %v; want the call decided", res, err)
				}
			})
		}
	}
}

// A decision whose records change each time it is read is judged at most
// judgeTries times, then refused with an error wrapping store.ErrStale,
// nothing written: the decider may try again.
func TestDecisionOnRecordsThatKeepChangingIsRefused(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "redis-cluster" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w, p, st, a, _ := pausedElsewhere(t, b, oneOfTwo)
			st.change = func(n int64) {
				if _, err := w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: fmt.Sprintf("r%d", n), Tool: "deploy", Verdict: approvals.Ask}); err != nil {
					t.Errorf("AddRule: %v", err)
				}
			}
			st.left.Store(100)
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"})
			if !errors.Is(err, store.ErrStale) {
				t.Fatalf("approval on records changed after every read: error = %v, want ErrStale", err)
			}
			if n := st.reads.Load(); n != 3 {
				t.Errorf("reads of the call = %d, want 3", n)
			}
			c, err := w.store.GetCall(ctx, p.ID)
			if err != nil || c.Status != store.Pending || len(c.Approvals) != 0 {
				t.Fatalf("the call = %s with %d approvals, %v; want pending, nothing written", c.Status, len(c.Approvals), err)
			}
			st.left.Store(0)
			if res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"}); err != nil || !res.Complete {
				t.Fatalf("the approval once the records stay = %+v, %v; want the call decided", res, err)
			}
		})
	}
}

// fiveOfFive asks five approvers to approve a restart.
const fiveOfFive = `
policy:
  rules:
    - {id: five, tool: restart, verdict: ask, approvers: [U1, U2, U3, U4, U5], min_approvals: 5}
`

// Approvals counted while another is checked (a busy card of a rule that
// needs several) change the call's approvals, not the records: the
// approval is judged again with them as often as that happens, never
// refused for it, and counted once.
func TestApprovalCheckedWhileOthersAreCountedIsCounted(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "redis-cluster" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			_, p, st, a, other := pausedElsewhere(t, b, fiveOfFive)
			st.change = func(n int64) {
				who := []string{"U1", "U2", "U3", "U4"}[n-1]
				if _, err := other.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}); err != nil {
					t.Errorf("%s's approval: %v", who, err)
				}
			}
			st.left.Store(3)
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "U5"})
			if err != nil || len(res.Call.Approvals) != 4 || res.Call.Status != agent.CallPending {
				t.Fatalf("U5's approval while U1 to U3 approve = %+v, %v; want counted, 4 of 5", res.Call.Approvals, err)
			}
			if n := st.reads.Load(); n != 4 {
				t.Errorf("reads of the call = %d, want 4", n)
			}
		})
	}
}

// A plain deny is judged by the card's approvers, not by the policy's
// records: records that keep changing while it is checked (a rule for
// another tool, an Always allow elsewhere) do not hold it up.
func TestDenyIsNotHeldByRecordsChangingMeanwhile(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w, p, st, a, _ := pausedElsewhere(t, b, oneOfTwo)
			st.change = func(n int64) {
				if _, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: fmt.Sprintf("r%d", n), Tool: "deploy", Verdict: approvals.Ask}); err != nil {
					t.Errorf("add a rule: %v", err)
				}
			}
			st.left.Store(agent.JudgeTries)
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Refuse, Decider: "UONE000001"})
			must(t, err)
			if res.Call.Status != agent.CallDecided {
				t.Errorf("the deny left the call %s, want it decided", res.Call.Status)
			}
			if n := st.reads.Load(); n != 1 {
				t.Errorf("the call was read %d times for the deny, want once", n)
			}
		})
	}
}

// Approvals of others counted while one is checked, however many, are not
// a change of the policy: past the tries they take, the approval is
// refused as counted meanwhile, not as judged under a changed policy.
func TestApprovalOutrunByOthersIsNotAPolicyChange(t *testing.T) {
	b := backends(t)[0]
	ctx := t.Context()
	const n = agent.CountTries + 5
	var ids []string
	for i := range n + 1 {
		ids = append(ids, fmt.Sprintf("UAPPROVE%02d", i))
	}
	policy := fmt.Sprintf("\npolicy:\n  rules:\n    - {id: many, tool: restart, verdict: ask, approvers: [%s], min_approvals: %d}\n", strings.Join(ids, ", "), n+1)
	_, p, st, a, other := pausedElsewhere(t, b, policy)
	st.change = func(i int64) {
		if _, err := other.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: ids[i]}); err != nil {
			t.Errorf("%s's approval: %v", ids[i], err)
		}
	}
	st.left.Store(n)
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: ids[0]})
	if !errors.Is(err, agent.ErrCountedMeanwhile) || errors.Is(err, store.ErrStale) {
		t.Fatalf("an approval outrun by %d others: %v, want ErrCountedMeanwhile, not ErrStale", n, err)
	}
}

// A Reject on a call that needs several approvals, while approvals of
// others are counted between its read and its store step (the policy
// unchanged): it is judged again from the call as stored, as an approval
// is, and made, not refused as judged under a changed policy once the
// tries a changed rule takes are used up.
func TestRejectOutrunByApprovalsIsNotAPolicyChange(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "redis-cluster" {
			continue // it keeps no version of the records: no decision is conditional
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			const n = 6
			var ids []string
			for i := range n {
				ids = append(ids, fmt.Sprintf("UAPPROVE%02d", i))
			}
			policy := fmt.Sprintf("\npolicy:\n  rules:\n    - {id: many, tool: restart, verdict: ask, approvers: [%s], min_approvals: %d}\n", strings.Join(ids, ", "), n)
			_, p, st, a, other := pausedElsewhere(t, b, policy)
			st.change = func(i int64) {
				if _, err := other.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: ids[i]}); err != nil {
					t.Errorf("%s's approval: %v", ids[i], err)
				}
			}
			st.left.Store(agent.JudgeTries)
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Reject, Decider: ids[0], Reason: "not now"})
			if err != nil || res.Call.Status != agent.CallDecided {
				t.Fatalf("a Reject outrun by %d approvals (the policy unchanged) = %s, %v; want it made", agent.JudgeTries, res.Call.Status, err)
			}
		})
	}
}
