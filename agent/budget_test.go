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

// A turn that answers several messages in a row (one pasted a log, the
// next asks about it) keeps them all: the model is to answer each of them.
// Over the budget, all but the last are shortened, saying so.
func TestFitBudgetKeepsEveryMessageTheTurnAnswers(t *testing.T) {
	var hist []openai.ChatCompletionMessage
	for i := 0; i < 3; i++ {
		hist = append(hist, exchange(i, 400)...)
	}
	hist = append(hist,
		openai.ChatCompletionMessage{Role: "user", Name: "UBOB", Content: "here is the log:\n" + strings.Repeat("error connecting to db ", 500)},
		openai.ChatCompletionMessage{Role: "user", Name: "UALICE", Content: "what does the log above say?"})
	got := fitBudget(hist, 1000)
	if len(got) != 2 || got[0].Name != "UBOB" || got[1].Name != "UALICE" {
		var who []string
		for _, m := range got {
			who = append(who, m.Role+"("+m.Name+")")
		}
		t.Fatalf("kept %v, want both messages the turn answers and nothing older", who)
	}
	if !strings.HasPrefix(got[0].Content, "here is the log:") || !strings.Contains(got[0].Content, "[message shortened to fit the context") || got[1].Content != hist[len(hist)-1].Content {
		t.Errorf("kept %q and %q: want the log shortened, saying so, and the question whole", got[0].Content, got[1].Content)
	}
	if totalTokens(got) > 1000 {
		t.Errorf("kept %d tokens, over the budget of 1000", totalTokens(got))
	}
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

// What a tokenizer makes of machine text and of text in other scripts is
// far from four bytes a token: the estimate must not count fewer tokens
// than the tokenizers of the common models (cl100k_base and o200k_base,
// counted with gpt-tokenizer; the larger count is noted for each sample),
// or a history it says fits is refused as too long.
func TestEstimateTokensIsConservative(t *testing.T) {
	const uuids = `{"id":"466e7904-17db-43f1-a96c-e4b5b546ce90","trace":"546b4d23e26581e2","pod":"api-c224cd"}
{"id":"a1a97fb7-8afa-4672-adcc-000b43cef646","trace":"07c3a6d823bede25","pod":"api-a3bcbf"}
{"id":"05b791c7-d672-4b89-b96d-5c622e47c611","trace":"0a348bbf7e60d897","pod":"api-796fc2"}
{"id":"4dfca389-6e9a-4e5a-bd96-8bf13b922ca7","trace":"3473d22fba615c0d","pod":"api-1e700e"}
{"id":"59c1d359-bc06-499e-a447-26ea313ed56e","trace":"6a45d207f6ed99c6","pod":"api-71e010"}
{"id":"c524fe64-cc0d-413a-ac5d-15a9d79e6be9","trace":"46f7b692f32cdd37","pod":"api-b985be"}
{"id":"12fe508f-c77a-4ecd-98e2-52af307001b7","trace":"6d2b520e4a86bab7","pod":"api-bccfde"}
{"id":"e1239014-5099-4749-b1f0-a82e83f3080d","trace":"0fdd5dc7628e0e6c","pod":"api-c818ca"}
{"id":"087a0ca8-0458-4548-8cd7-f9d6a6978f2b","trace":"f89f9ca0708279c1","pod":"api-e64e74"}
{"id":"0a8899ea-233d-41a0-bc60-efd94956e447","trace":"1e53bec1e8356a17","pod":"api-965812"}
{"id":"21fdcc4b-f725-482a-a32e-1415a71370a7","trace":"9653a4aa183130dd","pod":"api-2aed1c"}
{"id":"1f681c69-196e-466f-b151-3a35c13b8184","trace":"5b194a4ce4add751","pod":"api-7674ff"}`
	for _, c := range []struct {
		name   string
		text   string
		tokens int // of the content alone, by the tokenizer that counts more
	}{
		{"UUIDs and hex ids", uuids, 565},
		{"base64", "w+9iLUnHWT6AYa75BjT68j+u7gBz32FIqyVnkIUbVI52KZh0YPIF7Lr/Cj/FtY1inKjIfSdgpg4ZMi4dZ0dAfo2GCpDySI1n00LyWpjYAbLoM0jRwaUknYssvwgZjyPF", 95},
		{"CJK", strings.Repeat("请在预发布环境中重启支付服务", 10), 120},
		{"emoji", strings.Repeat("🚀", 10), 30},
	} {
		for _, m := range []openai.ChatCompletionMessage{
			{Role: "user", Content: c.text},
			{Role: "tool", ToolCallID: "call_1", Content: c.text},
			{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_1", Type: "function", Function: openai.FunctionCall{Name: "t", Arguments: c.text}}}},
		} {
			if got := estimateTokens(m); got < c.tokens {
				t.Errorf("%s in a %s message: estimated %d tokens, want at least %d", c.name, m.Role, got, c.tokens)
			}
		}
	}
	// Everything the request carries counts: a tool message's call id and
	// a message's name too.
	short := openai.ChatCompletionMessage{Role: "tool", ToolCallID: "c", Content: "ok"}
	long := short
	long.ToolCallID = "call_" + strings.Repeat("Zx9", 40)
	if estimateTokens(long) <= estimateTokens(short) {
		t.Errorf("a tool message with a 125-byte call id is estimated at %d tokens, as one with a 1-byte id (%d)", estimateTokens(long), estimateTokens(short))
	}
	named := openai.ChatCompletionMessage{Role: "user", Content: "hi", Name: "U0123456789ABCDEF"}
	if estimateTokens(named) <= estimateTokens(openai.ChatCompletionMessage{Role: "user", Content: "hi"}) {
		t.Error("a message's name is not counted")
	}
}

// A turn that failed after its tools ran (the model refused the next
// request) leaves the history ending with the step's results and then the
// next message: that step is not in progress any more. Its outputs are
// shortened like any older ones, and the exchange, with the record that
// the deploy ran, is kept rather than dropped whole.
func TestFitBudgetAfterAFailedTurnKeepsWhatRan(t *testing.T) {
	hist := []openai.ChatCompletionMessage{
		{Role: "user", Content: "deploy api 9 and show the logs"},
		{Role: "assistant", ToolCalls: []openai.ToolCall{
			{ID: "d", Type: "function", Function: openai.FunctionCall{Name: "deploy", Arguments: `{"service":"api","version":"9"}`}},
			{ID: "l", Type: "function", Function: openai.FunctionCall{Name: "read_logs", Arguments: `{}`}}}},
		{Role: "tool", ToolCallID: "d", Content: "deployed api 9"},
		{Role: "tool", ToolCallID: "l", Content: strings.Repeat("x", 16<<10)},
		{Role: "user", Content: "did it work?"},
	}
	const budget = 2000
	got := fitBudget(hist, budget)
	if n := totalTokens(got); n > budget {
		t.Errorf("got %d tokens, want at most %d", n, budget)
	}
	if len(got) != len(hist) || got[0].Content != hist[0].Content {
		t.Fatalf("got %d messages starting %q, want all %d: the failed turn's exchange kept", len(got), got[0].Content, len(hist))
	}
	if len(got[1].ToolCalls) != 2 || got[1].ToolCalls[0].Function.Name != "deploy" || got[2].ToolCallID != "d" || got[2].Content != "deployed api 9" {
		t.Errorf("the deploy call and its result are %+v / %+v, want them kept", got[1].ToolCalls, got[2])
	}
	if got[3].ToolCallID != "l" || !strings.Contains(got[3].Content, "shortened") {
		t.Errorf("the logs' result is %q..., want it shortened", got[3].Content[:min(40, len(got[3].Content))])
	}
}

// The step in progress is left whole only while it fits: a step of 32
// calls whose outputs are 16 KiB each would exceed any budget on its own.
// Its outputs are shortened then, the largest first, each call keeping its
// result, and the older exchange that records a deploy is kept.
func TestFitBudgetBoundsTheStepInProgress(t *testing.T) {
	hist := []openai.ChatCompletionMessage{
		{Role: "user", Content: "deploy api 9"},
		{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "d", Type: "function", Function: openai.FunctionCall{Name: "deploy", Arguments: `{"service":"api","version":"9"}`}}}},
		{Role: "tool", ToolCallID: "d", Content: "deployed api 9"},
		{Role: "assistant", Content: "Deployed."},
		{Role: "user", Content: "read all 32 node logs"},
	}
	var calls []openai.ToolCall
	for i := range 32 {
		calls = append(calls, openai.ToolCall{ID: fmt.Sprintf("c%d", i), Type: "function", Function: openai.FunctionCall{Name: "read_logs", Arguments: `{}`}})
	}
	hist = append(hist, openai.ChatCompletionMessage{Role: "assistant", ToolCalls: calls})
	for i := range 32 {
		size := 16 << 10
		if i == 7 {
			size = 100 // a short output is left whole
		}
		hist = append(hist, openai.ChatCompletionMessage{Role: "tool", ToolCallID: fmt.Sprintf("c%d", i), Content: strings.Repeat(fmt.Sprintf("node %d: GET /healthz 200\n", i), size/24)})
	}
	for _, budget := range []int{64000, 8000} {
		got := fitBudget(hist, budget)
		if n := totalTokens(got); n > budget {
			t.Errorf("budget %d: got %d tokens", budget, n)
		}
		if len(got) != len(hist) || got[2].Content != "deployed api 9" {
			t.Fatalf("budget %d: got %d messages, want all %d, the deploy's exchange kept", budget, len(got), len(hist))
		}
		step := got[6:]
		for i, m := range step {
			if m.Role != "tool" || m.ToolCallID != fmt.Sprintf("c%d", i) || !strings.HasPrefix(m.Content, fmt.Sprintf("node %d: ", i)) {
				t.Errorf("budget %d: call c%d is answered by %s message %s %q..., want its result", budget, i, m.Role, m.ToolCallID, m.Content[:min(20, len(m.Content))])
			}
		}
		if step[7].Content != hist[6+7].Content {
			t.Errorf("budget %d: the short output was shortened", budget)
		}
	}
}

// A long run of blanks (a log padded with empty lines, a fixed-width
// export) counts in proportion to its length: it counted one token however
// long it was, so 16 KiB of blank lines was a handful of tokens and a
// history of them was never trimmed, where no tokenizer has a token of
// blanks anywhere near 1 KiB long.
func TestEstimateTokensCountsLongBlankRuns(t *testing.T) {
	for _, blank := range []string{"\n", " ", "\t"} {
		m := openai.ChatCompletionMessage{Role: "tool", ToolCallID: "c", Content: "report" + strings.Repeat(blank, 16<<10)}
		if got, min := estimateTokens(m), (16<<10)/1024; got < min {
			t.Errorf("16 KiB of %q estimated at %d tokens, want at least %d (1 KiB a token)", blank, got, min)
		}
	}
}
