package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// The decision that completes a step is audited and lists the conversation
// for takeover in the same store step, so a process that dies right after
// it, before the resume starts, is taken over and the call runs once.
func TestDecisionListsItsResumeForTakeover(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("resumed by the survivor"))
			a, d := w.doomed()
			res, err := a.Decide(context.Background(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete {
				t.Fatalf("Decide = %+v, %v; want complete", res, err)
			}
			d.kill() // before its Resume

			log, err := w.store.(interface {
				AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)
			}).AuditLog(t.Context(), 1)
			must(t, err)
			if len(log) != 1 || log[0].Action != "decide" || log[0].CallID != p.ID || log[0].Actor != "UAPPROVER1" || log[0].Outcome != store.OutcomeRecorded {
				t.Errorf("newest audit entry = %+v, want the decision by UAPPROVER1", log)
			}
			s := w.restart()
			out := takeOver(t, w, s, p.Conversation)
			if out.Status != agent.Answered || out.Answer != "resumed by the survivor" {
				t.Fatalf("TakeOver = %+v, want the resumed answer", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// A resume whose conversation another process holds waits for it, and
// runs the call once it is released.
func TestResumeWaitsForTheConversationsLease(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			key := "conv:" + p.Conversation
			ok, err := w.store.AcquireLease(ctx, key, "another-process", time.Minute)
			if err != nil || !ok {
				t.Fatalf("AcquireLease = %v, %v", ok, err)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete {
				t.Fatalf("Decide = %+v, %v; want complete", res, err)
			}
			done := make(chan agent.Outcome, 1)
			go func() {
				out, err := a.Resume(ctx, p.RunID)
				if err != nil {
					t.Errorf("Resume: %v", err)
				}
				done <- out
			}()
			if n := w.deploys.n.Load(); n != 0 {
				t.Fatalf("deploy ran %d times while another process held the conversation", n)
			}
			must(t, w.store.ReleaseLease(ctx, key, "another-process"))
			if out := <-done; out.Status != agent.Answered || out.Answer != "deployed" {
				t.Errorf("Resume = %+v, want the answer after the release", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// A decision made with DecideTaking that completes its step begins the
// step's resume in its own store step: ResumeTaken runs the approved call
// once and answers, with no BeginResume. A Taken given back leaves the step
// decided, its call unstarted and its claim free, for Resume to carry on.
func TestDecideTakingBeginsTheResume(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a, log := loggedAgent(w)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			log.take()
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete || taken == nil {
				t.Fatalf("DecideTaking = complete %v, taken %v, %v; want complete and taken", res.Complete, taken != nil, err)
			}
			out, err := a.ResumeTaken(ctx, taken)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "deployed" {
				t.Errorf("ResumeTaken = %+v, want the answer", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			calls, _ := log.take()
			if slices.Contains(calls, "BeginResume") || slices.Contains(calls, "BeginExecution") {
				t.Errorf("store calls of the decision and resume = %q, want no BeginResume or BeginExecution", calls)
			}
			if _, err := a.ResumeTaken(ctx, taken); err == nil {
				t.Error("ResumeTaken of a Taken that ran succeeded, want an error")
			}
			if out, err := a.Resume(ctx, p.RunID); err != nil || out.Status != agent.Idle {
				t.Errorf("Resume after ResumeTaken = %+v, %v; want Idle", out, err)
			}

			// Given back: nothing ran, and Resume runs the call once.
			w.model.Reply(fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"3"}`)))
			out, err = a.Run(ctx, request("deploy api 3"))
			must(t, err)
			if out.Status != agent.Paused {
				t.Fatalf("Run = %s, want paused", out.Status)
			}
			p2 := out.Pending[0]
			w.model.Reply(fakeopenai.Text("deployed 3"))
			res, taken, err = a.DecideTaking(ctx, approvals.Decision{CallID: p2.ID, Fingerprint: p2.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete || taken == nil {
				t.Fatalf("DecideTaking of the second call = complete %v, taken %v, %v", res.Complete, taken != nil, err)
			}
			a.ReleaseTaken(ctx, taken)
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times after a Taken was given back, want still once", n)
			}
			out, err = a.Resume(ctx, p2.RunID)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "deployed 3" {
				t.Errorf("Resume after ReleaseTaken = %+v, want the answer", out)
			}
			if n := w.deploys.n.Load(); n != 2 {
				t.Errorf("deploy ran %d times, want twice (once per call)", n)
			}
		})
	}
}

// A decision on a call this process paused is checked against the call as
// paused and the records its turn read, with no read of its own, where the
// store keeps a version of the records (the embedded store, one Redis
// node): the decision is
// written on the condition that the records are unchanged. A rule an admin
// added since makes the store refuse it, and the decision is then made
// from what is stored: refused by the new rule, nothing run. A call
// decided meanwhile by someone else is refused naming them.
func TestDecisionOnAPausedCallReadsNothing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a, log := loggedAgent(w)
			keeps := b.name == "redis" || b.name == "bolt"
			approve := func(p agent.PendingCall) (agent.DecideResult, *agent.Taken, error) {
				return a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			}
			pause := func(version string) agent.PendingCall {
				t.Helper()
				req := request("deploy api " + version)
				req.Conversation += "/" + version // each in a thread of its own
				return pauseWith(t, w, a, req, call("c"+version, "deploy", `{"service":"api","version":"`+version+`"}`))
			}

			p := pause("2")
			w.model.Reply(fakeopenai.Text("deployed"))
			log.take()
			res, taken, err := approve(p)
			if err != nil || !res.Complete || taken == nil {
				t.Fatalf("DecideTaking = complete %v, taken %v, %v", res.Complete, taken != nil, err)
			}
			calls, _ := log.take()
			want := []string{"GetCallWith", "DecideBegin"}
			if keeps {
				want = []string{"DecideBegin if records"}
			}
			if !slices.Equal(calls, want) {
				t.Errorf("store calls of the decision = %q, want %q", calls, want)
			}
			if out, err := a.ResumeTaken(ctx, taken); err != nil || out.Status != agent.Answered {
				t.Fatalf("ResumeTaken = %+v, %v; want answered", out, err)
			}

			// A rule added after the pause denies the call.
			p = pause("3")
			if _, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "freeze", Tool: "deploy", Verdict: approvals.Deny, Reason: "deploys are frozen"}); err != nil {
				t.Fatal(err)
			}
			log.take()
			_, taken, err = approve(p)
			if !errors.Is(err, approvals.ErrPolicyDenied) || taken != nil {
				t.Errorf("DecideTaking after a deny rule was added = taken %v, %v; want refused by the policy", taken != nil, err)
			}
			calls, _ = log.take()
			if keeps && !slices.Equal(calls, []string{"DecideBegin if records", "GetCallWith"}) {
				t.Errorf("store calls of the refused decision = %q, want the conditional decision refused, then the read", calls)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once (the first call only)", n)
			}
			if err := w.engine.RemoveRule(ctx, "UADMIN0001", "freeze"); err != nil {
				t.Fatal(err)
			}

			// Decided meanwhile by someone else: refused, naming them.
			p = pause("4")
			if _, _, err := w.store.DecideAudited(ctx, p.ID, p.Fingerprint, store.Decision{Kind: "deny", Decider: "UOTHER0001", At: time.Now()}, store.Effects{}); err != nil {
				t.Fatal(err)
			}
			var refused *approvals.RefusedError
			if _, _, err := approve(p); !errors.As(err, &refused) || refused.DecidedBy != "UOTHER0001" {
				t.Errorf("DecideTaking of a call decided by another = %v, want refused naming UOTHER0001", err)
			}
		})
	}
}

// lostAnswers makes the store do a DecideBegin or BeginResume and then
// loses its answer, as a connection reset after the step would: once for
// each count set.
type lostAnswers struct {
	storetest.Store
	decide, resume atomic.Int32
	// unsent fails DecideBegin before it reaches the store.
	unsent atomic.Int32
	// outage fails as many BeginResume before they reach the store (it is
	// unreachable for a while); with lapse, the claims of the attempt
	// asked again lapse meanwhile.
	outage atomic.Int32
	lapse  bool
}

var errLostAnswer = errors.New("read tcp: connection reset by peer")

func (s *lostAnswers) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if s.unsent.Add(-1) >= 0 {
		return store.Call{}, false, store.ResumeStart{}, errLostAnswer
	}
	c, complete, rs, err := s.Store.DecideBegin(ctx, id, fp, d, fx, r)
	if err == nil && s.decide.Add(-1) >= 0 {
		return store.Call{}, false, store.ResumeStart{}, errLostAnswer
	}
	return c, complete, rs, err
}

func (s *lostAnswers) ApproveBegin(ctx context.Context, id, fp string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, complete, rs, err := s.Store.ApproveBegin(ctx, id, fp, ap, drop, edit, need, d, fx, r)
	if err == nil && s.decide.Add(-1) >= 0 {
		return store.Call{}, false, store.ResumeStart{}, errLostAnswer
	}
	return c, complete, rs, err
}

func (s *lostAnswers) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if s.outage.Load() > 0 {
		if s.outage.Add(-1) == 0 && s.lapse {
			if err := s.Store.ReleaseClaim(ctx, runID, r.Owner); err != nil {
				return store.ResumeStart{}, err
			}
			if r.Lease != "" {
				if err := s.Store.ReleaseLease(ctx, r.Lease, r.Owner); err != nil {
					return store.ResumeStart{}, err
				}
			}
		}
		return store.ResumeStart{}, errLostAnswer
	}
	rs, err := s.Store.BeginResume(ctx, runID, r)
	if err == nil && s.resume.Add(-1) >= 0 {
		return store.ResumeStart{}, errLostAnswer
	}
	return rs, err
}

// deployedOnce checks a resume that ran its deploy: answered, the deploy
// run once, and its result given to the model.
func deployedOnce(t *testing.T, w *world, out agent.Outcome) {
	t.Helper()
	if out.Status != agent.Answered || out.Answer != "deployed" {
		t.Errorf("the resume = %+v, want the answer", out)
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	if got := toolResults(t, w.model); len(got) != 1 || strings.Contains(got[0], "outcome unknown") {
		t.Errorf("the model read %q, want the tool's result", got)
	}
}

// A decision, or a resume, whose store step claimed the resume and marked
// the approved call to run but whose answer was lost is asked again for
// that claim, while the store stays unreachable for a while too, until
// the store answers: the decision stands and its call runs once, with its
// result, whether the step's claim is still held then or lapsed meanwhile
// (never "outcome unknown" for a call that never ran, nor "could not
// record" for a decision that was). A resume may wait past its claim's
// lapse: the call its step marked as started is marked back and run.
func TestLostAnswerOfAClaimStillRunsTheCall(t *testing.T) {
	for _, b := range backends(t) {
		for _, lost := range []string{"decision", "resume"} {
			for _, o := range []struct {
				outage int32
				lapse  bool
			}{{0, false}, {3, false}, {3, true}} {
				lapse := o.lapse
				t.Run(fmt.Sprintf("%s/%s/outage=%d/lapse=%v", b.name, lost, o.outage, lapse), func(t *testing.T) {
					ctx := t.Context()
					w := newWorld(t, b)
					st := &lostAnswers{Store: w.store.(storetest.Store), lapse: lapse}
					a := w.agentWith(st, w.rec)
					p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
					w.model.Reply(fakeopenai.Text("deployed"))
					d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}
					var out agent.Outcome
					switch lost {
					case "decision":
						st.decide.Store(1)
						st.outage.Store(o.outage)
						res, taken, err := a.DecideTaking(ctx, d)
						if err != nil || !res.Complete || res.Call.Status != agent.CallDecided {
							t.Fatalf("DecideTaking with its answer lost in an outage = %+v, %v; want the decision recorded", res, err)
						}
						if lapse != (taken == nil) {
							t.Fatalf("the resume taken: %v; want it taken only while the claim is held", taken != nil)
						}
						out, err = resumeTakenOr(ctx, a, taken, p.RunID)
						must(t, err)
					case "resume":
						res, err := a.Decide(ctx, d)
						if err != nil || !res.Complete {
							t.Fatalf("Decide = %+v, %v", res, err)
						}
						st.resume.Store(1)
						st.outage.Store(o.outage)
						out, err = a.Resume(ctx, p.RunID)
						must(t, err)
					}
					deployedOnce(t, w, out)
				})
			}
		}
	}
}

// The same, for the decision that completes a step of two calls when the
// other, approved earlier, is the one its store step marked as started:
// that call runs once too, and is not reported as of unknown outcome.
func TestLostDecisionOfTheSecondCall(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			st := &lostAnswers{Store: w.store.(storetest.Store), lapse: true}
			a := w.agentWith(st, w.rec)
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`), call("c2", "restart", `{"env":"staging"}`)))
			out, err := a.Run(ctx, request("please"))
			must(t, err)
			if len(out.Pending) != 2 {
				t.Fatalf("paused on %d calls, want 2", len(out.Pending))
			}
			p1, p2 := out.Pending[0], out.Pending[1]
			_, err = a.Decide(ctx, approvals.Decision{CallID: p1.ID, Fingerprint: p1.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			w.model.Reply(fakeopenai.Text("deployed"))
			st.decide.Store(1)
			st.outage.Store(3)
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p2.ID, Fingerprint: p2.Fingerprint, Kind: approvals.Reject, Reason: "not now", Decider: "UAPPROVER1"})
			if err != nil || !res.Complete || taken != nil {
				t.Fatalf("DecideTaking = %+v, taken %v, %v; want the decision recorded, its claim lapsed", res, taken != nil, err)
			}
			out, err = a.Resume(ctx, p1.RunID)
			must(t, err)
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			if got := toolResults(t, w.model); len(got) != 2 || strings.Contains(strings.Join(got, "|"), "outcome unknown") {
				t.Errorf("the model read %q, want the deploy's result and the rejection", got)
			}
		})
	}
}

// An approval counted toward a call that needs two, whose store step's
// answer was lost while the store was unreachable for a while, is found
// counted once the store answers: the approver is told it counted (not
// that the store failed), and the second approval runs the call once.
func TestLostCountedApproval(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.policy = twoOfThree
			st := &lostAnswers{Store: w.store.(storetest.Store)}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
			d := func(who string) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
			}
			st.decide.Store(1)
			st.outage.Store(3)
			res, taken, err := a.DecideTaking(ctx, d("UONE000001"))
			if err != nil || res.Complete || taken != nil || res.Call.Status != agent.CallPending || len(res.Call.Approvals) != 1 {
				t.Fatalf("an approval counted with its answer lost = %+v, taken %v, %v; want it counted, the call pending", res, taken != nil, err)
			}
			w.model.Reply(fakeopenai.Text("restarted"))
			res, taken, err = a.DecideTaking(ctx, d("UTWO000002"))
			if err != nil || !res.Complete {
				t.Fatalf("the second approval = %+v, %v; want the step complete", res, err)
			}
			out, err := resumeTakenOr(ctx, a, taken, p.RunID)
			must(t, err)
			if out.Status != agent.Answered || w.restarts.n.Load() != 1 {
				t.Errorf("the resume = %+v, restart ran %d times; want it answered, once", out, w.restarts.n.Load())
			}
		})
	}
}

