package fakeopenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// offering returns a request offering n tools.
func offering(n int) openai.ChatCompletionRequest {
	req := userRequest("hi")
	for i := range n {
		req.Tools = append(req.Tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: fmt.Sprintf("tool_%03d", i), Parameters: map[string]any{"type": "object", "properties": map[string]any{}},
		}})
	}
	return req
}

// wantTooManyTools checks that err is OpenAI's refusal of a request
// offering n tools over a limit of max.
func wantTooManyTools(t *testing.T, err error, n, max int) {
	t.Helper()
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("a request with %d tools: got %v, want OpenAI's refusal", n, err)
	}
	want := fmt.Sprintf("Invalid 'tools': array too long. Expected an array with maximum length %d, but got an array with length %d instead.", max, n)
	if apiErr.HTTPStatusCode != http.StatusBadRequest || apiErr.Type != "invalid_request_error" || apiErr.Code != "array_above_max_length" ||
		apiErr.Param == nil || *apiErr.Param != "tools" || apiErr.Message != want {
		param := "<nil>"
		if apiErr.Param != nil {
			param = *apiErr.Param
		}
		t.Errorf("refusal: status %d, type %q, code %v, param %s, message %q; want 400, invalid_request_error, array_above_max_length, tools, %q",
			apiErr.HTTPStatusCode, apiErr.Type, apiErr.Code, param, apiErr.Message, want)
	}
}

// A request offering more tools than OpenAI's 128 is refused as OpenAI
// refuses it, streaming or not; it is recorded, and takes no scripted
// answer. 128 tools are accepted.
func TestTooManyToolsRefused(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Text("queued"))
	c := newClient(s)
	_, err := c.CreateChatCompletion(context.Background(), offering(129))
	wantTooManyTools(t, err, 129, 128)
	_, err = c.CreateChatCompletionStream(context.Background(), offering(200))
	wantTooManyTools(t, err, 200, 128)
	if reqs := s.Requests(); len(reqs) != 2 || len(reqs[0].Tools) != 129 || len(reqs[1].Tools) != 200 {
		t.Errorf("recorded %d requests, want the 2 refused ones", len(reqs))
	}
	if got := s.Pending(); got != 1 {
		t.Errorf("Pending() = %d after the refusals, want the queued answer still there", got)
	}
	resp, err := c.CreateChatCompletion(context.Background(), offering(128))
	if err != nil {
		t.Fatalf("a request with 128 tools: %v", err)
	}
	if got := resp.Choices[0].Message.Content; got != "queued" {
		t.Errorf("answer to 128 tools = %q, want the queued one", got)
	}
}

// SetMaxTools changes the limit, as for a server that accepts more tools
// than OpenAI; 0 lifts it.
func TestSetMaxTools(t *testing.T) {
	s := fakeopenai.New(t)
	c := newClient(s)
	s.SetMaxTools(2)
	_, err := c.CreateChatCompletion(context.Background(), offering(3))
	wantTooManyTools(t, err, 3, 2)
	if _, err := c.CreateChatCompletion(context.Background(), offering(2)); err != nil {
		t.Errorf("2 tools with a limit of 2: %v", err)
	}
	s.SetMaxTools(0)
	if _, err := c.CreateChatCompletion(context.Background(), offering(300)); err != nil {
		t.Errorf("300 tools with no limit: %v", err)
	}
}
