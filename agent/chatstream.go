package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fastjson"
)

// The model's HTTP exchange is the bot's own, with go-openai's types and
// errors: go-openai encodes a request through encoding/json, which
// re-scans what each message's MarshalJSON returns (most of the work for
// a long history, on every model call), and decodes each event of the
// answer, one per token or few, into its whole chunk type with
// encoding/json after matching the line with regular expressions. Here
// the request is encoded by segmentio's encoder and each event is decoded
// by fastjson into the fields the bot reads. What is sent, and how every
// answer and error is read, is go-openai's (see openStream and
// chatStream.next), but for three things: an error event is read alone
// and at once (go-openai read it together with the lines without data
// before it, so that an error event after a comment, as some routers send,
// was an unreadable answer, and only once the next line came); a model
// name is not checked against go-openai's list of completion-only models
// (the server answers); '<', '>' and '&' are sent unescaped.

// streamChunk is the part of a streamed chat completion chunk that the
// bot reads (see openai.ChatCompletionStreamResponse).
type streamChunk struct {
	Choices []streamChoice `json:"choices"`
	Usage   *openai.Usage  `json:"usage,omitempty"`
	// Error is what a server reports in an ordinary chunk when the
	// provider failed in the middle of the answer, as OpenRouter and
	// Mistral do (with the finish reason "error"); absent, or null,
	// otherwise. It is kept undecoded: only a failed answer reads it.
	Error json.RawMessage `json:"error,omitempty"`
}

type streamChoice struct {
	Index        int                 `json:"index"`
	Delta        streamDelta         `json:"delta"`
	FinishReason openai.FinishReason `json:"finish_reason"`
}

type streamDelta struct {
	Content   string            `json:"content,omitempty"`
	Refusal   string            `json:"refusal,omitempty"`
	ToolCalls []openai.ToolCall `json:"tool_calls,omitempty"`
}

// maxEmptyEvents is how many lines in a row that are not data events
// (blank lines between events, comments, keep-alives) a stream may send
// before it is given up on, as go-openai's default EmptyMessagesLimit.
const maxEmptyEvents = 300

// maxErrorBody bounds the lines that are not data events kept for
// reading an error from them once the stream ends.
const maxErrorBody = 64 << 10

// errBadEvent is an error event that carries no error.
var errBadEvent = errors.New("an error event without an error")

// chatCompletionsURL is where cfg asks for chat completions: BaseURL's
// /chat/completions, or on Azure the deployment's, with the API version.
func chatCompletionsURL(cfg ModelConfig) string {
	base := strings.TrimRight(cfg.BaseURL, "/")
	if cfg.AzureAPIVersion == "" {
		if base == "" {
			base = strings.TrimRight(openai.DefaultConfig("").BaseURL, "/")
		}
		return base + "/chat/completions"
	}
	deployment := cfg.Model
	if deployment == "" {
		deployment = "UNKNOWN"
	}
	return base + "/openai/deployments/" + deployment + "/chat/completions?" + url.Values{"api-version": {cfg.AzureAPIVersion}}.Encode()
}

// openStream sends r and returns its answer's stream once the server
// answered with a success status. An error status is an *openai.APIError
// when the body is an OpenAI error, else an *openai.RequestError, as
// go-openai returns them; a request the server never answered returns
// the HTTP client's error.
func (m *OpenAIModel) openStream(ctx context.Context, r openai.ChatCompletionRequest) (*chatStream, error) {
	r.Stream = true
	if err := openai.NewReasoningValidator().Validate(r); err != nil {
		return nil, err
	}
	body, err := encodeRequest(r)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set("Connection", "keep-alive")
	switch {
	case m.cfg.AzureAPIVersion != "":
		req.Header.Set("api-key", m.cfg.APIKey)
	case m.cfg.APIKey != "":
		req.Header.Set("Authorization", "Bearer "+m.cfg.APIKey)
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < http.StatusOK || resp.StatusCode >= http.StatusBadRequest {
		defer resp.Body.Close()
		return nil, errorAnswer(resp)
	}
	return &chatStream{resp: resp, r: newStreamReader(resp.Body)}, nil
}

// errorAnswer is the error of an answer with an error status.
func errorAnswer(resp *http.Response) error {
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("error, reading response body: %w", err)
	}
	var e openai.ErrorResponse
	err = json.Unmarshal(body, &e)
	if err != nil || e.Error == nil {
		reqErr := &openai.RequestError{HTTPStatus: resp.Status, HTTPStatusCode: resp.StatusCode, Err: err, Body: body}
		if e.Error != nil {
			reqErr.Err = e.Error
		}
		return reqErr
	}
	e.Error.HTTPStatus, e.Error.HTTPStatusCode = resp.Status, resp.StatusCode
	return e.Error
}

// encodeRequest is the JSON of a request, through fastjson.Marshal, in a
// slice of its own: the HTTP client may read it after the call that sent
// it returned. Text messages and tools are encoded as structs with the
// fields their MarshalJSON methods write (which encode each through
// encoding/json): the same JSON values (TestRequestEncodesAsTheClient;
// TestWireTypesHaveTheClientsFields catches a field the client adds).
func encodeRequest(r openai.ChatCompletionRequest) ([]byte, error) {
	w := wireRequest{ChatCompletionRequest: r}
	if r.Messages != nil {
		w.Messages = make([]any, len(r.Messages))
	}
	for i, m := range r.Messages {
		if m.MultiContent != nil {
			w.Messages[i] = m // parts, or content misused: the client's own
			continue
		}
		w.Messages[i] = textMessage{Role: m.Role, Content: m.Content, Refusal: m.Refusal, Name: m.Name,
			ReasoningContent: m.ReasoningContent, FunctionCall: m.FunctionCall, ToolCalls: m.ToolCalls, ToolCallID: m.ToolCallID}
	}
	if len(r.Tools) > 0 {
		w.Tools = make([]any, len(r.Tools))
		for i, t := range r.Tools {
			if len(t.Parameters) > 0 {
				w.Tools[i] = t // the Responses API's inline properties
				continue
			}
			w.Tools[i] = functionTool{Type: t.Type, Function: t.Function}
		}
	}
	return fastjson.Marshal(w)
}

