package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// noSleep is a ModelConfig.Sleep that does not wait.
func noSleep(ctx context.Context, _ time.Duration) error { return ctx.Err() }

// writeEvents answers with an event stream of the given chunks (JSON
// objects), then [DONE].
func writeEvents(w http.ResponseWriter, chunks ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range chunks {
		fmt.Fprintf(w, "data: %s\n\n", c)
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

const (
	roleChunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}`
	stopChunk = `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`
)

func textChunk(text string) string {
	b, _ := json.Marshal(text)
	return fmt.Sprintf(`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":%s},"finish_reason":null}]}`, b)
}

// A provider's error reported inside an ordinary chunk (OpenRouter,
// Mistral: a top-level "error" with finish reason "error"), or a finish
// reason that says the generation failed ("error"; vLLM's "abort"), is a
// cut stream: retried while no text was shown, a stream cut error once
// some was, never an answer.
func TestModelErrorInAChunkIsACutStream(t *testing.T) {
	for _, tt := range []struct{ name, chunk string }{
		{"openrouter", `{"id":"gen-1","object":"chat.completion.chunk","provider":"openai","error":{"code":502,"message":"Provider returned error"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}`},
		{"string code", `{"id":"c","object":"chat.completion.chunk","error":{"code":"server_error","message":"upstream overloaded"},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error"}]}`},
		{"error without choices", `{"id":"c","object":"chat.completion.chunk","choices":[],"error":{"message":"upstream overloaded"}}`},
		{"finish reason error", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"error"}]}`},
		{"vllm abort", `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"abort"}]}`},
	} {
		for _, partial := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, text shown %v", tt.name, partial), func(t *testing.T) {
				var mu sync.Mutex
				n := 0
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					mu.Lock()
					n++
					first := n == 1
					mu.Unlock()
					switch {
					case !first:
						writeEvents(w, roleChunk, textChunk("fine"), stopChunk)
					case partial:
						writeEvents(w, roleChunk, textChunk("Partial"), tt.chunk)
					default:
						writeEvents(w, roleChunk, tt.chunk)
					}
				}))
				defer srv.Close()
				m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL, Model: "m", Retries: 3, Sleep: noSleep})
				var shown strings.Builder
				msg, err := m.Complete(context.Background(), userMessage("hi"), func(d string) { shown.WriteString(d) })
				mu.Lock()
				attempts := n
				mu.Unlock()
				if partial {
					modelError(t, err, agent.ErrKindStreamCut)
					if attempts != 1 || shown.String() != "Partial" {
						t.Errorf("%d attempts, shown %q; want 1 and the partial text", attempts, shown.String())
					}
					return
				}
				if err != nil || msg.Content != "fine" || attempts != 2 {
					t.Errorf("got %q, %v after %d attempts; want the retry's answer after 2", msg.Content, err, attempts)
				}
			})
		}
	}
}

// Mistral's "model_length" is a cut by the model's length, noted as
// "length" is.
func TestModelLengthCutSaysSo(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "The steps are: 1. scale the", Chunks: 3, FinishReason: "model_length"})
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "The steps are: 1. scale the\n\n(answer cut short: the model reached its output token limit)"; msg.Content != want {
		t.Errorf("content %q, want %q", msg.Content, want)
	}
}

// A server that ignores "stream": true still reports the answer's usage.
func TestModelPlainJSONAnswerReportsUsage(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "three words here", IgnoreStream: true})
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: s.URL(), Model: "m", StreamUsage: true})
	var u agent.Usage
	msg, err := m.Complete(agent.WithUsage(context.Background(), &u), userMessage("how full is the disk"), nil)
	if err != nil || msg.Content != "three words here" {
		t.Fatalf("Complete = %q, %v", msg.Content, err)
	}
	if want := (agent.Usage{InputTokens: 5, OutputTokens: 3}); u != want {
		t.Errorf("usage %+v, want %+v", u, want)
	}
}

// agentModel builds an agent as agentWith does, on the current store and
// reporting to w.rec, with a model client of cfg talking to w.model unless
// cfg names another server.
func (w *world) agentModel(cfg agent.ModelConfig) *agent.Agent {
	w.t.Helper()
	policy := w.policy
	if policy == "" {
		policy = testPolicy
	}
	p, err := approvals.ParseConfig([]byte(policy))
	must(w.t, err)
	engine := approvals.NewEngine(p, w.store.(approvals.RecordStore), approvals.WithClock(w.clock),
		approvals.WithDefaults(approvals.Defaults{TTL: w.cfg.ApprovalTTL, RemindAfter: w.cfg.ReminderAfter}))
	w.engine = engine
	if cfg.BaseURL == "" {
		cfg.BaseURL = w.model.URL()
	}
	cfg.Model = "fake-model"
	cfg.Timeout = 10 * time.Second
	return agent.New(agent.NewOpenAIModel(cfg), w.reg, engine, w.store, func(string) agent.Reporter { return w.rec }, w.cfg)
}

// Explain shows nothing while the model writes, so a stream cut after the
// first tokens is retried like one cut before them.
func TestExplainRetriesACutStream(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			a := w.agentModel(agent.ModelConfig{Retries: 2, Sleep: noSleep})
			ctx := context.Background()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"9"}`)),
				fakeopenai.Response{Text: "It deploys api 9.", Chunks: 3, CutAfter: 2},
				fakeopenai.Text("It deploys api 9."))
			out, err := a.Run(ctx, request("deploy api 9"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 1 {
				t.Fatalf("outcome %+v, want paused on one call", out)
			}
			text, err := a.Explain(ctx, out.Pending[0].ID, "UOTHER2")
			if err != nil || text != "It deploys api 9." {
				t.Fatalf("Explain: got %q, %v; want the retry's explanation", text, err)
			}
			if n := len(w.model.Requests()); n != 3 {
				t.Errorf("the model got %d requests, want 3 (the turn, the cut explanation, its retry)", n)
			}
		})
	}
}

