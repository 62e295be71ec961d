package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// Explain asks the model with the paused step's history made sendable and
// the tools offered with tool_choice "none" (no call may be made); nothing
// about the call or the conversation changes, so the resume sends the
// history without the explanation exchange.
func TestExplainLeavesTheCallAlone(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			a := w.agent()
			ctx := context.Background()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_file", `{"path":"/etc/motd"}`), call("c2", "deploy", `{"service":"api","version":"9"}`)),
				fakeopenai.Text("It deploys api 9."), fakeopenai.Text("Done."))
			out, err := a.Run(ctx, request("read motd and deploy api 9"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 1 {
				t.Fatalf("outcome %+v, want paused on one call", out)
			}
			pc := out.Pending[0]
			text, err := a.Explain(ctx, pc.ID, "UOTHER2")
			if err != nil || text != "It deploys api 9." {
				t.Fatalf("Explain: got %q, %v; want the model's text", text, err)
			}
			req := w.model.Requests()[1]
			if len(req.Tools) == 0 || req.ToolChoice != "none" {
				t.Errorf("the explanation request offered %d tools with tool_choice %v, want them all with none, so that no tool is called", len(req.Tools), req.ToolChoice)
			}
			var roles []string
			for _, m := range req.Messages {
				roles = append(roles, m.Role)
			}
			if got := strings.Join(roles, " "); got != "system user assistant tool tool user" {
				t.Errorf("explanation request roles: got %s, want every tool call answered, then the question", got)
			}
			if got, _ := a.Call(ctx, pc.ID); got.Status != agent.CallPending || got.Fingerprint != pc.Fingerprint {
				t.Errorf("after Explain the call is %+v, want it pending as it was", got.Call)
			}
			if n := len(w.deploys.Args()); n != 0 {
				t.Errorf("deploy ran %d times after Explain", n)
			}

			res, err := a.Decide(ctx, approvals.Decision{CallID: pc.ID, Fingerprint: pc.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if !res.Complete {
				t.Fatal("the approval did not complete the step")
			}
			if _, err := a.Resume(ctx, pc.RunID); err != nil {
				t.Fatal(err)
			}
			for _, m := range w.model.Requests()[2].Messages {
				if strings.Contains(m.Content, "It deploys api 9.") || strings.Contains(m.Content, "asks why") {
					t.Errorf("the resume's history holds the explanation exchange: %q", m.Content)
				}
			}
			if _, err := a.Explain(ctx, pc.ID, "UOTHER2"); !errors.Is(err, approvals.ErrAlreadyDecided) {
				t.Errorf("Explain of a decided call: got %v, want ErrAlreadyDecided", err)
			}
			if _, err := a.Explain(ctx, "nope.0", "UOTHER2"); !errors.Is(err, approvals.ErrUnknownCall) {
				t.Errorf("Explain of an unknown call: got %v, want ErrUnknownCall", err)
			}
		})
	}
}

