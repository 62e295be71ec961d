package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// flakyStore fails chosen writes a number of times: the creation of a
// run (nothing of its commit is written) and the finishing of one (the
// rest of its commit is written first, as a store that writes in several
// steps may leave it).
type flakyStore struct {
	storetest.Store
	failFinish  atomic.Int32
	failCreate  atomic.Int32
	failRecords atomic.Bool
	// onCreate, if set, is called before a commit that creates a run,
	// which then fails with its context's error, writing nothing, if the
	// context has ended.
	onCreate func()
}

func (s *flakyStore) Records(ctx context.Context, kind string) ([]store.Record, error) {
	if s.failRecords.Load() {
		return nil, errInjected
	}
	return s.Store.Records(ctx, kind)
}

// RecordsOf fails with Records: the policy engine reads its rules with it.
func (s *flakyStore) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	if s.failRecords.Load() {
		return nil, errInjected
	}
	return s.Store.RecordsOf(ctx, kinds...)
}

// GetCallWith and BeginResume leave the records out, as stores do when
// they cannot read them.
func (s *flakyStore) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	if s.failRecords.Load() {
		kinds = nil
	}
	return s.Store.GetCallWith(ctx, id, kinds...)
}

func (s *flakyStore) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if s.failRecords.Load() {
		r.Kinds = nil
	}
	return s.Store.BeginResume(ctx, runID, r)
}

var errInjected = errors.New("injected store failure")

func (s *flakyStore) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Run != nil && s.failCreate.Add(-1) >= 0 {
		return errInjected
	}
	if c.Run != nil && s.onCreate != nil {
		s.onCreate()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if c.Finish != "" && s.failFinish.Add(-1) >= 0 {
		c.Finish = ""
		return errors.Join(s.Store.CommitTurn(ctx, c), errInjected)
	}
	return s.Store.CommitTurn(ctx, c)
}

