package slackapp_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/store"
)

// A first answer in a channel is streamed to the person who asked, and the
// thread shows a status while the model works.
func TestAnswerIsStreamedToTheRequester(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.Response{Text: "Here is a fairly long answer that arrives in several pieces, one after the other.", Chunks: 8})
	ts := e.slack.Mention(channel, requester, "tell me something")
	m := e.answer(ts, "several pieces")
	if !m.Streamed {
		t.Errorf("the answer was posted, not streamed")
	}
	starts := e.slack.Calls("chat.startStream")
	if len(starts) != 1 {
		t.Fatalf("got %d chat.startStream calls, want 1", len(starts))
	}
	if got := starts[0].Param("recipient_user_id"); got != requester {
		t.Errorf("stream addressed to %q, want the requester %q", got, requester)
	}
	if len(e.slack.Calls("assistant.threads.setStatus")) == 0 {
		t.Error("no thread status was set while the model worked")
	}
	// A follow-up by someone else is streamed to them.
	e.model.Reply(fakeopenai.Response{Text: "And a second answer, streamed to whoever asked this time.", Chunks: 4})
	e.slack.ThreadReply(channel, ts, approver, "and for me?")
	e.answer(ts, "second answer")
	starts = e.slack.Calls("chat.startStream")
	if got := starts[len(starts)-1].Param("recipient_user_id"); got != approver {
		t.Errorf("follow-up streamed to %q, want %q", got, approver)
	}
}

// answerModes are the two ways an answer reaches its thread: streamed, or
// posted when the stream is refused.
var answerModes = []struct {
	name     string
	streamed bool
}{{"streamed", true}, {"posted", false}}

// answerIn runs a bot whose model answers a mention with text, sent in
// chunks, streamed or (the stream refused) posted, and returns it and the
// answer once the thread holds want.
func answerIn(t *testing.T, streamed bool, text string, chunks int, want string) (*env, fakeslack.Message) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	if !streamed {
		e.slack.FailNext("chat.startStream", 400)
	}
	e.model.Reply(fakeopenai.Response{Text: text, Chunks: chunks})
	ts := e.slack.Mention(channel, requester, "answer me")
	m := e.answer(ts, want)
	if m.Streamed != streamed {
		t.Fatalf("got streamed=%v, want %v", m.Streamed, streamed)
	}
	return e, m
}

// Model text cannot ping or spoof links, streamed or posted.
func TestHostileAnswerIsInert(t *testing.T) {
	hostile := "Hi <!channel> and <@U123> @here, click [your bank](https://evil.example) or [this][1] or <https://evil|x>.\n\n[1]: https://evil.example"
	for _, mode := range answerModes {
		streamed := mode.streamed
		t.Run(mode.name, func(t *testing.T) {
			_, m := answerIn(t, streamed, hostile, 7, "click")
			all := m.Text + blocksText(m)
			bad := []string{"<!channel>", "<@U123>", "<https://evil", " @here"}
			if streamed {
				// A stream is Markdown, where these forms are links too.
				bad = append(bad, "](https://evil", "][1]", "]: https://evil")
			}
			for _, bad := range bad {
				if strings.Contains(all, bad) {
					t.Errorf("the answer contains %q: %s", bad, all)
				}
			}
		})
	}
}

// A stream that breaks part way does not show the answer twice.
func TestBrokenStreamPostsOnlyTheRest(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.appendStream", 400)
	words := strings.Repeat("alpha beta gamma delta ", 40) + "THE END"
	e.model.Reply(fakeopenai.Response{Text: words, Chunks: 40, ChunkDelay: 5 * time.Millisecond})
	ts := e.slack.Mention(channel, requester, "long one")
	e.answer(ts, "THE END")
	var shown string
	for _, m := range e.slack.Thread(channel, ts) {
		switch {
		case m.BotID == "":
		case m.Streamed:
			shown += m.Text + "\n"
		default:
			shown += blocksText(m) + "\n"
		}
	}
	if n := strings.Count(shown, "alpha beta gamma delta"); n != 40 {
		t.Errorf("the answer's 40 phrases appear %d times across the thread", n)
	}
}

