package fakeopenai

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

	"github.com/sashabaranov/go-openai"
)

// DefaultText is the answer given when no response is queued and no handler
// is set.
const DefaultText = "ok"

// MaxTools is how many tools a request may offer by default: OpenAI's
// limit. A request offering more is refused as OpenAI refuses it (see
// [Server.SetMaxTools]).
const MaxTools = 128

// DefaultModel is the model listed by GET /v1/models and named in answers to
// requests that name none.
const DefaultModel = "fake-model"

// ToolCall is a function call the fake model makes.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Response scripts one answer. The zero value answers with an empty
// assistant message.
type Response struct {
	// Text is the assistant's content.
	Text string
	// Refusal is the assistant's refusal (sent before Text, in one piece).
	Refusal string
	// Chunks is the number of pieces Text is streamed in; zero or one sends
	// it whole. Text is split on rune boundaries, so it is never sent in
	// more pieces than it has runes.
	Chunks int

	// ToolCalls are the calls the assistant makes, streamed after Text. In
	// a stream, each call starts with a fragment carrying its index, id and
	// name, followed by its arguments in ArgChunks pieces; the fragments of
	// all calls are interleaved (index 0, 1, 2, 0, 1, 2, ...).
	ToolCalls []ToolCall
	// ArgChunks is the number of pieces each call's arguments are streamed
	// in; zero or one sends them whole.
	ArgChunks int

	// FinishReason overrides the finish reason, which is "tool_calls" when
	// there are tool calls and "stop" otherwise.
	FinishReason openai.FinishReason

	// Status, when neither zero nor 200, makes the answer an HTTP error
	// with this status and an OpenAI-style error body:
	// {"error": {"message": ErrorMessage, "type": ErrorType, ...}}.
	// ErrorMessage defaults to the status text; ErrorType to
	// "server_error" for 5xx statuses and "invalid_request_error" otherwise;
	// ErrorCode, the body's "code", to "rate_limit_exceeded" for a 429 and
	// null otherwise.
	Status       int
	ErrorMessage string
	ErrorType    string
	ErrorCode    string

	// Header holds extra response headers, such as Retry-After.
	Header http.Header

	// Delay is how long the server waits before answering. The wait ends
	// early, with no answer, when the client goes away or the server is
	// closed.
	Delay time.Duration
	// ChunkDelay is how long the server waits between streamed chunks.
	ChunkDelay time.Duration

	// CutAfter, when positive, ends the answer early as a dropped
	// connection would. A stream stops after CutAfter chunks (the first
	// chunk carries the role), before any finish reason and "data: [DONE]";
	// a JSON answer stops after CutAfter bytes.
	CutAfter int
	// Abort, with CutAfter, breaks the connection at the cut instead of
	// ending the response body cleanly, so the client sees an unexpected
	// EOF rather than a short body.
	Abort bool

	// IgnoreStream answers with a plain JSON completion even when the
	// request asks for a stream, as some servers do.
	IgnoreStream bool

	// Served, if set, is called once the answer is written (or given up
	// when the client went away), with the time the server spent on the
	// request from the moment it began reading its body (the reading and
	// decoding of the body included): what the model took, as its client
	// would see it but for the network. A load test subtracts it from the
	// time its client waited to tell the client's own share.
	Served func(time.Duration)
}

// Text returns a Response answering with text.
func Text(text string) Response { return Response{Text: text} }

// ToolCalls returns a Response calling the given tools.
func ToolCalls(calls ...ToolCall) Response { return Response{ToolCalls: calls} }

// Error returns a Response that fails with an HTTP status and message.
func Error(status int, message string) Response {
	return Response{Status: status, ErrorMessage: message}
}

// Server is a fake OpenAI-compatible API server. Its methods are safe for
// concurrent use.
type Server struct {
	srv       *httptest.Server
	done      chan struct{}
	closeOnce sync.Once

	mu      sync.Mutex
	queue   []Response
	handler func(openai.ChatCompletionRequest) Response
	bodies  [][]byte
	changed chan struct{} // closed and replaced when a request is recorded
	// maxTools is how many tools a request may offer; 0: any number.
	maxTools int
}

