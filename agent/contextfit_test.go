package agent_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// requestText is the text a request's messages carry, which the fake
// models below take for its length.
func requestText(r openai.ChatCompletionRequest) int {
	n := 0
	for _, m := range r.Messages {
		n += len(m.Content)
		for _, tc := range m.ToolCalls {
			n += len(tc.Function.Arguments)
		}
	}
	return n
}

// hexOutput is n bytes of random hex, as a tool that prints hashes or ids
// does: about 1.8 bytes a token for real tokenizers.
func hexOutput(n int) string {
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	b := make([]byte, n/2)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

// tooLong is how the fake model refuses a request over its context, in
// the words of OpenAI and vLLM (with no error code, which vLLM does not
// send either).
var tooLong = fakeopenai.Response{Status: 400, ErrorMessage: "This model's maximum context length is 3000 tokens. However, your messages resulted in 3900 tokens. Please reduce the length of the messages."}

// A history the estimate says fits may still be longer than the model's
// context (a tool printed hex, which real tokenizers count at twice the
// estimate's rate of old). The model's refusal is not the end of the
// thread: the request is sent once more with the history cut to half its
// estimate, and that shorter history is the one kept, so the turn and the
// thread's next message are answered, without the whole output.
func TestContextExceededShortensTheHistory(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	out := hexOutput(7000)
	must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler:     func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{Content: out}, nil }}))
	w.cfg.ContextBudget = 12000
	const limit = 6000 // bytes of text the fake model takes
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if requestText(r) > limit {
			return tooLong
		}
		switch last := r.Messages[len(r.Messages)-1]; {
		case last.Role == "tool":
			return fakeopenai.Text("The logs are hashes.")
		case last.Content == "show me the logs":
			return fakeopenai.ToolCalls(call("l1", "read_logs", `{}`))
		default:
			return fakeopenai.Text("Still here.")
		}
	})
	a := w.agent()
	ctx := context.Background()
	got, err := a.Run(ctx, request("show me the logs"))
	if err != nil || got.Status != agent.Answered || got.Answer != "The logs are hashes." {
		t.Fatalf("the turn whose request was too long: %+v, %v; want it answered with a shorter history", got, err)
	}
	got, err = a.Run(ctx, request("hello?"))
	if err != nil || got.Status != agent.Answered || got.Answer != "Still here." {
		t.Fatalf("the thread's next message: %+v, %v; want it answered", got, err)
	}
	reqs := w.model.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model got %d requests, want 4: the call, the refused one, it again shorter, the next message", len(reqs))
	}
	last := reqs[3]
	if n := requestText(last); n > limit {
		t.Errorf("the next message's request carries %d bytes of text, over the model's %d", n, limit)
	}
	var result *openai.ChatCompletionMessage
	for i, m := range last.Messages {
		if strings.Contains(m.Content, out) {
			t.Error("the next message's request carries the whole output")
		}
		if m.Role == "tool" && m.ToolCallID == "l1" {
			result = &last.Messages[i]
		}
	}
	if result == nil || !strings.HasPrefix(result.Content, out[:100]) || !strings.Contains(result.Content, "shortened") {
		t.Errorf("the next message's request answers the call with %+v, want the output's beginning and a note that it was shortened", result)
	}
}

// A request still refused as too long once shortened is not sent again
// and again: the turn fails with the model's error, after one retry.
func TestContextExceededRetriesOnce(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{Content: hexOutput(7000)}, nil
		}}))
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_logs", `{}`)))
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return tooLong })
	_, err := w.agent().Run(context.Background(), request("read the logs"))
	var me *agent.ModelError
	if !errors.As(err, &me) || !me.ContextExceeded() {
		t.Fatalf("got %v, want the model's refusal as too long", err)
	}
	if n := len(w.model.Requests()); n != 3 {
		t.Errorf("the model got %d requests, want 3: the call, the refused one and one retry", n)
	}
}

// ContextExceeded knows a request refused as too long by the code, or by
// the words of the common servers, and nothing else.
func TestModelErrorContextExceeded(t *testing.T) {
	for _, c := range []struct {
		e    agent.ModelError
		want bool
	}{
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Code: "context_length_exceeded", Message: "Input too long."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 130211 tokens."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "The decoder prompt (length 9000) is longer than the maximum model length of 8192."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Code: "400", Message: "litellm.ContextWindowExceededError: litellm.BadRequestError: AnthropicException - prompt is too long: 210000 tokens > 200000 maximum"}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length"}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "the request exceeds the available context size, try increasing it"}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "Invalid schema for function 'deploy'"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 404, Message: "This model's maximum context length is 4096 tokens"}, false},
		{agent.ModelError{Kind: agent.ErrKindContentRefused, StatusCode: 400, Code: "content_filter", Message: "flagged"}, false},
		{agent.ModelError{Kind: agent.ErrKindStreamCut, Message: "maximum context length"}, false},
	} {
		if got := c.e.ContextExceeded(); got != c.want {
			t.Errorf("%v: ContextExceeded() = %v, want %v", &c.e, got, c.want)
		}
	}
}