// An edit that moves a call under a stricter rule needs that rule's
// approvers.
func TestEditIntoStricterRuleNeedsItsApprovers(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - id: small
      tool: restart
      when: 'args.env != "prod"'
      verdict: ask
      approvers: [UOTHER2]
    - id: prod
      tool: restart
      verdict: ask
      approvers: [UBOSS00001]
      four_eyes: true
`
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	edit := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UOTHER2", Args: json.RawMessage(`{"env":"prod"}`)}
	if _, err := a.Decide(ctx, edit); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "rule prod") {
		t.Fatalf("got %v, want ErrNotApprover naming rule prod", err)
	}
	edit.Decider = "UBOSS00001"
	if _, err := a.Decide(ctx, edit); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("got %v for an approver of prod who may not decide the original call, want ErrNotApprover", err)
	}
	if c, _ := a.Call(ctx, p.ID); c.Status != agent.CallPending {
		t.Errorf("got %s after refused edits, want pending", c.Status)
	}
	// Within the same rule the edit goes through.
	edit.Decider, edit.Args = "UOTHER2", json.RawMessage(`{"env":"dev"}`)
	if _, err := a.Decide(ctx, edit); err != nil {
		t.Fatalf("got %v for an edit within the rule", err)
	}
}

// Messages queued during a pause are not lost when the resume fails.
func TestQueuedMessagesSurviveAFailedResume(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	if _, err := a.Run(ctx, request("also, is the cache warm?")); err != nil {
		t.Fatal(err)
	}
	w.model.Reply(fakeopenai.Error(500, "down"))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if _, err := a.Resume(ctx, p.RunID); err == nil {
		t.Fatal("the resume did not report the model failure")
	}
	w.model.Reply(fakeopenai.Text("yes, and the deploy is done"))
	_, err = a.Run(ctx, request("hello?"))
	must(t, err)
	reqs := w.model.Requests()
	var users []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if got := strings.Join(users, "|"); got != "please|also, is the cache warm?|hello?" {
		t.Errorf("got user messages %q, want the queued one kept before the new one", got)
	}
}

// A resume whose run could not be finished is not run again by the sweep.
func TestSweepDoesNotRepeatAFinishedResume(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.cfg.LeaseTTL = 100 * time.Millisecond // the resume claim lasts ten of these
	flaky := &flakyStore{Store: w.store.(storetest.Store)}
	w.store = flaky
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	flaky.failFinish.Store(1)
	w.model.Reply(fakeopenai.Text("deployed"))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if _, err := a.Resume(ctx, p.RunID); !errors.Is(err, errInjected) {
		t.Fatalf("got %v, want the injected FinishRun failure", err)
	}
	requests := len(w.model.Requests())
	time.Sleep(1200 * time.Millisecond) // the claim runs out
	must(t, a.Sweep(ctx, nil))
	if n := len(w.model.Requests()); n != requests {
		t.Errorf("the sweep asked the model again (%d requests, want %d)", n, requests)
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	stalled, err := w.store.Stalled(ctx, 10)
	must(t, err)
	if len(stalled) != 0 {
		t.Errorf("got stalled runs %v after the sweep, want none", stalled)
	}
}

// When the pause cannot be saved, what already ran is kept and every call
// is answered in the history.
func TestPauseSaveFailureKeepsHistory(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	flaky := &flakyStore{Store: w.store.(storetest.Store)}
	w.store = flaky
	a := w.agent()
	flaky.failCreate.Store(1)
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_file", `{"path":"/a"}`), call("c2", "deploy", `{"service":"a","version":"1"}`)))
	if _, err := a.Run(ctx, request("read and deploy")); !errors.Is(err, errInjected) {
		t.Fatalf("got %v, want the injected CreateRun failure", err)
	}
	w.model.Reply(fakeopenai.Text("ok"))
	_, err := a.Run(ctx, request("what happened?"))
	must(t, err)
	reqs := w.model.Requests()
	var results []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "tool" {
			results = append(results, m.ToolCallID+": "+m.Content)
		}
	}
	if len(results) != 2 || results[0] != "c1: file contents" || !strings.Contains(results[1], "could not be saved") {
		t.Errorf("got tool results %q, want the read's output and a note that the deploy was not asked", results)
	}
	if n := w.reads.n.Load(); n != 1 {
		t.Errorf("read_file ran %d times, want 1", n)
	}
}

// A shutdown whose grace runs out while a pause is saved leaves the
// message unanswered, as a cut before the model answered does: the
// restarted bot answers it. (It was recorded as answered, its call "not
// performed", while the thread was told the bot would answer after its
// restart.)
func TestShutdownWhileThePauseIsSavedIsAnsweredAfterTheRestart(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	flaky := &flakyStore{Store: w.store.(storetest.Store)}
	w.store = flaky
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	flaky.onCreate = cancel
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
	if _, err := w.agent().Run(ctx, request("deploy api 2")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want the context's end", err)
	}
	flaky.onCreate = nil
	w.model.Reply(fakeopenai.Text("answered after the restart"))
	out, err := w.restart().TakeOver(t.Context(), request("").Conversation)
	must(t, err)
	if out.Status != agent.Answered || out.Answer != "answered after the restart" {
		t.Errorf("TakeOver after the restart = %+v, want the answer", out)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Errorf("deploy ran %d times, want never: it was never approved", n)
	}
}

// Arguments over the limit or not JSON, and invalid names, do not stay in
// the history: some servers refuse every later request that carries them.
func TestBadCallsAreSanitizedInTheHistory(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	huge := `{"path":"` + strings.Repeat("a", 1<<20) + `"}`
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_file", huge), call("c2", "read file", `{"path":"/a"}`), call("c3", "read_file", `{"path": "/etc/`)), fakeopenai.Text("sorry"))
	_, err := w.agent().Run(context.Background(), request("read"))
	must(t, err)
	reqs := w.model.Requests()
	var cut string
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, tc := range m.ToolCalls {
			if len(tc.Function.Arguments) > 200 {
				t.Errorf("call %s kept %d bytes of arguments in the history", tc.ID, len(tc.Function.Arguments))
			}
			if !agent.ValidName(tc.Function.Name) {
				t.Errorf("call %s kept the invalid name %q", tc.ID, tc.Function.Name)
			}
			if !json.Valid([]byte(tc.Function.Arguments)) {
				t.Errorf("call %s kept arguments that are not JSON: %q", tc.ID, tc.Function.Arguments)
			}
			if tc.ID == "c3" {
				cut = tc.Function.Arguments
			}
		}
	}
	if cut != `{"invalid_json":"{\"path\": \"/etc/"}` {
		t.Errorf("the cut arguments are kept as %q, want them as a string in an object", cut)
	}
}