// A decision whose store step's answer was lost, when the store does not
// answer again in time to tell whether it was recorded, is reported as
// unconfirmed: neither as recorded nor as still pending.
func TestLostDecisionUnconfirmed(t *testing.T) {
	defer agent.SetLostDecisionWait(300 * time.Millisecond)()
	ctx := t.Context()
	w := newWorld(t, backends(t)[0])
	st := &lostAnswers{Store: w.store.(storetest.Store)}
	a := w.agentWith(st, w.rec)
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	st.decide.Store(1)
	st.outage.Store(1 << 20)
	_, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	if !errors.Is(err, agent.ErrUnconfirmed) || taken != nil {
		t.Fatalf("DecideTaking with the store gone after its step = taken %v, %v; want ErrUnconfirmed", taken != nil, err)
	}
}

// An unconfirmed decision's Recover, run once the store answers again,
// gives back the claim and the mark its step took, whether its claim
// still stands or lapsed meanwhile: the resume that follows runs the
// call, once, instead of reporting its outcome as unknown.
func TestUnconfirmedDecisionRecovered(t *testing.T) {
	defer agent.SetLostDecisionWait(300 * time.Millisecond)()
	for _, b := range backends(t) {
		for _, lapsed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/claim lapsed %v", b.name, lapsed), func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				st := &lostAnswers{Store: w.store.(storetest.Store), lapse: lapsed}
				a := w.agentWith(st, w.rec)
				p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
				st.decide.Store(1)
				st.outage.Store(1 << 20)
				_, _, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				var u *agent.UnconfirmedError
				if !errors.As(err, &u) || u.Recover == nil {
					t.Fatalf("DecideTaking with the store gone after its step = %v; want an UnconfirmedError with its Recover", err)
				}
				if lapsed {
					st.outage.Store(2) // the second ask finds the claim lapsed
				} else {
					st.outage.Store(0)
				}
				if !u.Recover(ctx) {
					t.Error("Recover found the decision not recorded, or its step not complete")
				}
				w.model.Reply(fakeopenai.Text("deployed"))
				out, err := a.Resume(ctx, p.RunID)
				must(t, err)
				deployedOnce(t, w, out)
				if got := toolResults(t, w.model); len(got) != 1 || strings.Contains(got[0], "outcome unknown") {
					t.Errorf("the model read %q, want the deploy's result", got)
				}
			})
		}
	}
}