// A turn that failed after its tools ran (the model did not answer their
// results) leaves them in the history before the thread's next message.
// When that history is over the budget, their outputs are shortened like
// any old ones: the exchange is not dropped whole, so the model still
// knows that the deploy ran.
func TestFailedTurnKeepsTheRecordOfWhatRan(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n  rules:\n    - id: all\n      tool: \"*\"\n      verdict: allow\n"
	logs := strings.Repeat("2024-05-01T12:00:00Z level=info msg=\"request handled\" path=/v1/orders status=200\n", 200)
	must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler:     func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{Content: logs}, nil }}))
	w.cfg.ContextBudget = 3000
	w.model.Reply(fakeopenai.ToolCalls(call("d1", "deploy", `{"service":"api","version":"9"}`), call("l1", "read_logs", `{}`)),
		fakeopenai.Response{Status: 503}, fakeopenai.Text("Yes, api 9 was deployed."))
	a := w.agent()
	ctx := context.Background()
	if _, err := a.Run(ctx, request("deploy api 9 and show me its logs")); err == nil {
		t.Fatal("the turn whose model failed succeeded")
	}
	if _, err := a.Run(ctx, request("did the deploy go through?")); err != nil {
		t.Fatal(err)
	}
	if n := len(w.deploys.Args()); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	reqs := w.model.Requests()
	var deployCall, deployResult bool
	for _, m := range reqs[len(reqs)-1].Messages {
		for _, tc := range m.ToolCalls {
			deployCall = deployCall || tc.ID == "d1" && tc.Function.Name == "deploy"
		}
		deployResult = deployResult || m.Role == "tool" && m.ToolCallID == "d1" && m.Content == "deployed"
		if strings.Contains(m.Content, logs) {
			t.Error("the request carries the whole logs, over the budget")
		}
	}
	if !deployCall || !deployResult {
		t.Errorf("the next message's request holds the deploy call: %v, its result: %v; want both", deployCall, deployResult)
	}
}

// toolLess answers as LiteLLM in front of Anthropic or Bedrock does: a
// request whose history holds tool calls or results but that offers no
// tools is refused.
func toolLess(r openai.ChatCompletionRequest) (fakeopenai.Response, bool) {
	if len(r.Tools) > 0 {
		return fakeopenai.Response{}, false
	}
	for _, m := range r.Messages {
		if len(m.ToolCalls) > 0 || m.Role == "tool" {
			return fakeopenai.Error(400, "litellm.UnsupportedParamsError: Anthropic doesn't support tool calling without `tools=` param specified."), true
		}
	}
	return fakeopenai.Response{}, false
}

