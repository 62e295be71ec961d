package agent

import (
	"fmt"

	openai "github.com/sashabaranov/go-openai"
)

// shortenedOutput is how much of an old tool output is kept when the
// history is over budget.
const shortenedOutput = 200

// estimateTokens is a cheap, conservative token estimate: about four bytes
// a token, plus a little per message.
func estimateTokens(m openai.ChatCompletionMessage) int {
	n := len(m.Content) + len(m.Name) + 16
	for _, tc := range m.ToolCalls {
		n += len(tc.ID) + len(tc.Function.Name) + len(tc.Function.Arguments) + 16
	}
	return n/4 + 1
}

func totalTokens(msgs []openai.ChatCompletionMessage) int {
	n := 0
	for _, m := range msgs {
		n += estimateTokens(m)
	}
	return n
}

// fitBudget keeps a history within budget tokens. First the oldest tool
// outputs are shortened, those of the turn in progress too (a turn whose
// steps read large outputs would exceed the budget on its own), then the
// oldest exchanges (a user message and everything up to the next one) are
// dropped. The outputs of the step in progress, which the model has not
// read yet, are left whole, and the last exchange is never dropped. A tool
// call is never separated from its result: a shortened output stays in
// its place, and whole exchanges go at once.
func fitBudget(msgs []openai.ChatCompletionMessage, budget int) []openai.ChatCompletionMessage {
	total := totalTokens(msgs)
	if total <= budget {
		return msgs
	}
	inProgress := stepInProgress(msgs)
	out := append([]openai.ChatCompletionMessage(nil), msgs...)
	for i := 0; i < inProgress && total > budget; i++ {
		m := out[i]
		if m.Role != openai.ChatMessageRoleTool || len(m.Content) <= shortenedOutput+64 {
			continue
		}
		before := estimateTokens(m)
		m.Content = fmt.Sprintf("%s\n[older output shortened: %d bytes omitted]", truncateUTF8(m.Content, shortenedOutput), len(m.Content)-shortenedOutput)
		out[i] = m
		total += estimateTokens(m) - before
	}
	for total > budget {
		end := nextExchange(out, 1)
		if end > lastExchange(out) {
			break
		}
		total -= totalTokens(out[:end])
		out = out[end:]
	}
	return out
}

// stepInProgress returns the index of the step whose outputs the model
// is to read: the last assistant message, if it calls tools (len(msgs)
// otherwise).
func stepInProgress(msgs []openai.ChatCompletionMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleAssistant {
			if len(msgs[i].ToolCalls) > 0 {
				return i
			}
			break
		}
	}
	return len(msgs)
}

// lastExchange returns the index of the last user message (0 if none).
func lastExchange(msgs []openai.ChatCompletionMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleUser {
			return i
		}
	}
	return 0
}

// nextExchange returns the index of the first user message at or after
// from, or len(msgs).
func nextExchange(msgs []openai.ChatCompletionMessage, from int) int {
	for i := from; i < len(msgs); i++ {
		if msgs[i].Role == openai.ChatMessageRoleUser {
			return i
		}
	}
	return len(msgs)
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n]
}
