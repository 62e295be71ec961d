package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/sashabaranov/go-openai"
)

// Offered no tools, or tools with tool_choice "none" (a Why?, as the bot
// asks it of someone who sees the conversation), the scripted model
// explains the pending call of the step instead of calling a tool.
func TestScriptedModelExplains(t *testing.T) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: "delete scratch.csv"},
		{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{ID: "c1", Function: openai.FunctionCall{Name: "workspace_delete", Arguments: `{"path":"scratch.csv"}`}}}},
		{Role: openai.ChatMessageRoleTool, ToolCallID: "c1", Content: "not run yet"},
		{Role: openai.ChatMessageRoleUser, Content: "Explain the pending call."},
	}
	for name, req := range map[string]openai.ChatCompletionRequest{
		"no tools":         {Messages: msgs},
		"tool_choice none": {Messages: msgs, Tools: []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{Name: "workspace_delete"}}}, ToolChoice: "none"},
	} {
		got := scriptedModel(req)
		if len(got.ToolCalls) != 0 || !strings.Contains(got.Text, `"delete scratch.csv"`) || !strings.Contains(got.Text, "`workspace_delete`") {
			t.Errorf("%s: scripted explanation: got %+v, want text naming the request and the call", name, got)
		}
	}
}

// Why? on a card in the playground gets the scripted model's explanation
// of the call (it got its help text once the bot offered the tools with
// tool_choice "none").
func TestWhyExplainsInThePlayground(t *testing.T) {
	pg, srv := startWeb(t)
	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "delete scratch.csv"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ TS string }
	_ = json.Unmarshal([]byte(body), &sent)
	valueRE := regexp.MustCompile(`"action_id":"why"[^}]*"value":"([^"]+)"|"value":"([^"]+)"[^}]*"action_id":"why"`)
	var cardTS, value string
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, sent.TS) {
			if mm := valueRE.FindStringSubmatch(string(m.Blocks)); m.BotID != "" && mm != nil {
				cardTS, value = m.TS, mm[1]+mm[2]
				return true
			}
		}
		return false
	})
	if _, err := pg.slack.Click(userAlice, channelOps, cardTS, "why", value); err != nil {
		t.Fatal(err)
	}
	var explanation string
	waitSlack(t, pg, "the explanation", func() bool {
		for _, m := range pg.slack.Thread(channelOps, sent.TS) {
			if s := string(m.Blocks) + m.Text; m.BotID != "" && strings.Contains(s, "Explanation") {
				explanation = s
				return true
			}
		}
		return false
	})
	if !strings.Contains(explanation, "You asked me to") || strings.Contains(explanation, "understand only a few phrases") {
		t.Errorf("Why? in the playground: want the scripted explanation of the call, got:\n%s", explanation)
	}
}
