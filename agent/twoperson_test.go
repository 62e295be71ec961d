package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// A call that needs two approvers is not decided by the first approval,
// offers no Always allow, counts each person once, and is decided by the
// second distinct approver; a requester is still kept out by four eyes.
func TestTwoPersonDecide(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - id: two
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002, UREQUESTER]
      four_eyes: true
      min_approvals: 2
`
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			d := func(who string, kind approvals.Kind) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: kind, Decider: who}
			}
			if _, err := a.Decide(ctx, d("UONE000001", approvals.Remember)); !errors.Is(err, agent.ErrBadDecision) {
				t.Fatalf("Remember on a two-person call: got %v, want ErrBadDecision", err)
			}
			if _, err := a.Decide(ctx, d(p.Requester, approvals.Approve)); !errors.Is(err, approvals.ErrNotApprover) {
				t.Fatalf("the requester approving: got %v, want ErrNotApprover", err)
			}
			res, err := a.Decide(ctx, d("UONE000001", approvals.Approve))
			if err != nil || res.Complete || res.Call.Status != agent.CallPending {
				t.Fatalf("first approval: got %+v, %v; want the call still pending", res, err)
			}
			if _, err := a.Decide(ctx, d("UONE000001", approvals.Approve)); !errors.Is(err, approvals.ErrAlreadyApproved) {
				t.Fatalf("the same approver again: got %v, want ErrAlreadyApproved", err)
			}
			res, err = a.Decide(ctx, d("UTWO000002", approvals.Approve))
			if err != nil || !res.Complete || res.Call.Status != agent.CallDecided || len(res.Call.Approvals) != 2 {
				t.Fatalf("second approval: got %+v, %v; want the call decided with 2 approvals", res, err)
			}
		})
	}
}

// An edit that moves a call under a rule needing two approvers counts as
// the editor's approval only: one person cannot take a call out from under
// a two-person rule by editing it. The second approver's approval of the
// edited arguments decides it, and the edited arguments run.
func TestEditUnderATwoPersonRuleNeedsTheSecondApprover(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
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
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			if p.MinApprovals > 1 {
				t.Fatalf("the staging call needs %d approvers, want 1", p.MinApprovals)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
			if err != nil || res.Complete || res.Call.Status != agent.CallPending || !res.Call.Edited {
				t.Fatalf("an edit to prod by one approver: got %+v, %v; want the call pending on the edited arguments", res, err)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Fatalf("restart ran %d times after one approver's edit", n)
			}
			res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Approve, Decider: "UTWO000002"})
			if err != nil || !res.Complete || res.Call.Status != agent.CallDecided || len(res.Call.Approvals) != 2 {
				t.Fatalf("the second approver's approval of the edit: got %+v, %v; want the call decided with 2 approvals", res, err)
			}
			w.model.Reply(fakeopenai.Text("restarted prod"))
			if _, err := a.Resume(ctx, res.Call.RunID); err != nil {
				t.Fatal(err)
			}
			if n := w.restarts.n.Load(); n != 1 {
				t.Fatalf("restart ran %d times, want once", n)
			}
			if got := w.restarts.Args(); len(got) != 1 || got[0] != `{"env":"prod"}` {
				t.Errorf("restart ran with %v, want the edited arguments", got)
			}
		})
	}
}

// A runtime rule that adds to a file rule setting no ttl can only shorten
// the wait: APPROVAL_TTL holds against a runtime rule's longer ttl, and
// REMINDER_AFTER against a later remind_after.
func TestRuntimeRuleNeverLengthensTheDefaultTTL(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.cfg.ApprovalTTL, w.cfg.ReminderAfter = time.Hour, 10*time.Minute
	w.policy = "policy:\n  rules:\n    - {id: restarts, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002]}\n"
	a := w.agent()
	r, err := approvals.ParseRule(`id=admin-tight tool=restart verdict=ask four_eyes=true ttl=600h remind_after=5h`)
	must(t, err)
	if _, err := w.engine.AddRule(ctx, "UADMIN", r); err != nil {
		t.Fatal(err)
	}
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	if got := p.ExpiresAt.Sub(p.CreatedAt); got != time.Hour {
		t.Errorf("the call waits %v, want APPROVAL_TTL's 1h: the runtime rule's 600h only tightens", got)
	}
	if len(p.RemindAt) == 0 || p.RemindAt[0].Sub(p.CreatedAt) != 10*time.Minute {
		t.Errorf("the call is reminded at %v, want REMINDER_AFTER's 10m after it paused", p.RemindAt)
	}
	w.advance(10 * time.Hour)
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"}); !errors.Is(err, approvals.ErrExpired) {
		t.Errorf("an approval 10h later: %v, want ErrExpired", err)
	}
}

// An edit whose arguments fall under a rule with a shorter ttl waits no
// longer than that rule lets a call wait: the call expires then, and a
// click after it is refused. (An edit never moves a deadline later: see
// storetest's ApproveEditExpiry.)
func TestEditIntoAShorterTTLExpiresSooner(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2, ttl: 15m}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002], ttl: 24h}
`
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			if want := w.clock().Add(24 * time.Hour); !p.ExpiresAt.Equal(want) {
				t.Fatalf("the staging call expires at %v, want %v", p.ExpiresAt, want)
			}
			w.advance(time.Hour)
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
			if err != nil || res.Call.Status != agent.CallPending {
				t.Fatalf("the edit to prod: %+v, %v; want it pending", res.Call.Status, err)
			}
			soon := w.clock().Add(15 * time.Minute)
			if !res.Call.ExpiresAt.Equal(soon) {
				t.Errorf("the edited call expires at %v, want the prod rule's 15m from the edit: %v", res.Call.ExpiresAt, soon)
			}
			w.advance(15 * time.Minute)
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: res.Call.Fingerprint, Kind: approvals.Approve, Decider: "UTWO000002"})
			if !errors.Is(err, approvals.ErrExpired) {
				t.Errorf("an approval at the edited call's deadline: %v, want ErrExpired", err)
			}
			if _, err := a.Expire(ctx, func(string, string) {}); err != nil {
				t.Fatal(err)
			}
			if c, err := w.store.(storetest.Store).GetCall(ctx, p.ID); err != nil || c.Status != store.Expired {
				t.Errorf("after the expiry pass at the edited deadline the call is %s, %v; want expired", c.Status, err)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times", n)
			}
		})
	}
}

