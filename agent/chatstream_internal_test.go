package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// wireValue decodes a request's JSON as a generic value.
func wireValue(t testing.TB, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// assertEncodesAsTheClient checks that encodeRequest writes the JSON value
// encoding/json writes for r through the client's methods, or fails where
// it fails.
func assertEncodesAsTheClient(t testing.TB, r openai.ChatCompletionRequest) {
	t.Helper()
	want, wantErr := json.Marshal(r)
	got, err := encodeRequest(r)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("encodeRequest error %v, encoding/json's %v", err, wantErr)
	}
	if err != nil {
		return
	}
	if !json.Valid(got) {
		t.Fatalf("encodeRequest wrote invalid JSON: %s", got)
	}
	if g, w := wireValue(t, got), wireValue(t, want); !reflect.DeepEqual(g, w) {
		t.Errorf("encodeRequest wrote\n%s\nencoding/json\n%s", got, want)
	}
}

func TestRequestEncodesAsTheClient(t *testing.T) {
	temp := float32(0.25)
	text := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You run <ops> tools & more \u2028 \"quoted\"."},
		{Role: openai.ChatMessageRoleUser, Content: "List pods in prod.", Name: "alice"},
		{Role: openai.ChatMessageRoleAssistant, ReasoningContent: "think", Refusal: "no", ToolCalls: []openai.ToolCall{{
			ID: "call_1", Type: openai.ToolTypeFunction,
			Function: openai.FunctionCall{Name: "list_pods", Arguments: `{"namespace":"prod","n":1.50,"s":"\u00e9"}`},
		}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "call_1", Content: "api-7f9 Running\n\tlogs: \x01"},
		{Role: openai.ChatMessageRoleAssistant, FunctionCall: &openai.FunctionCall{Name: "f", Arguments: "{}"}},
		{Role: openai.ChatMessageRoleAssistant},
	}
	parts := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
		{Type: openai.ChatMessagePartTypeText, Text: "what is this?"},
		{Type: openai.ChatMessagePartTypeImageURL, ImageURL: &openai.ChatMessageImageURL{URL: "https://example.com/a.png", Detail: openai.ImageURLDetailLow}},
	}}}
	schema := json.RawMessage(`{"type":"object","properties":{"namespace":{"type":"string","enum":["prod","staging"]}},"required":["namespace"]}`)
	tools := []openai.Tool{
		{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "list_pods", Description: "List <pods>.", Parameters: schema}},
		{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "ping", Strict: true, Parameters: map[string]any{"type": "object"}}},
	}
	for _, tt := range []struct {
		name string
		r    openai.ChatCompletionRequest
	}{
		{"text messages and tools", openai.ChatCompletionRequest{Model: "m", Messages: text, Tools: tools, Stream: true}},
		{"content as parts", openai.ChatCompletionRequest{Model: "m", Messages: parts, Stream: true}},
		{"options", openai.ChatCompletionRequest{Model: "o3-mini", Messages: text[:2], MaxCompletionTokens: 100, Temperature: temp, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true}}},
		{"no messages", openai.ChatCompletionRequest{Model: "m", Stream: true}},
		{"empty tools", openai.ChatCompletionRequest{Model: "m", Messages: text[:1], Tools: []openai.Tool{}}},
		{"a tool with inline properties", openai.ChatCompletionRequest{Model: "m", Messages: text[:1], Tools: []openai.Tool{{Type: "web_search", Parameters: map[string]any{"search_context_size": "low"}}}}},
		{"content misused", openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "a", MultiContent: parts[0].MultiContent}}}},
		{"a tool overriding its type", openai.ChatCompletionRequest{Model: "m", Tools: []openai.Tool{{Type: "x", Parameters: map[string]any{"type": "y"}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assertEncodesAsTheClient(t, tt.r)
		})
	}
	// Encoding errors are the client's.
	if _, err := encodeRequest(openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{{Content: "a", MultiContent: parts[0].MultiContent}}}); !errors.Is(err, openai.ErrContentFieldsMisused) {
		t.Errorf("content misused: error %v, want %v", err, openai.ErrContentFieldsMisused)
	}
	// The buffer is the request's own: the next encoding leaves it.
	a, _ := encodeRequest(openai.ChatCompletionRequest{Model: "first"})
	kept := string(a)
	if _, err := encodeRequest(openai.ChatCompletionRequest{Model: "second"}); err != nil || string(a) != kept {
		t.Errorf("a request's body changed to %s after the next encoding (%v)", a, err)
	}
}

