package agent_test

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

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// A step with an allowed, a denied and an asked call pauses; after a
// restart the decision resumes it and the model gets the three results in
// order.
func TestParallelCallsPauseRestartResume(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			w.model.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{
				call("c1", "read_file", `{"path":"/etc/motd"}`),
				call("c2", "drop_db", `{"name":"prod"}`),
				call("c3", "deploy", `{"version":"1.2.3", "service":"api"}`),
			}, ArgChunks: 3})
			out, err := w.agent().Run(ctx, request("deploy api 1.2.3"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 1 {
				t.Fatalf("got status %s with %d pending, want paused with 1", out.Status, len(out.Pending))
			}
			p := out.Pending[0]
			if p.Tool != "deploy" || p.RuleID != "deploys" || !p.FourEyes || len(p.Approvers) != 2 {
				t.Errorf("got pending %+v, want deploy under rule deploys with two approvers and four eyes", p.Call)
			}
			if string(p.Args) != `{"service":"api","version":"1.2.3"}` {
				t.Errorf("got canonical args %s", p.Args)
			}
			if got := w.deploys.n.Load(); got != 0 {
				t.Fatalf("deploy ran %d times before any decision", got)
			}
			if got := w.reads.n.Load(); got != 1 {
				t.Fatalf("read_file ran %d times, want 1 (allowed)", got)
			}

			a := w.restart()
			w.model.Reply(fakeopenai.Text("Deployed api 1.2.3."))
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if !res.Complete {
				t.Fatal("the only decision of the step did not complete it")
			}
			out, err = a.Resume(ctx, res.Call.RunID)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "Deployed api 1.2.3." {
				t.Fatalf("got %s %q after resume, want the answer", out.Status, out.Answer)
			}
			want := []string{
				"c1: file contents",
				"c2: Dropping databases is never allowed from chat.",
				"c3: deployed",
			}
			got := toolResults(t, w.model)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("got tool results\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			if args := w.deploys.Args(); len(args) != 1 || args[0] != `{"service":"api","version":"1.2.3"}` {
				t.Errorf("deploy ran with %v, want the approved arguments", args)
			}
			// A second resume, here or in another process, does nothing.
			a = w.restart()
			again, err := a.Resume(ctx, res.Call.RunID)
			must(t, err)
			if again.Status != agent.Idle {
				t.Errorf("got %s from a second resume, want idle", again.Status)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times after a second resume, want 1", n)
			}
			// The conversation continues with its history.
			w.model.Reply(fakeopenai.Text("You're welcome."))
			_, err = a.Run(ctx, request("thanks"))
			must(t, err)
			reqs := w.model.Requests()
			last := reqs[len(reqs)-1]
			if n := len(last.Messages); n != 8 {
				t.Errorf("got %d messages in the follow-up request, want 8 (system, user, assistant, 3 tools, assistant, user)", n)
			}
		})
	}
}

// pauseOne runs a turn whose single call needs approval and returns it.
func pauseOne(t *testing.T, w *world, a *agent.Agent, tc fakeopenai.ToolCall) agent.PendingCall {
	t.Helper()
	return pauseWith(t, w, a, request("please"), tc)
}

// approvedDeploy pauses on a deploy of api 2 that UAPPROVER1 then
// approves; it returns the paused call.
func approvedDeploy(t *testing.T, w *world, a *agent.Agent) agent.PendingCall {
	t.Helper()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	_, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	return p
}

// pauseWith runs req, the model asking for tc, and returns the one call
// the run paused on.
func pauseWith(t *testing.T, w *world, a *agent.Agent, req agent.Request, tc fakeopenai.ToolCall) agent.PendingCall {
	t.Helper()
	w.model.Reply(fakeopenai.ToolCalls(tc))
	out, err := a.Run(context.Background(), req)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("got %s with %d pending, want one paused call", out.Status, len(out.Pending))
	}
	return out.Pending[0]
}