// Arguments that are JSON but not an object (a double-encoded string, an
// array) get an error result, and do not stay in the history as they are:
// Ollama's and vLLM's OpenAI endpoints decode each history call's arguments
// into an object and refuse the whole request otherwise, which would break
// the thread for good.
func TestNonObjectArgumentsAreSanitizedInTheHistory(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	// An Ollama-like server: a history call whose arguments do not decode
	// into an object is refused with a 400.
	w.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		for _, m := range req.Messages {
			for _, tc := range m.ToolCalls {
				var obj map[string]any
				if json.Unmarshal([]byte(tc.Function.Arguments), &obj) != nil {
					return fakeopenai.Error(http.StatusBadRequest, "invalid tool call arguments")
				}
			}
		}
		return fakeopenai.Text("ok")
	})
	w.model.Reply(fakeopenai.ToolCalls(
		call("c1", "read_file", `"{\"path\":\"/a\"}"`),
		call("c2", "read_file", `["/b"]`),
	))
	a := w.agent()
	_, err := a.Run(context.Background(), request("read"))
	if err != nil {
		t.Fatalf("the turn after a call with non-object arguments failed: %v", err)
	}
	res := toolResults(t, w.model)
	if len(res) != 2 || !strings.Contains(res[0], "must be a JSON object") || !strings.Contains(res[1], "must be a JSON object") {
		t.Errorf("tool results %q, want errors saying the arguments must be an object", res)
	}
	reqs := w.model.Requests()
	var kept string
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, tc := range m.ToolCalls {
			if args := strings.TrimSpace(tc.Function.Arguments); !strings.HasPrefix(args, "{") {
				t.Errorf("call %s kept arguments that are not an object in the history: %s", tc.ID, tc.Function.Arguments)
			}
			if tc.ID == "c2" {
				kept = tc.Function.Arguments
			}
		}
	}
	if kept != `{"not_an_object":"[\"/b\"]"}` {
		t.Errorf("the array arguments are kept as %q, want their text as a string in an object", kept)
	}
	// The thread goes on.
	if _, err := a.Run(context.Background(), request("and now?")); err != nil {
		t.Errorf("the next message of the thread failed: %v", err)
	}
}

// Arguments that break a schema many times over, or with a huge value,
// are refused in a few lines: the model reads the first problems and how
// many more there were, within the tool output limit, and so does a
// person shown why.
func TestSchemaErrorsAreBounded(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	must(t, w.reg.Register(agent.Tool{Name: "read_list", Description: "Reads a list.",
		Schema:  json.RawMessage(`{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"}},"n":{"type":"integer"}}}`),
		Handler: w.reads.handler("ok")}))
	many := `{"items":[` + strings.Repeat("1,", 60000) + `1]}`
	huge := `{"n":"` + strings.Repeat("9", 200<<10) + `"}`
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_list", many), call("c2", "read_list", huge)), fakeopenai.Text("sorry"))
	_, err := w.agent().Run(context.Background(), request("read"))
	must(t, err)
	results := toolResults(t, w.model)
	if len(results) != 2 {
		t.Fatalf("got %d tool results, want 2", len(results))
	}
	if r := results[0]; len(r) > 2000 || !strings.Contains(r, "at /items/0:") || !strings.Contains(r, "and 59991 more") {
		t.Errorf("the model read %d bytes for 60,001 wrong items, want the first ten problems and a count of the rest: %.300q", len(r), r)
	}
	if r := results[1]; len(r) > 1000 {
		t.Errorf("the model read %d bytes for one huge wrong value, want it cut: %.300q", len(r), r)
	}
	if n := w.reads.n.Load(); n != 0 {
		t.Errorf("read_list ran %d times, want none", n)
	}
	err = w.agent().Tools().Validate("read_list", json.RawMessage(huge))
	if person := agent.PersonText(err); len(person) > 200 || !strings.Contains(person, "n must be an integer, got \"999") {
		t.Errorf("a person reads %d bytes: %.300q; want the value cut", len(person), person)
	}
}

