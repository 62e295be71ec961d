package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Work waiting for a turn slot when the bot stops is answered, not
// dropped: a follow-up gets a note that it will be answered after the
// restart, and a click is recorded at once (it never waits for a slot)
// while its resume is left to the next process, which runs the call once.
func TestShutdownAnswersQueuedFollowUpsAndClicks(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Millisecond // the notice says the turn waits
	e.cfg.ShutdownGrace = 500 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"17"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 17")
	card := e.card(ts, "deploy")

	release := make(chan struct{})
	defer close(release)
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		<-release
		return fakeopenai.Text("slow")
	})
	const busy = "CBUSY0009"
	e.slack.AddChannel(fakeslack.Channel{ID: busy, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.Mention(busy, requester, "hi")
	waitUntil(t, "the long turn reaches the model", func() bool { return len(e.model.Requests()) >= 2 })
	click, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	if _, err := e.slack.WaitAck(click, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.waitThread(ts, "with the card approved", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Approved by")
	})
	e.answer(ts, "yours is queued")
	// The follow-up waits on the conversation's queue, behind the resume.
	reply := e.slack.ThreadReply(channel, ts, requester, "are you still there?")
	for _, env := range e.slack.EnvelopesByTS(reply) {
		if _, err := e.slack.WaitAck(env.ID, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.stop()

	e.answer(ts, "I'll answer this as soon as I'm back")
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times on a resume queued at shutdown", n)
	}
	e.model.Reply(fakeopenai.Text("Deployed api 17."), fakeopenai.Text("Still here."))
	e.start()
	e.answer(ts, "Deployed api 17.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times after the restart, want 1", n)
	}
}

// A turn still waiting on the model at the end of the shutdown grace is
// cut short; its message is recorded, so the thread is told it will be
// answered (not asked to send it again), and the next process answers it.
func TestShutdownCutsATurnThatIsAnsweredAfterTheRestart(t *testing.T) {
	e, ts := startSlowTurn(t)
	e.stop()
	note := e.answer(ts, "I'll answer this as soon as I'm back")
	if strings.Contains(note.Text, "send your message again") {
		t.Errorf("the cut turn's message is recorded, yet the thread is asked to send it again: %q", note.Text)
	}
	e.model.Reply(fakeopenai.Text("Nothing changed."))
	e.start()
	e.answer(ts, "Nothing changed.")
}

// A turn cut by the shutdown after a step of it ran a tool (here an
// allowed read) is not a model failure: its step is saved, the thread is
// told it will be answered, and the next process gives the model the
// step's result without running the tool again.
func TestShutdownAfterAToolRanIsAnsweredAfterTheRestart(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.ShutdownGrace = 200 * time.Millisecond
	e.cfg.TakeoverInterval = 50 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("r1", "read_file", `{"path":"/etc/motd"}`)), fakeopenai.Response{Text: "too slow", Delay: time.Minute})
	ts := e.slack.Mention(channel, requester, "read the motd")
	e.request(2)
	e.stop()
	note := e.answer(ts, "I'll answer this as soon as I'm back")
	if strings.Contains(note.Text, "model") {
		t.Errorf("the cut turn is reported as a model failure: %q", note.Text)
	}
	e.model.Reply(fakeopenai.Text("The motd says hello."))
	e.start()
	e.answer(ts, "The motd says hello.")
	if n := e.reads.Load(); n != 1 {
		t.Errorf("read_file ran %d times, want once", n)
	}
}

// Shutdown ends at its deadline even when Slack rate-limits every note
// about work cut short: the notes share one deadline and are skipped past
// it, so no work is left running past the shutdown's own deadline, and Run
// returns once that work has ended.
func TestShutdownBoundedWhenSlackIsSlow(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	e.cfg.MaxTurns = 1
	e.cfg.ShutdownGrace = 500 * time.Millisecond
	e.start()
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Response{Text: "slow", Delay: 2 * time.Second}
	})
	e.slack.Mention(channel, requester, "first")
	waitUntil(t, "the turn reaches the model", func() bool { return len(e.model.Requests()) >= 1 })
	for range 6 {
		// Acked once recorded: queued behind the turn that holds the one
		// slot.
		for _, env := range e.slack.EnvelopesByTS(e.slack.Mention(channel, requester, "queued")) {
			if _, err := e.slack.WaitAck(env.ID, 10*time.Second); err != nil {
				t.Fatal(err)
			}
		}
	}
	e.slack.RateLimit("chat.postMessage", 1000, 1)

	b := e.bot
	e.bot = nil
	b.cancel()
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("bot stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		// Notes that waited out every rate limit would take 1000 s.
		t.Fatal("the bot did not stop")
	}
	// Run counts the work still running when it gives up on it, a moment
	// past the shutdown's deadline, before it returns.
	if n := counter(t, reg, "toolgate_errors_total", "shutdown_late"); n != 0 {
		t.Errorf("work ran past the shutdown's deadline (%v times): the notes did not stop at theirs", n)
	}
	limited := 0
	for _, c := range e.slack.Calls("chat.postMessage") {
		if c.Status == 429 {
			limited++
		}
	}
	if limited == 0 {
		t.Error("no note about the work cut short was tried")
	}
	must(t, b.st.Close())
}