// An Always allow whose answer was lost, found made by Recover, saves its
// standing rule, once, as a confirmed one does: the card says calls like
// it are allowed from now on.
func TestUnconfirmedAlwaysAllowSavesItsRule(t *testing.T) {
	defer agent.SetLostDecisionWait(300 * time.Millisecond)()
	for _, lapsed := range []bool{false, true} {
		t.Run(fmt.Sprintf("claim lapsed %v", lapsed), func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, backends(t)[0])
			st := &lostAnswers{Store: w.store.(storetest.Store), lapse: lapsed}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			st.decide.Store(1)
			st.outage.Store(1 << 20)
			_, _, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
			var u *agent.UnconfirmedError
			if !errors.As(err, &u) {
				t.Fatalf("DecideTaking with the store gone after its step = %v; want an UnconfirmedError", err)
			}
			if lapsed {
				st.outage.Store(2)
			} else {
				st.outage.Store(0)
			}
			if !u.Recover(ctx) {
				t.Fatal("Recover found the decision not recorded")
			}
			w.model.Reply(fakeopenai.Text("restarted"))
			_, err = a.Resume(ctx, p.RunID)
			must(t, err)
			if n := len(w.restarts.Args()); n != 1 {
				t.Fatalf("restart ran %d times, want once", n)
			}
			rules, err := w.engine.StandingRules(ctx, "")
			must(t, err)
			if len(rules) != 1 || rules[0].Tool != "restart" || rules[0].CreatedBy != "UAPPROVER1" {
				t.Errorf("standing rules %+v; want the one the Always allow made", rules)
			}
		})
	}
}

