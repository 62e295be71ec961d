package fakeopenai_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

func newClient(s *fakeopenai.Server) *openai.Client {
	cfg := openai.DefaultConfig("test-key")
	cfg.BaseURL = s.URL()
	return openai.NewClientWithConfig(cfg)
}

func userRequest(text string) openai.ChatCompletionRequest {
	return openai.ChatCompletionRequest{
		Model:    "test-model",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}},
	}
}

// events posts a streaming request and returns the data of each event.
func events(t *testing.T, s *fakeopenai.Server, req openai.ChatCompletionRequest) []string {
	t.Helper()
	req.Stream = true
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got, want := resp.Header.Get("Content-Type"), "text/event-stream"; got != want {
		t.Errorf("Content-Type = %q, want %q", got, want)
	}
	var data []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return data
}

func TestDefaultReply(t *testing.T) {
	s := fakeopenai.New(t)
	resp, err := newClient(s).CreateChatCompletion(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if got := resp.Choices[0].Message.Content; got != fakeopenai.DefaultText {
		t.Errorf("content = %q, want %q", got, fakeopenai.DefaultText)
	}
	if got, want := resp.Choices[0].FinishReason, openai.FinishReasonStop; got != want {
		t.Errorf("finish reason = %q, want %q", got, want)
	}
	reqs := s.Requests()
	if len(reqs) != 1 || reqs[0].Messages[0].Content != "hi" || reqs[0].Model != "test-model" {
		t.Errorf("Requests() = %+v, want the one request sent", reqs)
	}
}

func TestQueueThenHandler(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Text("first"), fakeopenai.Text("second"))
	s.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Text("echo: " + req.Messages[len(req.Messages)-1].Content)
	})
	c := newClient(s)
	for _, want := range []string{"first", "second", "echo: third", "echo: fourth"} {
		text := strings.TrimPrefix(want, "echo: ")
		resp, err := c.CreateChatCompletion(context.Background(), userRequest(text))
		if err != nil {
			t.Fatalf("CreateChatCompletion(%q): %v", text, err)
		}
		if got := resp.Choices[0].Message.Content; got != want {
			t.Errorf("answer to %q = %q, want %q", text, got, want)
		}
	}
	if got := s.Pending(); got != 0 {
		t.Errorf("Pending() = %d, want 0", got)
	}
	s.Handle(nil)
	resp, err := c.CreateChatCompletion(context.Background(), userRequest("fifth"))
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if got := resp.Choices[0].Message.Content; got != fakeopenai.DefaultText {
		t.Errorf("after Handle(nil): content = %q, want %q", got, fakeopenai.DefaultText)
	}
}

func TestStreamText(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "héllo wörld", Chunks: 4})
	data := events(t, s, userRequest("hi"))
	if n := len(data); n == 0 || data[n-1] != "[DONE]" {
		t.Fatalf("stream does not end with [DONE]: %q", data)
	}
	var text []string
	var finish []openai.FinishReason
	for _, d := range data[:len(data)-1] {
		var chunk openai.ChatCompletionStreamResponse
		if err := json.Unmarshal([]byte(d), &chunk); err != nil {
			t.Fatalf("decode chunk %q: %v", d, err)
		}
		if c := chunk.Choices[0].Delta.Content; c != "" {
			text = append(text, c)
		}
		if f := chunk.Choices[0].FinishReason; f != "" {
			finish = append(finish, f)
		}
	}
	if want := []string{"hé", "llo", " wö", "rld"}; !reflect.DeepEqual(text, want) {
		t.Errorf("content pieces = %q, want %q", text, want)
	}
	if want := []openai.FinishReason{openai.FinishReasonStop}; !reflect.DeepEqual(finish, want) {
		t.Errorf("finish reasons = %q, want %q", finish, want)
	}
}

func TestStreamUsage(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Text("two words"))
	req := userRequest("three small words")
	req.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	data := events(t, s, req)
	if len(data) < 2 {
		t.Fatalf("got %d events, want at least 2", len(data))
	}
	var chunk openai.ChatCompletionStreamResponse
	if err := json.Unmarshal([]byte(data[len(data)-2]), &chunk); err != nil {
		t.Fatal(err)
	}
	want := openai.Usage{PromptTokens: 3, CompletionTokens: 2, TotalTokens: 5}
	if chunk.Usage == nil || *chunk.Usage != want {
		t.Errorf("usage = %+v, want %+v", chunk.Usage, want)
	}
}