func FuzzRequestEncoding(f *testing.F) {
	f.Add("user", "hello <b> & \u2028", "call_1", "list_pods", `{"a":1}`, "m")
	f.Add("tool", "\xff\xfe invalid", "", "", "", "")
	f.Add("assistant", "", "c", "f", `not json`, "o1")
	f.Fuzz(func(t *testing.T, role, content, callID, name, args, model string) {
		msgs := []openai.ChatCompletionMessage{{Role: role, Content: content, ToolCallID: callID}}
		if name != "" {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: callID, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: args}}}})
		}
		// Invalid UTF-8 included: both write it as U+FFFD.
		assertEncodesAsTheClient(t, openai.ChatCompletionRequest{Model: model, Messages: msgs, Stream: true})
	})
}

// streamOf is a chatStream reading body.
func streamOf(body string) *chatStream {
	resp := &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	return &chatStream{resp: resp, r: newStreamReader(resp.Body)}
}

// events reads s to its end: the content of each chunk, and the error it
// ended with.
func events(s *chatStream) ([]string, error) {
	var out []string
	for {
		c, err := s.recv()
		if err != nil {
			return out, err
		}
		text := ""
		for _, ch := range c.Choices {
			text += ch.Delta.Content
			for _, tc := range ch.Delta.ToolCalls {
				text += tc.Function.Arguments
			}
		}
		out = append(out, text)
	}
}

// The answer's lines are read as the client reads them.
func TestChatStreamReadsAsTheClient(t *testing.T) {
	chunk := func(s string) string {
		b, _ := json.Marshal(s)
		return `data: {"choices":[{"index":0,"delta":{"content":` + string(b) + `}}]}` + "\n\n"
	}
	long := strings.Repeat("x", 200<<10) // longer than the reader's buffer
	for _, tt := range []struct {
		name    string
		body    string
		want    []string
		wantErr func(error) bool
	}{
		{"events then done", chunk("a") + chunk("b") + "data: [DONE]\n\n" + chunk("after"), []string{"a", "b"}, isEOF},
		{"no space after data", "data:" + chunk("a")[len("data: "):] + "data:[DONE]\n", []string{"a"}, isEOF},
		{"comments, event names and CRLF", ": keep-alive\r\nevent: message\r\n" + strings.ReplaceAll(chunk("a"), "\n", "\r\n") + "id: 7\n" + chunk("b"), []string{"a", "b"}, isEOF},
		{"a line longer than the buffer", chunk(long) + chunk("b") + "data: [DONE]\n\n", []string{long, "b"}, isEOF},
		{"ends without done", chunk("a"), []string{"a"}, isEOF},
		{"a last line without its newline is not read", chunk("a") + strings.TrimSuffix(chunk("b"), "\n\n"), []string{"a"}, isEOF},
		{"an error event", chunk("a") + `data: {"error":{"message":"overloaded","type":"server_error"}}` + "\n\n" + chunk("b"), []string{"a"}, func(err error) bool {
			var e *openai.APIError
			return errors.As(err, &e) && e.Message == "overloaded"
		}},
		{"an error event after a comment", ": PROCESSING\n\n" + `data: {"error":{"message":"Provider returned error","code":502}}` + "\n\n", nil, func(err error) bool {
			var e *openai.APIError
			return errors.As(err, &e) && e.Message == "Provider returned error"
		}},
		{"an error event without an error", `data: {"error":null}` + "\n\n", nil, func(err error) bool { return errors.Is(err, errBadEvent) }},
		{"an error body with a success status", `{"error":{"message":"quota exceeded","code":"insufficient_quota"}}` + "\n", nil, func(err error) bool {
			var e *openai.APIError
			return errors.As(err, &e) && e.Message == "quota exceeded"
		}},
		{"an error body over several lines", "{\n  \"error\": {\n    \"message\": \"bad key\"\n  }\n}\n", nil, func(err error) bool {
			var e *openai.APIError
			return errors.As(err, &e) && e.Message == "bad key"
		}},
		{"too many lines without data", chunk("a") + strings.Repeat(": ping\n", maxEmptyEvents+1) + chunk("b"), []string{"a"}, func(err error) bool {
			return errors.Is(err, openai.ErrTooManyEmptyStreamMessages)
		}},
		{"as many lines without data as allowed", chunk("a") + strings.Repeat(": ping\n", maxEmptyEvents-1) + chunk("b"), []string{"a", "b"}, isEOF},
		{"an event that is not JSON", chunk("a") + "data: {not json}\n\n", []string{"a"}, func(err error) bool {
			var e *json.SyntaxError
			return errors.As(err, &e)
		}},
		{"an event of the wrong shape", `data: {"choices":{"index":0}}` + "\n\n", nil, func(err error) bool {
			var e *json.UnmarshalTypeError
			return errors.As(err, &e)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := events(streamOf(tt.body))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events %q, want %q", clipAll(got), clipAll(tt.want))
			}
			if !tt.wantErr(err) {
				t.Errorf("ended with %v", err)
			}
		})
	}
}