// An edit that needed two approvers keeps needing them after the rule that
// asked for two is removed, and the approval that decides it runs the
// edited arguments, never the card's first ones; a pending edit cannot be
// turned into a standing rule.
func TestEditedCallKeepsItsNeedAfterTheRuleGoes(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - id: staging
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002]
`
			a := w.agent()
			_, err := w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: "prod2", Tool: "restart", When: `args.env == "prod"`, Verdict: approvals.Ask, MinApprovals: 2})
			must(t, err)
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
			if err != nil || res.Call.Status != agent.CallPending {
				t.Fatalf("an edit to prod: got %+v, %v; want the call pending on it", res, err)
			}
			edited := res.Call.Fingerprint
			must(t, w.engine.RemoveRule(ctx, "UADMIN", "prod2"))
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: edited, Kind: approvals.Remember, Decider: "UTWO000002"})
			if !errors.Is(err, agent.ErrBadDecision) {
				t.Errorf("Always allow on a pending edit: got %v, want ErrBadDecision", err)
			}
			res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: edited, Kind: approvals.Approve, Decider: "UONE000001"})
			if !errors.Is(err, approvals.ErrAlreadyApproved) {
				t.Fatalf("the editor approving their own edit again: got %+v, %v; want ErrAlreadyApproved (the edit still needs two)", res, err)
			}
			res, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: edited, Kind: approvals.Approve, Decider: "UTWO000002"})
			if err != nil || !res.Complete {
				t.Fatalf("the second approver: got %+v, %v; want the call decided", res, err)
			}
			w.model.Reply(fakeopenai.Text("restarted prod"))
			if _, err := a.Resume(ctx, res.Call.RunID); err != nil {
				t.Fatal(err)
			}
			if got := w.restarts.Args(); len(got) != 1 || got[0] != `{"env":"prod"}` {
				t.Errorf("restart ran with %v, want once with the edited arguments", got)
			}
		})
	}
}

// A call whose tool is not registered at the moment (an MCP server not
// connected yet, a tool list that changed) is still decided under the
// policy as it is now: a four-eyes rule added after the card refuses the
// requester's approval, and the call does not run on it.
func TestDecisionWhileTheToolIsMissingFollowsThePolicyNow(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - id: r
      tool: "*"
      verdict: ask
`
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "restart", `{"env":"prod"}`), call("c2", "deploy", `{"service":"a","version":"1"}`)))
	out, err := a.Run(ctx, request("please"))
	must(t, err)
	if len(out.Pending) != 2 {
		t.Fatalf("got %d pending calls, want 2", len(out.Pending))
	}
	x, y := out.Pending[0], out.Pending[1]
	_, err = w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: "tight", Tool: "restart", Verdict: approvals.Ask, Approvers: []string{"USECURITY1"}, FourEyes: true})
	must(t, err)
	restart, _ := w.reg.Lookup("restart")
	must(t, w.reg.Replace(func(n string) bool { return n == "restart" }, nil))
	if _, err := a.Decide(ctx, approvals.Decision{CallID: x.ID, Fingerprint: x.Fingerprint, Kind: approvals.Approve, Decider: "UREQUESTER"}); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("the requester approving while the tool is missing: got %v, want a refusal under the four-eyes rule", err)
	}
	must(t, w.reg.Replace(func(string) bool { return false }, []agent.Tool{restart}))
	res, err := a.Decide(ctx, approvals.Decision{CallID: y.ID, Fingerprint: y.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER0001"})
	must(t, err)
	if res.Complete {
		t.Fatal("the step is complete although restart was never decided")
	}
	if n := w.restarts.n.Load(); n != 0 {
		t.Errorf("restart ran %d times", n)
	}
}

// Approvals counted before are judged again with each new one, under the
// policy as it is now: one it would refuse (four eyes added since, an
// approver taken out of the approving group) no longer counts, and the
// call waits for another approver.
func TestCountedApprovalsAreJudgedAgain(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Run("four eyes added", func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(t, b)
				w.policy = `
policy:
  rules:
    - {id: two, tool: restart, verdict: ask, approvers: [UREQUESTER, UONE000001, UTWO000002], min_approvals: 2}
`
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
				d := func(who string) approvals.Decision {
					return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
				}
				if res, err := a.Decide(ctx, d("UREQUESTER")); err != nil || res.Call.Status != agent.CallPending {
					t.Fatalf("the requester's approval: %+v %v", res, err)
				}
				if _, err := w.engine.AddRule(ctx, "UADMIN", approvals.Rule{ID: "fe", Tool: "restart", Verdict: approvals.Ask, FourEyes: true}); err != nil {
					t.Fatal(err)
				}
				res, err := a.Decide(ctx, d("UONE000001"))
				must(t, err)
				if res.Complete || res.Call.Status != agent.CallPending {
					t.Fatalf("decided with approvals %v, of which only one is not a requester's under four eyes", res.Call.Approvals)
				}
				res, err = a.Decide(ctx, d("UTWO000002"))
				must(t, err)
				if !res.Complete {
					t.Errorf("two approvers who are not requesters did not decide it: %+v", res.Call)
				}
			})
			t.Run("approver left the group", func(t *testing.T) {
				ctx := context.Background()
				w := newWorld(t, b)
				w.policy = `
policy:
  rules:
    - {id: two, tool: restart, verdict: ask, approvers: [SSRE000001], min_approvals: 2}
`
				g := &mutableGroups{m: map[string][]string{"SSRE000001": {"UOLD000001", "UONE000001"}}}
				w.cfg.Groups = g
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
				d := func(who string) approvals.Decision {
					return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
				}
				_, err := a.Decide(ctx, d("UOLD000001"))
				must(t, err)
				g.set("SSRE000001", "UONE000001", "UTWO000002")
				res, err := a.Decide(ctx, d("UONE000001"))
				must(t, err)
				if res.Complete {
					t.Fatalf("decided with approvals %v; UOLD000001 is no longer in the group", res.Call.Approvals)
				}
				// The card and the audit count only the approval that counts.
				if !slices.Equal(res.Call.Approvals, []string{"UONE000001"}) {
					t.Errorf("approvals %v, want [UONE000001]: UOLD000001's no longer counts", res.Call.Approvals)
				}
				log, err := w.store.(storetest.Store).AuditLog(ctx, 1)
				if err != nil || len(log) != 1 || log[0].Detail != "1 of 2 approvals" {
					t.Errorf("audit entry of the approval after a stale one = %+v, %v; want 1 of 2 approvals", log, err)
				}
				res, err = a.Decide(ctx, d("UTWO000002"))
				must(t, err)
				if !res.Complete {
					t.Errorf("two current members did not decide it: %+v", res.Call)
				}
				if n := w.restarts.n.Load(); n != 0 {
					t.Errorf("restart ran %d times before any resume", n)
				}
			})
		})
	}
}

