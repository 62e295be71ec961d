package agent

import (
	"encoding/json"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// callsAsText sends the results of a step a person's message follows in
// that message, before the person's words (as the first part of a message
// in parts), so that the roles alternate; results that end the history
// are a message of their own. The history given is not changed.
func TestCallsAsTextPutsResultsInThePersonsMessage(t *testing.T) {
	step := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{
		{ID: "r1", Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "read_file", Arguments: `{"path":"/etc/motd"}`}}}}
	result := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: "r1", Content: "hello from motd"}
	for _, c := range []struct {
		name  string
		next  []openai.ChatCompletionMessage
		roles string
	}{
		{"text", []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Name: "U1", Content: "and now?"}}, "user assistant user"},
		{"parts", []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
			{Type: openai.ChatMessagePartTypeText, Text: "and now?"}}}}, "user assistant user"},
		{"the end", nil, "user assistant user"},
		{"the model's answer", []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleAssistant, Content: "It says hello."}}, "user assistant user assistant"},
	} {
		t.Run(c.name, func(t *testing.T) {
			msgs := append([]openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "read motd"}, step, result}, c.next...)
			before, _ := json.Marshal(msgs)
			out := callsAsText(msgs)
			var roles []string
			for _, m := range out {
				roles = append(roles, m.Role)
				if len(m.ToolCalls) > 0 || m.ToolCallID != "" {
					t.Errorf("a %s message still holds a call or answers one: %+v", m.Role, m)
				}
			}
			if got := strings.Join(roles, " "); got != c.roles {
				t.Fatalf("roles %s, want %s", got, c.roles)
			}
			results := out[2]
			text := results.Content
			if len(results.MultiContent) > 0 {
				if len(results.MultiContent) != 2 || results.MultiContent[1].Text != "and now?" {
					t.Errorf("the person's parts became %+v, want the results' part then theirs", results.MultiContent)
				}
				text = results.MultiContent[0].Text
			}
			if !strings.Contains(text, "hello from motd") || !strings.Contains(text, "not a person's words") {
				t.Errorf("the results are sent as %q, want the output, marked as not a person's words", text)
			}
			if c.name == "text" {
				if !strings.HasSuffix(text, "\nand now?") || results.Name != "U1" {
					t.Errorf("the person's message became %+v, want the results then their words, from them", results)
				}
			}
			if after, _ := json.Marshal(msgs); string(after) != string(before) {
				t.Errorf("callsAsText changed the history it was given:\n%s\nnow\n%s", before, after)
			}
		})
	}
}