// A decision whose store step failed before it wrote anything is not
// taken for recorded because the step is complete (another decider
// completed it) and its resume could be claimed: asked again, only the
// failed attempt's own claim would count, and it took none.
func TestFailedDecisionIsNotTakenForAnother(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			st := &lostAnswers{Store: w.store.(storetest.Store)}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			other := w.agentWith(w.store, w.rec)
			if res, err := other.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"}); err != nil || !res.Complete {
				t.Fatalf("the other decider = %+v, %v", res, err)
			}
			st.unsent.Store(1)
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Refuse, Decider: "UAPPROVER1"})
			if err == nil || taken != nil {
				t.Fatalf("a decision that never reached the store = %+v, taken %v, %v; want an error and nothing taken", res, taken != nil, err)
			}
			w.model.Reply(fakeopenai.Text("deployed"))
			out, err := a.Resume(ctx, p.RunID)
			must(t, err)
			if out.Status != agent.Answered || w.deploys.n.Load() != 1 {
				t.Errorf("the resume of the other decider's approval = %+v, deploy ran %d times; want it answered, once", out, w.deploys.n.Load())
			}
		})
	}
}

// lostCommit makes the store save a commit that creates a run and then
// loses its answer, once: a Redis client that sends the commit again finds
// the lease it released or the run it created, and answers with an error.
type lostCommit struct {
	storetest.Store
	lose atomic.Int32
}