// A tool cut by TOOL_TIMEOUT may have done its work: unless it is
// read-only or idempotent, the model is told the outcome is unknown and
// not to call it again before checking.
func TestTimedOutToolHasAnUnknownOutcome(t *testing.T) {
	for _, tt := range []struct {
		name    string
		hints   approvals.Hints
		said    string // the tool's own error result; "" returns ctx.Err()
		unknown bool
	}{
		{"write", approvals.Hints{}, "", true},
		{"write that says why", approvals.Hints{}, "killed the process group", true},
		{"idempotent", approvals.Hints{Idempotent: true}, "", false},
		{"read-only", approvals.Hints{ReadOnly: true}, "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, backends(t)[0])
			w.cfg.ToolTimeout = 50 * time.Millisecond
			w.policy = "policy:\n  rules:\n    - tool: slow\n      verdict: allow\n"
			must(t, w.reg.Register(agent.Tool{Name: "slow", Description: "Takes its time.", Schema: json.RawMessage(`{"type":"object"}`), Annotations: tt.hints,
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					<-ctx.Done()
					if tt.said != "" {
						return agent.Result{Content: tt.said, IsError: true}, nil
					}
					return agent.Result{}, ctx.Err()
				}}))
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "slow", `{}`)), fakeopenai.Text("done"))
			_, err := w.agent().Run(context.Background(), request("go"))
			must(t, err)
			res := toolResults(t, w.model)
			if len(res) != 1 || !strings.Contains(res[0], "timed out after 50ms") {
				t.Fatalf("tool results %q, want a timeout", res)
			}
			if got := strings.Contains(res[0], "whether the call took effect is unknown. Do not call it again before checking"); got != tt.unknown {
				t.Errorf("the model read %q; outcome unknown said: %v, want %v", res[0], got, tt.unknown)
			}
			if tt.said != "" && !strings.Contains(res[0], "The tool said: "+tt.said) {
				t.Errorf("the model read %q, want what the tool said", res[0])
			}
		})
	}
}

// Tool call ids are unique in the whole history a request sends, however
// the server makes them up: none at all, or the same ones every turn.
func TestToolCallIDsAreUniqueInTheHistory(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	for i, ids := range [][2]string{{"", ""}, {"call_0", "call_1"}, {"call_0", "call_0"}} {
		w.model.Reply(fakeopenai.ToolCalls(call(ids[0], "read_file", `{"path":"/a"}`), call(ids[1], "read_file", `{"path":"/b"}`)), fakeopenai.Text("read"))
		_, err := a.Run(context.Background(), request(fmt.Sprintf("read %d", i)))
		must(t, err)
	}
	reqs := w.model.Requests()
	last := reqs[len(reqs)-1].Messages
	calls, answered := map[string]int{}, map[string]int{}
	for _, m := range last {
		for _, tc := range m.ToolCalls {
			calls[tc.ID]++
		}
		if m.Role == "tool" {
			answered[m.ToolCallID]++
		}
	}
	if len(calls) != 6 {
		t.Errorf("the history has %d distinct call ids for 6 calls: %v", len(calls), calls)
	}
	for id, n := range calls {
		if id == "" || n != 1 || answered[id] != 1 {
			t.Errorf("call id %q: %d calls, %d results; want one of each", id, n, answered[id])
		}
	}
}

