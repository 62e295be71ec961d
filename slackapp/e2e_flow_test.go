package slackapp_test

import (
	"context"
	"encoding/json"
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
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// One model step with an allowed, a denied and an asked call: one card;
// after the approval the model reads the three results in call order.
func TestParallelCallsOneCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.Response{ToolCalls: []fakeopenai.ToolCall{
		tc("c1", "read_file", `{"path":"/etc/motd"}`),
		tc("c2", "drop_db", `{"name":"prod"}`),
		tc("c3", "deploy", `{"service":"api","version":"4"}`),
	}, ArgChunks: 3}, fakeopenai.Text("All three handled."))
	ts := e.slack.Mention(channel, requester, "read, drop and deploy")
	card := e.card(ts, "deploy") // saved: every card of the step is posted before
	if cards := e.cards(channel, ts); len(cards) != 1 {
		t.Fatalf("%d cards in the thread, want only the deploy card:\n%s", len(cards), dumpThread(cards))
	}
	if n := e.reads.Load(); n != 1 {
		t.Errorf("read_file ran %d times before the decision, want 1 (allowed)", n)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times before the decision", n)
	}

	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "All three handled.")
	results := toolResults(e.request(2))
	if len(results) != 3 {
		t.Fatalf("the model got %d tool results, want 3: %+v", len(results), results)
	}
	want := []struct{ id, content string }{
		{"c1", "file contents"},
		{"c2", "Dropping databases is never allowed from chat."},
		{"c3", `deployed {"service":"api","version":"4"}`},
	}
	for i, w := range want {
		if results[i].ToolCallID != w.id || !strings.Contains(results[i].Content, w.content) {
			t.Errorf("tool result %d is %s: %q, want %s containing %q", i, results[i].ToolCallID, results[i].Content, w.id, w.content)
		}
	}
	if n := e.reads.Load(); n != 1 {
		t.Errorf("read_file ran %d times in all, want 1", n)
	}
}

// Arguments that are not JSON never reach a card or the tool: the model is
// told what is wrong and answers.
func TestInvalidJSONArguments(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":`)), fakeopenai.Text("Sorry, my arguments were broken."))
	ts := e.slack.Mention(channel, requester, "deploy")
	e.answer(ts, "Sorry, my arguments were broken.")
	e.refusedBeforeACard(ts, "not valid JSON")
}

// refusedBeforeACard checks that the model's only call, c1 (deploy), in
// the thread ts got an error result containing want, with no card posted
// and nothing run.
func (e *env) refusedBeforeACard(ts, want string) {
	e.t.Helper()
	results := toolResults(e.request(2))
	if len(results) != 1 || results[0].ToolCallID != "c1" || !strings.Contains(results[0].Content, want) {
		e.t.Errorf("the model's tool results are %+v, want an error containing %q for c1", results, want)
	}
	if cards := e.cards(channel, ts); len(cards) != 0 {
		e.t.Errorf("a card was posted for the refused call:\n%s", dumpThread(cards))
	}
	if n := e.deploy.Load(); n != 0 {
		e.t.Errorf("deploy ran %d times", n)
	}
}

// A call that would ask for approval with arguments too long to show an
// approver in full (here 120 KB of "&", five characters each once escaped,
// before the version) is not paused: no card asks anyone to approve what
// they cannot read, and the model is told to call again with shorter
// arguments.
func TestArgumentsTooLongToShowAreNotPutToApprovers(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	args := `{"service":"` + strings.Repeat("&", 120<<10) + `","version":"6"}`
	if slackapp.ArgsShownInFull(json.RawMessage(args), false) {
		t.Fatal("ArgsShownInFull of 120 KB of ampersands = true, want false")
	}
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("They were too long."))
	ts := e.slack.Mention(channel, requester, "deploy")
	e.answer(ts, "They were too long.")
	e.refusedBeforeACard(ts, "too long to be shown in full")
}