// New starts a server that is closed when the test and all its subtests
// complete.
func New(t testing.TB) *Server {
	t.Helper()
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a server. The caller must call Close when done with it.
func Start() *Server {
	s := &Server{
		done:     make(chan struct{}),
		changed:  make(chan struct{}),
		maxTools: MaxTools,
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chatCompletions)
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "invalid_request_error", "",
			fmt.Sprintf("unknown endpoint %s %s", r.Method, r.URL.Path))
	})
	s.srv = httptest.NewServer(mux)
	return s
}

// URL returns the API base URL, ending in "/v1", as clients expect it
// (go-openai's ClientConfig.BaseURL, OPENAI_BASE_URL).
func (s *Server) URL() string { return s.srv.URL + "/v1" }

// Close stops the server, ending pending delays, and waits for requests in
// flight to finish. It may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.srv.Close()
	})
}

// Reply queues responses. Each chat completion request takes the oldest
// queued response.
func (s *Server) Reply(rs ...Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, rs...)
}

// Handle sets the function that answers requests while the queue is empty,
// replacing any previous one; nil restores the default answer, DefaultText.
// The function may be called concurrently and may call the server's
// methods.
func (s *Server) Handle(f func(req openai.ChatCompletionRequest) Response) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = f
}

// SetMaxTools sets how many tools a request may offer, MaxTools (OpenAI's
// limit) until it is called; 0 means any number, as some OpenAI-compatible
// servers (vLLM, Ollama) allow. A request offering more is refused as
// OpenAI refuses it: status 400, an invalid_request_error with code
// array_above_max_length and param "tools". It is recorded, and takes no
// queued response and no handler's answer.
func (s *Server) SetMaxTools(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maxTools = max(n, 0)
}

// Pending returns the number of queued responses not yet used.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns the chat completion requests received so far, in the
// order they arrived, including those answered with an error. Each call
// returns fresh copies the caller may modify.
func (s *Server) Requests() []openai.ChatCompletionRequest {
	s.mu.Lock()
	bodies := s.bodies
	s.mu.Unlock()
	return decodeAll(bodies)
}

// WaitRequests waits until at least n chat completion requests have been
// received and returns them all, as Requests does. If ctx ends first, it
// returns the requests received so far and an error wrapping ctx's error.
func (s *Server) WaitRequests(ctx context.Context, n int) ([]openai.ChatCompletionRequest, error) {
	for {
		s.mu.Lock()
		bodies, changed := s.bodies, s.changed
		s.mu.Unlock()
		if len(bodies) >= n {
			return decodeAll(bodies), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return decodeAll(bodies), fmt.Errorf("wait for %d requests, got %d: %w", n, len(bodies), ctx.Err())
		}
	}
}

// decodeAll decodes recorded bodies; they decoded once already, so errors
// cannot happen.
func decodeAll(bodies [][]byte) []openai.ChatCompletionRequest {
	reqs := make([]openai.ChatCompletionRequest, len(bodies))
	for i, b := range bodies {
		_ = json.Unmarshal(b, &reqs[i])
	}
	return reqs
}

// next records a request and picks its answer. A request offering more
// tools than the limit is recorded and refused (refused is the limit).
func (s *Server) next(body []byte, req openai.ChatCompletionRequest) (seq int, resp Response, refused int) {
	s.mu.Lock()
	s.bodies = append(s.bodies, body)
	seq = len(s.bodies)
	close(s.changed)
	s.changed = make(chan struct{})
	if s.maxTools > 0 && len(req.Tools) > s.maxTools {
		refused = s.maxTools
		s.mu.Unlock()
		return seq, Response{}, refused
	}
	if len(s.queue) > 0 {
		resp = s.queue[0]
		s.queue = s.queue[1:]
		s.mu.Unlock()
		return seq, resp, 0
	}
	handler := s.handler
	s.mu.Unlock()
	if handler == nil {
		return seq, Text(DefaultText), 0
	}
	return seq, handler(req), 0
}

