package main

import (
	"strings"
	"testing"

	"github.com/sashabaranov/go-openai"
)

// Offered no tools (a Why?), the scripted model explains the pending call
// of the step instead of calling a tool.
func TestScriptedModelExplains(t *testing.T) {
	req := openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: "delete scratch.csv"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c1", Function: openai.FunctionCall{Name: "workspace_delete", Arguments: `{"path":"scratch.csv"}`}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c1", Content: "not run yet"},
		{Role: openai.ChatMessageRoleUser, Content: "Explain the pending call."},
	}}
	got := scriptedModel(req)
	if len(got.ToolCalls) != 0 || !strings.Contains(got.Text, `"delete scratch.csv"`) || !strings.Contains(got.Text, "`workspace_delete`") {
		t.Errorf("scripted explanation: got %+v, want text naming the request and the call", got)
	}
}
