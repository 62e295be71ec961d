package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// newTestModel returns a model client talking to s.
func newTestModel(s *fakeopenai.Server, timeout time.Duration) *agent.OpenAIModel {
	return agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL: s.URL(),
		APIKey:  "test-key",
		Model:   "test-model",
		Timeout: timeout,
	})
}

func userMessage(text string) agent.ModelRequest {
	return agent.ModelRequest{
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}},
	}
}

// modelError checks that err is a *agent.ModelError of the wanted kind.
func modelError(t *testing.T, err error, want agent.ModelErrorKind) *agent.ModelError {
	t.Helper()
	var me *agent.ModelError
	if !errors.As(err, &me) {
		t.Fatalf("got error %v (%T), want a *agent.ModelError", err, err)
	}
	if me.Kind != want {
		t.Fatalf("got error kind %v (%v), want %v", me.Kind, err, want)
	}
	return me
}

func TestModelStreamsText(t *testing.T) {
	s := fakeopenai.New(t)
	const text = "Hello, wörld! The disk is 93% full."
	s.Reply(fakeopenai.Response{Text: text, Chunks: 7})
	var deltas []string
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), func(d string) {
		deltas = append(deltas, d)
	})
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	want := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: text}
	if !reflect.DeepEqual(msg, want) {
		t.Errorf("message = %+v, want %+v", msg, want)
	}
	if len(deltas) != 7 || strings.Join(deltas, "") != text {
		t.Errorf("deltas = %q, want 7 pieces making %q", deltas, text)
	}
}

// A text answer cut short by the token limit or a content filter ends
// with a note saying so, streamed like the rest; a finished one has none.
func TestModelCutAnswerSaysSo(t *testing.T) {
	for _, tt := range []struct {
		reason openai.FinishReason
		note   string
	}{
		{openai.FinishReasonLength, "\n\n(answer cut short: the model reached its output token limit)"},
		{openai.FinishReasonContentFilter, "\n\n(answer cut short by the model provider's content filter)"},
		{openai.FinishReasonStop, ""},
	} {
		t.Run(string(tt.reason), func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(fakeopenai.Response{Text: "The steps are: 1. scale the", Chunks: 3, FinishReason: tt.reason})
			var deltas strings.Builder
			msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), func(d string) { deltas.WriteString(d) })
			if err != nil {
				t.Fatal(err)
			}
			if want := "The steps are: 1. scale the" + tt.note; msg.Content != want || deltas.String() != want {
				t.Errorf("content %q, streamed %q; want %q", msg.Content, deltas.String(), want)
			}
		})
	}
}

func TestModelNilOnDelta(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "fine", Chunks: 2})
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), nil)
	if err != nil || msg.Content != "fine" {
		t.Errorf("Complete = %q, %v; want %q, nil", msg.Content, err, "fine")
	}
}

func TestModelAssemblesParallelToolCalls(t *testing.T) {
	calls := []fakeopenai.ToolCall{
		{ID: "call_1", Name: "kubectl_get", Arguments: `{"resource":"pods","namespace":"prod"}`},
		{ID: "call_2", Name: "read_file", Arguments: `{"path":"/etc/hosts"}`},
		{ID: "call_3", Name: "ask_human", Arguments: `{"question":"Redémarrer le service ?"}`},
	}
	want := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "Checking."}
	for _, c := range calls {
		want.ToolCalls = append(want.ToolCalls, openai.ToolCall{
			ID:       c.ID,
			Type:     openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments},
		})
	}
	tests := []struct {
		name string
		resp fakeopenai.Response
	}{
		{"stream", fakeopenai.Response{Text: "Checking.", ToolCalls: calls, ArgChunks: 6}},
		{"one fragment each", fakeopenai.Response{Text: "Checking.", ToolCalls: calls}},
		{"server ignores stream", fakeopenai.Response{Text: "Checking.", ToolCalls: calls, IgnoreStream: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(tt.resp)
			var text strings.Builder
			msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("check prod"), func(d string) {
				text.WriteString(d)
			})
			if err != nil {
				t.Fatalf("Complete: %v", err)
			}
			if !reflect.DeepEqual(msg, want) {
				t.Errorf("message = %+v\nwant %+v", msg, want)
			}
			for i, tc := range msg.ToolCalls {
				if tc.Index != nil {
					t.Errorf("tool call %d: Index = %d, want nil", i, *tc.Index)
				}
				if !json.Valid([]byte(tc.Function.Arguments)) {
					t.Errorf("tool call %d: arguments %q are not valid JSON", i, tc.Function.Arguments)
				}
			}
			if got := text.String(); got != "Checking." {
				t.Errorf("deltas = %q, want %q", got, "Checking.")
			}
		})
	}
}