// While handlers finish at shutdown, envelopes are still read: a command is
// told the bot is restarting, and a message is left unacked, so that Slack
// delivers it again and the next process answers it.
func TestShutdownAnswersEnvelopesDuringGrace(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	// A handler waits out a rate limit while it publishes a Home tab,
	// which keeps the shutdown in its grace period for handlers.
	e.slack.RateLimit("views.publish", 1, 3)
	e.slack.OpenHome(stranger)
	if _, err := e.slack.WaitCall("views.publish", func(c fakeslack.Call) bool { return c.Status == 429 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b := e.bot
	b.cancel()
	// Once the event loop sees the cancellation, a command is told.
	waitUntil(t, "a command during shutdown is told the bot is restarting", func() bool {
		return strings.Contains(e.slash(stranger, "help"), "I'm restarting; try again in a minute")
	})
	e.model.Reply(fakeopenai.Text("Hello after the restart."))
	ts := e.slack.Mention(channel, requester, "are you there?")
	envs := e.slack.EnvelopesByTS(ts)
	if len(envs) == 0 {
		t.Fatal("no envelope for the mention")
	}

	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("bot stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the bot did not stop")
	}
	for _, env := range e.slack.EnvelopesByTS(ts) {
		if got, _ := e.slack.Envelope(env.ID); got.Acked {
			t.Errorf("the %s event was acked during shutdown although nothing will handle it", got.EventType)
		}
	}
	must(t, b.st.Close())
	e.bot = nil
	if _, ok := e.slack.HomeView(stranger); !ok {
		t.Error("the Home tab of the handler running at shutdown was not published")
	}

	e.start()
	e.answer(ts, "Hello after the restart.")
}

// A thread whose turn the shutdown cuts, with another message of it queued
// behind the turn, is told once that it will be answered after the
// restart, not once per message: one turn answers both then.
func TestShutdownPromisesARestartOncePerThread(t *testing.T) {
	e, ts := startSlowTurn(t)
	// Recorded once acked, after the turn read the conversation: it waits
	// on the conversation's queue, behind the turn.
	reply := e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> and since when?")
	for _, env := range e.slack.EnvelopesByTS(reply) {
		if _, err := e.slack.WaitAck(env.ID, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	e.stop()
	var notes []string
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" && strings.Contains(m.Text, "I'll answer this as soon as I'm back") {
			notes = append(notes, m.Text)
		}
	}
	if len(notes) != 1 {
		t.Errorf("the thread got %d notes that it is answered after the restart, want 1:\n%s", len(notes), dumpThread(e.slack.Thread(channel, ts)))
	}
	e.model.Reply(fakeopenai.Text("Nothing changed since Monday."))
	e.start()
	e.answer(ts, "Nothing changed since Monday.")
}

// startSlowTurn starts a bot with a short shutdown grace and a mention
// whose model answer takes a minute; it returns once the model was asked.
func startSlowTurn(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.ShutdownGrace = 200 * time.Millisecond
	e.cfg.TakeoverInterval = 50 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.Response{Text: "too slow", Delay: time.Minute})
	ts := e.slack.Mention(channel, requester, "what changed?")
	e.request(1)
	return e, ts
}

// Shutdown waits for the work in flight, and for nothing else: with an
// hour of grace, Run returns once the turn it waited for has answered.
func TestShutdownReturnsOnceTheWorkEnds(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.ShutdownGrace = time.Hour
	e.start()
	release := make(chan struct{})
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		<-release
		return fakeopenai.Text("Answered before the restart.")
	})
	ts := e.slack.Mention(channel, requester, "what changed?")
	e.request(1)
	b := e.bot
	e.bot = nil
	b.cancel()
	select {
	case err := <-b.done:
		t.Fatalf("Run returned (%v) while a turn was still running", err)
	default:
	}
	close(release)
	select {
	case err := <-b.done:
		if err != nil {
			t.Errorf("bot stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return once the turn had answered: it waits out the grace")
	}
	e.answer(ts, "Answered before the restart.")
	must(t, b.st.Close())
}