// Every kind of decision gives the model the result SPEC section 2 says,
// and runs the tool only when it should.
func TestDecisionKinds(t *testing.T) {
	b := backends(t)[0]
	tests := []struct {
		name     string
		tool     fakeopenai.ToolCall
		decision approvals.Decision
		wantRuns int64
		wantArgs string
		want     []string // substrings of the tool result
	}{
		{name: "approve", tool: call("c1", "deploy", `{"service":"api","version":"2"}`),
			decision: approvals.Decision{Kind: approvals.Approve}, wantRuns: 1, wantArgs: `{"service":"api","version":"2"}`, want: []string{"deployed"}},
		{name: "edit", tool: call("c1", "deploy", `{"service":"api","version":"2"}`),
			decision: approvals.Decision{Kind: approvals.Edit, Args: json.RawMessage(`{"service":"api","version":"1"}`)}, wantRuns: 1,
			wantArgs: `{"service":"api","version":"1"}`, want: []string{"edited the arguments", "Do not re-issue the original", `{"service":"api","version":"1"}`, "deployed"}},
		{name: "deny", tool: call("c1", "deploy", `{"service":"api","version":"2"}`),
			decision: approvals.Decision{Kind: approvals.Refuse}, want: []string{"not performed", "denied", "Do not retry"}},
		{name: "reject", tool: call("c1", "deploy", `{"service":"api","version":"2"}`),
			decision: approvals.Decision{Kind: approvals.Reject, Reason: "Not during the freeze, use 1.9 next week."},
			want:     []string{"UAPPROVER1", "Not during the freeze, use 1.9 next week."}},
		{name: "respond", tool: call("c1", "ask_human", `{"question":"Which region?"}`),
			decision: approvals.Decision{Kind: approvals.Respond, Answer: "eu-west-1"}, want: []string{"User UAPPROVER1 answered: eu-west-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, tt.tool)
			d := tt.decision
			d.CallID, d.Fingerprint, d.Decider = p.ID, p.Fingerprint, "UAPPROVER1"
			w.model.Reply(fakeopenai.Text("done"))
			res, err := a.Decide(ctx, d)
			must(t, err)
			if _, err := a.Resume(ctx, res.Call.RunID); err != nil {
				t.Fatal(err)
			}
			if got := w.deploys.n.Load(); got != tt.wantRuns {
				t.Errorf("deploy ran %d times, want %d", got, tt.wantRuns)
			}
			if tt.wantArgs != "" {
				if args := w.deploys.Args(); len(args) != 1 || args[0] != tt.wantArgs {
					t.Errorf("deploy ran with %v, want %s", args, tt.wantArgs)
				}
			}
			results := toolResults(t, w.model)
			if len(results) != 1 {
				t.Fatalf("got %d tool results, want 1", len(results))
			}
			for _, s := range tt.want {
				if !strings.Contains(results[0], s) {
					t.Errorf("got result %q, want it to contain %q", results[0], s)
				}
			}
		})
	}
}

// A remembered call is not asked again in that channel.
func TestRememberMakesAStandingRule(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.cfg.RememberTTL = 24 * time.Hour
	a := w.agent()
	// restart has no approvers list: anyone but nobody special.
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	w.model.Reply(fakeopenai.Text("restarted"))
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
	must(t, err)
	_, err = a.Resume(ctx, res.Call.RunID)
	must(t, err)
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "restart", `{"env":"staging"}`)), fakeopenai.Text("again"))
	out, err := a.Run(ctx, request("once more"))
	must(t, err)
	if out.Status != agent.Answered {
		t.Fatalf("got %s, want the remembered call to run without asking", out.Status)
	}
	if n := w.restarts.n.Load(); n != 2 {
		t.Errorf("restart ran %d times, want 2", n)
	}
	// Another channel is still asked.
	w.model.Reply(fakeopenai.ToolCalls(call("c3", "restart", `{"env":"staging"}`)))
	req := request("elsewhere")
	req.Channel, req.Conversation = "C2", "T1/C2/1"
	out, err = a.Run(ctx, req)
	must(t, err)
	if out.Status != agent.Paused {
		t.Errorf("got %s in another channel, want paused", out.Status)
	}
	// After RememberTTL the rule is gone and the call is asked again.
	w.advance(25 * time.Hour)
	w.model.Reply(fakeopenai.ToolCalls(call("c4", "restart", `{"env":"staging"}`)))
	req = request("a day later")
	req.Conversation = "T1/C1/2"
	out, err = a.Run(ctx, req)
	must(t, err)
	if out.Status != agent.Paused {
		t.Errorf("got %s after the standing rule expired, want paused", out.Status)
	}
}

