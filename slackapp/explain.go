package slackapp

import (
	"context"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// explainTimeout bounds the model's answer to one Why?.
const explainTimeout = 2 * time.Minute

// explainGuardTTL bounds how long a Why? of one call keeps other replicas
// from asking the model about the same call, should its replica die
// before it is done: longer than the Why? may take.
const explainGuardTTL = explainTimeout + 30*time.Second

// whyClick answers the Why? button: for someone who may see the call, the
// model explains the pending call in its thread; nothing is decided and the
// turn is not resumed. One explanation per call at a time: this process
// keeps a set of the calls it is explaining, and a short-lived store marker
// keeps other replicas off the same call. A failure is told to the clicker
// only.
func (a *App) whyClick(ctx context.Context, c click) {
	if !validToken(c.value) {
		a.tell(ctx, c.user, c.channel, c.thread, InvalidRequestText())
		return
	}
	callID, _ := parseToken(c.value)
	pc, err := a.clickedCall(ctx, c, callID)
	if err != nil {
		text, _ := refusalText(agent.Call{}, c.user, err)
		a.tell(ctx, c.user, c.channel, c.thread, text)
		return
	}
	if !a.maySee(ctx, pc.Call, c.user) {
		a.tell(ctx, c.user, c.channel, c.thread, NotInConversationText())
		return
	}
	if pc.Status != agent.CallPending {
		a.tell(ctx, c.user, c.channel, c.thread, refusedText(pc.Call))
		return
	}
	owner, ok := a.startExplaining(ctx, callID)
	if !ok {
		a.tell(ctx, c.user, c.channel, c.thread, ExplainBusyText())
		return
	}
	// The next Why? may start once this one's model call is over: by the
	// time its explanation shows in the thread, it is not refused.
	done := sync.OnceFunc(func() { a.doneExplaining(ctx, callID, owner) })
	defer done()
	mctx, cancel := context.WithTimeout(ctx, explainTimeout)
	defer cancel()
	text, err := a.ag.Explain(mctx, callID, c.user)
	done()
	if err != nil {
		a.log.Warn("explain a pending call", "call", callID, "err", err)
		a.tell(ctx, c.user, c.channel, c.thread, ExplainFailedText(err))
		return
	}
	// The model may have taken long: a call decided or expired meanwhile
	// (it may have run) gets no explanation that says it still waits.
	if now, err := a.ag.Call(ctx, callID); err == nil && now.Status != agent.CallPending {
		a.tell(ctx, c.user, c.channel, c.thread, refusedText(now.Call))
		return
	}
	_, channel, thread, ok := parseKey(pc.Conversation)
	if !ok {
		a.log.Error("conversation key is not team/channel/thread", "conversation", pc.Conversation)
		return
	}
	blocks := ExplanationBlocks(pc.Tool, c.user, text)
	fallback := "Why " + inlineCode(pc.Tool) + ": " + fallbackText(text)
	if a.postBlocks(ctx, channel, thread, blocks, fallback) == "" {
		a.tell(ctx, c.user, c.channel, c.thread, ExplainFailedText(errExplanationNotPosted))
		return
	}
	if c.channel != channel {
		// Clicked on a copy of the card outside the conversation, or in
		// App Home: the clicker may not see the thread, so they get it in
		// their DM with the bot (where they clicked, for a copy sent
		// there). Never in a channel others read, such as
		// APPROVALS_CHANNEL: it is written from the conversation.
		to := c.channel
		if !approvals.IsDM(to) {
			ch, _, _, err := a.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{c.user}, ReturnIM: true})
			if err != nil {
				a.log.Warn("open DM for an explanation", "user", c.user, "err", err)
				return
			}
			to = ch.ID
		}
		a.postBlocks(ctx, to, "", blocks, fallback)
	}
}

// startExplaining claims the Why? of a call, and returns the claim's
// owner: false when this process or another replica is explaining it now
// (a lease on the call, released when the explanation is done). A store
// failure does not stop the explanation.
func (a *App) startExplaining(ctx context.Context, callID string) (owner string, ok bool) {
	a.mu.Lock()
	if a.explaining[callID] {
		a.mu.Unlock()
		return "", false
	}
	a.explaining[callID] = true
	a.mu.Unlock()
	// Unless the Why? goes on, the call is let go here, a panic included.
	defer func() {
		if !ok {
			a.notExplaining(callID)
		}
	}()
	owner = rand.Text()
	ok, err := a.st.AcquireLease(ctx, "explain:"+callID, owner, explainGuardTTL)
	if err != nil {
		a.log.Warn("mark an explanation as started", "call", callID, "err", err)
		return "", true
	}
	return owner, ok
}

// doneExplaining gives the Why? of a call back (see startExplaining), a
// panic included.
func (a *App) doneExplaining(ctx context.Context, callID, owner string) {
	defer a.notExplaining(callID)
	if owner != "" {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := a.st.ReleaseLease(rctx, "explain:"+callID, owner); err != nil {
			a.log.Warn("mark an explanation as done", "call", callID, "err", err)
		}
	}
}

// notExplaining forgets that this process explains the call.
func (a *App) notExplaining(callID string) {
	a.mu.Lock()
	delete(a.explaining, callID)
	a.mu.Unlock()
}

// ExplanationBlocks renders the model's explanation of a pending call,
// asked for by asker: a context line marking it as an explanation (nothing
// ran, the call still waits), then the text, escaped, cut to one section
// and quoted, as a question is (quoteLines): the model's words set apart
// from the bot's context line, whose decisions they could otherwise
// imitate. Text that renders to nothing (only an empty heading, say) is
// shown as "(no explanation)": Slack refuses a section with empty text.
func ExplanationBlocks(tool, asker, text string) []slack.Block {
	body := "_(no explanation)_"
	if md := MarkdownToMrkdwn(text); strings.TrimSpace(md) != "" {
		body, _ = fitQuoted(md, maxSectionText)
	}
	return []slack.Block{
		contextBlock(":thinking_face: *Explanation* of the pending " + inlineCode(tool) + " call, asked for by " + userRef(asker, "someone") + ". Nothing ran; the call still waits for a decision."),
		section(body),
	}
}

// ExplainBusyText answers a Why? while the same call is being explained.
func ExplainBusyText() string {
	return "An explanation of this call is already being written (or was just posted); it appears in the thread. Nothing changed."
}

// errExplanationNotPosted is the failure of an explanation that came but
// could not be posted in the thread.
var errExplanationNotPosted = errors.New("the explanation could not be posted in the thread")

// ExplainFailedText tells the clicker of Why? that no explanation came,
// naming the cause in a few words: never an error's own text, which can
// carry the model endpoint's address or the store's. The call is
// untouched.
func ExplainFailedText(err error) string {
	var me *agent.ModelError
	var why string
	switch {
	case errors.As(err, &me):
		why = "the model failed (" + Escape(me.Kind.String()) + ")"
	case errors.Is(err, agent.ErrNoExplanation), errors.Is(err, errExplanationNotPosted):
		why = err.Error()
	case errors.Is(err, approvals.ErrUnknownCall):
		why = "the call is no longer known"
	case errors.Is(err, approvals.ErrAlreadyDecided), errors.Is(err, approvals.ErrExpired):
		return "This call is no longer pending, so there is nothing to explain."
	case errors.Is(err, context.DeadlineExceeded):
		why = "the model took too long"
	default:
		why = "something went wrong (my state store may be unavailable)"
	}
	return "I couldn't get an explanation of this call: " + why + ". The call is still pending; nothing changed."
}