// wireRequest is a request whose messages and tools are encoded as
// encodeRequest sets them, in place of the request's own.
type wireRequest struct {
	openai.ChatCompletionRequest
	Messages []any `json:"messages"`
	Tools    []any `json:"tools,omitempty"`
}

// textMessage is the JSON of an openai.ChatCompletionMessage whose content
// is text, as its MarshalJSON writes it.
type textMessage struct {
	Role             string               `json:"role"`
	Content          string               `json:"content,omitempty"`
	Refusal          string               `json:"refusal,omitempty"`
	Name             string               `json:"name,omitempty"`
	ReasoningContent string               `json:"reasoning_content,omitempty"`
	FunctionCall     *openai.FunctionCall `json:"function_call,omitempty"`
	ToolCalls        []openai.ToolCall    `json:"tool_calls,omitempty"`
	ToolCallID       string               `json:"tool_call_id,omitempty"`
}

// functionTool is the JSON of an openai.Tool without inline properties,
// as its MarshalJSON writes it.
type functionTool struct {
	Type     openai.ToolType            `json:"type"`
	Function *openai.FunctionDefinition `json:"function,omitempty"`
}

// newStreamReader buffers an answer's body; a line longer than its
// buffer is gathered in chatStream.long.
func newStreamReader(body io.Reader) *bufio.Reader { return bufio.NewReader(body) }

// chatStream reads the events of a streamed answer.
type chatStream struct {
	resp *http.Response
	r    *bufio.Reader
	// long holds a line longer than r's buffer.
	long []byte
	// chunk is where recv decodes each event.
	chunk streamChunk
	done  bool
	// other holds the lines that are not data events, up to
	// maxErrorBody: a server that answers a stream with an error body
	// and a success status is read from them.
	other bytes.Buffer
}

// Header is the answer's header.
func (s *chatStream) Header() http.Header { return s.resp.Header }

// Close closes the answer's body.
func (s *chatStream) Close() error { return s.resp.Body.Close() }

// recv decodes the next event into a chunk; io.EOF once the stream said
// [DONE] or ended.
func (s *chatStream) recv() (streamChunk, error) {
	data, err := s.next()
	if err != nil {
		return streamChunk{}, err
	}
	// Decoded into s.chunk, cleared first (see fastjson.Unmarshal): a
	// chunk of its own would be allocated for each event.
	s.chunk = streamChunk{}
	err = fastjson.Unmarshal(data, &s.chunk)
	return s.chunk, err
}

// next returns the data of the next event, which is valid until the
// next call. Lines are read as go-openai reads them: a line that is not
// "data:" (blank, a comment, a keep-alive) is skipped, up to
// maxEmptyEvents in a row (openai.ErrTooManyEmptyStreamMessages past
// them); "data: [DONE]" ends the stream (io.EOF); an event of the form
// {"error": ...} is the error it carries; at the end of the body, the
// lines skipped are read as an error answer if they are one, and the
// read's error (io.EOF, or why the body broke) is returned otherwise.
func (s *chatStream) next() ([]byte, error) {
	if s.done {
		return nil, io.EOF
	}
	for empty := 0; ; {
		line, err := s.line()
		if err != nil {
			if e := errorEvent(s.other.Bytes()); e != nil {
				return nil, e
			}
			return nil, err
		}
		line = bytes.TrimSpace(line)
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			if n := maxErrorBody - s.other.Len(); n > 0 {
				s.other.Write(line[:min(len(line), n)])
			}
			if empty++; empty > maxEmptyEvents {
				return nil, openai.ErrTooManyEmptyStreamMessages
			}
			continue
		}
		data = bytes.TrimLeft(data, " \t\n\f\r")
		if bytes.HasPrefix(data, []byte(`{"error":`)) {
			if e := errorEvent(data); e != nil {
				return nil, e
			}
			if !nullError(data) {
				return nil, errBadEvent
			}
			// A chunk whose server writes "error": null first.
		}
		if string(data) == "[DONE]" {
			s.done = true
			return nil, io.EOF
		}
		return data, nil
	}
}

// errorEvent returns the error b carries as an OpenAI error answer, or
// nil.
func errorEvent(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var e openai.ErrorResponse
	if json.Unmarshal(b, &e) != nil || e.Error == nil {
		return nil
	}
	return fmt.Errorf("error, %w", e.Error)
}

// nullError reports whether b is a chunk (with choices) whose "error" is
// null, as some servers write it in every chunk that carries none.
func nullError(b []byte) bool {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Choices json.RawMessage `json:"choices"`
	}
	return json.Unmarshal(b, &e) == nil && string(e.Error) == "null" && e.Choices != nil
}

// line reads the next line, its newline included, valid until the next
// read.
func (s *chatStream) line() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	s.long = append(s.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = s.r.ReadSlice('\n')
		s.long = append(s.long, line...)
	}
	return s.long, err
}