// Messages waiting in the queue when the bot stops are not dropped
// silently: they get a note that they will be answered after the restart.
func TestShutdownTellsAboutUnstartedMessages(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Millisecond // the notice says the turn waits
	e.cfg.ShutdownGrace = 500 * time.Millisecond
	e.start()
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Response{Text: "slow", Delay: 2 * time.Second}
	})
	var threads []string
	for i := 0; i < 3; i++ {
		ch := "CBUSY000" + string(rune('1'+i))
		e.slack.AddChannel(fakeslack.Channel{ID: ch, Members: []string{requester, e.slack.BotUserID()}})
		ts := e.slack.Mention(ch, requester, "hi")
		threads = append(threads, ch+"/"+ts)
		if i == 0 {
			waitUntil(t, "the first turn reaches the model", func() bool { return len(e.model.Requests()) >= 1 })
		} else {
			// The only turn slot is taken: the thread is told it waits.
			e.answerIn(ch, ts, "yours is queued")
		}
	}
	e.stop()
	for _, th := range threads[1:] {
		ch, ts, _ := strings.Cut(th, "/")
		found := false
		for _, m := range e.slack.Thread(ch, ts) {
			if m.BotID != "" && strings.Contains(m.Text, "I'll answer this as soon as I'm back") {
				found = true
			}
		}
		if !found {
			t.Errorf("the unstarted message in %s got no note; thread:\n%s", ch, dumpThread(e.slack.Thread(ch, ts)))
		}
	}
}

// A model failure is reported in the thread, and the conversation goes on.
func TestModelErrorIsReportedInTheThread(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.Error(503, "overloaded"))
	ts := e.slack.Mention(channel, requester, "first question")
	e.answer(ts, "couldn't get an answer from the model")
	e.model.Reply(fakeopenai.Text("Second answer."))
	e.slack.ThreadReply(channel, ts, requester, "try again")
	e.answer(ts, "Second answer.")
	reqs := e.model.Requests()
	var users []string
	for _, m := range reqs[len(reqs)-1].Messages {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	if strings.Join(users, "|") != "first question|try again" {
		t.Errorf("got user messages %q, want both kept", users)
	}
}

// A model server that refuses the request for a reason only the bot's
// operator can fix (a bad key, a key without access, an unknown model, an
// invalid or too long request) is reported as a configuration problem,
// with the status and what the server said, escaped and cut short, and no
// advice to send the message again; a failure that may pass keeps it.
func TestModelRefusalIsReportedAsAConfigurationProblem(t *testing.T) {
	long := "@channel see <https://evil.example|the docs> " + strings.Repeat("x", 2000)
	for _, tt := range []struct {
		status   int
		message  string
		code     string
		want     []string // in the thread's note
		retry    bool     // the note suggests sending another message
		notShown []string
	}{
		{401, "Incorrect API key provided", "", []string{"HTTP 401", "Incorrect API key provided", "configuration problem"}, false, nil},
		{403, "Project does not have access to model gpt-4o", "", []string{"HTTP 403", "does not have access"}, false, nil},
		{404, "The model `gpt-4o-mimi` does not exist", "", []string{"HTTP 404", "gpt-4o-mimi", "configuration problem"}, false, nil},
		{400, "This model's maximum context length is 8192 tokens", "", []string{"HTTP 400", "maximum context length"}, false, nil},
		{401, long, "", []string{"HTTP 401", "configuration problem"}, false, []string{"<https://", "<!", "@channel", strings.Repeat("x", 400)}},
		{429, "You exceeded your current quota, please check your plan and billing details.", "insufficient_quota", []string{"HTTP 429", "exceeded your current quota", "configuration problem"}, false, nil},
		{503, "overloaded", "", []string{"couldn't get an answer from the model"}, true, nil},
	} {
		t.Run(fmt.Sprint(tt.status, " ", tt.message[:min(len(tt.message), 20)]), func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.model.Reply(fakeopenai.Response{Status: tt.status, ErrorMessage: tt.message, ErrorCode: tt.code})
			ts := e.slack.Mention(channel, requester, "hello")
			note := e.answer(ts, "model").Text
			for _, w := range tt.want {
				if !strings.Contains(note, w) {
					t.Errorf("HTTP %d: the note %q does not say %q", tt.status, note, w)
				}
			}
			if got := strings.Contains(note, "send another message to try again"); got != tt.retry {
				t.Errorf("HTTP %d: the note %q suggests a retry: %v, want %v", tt.status, note, got, tt.retry)
			}
			for _, n := range tt.notShown {
				if strings.Contains(note, n) {
					t.Errorf("HTTP %d: the note %q holds %q", tt.status, note, n)
				}
			}
			if len(note) > 1000 {
				t.Errorf("HTTP %d: the note is %d bytes long, want the server's words cut short", tt.status, len(note))
			}
		})
	}
}