// A message in a paused thread is answered with who it waits on, and
// answered for real after the resume, with the tool result before it.
func TestMessageInPausedThread(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)), fakeopenai.Text("Deployed api 5."), fakeopenai.Text("It was version 5."))
	ts := e.slack.Mention(channel, requester, "deploy api 5")
	card := e.card(ts, "deploy")

	const queued = "which version was that again?"
	e.slack.ThreadReply(channel, ts, requester, queued)
	waiting := e.answer(ts, "waiting on approval")
	if text := waiting.Text + blocksText(waiting); !strings.Contains(text, "`deploy`") || !strings.Contains(text, "<@"+approver+">") {
		t.Errorf("the waiting reply does not name the tool and the approvers: %q", waiting.Text)
	}

	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 5.")
	e.answer(ts, "It was version 5.")
	req := e.request(3)
	toolAt, userAt := -1, -1
	for i, m := range req.Messages {
		switch {
		case m.Role == openai.ChatMessageRoleTool && m.ToolCallID == "c1":
			toolAt = i
		case m.Role == openai.ChatMessageRoleUser && strings.Contains(m.Content, queued):
			userAt = i
		}
	}
	if toolAt < 0 || userAt < 0 || userAt < toolAt {
		t.Errorf("in the third request the tool result is at %d and the queued message at %d; want both, the message after", toolAt, userAt)
	}
	e.stop() // all work done: a request while the thread was paused would be a fourth
	if n := len(e.model.Requests()); n != 3 {
		t.Errorf("the model was asked %d times, want 3 (none while the thread was paused)", n)
	}
}

// decidedAfterRead lets the first run read after it is armed (a turn's
// read of the run its conversation is paused on) return only once a
// decision was recorded: the turn works from calls as they were before
// the decision, as when the decision lands just after the read.
type decidedAfterRead struct {
	fullStore
	armed       atomic.Bool
	read        chan struct{} // closed once the armed read is done
	decided     chan struct{} // closed once a decision is recorded
	decidedOnce sync.Once
}

func (s *decidedAfterRead) LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error) {
	run, calls, err := s.fullStore.LoadRun(ctx, runID)
	if s.armed.CompareAndSwap(true, false) {
		close(s.read)
		select {
		case <-s.decided:
		case <-ctx.Done():
		}
	}
	return run, calls, err
}

func (s *decidedAfterRead) DecideAudited(ctx context.Context, callID, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, err := s.fullStore.DecideAudited(ctx, callID, fp, d, fx)
	if err == nil {
		s.decidedOnce.Do(func() { close(s.decided) })
	}
	return c, complete, err
}

// A message whose turn found the thread paused, and whose call was
// approved before the turn answered it (a click is decided at once, not
// behind the conversation's turn), is not told that the thread waits on
// approval: the resume, queued behind the turn, answers it.
func TestMessageInAThreadApprovedMeanwhileIsNotToldItWaits(t *testing.T) {
	st := &decidedAfterRead{read: make(chan struct{}), decided: make(chan struct{})}
	e := newEnv(t, storeKinds(t)[0])
	open := e.open
	e.open = func() fullStore { st.fullStore = open(); return st }
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)), fakeopenai.Text("Deployed api 5."), fakeopenai.Text("It was version 5."))
	ts := e.slack.Mention(channel, requester, "deploy api 5")
	card := e.card(ts, "deploy")

	st.armed.Store(true)
	e.slack.ThreadReply(channel, ts, requester, "which version was that again?")
	<-st.read
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 5.")
	e.answer(ts, "It was version 5.")
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" && strings.Contains(m.Text, "waiting on approval") {
			t.Errorf("the message was told the thread waits on approval, after the approval:\n%s", dumpThread(e.slack.Thread(channel, ts)))
		}
	}
}

const ttlPolicy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      ttl: 1s
      approvers: [UAPPROVER1]