// An Always allow on a second card of the tool, whose call the first
// one's standing rule allows by now, approves it: it is allowed from now
// on already, and no second rule is saved.
func TestRememberOfACallAStandingRuleAllowsByNow(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p1 := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	req := request("another thread")
	req.Conversation = "T1/C1/1700000000.000200"
	p2 := pauseWith(t, w, a, req, call("c2", "restart", `{"env":"staging"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p1.ID, Fingerprint: p1.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
	must(t, err)
	res, err := a.Decide(ctx, approvals.Decision{CallID: p2.ID, Fingerprint: p2.Fingerprint, Kind: approvals.Remember, Decider: "UOTHER2"})
	if err != nil {
		t.Fatalf("Always allow on the second card: %v (%s); want it approved", err, agent.Detail(err))
	}
	if res.Call.Status != agent.CallDecided || res.Call.Decision == nil || res.Call.Decision.Kind != approvals.Approve || res.Call.Decision.Decider != "UOTHER2" {
		t.Errorf("the second call is %s, decided %+v; want approved by UOTHER2", res.Call.Status, res.Call.Decision)
	}
	rules, err := w.engine.StandingRules(ctx, "C1")
	must(t, err)
	if len(rules) != 1 {
		t.Errorf("%d standing rules saved; want the first click's only", len(rules))
	}
}

// Refused decisions change nothing and say why.
func TestRefusedDecisions(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	ok := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}
	with := func(f func(d *approvals.Decision)) approvals.Decision { d := ok; f(&d); return d }
	tests := []struct {
		name string
		d    approvals.Decision
		want error
	}{
		{"unknown call", with(func(d *approvals.Decision) { d.CallID = "0000000000000000.9" }), approvals.ErrUnknownCall},
		{"wrong fingerprint", with(func(d *approvals.Decision) { d.Fingerprint = strings.Repeat("0", 64) }), approvals.ErrFingerprintMismatch},
		{"not an approver", with(func(d *approvals.Decision) { d.Decider = "USTRANGER3" }), approvals.ErrNotApprover},
		{"four eyes", with(func(d *approvals.Decision) { d.Decider = "UREQUESTER" }), approvals.ErrNotApprover},
		{"reject without reason", with(func(d *approvals.Decision) { d.Kind = approvals.Reject }), agent.ErrBadDecision},
		{"remember a four-eyes call", with(func(d *approvals.Decision) { d.Kind = approvals.Remember }), agent.ErrBadDecision},
		{"respond to a non-question", with(func(d *approvals.Decision) { d.Kind = approvals.Respond; d.Answer = "x" }), agent.ErrBadDecision},
		{"edit with invalid JSON", with(func(d *approvals.Decision) { d.Kind = approvals.Edit; d.Args = json.RawMessage(`{"service":`) }), approvals.ErrInvalidArgs},
		{"edit failing the schema", with(func(d *approvals.Decision) { d.Kind = approvals.Edit; d.Args = json.RawMessage(`{"service":"api"}`) }), approvals.ErrInvalidArgs},
		{"a caller's clock does not reopen an expired call", with(func(d *approvals.Decision) { d.At = p.CreatedAt }), approvals.ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == approvals.ErrExpired {
				late := p.ExpiresAt.Sub(w.clock()) + time.Second
				w.advance(late)
				defer w.advance(-late)
			}
			_, err := a.Decide(ctx, tt.d)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got error %v, want %v", err, tt.want)
			}
			c, err := a.Call(ctx, p.ID)
			must(t, err)
			if c.Status != agent.CallPending {
				t.Errorf("got status %s after a refused decision, want pending", c.Status)
			}
		})
	}
	// The first real decision wins; the second is told who decided.
	if _, err := a.Decide(ctx, ok); err != nil {
		t.Fatal(err)
	}
	_, err := a.Decide(ctx, with(func(d *approvals.Decision) { d.Decider = "UOTHER2"; d.Kind = approvals.Refuse }))
	var refused *approvals.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, approvals.ErrAlreadyDecided) {
		t.Fatalf("got %v for a second decision, want ErrAlreadyDecided", err)
	}
	if refused.DecidedBy != "UAPPROVER1" || refused.Kind != approvals.Approve {
		t.Errorf("got decided by %q (%s), want UAPPROVER1 (approve)", refused.DecidedBy, refused.Kind)
	}
}

// failingRules fails the writes of the policy's records (standing rules).
type failingRules struct{ storetest.Store }

func (failingRules) PutRecord(context.Context, store.Record, int64) (store.Record, error) {
	return store.Record{}, errors.New("injected: records unwritable")
}

// An Always-allow decision whose standing rule cannot be saved approves the
// call all the same, and says that the rule was not saved.
func TestRememberWhoseRuleCannotBeSaved(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.store = failingRules{w.store.(storetest.Store)}
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
	must(t, err)
	if !res.Complete || !res.Unremembered {
		t.Errorf("Decide = complete %v, unremembered %v; want the call approved and the rule reported unsaved", res.Complete, res.Unremembered)
	}
	p2 := pauseOne(t, w, a, call("c2", "restart", `{"env":"dev"}`))
	if res, err := a.Decide(ctx, approvals.Decision{CallID: p2.ID, Fingerprint: p2.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil || res.Unremembered {
		t.Errorf("an approval = unremembered %v, %v; want nothing to remember", res.Unremembered, err)
	}
}

// An edit cannot turn a call into one the policy denies.
func TestEditIsJudgedAgain(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UAPPROVER1", Args: json.RawMessage(`{"env":"prod"}`)})
	if !errors.Is(err, approvals.ErrPolicyDenied) || !strings.Contains(err.Error(), "No restarts in prod.") {
		t.Fatalf("got %v, want a policy denial with the rule's reason", err)
	}
}

// An edit into arguments the edge cannot show whole is refused: no one
// could read what they approve. (Slack bounds what an edit form takes, so
// this guards the agent, not a path a person can take from Slack.)
func TestEditIntoArgumentsTooLongToShowIsRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.cfg.ShownInFull = func(args json.RawMessage, _ bool) bool { return !strings.Contains(string(args), "long") }
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UAPPROVER1", Args: json.RawMessage(`{"env":"long"}`)})
	if !errors.Is(err, approvals.ErrInvalidArgs) || !strings.Contains(err.Error(), "too long to be shown in full") {
		t.Fatalf("got %v, want the edit refused as too long to show", err)
	}
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UAPPROVER1", Args: json.RawMessage(`{"env":"dev"}`)}); err != nil {
		t.Errorf("an edit that can be shown: %v", err)
	}
}

// Fifty deciders at once: one wins, the tool runs once, one resume happens.
func TestConcurrentDecisionsRunOnce(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("done"))
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins, completes, resumes := 0, 0, 0
			for i := 0; i < 50; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					decider := "UAPPROVER1"
					if i%2 == 1 {
						decider = "UOTHER2"
					}
					res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: decider})
					if err != nil {
						if !errors.Is(err, approvals.ErrAlreadyDecided) {
							t.Errorf("decider %d: %v", i, err)
						}
						return
					}
					out, err := a.Resume(ctx, res.Call.RunID)
					mu.Lock()
					defer mu.Unlock()
					wins++
					if res.Complete {
						completes++
					}
					if err == nil && out.Status == agent.Answered {
						resumes++
					}
				}(i)
			}
			wg.Wait()
			if wins != 1 || completes != 1 || resumes != 1 {
				t.Errorf("got %d wins, %d completes, %d resumes; want 1 each", wins, completes, resumes)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// The turn resumes after the last call of a step, exactly once.
func TestResumeAfterLastOfSeveralCalls(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(
		call("c1", "deploy", `{"service":"a","version":"1"}`),
		call("c2", "deploy", `{"service":"b","version":"1"}`),
	))
	out, err := a.Run(ctx, request("deploy both"))
	must(t, err)
	if len(out.Pending) != 2 {
		t.Fatalf("got %d pending, want 2", len(out.Pending))
	}
	first, err := a.Decide(ctx, approvals.Decision{CallID: out.Pending[0].ID, Fingerprint: out.Pending[0].Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if first.Complete {
		t.Fatal("the first of two decisions completed the step")
	}
	if o, err := a.Resume(ctx, out.RunID); err != nil || o.Status != agent.Idle {
		t.Fatalf("got %s, %v resuming with a call pending; want idle", o.Status, err)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Fatalf("deploy ran %d times before the step was decided", n)
	}
	w.model.Reply(fakeopenai.Text("one deployed"))
	second, err := a.Decide(ctx, approvals.Decision{CallID: out.Pending[1].ID, Fingerprint: out.Pending[1].Fingerprint, Kind: approvals.Reject, Reason: "not b", Decider: "UOTHER2"})
	must(t, err)
	if !second.Complete {
		t.Fatal("the last decision did not complete the step")
	}
	o, err := a.Resume(ctx, out.RunID)
	must(t, err)
	if o.Status != agent.Answered {
		t.Fatalf("got %s, want answered", o.Status)
	}
	got := toolResults(t, w.model)
	if len(got) != 2 || got[0] != "c1: deployed" || !strings.Contains(got[1], "not b") {
		t.Errorf("got results %q", got)
	}
}

// Expired calls are not performed, and the model is told after how long.
func TestExpirySweep(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			w.cfg.ApprovalTTL = time.Hour
			var expired []agent.Call
			w.cfg.Expired = func(c agent.Call) { expired = append(expired, c) }
			a := w.agent()
			other := w.agent() // another replica's sweep
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			must(t, a.Sweep(ctx, nil))
			if c, _ := a.Call(ctx, p.ID); c.Status != agent.CallPending {
				t.Fatalf("got %s before the expiry, want pending", c.Status)
			}
			w.advance(time.Hour + time.Second)
			w.model.Reply(fakeopenai.Text("it expired"))
			must(t, a.Sweep(ctx, nil))
			c, err := a.Call(ctx, p.ID)
			must(t, err)
			if c.Status != agent.CallExpired {
				t.Fatalf("got %s after the expiry, want expired", c.Status)
			}
			must(t, other.Sweep(ctx, nil))
			if len(expired) != 1 || expired[0].ID != p.ID || expired[0].Status != agent.CallExpired {
				t.Errorf("Expired was told of %+v, want the call once, expired", expired)
			}
			got := toolResults(t, w.model)
			if len(got) != 1 || got[0] != "c1: not performed: approval expired after 1h0m0s" {
				t.Errorf("got %q", got)
			}
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times", n)
			}
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if !errors.Is(err, approvals.ErrExpired) {
				t.Errorf("got %v deciding an expired call, want ErrExpired", err)
			}
		})
	}
}

// A stopped step drops its unexecuted calls and keeps what ran.
func TestCancelDropsUnexecutedCalls(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(
		call("c1", "read_file", `{"path":"/a"}`),
		call("c2", "deploy", `{"service":"a","version":"1"}`),
	))
	out, err := a.Run(ctx, request("go"))
	must(t, err)
	if _, err := a.Cancel(ctx, out.RunID, "UAPPROVER1"); !errors.Is(err, approvals.ErrNotApprover) {
		t.Errorf("got %v when someone else cancels, want ErrNotApprover", err)
	}
	res, err := a.Cancel(ctx, out.RunID, "UREQUESTER")
	must(t, err)
	if !res.Complete {
		t.Fatal("cancel did not complete the step")
	}
	o, err := a.Resume(ctx, out.RunID)
	must(t, err)
	if o.Status != agent.Stopped {
		t.Fatalf("got %s, want stopped", o.Status)
	}
	before := len(w.model.Requests())
	if before != 1 {
		t.Fatalf("the model was called %d times, want 1 (a stop is not a refusal)", before)
	}
	w.model.Reply(fakeopenai.Text("ok"))
	_, err = a.Run(ctx, request("never mind"))
	must(t, err)
	msgs := w.model.Requests()[1].Messages
	var calls, tools []string
	for _, m := range msgs {
		for _, tc := range m.ToolCalls {
			calls = append(calls, tc.ID)
		}
		if m.Role == "tool" {
			tools = append(tools, m.ToolCallID)
		}
	}
	if strings.Join(calls, ",") != "c1" || strings.Join(tools, ",") != "c1" {
		t.Errorf("got calls %v and results %v in the history, want only c1", calls, tools)
	}
}

// A call approved in a step its requester then cancelled is saved as not
// run, on every store: a card drawn again from the store (a late copy, a
// card another process overtook) says why it never ran, as the card was
// told, not that it is approved and about to run.
func TestApprovedCallOfACancelledStepIsSavedAsNotRun(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			w.model.Reply(fakeopenai.ToolCalls(
				call("c1", "deploy", `{"service":"api","version":"1"}`),
				call("c2", "ask_human", `{"question":"q?"}`),
			))
			out, err := w.agent().Run(ctx, request("go"))
			must(t, err)
			ps := out.Pending
			a := w.restart()
			_, err = a.Decide(ctx, approvals.Decision{CallID: ps[0].ID, Fingerprint: ps[0].Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			res, err := a.Cancel(ctx, out.RunID, "UREQUESTER")
			must(t, err)
			_, err = a.Resume(ctx, res.Call.RunID)
			must(t, err)
			n, err := w.restart().News(ctx, ps[0].ID)
			must(t, err)
			if n.Phase != agent.PhaseSkipped || !strings.Contains(n.Note, "cancelled") {
				t.Errorf("News of the approved call of a cancelled step: phase %s, unstarted %v, note %q; want it skipped, the requester having cancelled", n.Phase, n.Unstarted, n.Note)
			}
		})
	}
}

// Bad input from the model never reaches a handler and is explained.
func TestBadToolCallsFromTheModel(t *testing.T) {
	tests := []struct {
		name string
		call fakeopenai.ToolCall
		want string
	}{
		{"invalid JSON", call("c1", "read_file", `{"path": "/a"`), "invalid arguments for read_file: arguments are not valid JSON"},
		{"schema", call("c1", "read_file", `{"path": 7}`), "at /path"},
		{"extra property", call("c1", "read_file", `{"path": "/a", "x": 1}`), "additional properties"},
		{"not an object", call("c1", "read_file", `[1,2]`), "must be a JSON object"},
		{"unknown tool", call("c1", "rm_rf", `{}`), `unknown tool "rm_rf"; the available tools are: ask_human, deploy, drop_db, read_file, restart`},
		{"name with spaces", call("c1", "read file", `{"path":"/a"}`), `unknown tool "read file"`},
		{"huge arguments", call("c1", "read_file", `{"path":"`+strings.Repeat("a", 1<<20)+`"}`), "too large"},
		{"keys differing by case", call("c1", "deploy", `{"service":"api","version":"1","Service":"vault"}`), `keys "service" and "Service" differ only by case`},
		{"keys differing by case and width", call("c1", "deploy", "{\"service\":\"api\",\"version\":\"1\",\"\uff33ervice\":\"vault\"}"), "differ only by case"},
		{"deep nesting", call("c1", "read_file", `{"path":`+strings.Repeat("[", 65)+strings.Repeat("]", 65)+`}`), "nested more than 64 levels deep"},
		{"lone surrogate escape", call("c1", "read_file", `{"path":"/a\ud800"}`), "unpaired surrogate escape"},
		{"lone surrogate escape, asking tool", call("c1", "deploy", `{"service":"api\udc00","version":"1"}`), "unpaired surrogate escape"},
	}
	b := backends(t)[0]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.model.Reply(fakeopenai.ToolCalls(tt.call), fakeopenai.Text("sorry"))
			out, err := w.agent().Run(context.Background(), request("read"))
			must(t, err)
			if out.Status != agent.Answered {
				t.Fatalf("got %s, want answered", out.Status)
			}
			if n := w.reads.n.Load(); n != 0 {
				t.Errorf("read_file ran %d times", n)
			}
			got := toolResults(t, w.model)
			if len(got) != 1 || !strings.Contains(got[0], tt.want) {
				t.Errorf("got %q, want a result containing %q", got, tt.want)
			}
		})
	}
}

// Handler failures, panics and huge outputs become results for the model.
func TestHandlerFailures(t *testing.T) {
	tests := []struct {
		name    string
		handler agent.Handler
		want    string
	}{
		{"error", func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{}, errors.New("disk on fire")
		}, "tool boom failed: disk on fire"},
		{"panic", func(context.Context, json.RawMessage) (agent.Result, error) { panic("nil map") }, "tool boom failed: internal error (nil map)"},
		{"huge output", func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{Content: strings.Repeat("x", 5000)}, nil
		}, "[output truncated: 1000 of 5000 bytes shown]"},
		// An error or a panic carrying what the tool read (a stderr, a
		// body) is cut as its output would be.
		{"huge error", func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{}, errors.New(strings.Repeat("x", 5000))
		}, "[output truncated: 1000 of 5018 bytes shown]"},
		{"huge panic", func(context.Context, json.RawMessage) (agent.Result, error) { panic(strings.Repeat("x", 5000)) }, "[output truncated: 1000 of 5035 bytes shown]"},
	}
	b := backends(t)[0]
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, b)
			must(t, w.reg.Register(agent.Tool{Name: "boom", Annotations: approvals.Hints{ReadOnly: true}, Handler: tt.handler}))
			w.cfg.MaxToolOutput = 1000
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "boom", `{}`)), fakeopenai.Text("noted"))
			_, err := w.agent().Run(context.Background(), request("go"))
			must(t, err)
			got := toolResults(t, w.model)
			if len(got) != 1 || !strings.Contains(got[0], tt.want) || len(got[0]) > 1100 {
				t.Errorf("got %q, want a result containing %q, of at most 1000 bytes and the note", got, tt.want)
			}
		})
	}
}

// A model that keeps calling tools is stopped with a clear message.
func TestStepLimit(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.MaxSteps = 3
	w.model.Handle(func(req openaiRequest) fakeopenai.Response {
		return fakeopenai.ToolCalls(call("", "read_file", `{"path":"/a"}`))
	})
	out, err := w.agent().Run(context.Background(), request("loop"))
	must(t, err)
	if out.Status != agent.StepLimit || !strings.Contains(out.Answer, "stopped after 3 steps") {
		t.Fatalf("got %s %q, want the step limit message", out.Status, out.Answer)
	}
	if n := len(w.model.Requests()); n != 3 {
		t.Errorf("the model was called %d times, want 3", n)
	}
}

// A model error is returned typed, the step's stream is stopped, and the
// message is kept for the next turn.
func TestModelErrorKeepsTheConversation(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	w.model.Reply(fakeopenai.Error(500, "upstream exploded"))
	_, err := a.Run(ctx, request("first question"))
	var me *agent.ModelError
	if !errors.As(err, &me) || me.StatusCode != 500 {
		t.Fatalf("got %v, want a *ModelError with status 500", err)
	}
	if w.rec.stopped != 1 || len(w.rec.answers) != 0 {
		t.Errorf("the reporter was told Stopped %d times and given %d answers, want the failed step stopped once and no answer", w.rec.stopped, len(w.rec.answers))
	}
	w.model.Reply(fakeopenai.Text("answer"))
	_, err = a.Run(ctx, request("second question"))
	must(t, err)
	reqs := w.model.Requests()
	var users []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, "|") != "first question|second question" {
		t.Errorf("got user messages %q, want both questions", users)
	}
}

// A message in a paused thread is queued and answered after the resume.
func TestMessageWhilePausedIsAnsweredAfterResume(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	out, err := a.Run(ctx, request("also, what time is it?"))
	must(t, err)
	if out.Status != agent.Waiting || len(out.Pending) != 1 || out.Pending[0].ID != p.ID {
		t.Fatalf("got %s with %v, want waiting on %s", out.Status, out.Pending, p.ID)
	}
	if n := len(w.model.Requests()); n != 1 {
		t.Fatalf("the model was called %d times while paused, want 1", n)
	}
	w.model.Reply(fakeopenai.Text("deployed"), fakeopenai.Text("noon"))
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	o, err := a.Resume(ctx, res.Call.RunID)
	must(t, err)
	if o.Answer != "noon" {
		t.Errorf("got final answer %q, want the queued message answered", o.Answer)
	}
	if got := w.rec.Answers(); strings.Join(got, "|") != "deployed|noon" {
		t.Errorf("got answers %q", got)
	}
	reqs := w.model.Requests()
	last := reqs[len(reqs)-1].Messages
	if m := last[len(last)-1]; m.Role != "user" || m.Content != "also, what time is it?" {
		t.Errorf("got last message %+v, want the queued question", m)
	}
}

// A resume lost to a crash after the decision is picked up by the sweep.
func TestSweepResumesStalledRun(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	// The process dies here, before Resume.
	b := w.restart()
	w.model.Reply(fakeopenai.Text("deployed after all"))
	must(t, b.Sweep(ctx, nil))
	if n := w.deploys.n.Load(); n != 1 {
		t.Fatalf("deploy ran %d times, want 1", n)
	}
	if got := w.rec.Answers(); len(got) != 1 || got[0] != "deployed after all" {
		t.Errorf("got answers %q", got)
	}
}

// Config.Judged hears of each call the model makes once, however often a
// decision and its resume judge it again.
func TestEachCallIsJudgedOnce(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			w.policy = `
policy:
  default: ask
  rules:
    - {id: reads, tool: "read_*", verdict: allow}
    - {id: no-drop, tool: drop_db, verdict: deny}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1]}
    - {id: odd, tool: restart, when: 'args.nope == "prod"', verdict: deny}
`
			var mu sync.Mutex
			var judged []string
			w.cfg.Judged = func(v string) {
				mu.Lock()
				defer mu.Unlock()
				judged = append(judged, v)
			}
			w.model.Reply(fakeopenai.ToolCalls(
				call("c1", "read_file", `{"path":"/etc/motd"}`),
				call("c2", "drop_db", `{}`),
				call("c3", "deploy", `{"service":"api","version":"1"}`),
				call("c4", "rm_rf", `{}`),
				call("c5", "restart", `{"env":"dev"}`),
			))
			out, err := w.agent().Run(ctx, request("go"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 1 {
				t.Fatalf("got %s with %d pending, want the deploy paused", out.Status, len(out.Pending))
			}
			p := out.Pending[0]
			w.model.Reply(fakeopenai.Text("done"))
			a := w.restart()
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if _, err := a.Resume(ctx, res.Call.RunID); err != nil {
				t.Fatal(err)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Fatalf("deploy ran %d times, want 1", n)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(judged)
			if want := []string{"allow", "ask", "deny", "error", "invalid"}; !slices.Equal(judged, want) {
				t.Errorf("judged %q, want %q", judged, want)
			}
		})
	}
}

// A step taken over after its process stopped while one of its calls ran
// judges the calls left again; those judged before the stop are not
// counted again.
func TestCallsOfAStepTakenOverAreJudgedOnce(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  default: ask
  rules:
    - {id: migrations, tool: migrate, verdict: allow}
    - {id: deploys, tool: deploy, verdict: ask}
`
	var mu sync.Mutex
	var judged []string
	w.cfg.Judged = func(v string) {
		mu.Lock()
		defer mu.Unlock()
		judged = append(judged, v)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	must(t, w.reg.Register(agent.Tool{
		Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			cancel() // the process stops while it runs
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		},
	}))
	w.model.Reply(fakeopenai.ToolCalls(
		call("c1", "deploy", `{"service":"api","version":"1"}`),
		call("c2", "migrate", `{}`),
	))
	if _, err := w.agent().Run(ctx, request("deploy and migrate")); err == nil {
		t.Fatal("the cut turn succeeded")
	}
	out, err := w.restart().TakeOver(t.Context(), request("").Conversation)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 || out.Pending[0].Tool != "deploy" {
		t.Fatalf("TakeOver = %+v, want the deploy paused", out)
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(judged)
	if want := []string{"allow", "ask"}; !slices.Equal(judged, want) {
		t.Errorf("judged %q, want %q: each call once", judged, want)
	}
}

// A step asking for more calls than MaxCalls takes in the first ones; the
// model is told the others were not performed, and nothing runs or asks
// for them.
func TestCallsPastTheStepBoundAreNotTaken(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.MaxCalls = 2
	w.model.Reply(fakeopenai.ToolCalls(
		call("c1", "read_file", `{"path":"/a"}`),
		call("c2", "read_file", `{"path":"/b"}`),
		call("c3", "read_file", `{"path":"/c"}`),
		call("c4", "deploy", `{"service":"api","version":"1"}`),
	), fakeopenai.Text("read two"))
	out, err := w.agent().Run(context.Background(), request("read them all"))
	must(t, err)
	if out.Status != agent.Answered {
		t.Fatalf("got %s, want answered with no card", out.Status)
	}
	if n := w.reads.n.Load(); n != 2 {
		t.Errorf("read_file ran %d times, want 2", n)
	}
	got := toolResults(t, w.model)
	if len(got) != 4 || got[0] != "c1: file contents" || got[1] != "c2: file contents" ||
		!strings.Contains(got[2], "c3: not performed: the step asked for 4 tool calls and at most 2") || !strings.Contains(got[3], "c4: not performed") {
		t.Errorf("tool results %q", got)
	}
}

// An unknown tool's error names the available tools, a bounded number of
// them when there are many.
func TestUnknownToolNamesABoundedList(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	// 125 tools in all, many more than the error lists, and within the
	// 128 a request may offer (OpenAI's limit, which the fake keeps).
	for i := range 120 {
		must(t, w.reg.Register(agent.Tool{Name: fmt.Sprintf("srv__tool_%03d", i), Schema: json.RawMessage(`{"type":"object"}`),
			Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{}, nil }}))
	}
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "rm_rf", `{}`)), fakeopenai.Text("sorry"))
	if _, err := w.agent().Run(context.Background(), request("clean up")); err != nil {
		t.Fatal(err)
	}
	got := toolResults(t, w.model)
	if len(got) != 1 || !strings.Contains(got[0], `unknown tool "rm_rf"; the available tools include ask_human, deploy, drop_db, read_file, restart, srv__tool_000`) ||
		!strings.Contains(got[0], "and 85 more, listed in the request") || len(got[0]) > 1000 {
		t.Errorf("result %q (%d bytes)", got, len(got[0]))
	}
}