// A model whose stream breaks part way through its answer leaves what it
// wrote shown, the stream stopped (not left "writing" forever), and the
// failure told in the thread.
func TestModelCutMidAnswerStopsTheStream(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	words := strings.Repeat("alpha beta gamma delta ", 40)
	e.model.Reply(fakeopenai.Response{Text: words, Chunks: 40, CutAfter: 30, ChunkDelay: 2 * time.Millisecond})
	ts := e.slack.Mention(channel, requester, "long one")
	e.answer(ts, "couldn't get an answer from the model")
	var streamed int
	for _, m := range e.slack.Thread(channel, ts) {
		if !m.Streamed {
			continue
		}
		streamed++
		if m.Streaming {
			t.Errorf("the broken answer's stream is still open: %q", m.Text)
		}
		if !strings.Contains(m.Text, "alpha beta") {
			t.Errorf("the stream shows %q, want the words the model wrote before the break", m.Text)
		}
	}
	if streamed != 1 {
		t.Errorf("got %d streamed messages, want 1; thread:\n%s", streamed, dumpThread(e.slack.Thread(channel, ts)))
	}
}

// A short answer takes two calls: the stream starts with the first words
// and chat.stopStream carries the rest, with no chat.appendStream between.
func TestShortAnswerStopsTheStreamWithItsRest(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	const text = "All quiet on the western front today."
	e.model.Reply(fakeopenai.Response{Text: text, Chunks: 4})
	ts := e.slack.Mention(channel, requester, "anything new?")
	m := e.answer(ts, "front today.")
	if !m.Streamed || m.Text != text {
		t.Errorf("answer streamed=%v %q, want the whole answer streamed: %q", m.Streamed, m.Text, text)
	}
	if n := len(e.slack.Calls("chat.appendStream")); n != 0 {
		t.Errorf("got %d chat.appendStream calls, want none", n)
	}
	stops := e.slack.Calls("chat.stopStream")
	if len(stops) != 1 || stops[0].Param("markdown_text") == "" {
		t.Fatalf("chat.stopStream calls %+v, want one carrying the rest of the answer", stops)
	}
}

// answerHeldStore holds the commit that records an answer until release is
// closed, signalling arrived first.
type answerHeldStore struct {
	fullStore
	arrived, release chan struct{}
}

func (s *answerHeldStore) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Answer && c.Run == nil {
		s.arrived <- struct{}{}
		<-s.release
	}
	return s.fullStore.CommitTurn(ctx, c)
}

// A short answer's stream starts with its first words as the model sends
// them, before the answer is recorded, and is stopped, with the rest,
// while the answer is recorded: the thread has its whole answer without
// waiting for the store (see "Crash semantics" in the README: an answer
// may be shown before it is recorded). The turn ends once both are done.
func TestShortAnswerStreamStartsBeforeItIsRecorded(t *testing.T) {
	held := &answerHeldStore{arrived: make(chan struct{}, 1), release: make(chan struct{})}
	e := newEnvWith(t, storeKinds(t)[0], func(s fullStore) fullStore {
		held.fullStore = s
		return held
	})
	const text = "All quiet on the western front today."
	e.model.Reply(fakeopenai.Response{Text: text, Chunks: 4})
	ts := e.slack.Mention(channel, requester, "anything new?")
	<-held.arrived
	m := e.answer(ts, "front today.")
	if !m.Streamed || m.Text != text {
		t.Errorf("answer streamed=%v %q while it was being recorded, want the whole answer streamed: %q", m.Streamed, m.Text, text)
	}
	starts := e.slack.Calls("chat.startStream")
	if len(starts) != 1 || starts[0].Param("markdown_text") == "" || !strings.HasPrefix(text, starts[0].Param("markdown_text")) || starts[0].Param("markdown_text") == text {
		t.Errorf("chat.startStream calls %+v, want one with the first words of %q", starts, text)
	}
	if n := len(e.slack.Calls("chat.appendStream")); n != 0 {
		t.Errorf("got %d chat.appendStream calls, want none", n)
	}
	close(held.release)
}

// answerSeenStore tells order "answer recorded" as the commit that
// records an answer begins, and closes recorded once it is made.
type answerSeenStore struct {
	fullStore
	order    *eventLog
	once     sync.Once
	recorded chan struct{}
}

func (s *answerSeenStore) CommitTurn(ctx context.Context, c store.Commit) error {
	answer := c.Answer && c.Run == nil
	if answer {
		s.order.add("answer recorded")
	}
	err := s.fullStore.CommitTurn(ctx, c)
	if answer && err == nil {
		s.once.Do(func() { close(s.recorded) })
	}
	return err
}