func TestModelHTTPErrors(t *testing.T) {
	tests := []struct {
		status        int
		message       string
		retryable     bool
		misconfigured bool
	}{
		{http.StatusBadRequest, "Invalid schema for function 'kubectl_get'", false, true},
		{http.StatusBadRequest, "This model's maximum context length is 8192 tokens", false, true},
		{http.StatusUnauthorized, "Incorrect API key provided", false, true},
		{http.StatusForbidden, "Project does not have access to model gpt-4o", false, true},
		{http.StatusNotFound, "The model `gpt-4o-mimi` does not exist", false, true},
		{http.StatusUnprocessableEntity, "Unprocessable", false, false},
		{http.StatusTooManyRequests, "Rate limit reached", true, false},
		{http.StatusInternalServerError, "The server had an error", true, false},
		{http.StatusServiceUnavailable, "Overloaded", true, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status, " ", tt.message), func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(fakeopenai.Error(tt.status, tt.message))
			_, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, agent.ErrKindHTTP)
			if me.StatusCode != tt.status || me.Message != tt.message {
				t.Errorf("got status %d, message %q; want %d, %q", me.StatusCode, me.Message, tt.status, tt.message)
			}
			if got := me.Retryable(); got != tt.retryable {
				t.Errorf("Retryable() = %v, want %v", got, tt.retryable)
			}
			if got := me.Misconfigured(); got != tt.misconfigured {
				t.Errorf("Misconfigured() = %v, want %v", got, tt.misconfigured)
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) {
				t.Errorf("error %v does not wrap an *openai.APIError", err)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("Error() = %q, want it to contain %q", err.Error(), tt.message)
			}
		})
	}
}

func TestModelNonOpenAIErrorBody(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{`{"error":"model \"llama9\" not found"}`, `model "llama9" not found`},
		{`{"detail":"Not authenticated"}`, "Not authenticated"},
		{"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
				fmt.Fprint(w, tt.body)
			}))
			t.Cleanup(srv.Close)
			m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL + "/v1", Model: "m"})
			_, err := m.Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, agent.ErrKindHTTP)
			if me.StatusCode != http.StatusBadGateway || me.Message != tt.want {
				t.Errorf("got status %d, message %q; want %d, %q", me.StatusCode, me.Message, http.StatusBadGateway, tt.want)
			}
		})
	}
}

func TestModelTimeout(t *testing.T) {
	tests := []struct {
		name string
		resp fakeopenai.Response
	}{
		{"before answering", fakeopenai.Response{Text: "late", Delay: time.Minute}},
		{"mid-stream", fakeopenai.Response{Text: "one two three", Chunks: 3, ChunkDelay: time.Minute}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(tt.resp)
			_, err := newTestModel(s, 50*time.Millisecond).Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, agent.ErrKindTimeout)
			if !me.Retryable() {
				t.Error("Retryable() = false, want true")
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("error %v does not wrap context.DeadlineExceeded", err)
			}
		})
	}
}

func TestModelCallerDeadline(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Delay: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := newTestModel(s, 0).Complete(ctx, userMessage("hi"), nil)
	modelError(t, err, agent.ErrKindTimeout)
}

