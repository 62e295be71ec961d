package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// ErrNoExplanation is returned by Explain when the model answered with no
// text.
var ErrNoExplanation = errors.New("the model gave no explanation")

// explainPrompt asks the model about one pending call; %s are the tool and
// its arguments.
const explainPrompt = `A person reviewing your pending call to the tool %s with these arguments:
%s
asks why. Explain in a few sentences, in plain words, what this call will do and why you want it. Do not call any tool; this call has not run and will run only if a person approves it.`

// Explain asks the model, with the conversation so far and the pending
// call, to explain in a few sentences what the call will do and why it
// wants it, and returns the explanation (model text, to be escaped before
// it is shown). The tools are offered with tool_choice "none", so that the
// model calls none: some servers refuse the history's tool calls in a
// request without tools. With no tool left to offer, or when the server
// refuses tool_choice "none" (LiteLLM in front of Bedrock, see
// noToolChoiceNone), the calls are sent as text, in a request without
// tools. Someone who cannot see the conversation's channel (see
// Config.Audience), such as an approver the rule names from outside a
// private channel, gets an explanation from the pending call alone, asked
// in one message that names the tool and the arguments the card shows:
// nothing else said in the conversation, nor any tool output, reaches the
// model for them, as the answer is theirs to read. Nothing is written but
// an audit entry: the call stays pending as it was, the run and the
// conversation's history are unchanged, and no lease is taken, so it may
// run while the conversation is busy. Errors wrap approvals.ErrUnknownCall
// (no such call), approvals.ErrAlreadyDecided or approvals.ErrExpired (as
// *approvals.RefusedError: the call is not pending), ErrNoExplanation (the
// model answered with no text), the model's error, or the store's.
func (a *Agent) Explain(ctx context.Context, callID, asker string) (string, error) {
	c, err := a.store.GetCall(ctx, callID)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("call %s: %w", callID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return "", fmt.Errorf("call %s: %w", callID, err)
	}
	if c.Status != store.Pending {
		return "", refusedByOther(c)
	}
	if !a.cfg.Now().Before(c.ExpiresAt) {
		// Past its deadline, not expired yet: refused as a decision is.
		return "", &approvals.RefusedError{Err: approvals.ErrExpired}
	}
	run, _, err := a.store.LoadRun(ctx, c.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("run of call %s: %w", callID, approvals.ErrUnknownCall)
	}
	if err != nil {
		return "", fmt.Errorf("load run of call %s: %w", callID, err)
	}
	var st runState
	if err := json.Unmarshal(run.State, &st); err != nil {
		return "", fmt.Errorf("decode run %s: %w", run.ID, err)
	}
	msgs, tools, detail := explainMessages(st, c), a.tools.modelTools(), ""
	if !a.seesConversation(ctx, c, asker) {
		// One question, which holds no call: nothing to offer tools for.
		msgs, tools, detail = explainCallAlone(c), nil, "from the call alone: the asker cannot see the conversation"
	}
	// No onDelta: nothing is shown before the whole explanation is, so a
	// stream cut after its first words is retried as one cut before them.
	_, msg, err := a.completeFitted(ctx, msgs, tools, "none", nil)
	if len(tools) > 0 && noToolChoiceNone(ctx, err) {
		a.log.Warn("the model server refused tool_choice none; asking why again with the calls as text", "call", c.ID, "err", err)
		_, msg, err = a.completeFitted(ctx, msgs, nil, "", nil)
	}
	if err != nil {
		return "", fmt.Errorf("model: %w", err)
	}
	text := strings.TrimSpace(msg.Content)
	if text == "" {
		return "", ErrNoExplanation
	}
	a.audit(ctx, store.AuditEntry{Actor: asker, Action: "explain", Channel: c.Channel, Thread: c.Conversation, Tool: c.Tool, CallID: c.ID, Fingerprint: c.Fingerprint, Outcome: "ok", Detail: detail})
	return text, nil
}

// noToolChoiceNone reports whether err may be a server's refusal of
// tool_choice "none", as LiteLLM's in front of Bedrock is (a 400 with
// UnsupportedParamsError, unless it is told to drop what a provider does
// not support): a 400 that is neither a request too long for the model's
// context nor one refused for its content. A request that offers no tools
// (the calls sent as text) may then be answered.
func noToolChoiceNone(ctx context.Context, err error) bool {
	var me *ModelError
	return err != nil && ctx.Err() == nil && errors.As(err, &me) && me.Kind == ErrKindHTTP &&
		me.StatusCode == http.StatusBadRequest && !me.ContextExceeded()
}

// pendingNote answers, in an explanation's history, a call that waits on
// a person.
const pendingNote = "not run yet: this call is waiting for a person's approval"

// explainMessages is the history of a paused step made sendable (every
// tool call of its last step answered: by its result, or by a note that it
// waits on a person) followed by the question about call c. The slice is
// new; st is not changed.
func explainMessages(st runState, c store.Call) []openai.ChatCompletionMessage {
	msgs := make([]openai.ChatCompletionMessage, 0, len(st.Messages)+len(st.Slots)+1)
	msgs = append(msgs, st.Messages...)
	slots := make([]slot, len(st.Slots))
	for i, s := range st.Slots {
		slots[i] = s
		if s.Result == nil {
			slots[i].Result = &Result{Content: pendingNote}
		}
	}
	msgs = append(msgs, toolMessages(slots)...)
	args := c.Args
	if c.Edit != nil {
		args = c.Edit.Args // the arguments the card shows, and an approval runs
	}
	return append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(explainPrompt, c.Tool, string(args))})
}

// seesConversation reports whether asker can see the channel of c's
// conversation: anyone can without an Audience; no one can when the
// Audience cannot tell, since what the conversation holds is not shown
// on a guess.
func (a *Agent) seesConversation(ctx context.Context, c store.Call, asker string) bool {
	if a.cfg.Audience == nil {
		return true
	}
	ok, err := a.cfg.Audience.CanSee(ctx, c.Channel, asker)
	if err != nil {
		a.log.Warn("check who can see a conversation; explaining the call alone", "call", c.ID, "user", asker, "err", err)
		return false
	}
	return ok
}

// explainCallAlone is the question about the call c alone, for someone
// who cannot see its conversation: one user message that names the tool
// and the arguments the card shows (the model's step, its text and its
// other calls are the conversation's, as are the outputs of those that
// ran). No call is made up for it: a request whose first message is the
// model's is refused by some servers (Bedrock, older Anthropic models,
// Gemma's chat template).
func explainCallAlone(c store.Call) []openai.ChatCompletionMessage {
	args := c.Args
	if c.Edit != nil {
		args = c.Edit.Args
	}
	if len(args) == 0 {
		args = json.RawMessage("{}") // as sanitizeCalls sends none
	}
	return []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: fmt.Sprintf(explainPrompt, c.Tool, string(args)) + "\n" + explainAloneNote},
	}
}

// explainAloneNote follows the question about a call asked from the call
// alone: the model sees nothing of the conversation that led to it.
const explainAloneNote = `The conversation that led to this call is not shown here, and this person cannot see it: explain from the tool and its arguments alone, and do not guess at what was said.`