// sleep waits for d and reports whether the request should go on.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

func (s *Server) chatCompletions(w http.ResponseWriter, r *http.Request) {
	// The time in the server runs from before the body is read: reading
	// and decoding it is the fake's work, which a load test must not count
	// as its client's.
	read := time.Now()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "read body: "+err.Error())
		return
	}
	var req openai.ChatCompletionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "invalid JSON body: "+err.Error())
		return
	}
	seq, resp, limit := s.next(body, req)
	if limit > 0 {
		// OpenAI's words, status, type, code and param.
		writeErrorBody(w, http.StatusBadRequest, map[string]any{
			"message": fmt.Sprintf("Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", limit, len(req.Tools)),
			"type":    "invalid_request_error",
			"param":   "tools",
			"code":    "array_above_max_length",
		})
		return
	}
	if resp.Served != nil {
		defer func() { resp.Served(time.Since(read)) }()
	}
	if !s.sleep(r.Context(), resp.Delay) {
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if resp.Status != 0 && resp.Status != http.StatusOK {
		typ := resp.ErrorType
		if typ == "" {
			typ = "invalid_request_error"
			if resp.Status >= 500 {
				typ = "server_error"
			}
		}
		msg := resp.ErrorMessage
		if msg == "" {
			msg = http.StatusText(resp.Status)
		}
		writeError(w, resp.Status, typ, resp.ErrorCode, msg)
		return
	}
	a := answer{
		id:      fmt.Sprintf("chatcmpl-fake-%d", seq),
		model:   req.Model,
		created: time.Now().Unix(),
		resp:    resp,
		usage:   usage(req, resp),
	}
	if a.model == "" {
		a.model = DefaultModel
	}
	if req.Stream && !resp.IgnoreStream {
		includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
		s.stream(w, r, a, includeUsage)
		return
	}
	s.complete(w, a)
}

// answer is a Response with the details of the request it answers.
type answer struct {
	id      string
	model   string
	created int64
	resp    Response
	usage   openai.Usage
}

func (a answer) finishReason() openai.FinishReason {
	switch {
	case a.resp.FinishReason != "":
		return a.resp.FinishReason
	case len(a.resp.ToolCalls) > 0:
		return openai.FinishReasonToolCalls
	default:
		return openai.FinishReasonStop
	}
}

