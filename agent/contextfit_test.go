package agent_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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

// llama.cpp refuses a prompt longer than its context inside the stream of
// a streaming request (a 200, then an error event), and some versions
// with a 500 "Context size has been exceeded.": the same refusal as a
// 400's, so the history is sent again shorter, at once rather than after
// retries of the same request. An error event that comes after some of
// the answer is no refusal of the request: nothing is sent shorter.
func TestContextExceededInTheStreamOrA500ShortensTheHistory(t *testing.T) {
	const eventTooLong = `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":3900,"n_ctx":3000}}`
	for _, tt := range []struct {
		name      string
		refuse    func(w http.ResponseWriter)
		shortened bool
	}{
		{"an error event", func(w http.ResponseWriter) { writeEvents(w, eventTooLong) }, true},
		{"a 500", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"code":500,"message":"Context size has been exceeded.","type":"server_error"}}`))
		}, true},
		{"an error event after text", func(w http.ResponseWriter) { writeEvents(w, roleChunk, textChunk("The logs"), eventTooLong) }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, backends(t)[0])
			out := hexOutput(7000)
			must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
				Annotations: approvals.Hints{ReadOnly: true},
				Handler:     func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{Content: out}, nil }}))
			w.cfg.ContextBudget = 12000
			const limit = 6000
			var mu sync.Mutex
			var sizes []int
			srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				var req openai.ChatCompletionRequest
				must(t, json.NewDecoder(r.Body).Decode(&req))
				mu.Lock()
				sizes = append(sizes, requestText(req))
				mu.Unlock()
				if requestText(req) > limit {
					tt.refuse(rw)
					return
				}
				if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
					writeEvents(rw, roleChunk, textChunk("The logs are hashes."), stopChunk)
					return
				}
				writeEvents(rw, roleChunk, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"l1","type":"function","function":{"name":"read_logs","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
			}))
			defer srv.Close()
			a := w.agentModel(agent.ModelConfig{BaseURL: srv.URL, Retries: 3, Sleep: noSleep})
			got, err := a.Run(context.Background(), request("show me the logs"))
			mu.Lock()
			defer mu.Unlock()
			if !tt.shortened {
				var me *agent.ModelError
				if err == nil || (errors.As(err, &me) && me.ContextExceeded()) {
					t.Errorf("got %+v, %v; want the cut stream's error", got, err)
				}
				for _, n := range sizes[1:] {
					if n < sizes[1] {
						t.Errorf("requests of %v bytes: one was sent shorter after an answer had begun", sizes)
					}
				}
				return
			}
			if err != nil || got.Status != agent.Answered || got.Answer != "The logs are hashes." {
				t.Errorf("the turn whose request was too long: %+v, %v; want it answered with a shorter history", got, err)
			}
			// The call, the refused request, and it shortened: the refusal
			// is not retried as it was.
			if len(sizes) != 3 || sizes[2] >= sizes[1] {
				t.Errorf("requests of %v bytes; want the call's, the refused one, then it once shorter", sizes)
			}
		})
	}
}

// A request still refused as too long once shortened is not sent again
// and again: it is cut at most three times (to half the history's
// estimate, a quarter, an eighth), and not sent again when no cut would
// make it shorter; the turn then fails with the model's error.
func TestContextExceededRetriesAFewTimes(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{Content: hexOutput(7000)}, nil
		}}))
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_logs", `{}`)))
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return tooLong })
	a := w.agent()
	_, err := a.Run(context.Background(), request("read the logs"))
	var me *agent.ModelError
	if !errors.As(err, &me) || !me.ContextExceeded() {
		t.Fatalf("got %v, want the model's refusal as too long", err)
	}
	reqs := w.model.Requests()
	if n := len(reqs); n != 5 {
		t.Errorf("the model got %d requests, want 5: the call, the refused one and three retries", n)
	}
	for i := 2; i < len(reqs); i++ {
		if requestText(reqs[i]) >= requestText(reqs[i-1]) {
			t.Errorf("retry %d carries %d bytes of text, not fewer than the %d before", i-1, requestText(reqs[i]), requestText(reqs[i-1]))
		}
	}

	// A message alone, which no cut shortens, is not sent again.
	w2 := newWorld(t, backends(t)[0])
	w2.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return tooLong })
	if _, err := w2.agent().Run(context.Background(), request("hello")); !errors.As(err, &me) || !me.ContextExceeded() {
		t.Fatalf("got %v, want the model's refusal as too long", err)
	}
	if n := len(w2.model.Requests()); n != 1 {
		t.Errorf("the model got %d requests for a message no cut shortens, want 1", n)
	}
}

// ContextExceeded knows a request refused as too long by the code, or by
// the words of the common servers (in a 400, 413 or 422), and nothing
// else.
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
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "The input token count (1250000) exceeds the maximum number of tokens allowed (1048576)."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "litellm.BadRequestError: BedrockException - {\"message\":\"Input is too long for requested model.\"}"}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "Input is too long for requested model."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 422, Message: "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 1024 `max_new_tokens`"}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 413, Message: "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 413, Message: "Request Entity Too Large"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 422, Message: "Input validation error: `temperature` must be strictly positive"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 422, Message: "Input validation error: `max_new_tokens` must be <= 2048"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "The number of tools exceeds the maximum number of tools allowed (128)."}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "Input is too long: the tool description must be at most 1024 characters"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 500, Message: "Input is too long for requested model."}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 500, Message: "Context size has been exceeded."}, true},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 429, Message: "The input token count (1250000) exceeds the maximum number of tokens allowed (1000000) per minute."}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 400, Message: "Invalid schema for function 'deploy'"}, false},
		{agent.ModelError{Kind: agent.ErrKindHTTP, StatusCode: 404, Message: "This model's maximum context length is 4096 tokens"}, false},
		{agent.ModelError{Kind: agent.ErrKindContentRefused, StatusCode: 400, Code: "content_filter", Message: "flagged"}, false},
		{agent.ModelError{Kind: agent.ErrKindStreamCut, Message: "maximum context length"}, false},
	} {
		if got := c.e.ContextExceeded(); got != c.want {
			t.Errorf("%v: ContextExceeded() = %v, want %v", &c.e, got, c.want)
		}
		// Still refused once shortened, the budget is too large for the
		// model: the operator's to fix, whatever the status.
		if c.want && !c.e.Misconfigured() {
			t.Errorf("%v: Misconfigured() = false, want true", &c.e)
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
	// One question, from the user: a request whose first message after the
	// system prompt is the model's (a call made up to ask about) is
	// refused by Bedrock, older Anthropic models and Gemma's template.
	if got := requestRoles(reqs[len(reqs)-1]); got != "system user" {
		t.Errorf("the explanation request for someone outside the conversation has the roles %s, want system user", got)
	}
	if req := reqs[len(reqs)-1]; len(req.Tools) != 0 || req.ToolChoice != nil {
		t.Errorf("the explanation request for someone outside the conversation offered %d tools with tool_choice %v, want none", len(req.Tools), req.ToolChoice)
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

// vllmMaxTokens is how vLLM refuses a request whose max_tokens leaves no
// room for the prompt (MODEL_MAX_TOKENS set as large as the model's
// context): in the words of a request longer than the context, although
// no shorter history helps.
var vllmMaxTokens = fakeopenai.Response{Status: 400, ErrorMessage: "'max_tokens' or 'max_completion_tokens' is too large: 32768. This model's maximum context length is 32768 tokens and your request has 900 input tokens (32768 > 32768 - 900)."}

// longExchanges runs n turns, each a long question and a long answer, so
// that the thread's history is large but well within the budget.
func longExchanges(t *testing.T, w *world, a *agent.Agent, n int) {
	t.Helper()
	long := strings.Repeat("word ", 400)
	for i := range n {
		w.model.Reply(fakeopenai.Text(fmt.Sprintf("answer %d %s", i, long)))
		if _, err := a.Run(context.Background(), request(fmt.Sprintf("question %d %s", i, long))); err != nil {
			t.Fatal(err)
		}
	}
}

// earlierQuestions counts the questions of longExchanges a request holds.
func earlierQuestions(r openai.ChatCompletionRequest) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "user" && strings.HasPrefix(m.Content, "question ") {
			n++
		}
	}
	return n
}

// A refusal that no shorter history cures (vLLM's for a max_tokens as
// large as the context, which names the context's length) fails the
// message, but the history stays as it was: the shortened ones sent to
// find out are not kept, so that a thread's earlier exchanges are not
// lost, a half more with each message, to a misconfiguration. Once it is
// fixed, the thread's next message is answered with all of them.
func TestRefusalsNoShorterHistoryCuresKeepTheHistory(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.ContextBudget = 100000
	a := w.agent()
	ctx := context.Background()
	longExchanges(t, w, a, 8)
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return vllmMaxTokens })
	for i := range 3 {
		_, err := a.Run(ctx, request(fmt.Sprintf("again %d", i)))
		var me *agent.ModelError
		if !errors.As(err, &me) || !me.ContextExceeded() {
			t.Fatalf("message %d: got %v, want the model's refusal", i, err)
		}
	}
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return fakeopenai.Text("ok") })
	if _, err := a.Run(ctx, request("after the fix")); err != nil {
		t.Fatal(err)
	}
	reqs := w.model.Requests()
	if n := earlierQuestions(reqs[len(reqs)-1]); n != 8 {
		t.Errorf("the request after the fix holds %d of the 8 earlier questions, want all", n)
	}
}

// A history that half its estimate does not bring within the model's
// context (a tokenizer that counts far more than the estimate) is cut
// further, to a quarter, and the turn is answered; the history kept is
// the one the model took, so the thread's next message is answered too.
func TestContextExceededCutsFurtherWhenHalfIsNotEnough(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.ContextBudget = 100000
	a := w.agent()
	ctx := context.Background()
	longExchanges(t, w, a, 8)
	// The model takes two long exchanges at most: half the history's
	// estimate keeps about four, a quarter about two.
	const most = 2
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if earlierQuestions(r) > most {
			return tooLong
		}
		return fakeopenai.Text("ok")
	})
	before := len(w.model.Requests())
	got, err := a.Run(ctx, request("and now?"))
	if err != nil || got.Status != agent.Answered {
		t.Fatalf("the turn whose history half its estimate is still too long: %+v, %v; want it answered", got, err)
	}
	reqs := w.model.Requests()[before:]
	if len(reqs) < 3 {
		t.Fatalf("the model got %d requests, want the refused one, a half refused, and a shorter one", len(reqs))
	}
	for i := 1; i < len(reqs); i++ {
		if requestText(reqs[i]) >= requestText(reqs[i-1]) {
			t.Errorf("retry %d carries %d bytes of text, not fewer than the %d before", i, requestText(reqs[i]), requestText(reqs[i-1]))
		}
	}
	if _, err := a.Run(ctx, request("still there?")); err != nil {
		t.Fatalf("the thread's next message: %v", err)
	}
	reqs = w.model.Requests()
	if n := earlierQuestions(reqs[len(reqs)-1]); n > most {
		t.Errorf("the next message's request holds %d long exchanges, more than the model takes", n)
	}
}

// roleRuns returns the roles of r's messages that follow one of the same
// role (tool messages, which follow one another by design, aside).
func roleRuns(r openai.ChatCompletionRequest) []string {
	var runs []string
	for i := 1; i < len(r.Messages); i++ {
		if role := r.Messages[i].Role; role == r.Messages[i-1].Role && role != "tool" {
			runs = append(runs, fmt.Sprintf("%d: %s after %s", i, role, role))
		}
	}
	return runs
}

func requestRoles(r openai.ChatCompletionRequest) string {
	var roles []string
	for _, m := range r.Messages {
		roles = append(roles, m.Role)
	}
	return strings.Join(roles, " ")
}

// With no tool to offer, the history's calls and results are sent as
// text, and the roles still alternate, as the chat templates of Gemma and
// Mistral and Anthropic's API require: results a person's message
// follows (a turn that failed after its tools ran, and the question of
// Why?) are sent in that message, before the person's words.
func TestExplainWithoutToolsAlternatesRoles(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	ctx := context.Background()
	w.model.Reply(fakeopenai.ToolCalls(call("r1", "read_file", `{"path":"/etc/motd"}`)), fakeopenai.Response{Status: 503})
	if _, err := a.Run(ctx, request("read motd")); err == nil {
		t.Fatal("the turn whose model failed succeeded")
	}
	p := pauseWith(t, w, a, request("now deploy api 9"), call("c1", "deploy", `{"service":"api","version":"9"}`))
	must(t, w.reg.Replace(func(string) bool { return true }, nil))
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if resp, refused := toolLess(r); refused {
			return resp
		}
		return fakeopenai.Text("It deploys api 9.")
	})
	text, err := a.Explain(ctx, p.ID, "UOTHER2")
	if err != nil || text != "It deploys api 9." {
		t.Fatalf("Explain with no tools: got %q, %v; want the model's text", text, err)
	}
	reqs := w.model.Requests()
	req := reqs[len(reqs)-1]
	if runs := roleRuns(req); len(runs) > 0 {
		t.Errorf("the request's roles do not alternate (%s): %v", requestRoles(req), runs)
	}
	body, _ := json.Marshal(req)
	for _, said := range []string{"file contents", "now deploy api 9", "not run yet", "asks why"} {
		if !strings.Contains(string(body), said) {
			t.Errorf("the request lacks %q", said)
		}
	}
	for _, m := range req.Messages {
		if i, j := strings.Index(m.Content, "file contents"), strings.Index(m.Content, "now deploy api 9"); i >= 0 && j >= 0 && j < i {
			t.Errorf("the person's message comes before the results it follows: %q", m.Content)
		}
	}
}

// LiteLLM in front of Bedrock refuses tool_choice "none" (unless told to
// drop what a provider does not support): Why? is then asked again with
// no tools, the history's calls sent as text.
func TestExplainWhereToolChoiceNoneIsRefused(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	ctx := context.Background()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"9"}`))
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if r.ToolChoice == "none" {
			return fakeopenai.Error(400, "litellm.UnsupportedParamsError: Bedrock doesn't support tool_choice=none. To drop it from the call, set `litellm.drop_params = True`.")
		}
		if resp, refused := toolLess(r); refused {
			return resp
		}
		return fakeopenai.Text("It deploys api 9.")
	})
	text, err := a.Explain(ctx, p.ID, "UOTHER2")
	if err != nil || text != "It deploys api 9." {
		t.Fatalf("Explain where tool_choice none is refused: got %q, %v; want the model's text", text, err)
	}
	reqs := w.model.Requests()
	if req := reqs[len(reqs)-1]; len(req.Tools) != 0 || req.ToolChoice != nil {
		t.Errorf("the request answered offered %d tools with tool_choice %v, want none", len(req.Tools), req.ToolChoice)
	}
}