func TestStreamToolCallsInterleaved(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{
		ToolCalls: []fakeopenai.ToolCall{
			{ID: "call_a", Name: "a", Arguments: `{"x":1}`},
			{ID: "call_b", Name: "b", Arguments: `{"y":"two"}`},
		},
		ArgChunks: 3,
	})
	stream, err := newClient(s).CreateChatCompletionStream(context.Background(), userRequest("go"))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var order []int
	args := map[int]string{}
	ids := map[int]string{}
	var finish openai.FinishReason
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		for _, tc := range chunk.Choices[0].Delta.ToolCalls {
			order = append(order, *tc.Index)
			args[*tc.Index] += tc.Function.Arguments
			ids[*tc.Index] += tc.ID
		}
		if f := chunk.Choices[0].FinishReason; f != "" {
			finish = f
		}
	}
	if want := []int{0, 1, 0, 1, 0, 1, 0, 1}; !reflect.DeepEqual(order, want) {
		t.Errorf("fragment indexes = %v, want %v", order, want)
	}
	if want := map[int]string{0: `{"x":1}`, 1: `{"y":"two"}`}; !reflect.DeepEqual(args, want) {
		t.Errorf("arguments = %v, want %v", args, want)
	}
	if want := map[int]string{0: "call_a", 1: "call_b"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	if finish != openai.FinishReasonToolCalls {
		t.Errorf("finish reason = %q, want %q", finish, openai.FinishReasonToolCalls)
	}
}

func TestNonStreamToolCalls(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "get", Arguments: `{}`}))
	resp, err := newClient(s).CreateChatCompletion(context.Background(), userRequest("go"))
	if err != nil {
		t.Fatal(err)
	}
	want := []openai.ToolCall{{
		ID:       "call_1",
		Type:     openai.ToolTypeFunction,
		Function: openai.FunctionCall{Name: "get", Arguments: `{}`},
	}}
	if got := resp.Choices[0].Message.ToolCalls; !reflect.DeepEqual(got, want) {
		t.Errorf("tool calls = %+v, want %+v", got, want)
	}
}

func TestError(t *testing.T) {
	tests := []struct {
		resp     fakeopenai.Response
		wantType string
		wantMsg  string
	}{
		{fakeopenai.Error(http.StatusBadRequest, "bad tools"), "invalid_request_error", "bad tools"},
		{fakeopenai.Error(http.StatusTooManyRequests, ""), "invalid_request_error", "Too Many Requests"},
		{fakeopenai.Response{Status: http.StatusServiceUnavailable, ErrorType: "overloaded"}, "overloaded", "Service Unavailable"},
		{fakeopenai.Error(http.StatusInternalServerError, "boom"), "server_error", "boom"},
	}
	for _, tt := range tests {
		s := fakeopenai.New(t)
		s.Reply(tt.resp)
		_, err := newClient(s).CreateChatCompletionStream(context.Background(), userRequest("hi"))
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) {
			t.Errorf("status %d: got error %v, want *openai.APIError", tt.resp.Status, err)
			continue
		}
		if apiErr.HTTPStatusCode != tt.resp.Status || apiErr.Type != tt.wantType || apiErr.Message != tt.wantMsg {
			t.Errorf("status %d: got status %d, type %q, message %q; want %d, %q, %q", tt.resp.Status,
				apiErr.HTTPStatusCode, apiErr.Type, apiErr.Message, tt.resp.Status, tt.wantType, tt.wantMsg)
		}
		if got := len(s.Requests()); got != 1 {
			t.Errorf("status %d: recorded %d requests, want 1", tt.resp.Status, got)
		}
	}
}

func TestErrorHeader(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"7"}}})
	resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("got status %d, Retry-After %q; want 429, \"7\"", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestCut(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "one two three", Chunks: 3, CutAfter: 2})
	data := events(t, s, userRequest("hi"))
	if len(data) != 2 {
		t.Fatalf("got %d events %q, want 2", len(data), data)
	}
	for _, d := range data {
		if d == "[DONE]" || strings.Contains(d, `"finish_reason":"`) {
			t.Errorf("cut stream carries an end marker: %s", d)
		}
	}
}

func TestAbort(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "one two three", Chunks: 3, CutAfter: 2, Abort: true})
	stream, err := newClient(s).CreateChatCompletionStream(context.Background(), userRequest("hi"))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	for {
		_, err = stream.Recv()
		if err != nil {
			break
		}
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("Recv after abort: got %v, want %v", err, io.ErrUnexpectedEOF)
	}
}

func TestBadRequest(t *testing.T) {
	s := fakeopenai.New(t)
	resp, err := http.Post(s.URL()+"/chat/completions", "application/json", strings.NewReader(`{`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status = %d, want 400", resp.StatusCode)
	}
	if got := len(s.Requests()); got != 0 {
		t.Errorf("recorded %d requests, want 0", got)
	}
}

func TestModels(t *testing.T) {
	s := fakeopenai.New(t)
	list, err := newClient(s).ListModels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Models) != 1 || list.Models[0].ID != fakeopenai.DefaultModel {
		t.Errorf("models = %+v, want [%s]", list.Models, fakeopenai.DefaultModel)
	}
}