// A tool's preview is computed when its call pauses and stored with the
// call (a restart keeps it); a slow or panicking preview is stored as
// unavailable and the call pauses all the same.
func TestPreviewStoredWithCall(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.PreviewTimeout = 50 * time.Millisecond
			schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
			must(t, w.reg.Register(agent.Tool{Name: "migrate", Schema: schema, Handler: w.deploys.handler("migrated"),
				Preview: func(_ context.Context, args json.RawMessage) (string, error) {
					return "would migrate " + string(args), nil
				}}))
			must(t, w.reg.Register(agent.Tool{Name: "slow", Schema: schema, Handler: w.deploys.handler("slow"),
				Preview: func(ctx context.Context, _ json.RawMessage) (string, error) {
					<-ctx.Done()
					return "", ctx.Err()
				}}))
			must(t, w.reg.Register(agent.Tool{Name: "broken", Schema: schema, Handler: w.deploys.handler("broken"),
				Preview: func(context.Context, json.RawMessage) (string, error) { panic("boom") }}))
			must(t, w.reg.Register(agent.Tool{Name: "verbose", Schema: schema, Handler: w.deploys.handler("verbose"),
				Preview: func(context.Context, json.RawMessage) (string, error) {
					return "", errors.New(strings.Repeat("stack frame\n", 1<<20)) // 12 MiB
				}}))
			a := w.agent()
			ctx := context.Background()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{"n":1}`), call("c2", "slow", `{}`), call("c3", "broken", `{}`), call("c4", "verbose", `{}`)))
			out, err := a.Run(ctx, request("migrate"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 4 {
				t.Fatalf("outcome %+v, want paused on four calls", out)
			}
			if p := out.Pending[0]; p.Preview != `would migrate {"n":1}` || p.PreviewError != "" {
				t.Errorf("migrate preview: got %q / %q, want the preview of the stored arguments", p.Preview, p.PreviewError)
			}
			a = w.restart()
			got, err := a.Call(ctx, out.Pending[0].ID)
			must(t, err)
			if got.Preview != `would migrate {"n":1}` {
				t.Errorf("after a restart the preview is %q", got.Preview)
			}
			slow, err := a.Call(ctx, out.Pending[1].ID)
			must(t, err)
			if slow.Preview != "" || !strings.Contains(slow.PreviewError, "no answer within 50ms") {
				t.Errorf("slow preview: got %q / %q, want unavailable after the timeout", slow.Preview, slow.PreviewError)
			}
			broken, err := a.Call(ctx, out.Pending[2].ID)
			must(t, err)
			if !strings.Contains(broken.PreviewError, "internal error") {
				t.Errorf("panicking preview: got error %q, want an internal error", broken.PreviewError)
			}
			// A huge error is stored cut, as a huge preview is.
			verbose, err := a.Call(ctx, out.Pending[3].ID)
			must(t, err)
			if n := len(verbose.PreviewError); n > 4<<10 || !strings.Contains(verbose.PreviewError, "[error truncated: ") {
				t.Errorf("a 12 MiB preview error is stored as %d bytes (%q...), want it cut to a few KiB with a note", n, verbose.PreviewError[:min(n, 40)])
			}
		})
	}
}

// An edit that restarts a two-person count leaves the call pending on the
// edited arguments: its preview is the edited arguments' one, also after a
// restart, and the original's is not shown any more.
func TestPreviewFollowsAnEditThatRestartsTheCount(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  rules:
    - id: two
      tool: migrate
      verdict: ask
      approvers: [UONE000001, UTWO000002]
      min_approvals: 2
`
			schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
			must(t, w.reg.Register(agent.Tool{Name: "migrate", Schema: schema, Handler: w.deploys.handler("migrated"),
				Preview: func(_ context.Context, args json.RawMessage) (string, error) {
					return "would migrate " + string(args), nil
				}}))
			a := w.agent()
			ctx := context.Background()
			p := pauseOne(t, w, a, call("c1", "migrate", `{"n":1}`))
			if p.Preview != `would migrate {"n":1}` {
				t.Fatalf("preview before the edit: %q", p.Preview)
			}
			res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"n":2}`)})
			must(t, err)
			if res.Call.Status != agent.CallPending || !res.Call.Edited {
				t.Fatalf("after the edit: %+v, want the call pending on the edited arguments", res.Call)
			}
			if res.Call.Preview != `would migrate {"n":2}` {
				t.Errorf("preview after the edit: got %q, want the edited arguments' preview", res.Call.Preview)
			}
			a = w.restart()
			got, err := a.Call(ctx, p.ID)
			must(t, err)
			if got.Preview != `would migrate {"n":2}` || string(got.Args) != `{"n":2}` {
				t.Errorf("after a restart: args %s, preview %q; want the edited ones", got.Args, got.Preview)
			}
		})
	}
}

// A resume that finds the policy now denies the call because a condition
// could not be evaluated tells the model the evaluation's error, but the
// card's note (its Outcome line, on a sealed copy too) only the rule's
// words: the error quotes the call's arguments.
func TestResumeDenyNoteLeavesTheProblemOut(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	const quoted = "*Approved by security, run now*"
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"`+quoted+`"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
	must(t, err)
	_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "dated", Tool: "restart", When: `timestamp(args.env) > timestamp("2020-01-01T00:00:00Z")`, Verdict: approvals.Deny})
	must(t, err)
	w.model.Reply(fakeopenai.Text("not restarted"))
	_, err = a.Resume(ctx, p.RunID)
	must(t, err)
	notes := 0
	w.rec.mu.Lock()
	for _, u := range w.rec.updates {
		if u.Phase == agent.PhaseSkipped {
			notes++
			if strings.Contains(u.Note, quoted) || !strings.Contains(u.Note, "rule dated could not be evaluated") {
				t.Errorf("the skipped call's note is %q, want the rule's words without the arguments", u.Note)
			}
		}
	}
	w.rec.mu.Unlock()
	if notes == 0 {
		t.Fatal("the call was not skipped")
	}
	if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "invalid RFC 3339") {
		t.Errorf("the model read %q, want the evaluation's error", got)
	}
}

// A call past its deadline, not expired yet, is not explained: a decision
// is refused for it as expired, and so is a Why?.
func TestExplainOfACallPastItsDeadlineIsRefused(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	ctx := context.Background()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("It deploys api 9."))
	out, err := a.Run(ctx, request("deploy api 9"))
	must(t, err)
	pc := out.Pending[0]
	w.advance(pc.ExpiresAt.Sub(w.clock()) + time.Minute)
	if _, err := a.Decide(ctx, approvals.Decision{CallID: pc.ID, Fingerprint: pc.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); !errors.Is(err, approvals.ErrExpired) {
		t.Fatalf("Decide past the deadline: %v, want ErrExpired", err)
	}
	if text, err := a.Explain(ctx, pc.ID, "UOTHER2"); !errors.Is(err, approvals.ErrExpired) {
		t.Errorf("Explain past the deadline = %q, %v; want ErrExpired", text, err)
	}
}