func (s *lostCommit) CommitTurn(ctx context.Context, c store.Commit) error {
	err := s.Store.CommitTurn(ctx, c)
	if err == nil && c.Run != nil && s.lose.Add(-1) >= 0 {
		return fmt.Errorf("commit turn of %s: %w", c.Key, store.ErrNotHolder)
	}
	return err
}

// A pause whose store step was made but answered with an error is a
// pause: its cards stay live (not "could not be saved") and an approval
// runs the call, once.
func TestPauseSavedDespiteAnErrorIsAPause(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			st := &lostCommit{Store: w.store.(storetest.Store)}
			st.lose.Store(1)
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if err != nil || !res.Complete {
				t.Fatalf("Decide = %+v, %v", res, err)
			}
			out, err := a.Resume(ctx, res.Call.RunID)
			must(t, err)
			if out.Status != agent.Answered || w.deploys.n.Load() != 1 {
				t.Errorf("the resume = %+v, deploy ran %d times; want answered, once", out, w.deploys.n.Load())
			}
		})
	}
}

// A decision on arguments other than the call's, or one made at or past
// the call's deadline, is refused from the call as read, without asking
// the store to record it: the store is asked for the call and nothing
// else, with Decide and with DecideTaking (whose own check of the call as
// this process paused it sends it to that read).
func TestStaleOrLateDecisionIsNotSent(t *testing.T) {
	for _, b := range backends(t) {
		for _, tt := range []struct {
			name string
			late bool
			want error
		}{
			{"other arguments", false, approvals.ErrFingerprintMismatch},
			{"past the deadline", true, approvals.ErrExpired},
		} {
			for _, taking := range []bool{false, true} {
				name := b.name + "/" + tt.name + "/Decide"
				if taking {
					name += "Taking"
				}
				t.Run(name, func(t *testing.T) {
					ctx := t.Context()
					w := newWorld(t, b)
					a, log := loggedAgent(w)
					p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
					d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}
					if tt.late {
						w.advance(p.ExpiresAt.Sub(w.clock()))
					} else {
						d.Fingerprint = strings.Repeat("0", 64)
					}
					log.take()
					var err error
					if taking {
						_, _, err = a.DecideTaking(ctx, d)
					} else {
						_, err = a.Decide(ctx, d)
					}
					if !errors.Is(err, tt.want) {
						t.Errorf("got %v, want %v", err, tt.want)
					}
					if calls, _ := log.take(); !slices.Equal(calls, []string{"GetCallWith"}) {
						t.Errorf("store calls of the refused decision = %q, want only the read of the call", calls)
					}
				})
			}
		}
	}
}