`

// An approval nobody decides expires: the card says so, the model is told,
// and a late click from a stale Home tab runs nothing.
func TestApprovalExpires(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = ttlPolicy
	e.cfg.SweepInterval = 200 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"6"}`)), fakeopenai.Text("The approval expired; nothing was deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 6")
	card := e.card(ts, "deploy")
	// The approver opens the Home tab while the call is pending and clicks
	// there after it expired.
	e.slack.OpenHome(approver)
	var home fakeslack.View
	waitUntil(t, "the Home tab lists the call", func() bool {
		home, _ = e.slack.HomeView(approver)
		return strings.Contains(string(home.JSON), `"action_id":"approve"`)
	})

	e.waitThread(ts, "with the expired card", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Expired after 1 second")
	})
	e.answer(ts, "The approval expired")
	results := toolResults(e.request(2))
	if len(results) != 1 || results[0].Content != "not performed: approval expired after 1s" {
		t.Errorf("the model's tool results are %+v, want the expiry", results)
	}
	if updated, _ := e.slack.Message(channel, card.TS); isCard(updated) {
		t.Errorf("the expired card still has buttons: %s", updated.Blocks)
	}

	_, err := e.slack.ClickInView(approver, home.ID, slackapp.ActionApprove, "")
	must(t, err)
	dm := e.slack.DMChannel(approver)
	msg, err := e.slack.WaitMessage(dm, func(m fakeslack.Message) bool { return m.BotID != "" }, 10*time.Second)
	must(t, err)
	if !strings.Contains(msg.Text+blocksText(msg), "expired") {
		t.Errorf("a late click was answered %q, want that the request expired", msg.Text)
	}
	e.stop() // the late click's work is done by then
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times after the approval expired", n)
	}
	if n := len(e.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2", n)
	}
}

// Only the requester can cancel; a cancelled turn makes no model call and
// leaves the unexecuted call out of the history.
func TestCancelByRequester(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 7")
	card := e.card(ts, "deploy")

	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionCancel, "")
	must(t, err)
	if m := e.ephemeral(other, "Only <@"+requester+"> can cancel"); m.Channel != channel || m.ThreadTS != ts {
		t.Errorf("the refusal went to %s, thread %q; want the thread clicked in, %s", m.Channel, m.ThreadTS, ts)
	}
	if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 {
		t.Fatal("someone else's cancel changed the card")
	}

	_, err = e.slack.Click(requester, channel, card.TS, slackapp.ActionCancel, "")
	must(t, err)
	updated := e.waitThread(ts, "with the cancelled card", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Cancelled by the requester")
	})
	if isCard(updated) {
		t.Errorf("the cancelled card still has buttons: %s", updated.Blocks)
	}

	// The thread goes on without the cancelled call.
	e.model.Reply(fakeopenai.Text("Sure, something else."))
	e.slack.ThreadReply(channel, ts, requester, "never mind, something else")
	e.answer(ts, "Sure, something else.")
	for _, m := range e.request(2).Messages {
		if m.Role == openai.ChatMessageRoleTool || len(m.ToolCalls) > 0 {
			t.Errorf("the cancelled call is still in the history: %+v", m)
		}
	}
	e.stop() // all work done
	if n := len(e.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2 (none for the cancelled turn)", n)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times after a cancel", n)
	}
}

// Always allow here: the call runs, and the same call in a new thread of
// that channel runs without a card. (A standing rule never relaxes a
// four-eyes rule, so the deploy rule here is an ordinary ask.)
func TestRememberAllowsHere(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.start()
	const args = `{"service":"api","version":"8"}`
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("Deployed, and remembered."))
	ts := e.slack.Mention(channel, requester, "deploy api 8")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answer(ts, "Deployed, and remembered.")
	if n := e.deploy.Load(); n != 1 {
		t.Fatalf("deploy ran %d times after Remember, want 1", n)
	}
	updated, _ := e.slack.Message(channel, card.TS)
	if !strings.Contains(blocksText(updated), "allowed in this channel from now on") {
		t.Errorf("the card does not say the tool is allowed here now: %s", updated.Blocks)
	}

	e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", args)), fakeopenai.Text("Deployed again without asking."))
	ts2 := e.slack.Mention(channel, requester, "deploy api 8 again")
	e.answer(ts2, "Deployed again without asking.")
	if n := e.deploy.Load(); n != 2 {
		t.Errorf("deploy ran %d times in all, want 2", n)
	}
	if cards := e.cards(channel, ts2); len(cards) != 0 {
		t.Errorf("the remembered call asked again:\n%s", dumpThread(cards))
	}
}