// botMessagesOnceRecorded waits until seen saw the answer recorded (once
// it was shown), then returns the text and blocks of each bot message in
// the thread ts.
func botMessagesOnceRecorded(t *testing.T, e *env, seen *answerSeenStore, ts string) []string {
	t.Helper()
	select {
	case <-seen.recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was not recorded")
	}
	var bot []string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" {
			bot = append(bot, m.Text+blocksText(m))
		}
	}
	return bot
}

// eventLog is what the fakes of a test saw, in the order they saw it.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event)
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// The turn records its answer only once the answer is shown: while the
// answer's stream is starting, nothing is recorded (a crash then leaves the
// message to a takeover); once the stream started, it is stopped with the
// rest of the answer, and then the turn is recorded.
func TestAnswerIsRecordedOnceItsStreamEnds(t *testing.T) {
	order := &eventLog{}
	seen := &answerSeenStore{order: order, recorded: make(chan struct{})}
	e := newEnvWith(t, storeKinds(t)[0], func(s fullStore) fullStore {
		seen.fullStore = s
		return seen
	})
	arrived, releaseStart := e.slack.HoldNext("chat.startStream")
	const text = "All quiet on the western front today."
	e.model.Reply(fakeopenai.Response{Text: text, Chunks: 4})
	ts := e.slack.Mention(channel, requester, "anything new?")
	select {
	case <-arrived:
	case <-seen.recorded:
		t.Fatal("the answer was recorded before its stream started")
	case <-time.After(10 * time.Second):
		t.Fatal("the answer's stream did not start")
	}
	order.add("stream start released")
	releaseStart()
	m := e.answer(ts, "front today.")
	select {
	case <-seen.recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was not recorded once shown")
	}
	if got, want := order.list(), []string{"stream start released", "answer recorded"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q: the answer is recorded once its stream started", got, want)
	}
	if !m.Streamed || m.Text != text {
		t.Errorf("answer streamed=%v %q, want the whole answer streamed: %q", m.Streamed, m.Text, text)
	}
	if n, a := len(e.slack.Calls("chat.startStream")), len(e.slack.Calls("chat.appendStream")); n != 1 || a != 0 {
		t.Errorf("chat.startStream %d and chat.appendStream %d calls, want one start and no append", n, a)
	}
}

// An answer whose post is cut by the shutdown is not recorded: after the
// restart it is answered again. The cut post may have been made all the
// same (here the fake Slack makes it once released), but no copy is made
// besides those two.
func TestAnswerCutByShutdownIsAnsweredOnceAfterRestart(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.ShutdownGrace = 200 * time.Millisecond
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	arrived, release := e.slack.HoldNext("chat.postMessage")
	defer release()
	e.model.Reply(fakeopenai.Text("The answer is 42."))
	ts := e.slack.Mention(channel, requester, "the answer?")
	<-arrived
	e.stop()
	e.model.Reply(fakeopenai.Text("The answer is 42, again."))
	e.start()
	e.answer(ts, "The answer is 42, again.")
	release()
	e.stop()
	n := 0
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" && strings.Contains(m.Text, "The answer is 42") {
			n++
		}
	}
	if n > 2 {
		t.Errorf("the answer was posted %d times, want at most the cut post and the one after the restart:\n%s", n, dumpThread(e.slack.Thread(channel, ts)))
	}
}

// The words a model writes before calling a tool are shown, in their own
// message before the answer.
func TestWordsBeforeAToolCallAreShown(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(
		fakeopenai.Response{Text: "Let me look at the file first.", Chunks: 3, ToolCalls: []fakeopenai.ToolCall{tc("call_look", "read_file", `{"path":"/etc/motd"}`)}},
		fakeopenai.Text("It says hello."),
	)
	ts := e.slack.Mention(channel, requester, "what is in the motd?")
	e.answer(ts, "It says hello.")
	var texts []string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" {
			texts = append(texts, m.Text+blocksText(m))
		}
	}
	if len(texts) != 2 || !strings.Contains(texts[0], "Let me look at the file first.") || !strings.Contains(texts[1], "It says hello.") {
		t.Errorf("bot messages %q, want the words before the tool call, then the answer", texts)
	}
}