// The model gets every tool's schema with the properties and items OpenAI
// requires (an object without properties, or an array without items, in
// any tool failed every request); the arguments are still checked by the
// tool's own schema.
func TestModelGetsSchemasOpenAIAccepts(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	must(t, w.reg.Register(agent.Tool{Name: "lb_create", Annotations: approvals.Hints{ReadOnly: true}, Handler: w.reads.handler("created"),
		Schema: json.RawMessage(`{"type":"object","properties":{"ports":{"type":"array"},"tags":{"type":["object","null"]},"n":{"type":"integer","maximum":1e2}},"required":["ports"]}`)}))
	must(t, w.reg.Register(agent.Tool{Name: "get_me", Annotations: approvals.Hints{ReadOnly: true}, Handler: w.reads.handler("me"), Schema: json.RawMessage(`{"type":"object"}`)}))
	must(t, w.reg.Register(agent.Tool{Name: "whoami", Annotations: approvals.Hints{ReadOnly: true}, Handler: w.reads.handler("me")}))
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "lb_create", `{"ports":[80, "x"],"tags":null,"n":7}`)), fakeopenai.Text("created"))
	if _, err := w.agent().Run(context.Background(), request("make a load balancer")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lb_create": `{"properties":{"n":{"maximum":1e2,"type":"integer"},"ports":{"items":{},"type":"array"},"tags":{"properties":{},"type":["object","null"]}},"required":["ports"],"type":"object"}`,
		"get_me":    `{"properties":{},"type":"object"}`,
		"whoami":    `{"type":"object","properties":{}}`,
		"read_file": pathSchema,
	}
	for _, tool := range w.model.Requests()[0].Tools {
		if params, ok := want[tool.Function.Name]; ok {
			got, _ := json.Marshal(tool.Function.Parameters)
			var g, w any
			must(t, json.Unmarshal(got, &g))
			must(t, json.Unmarshal([]byte(params), &w))
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: sent %s, want %s", tool.Function.Name, got, params)
			}
			delete(want, tool.Function.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("tools not sent: %v", want)
	}
	if got := toolResults(t, w.model); len(got) != 1 || got[0] != "c1: created" {
		t.Errorf("results %q: the call passes the tool's own schema", got)
	}
}
