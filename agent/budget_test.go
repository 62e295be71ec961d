package agent

import (
	"fmt"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

func exchange(i int, outputSize int) []openai.ChatCompletionMessage {
	id := fmt.Sprintf("call_%d", i)
	return []openai.ChatCompletionMessage{
		{Role: "user", Content: fmt.Sprintf("question %d", i)},
		{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: id, Type: "function", Function: openai.FunctionCall{Name: "t", Arguments: "{}"}}}},
		{Role: "tool", ToolCallID: id, Content: strings.Repeat("o", outputSize)},
		{Role: "assistant", Content: fmt.Sprintf("answer %d", i)},
	}
}

func TestFitBudget(t *testing.T) {
	var hist []openai.ChatCompletionMessage
	for i := 0; i < 10; i++ {
		hist = append(hist, exchange(i, 4000)...)
	}
	// The current exchange: a pending step with a large output.
	hist = append(hist, exchange(10, 4000)[:3]...)

	t.Run("under budget is untouched", func(t *testing.T) {
		got := fitBudget(hist, totalTokens(hist))
		if len(got) != len(hist) || got[2].Content != hist[2].Content {
			t.Errorf("got %d messages, want all %d unchanged", len(got), len(hist))
		}
	})
	t.Run("old outputs shortened first", func(t *testing.T) {
		budget := totalTokens(hist) - 2000
		got := fitBudget(hist, budget)
		if len(got) != len(hist) {
			t.Fatalf("got %d messages, want %d: shortening should have been enough", len(got), len(hist))
		}
		if !strings.Contains(got[2].Content, "older output shortened") {
			t.Errorf("got oldest output %q..., want it shortened", got[2].Content[:40])
		}
		if got[len(got)-1].Content != hist[len(hist)-1].Content {
			t.Error("the current step's output was shortened")
		}
		if totalTokens(got) > budget {
			t.Errorf("got %d tokens, want at most %d", totalTokens(got), budget)
		}
	})
	t.Run("then oldest exchanges dropped whole", func(t *testing.T) {
		budget := 2500
		got := fitBudget(hist, budget)
		if got[0].Role != "user" {
			t.Fatalf("got first message %s, want a user message (whole exchanges dropped)", got[0].Role)
		}
		calls := map[string]bool{}
		for _, m := range got {
			for _, tc := range m.ToolCalls {
				calls[tc.ID] = true
			}
			if m.Role == "tool" && !calls[m.ToolCallID] {
				t.Errorf("tool result %s kept without its call", m.ToolCallID)
			}
		}
		last := got[len(got)-3:]
		if last[0].Content != "question 10" || last[2].Content != hist[len(hist)-1].Content {
			t.Error("the pending step was not kept whole")
		}
		if totalTokens(got) > budget {
			t.Errorf("got %d tokens, want at most %d", totalTokens(got), budget)
		}
	})
	t.Run("the current exchange is never dropped", func(t *testing.T) {
		got := fitBudget(hist, 10)
		if len(got) != 3 || got[0].Content != "question 10" {
			t.Errorf("got %d messages starting %q, want only the current exchange", len(got), got[0].Content)
		}
	})
}

// A turn whose steps bring large tool outputs is kept within the budget
// too: the outputs of its earlier steps are shortened, oldest first, each
// call keeping its result; only the step in progress is left whole.
func TestFitBudgetShortensTheTurnInProgress(t *testing.T) {
	hist := []openai.ChatCompletionMessage{{Role: "user", Content: "collect the logs of every node"}}
	for i := range 10 {
		id := fmt.Sprintf("call_%d", i)
		hist = append(hist,
			openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: id, Type: "function", Function: openai.FunctionCall{Name: "t", Arguments: "{}"}}}},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: strings.Repeat("o", 48<<10)})
	}
	const budget = 64000
	got := fitBudget(hist, budget)
	if n := totalTokens(got); n > budget {
		t.Errorf("got %d tokens, want at most %d", n, budget)
	}
	if len(got) != len(hist) || got[0].Content != hist[0].Content {
		t.Fatalf("got %d messages starting %q, want all %d, the person's message first", len(got), got[0].Content, len(hist))
	}
	for i := 1; i < len(got); i += 2 {
		call, res := got[i], got[i+1]
		if len(call.ToolCalls) != 1 || res.Role != "tool" || res.ToolCallID != call.ToolCalls[0].ID || res.Content == "" {
			t.Errorf("step %d: call %+v answered by %s message %q, want its result", i/2, call.ToolCalls, res.Role, res.ToolCallID)
		}
	}
	if last := got[len(got)-1]; last.Content != hist[len(hist)-1].Content {
		t.Error("the output of the step in progress was shortened")
	}
	if !strings.Contains(got[2].Content, "older output shortened") {
		t.Errorf("the oldest output is %q..., want it shortened", got[2].Content[:40])
	}
}