// resumedMeanwhile is lostAnswers where, before the decider's store
// answers again, another process (C) claims the run, marks its call as
// started (its tool runs) and dies, its claim free again.
type resumedMeanwhile struct {
	*lostAnswers
	once    atomic.Bool
	started atomic.Int32
}

func (s *resumedMeanwhile) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if r.Again && s.once.CompareAndSwap(false, true) {
		rs, err := s.Store.BeginResume(ctx, runID, store.ResumeBegin{Conversation: r.Conversation, Owner: "C", TTL: r.TTL, Start: r.Start, Nonce: "c-attempt"})
		if err != nil || !rs.Claimed || rs.Started == "" {
			return store.ResumeStart{}, fmt.Errorf("C's claim = %+v, %v; want it claimed with a call marked", rs, err)
		}
		s.started.Add(1)
		if err := s.Store.ReleaseClaim(ctx, runID, "C"); err != nil {
			return store.ResumeStart{}, err
		}
		if err := s.Store.ReleaseLease(ctx, store.TurnLease(r.Conversation), "C"); err != nil {
			return store.ResumeStart{}, err
		}
	}
	return s.lostAnswers.BeginResume(ctx, runID, r)
}

// A decision whose store step's answer was lost, while another process
// held the conversation (so the step claimed nothing), and whose call
// another process started before the store answered again: the decider
// does not take that process's mark back, so the call is not run a second
// time; the model is told its outcome is unknown.
func TestLostDecisionLeavesAnotherResumersMark(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			st := &resumedMeanwhile{lostAnswers: &lostAnswers{Store: w.store.(storetest.Store)}}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			if ok, err := st.Store.AcquireLease(ctx, store.TurnLease(p.Conversation), "C", time.Minute); err != nil || !ok {
				t.Fatalf("C's lease = %v, %v", ok, err)
			}
			st.decide.Store(1)
			w.model.Reply(fakeopenai.Text("it may have run"))
			if _, _, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatalf("DecideTaking = %v, want the decision found recorded", err)
			}
			if n := st.started.Load(); n != 1 {
				t.Fatalf("C started the call %d times, want once", n)
			}
			_, err := a.Resume(ctx, p.RunID)
			must(t, err)
			if n := w.deploys.n.Load(); n != 0 {
				t.Errorf("deploy ran %d times here after C started it, want never", n)
			}
			if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "outcome unknown") {
				t.Errorf("the model read %q, want the deploy's outcome unknown", got)
			}
		})
	}
}
