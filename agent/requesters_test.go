package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// A turn that answers several people's messages judges its calls as each
// of them: a rule on `user` that allows the last writer does not run a
// call another asked for.
func TestCallsOfATurnAreJudgedAsEachRequester(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  default: ask
  rules:
    - id: lead-restarts
      tool: restart
      when: 'user == "ULEAD"'
      verdict: allow
`
	a := w.agent()
	p := pauseWith(t, w, a, inThread("UBOB", "deploy api 2, then restart prod"), call("c1", "deploy", `{"service":"api","version":"2"}`))
	// While it waits, Bob asks for more, then the lead says something unrelated.
	sayAll(t, a, inThread("UBOB", "and restart prod when that's done"), inThread("ULEAD", "fyi I'm watching the dashboards"))
	w.model.Reply(fakeopenai.Text("deployed"))
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "restart", `{"env":"prod"}`)))
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UCAROL"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Resume(ctx, p.RunID)
	must(t, err)
	if n := w.restarts.n.Load(); n > 0 {
		t.Fatalf("restart prod, asked for by UBOB, ran %d time(s) without approval under rule lead-restarts (user == ULEAD)", n)
	}
	if out.Status != agent.Paused || len(out.Pending) != 1 || out.Pending[0].Tool != "restart" || out.Pending[0].RuleID != "annotations" {
		t.Fatalf("resume: %s with %+v, want the restart paused under the tool's annotations", out.Status, out.Pending)
	}
	// The lead alone is allowed.
	lead := inThread("ULEAD", "restart prod")
	lead.Conversation = "T1/C1/1700000000.000200"
	w.model.Reply(fakeopenai.ToolCalls(call("c3", "restart", `{"env":"prod"}`)), fakeopenai.Text("restarted"))
	if out, err := a.Run(ctx, lead); err != nil || out.Status != agent.Answered || w.restarts.n.Load() != 1 {
		t.Fatalf("the lead's own restart: %s, %v, ran %d times; want it run at once", out.Status, err, w.restarts.n.Load())
	}
}

// "Always allow here" is refused on a call judged under two rules for two
// requesters: a standing rule made under their combined ask would never
// apply to either rule's.
func TestRememberRefusedOnACombinedAsk(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  default: ask
  rules:
    - {id: junior-deploys, tool: deploy, when: 'user == "UJUNIOR"', verdict: ask, approvers: [UAPPROVER1, USENIOR1]}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1]}
`
	a := w.agent()
	p := pauseWith(t, w, a, inThread("UBOB", "restart api"), call("c1", "restart", `{"env":"dev"}`))
	sayAll(t, a, inThread("UBOB", "then deploy api 2"), inThread("UJUNIOR", "yes, api 2"))
	// The resume answers the restart, then the queued messages of both
	// people: the deploy is made for both.
	w.model.Reply(fakeopenai.Text("restarted"), fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"2"}`)))
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Resume(ctx, p.RunID)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 || out.Pending[0].Tool != "deploy" {
		t.Fatalf("resume: %s with %+v, want the deploy paused", out.Status, out.Pending)
	}
	d := out.Pending[0]
	if strings.Join(d.Approvers, ",") != "UAPPROVER1" {
		t.Errorf("the deploy asks %v, want only the approver both rules name", d.Approvers)
	}
	if !d.NoAlwaysAllow || out.Pending[0].NoAlwaysAllow != d.NoAlwaysAllow {
		t.Errorf("the combined ask's call has NoAlwaysAllow false, want its card to offer no Always allow")
	}
	if p.NoAlwaysAllow {
		t.Errorf("the restart, asked under one rule, has NoAlwaysAllow set")
	}
	_, err = a.Decide(ctx, approvals.Decision{CallID: d.ID, Fingerprint: d.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
	if !errors.Is(err, agent.ErrBadDecision) || !strings.Contains(err.Error(), "not asked under a rule that can be relaxed") {
		t.Errorf("Remember on a combined ask: %v, want it refused", err)
	}
}

// A call past its deadline is the expiry's: the requester's cancel is
// refused as expired (it would have recorded a cancellation after the
// deadline), and the expiry pass then ends it.
func TestCancelAfterTheDeadlineIsRefused(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n  rules:\n    - {id: r, tool: restart, verdict: ask, ttl: 1h}\n"
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"dev"}`))
	w.advance(2 * time.Hour)
	if _, err := a.Cancel(ctx, p.RunID, p.Requester); !errors.Is(err, approvals.ErrExpired) {
		t.Errorf("cancel an hour past the deadline: %v, want ErrExpired", err)
	}
	if _, err := a.Expire(ctx, func(string, string) {}); err != nil {
		t.Fatal(err)
	}
	if c, err := w.store.(storetest.Store).GetCall(ctx, p.ID); err != nil || c.Status != store.Expired {
		t.Errorf("after the expiry pass the call is %s, %v; want expired", c.Status, err)
	}
}