func TestModelCanceled(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "never", Delay: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := newTestModel(s, 0).Complete(ctx, userMessage("hi"), nil)
		errc <- err
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if _, err := s.WaitRequests(wctx, 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	err := <-errc
	me := modelError(t, err, agent.ErrKindCanceled)
	if me.Retryable() {
		t.Error("Retryable() = true, want false")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v does not wrap context.Canceled", err)
	}
}

func TestModelStreamCut(t *testing.T) {
	tests := []struct {
		name string
		resp fakeopenai.Response
	}{
		{"body ends", fakeopenai.Response{Text: "one two three four", Chunks: 4, CutAfter: 3}},
		{"connection breaks", fakeopenai.Response{Text: "one two three four", Chunks: 4, CutAfter: 3, Abort: true}},
		{"tool call arguments", fakeopenai.Response{
			ToolCalls: []fakeopenai.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":"bcdef"}`}},
			ArgChunks: 4,
			CutAfter:  3,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(tt.resp)
			var deltas []string
			msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), func(d string) {
				deltas = append(deltas, d)
			})
			me := modelError(t, err, agent.ErrKindStreamCut)
			if !me.Retryable() {
				t.Error("Retryable() = false, want true")
			}
			if !reflect.DeepEqual(msg, openai.ChatCompletionMessage{}) {
				t.Errorf("message = %+v, want the zero message", msg)
			}
			// The role chunk, then text pieces up to the cut.
			if tt.resp.Text != "" {
				got := strings.Join(deltas, "")
				if len(deltas) != tt.resp.CutAfter-1 || !strings.HasPrefix(tt.resp.Text, got) {
					t.Errorf("deltas before the cut = %q, want %d pieces starting %q", deltas, tt.resp.CutAfter-1, tt.resp.Text)
				}
			}
		})
	}
}

// rawServer serves each chat completion request with handler.
func rawServer(t *testing.T, handler http.HandlerFunc) *agent.OpenAIModel {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL + "/v1", Model: "m"})
}

func TestModelBrokenStreams(t *testing.T) {
	tests := []struct {
		name     string
		ctype    string
		body     string
		kind     agent.ModelErrorKind
		wantText string
	}{
		{
			name:  "not an event stream",
			ctype: "text/html",
			body:  "<html>captive portal</html>",
			kind:  agent.ErrKindBadResponse,
		},
		{
			name:  "unparseable chunk",
			ctype: "text/event-stream",
			body:  "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {not json}\n\n",
			kind:  agent.ErrKindBadResponse,
		},
		{
			name:     "error event mid-stream",
			ctype:    "text/event-stream",
			body:     "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
			kind:     agent.ErrKindStreamCut,
			wantText: "overloaded",
		},
		{
			name:     "error event after a comment",
			ctype:    "text/event-stream",
			body:     ": PROCESSING\n\ndata: {\"error\":{\"message\":\"Provider returned error\",\"code\":502}}\n\n",
			kind:     agent.ErrKindStreamCut,
			wantText: "Provider returned error",
		},
		{
			name:  "done without finish reason",
			ctype: "text/event-stream",
			body:  "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
			kind:  agent.ErrKindStreamCut,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", tt.ctype)
				fmt.Fprint(w, tt.body)
			})
			_, err := m.Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, tt.kind)
			if !strings.Contains(me.Message, tt.wantText) {
				t.Errorf("message = %q, want it to contain %q", me.Message, tt.wantText)
			}
		})
	}
}

// An answer is read within bounds: one line (an event) of more than 16 MiB,
// or more than 64 MiB in all, fails the call as a bad response instead of
// being read whole into memory.
func TestModelAnswerIsBounded(t *testing.T) {
	for _, tt := range []struct {
		name  string
		write func(w http.ResponseWriter)
		want  string
	}{
		{"one long line", func(w http.ResponseWriter) {
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"x","arguments":"`)
			chunk := strings.Repeat("a", 1<<20)
			for range 20 {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
			io.WriteString(w, "\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n")
		}, "a line of more than 16 MiB"},
		{"too many lines", func(w http.ResponseWriter) {
			event := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("a", 64<<10) + "\"}}]}\n\n"
			for range 1100 { // about 70 MiB
				if _, err := io.WriteString(w, event); err != nil {
					return
				}
			}
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		}, "more than 64 MiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				tt.write(w)
			})
			_, err := m.Complete(context.Background(), userMessage("hi"), nil)
			me := modelError(t, err, agent.ErrKindBadResponse)
			if !strings.Contains(me.Error(), tt.want) {
				t.Errorf("error = %q, want it to say %q", me.Error(), tt.want)
			}
		})
	}
}

