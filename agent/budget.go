package agent

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	openai "github.com/sashabaranov/go-openai"
)

// shortenedOutput is how much of an old tool output is kept when the
// history is over budget.
const shortenedOutput = 200

// What a message and a tool call cost beyond their text: the role, the
// separators around it, a call's type and the wrapping of its function.
const messageOverhead, callOverhead = 4, 8

// estimateTokens is a cheap, conservative estimate of the tokens a message
// takes in a request: its text (see textTokens), its name, its call id and
// its calls' ids, names and arguments, plus a little per message and call.
func estimateTokens(m openai.ChatCompletionMessage) int {
	n := messageOverhead + textTokens(m.Content) + textTokens(m.Refusal) + textTokens(m.ReasoningContent) +
		textTokens(m.Name) + textTokens(m.ToolCallID)
	for _, p := range m.MultiContent {
		n += textTokens(p.Text)
		if p.ImageURL != nil {
			// The request carries the image's address; what the model
			// makes of the image itself is not known here.
			n += textTokens(p.ImageURL.URL)
		}
	}
	for _, tc := range m.ToolCalls {
		n += callOverhead + textTokens(tc.ID) + textTokens(tc.Function.Name) + textTokens(tc.Function.Arguments)
	}
	return n
}

// textTokens estimates the tokens of s so as not to count fewer than the
// tokenizers of the common models, which split text where letters,
// digits, blanks and other characters meet before merging the pieces they
// know: four bytes a token holds for English words, but not for what tools
// print (hex, UUIDs, base64, JSON and logs take from 1.4 to 2.5 bytes a
// token) nor for other scripts. So a run of letters counts a token per
// four of them, but one per two when it is longer than a word usually is
// (a hash, an identifier) and three per four when it turns from lower to
// upper case (base64); digits count a token per two (tokenizers group
// three at most, some one); other symbols a token per two in a row;
// blanks a token when they hold a line break or more than one space (a
// single space goes with the word after it). A character beyond ASCII
// counts a token, three outside the Basic Multilingual Plane (emoji),
// which tokenizers split into their bytes. Against cl100k_base and
// o200k_base this counts about a tenth more than they do for hex, UUIDs
// and base64, a quarter more for JSON and logs, and up to about 1.5 times
// as many for English and 1.8 for code and Cyrillic: safe for the budget,
// at some cost in what fits. No estimate fits every tokenizer (some split
// digits one by one): a request the model still finds too long is sent
// again shorter (see completeFitted).
func textTokens(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		j := i + 1
		switch {
		case c >= utf8.RuneSelf:
			_, size := utf8.DecodeRuneInString(s[i:])
			j = i + size
			n++
			if size == 4 {
				n += 2
			}
		case isLetter(c):
			mixed := false
			for ; j < len(s) && isLetter(s[j]); j++ {
				if isUpper(s[j]) && !isUpper(s[j-1]) {
					mixed = true
				}
			}
			switch l := j - i; {
			case mixed:
				n += (3*l + 3) / 4
			case l > 12:
				n += (l + 1) / 2
			default:
				n += (l + 3) / 4
			}
		case isDigit(c):
			for j < len(s) && isDigit(s[j]) {
				j++
			}
			n += (j - i + 1) / 2
		case isBlank(c):
			breaks := c == '\n'
			for ; j < len(s) && isBlank(s[j]); j++ {
				breaks = breaks || s[j] == '\n'
			}
			if breaks || j-i > 1 {
				// A tokenizer's token of blanks is a few bytes (an
				// indentation, a blank line): a long run is many.
				n += 1 + (j-i-1)/8
			}
		default:
			for j < len(s) && s[j] < utf8.RuneSelf && !isLetter(s[j]) && !isDigit(s[j]) && !isBlank(s[j]) {
				j++
			}
			n += (j - i + 1) / 2
		}
		i = j
	}
	return n
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isUpper(c byte) bool  { return 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isBlank(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func totalTokens(msgs []openai.ChatCompletionMessage) int {
	n := 0
	for _, m := range msgs {
		n += estimateTokens(m)
	}
	return n
}

// toolsTokens estimates what the tools offered take in a request: each
// one's name, description and schema, and its wrapping.
func toolsTokens(tools []openai.Tool) int {
	n := 0
	for _, t := range tools {
		n += callOverhead
		if f := t.Function; f != nil {
			n += textTokens(f.Name) + textTokens(f.Description)
			switch p := f.Parameters.(type) {
			case nil:
			case json.RawMessage:
				n += textTokens(string(p))
			default:
				b, _ := json.Marshal(p)
				n += textTokens(string(b))
			}
		}
	}
	return n
}

// historyBudget is the part of the context budget left for the history
// when the request also carries the system prompt and tools: the budget
// bounds all the model reads, and a large prompt or many tools (an MCP
// server may bring dozens, each with its schema) would otherwise take
// what the history was allowed. The history keeps a quarter of the budget
// whatever they take: with nothing left, every earlier exchange would be
// dropped and even the outputs the model has not read yet cut, without a
// word. A request still too long for the model is then sent again shorter
// (see completeFitted). When the prompt and tools take more than three
// quarters of the budget, the operator is warned, once for the agent.
func (a *Agent) historyBudget(tools []openai.Tool) int {
	taken := messageOverhead + textTokens(a.cfg.SystemPrompt) + toolsTokens(tools)
	if taken > a.cfg.ContextBudget*3/4 && a.budgetWarned.CompareAndSwap(false, true) {
		a.log.Warn("the system prompt and the tools' schemas take more than three quarters of CONTEXT_BUDGET; the history keeps a quarter of it: raise CONTEXT_BUDGET if the model's context allows, or offer fewer tools",
			"prompt_and_tools_tokens", taken, "budget", a.cfg.ContextBudget)
	}
	return max(a.cfg.ContextBudget-taken, a.cfg.ContextBudget/4)
}

// fitBudget keeps a history within budget tokens. First the oldest tool
// outputs are shortened, those of the turn in progress too (a turn whose
// steps read large outputs would exceed the budget on its own), then the
// oldest exchanges (a user message and everything up to the next one) are
// dropped. The outputs of the step in progress, which the model has not
// read yet, are left whole while they fit: when they alone exceed the
// budget (a step of many calls, each with a large output), the largest
// are shortened too, as little as it takes for the history to fit but
// leaving them at least half the budget, before older exchanges are
// dropped; and again if they are what keeps the last exchange over the
// budget once the older ones are gone. The last exchange (with every
// message of the turn's: see lastExchange) is never dropped; over the
// budget still, its messages but the last are shortened. A tool call is never separated from its result: a shortened
// output stays in its place, and whole exchanges go at once.
func fitBudget(msgs []openai.ChatCompletionMessage, budget int) []openai.ChatCompletionMessage {
	total := totalTokens(msgs)
	if total <= budget {
		return msgs
	}
	inProgress := stepInProgress(msgs)
	out := append([]openai.ChatCompletionMessage(nil), msgs...)
	total = shortenEach(out, 0, inProgress, openai.ChatMessageRoleTool, "older output shortened", total, budget)
	if outputs := stepOutputs(out, inProgress); total > budget && totalTokens(outputs) > budget {
		// The step's outputs cannot fit whatever goes: they are shortened
		// first, so that what older exchanges record (a deploy that ran)
		// stays while there is room for it beside them.
		before := totalTokens(outputs)
		total += shortenOutputs(outputs, max(budget-(total-before), budget/2)) - before
	}
	for total > budget {
		end := nextExchange(out, 1)
		if end > lastExchange(out) {
			break
		}
		total -= totalTokens(out[:end])
		out = out[end:]
		inProgress -= end
	}
	// The messages of the last exchange but its last one (those a turn
	// answers with it: see lastExchange) are shortened, oldest first,
	// rather than dropped: the model reads that each came, and a run of
	// them never keeps the history over the model's context for good.
	total = shortenEach(out, lastExchange(out), lastUser(out), openai.ChatMessageRoleUser, "message shortened to fit the context", total, budget)
	if outputs := stepOutputs(out, inProgress); total > budget && len(outputs) > 0 {
		// Without them the rest of the exchange would fit (if it does not,
		// shortening them cannot make it, and the model is to read them).
		before := totalTokens(outputs)
		if rest := total - before; rest < budget {
			total += shortenOutputs(outputs, budget-rest) - before
		}
	}
	return out
}

// shortenEach shortens, in place, the messages of role in msgs[from:to],
// first first, to shortenedOutput bytes with a note (what it says, and how
// many bytes went) while total, the tokens msgs take, is over budget; it
// returns the tokens they take then.
func shortenEach(msgs []openai.ChatCompletionMessage, from, to int, role, note string, total, budget int) int {
	for i := from; i < to && total > budget; i++ {
		m := msgs[i]
		if m.Role != role || len(m.Content) <= shortenedOutput+64 {
			continue
		}
		before := estimateTokens(m)
		m.Content = fmt.Sprintf("%s\n[%s: %d bytes omitted]", truncateUTF8(m.Content, shortenedOutput), note, len(m.Content)-shortenedOutput)
		msgs[i] = m
		total += estimateTokens(m) - before
	}
	return total
}

// stepOutputs returns the results of the step in progress that starts at
// msgs[at] (none when at is len(msgs)), in place.
func stepOutputs(msgs []openai.ChatCompletionMessage, at int) []openai.ChatCompletionMessage {
	if at >= len(msgs) {
		return nil
	}
	return msgs[at+1:]
}

// shortenOutputs shortens the tool outputs in msgs, in place, so that
// they take at most target tokens, and returns the tokens msgs take then:
// every output longer than a common length is cut to it, the largest
// length that fits, so that the largest outputs lose the most and the
// short ones nothing. Each output keeps at least shortenedOutput bytes
// (msgs may then still exceed target).
func shortenOutputs(msgs []openai.ChatCompletionMessage, target int) int {
	whole := make([]string, len(msgs))
	longest := 0
	for i, m := range msgs {
		whole[i] = m.Content
		if m.Role == openai.ChatMessageRoleTool {
			longest = max(longest, len(m.Content))
		}
	}
	cut := func(limit int) int {
		for i := range msgs {
			msgs[i].Content = whole[i]
			if msgs[i].Role == openai.ChatMessageRoleTool && len(whole[i]) > limit+64 {
				msgs[i].Content = fmt.Sprintf("%s\n[output shortened to fit the context: %d bytes omitted]", truncateUTF8(whole[i], limit), len(whole[i])-limit)
			}
		}
		return totalTokens(msgs)
	}
	// The largest limit whose outputs fit, found by halving the range:
	// the tokens grow with the limit.
	lo, hi := shortenedOutput, longest
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if cut(mid) <= target {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return cut(lo)
}

// stepInProgress returns the index of the step whose outputs the model
// is to read: the last assistant message, if it calls tools and no
// person wrote after it (len(msgs) otherwise). A step followed by a
// person's message is one a failed turn left (the model never answered
// its results), or one whose results came with messages that waited: it
// is in progress no more than any older step, and its outputs are
// shortened like theirs.
func stepInProgress(msgs []openai.ChatCompletionMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		switch msgs[i].Role {
		case openai.ChatMessageRoleUser:
			return len(msgs)
		case openai.ChatMessageRoleAssistant:
			if len(msgs[i].ToolCalls) > 0 {
				return i
			}
			return len(msgs)
		}
	}
	return len(msgs)
}

// lastExchange returns the index where the last exchange starts: the last
// user message, and the user messages right before it (0 if none). A turn
// that answers several messages (replies sent while a turn ran, messages
// that waited on a pause) appends them in a row: the model is to answer
// each, so none of them is dropped as an older exchange.
func lastExchange(msgs []openai.ChatCompletionMessage) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == openai.ChatMessageRoleUser {
			for i > 0 && msgs[i-1].Role == openai.ChatMessageRoleUser {
				i--
			}
			return i
		}
	}
	return 0
}

// lastUser returns the index of the last user message (0 if none).
func lastUser(msgs []openai.ChatCompletionMessage) int {
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
