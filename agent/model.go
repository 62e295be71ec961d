package agent

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/bodylimit"
)

// ModelConfig configures an OpenAIModel.
type ModelConfig struct {
	// BaseURL is the API base URL, such as "https://api.openai.com/v1".
	// Any server speaking the Chat Completions API works: Ollama
	// ("http://localhost:11434/v1"), vLLM, LiteLLM and the like. Empty
	// means OpenAI.
	BaseURL string
	// APIKey is sent as a bearer token (as the api-key header for Azure).
	// Local servers usually accept any value, or none.
	APIKey string
	// Model is the model name, or the deployment name on Azure.
	Model string
	// Timeout bounds each attempt of a Complete call, from sending the
	// request to the end of the streamed answer; an attempt that times out
	// before any output may be retried. Zero means no limit beyond the
	// caller's context.
	Timeout time.Duration
	// MaxTokens caps the tokens generated per answer. Zero leaves it to the
	// server.
	MaxTokens int
	// Temperature is the sampling temperature. Nil leaves it to the server.
	Temperature *float32
	// AzureAPIVersion, when set, makes the client talk to Azure OpenAI
	// with this API version (such as "2024-10-21"); BaseURL is then the
	// resource endpoint, "https://NAME.openai.azure.com".
	AzureAPIVersion string

	// Retries is how many times Complete retries a retryable failure
	// before any output (see Complete). Zero: no retries.
	Retries int
	// RetryBackoff is the wait before the first retry when the server
	// gave no Retry-After; it doubles with each retry up to
	// RetryBackoffMax, and each wait is jittered down by up to half.
	// Defaults DefaultRetryBackoff and DefaultRetryBackoffMax.
	RetryBackoff    time.Duration
	RetryBackoffMax time.Duration
	// MaxRetryWait is the longest Retry-After waited for; a server asking
	// for longer gets no retry. Default DefaultMaxRetryWait.
	MaxRetryWait time.Duration
	// Sleep waits between attempts; it returns ctx's error if ctx ends
	// first. Nil means a timer. Tests set it to avoid waiting.
	Sleep func(ctx context.Context, d time.Duration) error
	// OnRetry, if set, is called before each wait with the retry's number
	// (1 for the first), the wait and the error being retried.
	OnRetry func(ctx context.Context, retry int, wait time.Duration, err *ModelError)
	// StreamUsage asks the server for the answer's token counts
	// (stream_options.include_usage), reported through WithUsage. Most
	// OpenAI-compatible servers support it; off, nothing is asked.
	StreamUsage bool
}

// ModelRequest is what the model is asked: the conversation so far and the
// tools it may call.
type ModelRequest struct {
	// Messages is the conversation, oldest first; every assistant tool
	// call must be answered by a tool message before the next turn.
	Messages []openai.ChatCompletionMessage
	// Tools are the functions the model may call; their Parameters (a
	// JSON Schema, json.RawMessage accepted) are sent as they are.
	Tools []openai.Tool
	// ToolChoice, when set, is sent as the request's tool_choice: "none"
	// offers the tools (some servers refuse a history with tool calls in a
	// request without them) but lets the model call none; "" leaves it to
	// the server ("auto" when tools are offered).
	ToolChoice string
}

// OpenAIModel is a Model backed by an OpenAI-compatible Chat Completions
// API. It is safe for concurrent use.
type OpenAIModel struct {
	http    *http.Client
	url     string // of chat completions (see chatCompletionsURL)
	cfg     ModelConfig
	timeout error // cause of the context ending when cfg.Timeout passes
}

var _ Model = (*OpenAIModel)(nil)

// modelIdleConns is how many idle connections to the model's server are
// kept for reuse. net/http keeps 2 per host (and 100 in all) by default, so
// with many turns waiting on the model at once most calls dialled (and,
// for https, shook hands) anew. A server that speaks HTTP/2 needs one
// connection; over HTTP/1.1 (a model served in-house over http), each
// call waiting needs its own, and up to this many are kept once they are
// done, for IdleConnTimeout (90 s, net/http's default).
const modelIdleConns = 512

// modelTransport is http.DefaultTransport keeping modelIdleConns idle
// connections per host, with no cap over all hosts.
func modelTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = modelIdleConns
	t.MaxIdleConns = 0
	return t
}