// A Cancel that loses to a decision is told who decided first and how
// (an approval), or that the call expired (the expiry pass ended it), not
// only that the call was decided.
func TestCancelThatLostNamesWhatEndedTheCall(t *testing.T) {
	ctx := context.Background()
	t.Run("approved", func(t *testing.T) {
		w := newWorld(t, backends(t)[0])
		a := w.agent()
		p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
		if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
			t.Fatal(err)
		}
		_, err := a.Cancel(ctx, p.RunID, p.Requester)
		var refused *approvals.RefusedError
		if !errors.As(err, &refused) || !errors.Is(err, approvals.ErrAlreadyDecided) {
			t.Fatalf("cancel after the approval: %v, want a RefusedError of ErrAlreadyDecided", err)
		}
		if refused.DecidedBy != "UAPPROVER1" || refused.Kind != approvals.Approve || refused.DecidedAt.IsZero() {
			t.Errorf("the refusal names %q (%q at %v), want UAPPROVER1's approval and its time", refused.DecidedBy, refused.Kind, refused.DecidedAt)
		}
	})
	t.Run("expired", func(t *testing.T) {
		w := newWorld(t, backends(t)[0])
		w.policy = "policy:\n  default: ask\n  rules:\n    - {id: r, tool: restart, verdict: ask, ttl: 1h}\n"
		a := w.agent()
		p := pauseOne(t, w, a, call("c1", "restart", `{"env":"dev"}`))
		w.advance(2 * time.Hour)
		w.model.Reply(fakeopenai.Text("it expired"))
		if _, err := a.Expire(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Cancel(ctx, p.RunID, p.Requester); !errors.Is(err, approvals.ErrExpired) {
			t.Errorf("cancel after the expiry pass ended the call: %v, want ErrExpired", err)
		}
	})
}

// Any of the people a paused call was made for may cancel it, not only
// the last to write; someone else may not.
func TestAnyRequesterMayCancel(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n"
	a := w.agent()
	p := pauseWith(t, w, a, inThread("UBOB", "deploy api 2"), call("c1", "deploy", `{"service":"api","version":"2"}`))
	sayAll(t, a, inThread("UBOB", "and restart prod when that's done"), inThread("ULEAD", "fyi I'm watching the dashboards"))
	w.model.Reply(fakeopenai.Text("deployed"), fakeopenai.ToolCalls(call("c2", "restart", `{"env":"prod"}`)))
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UCAROL"}); err != nil {
		t.Fatal(err)
	}
	out, err := a.Resume(ctx, p.RunID)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("resume: %s %+v", out.Status, out.Pending)
	}
	r := out.Pending[0]
	if r.Requester == "UBOB" || !slices.Contains(r.Requesters, "UBOB") {
		t.Fatalf("restart made for %s %v; the test needs UBOB among the requesters, not the last", r.Requester, r.Requesters)
	}
	if _, err := a.Cancel(ctx, r.RunID, "UCAROL"); !errors.Is(err, approvals.ErrNotApprover) {
		t.Errorf("a cancel by someone else: %v, want it refused", err)
	}
	if _, err := a.Cancel(ctx, r.RunID, "UBOB"); err != nil {
		t.Errorf("UBOB, who asked for the restart, cannot cancel it: %v", err)
	}
}

// Messages sent to a thread while its call waits are kept for the resume
// up to a bound, the newest first: the oldest are left out (the record is
// rewritten with each message), and the model is told how many.
func TestQueuedMessagesAreBounded(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n"
	a := w.agent()
	p := pauseWith(t, w, a, inThread("UBOB", "restart api"), call("c1", "restart", `{"env":"dev"}`))
	const sent = 205
	for i := range sent {
		sayAll(t, a, inThread("UBOB", fmt.Sprintf("update %d", i)))
	}
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Fatal(err)
	}
	w.model.Reply(fakeopenai.Text("restarted"), fakeopenai.Text("read them"))
	if _, err := a.Resume(ctx, p.RunID); err != nil {
		t.Fatal(err)
	}
	users := slices.DeleteFunc(lastUserMessages(w.model), func(m string) bool { return !strings.Contains(m, "update ") })
	if len(users) == 0 || len(users) > 200 {
		t.Fatalf("the model got %d of the %d queued messages, want at most 200", len(users), sent)
	}
	if want := fmt.Sprintf("[%d earlier messages sent to the thread while it waited were left out", sent-200); !strings.HasPrefix(users[0], want) {
		t.Errorf("the first queued message the model got is %q, want it to start with %q", users[0], want)
	}
	if !strings.HasSuffix(users[len(users)-1], fmt.Sprintf("update %d", sent-1)) {
		t.Errorf("the last queued message the model got is %q, want the newest", users[len(users)-1])
	}
}

// inThread is a message of user's in the test's one thread.
func inThread(user, text string) agent.Request {
	return agent.Request{Conversation: "T1/C1/1700000000.000100", User: user, Channel: "C1", Text: text}
}

// sayAll runs each request in turn.
func sayAll(t *testing.T, a *agent.Agent, reqs ...agent.Request) {
	t.Helper()
	for _, r := range reqs {
		if _, err := a.Run(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}