func (s *Server) complete(w http.ResponseWriter, a answer) {
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: a.resp.Text, Refusal: a.resp.Refusal}
	for _, c := range a.resp.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{
			ID:       c.ID,
			Type:     openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments},
		})
	}
	body, err := json.Marshal(openai.ChatCompletionResponse{
		ID:      a.id,
		Object:  "chat.completion",
		Created: a.created,
		Model:   a.model,
		Choices: []openai.ChatCompletionChoice{{Message: msg, FinishReason: a.finishReason()}},
		Usage:   a.usage,
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "server_error", "", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if a.resp.CutAfter > 0 && a.resp.CutAfter < len(body) {
		_, _ = w.Write(body[:a.resp.CutAfter])
		s.cut(w, a.resp.Abort)
		return
	}
	_, _ = w.Write(body)
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, a answer, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, err := json.Marshal(v)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}

	for i, delta := range deltas(a.resp) {
		if a.resp.CutAfter > 0 && i == a.resp.CutAfter {
			s.cut(w, a.resp.Abort)
			return
		}
		if i > 0 && !s.sleep(r.Context(), a.resp.ChunkDelay) {
			return
		}
		chunk := openai.ChatCompletionStreamResponse{
			ID:      a.id,
			Object:  "chat.completion.chunk",
			Created: a.created,
			Model:   a.model,
			Choices: []openai.ChatCompletionStreamChoice{{Delta: delta.delta}},
		}
		if delta.last {
			chunk.Choices[0].FinishReason = a.finishReason()
		}
		if !send(chunk) {
			return
		}
	}
	if includeUsage {
		u := a.usage
		if !send(openai.ChatCompletionStreamResponse{
			ID:      a.id,
			Object:  "chat.completion.chunk",
			Created: a.created,
			Model:   a.model,
			Choices: []openai.ChatCompletionStreamChoice{},
			Usage:   &u,
		}) {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// cut ends a response early: cleanly, or by breaking the connection.
func (s *Server) cut(w http.ResponseWriter, abort bool) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	if abort {
		panic(http.ErrAbortHandler)
	}
}

type streamDelta struct {
	delta openai.ChatCompletionStreamChoiceDelta
	last  bool // carries the finish reason
}

// deltas lays out a streamed answer: the role, the text pieces, the
// interleaved tool call fragments, and an empty delta carrying the finish
// reason.
func deltas(resp Response) []streamDelta {
	ds := []streamDelta{{delta: openai.ChatCompletionStreamChoiceDelta{Role: openai.ChatMessageRoleAssistant}}}
	if resp.Refusal != "" {
		ds = append(ds, streamDelta{delta: openai.ChatCompletionStreamChoiceDelta{Refusal: resp.Refusal}})
	}
	if resp.Text != "" {
		for _, p := range split(resp.Text, resp.Chunks) {
			ds = append(ds, streamDelta{delta: openai.ChatCompletionStreamChoiceDelta{Content: p}})
		}
	}

	pieces := make([][]string, len(resp.ToolCalls))
	rounds := 0
	for i, c := range resp.ToolCalls {
		if c.Arguments != "" {
			pieces[i] = split(c.Arguments, resp.ArgChunks)
		}
		rounds = max(rounds, len(pieces[i]))
	}
	for i, c := range resp.ToolCalls {
		ds = append(ds, streamDelta{delta: openai.ChatCompletionStreamChoiceDelta{
			ToolCalls: []openai.ToolCall{{
				Index:    &i,
				ID:       c.ID,
				Type:     openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: c.Name},
			}},
		}})
	}
	for round := range rounds {
		for i := range resp.ToolCalls {
			if round >= len(pieces[i]) {
				continue
			}
			ds = append(ds, streamDelta{delta: openai.ChatCompletionStreamChoiceDelta{
				ToolCalls: []openai.ToolCall{{
					Index:    &i,
					Function: openai.FunctionCall{Arguments: pieces[i][round]},
				}},
			}})
		}
	}

	return append(ds, streamDelta{last: true})
}

// split cuts s into n pieces of about equal length on rune boundaries.
func split(s string, n int) []string {
	runes := []rune(s)
	n = min(max(n, 1), max(len(runes), 1))
	pieces := make([]string, 0, n)
	for i := range n {
		pieces = append(pieces, string(runes[i*len(runes)/n:(i+1)*len(runes)/n]))
	}
	return pieces
}

// usage makes up token counts: one token per word.
func usage(req openai.ChatCompletionRequest, resp Response) openai.Usage {
	var u openai.Usage
	for _, m := range req.Messages {
		u.PromptTokens += len(strings.Fields(m.Content))
	}
	u.CompletionTokens = len(strings.Fields(resp.Text))
	for _, c := range resp.ToolCalls {
		u.CompletionTokens += 1 + len(strings.Fields(c.Arguments))
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":       DefaultModel,
			"object":   "model",
			"created":  0,
			"owned_by": "fakeopenai",
		}},
	})
}

// writeError writes an OpenAI-style error body.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	switch {
	case code != "":
		e["code"] = code
	case status == http.StatusTooManyRequests:
		e["code"] = "rate_limit_exceeded"
	}
	writeErrorBody(w, status, e)
}

// writeErrorBody writes the OpenAI-style error body {"error": e}.
func writeErrorBody(w http.ResponseWriter, status int, e map[string]any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": e})
}