// contentRefusals are the answers of providers that refuse a request for
// its content, by the error code they give.
var contentRefusals = map[string]string{
	"content_filter": `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"violence":{"filtered":true,"severity":"medium"}}}}}`,
	"invalid_prompt": `{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy.","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}`,
}

// refusingModel is a model server that refuses, with body, every request
// one of whose messages holds "kill"; otherwise it calls read_log when the
// last message asks it to read the log, and answers "Hello!".
func refusingModel(t *testing.T, body string) (url string, requests func() []openai.ChatCompletionRequest) {
	var mu sync.Mutex
	var reqs []openai.ChatCompletionRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req openai.ChatCompletionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		reqs = append(reqs, req)
		mu.Unlock()
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "kill") {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, body)
				return
			}
		}
		if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleUser && strings.Contains(last.Content, "read the log") {
			writeEvents(w, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_log","type":"function","function":{"name":"read_log","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`)
			return
		}
		writeEvents(w, roleChunk, textChunk("Hello!"), stopChunk)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []openai.ChatCompletionRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]openai.ChatCompletionRequest(nil), reqs...)
	}
}

// A request the provider refuses for its content (Azure's content filter,
// OpenAI's flagged prompt) is no configuration problem, and does not break
// the thread: what the model had not read yet (the person's message, or
// the tool output) is kept as a note that it was refused, so the next
// message is answered.
func TestContentRefusalDoesNotBreakTheThread(t *testing.T) {
	for _, b := range backends(t) {
		for code, body := range contentRefusals {
			for _, tt := range []struct{ name, first string }{
				{"message", "kill the stuck job"},
				{"tool output", "read the log"},
			} {
				t.Run(b.name+"/"+code+"/"+tt.name, func(t *testing.T) {
					w := newWorld(t, b)
					must(t, w.reg.Register(agent.Tool{Name: "read_log", Description: "Read the log", Schema: json.RawMessage(`{"type":"object"}`),
						Annotations: approvals.Hints{ReadOnly: true},
						Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
							return agent.Result{Content: "03:00 cron: kill -9 4242"}, nil
						}}))
					url, requests := refusingModel(t, body)
					a := w.agentModel(agent.ModelConfig{BaseURL: url, Retries: 2, Sleep: noSleep})
					ctx := context.Background()
					_, err := a.Run(ctx, request(tt.first))
					me := modelError(t, err, agent.ErrKindContentRefused)
					if me.Misconfigured() || me.Retryable() || me.Code != code || me.StatusCode != http.StatusBadRequest {
						t.Errorf("refusal %v: code %q, status %d, misconfigured %v, retryable %v; want code %q, 400, neither",
							me, me.Code, me.StatusCode, me.Misconfigured(), me.Retryable(), code)
					}
					out, err := a.Run(ctx, request("hello?"))
					if err != nil || out.Status != agent.Answered || out.Answer != "Hello!" {
						t.Fatalf("the next message: %+v, %v; want it answered", out, err)
					}
					reqs := requests()
					last := reqs[len(reqs)-1]
					var got []string
					for _, m := range last.Messages[1:] {
						got = append(got, m.Role+": "+m.Content)
					}
					note := "user: [not kept: the model provider refused a request with this message for its content]"
					if tt.name == "tool output" {
						note = "user: read the log|assistant: |tool: [not kept: the model provider refused a request with this tool output for its content]"
					}
					if want := note + "|user: hello?"; strings.Join(got, "|") != want {
						t.Errorf("the next request's messages:\n%s\nwant\n%s", strings.Join(got, "|"), want)
					}
				})
			}
		}
	}
}

// A server that writes "error": null first in every chunk (a proxy that
// serializes its chunk type so) is answered as any other: the chunks are
// read, not taken for error events that carry no error.
func TestChunkWithANullErrorFirstIsRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeEvents(w,
			`{"error":null,"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"fine"},"finish_reason":null}]}`,
			`{"error": null, "id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`)
	}))
	defer srv.Close()
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL, Model: "m", Sleep: noSleep})
	msg, err := m.Complete(t.Context(), userMessage("hi"), nil)
	if err != nil || msg.Content != "fine" {
		t.Fatalf("answer = %q, %v; want \"fine\"", msg.Content, err)
	}
}

// OpenAI answers a key whose quota or credit is used up with a 429 whose
// code is insufficient_quota: unlike a rate limit, no wait cures it, so it
// is not sent again, and it is the operator's to fix.
func TestInsufficientQuotaIsNotRetried(t *testing.T) {
	for _, tt := range []struct {
		code     string
		attempts int
	}{{"insufficient_quota", 1}, {"rate_limit_exceeded", 4}} {
		t.Run(tt.code, func(t *testing.T) {
			var mu sync.Mutex
			n := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				n++
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusTooManyRequests)
				fmt.Fprintf(w, `{"error":{"message":"You exceeded your current quota.","type":%q,"param":null,"code":%q}}`, tt.code, tt.code)
			}))
			defer srv.Close()
			m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL, Model: "m", Retries: 3, Sleep: noSleep})
			_, err := m.Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, agent.ErrKindHTTP)
			mu.Lock()
			defer mu.Unlock()
			if quota := tt.attempts == 1; n != tt.attempts || me.Retryable() == quota || me.Misconfigured() != quota {
				t.Errorf("%d attempts, retryable %v, misconfigured %v; want %d attempts, misconfigured %v", n, me.Retryable(), me.Misconfigured(), tt.attempts, quota)
			}
		})
	}
}
