package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// helpText is the scripted model's answer to anything it does not
// understand.
const helpText = "I am the playground's scripted model and understand only a few phrases:\n" +
	"• `list files`: list the workspace (allowed)\n" +
	"• `read notes.md`: read a file (allowed; secrets/ is denied)\n" +
	"• `delete scratch.csv`: delete a file (alice approves; never the requester)\n" +
	"• `write hello to tmp/a.txt`: write a file (allowed under tmp/, asks elsewhere)\n" +
	"• `run df -h`: run a command (ls, df and uptime with flags only, and a bare date, are allowed; rm is denied; others ask)\n" +
	"• `ask what to delete`: ask the people in this thread a question\n" +
	"Join requests with \"and\", e.g. `list files and read notes.md`."

// intents are the phrases the scripted model understands, each turned into
// one tool call.
var intents = []struct {
	re   *regexp.Regexp
	call func(m []string) (tool string, args any)
}{
	{regexp.MustCompile(`(?i)^(?:list|ls)(?: the)?(?: files)?(?:(?: in)? ([\w./-]+))?$`), func(m []string) (string, any) {
		if m[1] == "" {
			return "workspace_list", map[string]any{}
		}
		return "workspace_list", map[string]any{"path": m[1]}
	}},
	{regexp.MustCompile(`(?i)^(?:read|show|cat) ([\w./-]+)$`), func(m []string) (string, any) {
		return "workspace_read", map[string]any{"path": m[1]}
	}},
	{regexp.MustCompile(`(?i)^(?:delete|remove) ([\w./-]+)$`), func(m []string) (string, any) {
		return "workspace_delete", map[string]any{"path": m[1]}
	}},
	{regexp.MustCompile(`(?i)^write (.+) to ([\w./-]+)$`), func(m []string) (string, any) {
		return "workspace_write", map[string]any{"path": m[2], "content": m[1] + "\n"}
	}},
	{regexp.MustCompile(`(?i)^run ([\w./ -]+)$`), func(m []string) (string, any) {
		return "run_command", map[string]any{"argv": strings.Fields(m[1])}
	}},
}

// splitRE separates several requests in one message.
var splitRE = regexp.MustCompile(`(?i)\s*(?:,|;|\band\b|\bthen\b)\s*`)

// scriptedModel answers like a very small model would: it turns known
// phrases in the last user message into tool calls and summarises tool
// results. It is deterministic, so the playground can be scripted.
func scriptedModel(req openai.ChatCompletionRequest) fakeopenai.Response {
	msgs := req.Messages
	if len(msgs) == 0 {
		return fakeopenai.Text(helpText)
	}
	last := msgs[len(msgs)-1]
	if (len(req.Tools) == 0 || req.ToolChoice == "none") && last.Role == openai.ChatMessageRoleUser {
		// Offered no tools, or none it may call: a Why? about a pending
		// call.
		return fakeopenai.Text(explain(msgs))
	}
	switch last.Role {
	case openai.ChatMessageRoleTool:
		return fakeopenai.Text(summarize(msgs))
	case openai.ChatMessageRoleUser:
		calls, ok := parseRequest(last.Content)
		if !ok {
			return fakeopenai.Text(helpText)
		}
		return fakeopenai.ToolCalls(calls...)
	}
	return fakeopenai.Text(helpText)
}

// parseRequest turns a user message into tool calls; ok is false unless
// every part of the message is understood.
func parseRequest(text string) (calls []fakeopenai.ToolCall, ok bool) {
	text = strings.Join(strings.Fields(text), " ")
	text = strings.TrimRight(text, ".!?")
	if q, ok := cutPrefixFold(text, "ask "); ok {
		// A question is passed on whole, "and" included.
		raw, _ := json.Marshal(map[string]string{"question": q + "?"})
		return []fakeopenai.ToolCall{{ID: newCallID(), Name: "ask_human", Arguments: string(raw)}}, true
	}
	for part := range strings.SplitSeq(splitRE.ReplaceAllString(text, "\x00"), "\x00") {
		part = strings.TrimSpace(part)
		if p, ok := cutPrefixFold(part, "please "); ok {
			part = p
		}
		if part == "" {
			continue
		}
		matched := false
		for _, in := range intents {
			if m := in.re.FindStringSubmatch(part); m != nil {
				tool, args := in.call(m)
				raw, _ := json.Marshal(args)
				calls = append(calls, fakeopenai.ToolCall{ID: newCallID(), Name: tool, Arguments: string(raw)})
				matched = true
				break
			}
		}
		if !matched {
			return nil, false
		}
	}
	return calls, len(calls) > 0
}

// explain answers a Why? about a pending call: which calls the step made,
// for which request.
func explain(msgs []openai.ChatCompletionMessage) string {
	asked := ""
	var calls []string
	for _, m := range msgs[:len(msgs)-1] {
		switch {
		case m.Role == openai.ChatMessageRoleUser:
			asked, calls = m.Content, nil
		case m.Role == openai.ChatMessageRoleAssistant && len(m.ToolCalls) > 0:
			for _, tc := range m.ToolCalls {
				calls = append(calls, "`"+tc.Function.Name+"` with "+tc.Function.Arguments)
			}
		}
	}
	if len(calls) == 0 {
		return "I am the playground's scripted model; I cannot find the call you ask about."
	}
	return fmt.Sprintf("You asked me to %q, so I called %s. I am the playground's scripted model: that phrase maps to this call.", asked, strings.Join(calls, " and "))
}

// summarize answers the results of the latest step's tool calls, one line
// per call, quoting each result as the bot gave it.
func summarize(msgs []openai.ChatCompletionMessage) string {
	start := len(msgs)
	for start > 0 && msgs[start-1].Role == openai.ChatMessageRoleTool {
		start--
	}
	names := map[string]string{}
	if start > 0 {
		for _, tc := range msgs[start-1].ToolCalls {
			names[tc.ID] = tc.Function.Name
		}
	}
	var b strings.Builder
	for i, m := range msgs[start:] {
		if i > 0 {
			b.WriteString("\n")
		}
		name := names[m.ToolCallID]
		if name == "" {
			name = m.Name
		}
		fmt.Fprintf(&b, "%s: %s", name, strings.TrimSpace(m.Content))
	}
	return b.String()
}

// newCallID returns a tool call id; the bot keys paused calls by it, so it
// must be unique across conversations.
func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "call_" + hex.EncodeToString(b[:])
}

// cutPrefixFold is strings.CutPrefix ignoring the case of prefix.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix) {
		return s[len(prefix):], true
	}
	return s, false
}