func isEOF(err error) bool { return err == io.EOF }

func clipAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		if len(x) > 20 {
			x = x[:20] + "..."
		}
		out[i] = x
	}
	return out
}

// What is kept of lines without data, to read an error from them at the
// end, is bounded.
func TestChatStreamKeepsLittleOfOtherLines(t *testing.T) {
	line := ": " + strings.Repeat("p", 1000) + "\n"
	body := strings.Repeat(line+`data: {"choices":[]}`+"\n", 1000)
	s := streamOf(body)
	if _, err := events(s); err != io.EOF {
		t.Fatalf("ended with %v", err)
	}
	if n := s.other.Len(); n > maxErrorBody {
		t.Errorf("kept %d bytes of lines without data, want at most %d", n, maxErrorBody)
	}
}

func TestChatCompletionsURL(t *testing.T) {
	for _, tt := range []struct {
		cfg  ModelConfig
		want string
	}{
		{ModelConfig{}, "https://api.openai.com/v1/chat/completions"},
		{ModelConfig{BaseURL: "http://localhost:11434/v1/"}, "http://localhost:11434/v1/chat/completions"},
		{ModelConfig{BaseURL: "https://r.openai.azure.com/", Model: "gpt4o", AzureAPIVersion: "2024-10-21"}, "https://r.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=2024-10-21"},
		{ModelConfig{BaseURL: "https://r.openai.azure.com", AzureAPIVersion: "2024-10-21"}, "https://r.openai.azure.com/openai/deployments/UNKNOWN/chat/completions?api-version=2024-10-21"},
	} {
		if got := NewOpenAIModel(tt.cfg).url; got != tt.want {
			t.Errorf("%+v: %s, want %s", tt.cfg, got, tt.want)
		}
	}
}

// The plain structs that encode messages and tools have a field for each
// of the client's, so a field a later version of the client adds is not
// dropped from requests unnoticed.
func TestWireTypesHaveTheClientsFields(t *testing.T) {
	for _, tt := range []struct {
		client, wire reflect.Type
		skip         string // encoded by the client's own type when set
	}{
		{reflect.TypeFor[openai.ChatCompletionMessage](), reflect.TypeFor[textMessage](), "MultiContent"},
		{reflect.TypeFor[openai.Tool](), reflect.TypeFor[functionTool](), "Parameters"},
	} {
		for f := range tt.client.Fields() {
			if f.Name == tt.skip {
				continue
			}
			if _, ok := tt.wire.FieldByName(f.Name); !ok {
				t.Errorf("%s has no field %s of %s", tt.wire, f.Name, tt.client)
			}
		}
	}
}