// NewOpenAIModel returns a model client for cfg. It makes no request.
func NewOpenAIModel(cfg ModelConfig) *OpenAIModel {
	client := &http.Client{Transport: retryAfterTransport{next: jsonToStream{next: boundedAnswers{next: modelTransport()}}, now: time.Now}}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = DefaultRetryBackoff
	}
	if cfg.RetryBackoffMax <= 0 {
		cfg.RetryBackoffMax = DefaultRetryBackoffMax
	}
	if cfg.MaxRetryWait <= 0 {
		cfg.MaxRetryWait = DefaultMaxRetryWait
	}
	return &OpenAIModel{
		http:    client,
		url:     chatCompletionsURL(cfg),
		cfg:     cfg,
		timeout: fmt.Errorf("no complete answer within %v: %w", cfg.Timeout, context.DeadlineExceeded),
	}
}

// attempt asks the model once for the next assistant message, streaming
// it. onDelta, if not nil, is called with each fragment of the message's text
// content as it arrives, in order, from the calling goroutine.
//
// The returned message has the assistant role, the full text content and
// the tool calls the model made, in index order, each with its id, function
// name and complete argument string, and with Index cleared so that the
// message can be stored and sent back as is. Only the first choice is
// read. A text answer cut short (finish reason "length", Mistral's
// "model_length", or "content_filter") ends with a note that says so (see
// cutNote), which onDelta gets too; every tool call cut short (its
// arguments missing or not parsing), whichever of the calls it is, is left
// out, with a note in its place.
//
// Every error is a *ModelError. If the stream ends before the model
// reports that it has finished, or reports an error instead (an error
// event, a chunk with an error, or the finish reason "error" or "abort"),
// attempt fails with ErrKindStreamCut even though onDelta may already have
// seen some text.
func (m *OpenAIModel) attempt(ctx context.Context, req ModelRequest, onDelta func(text string)) (openai.ChatCompletionMessage, error) {
	if m.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, m.cfg.Timeout, m.timeout)
		defer cancel()
	}
	var retryAfter time.Duration
	stream, err := m.openStream(withRetryAfter(ctx, &retryAfter), m.request(req))
	if err != nil {
		me := m.requestError(ctx, err)
		me.RetryAfter = retryAfter
		return openai.ChatCompletionMessage{}, me
	}
	defer stream.Close()

	var acc accumulator
	defer func() { addUsage(ctx, acc.usage) }()
	for {
		chunk, err := stream.recv()
		if errors.Is(err, io.EOF) {
			break
		}
		var apiErr *openai.APIError
		if err != nil && acc.finished && ctx.Err() == nil && !errors.As(err, &apiErr) {
			// The connection broke after the model said it finished
			// (before a usage chunk or [DONE]): the answer is whole.
			break
		}
		if err != nil {
			me := m.streamError(ctx, err)
			me.refusedAtOnce = errors.As(err, &apiErr) && acc.empty()
			return openai.ChatCompletionMessage{}, me
		}
		if len(chunk.Error) > 0 && string(chunk.Error) != "null" {
			me := chunkError(chunk.Error)
			me.refusedAtOnce = me.Err != nil && acc.empty()
			return openai.ChatCompletionMessage{}, me
		}
		acc.add(chunk, onDelta)
		if acc.failed != "" {
			return openai.ChatCompletionMessage{}, &ModelError{
				Kind:    ErrKindStreamCut,
				Message: fmt.Sprintf("the server ended the answer with finish reason %q after %d chunks", acc.failed, acc.chunks),
			}
		}
	}
	if !acc.finished {
		if acc.chunks == 0 && !isEventStream(stream.Header()) {
			return openai.ChatCompletionMessage{}, &ModelError{
				Kind:    ErrKindBadResponse,
				Message: fmt.Sprintf("expected an event stream, got content type %q", stream.Header().Get("Content-Type")),
			}
		}
		if err := ctx.Err(); err != nil {
			return openai.ChatCompletionMessage{}, m.contextError(ctx, err)
		}
		return openai.ChatCompletionMessage{}, &ModelError{
			Kind:    ErrKindStreamCut,
			Message: fmt.Sprintf("stream ended after %d chunks without a finish reason", acc.chunks),
		}
	}
	note := cutNote(acc.reason)
	if note != "" && len(acc.calls) > 0 {
		// A call being written when the limit came is incomplete: its
		// arguments do not parse, or are missing, which would run it with
		// none. Calls streamed interleaved may leave any of them so, not
		// only the last one begun. Each is left out, and the answer says
		// so, once for each; complete calls stay, with no note.
		by := "the model's output limit"
		if acc.reason == openai.FinishReasonContentFilter {
			by = "the model provider's content filter"
		}
		var notes strings.Builder
		kept := acc.calls[:0]
		for _, c := range acc.calls {
			if f := c.Function; strings.TrimSpace(f.Arguments) == "" || !json.Valid([]byte(f.Arguments)) {
				fmt.Fprintf(&notes, "\n\n(a call to %s was cut short by %s, so it was not made)", cmp.Or(f.Name, "a tool"), by)
				continue
			}
			kept = append(kept, c)
		}
		acc.calls, note = kept, notes.String()
	}
	if note != "" {
		// A text answer cut short says so, where it is shown and in the
		// history.
		acc.content.WriteString(note)
		if onDelta != nil {
			onDelta(note)
		}
	}
	return acc.message(), nil
}