// When chat.stopStream refuses the rest of the answer, the stream is still
// stopped, and the rest is posted: the answer is shown whole, once.
func TestRefusedStopPostsTheRest(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.stopStream", 400)
	e.model.Reply(fakeopenai.Response{Text: "First words, then the rest that the stop could not carry. THE END", Chunks: 6})
	ts := e.slack.Mention(channel, requester, "go on")
	e.answer(ts, "THE END")
	var shown []string
	for _, m := range e.slack.Thread(channel, ts) {
		switch {
		case m.BotID == "":
		case m.Streamed:
			if m.Streaming {
				t.Errorf("the stream was left open: %+v", m)
			}
			shown = append(shown, m.Text)
		default:
			shown = append(shown, blocksText(m))
		}
	}
	all := strings.Join(shown, " ")
	if strings.Count(all, "First") != 1 || strings.Count(all, "could not carry") != 1 || strings.Count(all, "THE END") != 1 {
		t.Errorf("the answer is not shown whole and once across the thread: %q", shown)
	}
	if n := len(e.slack.Calls("chat.stopStream")); n != 2 {
		t.Errorf("got %d chat.stopStream calls, want 2 (with the rest, refused; then without)", n)
	}
}

// An answer with nothing to show once rendered (only markup that renders
// to nothing, such as empty headings) is not posted as an empty message:
// the thread is told there is no answer, once.
func TestAnswerThatRendersToNothingSaysSo(t *testing.T) {
	for _, tt := range []struct {
		name, text   string
		refuseStream bool
	}{
		{"posted", "# \n\n##", true},
		{"too short to stream", "#", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seen := &answerSeenStore{order: &eventLog{}, recorded: make(chan struct{})}
			e := newEnvWith(t, storeKinds(t)[0], func(s fullStore) fullStore {
				seen.fullStore = s
				return seen
			})
			if tt.refuseStream {
				e.slack.FailNext("chat.startStream", 400)
			}
			e.model.Reply(fakeopenai.Response{Text: tt.text, Chunks: 2})
			ts := e.slack.Mention(channel, requester, "anything?")
			bot := botMessagesOnceRecorded(t, e, seen, ts)
			if len(bot) != 1 || !strings.Contains(bot[0], "(no answer)") {
				t.Errorf("answer %q: bot messages %q, want one saying there is no answer", tt.text, bot)
			}
		})
	}
}

// When chat.stopStream refuses the rest of a streamed answer and that rest
// renders to nothing (a line break, an empty heading), nothing more is
// posted: the stream showed the answer.
func TestRefusedStopWithNothingToShowPostsNothing(t *testing.T) {
	words := strings.Repeat("the stream shows every word of this answer. ", 7) + "THE END"
	for _, rest := range []string{"\n", "\n\n#"} {
		t.Run(fmt.Sprintf("%q", rest), func(t *testing.T) {
			seen := &answerSeenStore{order: &eventLog{}, recorded: make(chan struct{})}
			e := newEnvWith(t, storeKinds(t)[0], func(s fullStore) fullStore {
				seen.fullStore = s
				return seen
			})
			e.slack.FailNext("chat.stopStream", 400)
			// Two pieces of 150 characters or more: each is handed to the
			// stream up to its last white space, so the stop carries the
			// rest alone.
			e.model.Reply(fakeopenai.Response{Text: words + rest, Chunks: 2})
			ts := e.slack.Mention(channel, requester, "go on")
			bot := botMessagesOnceRecorded(t, e, seen, ts)
			if len(bot) != 1 || strings.Count(bot[0], "THE END") != 1 {
				t.Errorf("bot messages %q, want the streamed answer alone", bot)
			}
			if stops := e.slack.Calls("chat.stopStream"); len(stops) != 2 || stops[0].Param("markdown_text") == "" || strings.TrimSpace(stops[0].Param("markdown_text")) != strings.TrimSpace(rest) {
				t.Errorf("chat.stopStream calls %+v, want the refused one carrying the rest %q alone, then one without", stops, rest)
			}
		})
	}
}

// What a model server says when it refuses a request is posted through
// Config.Redact: a proxy that writes the credential into its refusal does
// not have it shown in the thread, not even in part where the note cuts
// the server's words short.
func TestModelRefusalIsRedacted(t *testing.T) {
	const secret = "sk-proj-A1b2C3d4A1b2C3d4A1b2C3d4A1b2C3d4A1b2C3d4A1b2C3d4A1b2C3d4A1b2C3d4"
	for _, said := range []string{"upstream refused the key " + secret, strings.Repeat("x", 260) + " Bearer " + secret} {
		t.Run(fmt.Sprint(len(said)), func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.cfg.Redact = strings.NewReplacer(secret, "[REDACTED]").Replace
			e.start()
			e.model.Reply(fakeopenai.Error(401, said))
			ts := e.slack.Mention(channel, requester, "hello")
			note := e.answer(ts, "model")
			if text := note.Text + blocksText(note); strings.Contains(text, secret[:12]) {
				t.Errorf("the note shows the secret, or a part of it: %q", text)
			}
		})
	}
}