// A refusal is the answer the thread gets, and an empty answer is said to
// be one; the history keeps either as an answer with content, which some
// servers require of an assistant message without calls.
func TestRefusalsAndEmptyAnswersAreAnswers(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	w.model.Reply(fakeopenai.Response{Refusal: "I can't help with that."})
	out, err := a.Run(context.Background(), request("do something bad"))
	must(t, err)
	if out.Answer != "I can't help with that." {
		t.Errorf("answer to a refusal = %q, want the refusal", out.Answer)
	}
	w.model.Reply(fakeopenai.Response{})
	out, err = a.Run(context.Background(), request("and now?"))
	must(t, err)
	if out.Answer != "(the model gave no answer)" {
		t.Errorf("answer to an empty answer = %q, want it said", out.Answer)
	}
	w.model.Reply(fakeopenai.Text("fine"))
	_, err = a.Run(context.Background(), request("ok"))
	must(t, err)
	reqs := w.model.Requests()
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "assistant" && strings.TrimSpace(m.Content) == "" && len(m.ToolCalls) == 0 {
			t.Errorf("the history sends an assistant message with no content and no calls: %+v", m)
		}
	}
}

// audience is a fixed channel membership.
type audience map[string][]string

func (a audience) CanSee(_ context.Context, channel, user string) (bool, error) {
	for _, u := range a[channel] {
		if u == user {
			return true, nil
		}
	}
	return false, nil
}

// A call whose rule names no approvers is decided only by people who can
// see the conversation.
func TestOpenCallsNeedTheAudience(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UMEMBER01"}}
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOUTSIDER"}
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("got %v from someone outside the channel, want ErrNotApprover", err)
	}
	d.Decider = "UMEMBER01"
	if _, err := a.Decide(ctx, d); err != nil {
		t.Fatalf("got %v from a member of the channel", err)
	}
}

// A card's named approver who cannot see the conversation may not decide
// once the rule lets anyone in the conversation decide instead: both the
// card's approvers and the policy now must admit the decider.
func TestApproverOfTheCardMustSeeTheConversationUnderAnOpenRule(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - id: open
      tool: "*"
      verdict: ask
`
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UMEMBER01", "UNAMED002"}}
	a := w.agent()
	_, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "named", Tool: "restart", Verdict: approvals.Ask, Approvers: []string{"UNAMED001", "UNAMED002"}})
	must(t, err)
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	if len(p.Approvers) != 2 {
		t.Fatalf("the card names %v, want the two approvers of rule named", p.Approvers)
	}
	must(t, w.engine.RemoveRule(ctx, "UADMIN0001", "named"))
	d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UNAMED001"}
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "only people in the conversation") {
		t.Fatalf("a named approver outside the conversation under an open rule: got %v, want ErrNotApprover", err)
	}
	d.Decider = "UMEMBER01"
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("a member the card does not name: got %v, want ErrNotApprover", err)
	}
	d.Decider = "UNAMED002"
	if _, err := a.Decide(ctx, d); err != nil {
		t.Fatalf("a named approver in the conversation: got %v", err)
	}
}

// An edit that moves a call under a rule that lets anyone in the
// conversation decide is made only by someone who can see it: a card's
// named approver outside the conversation cannot edit their way out of the
// rule that named them.
func TestEditIntoAnOpenRuleNeedsTheAudience(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - id: staging
      tool: restart
      when: 'args.env == "staging"'
      verdict: ask
    - id: named
      tool: restart
      verdict: ask
      approvers: ["UNAMED001", "UNAMED002"]
`
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UNAMED002"}}
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
	if len(p.Approvers) != 2 {
		t.Fatalf("the card names %v, want the two approvers of rule named", p.Approvers)
	}
	d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UNAMED001", Args: json.RawMessage(`{"env":"staging"}`)}
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "only people in the conversation") {
		t.Fatalf("an edit into rule staging by a named approver outside the conversation: got %v, want ErrNotApprover", err)
	}
	d.Decider = "UNAMED002"
	if _, err := a.Decide(ctx, d); err != nil {
		t.Fatalf("the same edit by a named approver in the conversation: got %v", err)
	}
}