// chunkError is the error of a chunk that carries one (see
// streamChunk.Error): a cut stream, with the server's message when it
// gave one in OpenAI's form, else what it sent, cut short.
func chunkError(raw json.RawMessage) *ModelError {
	var e openai.APIError
	if json.Unmarshal(raw, &e) == nil && e.Message != "" {
		return &ModelError{Kind: ErrKindStreamCut, Message: e.Message, Code: errorCode(e.Code), Err: &e}
	}
	return &ModelError{Kind: ErrKindStreamCut, Message: "an error in the stream: " + bodyMessage(raw)}
}

// Finish reasons that compatible servers send besides OpenAI's.
const (
	// finishModelLength is Mistral's cut by the model's context length,
	// a cut by length for the answer.
	finishModelLength openai.FinishReason = "model_length"
	// finishError (OpenRouter, Mistral) and finishAbort (vLLM) end an
	// answer whose generation failed or was aborted: a cut stream, not a
	// finished answer.
	finishError openai.FinishReason = "error"
	finishAbort openai.FinishReason = "abort"
)

// cutNote is the note that ends a text answer cut short for reason, ""
// for an answer the model finished.
func cutNote(reason openai.FinishReason) string {
	switch reason {
	case openai.FinishReasonLength, finishModelLength:
		return "\n\n(answer cut short: the model reached its output token limit)"
	case openai.FinishReasonContentFilter:
		return "\n\n(answer cut short by the model provider's content filter)"
	}
	return ""
}

// request builds the Chat Completions request.
func (m *OpenAIModel) request(req ModelRequest) openai.ChatCompletionRequest {
	r := openai.ChatCompletionRequest{
		Model:    m.cfg.Model,
		Messages: req.Messages,
		Tools:    req.Tools,
		Stream:   true,
	}
	if req.ToolChoice != "" {
		r.ToolChoice = req.ToolChoice
	}
	if m.cfg.StreamUsage {
		r.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
	}
	if t := m.cfg.Temperature; t != nil {
		r.Temperature = *t
		if r.Temperature == 0 {
			// go-openai omits a zero temperature; the smallest positive
			// float32 is sent instead and means the same.
			r.Temperature = math.SmallestNonzeroFloat32
		}
	}
	if m.cfg.MaxTokens > 0 {
		// max_tokens is what most compatible servers understand; OpenAI's
		// reasoning models accept only max_completion_tokens.
		r.MaxTokens = m.cfg.MaxTokens
		if errors.Is(openai.NewReasoningValidator().Validate(r), openai.ErrReasoningModelMaxTokensDeprecated) {
			r.MaxTokens, r.MaxCompletionTokens = 0, m.cfg.MaxTokens
		}
	}
	return r
}

// accumulator assembles a streamed assistant message.
type accumulator struct {
	// reason is the finish reason, once finished.
	reason openai.FinishReason
	// failed is a finish reason that says the generation failed (see
	// finishError), once one came.
	failed  openai.FinishReason
	content strings.Builder
	refusal strings.Builder
	// calls are the tool calls in the order they began; at is the call
	// each stream index is filling.
	calls    []*openai.ToolCall
	at       map[int]*openai.ToolCall
	chunks   int
	finished bool
	usage    Usage
}

// empty reports whether nothing of the answer came yet: no text, refusal
// or call.
func (a *accumulator) empty() bool {
	return a.content.Len() == 0 && a.refusal.Len() == 0 && len(a.calls) == 0
}

