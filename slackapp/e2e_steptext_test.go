package slackapp_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// stepText is what the model writes in a step that goes on to call tools.
const stepText = "Let me read the config file first, it should tell us which port the service listens on."

// shownText is what a bot message shows: a stream's text, or a post's
// blocks (its notification text is a clipped copy of them).
func shownText(m fakeslack.Message) string {
	if m.Streamed {
		return m.Text
	}
	return blocksText(m)
}

// shownOnce checks that the bot's messages in the thread show phrase
// exactly once, and returns the index of the message that does.
func shownOnce(t *testing.T, e *env, thread, phrase string) int {
	t.Helper()
	msgs := e.slack.Thread(channel, thread)
	at, n := -1, 0
	for i, m := range msgs {
		if m.BotID == "" {
			continue
		}
		if c := strings.Count(shownText(m), phrase); c > 0 {
			at, n = i, n+c
		}
	}
	if n != 1 {
		t.Fatalf("the thread shows %q %d times, want once; thread:\n%s", phrase, n, dumpThread(msgs))
	}
	return at
}

// shownBefore checks that the bot's messages in the thread show first
// once, in a message before the first that shows then.
func shownBefore(t *testing.T, e *env, thread, first, then string) {
	t.Helper()
	at := shownOnce(t, e, thread, first)
	msgs := e.slack.Thread(channel, thread)
	later := slices.IndexFunc(msgs, func(m fakeslack.Message) bool { return m.BotID != "" && strings.Contains(shownText(m), then) })
	if later < 0 || at >= later {
		t.Errorf("%q is not shown before %q; thread:\n%s", first, then, dumpThread(msgs))
	}
}

// readStep is a model step that writes text and calls read_file, which
// the policy allows, followed by the answer "Done reading.".
func readStep(e *env, step fakeopenai.Response) {
	step.ToolCalls = []fakeopenai.ToolCall{tc("c1", "read_file", `{"path":"a.txt"}`)}
	e.model.Reply(step, fakeopenai.Text("Done reading."))
}

// Text written in a step that calls tools is streamed; where Slack refuses
// the stream, it is posted instead, before what the step's calls lead to.
func TestStepTextShownWhenStreamingIsRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	readStep(e, fakeopenai.Text(stepText))
	ts := e.slack.Mention(channel, requester, "which port?")
	e.answer(ts, "Done reading.")
	shownBefore(t, e, ts, "Let me read the config file first", "Done reading.")
	if e.reads.Load() != 1 {
		t.Errorf("read_file ran %d times, want once", e.reads.Load())
	}
}

// A step's text that was streamed whole is not posted again.
func TestStepTextStreamedIsNotPostedAgain(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	readStep(e, fakeopenai.Response{Text: stepText, Chunks: 6})
	ts := e.slack.Mention(channel, requester, "which port?")
	e.answer(ts, "Done reading.")
	shownBefore(t, e, ts, "Let me read the config file first", "Done reading.")
	for _, m := range e.slack.Thread(channel, ts) {
		if strings.Contains(shownText(m), "config file") && !m.Streamed {
			t.Errorf("the step's text was posted although it was streamed: %s", m.Blocks)
		}
	}
}

// A step's stream that breaks part way leaves what it showed, and the rest
// is posted, each part once, before the answer.
func TestStepTextBrokenStreamPostsOnlyTheRest(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.appendStream", 400)
	words := strings.Repeat("alpha beta gamma delta ", 40) + "STEP END"
	readStep(e, fakeopenai.Response{Text: words, Chunks: 40, ChunkDelay: 5 * time.Millisecond})
	ts := e.slack.Mention(channel, requester, "long one")
	e.answer(ts, "Done reading.")
	var streamed, posted bool
	var shown string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID == "" || !strings.Contains(shownText(m), "alpha beta") {
			continue
		}
		streamed = streamed || m.Streamed
		posted = posted || !m.Streamed
		shown += shownText(m) + "\n"
	}
	if !streamed || !posted {
		t.Errorf("the step's text was streamed %v, posted %v; want part of it each way; thread:\n%s", streamed, posted, dumpThread(e.slack.Thread(channel, ts)))
	}
	if n := strings.Count(shown, "alpha beta gamma delta"); n != 40 {
		t.Errorf("the step's 40 phrases appear %d times across the thread", n)
	}
	shownBefore(t, e, ts, "STEP END", "Done reading.")
}

// Text written in a step whose call waits for approval is shown before
// its card, where Slack refuses the stream.
func TestStepTextBeforeACardShownWhenStreamingIsRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	step := fakeopenai.Text("I will deploy the api at version 1.2.3 now, which needs an approval first.")
	step.ToolCalls = []fakeopenai.ToolCall{tc("c1", "deploy", `{"service":"api","version":"1.2.3"}`)}
	e.model.Reply(step)
	ts := e.slack.Mention(channel, requester, "deploy api")
	card := e.card(ts, "deploy")
	at := shownOnce(t, e, ts, "I will deploy the api")
	msgs := e.slack.Thread(channel, ts)
	if i := slices.IndexFunc(msgs, func(m fakeslack.Message) bool { return m.TS == card.TS }); at >= i {
		t.Errorf("the step's text is not shown before the card; thread:\n%s", dumpThread(msgs))
	}
}

// Text written in a step that the model breaks off is shown up to the
// break, before the failure is told, where Slack refuses the stream (as a
// stream would have shown it).
func TestStepTextOfABrokenStepShownWhenStreamingIsRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	words := strings.Repeat("alpha beta gamma delta ", 40)
	e.model.Reply(fakeopenai.Response{Text: words, Chunks: 40, CutAfter: 30, ChunkDelay: 2 * time.Millisecond})
	ts := e.slack.Mention(channel, requester, "long one")
	e.answer(ts, "couldn't get an answer from the model")
	msgs := e.slack.Thread(channel, ts)
	text := slices.IndexFunc(msgs, func(m fakeslack.Message) bool { return m.BotID != "" && strings.Contains(shownText(m), "alpha beta") })
	note := slices.IndexFunc(msgs, func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text, "couldn't get an answer from the model")
	})
	if text < 0 || text >= note {
		t.Errorf("the text the model wrote before the break is not shown before the failure note; thread:\n%s", dumpThread(msgs))
	}
}

// The answer the bot gives at its step limit is not the text of the step
// that reached it: where Slack refused the stream, that step's text is
// posted too, before the answer.
func TestStepTextBeforeTheStepLimitAnswerShownWhenStreamingIsRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.maxSteps = 1
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	step := fakeopenai.Text(stepText)
	step.ToolCalls = []fakeopenai.ToolCall{tc("c1", "drop_db", `{}`)}
	e.model.Reply(step)
	ts := e.slack.Mention(channel, requester, "drop it")
	e.answer(ts, "I stopped after 1 steps")
	shownBefore(t, e, ts, "Let me read the config file first", "I stopped after 1 steps")
}