// Once an admin takes an approver off the rule that asks, the card's
// approver may still say no, but no longer give the model words: neither
// a rejection's reason nor an answer to a question.
func TestRemovedApproverMayOnlyDeny(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	_, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "pair", Tool: "*", Verdict: approvals.Ask, Approvers: []string{"UONE000001", "UTWO000002"}})
	must(t, err)
	restart := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	other := request("please")
	other.Conversation = "T1/C1/1700000000.000200"
	question := pauseWith(t, w, a, other, call("c2", "ask_human", `{"question":"Which region?"}`))
	must(t, w.engine.RemoveRule(ctx, "UADMIN0001", "pair"))
	_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "two", Tool: "*", Verdict: approvals.Ask, Approvers: []string{"UTWO000002"}})
	must(t, err)
	reject := approvals.Decision{CallID: restart.ID, Fingerprint: restart.Fingerprint, Kind: approvals.Reject, Reason: "use prod", Decider: "UONE000001"}
	if _, err := a.Decide(ctx, reject); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "rule two") {
		t.Fatalf("a rejection by an approver the rule no longer names: got %v, want ErrNotApprover under rule two", err)
	}
	respond := approvals.Decision{CallID: question.ID, Fingerprint: question.Fingerprint, Kind: approvals.Respond, Answer: "eu-west-1", Decider: "UONE000001"}
	if _, err := a.Decide(ctx, respond); !errors.Is(err, approvals.ErrNotApprover) {
		t.Fatalf("an answer by an approver the rule no longer names: got %v, want ErrNotApprover", err)
	}
	respond.Decider = "UTWO000002"
	if _, err := a.Decide(ctx, respond); err != nil {
		t.Fatalf("an answer by an approver the rule still names: got %v", err)
	}
	refuse := approvals.Decision{CallID: restart.ID, Fingerprint: restart.Fingerprint, Kind: approvals.Refuse, Decider: "UONE000001"}
	if _, err := a.Decide(ctx, refuse); err != nil {
		t.Fatalf("a plain deny by the card's approver: got %v", err)
	}
}

// An approval is checked against the policy as it is now, not only as it
// was when the card was posted.
func TestApprovalUnderTightenedPolicy(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	_, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "tight", Tool: "restart", Verdict: approvals.Ask, Approvers: []string{"ULEAD00001"}})
	must(t, err)
	d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"}
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrNotApprover) || !strings.Contains(err.Error(), "rule tight") {
		t.Fatalf("got %v, want ErrNotApprover under rule tight", err)
	}
	w.advance(time.Second) // admin rules apply newest first
	_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "banned", Tool: "restart", Verdict: approvals.Deny, Reason: "frozen"})
	must(t, err)
	d.Decider = "ULEAD00001"
	if _, err := a.Decide(ctx, d); !errors.Is(err, approvals.ErrPolicyDenied) {
		t.Fatalf("got %v, want ErrPolicyDenied once the policy denies", err)
	}
	// Saying no is still possible.
	d.Kind = approvals.Refuse
	if _, err := a.Decide(ctx, d); err != nil {
		t.Fatalf("got %v denying the call", err)
	}
}

// While the policy's stored rules cannot be read, nothing runs on a human's
// decision: an approval is refused, and a call approved before the outage
// is not run at resume.
func TestNothingRunsWhileThePolicyCannotBeRead(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	flaky := &flakyStore{Store: w.store.(storetest.Store)}
	w.store = flaky
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	flaky.failRecords.Store(true)
	d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}
	if _, err := a.Decide(ctx, d); !errors.Is(err, errInjected) {
		t.Fatalf("got %v approving during the outage, want the store error", err)
	}
	flaky.failRecords.Store(false)
	_, err := a.Decide(ctx, d)
	must(t, err)
	flaky.failRecords.Store(true)
	w.model.Reply(fakeopenai.Text("ok"))
	if _, err := a.Resume(ctx, p.RunID); err != nil {
		t.Fatal(err)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Errorf("deploy ran %d times while the policy could not be read", n)
	}
	if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "the policy could not be checked") {
		t.Errorf("got results %q, want a note that the policy could not be checked", got)
	}
	// The file's denies hold during the outage: drop_db is still refused.
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "drop_db", `{}`)), fakeopenai.Text("refused"))
	req := request("drop it")
	req.Conversation = "T1/C1/9"
	out, err := a.Run(ctx, req)
	must(t, err)
	if out.Status != agent.Answered {
		t.Errorf("got %s, want drop_db denied by the file rule (no card)", out.Status)
	}
}