func (a *accumulator) add(chunk streamChunk, onDelta func(string)) {
	a.chunks++
	if u := chunk.Usage; u != nil {
		a.usage = Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	}
	for _, choice := range chunk.Choices {
		if choice.Index != 0 {
			continue
		}
		d := choice.Delta
		if d.Content != "" {
			a.content.WriteString(d.Content)
			if onDelta != nil {
				onDelta(d.Content)
			}
		}
		a.refusal.WriteString(d.Refusal)
		for _, tc := range d.ToolCalls {
			a.addToolCall(tc)
		}
		switch r := choice.FinishReason; r {
		case "", openai.FinishReasonNull:
		case finishError, finishAbort:
			a.failed = r
		default:
			a.finished, a.reason = true, r
		}
	}
}

// addToolCall merges a tool call fragment into the call its index is
// filling. A fragment with an id or a name other than that call's (but
// for a piece of its name: see namePiece), or with
// an id or a name and arguments after that call's whole object, begins
// another call (see beginsAnother): some servers send every parallel call
// with index 0, each whole or with its own id. A fragment without an index
// is a whole call (some servers send them so).
func (a *accumulator) addToolCall(tc openai.ToolCall) {
	var call *openai.ToolCall
	if tc.Index != nil {
		call = a.at[*tc.Index]
	}
	if call == nil || beginsAnother(call, tc) {
		call = &openai.ToolCall{Type: openai.ToolTypeFunction}
		a.calls = append(a.calls, call)
		if tc.Index != nil {
			if a.at == nil {
				a.at = make(map[int]*openai.ToolCall)
			}
			a.at[*tc.Index] = call
		}
	}
	if call.ID == "" {
		call.ID = tc.ID
	}
	if tc.Type != "" {
		call.Type = tc.Type
	}
	switch {
	case call.Function.Name == "":
		call.Function.Name = tc.Function.Name
	case namePiece(call, tc):
		call.Function.Name += tc.Function.Name
	}
	call.Function.Arguments += tc.Function.Arguments
}

// namePiece reports whether the fragment tc carries the rest of the name
// of call, which holds the fragments of its index so far: some servers
// (Gemini's OpenAI-compatible endpoint) send a name in pieces ("read_",
// then "file"), with the id in the first only or in each, before any
// arguments. A fragment that repeats the whole name (as others send in
// every fragment) is not one.
func namePiece(call *openai.ToolCall, tc openai.ToolCall) bool {
	return tc.Function.Name != "" && call.Function.Name != "" && tc.Function.Name != call.Function.Name &&
		call.Function.Arguments == "" && (tc.ID == "" || tc.ID == call.ID)
}

// beginsAnother reports whether the fragment tc is of another call than
// call, which holds the fragments of its index so far: it carries another
// id, or, without ids, another name; or it carries an id or a name and
// brings arguments after call's, which already form a whole JSON object
// (some servers send every call whole on one index, with no id or the same
// one for each, and the same name). Servers that repeat the id and name in
// every fragment keep working: until the object is finished, the arguments
// so far are not valid JSON.
func beginsAnother(call *openai.ToolCall, tc openai.ToolCall) bool {
	if tc.ID != "" && call.ID != "" && tc.ID != call.ID {
		return true
	}
	if namePiece(call, tc) {
		return false
	}
	if (tc.ID == "" || call.ID == "") && tc.Function.Name != "" && call.Function.Name != "" && tc.Function.Name != call.Function.Name {
		return true
	}
	if tc.ID == "" && tc.Function.Name == "" {
		return false
	}
	// The cheap checks come first: json.Valid, which reads all the
	// arguments so far, runs only for a fragment with an id or a name that
	// brings arguments after arguments that end with '}'.
	return strings.TrimSpace(tc.Function.Arguments) != "" &&
		strings.HasSuffix(strings.TrimRight(call.Function.Arguments, " \t\r\n"), "}") &&
		json.Valid([]byte(call.Function.Arguments))
}

func (a *accumulator) message() openai.ChatCompletionMessage {
	msg := openai.ChatCompletionMessage{
		Role:    openai.ChatMessageRoleAssistant,
		Content: a.content.String(),
		Refusal: a.refusal.String(),
	}
	for _, c := range a.calls {
		msg.ToolCalls = append(msg.ToolCalls, *c)
	}
	return msg
}

// ModelErrorKind classifies a ModelError.
type ModelErrorKind int