func TestModelConnectionRefused(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: url + "/v1", Model: "m"})
	_, err := m.Complete(context.Background(), userMessage("hi"), nil)
	me := modelError(t, err, agent.ErrKindConnection)
	if !me.Retryable() {
		t.Error("Retryable() = false, want true")
	}
}

func TestModelSendsRequest(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","properties":{"namespace":{"type":"string","enum":["prod","staging"]}},"required":["namespace"],"additionalProperties":false}`)
	messages := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You run ops tools."},
		{Role: openai.ChatMessageRoleUser, Content: "List pods in prod."},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
			ID: "call_1", Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: "list_pods", Arguments: `{"namespace":"prod"}`},
		}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1", Content: "api-7f9 Running"},
	}
	tools := []openai.Tool{{
		Type: openai.ToolTypeFunction,
		Function: &openai.FunctionDefinition{
			Name:        "list_pods",
			Description: "List the pods of a namespace.",
			Parameters:  schema,
		},
	}}
	temp := float32(0.25)

	s := fakeopenai.New(t)
	m := agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL:     s.URL(),
		Model:       "qwen3:8b",
		MaxTokens:   512,
		Temperature: &temp,
	})
	if _, err := m.Complete(context.Background(), agent.ModelRequest{Messages: messages, Tools: tools}, nil); err != nil {
		t.Fatalf("Complete: %v", err)
	}

	reqs := s.Requests()
	if len(reqs) != 1 {
		t.Fatalf("server got %d requests, want 1", len(reqs))
	}
	got := reqs[0]
	if got.Model != "qwen3:8b" || !got.Stream || got.MaxTokens != 512 || got.Temperature != temp {
		t.Errorf("got model %q, stream %v, max_tokens %d, temperature %v; want %q, true, 512, %v",
			got.Model, got.Stream, got.MaxTokens, got.Temperature, "qwen3:8b", temp)
	}
	if !reflect.DeepEqual(got.Messages, messages) {
		t.Errorf("messages = %+v\nwant %+v", got.Messages, messages)
	}
	if len(got.Tools) != 1 || got.Tools[0].Function == nil {
		t.Fatalf("tools = %+v, want the list_pods tool", got.Tools)
	}
	fn := got.Tools[0].Function
	if got.Tools[0].Type != openai.ToolTypeFunction || fn.Name != "list_pods" || fn.Description != "List the pods of a namespace." {
		t.Errorf("tool = %+v, want the list_pods tool", got.Tools[0])
	}
	params, err := json.Marshal(fn.Parameters)
	if err != nil {
		t.Fatal(err)
	}
	if !jsonEqual(t, params, schema) {
		t.Errorf("parameters = %s, want %s", params, schema)
	}
}