// A conversation left pointing at a finished run is not stuck waiting.
func TestConversationPausedOnAFinishedRunCarriesOn(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	w.model.Reply(fakeopenai.Text("deployed"))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	_, err = a.Resume(ctx, p.RunID)
	must(t, err)
	// A late write puts the finished run back on the conversation.
	conv, err := w.store.LoadConversation(ctx, request("").Conversation)
	must(t, err)
	conv.PausedRun = p.RunID
	must(t, w.store.(storetest.Store).SaveConversation(ctx, conv))
	w.model.Reply(fakeopenai.Text("hello again"))
	out, err := a.Run(ctx, request("still there?"))
	must(t, err)
	if out.Status != agent.Answered || out.Answer != "hello again" {
		t.Errorf("got %s %q, want the message answered", out.Status, out.Answer)
	}
}

// Cancelling a step still answers what others asked while it waited.
func TestCancelAnswersQueuedMessages(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	q := request("meanwhile: is the cache warm?")
	q.User = "UOTHER2"
	_, err := a.Run(ctx, q)
	must(t, err)
	res, err := a.Cancel(ctx, p.RunID, "UREQUESTER")
	must(t, err)
	w.model.Reply(fakeopenai.Text("the cache is warm"))
	out, err := a.Resume(ctx, res.Call.RunID)
	must(t, err)
	if out.Answer != "the cache is warm" {
		t.Errorf("got %s %q, want the queued question answered", out.Status, out.Answer)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Errorf("deploy ran %d times after a cancel", n)
	}
}

// A resume claimed again after its runner died reports what the call
// returned, or that it was interrupted, and never runs it twice.
func TestReclaimedResumeReportsTheSavedResult(t *testing.T) {
	for _, saved := range []bool{true, false} {
		name := "interrupted"
		if saved {
			name = "saved"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, backends(t)[0])
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			// A first resumer started the call, maybe saved its result, and died.
			ok, err := w.store.BeginExecution(ctx, p.ID, "")
			must(t, err)
			if !ok {
				t.Fatal("BeginExecution refused")
			}
			if saved {
				must(t, w.store.SaveResult(ctx, p.ID, []byte(`{"content":"deployed by the first resumer"}`), store.AuditEntry{}))
			}
			w.model.Reply(fakeopenai.Text("done"))
			_, err = w.restart().Resume(ctx, p.RunID)
			must(t, err)
			if n := w.deploys.n.Load(); n != 0 {
				t.Errorf("deploy ran %d times on the second resume, want 0", n)
			}
			want := "c1: outcome unknown: the bot stopped while deploy was running"
			if saved {
				want = "c1: deployed by the first resumer"
			}
			if got := toolResults(t, w.model); len(got) != 1 || !strings.HasPrefix(got[0], want) {
				t.Errorf("got results %q, want one starting %q", got, want)
			}
		})
	}
}

// A pending edit that falls under a rule needing more approvers is shown
// as that rule asks: its count, and the approvers both rules admit.
func TestPendingEditShowsWhatItWaitsOn(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  rules:
    - id: prod
      tool: restart
      when: 'args.env == "prod"'
      verdict: ask
      approvers: [UONE000001, UTWO000002, UTHREE0003]
      min_approvals: 2
    - id: staging
      tool: restart
      verdict: ask
`
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
	must(t, err)
	if res.Complete {
		t.Fatal("an edit under a two-person rule completed the step")
	}
	for name, c := range map[string]agent.Call{"the decision's result": res.Call, "the stored call": must1(a.Call(ctx, p.ID)).Call} {
		if c.MinApprovals != 2 || !c.Edited || !slices.Equal(c.Approvers, []string{"UONE000001", "UTWO000002", "UTHREE0003"}) || !slices.Equal(c.Approvals, []string{"UONE000001"}) {
			t.Errorf("%s: MinApprovals %d, edited %v, approvers %v, approvals %v; want 2, true, the three of rule prod, UONE000001", name, c.MinApprovals, c.Edited, c.Approvers, c.Approvals)
		}
	}
}

func must1[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