const (
	// ErrKindHTTP: the server answered with an HTTP error status.
	ErrKindHTTP ModelErrorKind = iota + 1
	// ErrKindTimeout: no complete answer within the configured Timeout or
	// the caller's context deadline, or a network timeout.
	ErrKindTimeout
	// ErrKindStreamCut: the answer started but its stream broke or ended
	// before the model finished, or the server reported an error mid-way.
	ErrKindStreamCut
	// ErrKindCanceled: the caller's context was canceled.
	ErrKindCanceled
	// ErrKindBadResponse: the server's answer could not be understood.
	ErrKindBadResponse
	// ErrKindConnection: the server could not be reached.
	ErrKindConnection
	// ErrKindRequest: the request could not be built, or was refused
	// before being sent (such as a parameter the model does not support:
	// a temperature other than 1 for OpenAI's reasoning models).
	ErrKindRequest
	// ErrKindContentRefused: the server refused the request for its
	// content (a 400 with the code "content_filter", Azure's content
	// filter, or "invalid_prompt", OpenAI's flagged prompt). Sending it
	// again gets the same answer, but it is no configuration problem:
	// a request without the content it refused is answered.
	ErrKindContentRefused
)

// contentRefusalCodes are the error codes of a 400 answer that refuses a
// request for its content (see ErrKindContentRefused).
var contentRefusalCodes = []string{"content_filter", "invalid_prompt"}

func (k ModelErrorKind) String() string {
	switch k {
	case ErrKindHTTP:
		return "http error"
	case ErrKindTimeout:
		return "timeout"
	case ErrKindStreamCut:
		return "stream cut"
	case ErrKindCanceled:
		return "canceled"
	case ErrKindBadResponse:
		return "bad response"
	case ErrKindConnection:
		return "connection failed"
	case ErrKindRequest:
		return "invalid request"
	case ErrKindContentRefused:
		return "refused for its content"
	default:
		return fmt.Sprintf("ModelErrorKind(%d)", int(k))
	}
}

// ModelError is the error returned by OpenAIModel.Complete.
type ModelError struct {
	Kind ModelErrorKind
	// StatusCode is the HTTP status for ErrKindHTTP and
	// ErrKindContentRefused, zero otherwise.
	StatusCode int
	// Message is the API's error message if it sent one, or a description
	// of what went wrong.
	Message string
	// Code is the API error's code if it sent one (such as
	// "rate_limit_exceeded" or "content_filter"; a number is written in
	// decimal), "" otherwise.
	Code string
	// Err is the underlying error, if any: an *openai.APIError, an
	// *openai.RequestError, a network or context error.
	Err error
	// RetryAfter is how long the server asked to wait before trying again
	// (Retry-After), zero if it did not say.
	RetryAfter time.Duration
	// refusedAtOnce is set on an error event that began the stream, before
	// any text or call: the server's refusal of the request, as an HTTP
	// error status would be (see ContextExceeded).
	refusedAtOnce bool
}

func (e *ModelError) Error() string {
	var b strings.Builder
	b.WriteString("model: ")
	b.WriteString(e.Kind.String())
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, " %d", e.StatusCode)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.Err != nil && (e.Message == "" || !strings.Contains(e.Err.Error(), e.Message)) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *ModelError) Unwrap() error { return e.Err }

// Interrupted reports whether err ended a turn because the bot stopped
// it (the turn's context ended: a shutdown) after its message was
// recorded, rather than a failure: the context's own error, or a model
// call canceled with it. Such a turn goes on after the restart. A message
// the stop kept from being recorded (ErrNotRecorded) is lost unless sent
// again: that is a failure.
func Interrupted(err error) bool {
	if errors.Is(err, ErrNotRecorded) {
		return false
	}
	var me *ModelError
	if errors.As(err, &me) && me.Kind == ErrKindCanceled {
		return true
	}
	return errors.Is(err, context.Canceled)
}

// Retryable reports whether the same request may succeed if sent again:
// rate limiting (429), server errors (5xx), timeouts, cut streams and
// connection failures.
func (e *ModelError) Retryable() bool {
	if e.ContextExceeded() || e.quotaExhausted() {
		// The same request gets the same answer: it is sent again
		// shorter (see ContextExceeded), or not at all.
		return false
	}
	switch e.Kind {
	case ErrKindHTTP:
		return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
	case ErrKindTimeout, ErrKindStreamCut, ErrKindConnection:
		return true
	default:
		return false
	}
}