func TestModelTokenLimitAndTemperature(t *testing.T) {
	zero := float32(0)
	tests := []struct {
		model         string
		temperature   *float32
		wantMax       int
		wantMaxCompl  int
		wantTempAbove float32 // sent temperature is > 0 and <= this
	}{
		{model: "llama3.1", wantMax: 100},
		{model: "o3-mini", wantMaxCompl: 100},
		{model: "gpt-5-mini", wantMaxCompl: 100},
		{model: "llama3.1", temperature: &zero, wantMax: 100, wantTempAbove: 1e-30},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			s := fakeopenai.New(t)
			m := agent.NewOpenAIModel(agent.ModelConfig{
				BaseURL: s.URL(), Model: tt.model, MaxTokens: 100, Temperature: tt.temperature,
			})
			if _, err := m.Complete(context.Background(), userMessage("hi"), nil); err != nil {
				t.Fatalf("Complete: %v", err)
			}
			got := s.Requests()[0]
			if got.MaxTokens != tt.wantMax || got.MaxCompletionTokens != tt.wantMaxCompl {
				t.Errorf("max_tokens %d, max_completion_tokens %d; want %d, %d",
					got.MaxTokens, got.MaxCompletionTokens, tt.wantMax, tt.wantMaxCompl)
			}
			if tt.temperature != nil && (got.Temperature <= 0 || got.Temperature > tt.wantTempAbove) {
				t.Errorf("temperature %v, want a positive value no greater than %v", got.Temperature, tt.wantTempAbove)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("decode %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// Servers that send every parallel call with index 0 give each call its
// own id, or its own name: each is a call of its own, never arguments
// added to another's.
func TestParallelCallsOnOneStreamIndex(t *testing.T) {
	frame := func(id, name, args string) string {
		return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]}}]}`+"\n\n", id, name, args)
	}
	tests := []struct {
		name   string
		frames []string
		want   []string // id name args
	}{
		{"ids", []string{frame("call_A", "read_file", `{"path":"a"}`), frame("call_B", "read_file", `{"path":"b"}`)},
			[]string{`call_A read_file {"path":"a"}`, `call_B read_file {"path":"b"}`}},
		{"a call without arguments first", []string{frame("call_A", "cluster_status", ""), frame("call_B", "read_file", `{"path":"b"}`)},
			[]string{`call_A cluster_status `, `call_B read_file {"path":"b"}`}},
		{"names without ids", []string{frame("", "cluster_status", "{}"), frame("", "read_file", `{"path":"b"}`)},
			[]string{` cluster_status {}`, ` read_file {"path":"b"}`}},
		{"id and name repeated in every fragment", []string{frame("call_A", "read_file", `{"pa`), frame("call_A", "read_file", `th":"a"}`)},
			[]string{`call_A read_file {"path":"a"}`}},
		{"a name in pieces, the id in the first", []string{frame("call_A", "read_", ""), frame("", "file", ""), frame("", "", `{"path":"a"}`)},
			[]string{`call_A read_file {"path":"a"}`}},
		{"a name in pieces, the id in each", []string{frame("call_A", "read_", ""), frame("call_A", "file", ""), frame("call_A", "", `{"path":"a"}`)},
			[]string{`call_A read_file {"path":"a"}`}},
		{"a name in pieces, then another call", []string{frame("call_A", "read_", ""), frame("", "file", `{"path":"a"}`), frame("call_B", "deploy", `{}`)},
			[]string{`call_A read_file {"path":"a"}`, `call_B deploy {}`}},
		{"the whole name repeated before the arguments", []string{frame("call_A", "read_file", ""), frame("call_A", "read_file", `{"path":"a"}`)},
			[]string{`call_A read_file {"path":"a"}`}},
		{"fragments after the first carry neither", []string{frame("call_A", "read_file", `{"pa`), frame("", "", `th":"a"}`), frame("call_B", "deploy", `{}`), frame("", "", ``)},
			[]string{`call_A read_file {"path":"a"}`, `call_B deploy {}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Join(tt.frames, "") + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
			m := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, body)
			})
			msg, err := m.Complete(context.Background(), userMessage("hi"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tc := range msg.ToolCalls {
				got = append(got, tc.ID+" "+tc.Function.Name+" "+tc.Function.Arguments)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("calls\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// Servers that send every parallel call whole on index 0, with no id or
// the same id for each and the same name, still give each call as its own:
// two reads of two files are not one call with both arguments run together.
func TestWholeCallsOnOneStreamIndexWithTheSameIDAndName(t *testing.T) {
	frame := func(id, name, args string) string {
		return fmt.Sprintf(`data: {"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}]}}]}`+"\n\n", id, name, args)
	}
	for _, tt := range []struct {
		name   string
		frames []string
		want   []string // name args
	}{
		{"no ids, one name", []string{frame("", "read_file", `{"path":"a"}`), frame("", "read_file", `{"path":"b"}`)},
			[]string{`read_file {"path":"a"}`, `read_file {"path":"b"}`}},
		{"the same id twice", []string{frame("call_0", "read_file", `{"path":"a"}`), frame("call_0", "read_file", `{"path":"b"}`)},
			[]string{`read_file {"path":"a"}`, `read_file {"path":"b"}`}},
		// A fragment that repeats the id and name after an object that is
		// not finished yet, though it ends with '}', carries it on.
		{"an unfinished object that ends with a brace", []string{frame("call_0", "read_file", `{"opts":{"a":1}`), frame("call_0", "read_file", `,"path":"a"}`)},
			[]string{`read_file {"opts":{"a":1},"path":"a"}`}},
		// White space after a whole object is no call of its own.
		{"white space after a whole object", []string{frame("call_0", "read_file", `{"path":"a"}`), frame("call_0", "read_file", "\n")},
			[]string{"read_file {\"path\":\"a\"}\n"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Join(tt.frames, "") + `data: {"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\ndata: [DONE]\n\n"
			m := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, body)
			})
			msg, err := m.Complete(context.Background(), userMessage("hi"), nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, tc := range msg.ToolCalls {
				got = append(got, tc.Function.Name+" "+tc.Function.Arguments)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("calls\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// A tool call the output limit cut short (its arguments missing or not
// parsing) is left out, with a note saying so, rather than run with no
// arguments or blamed on the model as invalid JSON; complete calls before
// it stay.
func TestModelCallCutByTheLimitIsLeftOut(t *testing.T) {
	for _, tt := range []struct {
		name, args string
	}{{"no arguments", ""}, {"half the arguments", `{"pa`}} {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{
				{ID: "c1", Name: "read_file", Arguments: `{"path":"/a"}`},
				{ID: "c2", Name: "delete_file", Arguments: tt.args},
			}, FinishReason: openai.FinishReasonLength})
			var deltas strings.Builder
			msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), func(d string) { deltas.WriteString(d) })
			if err != nil {
				t.Fatal(err)
			}
			if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "c1" {
				t.Errorf("calls %+v, want only the complete c1", msg.ToolCalls)
			}
			const note = "(a call to delete_file was cut short by the model's output limit, so it was not made)"
			if !strings.Contains(msg.Content, note) || !strings.Contains(deltas.String(), note) {
				t.Errorf("content %q, streamed %q; want the note", msg.Content, deltas.String())
			}
		})
	}
	// Complete calls under a length finish are kept, with no note.
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{{ID: "c1", Name: "read_file", Arguments: `{"path":"/a"}`}}, FinishReason: openai.FinishReasonLength})
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), nil)
	if err != nil || len(msg.ToolCalls) != 1 || msg.Content != "" {
		t.Errorf("a complete call under a length finish: %+v, %v", msg, err)
	}
}