// mentionHoldingStatus mentions the bot with the thread's first status
// call held by Slack, and returns once asked has received (the model was
// asked, for the last time the test's model says so), having checked that
// nothing was posted in the thread meanwhile. release lets the status call
// through; it is also called when the test ends.
func (e *env) mentionHoldingStatus(text string, asked <-chan struct{}) (ts string, release func()) {
	e.t.Helper()
	arrived, release := e.slack.HoldNext("assistant.threads.setStatus")
	e.t.Cleanup(release)
	ts = e.slack.Mention(channel, requester, text)
	<-arrived
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		e.t.Fatal("the model was not asked while the thread's first status call was held")
	}
	if msgs := e.slack.Thread(channel, ts); len(msgs) != 1 {
		e.t.Fatalf("the thread has %d messages while its status call is held, want the mention only: %+v", len(msgs), msgs)
	}
	return ts, release
}

// The thread's status is set without holding the turn up: the model is
// asked while Slack has not answered the status call yet. The answer waits
// for that call, so the status lands first and the answer clears it.
func TestStatusDoesNotHoldTheTurn(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	asked := make(chan struct{}, 1)
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		select {
		case asked <- struct{}{}:
		default:
		}
		return fakeopenai.Text("All quiet.")
	})
	e.start()
	ts, release := e.mentionHoldingStatus("status please", asked)
	release()
	e.answer(ts, "All quiet.")
	if s := e.slack.ThreadStatus(channel, ts); s != "" {
		t.Errorf("thread status %q after the answer, want it cleared (the status landed after the answer)", s)
	}
}

// A status set while the one before it is still in flight does not hold
// the turn either: the tool runs and the model is asked again meanwhile.
// Once the held call returns, only the latest status waiting is sent (the
// tool's, overtaken by the next step's before it could be sent, never is),
// and the answer comes after it, clearing it.
func TestStatusesDoNotWaitForEachOther(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	asked := make(chan struct{}, 1)
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if len(toolResults(req)) == 0 {
			return fakeopenai.ToolCalls(tc("call_motd", "read_file", `{"path":"/etc/motd"}`))
		}
		select {
		case asked <- struct{}{}:
		default:
		}
		return fakeopenai.Text("The file says hello.")
	})
	e.start()
	ts, release := e.mentionHoldingStatus("read the motd", asked)
	if n := e.reads.Load(); n != 1 {
		t.Fatalf("read_file ran %d times while the first status call was held, want 1", n)
	}
	release()
	e.answer(ts, "says hello")
	var sent []string
	for _, c := range e.slack.Calls("assistant.threads.setStatus") {
		sent = append(sent, c.Param("status"))
	}
	if want := []string{"is thinking…", "is thinking…"}; !slices.Equal(sent, want) {
		t.Errorf("statuses sent %q, want %q (the tool's, overtaken while the first was in flight, not sent)", sent, want)
	}
	if s := e.slack.ThreadStatus(channel, ts); s != "" {
		t.Errorf("thread status %q after the answer, want it cleared", s)
	}
}

// Only the first note answering messages in a paused thread mentions the
// approvers: more messages, from anyone in the channel, cannot make the
// bot ping them again and again.
func TestWaitingNotesPingTheApproversOnce(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 5")
	e.card(ts, "deploy")
	var notes []fakeslack.Message
	for i := range 3 {
		e.slack.ThreadReply(channel, ts, stranger, fmt.Sprintf("ping %d", i))
		waitUntil(t, "the message's waiting note", func() bool {
			notes = notes[:0]
			for _, m := range e.slack.Thread(channel, ts) {
				if m.BotID != "" && strings.Contains(m.Text, "waiting on approval") {
					notes = append(notes, m)
				}
			}
			return len(notes) == i+1
		})
	}
	for i, m := range notes {
		pings := strings.Contains(m.Text, "<@"+approver+">")
		if pings != (i == 0) {
			t.Errorf("waiting note %d mentions the approver: %v, want only the first to: %q", i+1, pings, m.Text)
		}
		if !strings.Contains(m.Text, "`deploy`") {
			t.Errorf("waiting note %d does not name the tool: %q", i+1, m.Text)
		}
	}
}