// Misconfigured reports whether the server refused the request for a
// reason the bot's operator must fix, so that sending it again gets the
// same answer: a missing or bad API key (401), a key not allowed the model
// (403), an unknown model or endpoint (404), or a request the server calls
// invalid (400), such as one longer than the model's context (which the
// agent first sends again with a shorter history, see ContextExceeded: a
// request still too long then has a context budget too large for the
// model; a 413, 422 or 500, or an error that began the stream, too, when
// it says the request is too long), or a key whose quota or credit is used
// up (OpenAI's 429 insufficient_quota, which no wait cures). A request
// refused for its content (ErrKindContentRefused) is not: it is the
// content, not the configuration, that the server refused.
func (e *ModelError) Misconfigured() bool {
	if e.ContextExceeded() || e.quotaExhausted() {
		return true
	}
	if e.Kind != ErrKindHTTP {
		return false
	}
	switch e.StatusCode {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound:
		return true
	}
	return false
}

// quotaExhausted reports whether the server refused the request because
// the key's quota or credit is used up: OpenAI's 429 with the code
// insufficient_quota, which, unlike a rate limit, no wait cures.
func (e *ModelError) quotaExhausted() bool {
	return e.Kind == ErrKindHTTP && e.StatusCode == http.StatusTooManyRequests && e.Code == "insufficient_quota"
}

// contextExceededPhrases are what the common servers say, in the message
// of a 400 (a 413 or 422 for some), of a request longer than the model's
// context: OpenAI, Azure,
// vLLM, DeepSeek, Mistral and OpenRouter ("This model's maximum context
// length is 4096 tokens…", "…too large for model with 32768 maximum
// context length"; OpenAI's older "Please reduce the length of the
// messages"), vLLM's "…is longer than the maximum model length", LiteLLM
// (its ContextWindowExceededError, and Anthropic's "prompt is too long",
// which it passes on), llama.cpp's "…exceeds the available context size"
// (and its older "Context size has been exceeded.") and Ollama's "…exceeds the context length" (whose chat endpoint mostly
// cuts the prompt instead), Gemini's OpenAI-compatible endpoint ("The
// input token count (…) exceeds the maximum number of tokens allowed
// (…)"), Bedrock's "Input is too long for requested model" (which LiteLLM
// passes on) and Text Generation Inference's "`inputs` tokens +
// `max_new_tokens` must be <= …" (a 422). Each names the context or the
// prompt's length, so that no other invalid request matches.
var contextExceededPhrases = []string{
	"context_length_exceeded",
	"maximum context length",
	"reduce the length of the messages",
	"longer than the maximum model length",
	"contextwindowexceedederror",
	"context window exceeded",
	"prompt is too long",
	"exceeds the available context size",
	"context size has been exceeded",
	"exceeds the context length",
	"exceeds the context window",
	"exceeds the maximum number of tokens allowed",
	"input is too long for requested model",
	"`inputs` tokens + `max_new_tokens` must be <=",
}

// ContextExceeded reports whether the server refused the request as
// longer than the model's context: a 400 with the error code
// "context_length_exceeded", or a 400, 413 or 422 (Text Generation
// Inference refuses it with 422, a proxy may with 413) with a message
// that says so in the words of a common server (see
// contextExceededPhrases); the same in an error event that began the
// stream, before any text or call (llama.cpp's streaming answer, a 200);
// or llama.cpp's 500 "Context size has been exceeded." A shorter request
// may be answered: the budget's estimate of the history's length is no
// tokenizer's count.
func (e *ModelError) ContextExceeded() bool {
	msg := strings.ToLower(e.Message)
	switch {
	case e.Kind == ErrKindStreamCut && e.refusedAtOnce:
		if e.Code == "context_length_exceeded" {
			return true
		}
	case e.Kind != ErrKindHTTP:
		return false
	case e.StatusCode == http.StatusInternalServerError:
		return strings.Contains(msg, "context size has been exceeded")
	case e.StatusCode == http.StatusBadRequest:
		if e.Code == "context_length_exceeded" {
			return true
		}
	case e.StatusCode == http.StatusRequestEntityTooLarge, e.StatusCode == http.StatusUnprocessableEntity:
	default:
		return false
	}
	for _, p := range contextExceededPhrases {
		if strings.Contains(msg, p) {
			return true
		}
	}
	return false
}

// rolesAlternatePhrases are what the common servers say, in the message of
// a 400 (a 422 for Text Generation Inference), of a request with two
// messages of one role in a row: the chat templates of Mistral, Gemma and
// Llama 2 that vLLM, TGI and llama.cpp apply ("Conversation roles must
// alternate user/assistant/user/assistant/..."), Anthropic's API
// ("messages: roles must alternate between \"user\" and \"assistant\"…",
// which LiteLLM passes on) and Gemini's ("Please ensure that multiturn
// requests alternate between user and model.").
var rolesAlternatePhrases = []string{
	"roles must alternate",
	"alternate between user and model",
}