// Every call the output limit cut short is left out, whichever of the
// step's calls it is: with calls streamed interleaved (every call's header,
// then their arguments round by round, as fakeopenai streams them), the one
// cut need not be the last one begun.
func TestModelEveryCallCutByTheLimitIsLeftOut(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{
		{ID: "c1", Name: "restart_service", Arguments: ""},
		{ID: "c2", Name: "read_file", Arguments: `{"path":"/a"}`},
		{ID: "c3", Name: "delete_file", Arguments: `{"pa`},
	}, FinishReason: openai.FinishReasonLength})
	var deltas strings.Builder
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), func(d string) { deltas.WriteString(d) })
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].ID != "c2" {
		t.Errorf("calls %+v, want only the complete c2: a call cut before its arguments would run as {}", msg.ToolCalls)
	}
	const want = "\n\n(a call to restart_service was cut short by the model's output limit, so it was not made)" +
		"\n\n(a call to delete_file was cut short by the model's output limit, so it was not made)"
	if msg.Content != want || deltas.String() != want {
		t.Errorf("content %q, streamed %q; want a note for each call cut, %q", msg.Content, deltas.String(), want)
	}
}

// The note of a call cut short names the cause, and stands in for a name
// that never came.
func TestModelCutCallNoteNamesTheCause(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{{ID: "c1", Name: "", Arguments: `{"a`}}, FinishReason: openai.FinishReasonContentFilter})
	msg, err := newTestModel(s, 0).Complete(context.Background(), userMessage("hi"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "(a call to a tool was cut short by the model provider's content filter, so it was not made)"; len(msg.ToolCalls) != 0 || !strings.Contains(msg.Content, want) {
		t.Errorf("message %+v, want no call and %q", msg, want)
	}
}
