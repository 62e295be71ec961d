package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
)

// BenchmarkModelComplete measures one streamed model call as the bot makes
// it: the request's encoding and the answer's decoding, against a server
// that writes a canned stream of chunks (an answer of 60 text pieces, as
// a model streams one per token or few), with a short history and with one
// of about 35 KB (ten exchanges with tool output, as pasted logs make it).
func BenchmarkModelComplete(b *testing.B) {
	var stream strings.Builder
	stream.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
	for i := range 60 {
		fmt.Fprintf(&stream, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"system_fingerprint\":\"fp_1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"word%d \"},\"logprobs\":null,\"finish_reason\":null}]}\n\n", i)
	}
	stream.WriteString("data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	body := []byte(stream.String())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = r.Body.Read(make([]byte, 64<<10))
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(body)
	}))
	b.Cleanup(srv.Close)
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL + "/v1", Model: "m"})
	tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "http_get", Description: "Fetch a URL.", Parameters: []byte(`{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}`)}}}
	for _, size := range []struct {
		name      string
		exchanges int
	}{{"short", 1}, {"35KB", 10}} {
		msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleSystem, Content: "You run ops tools for the team."}}
		for i := range size.exchanges {
			id := fmt.Sprintf("call_%d", i)
			msgs = append(msgs,
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: "Why is the api <failing>? Logs: " + strings.Repeat("level=error msg=\"timeout\" & retry ", 30)},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "http_get", Arguments: `{"url":"http://api/health"}`}}}},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: id, Content: strings.Repeat("GET /health 503 upstream \"db\" unavailable\n", 50)},
				openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "The database is unavailable; the api answers 503."},
			)
		}
		req := agent.ModelRequest{Messages: msgs, Tools: tools}
		b.Run(size.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				msg, err := m.Complete(context.Background(), req, nil)
				if err != nil || !strings.HasPrefix(msg.Content, "word0 ") {
					b.Fatalf("Complete = %q, %v", msg.Content, err)
				}
			}
		})
	}
}