// RolesMustAlternate reports whether the server refused the request for
// two messages of one role in a row: a 400 or 422 with a message that says
// so in the words of a common server (see rolesAlternatePhrases). The same
// request with its consecutive user messages merged may be answered.
func (e *ModelError) RolesMustAlternate() bool {
	if e.Kind != ErrKindHTTP || (e.StatusCode != http.StatusBadRequest && e.StatusCode != http.StatusUnprocessableEntity) {
		return false
	}
	msg := strings.ToLower(e.Message)
	return slices.ContainsFunc(rolesAlternatePhrases, func(p string) bool { return strings.Contains(msg, p) })
}

// contextError classifies an error that happened once ctx had ended.
func (m *OpenAIModel) contextError(ctx context.Context, err error) *ModelError {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg := "deadline exceeded"
		if cause := context.Cause(ctx); cause == m.timeout {
			msg = cause.Error()
		}
		return &ModelError{Kind: ErrKindTimeout, Message: msg, Err: err}
	}
	return &ModelError{Kind: ErrKindCanceled, Err: err}
}

// requestError classifies an error from sending the request, before any
// of the answer's body was read.
func (m *OpenAIModel) requestError(ctx context.Context, err error) *ModelError {
	if ctx.Err() != nil {
		return m.contextError(ctx, err)
	}
	if errors.Is(err, errAnswerTooLarge) {
		return &ModelError{Kind: ErrKindBadResponse, Message: "answer too large", Err: err}
	}
	if e := httpError(err); e != nil {
		return e
	}
	if e := netTimeout(err); e != nil {
		return e
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return &ModelError{Kind: ErrKindConnection, Err: err}
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return &ModelError{Kind: ErrKindStreamCut, Err: err}
	}
	return &ModelError{Kind: ErrKindRequest, Err: err}
}

// streamError classifies an error from reading the streamed answer.
func (m *OpenAIModel) streamError(ctx context.Context, err error) *ModelError {
	if ctx.Err() != nil {
		return m.contextError(ctx, err)
	}
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) {
		// An error event in the middle of the stream.
		return &ModelError{Kind: ErrKindStreamCut, Message: apiErr.Message, Code: errorCode(apiErr.Code), Err: err}
	}
	if e := netTimeout(err); e != nil {
		return e
	}
	if errors.Is(err, errAnswerTooLarge) {
		return &ModelError{Kind: ErrKindBadResponse, Message: "answer too large", Err: err}
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) || errors.Is(err, openai.ErrTooManyEmptyStreamMessages) || errors.Is(err, errBadEvent) {
		return &ModelError{Kind: ErrKindBadResponse, Message: "unreadable stream chunk", Err: err}
	}
	return &ModelError{Kind: ErrKindStreamCut, Err: err}
}

// httpError maps the errors of HTTP error statuses (see errorAnswer).
func httpError(err error) *ModelError {
	var apiErr *openai.APIError
	if errors.As(err, &apiErr) && apiErr.HTTPStatusCode != 0 {
		e := &ModelError{Kind: ErrKindHTTP, StatusCode: apiErr.HTTPStatusCode, Message: apiErr.Message, Code: errorCode(apiErr.Code), Err: err}
		if e.StatusCode == http.StatusBadRequest && slices.Contains(contentRefusalCodes, e.Code) {
			e.Kind = ErrKindContentRefused
		}
		return e
	}
	var reqErr *openai.RequestError
	if errors.As(err, &reqErr) && reqErr.HTTPStatusCode != 0 {
		return &ModelError{Kind: ErrKindHTTP, StatusCode: reqErr.HTTPStatusCode, Message: bodyMessage(reqErr.Body), Err: err}
	}
	return nil
}

// errorCode is an API error's code as a string: go-openai decodes it as
// a string or, when the server sent a number, an int.
func errorCode(code any) string {
	switch c := code.(type) {
	case nil:
		return ""
	case string:
		return c
	case int:
		return strconv.Itoa(c)
	default:
		return fmt.Sprint(c)
	}
}

func netTimeout(err error) *ModelError {
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return &ModelError{Kind: ErrKindTimeout, Err: err}
	}
	return nil
}