// mutableGroups is a GroupResolver whose groups a test changes.
type mutableGroups struct {
	mu sync.Mutex
	m  map[string][]string
}

func (g *mutableGroups) Members(_ context.Context, id string) ([]string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.m[id]), nil
}

func (g *mutableGroups) set(id string, members ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.m[id] = members
}

// An edit into a two-person rule that no one but the editor could complete
// (the card's approvers and the rule's share no one else) is refused, not
// left pending until it expires; one that others can complete is taken.
func TestEditNoOneCouldCompleteIsRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, USRE000001, USRE000002], min_approvals: 2}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UDEV000002]}
`
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: []byte(`{"env":"prod"}`)})
	if !errors.Is(err, agent.ErrBadDecision) || !strings.Contains(err.Error(), "besides you only 0 person(s) may give one") {
		t.Fatalf("an edit no one could complete: %v, want it refused", err)
	}
	c, err := a.Call(ctx, p.ID)
	must(t, err)
	if c.Fingerprint != p.Fingerprint || c.Status != agent.CallPending {
		t.Errorf("the refused edit changed the call: %+v", c)
	}
	// The card's approvers and prod's share UONE and no one else; staging
	// edited to staging keeps it a one-approval call.
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UDEV000002", Args: []byte(`{"env":"qa"}`)}); err != nil {
		t.Errorf("an edit within the card's rule: %v", err)
	}
}

// twoOfThree asks two of three approvers to approve a restart.
const twoOfThree = `
policy:
  rules:
    - id: two
      tool: restart
      verdict: ask
      approvers: [UONE000001, UTWO000002, UTHREE0003]
      min_approvals: 2