// A stream call that Slack made but answered with an error that says it
// may have been (internal_error) is taken as made: what it carried is not
// posted again, where the answer would show twice. So for the stream's
// start, a chunk appended to it, and its stop with the answer's rest.
func TestStreamCallSlackMayHaveMadeShowsNothingTwice(t *testing.T) {
	for _, c := range []struct {
		method string
		answer fakeopenai.Response
	}{
		{"chat.startStream", fakeopenai.Response{Text: strings.Repeat("alpha beta gamma delta ", 40) + "THE END", Chunks: 40, ChunkDelay: 5 * time.Millisecond}},
		{"chat.appendStream", fakeopenai.Response{Text: strings.Repeat("alpha beta gamma delta ", 40) + "THE END", Chunks: 40, ChunkDelay: 5 * time.Millisecond}},
		{"chat.stopStream", fakeopenai.Response{Text: strings.Repeat("alpha beta gamma delta ", 2) + "THE END", Chunks: 4}},
	} {
		t.Run(c.method, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.slack.ErrorAfterNext(c.method, "internal_error")
			e.model.Reply(c.answer, fakeopenai.Text("Next."))
			ts := e.slack.Mention(channel, requester, "long one")
			e.answer(ts, "THE END")
			// The turn is over once the next one is answered.
			e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> next?")
			e.answer(ts, "Next.")
			var shown string
			for _, m := range e.slack.Thread(channel, ts) {
				switch {
				case m.BotID == "":
				case m.Streamed:
					shown += m.Text + "\n"
				default:
					shown += blocksText(m) + "\n"
				}
			}
			if n, want := strings.Count(shown, "alpha beta gamma delta"), strings.Count(c.answer.Text, "alpha beta gamma delta"); n != want || strings.Count(shown, "THE END") != 1 {
				t.Errorf("the answer's %d phrases appear %d times across the thread, its end %d times; want each once:\n%s", want, n, strings.Count(shown, "THE END"), dumpThread(e.slack.Thread(channel, ts)))
			}
		})
	}
}

// A stream that breaks inside a fenced code block posts the rest as the
// code it is: the lines left of the block stay code, and its closing
// fence closes it, so the prose after it is not posted inside a block.
func TestBrokenStreamInsideACodeBlockKeepsTheCodeAsCode(t *testing.T) {
	var fs *fakeslack.Server
	var appends atomic.Int32
	e := newEnv(t, storeKinds(t)[0], fakeslack.WithAPIObserver(func(ev fakeslack.APIEvent) {
		if ev.Call.Method == "chat.appendStream" && appends.Add(1) == 1 {
			// The second append is refused: the stream breaks with
			// the start of the block shown.
			fs.FailNext("chat.appendStream", 400)
		}
	}))
	fs = e.slack
	e.start()
	code := strings.Repeat("rm -rf /srv/cache/*.tmp # clear *old* files\n", 12)
	text := "Run this:\n\n```\n" + code + "```\n\nDone: the *cache* is empty. THE END"
	e.model.Reply(fakeopenai.Response{Text: text, Chunks: 60, ChunkDelay: 2 * time.Millisecond})
	ts := e.slack.Mention(channel, requester, "clean the cache")
	e.answer(ts, "THE END")
	var streamed, rest string
	for _, m := range e.slack.Thread(channel, ts) {
		switch {
		case m.BotID == "":
		case m.Streamed:
			streamed += m.Text
		default:
			rest += blocksText(m)
		}
	}
	if !strings.Contains(streamed, "```") || strings.Count(streamed, "```") != 1 {
		t.Fatalf("the stream did not break inside the code block: it showed %q", streamed)
	}
	end := strings.Index(rest, "THE END")
	if end < 0 {
		t.Fatalf("the rest of the answer was not posted: %q", rest)
	}
	if strings.Count(rest[:end], "```")%2 == 1 {
		t.Errorf("the prose after the code block is posted inside a code block:\n%s", rest)
	}
	if !strings.Contains(rest, "# clear *old* files") {
		t.Errorf("the code left of the block is posted as formatted text, not as code:\n%s", rest)
	}
}