// Explain offers the model the tools, as the history's calls need on some
// servers, but with tool_choice "none", so that it cannot call one; when
// no tool is left to offer, the history's calls and results are sent as
// text instead.
func TestExplainOffersToolsButNoCall(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	ctx := context.Background()
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if resp, refused := toolLess(r); refused {
			return resp
		}
		return fakeopenai.Text("It deploys api 9.")
	})
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"9"}`))
	text, err := a.Explain(ctx, p.ID, "UOTHER2")
	if err != nil || text != "It deploys api 9." {
		t.Fatalf("Explain: got %q, %v; want the model's text", text, err)
	}
	reqs := w.model.Requests()
	req := reqs[len(reqs)-1]
	if len(req.Tools) == 0 || req.ToolChoice != "none" {
		t.Errorf("the explanation request offered %d tools with tool_choice %v, want the tools and none", len(req.Tools), req.ToolChoice)
	}

	// The tools are gone (an MCP server's list changed): the calls are
	// sent as text.
	must(t, w.reg.Replace(func(string) bool { return true }, nil))
	text, err = a.Explain(ctx, p.ID, "UOTHER2")
	if err != nil || text != "It deploys api 9." {
		t.Fatalf("Explain with no tools: got %q, %v; want the model's text", text, err)
	}
	reqs = w.model.Requests()
	req = reqs[len(reqs)-1]
	if req.ToolChoice != nil {
		t.Errorf("a request with no tools has tool_choice %v", req.ToolChoice)
	}
	var described bool
	for _, m := range req.Messages {
		if len(m.ToolCalls) > 0 || m.Role == "tool" || m.ToolCallID != "" {
			t.Errorf("a request with no tools holds a %s message with calls %+v", m.Role, m.ToolCalls)
		}
		described = described || strings.Contains(m.Content, `deploy`) && strings.Contains(m.Content, `{"service":"api","version":"9"}`)
	}
	if !described {
		t.Error("the request with no tools does not say which call was made")
	}
}

// A turn when the registry offers no tools (all were removed) sends the
// history's calls and results as text, which every server takes; the
// history kept is unchanged.
func TestTurnWithoutToolsSendsCallsAsText(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	ctx := context.Background()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_file", `{"path":"/etc/motd"}`)), fakeopenai.Text("It says hello."))
	if _, err := a.Run(ctx, request("read motd")); err != nil {
		t.Fatal(err)
	}
	must(t, w.reg.Replace(func(string) bool { return true }, nil))
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if resp, refused := toolLess(r); refused {
			return resp
		}
		return fakeopenai.Text("You're welcome.")
	})
	got, err := a.Run(ctx, request("thanks"))
	if err != nil || got.Answer != "You're welcome." {
		t.Fatalf("the turn with no tools: %+v, %v; want it answered", got, err)
	}
	reqs := w.model.Requests()
	var result bool
	for _, m := range reqs[len(reqs)-1].Messages {
		result = result || m.Role == "user" && strings.Contains(m.Content, "file contents")
	}
	if !result {
		t.Error("the request with no tools lost the call's result")
	}

	// With a tool back, the history is sent with its calls again.
	must(t, w.reg.Register(agent.Tool{Name: "read_file", Description: "Read a file", Schema: json.RawMessage(pathSchema),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: w.reads.handler("file contents")}))
	if _, err := a.Run(ctx, request("and again?")); err != nil {
		t.Fatal(err)
	}
	reqs = w.model.Requests()
	var calls int
	for _, m := range reqs[len(reqs)-1].Messages {
		calls += len(m.ToolCalls)
	}
	if calls != 1 {
		t.Errorf("with a tool back the history holds %d calls, want the one made", calls)
	}
}

// Someone who may decide a call without seeing its conversation (an
// approver the rule names, outside the private channel) who asks Why? gets
// an explanation from the paused call alone: nothing said earlier in the
// conversation, nor any tool output, reaches them. Someone who can see the
// conversation gets one from all of it.
func TestExplainToAnOutsiderLeavesTheConversationOut(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.Audience = audience{"C1": {"UREQUESTER", "UAPPROVER1"}}
	a := w.agent()
	ctx := context.Background()
	w.model.Reply(fakeopenai.Text("Noted: the staging password is hunter2."))
	if _, err := a.Run(ctx, request("the staging db password is hunter2")); err != nil {
		t.Fatal(err)
	}
	w.model.Reply(fakeopenai.ToolCalls(call("r1", "read_file", `{"path":"/etc/secret"}`), call("c1", "deploy", `{"service":"api","version":"9"}`)))
	out, err := a.Run(ctx, request("read the secret and deploy api 9"))
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("outcome %+v, want paused on the deploy", out)
	}
	p := out.Pending[0]
	w.model.Reply(fakeopenai.Text("It deploys api 9."))
	text, err := a.Explain(ctx, p.ID, "UOTHER2")
	if err != nil || text != "It deploys api 9." {
		t.Fatalf("Explain for an outsider: got %q, %v", text, err)
	}
	reqs := w.model.Requests()
	body, _ := json.Marshal(reqs[len(reqs)-1])
	for _, secret := range []string{"hunter2", "file contents", "/etc/secret", "read the secret"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the explanation request for someone outside the conversation holds %q", secret)
		}
	}
	if !strings.Contains(string(body), `{\"service\":\"api\",\"version\":\"9\"}`) {
		t.Error("the explanation request for someone outside the conversation lacks the call's arguments")
	}

	w.model.Reply(fakeopenai.Text("It deploys api 9, as asked."))
	if _, err := a.Explain(ctx, p.ID, "UAPPROVER1"); err != nil {
		t.Fatal(err)
	}
	reqs = w.model.Requests()
	body, _ = json.Marshal(reqs[len(reqs)-1])
	for _, said := range []string{"hunter2", "file contents", "read the secret"} {
		if !strings.Contains(string(body), said) {
			t.Errorf("the explanation request for someone in the conversation lacks %q", said)
		}
	}
}

// The budget bounds the whole request: the system prompt and the tools'
// schemas take their share before the history does, so a history that
// would fit the budget alone is shortened when a long prompt and large
// schemas come with it.
func TestBudgetCountsThePromptAndTools(t *testing.T) {
	logs := strings.Repeat("2024-05-01T12:00:00Z level=info msg=\"request handled\" path=/v1/orders status=200\n", 60)
	for _, c := range []struct {
		name      string
		prompt    string
		shortened bool
	}{
		{"a short prompt", "You are a chat-ops assistant.", false},
		{"a long prompt", strings.Repeat("Never restart a production service without saying which one and why, and check its health afterwards.\n", 80), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, backends(t)[0])
			w.cfg.SystemPrompt = c.prompt
			w.cfg.ContextBudget = 5000
			must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
				Annotations: approvals.Hints{ReadOnly: true},
				Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
					return agent.Result{Content: logs}, nil
				}}))
			w.model.Reply(fakeopenai.ToolCalls(call("l1", "read_logs", `{}`)), fakeopenai.Text("All fine."))
			if _, err := w.agent().Run(context.Background(), request("show me the logs")); err != nil {
				t.Fatal(err)
			}
			got := toolResults(t, w.model)
			if len(got) != 1 {
				t.Fatalf("the model read %d results, want 1", len(got))
			}
			if shortened := got[0] != "l1: "+logs; shortened != c.shortened {
				t.Errorf("the output was shortened: %v, want %v (%d bytes read of %d)", shortened, c.shortened, len(got[0]), len(logs))
			}
		})
	}
}