// syncBuffer is a log's output, written from the agent's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A system prompt and tools that take the whole budget (CONTEXT_BUDGET
// set for a model smaller than what they need) do not leave the history
// nothing, which would cut even the output the model has just asked for:
// the history keeps a quarter of the budget, and the operator is warned,
// once.
func TestPromptAndToolsOverTheBudgetLeaveTheHistoryAQuarter(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	logs := strings.Repeat("2024-05-01 request handled path=/v1/orders status=200\n", 40)
	must(t, w.reg.Register(agent.Tool{Name: "read_logs", Description: "Read the logs", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler:     func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{Content: logs}, nil }}))
	w.cfg.SystemPrompt = strings.Repeat("Be careful with production. ", 1200)
	w.cfg.ContextBudget = 8000
	var out syncBuffer
	w.cfg.Logger = slog.New(slog.NewTextHandler(&out, nil))
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if last := r.Messages[len(r.Messages)-1]; last.Role == "user" && strings.Contains(last.Content, "logs") {
			return fakeopenai.ToolCalls(call("l1", "read_logs", `{}`))
		}
		return fakeopenai.Text("done")
	})
	a := w.agent()
	for _, text := range []string{"show me the logs", "and the logs again"} {
		if _, err := a.Run(context.Background(), request(text)); err != nil {
			t.Fatal(err)
		}
		got := toolResults(t, w.model)
		if len(got) != 1 || !strings.HasSuffix(got[0], ": "+logs) {
			t.Errorf("%s: the model read %q, want the whole output it asked for", text, got)
		}
	}
	warnings := 0
	for line := range strings.Lines(out.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "CONTEXT_BUDGET") {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("the log holds %d warnings that name CONTEXT_BUDGET, want one:\n%s", warnings, out.String())
	}
}

// Two pasted logs in a row that together exceed the model's context: the
// turn that answers them is sent with the first shortened, and the
// thread's next message is answered too (a run of messages that waited
// never keeps the history over the context for good).
func TestMessagesInARowOverTheContextAreShortened(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.ContextBudget = 12000
	const limit = 6000 // bytes of text the fake model takes
	w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
		if requestText(r) > limit {
			return tooLong
		}
		return fakeopenai.Text("Still here.")
	})
	a := w.agent()
	ctx := context.Background()
	if _, _, err := a.Accept(ctx, request("log 1:\n"+hexOutput(4000)), false); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Run(ctx, request("log 2:\n"+hexOutput(4000))); err != nil || got.Status != agent.Answered {
		t.Fatalf("the turn answering both logs: %+v, %v; want it answered", got.Status, err)
	}
	if got, err := a.Run(ctx, request("hello?")); err != nil || got.Status != agent.Answered {
		t.Fatalf("the thread's next message: %+v, %v; want it answered", got.Status, err)
	}
}