func TestWaitRequests(t *testing.T) {
	s := fakeopenai.New(t)
	c := newClient(s)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := c.CreateChatCompletion(context.Background(), userRequest("hi")); err != nil {
				t.Errorf("CreateChatCompletion: %v", err)
			}
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	reqs, err := s.WaitRequests(ctx, 3)
	if err != nil || len(reqs) != 3 {
		t.Errorf("WaitRequests(3) = %d requests, %v; want 3, nil", len(reqs), err)
	}
	wg.Wait()

	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	reqs, err = s.WaitRequests(ctx, 4)
	if !errors.Is(err, context.DeadlineExceeded) || len(reqs) != 3 {
		t.Errorf("WaitRequests(4) = %d requests, %v; want 3, %v", len(reqs), err, context.DeadlineExceeded)
	}
}

func TestRequestsAreCopies(t *testing.T) {
	s := fakeopenai.New(t)
	if _, err := newClient(s).CreateChatCompletion(context.Background(), userRequest("hi")); err != nil {
		t.Fatal(err)
	}
	s.Requests()[0].Messages[0].Content = "changed"
	if got := s.Requests()[0].Messages[0].Content; got != "hi" {
		t.Errorf("recorded content = %q after modifying a copy, want %q", got, "hi")
	}
}

func TestCloseEndsDelay(t *testing.T) {
	s := fakeopenai.Start()
	s.Reply(fakeopenai.Response{Text: "late", Delay: time.Hour})
	errc := make(chan error, 1)
	go func() {
		_, err := newClient(s).CreateChatCompletion(context.Background(), userRequest("hi"))
		errc <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.WaitRequests(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close()
	if err := <-errc; err == nil {
		t.Error("request answered after Close, want an error")
	}
}

// Served is told once, after the whole stream, how long the server spent on
// the request: at least its delay and the delays between chunks.
func TestServedReportsTheTimeInTheServer(t *testing.T) {
	s := fakeopenai.Start()
	defer s.Close()
	served := make(chan time.Duration, 2)
	const delay, chunk = 30 * time.Millisecond, 10 * time.Millisecond
	s.Reply(fakeopenai.Response{Text: "one two three", Delay: delay, ChunkDelay: chunk, Served: func(d time.Duration) { served <- d }})
	data := events(t, s, userRequest("hi"))
	if len(data) < 3 || data[len(data)-1] != "[DONE]" {
		t.Fatalf("events = %q, want a stream ending in [DONE]", data)
	}
	var got time.Duration
	select {
	case got = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Served was not called after the answer")
	}
	if min := delay + time.Duration(len(data)-3)*chunk; got < min {
		t.Errorf("Served(%v) for a delay of %v and %d chunks %v apart; want at least %v", got, delay, len(data)-1, chunk, min)
	}
	select {
	case d := <-served:
		t.Errorf("Served called again (%v)", d)
	default:
	}
}

// Served counts the time the server spends reading and decoding the
// request's body: that is the fake's work, not its client's. A request
// whose body takes a while to decode is served in at least most of that
// time, however quickly it is answered.
func TestServedCountsTheBodysDecoding(t *testing.T) {
	s := fakeopenai.Start()
	defer s.Close()
	served := make(chan time.Duration, 1)
	s.Reply(fakeopenai.Response{Text: "ok", Served: func(d time.Duration) { served <- d }})
	// Many small messages with tool calls: much structure to decode, few
	// words for the usage count.
	req := userRequest("hi")
	for i := range 10000 {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{
			Role: openai.ChatMessageRoleAssistant,
			ToolCalls: []openai.ToolCall{{
				ID: fmt.Sprintf("call_%d", i), Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: "http_get", Arguments: `{"url":"x"}`},
			}},
		})
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// The time one decode takes here, the least of a few.
	decode := time.Duration(1<<63 - 1)
	for range 3 {
		start := time.Now()
		var r openai.ChatCompletionRequest
		if err := json.Unmarshal(body, &r); err != nil {
			t.Fatal(err)
		}
		decode = min(decode, time.Since(start))
	}
	res, err := http.Post(s.URL()+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %s", res.Status)
	}
	var got time.Duration
	select {
	case got = <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Served was not called after the answer")
	}
	if got < decode/2 {
		t.Errorf("Served(%v) for a request of %d bytes that takes %v to decode; want the decoding counted", got, len(body), decode)
	}
}