`

// steps is a store that counts the calls read for a decision and the
// approvals and resumes written.
type steps struct {
	agent.Store
	reads, approvals, resumes atomic.Int64
}

func (s *steps) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	s.reads.Add(1)
	return s.Store.GetCallWith(ctx, id, kinds...)
}

func (s *steps) ApproveAudited(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	s.approvals.Add(1)
	return s.Store.ApproveAudited(ctx, callID, fingerprint, ap, drop, edit, need, d, fx)
}

func (s *steps) ApproveBegin(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	s.approvals.Add(1)
	return s.Store.ApproveBegin(ctx, callID, fingerprint, ap, drop, edit, need, d, fx, r)
}

func (s *steps) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	s.resumes.Add(1)
	return s.Store.BeginResume(ctx, runID, r)
}

// An approval that cannot meet the count begins no resume, so it takes no
// lease: while a turn of this process holds the conversation (a reply in
// the thread), the first approval of a remembered call is still one store
// step, with no read.
func TestCountedApprovalWhileTheConversationIsHeldIsOneStep(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			// A Cluster keeps no version of the records: every
			// approval reads the call.
			reads := map[bool]int64{false: 0, true: 1}[b.name == "redis-cluster"]
			ctx := t.Context()
			w := newWorld(t, b)
			w.policy = twoOfThree
			st := &steps{Store: w.store}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			_, _, held, err := a.AcceptTaking(ctx, request("is it done?"), false)
			if err != nil || held == nil {
				t.Fatalf("AcceptTaking = %v, %v; want the conversation held", held != nil, err)
			}
			defer a.ReleaseTaken(ctx, held)
			res, tk, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UONE000001"})
			if err != nil || res.Complete || tk != nil {
				t.Fatalf("first approval = %+v, taken %v, %v; want counted", res, tk != nil, err)
			}
			if n := st.reads.Load(); n != reads {
				t.Errorf("calls read to count the approval = %d, want %d", n, reads)
			}
			if n := st.approvals.Load(); n != 1 {
				t.Errorf("approval steps = %d, want 1", n)
			}
			c, err := w.store.GetCall(ctx, p.ID)
			if err != nil || c.Status != store.Pending || len(c.Approvals) != 1 {
				t.Errorf("the call = %s with %d approvals, %v; want pending with 1", c.Status, len(c.Approvals), err)
			}
		})
	}
}

// The approvals of a call that needs two, on the process that paused it,
// are each one store step with no read of the call: the first counted,
// the second deciding the call and beginning its resume. When the
// approvals changed elsewhere meanwhile the approval is judged again from
// the call the refused step returned (two steps, still no read); when the
// records changed, the call is read first, as always. Each way the tool
// runs once, with both approvals.
func TestTwoPersonApprovalsOfARememberedCallReadNothing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			for _, tc := range []struct {
				name string
				// meanwhile runs between the pause and the approvals.
				meanwhile func(t *testing.T, w *world, p agent.PendingCall)
				// reads and steps are the calls read and the approval
				// steps written, on a store that keeps a version of the
				// records (a Cluster keeps none: each approval reads
				// the call, and is one step).
				reads, steps int64
			}{
				{"remembered", nil, 0, 2},
				{"approved elsewhere", func(t *testing.T, w *world, p agent.PendingCall) {
					// Another process counts UTHREE0003's approval.
					res, err := w.agent().Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UTHREE0003"})
					if err != nil || res.Complete {
						t.Fatalf("approval on another process = %+v, %v; want counted", res, err)
					}
				}, 0, 2},
				{"records changed", func(t *testing.T, w *world, p agent.PendingCall) {
					if _, err := w.store.(approvals.RecordStore).PutRecord(ctx, store.Record{Kind: "unrelated", ID: "r1", Data: []byte(`{}`)}, -1); err != nil {
						t.Fatal(err)
					}
				}, 2, 3},
			} {
				t.Run(tc.name, func(t *testing.T) {
					w := newWorld(t, b)
					w.policy = twoOfThree
					st := &steps{Store: w.store}
					a := w.agentWith(st, w.rec)
					p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
					if tc.meanwhile != nil {
						tc.meanwhile(t, w, p)
					}
					d := func(who string) approvals.Decision {
						return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
					}
					approvers := []string{"UONE000001", "UTWO000002"}
					if tc.name == "approved elsewhere" {
						approvers = approvers[1:]
					}
					var taken *agent.Taken
					for i, who := range approvers {
						res, tk, err := a.DecideTaking(ctx, d(who))
						if last := i == len(approvers)-1; err != nil || res.Complete != last || (tk != nil) != last {
							t.Fatalf("approval by %s = %+v, taken %v, %v; want complete and taken %v", who, res, tk != nil, err, last)
						}
						taken = tk
					}
					reads, steps := tc.reads, tc.steps
					if b.name == "redis-cluster" {
						reads, steps = int64(len(approvers)), int64(len(approvers))
					}
					if n := st.reads.Load(); n != reads {
						t.Errorf("calls read to decide = %d, want %d", n, reads)
					}
					if n := st.approvals.Load(); n != steps {
						t.Errorf("approval steps = %d, want %d", n, steps)
					}
					w.model.Reply(fakeopenai.Text("Restarted."))
					out, err := a.ResumeTaken(ctx, taken)
					must(t, err)
					if out.Status != agent.Answered {
						t.Errorf("ResumeTaken = %+v, want answered", out)
					}
					if n := st.resumes.Load(); n != 0 {
						t.Errorf("resumes begun apart from the approval = %d, want none", n)
					}
					if n := w.restarts.n.Load(); n != 1 {
						t.Errorf("restart ran %d times, want once", n)
					}
					c, err := w.store.GetCall(ctx, p.ID)
					if err != nil || c.Status != store.Decided || len(c.Approvals) != 2 {
						t.Errorf("the call = %s with %d approvals, %v; want decided with 2", c.Status, len(c.Approvals), err)
					}
				})
			}
		})
	}
}