// bodyMessage extracts a message from an error body that is not in
// OpenAI's format, such as {"error": "model not found"} or plain text.
func bodyMessage(body []byte) string {
	var v struct {
		Error   any    `json:"error"`
		Message string `json:"message"`
		Detail  any    `json:"detail"`
	}
	if json.Unmarshal(body, &v) == nil {
		for _, f := range []any{v.Error, v.Message, v.Detail} {
			if s, ok := f.(string); ok && s != "" {
				return s
			}
		}
	}
	const maxLen = 300
	s := strings.TrimSpace(string(body))
	if len(s) > maxLen {
		s = strings.ToValidUTF8(s[:maxLen], "") + "..."
	}
	return s
}

func isEventStream(h http.Header) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "text/event-stream"
}

// An answer is read up to maxAnswerBytes in all and maxAnswerLine per
// line (one event of a stream, or a plain JSON answer): the client reads a
// line whole before it looks at it, and keeps the text and arguments it
// accumulates, so a server that sends more would fill the bot's memory.
// Legitimate answers are far smaller (an event carries one delta).
const (
	maxAnswerBytes = 64 << 20
	maxAnswerLine  = maxJSONAnswer
)

// errAnswerTooLarge is what reading an answer past its bounds returns.
var errAnswerTooLarge = errors.New("the model's answer is too large")

// answerTooLarge is the error of an answer past a bound (see bodylimit.Body).
func answerTooLarge(line bool) error {
	if line {
		return fmt.Errorf("%w: a line of more than %d MiB", errAnswerTooLarge, maxAnswerLine>>20)
	}
	return fmt.Errorf("%w: more than %d MiB", errAnswerTooLarge, maxAnswerBytes>>20)
}

// boundedAnswers is an http.RoundTripper whose responses' bodies are read
// within maxAnswerBytes and maxAnswerLine.
type boundedAnswers struct {
	next http.RoundTripper
}

func (t boundedAnswers) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		resp.Body = &bodylimit.Body{ReadCloser: resp.Body, Total: maxAnswerBytes, MaxLine: maxAnswerLine, TooLarge: answerTooLarge}
	}
	return resp, err
}

// jsonToStream is an http.RoundTripper for servers that ignore
// "stream": true: a successful plain JSON chat completion answering a
// streaming request is turned into the equivalent event stream.
type jsonToStream struct {
	next http.RoundTripper
}

// maxJSONAnswer bounds the size of a plain JSON answer that is converted.
const maxJSONAnswer = 16 << 20

func (t jsonToStream) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK || req.Header.Get("Accept") != "text/event-stream" {
		return resp, err
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return resp, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONAnswer))
	if err != nil {
		resp.Body.Close()
		return nil, fmt.Errorf("read answer: %w", err)
	}
	if len(body) == maxJSONAnswer {
		// Too big to convert: pass it on untouched.
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var completion openai.ChatCompletionResponse
	if json.Unmarshal(body, &completion) != nil || len(completion.Choices) == 0 {
		return resp, nil
	}
	stream, err := completionEvents(completion)
	if err != nil {
		return resp, nil
	}
	resp.Body = io.NopCloser(bytes.NewReader(stream))
	resp.Header = resp.Header.Clone()
	resp.Header.Set("Content-Type", "text/event-stream")
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return resp, nil
}

// completionEvents renders a complete answer as a stream of one chunk per
// choice followed by [DONE]. The last chunk carries the answer's usage, if
// it reported one, as a stream that includes it does.
func completionEvents(c openai.ChatCompletionResponse) ([]byte, error) {
	var buf bytes.Buffer
	for i, choice := range c.Choices {
		msg := choice.Message
		delta := openai.ChatCompletionStreamChoiceDelta{
			Role:             openai.ChatMessageRoleAssistant,
			Content:          msg.Content,
			Refusal:          msg.Refusal,
			ReasoningContent: msg.ReasoningContent,
		}
		for i, tc := range msg.ToolCalls {
			tc.Index = &i
			delta.ToolCalls = append(delta.ToolCalls, tc)
		}
		finish := choice.FinishReason
		if finish == "" || finish == openai.FinishReasonNull {
			finish = openai.FinishReasonStop
		}
		chunk := openai.ChatCompletionStreamResponse{
			ID:      c.ID,
			Object:  "chat.completion.chunk",
			Created: c.Created,
			Model:   c.Model,
			Choices: []openai.ChatCompletionStreamChoice{{Index: choice.Index, Delta: delta, FinishReason: finish}},
		}
		if i == len(c.Choices)-1 && c.Usage != (openai.Usage{}) {
			chunk.Usage = &c.Usage
		}
		b, err := json.Marshal(chunk)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&buf, "data: %s\n\n", b)
	}
	buf.WriteString("data: [DONE]\n\n")
	return buf.Bytes(), nil
}
