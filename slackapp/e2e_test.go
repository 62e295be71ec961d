package slackapp_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// Mention -> card -> Approve -> the tool runs once with the shown
// arguments -> the card is updated in place -> the answer is in the thread.
func TestMentionApproveAnswer(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"version":"1.2.3","service":"api"}`)), fakeopenai.Text("Deployed **api** 1.2.3."))
			ts := e.slack.Mention(channel, requester, "deploy api 1.2.3 please")
			card := e.card(ts, "deploy")
			if e.deploy.Load() != 0 {
				t.Fatal("deploy ran before any decision")
			}
			for _, want := range []string{"<@UAPPROVER1>", "<@UOTHER0001>", "Deploys need review.", "1.2.3", "<!date^"} {
				if !strings.Contains(blocksText(card), want) {
					t.Errorf("card does not show %q: %s", want, card.Blocks)
				}
			}
			// The mention came as app_mention and message: one turn.
			if n := len(e.model.Requests()); n != 1 {
				t.Errorf("the model was asked %d times for one mention, want 1", n)
			}
			value := buttonValue(t, card, slackapp.ActionApprove)
			if strings.Contains(value, "1.2.3") {
				t.Errorf("button value %q carries arguments", value)
			}
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			if got := e.deployArgs(); len(got) != 1 || got[0] != `{"service":"api","version":"1.2.3"}` {
				t.Errorf("deploy ran with %v, want the approved arguments", got)
			}
			// The card's updates go to Slack beside the turn, which the
			// fake model answers at once: the answer may come first.
			updated := e.waitThread(ts, "the card updated in place to say it ran", func(m fakeslack.Message) bool {
				return m.TS == card.TS && m.Updates > 0 && strings.Contains(strings.ToLower(blocksText(m)), "approved")
			})
			if strings.Contains(blocksText(updated), `"action_id":"approve"`) {
				t.Error("the updated card still has an Approve button")
			}
			if !strings.Contains(blocksText(updated), "<@UAPPROVER1>") || !strings.Contains(strings.ToLower(blocksText(updated)), "approved") {
				t.Errorf("the updated card does not say who approved: %s", updated.Blocks)
			}
		})
	}
}

// The requester of a four-eyes call and people who are not approvers are
// told so privately; nothing changes.
func TestUnauthorizedClickers(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	for _, user := range []string{stranger, requester} {
		_, err := e.slack.Click(user, channel, card.TS, slackapp.ActionApprove, "")
		must(t, err)
		waitUntil(t, user+" is told", func() bool { return len(e.slack.Ephemerals(user)) > 0 })
	}
	if !strings.Contains(e.slack.Ephemerals(stranger)[0].Text, "not an approver") {
		t.Errorf("stranger was told %q", e.slack.Ephemerals(stranger)[0].Text)
	}
	if !strings.Contains(e.slack.Ephemerals(requester)[0].Text, "second pair of eyes") {
		t.Errorf("requester was told %q", e.slack.Ephemerals(requester)[0].Text)
	}
	e.stop() // the clicks' work is done by then
	if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 || e.deploy.Load() != 0 {
		t.Errorf("an unauthorized click changed something: %d updates, %d runs", m.Updates, e.deploy.Load())
	}
}

// Ten concurrent clicks and a redelivered envelope execute the call once.
func TestConcurrentClicksRunOnce(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("done once"))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")
			users := make([]string, 10)
			for i := range users {
				users[i] = approver
				if i%2 == 1 {
					users[i] = other
				}
			}
			envs, err := e.slack.ClickMany(users, channel, card.TS, slackapp.ActionApprove)
			must(t, err)
			first := envs[0]
			must(t, e.slack.Redeliver(first))
			e.answer(ts, "done once")
			// Of the ten clicks one decided; each of the nine others is
			// told who did, once. The first click is delivered twice:
			// when one delivery decided, the other is told too.
			m, _ := e.slack.Message(channel, card.TS)
			var winner string
			for _, u := range []string{approver, other} {
				if strings.Contains(blocksText(m), "Approved by <@"+u+">") {
					winner = u
				}
			}
			if winner == "" {
				t.Fatalf("the card does not say who approved: %s", blocksText(m))
			}
			told := func(u string) int {
				n := 0
				for _, eph := range e.slack.Ephemerals(u) {
					if strings.Contains(eph.Text, "already approved by <@"+winner+">") {
						n++
					}
				}
				return n
			}
			lost := func(u string) int {
				if u == winner {
					return 4
				}
				return 5
			}
			// The clicks' work runs beside the resume: the bot stops once
			// every lost click was answered.
			waitUntil(t, "every lost click is told who decided", func() bool {
				return told(approver) >= lost(approver) && told(other) >= lost(other)
			})
			e.stop()
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			for _, u := range []string{approver, other} {
				again := 0
				if u == users[0] && u == winner {
					again = 1
				}
				if n := told(u); n < lost(u) || n > lost(u)+again {
					t.Errorf("%s lost %d clicks to %s and was told who decided first %d times, want once per click lost: %v", u, lost(u), winner, n, e.slack.Ephemerals(u))
				}
			}
		})
	}
}

// The bot restarts between the pause and the click.
func TestRestartBetweenPauseAndClick(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")
			e.restart()
			e.model.Reply(fakeopenai.Text("deployed after the restart"))
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "deployed after the restart")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// Model-written arguments cannot ping or spoof links on the card.
func TestHostileArgumentsRenderInert(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"<!channel> <@U123> <https://evil|x>","version":"@here"}`)))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	for _, bad := range []string{"<!channel>", "<@U123>", "<https://evil", "\"@here"} {
		if strings.Contains(blocksText(card), bad) || strings.Contains(card.Text, bad) {
			t.Errorf("the card contains %q: %s", bad, card.Blocks)
		}
	}
}

// A DM conversation works the same, in the DM's thread.
func TestDMConversation(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.Text("Hello from the bot."))
	ts := e.slack.DM(requester, "hi")
	dm := e.slack.DMChannel(requester)
	msg, err := e.slack.WaitMessage(dm, func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text+string(m.Blocks), "Hello from the bot.")
	}, 10*time.Second)
	must(t, err)
	if msg.ThreadTS != ts {
		t.Errorf("got the answer in thread %q, want %q", msg.ThreadTS, ts)
	}
}

// acceptCounter counts the messages the app asks the store to record.
type acceptCounter struct {
	fullStore
	n *atomic.Int64
}

func (s *acceptCounter) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	s.n.Add(1)
	return s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
}

func (s *acceptCounter) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	s.n.Add(1)
	return s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
}

// The app_mention and message copies of one mention reach the same
// process together; the first records the message and the second waits for
// it, so the store is asked once; a thread reply without a mention is
// recorded by its one copy.
func TestCopiesOfOneMessageAreRecordedOnce(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			n := new(atomic.Int64)
			open := e.open
			e.open = func() fullStore { return &acceptCounter{fullStore: open(), n: n} }
			e.start()
			e.model.Reply(fakeopenai.Text("api is at version 2"), fakeopenai.Text("web is at version 5"))
			ts := e.slack.Mention(channel, requester, "which version is api at?")
			e.answer(ts, "api is at version 2")
			envs := e.slack.EnvelopesByTS(ts)
			if len(envs) != 2 {
				t.Fatalf("the mention came as %d envelopes, want app_mention and message", len(envs))
			}
			for _, env := range envs {
				if _, err := e.slack.WaitAck(env.ID, 10*time.Second); err != nil {
					t.Fatalf("envelope %s (%s) not acked: %v", env.ID, env.EventType, err)
				}
			}
			if got := n.Load(); got != 1 {
				t.Errorf("the store was asked to record the mention %d times, want 1", got)
			}
			e.slack.ThreadReply(channel, ts, requester, "and web?")
			e.answer(ts, "web is at version 5")
			if got := n.Load(); got != 2 {
				t.Errorf("after a thread reply the store was asked %d times, want 2", got)
			}
			if reqs := len(e.model.Requests()); reqs != 2 {
				t.Errorf("the model was asked %d times, want one turn per message", reqs)
			}
		})
	}
}

// stepCounter counts the store steps that record messages and begin turns.
type stepCounter struct {
	fullStore
	mu    sync.Mutex
	steps map[string]int
	// recorded gets the text of each message AcceptMessage recorded.
	recorded chan string
}

func (s *stepCounter) add(step string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps[step]++
}

// take returns the counts since the last take.
func (s *stepCounter) take() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.steps
	s.steps = map[string]int{}
	return out
}

func (s *stepCounter) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	s.add("AcceptMessage")
	got, acc, err := s.fullStore.AcceptMessage(ctx, conversation, m, requireKnown)
	if err == nil && acc == store.Accepted {
		s.recorded <- m.Text
	}
	return got, acc, err
}

func (s *stepCounter) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	s.add("AcceptBegin")
	return s.fullStore.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
}

func (s *stepCounter) DecideAudited(ctx context.Context, id, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	s.add("DecideAudited")
	return s.fullStore.DecideAudited(ctx, id, fp, d, fx)
}

func (s *stepCounter) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	s.add("DecideBegin")
	return s.fullStore.DecideBegin(ctx, id, fp, d, fx, r)
}

func (s *stepCounter) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	s.add("BeginResume")
	return s.fullStore.BeginResume(ctx, runID, r)
}

func (s *stepCounter) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	s.add("BeginTurn")
	return s.fullStore.BeginTurn(ctx, conversation, owner, ttl, kinds...)
}

// A mention in a conversation with no work in this process is recorded
// and its turn begun in one store step (AcceptBegin), and the turn runs at
// once; the click on its card is decided and its resume begun in one
// store step too (DecideBegin). A reply sent while that turn's model call is held is recorded
// alone, queued behind the turn, and answered after it, in order.
func TestIdleConversationRecordsAndBeginsInOneStep(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			steps := &stepCounter{steps: map[string]int{}, recorded: make(chan string, 10)}
			open := e.open
			e.open = func() fullStore { steps.fullStore = open(); return steps }
			reg := prometheus.NewRegistry()
			e.cfg.Metrics = slackapp.NewMetrics(reg)
			m := newScriptedModel()
			t.Cleanup(m.unblock)
			e.model.Handle(m.answer)
			e.start()
			ts := e.slack.Mention(channel, requester, "deploy api 2")
			card := e.card(ts, "deploy")
			// The card is posted by the turn, which holds the conversation
			// until it has returned.
			waitUntil(t, "the mention's turn ended", func() bool { return counter(t, reg, "toolgate_turns_total", "paused") == 1 })
			if got := steps.take(); got["AcceptBegin"] != 1 || got["AcceptMessage"] != 0 || got["BeginTurn"] != 0 {
				t.Errorf("store steps of the mention up to its card = %v, want one AcceptBegin and no AcceptMessage or BeginTurn", got)
			}
			// The click's decision begins the resume in the same step.
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed:")
			if got := steps.take(); got["DecideBegin"] != 1 || got["DecideAudited"] != 0 || got["BeginResume"] != 0 {
				t.Errorf("store steps of the click up to the answer = %v, want one DecideBegin and no DecideAudited or BeginResume", got)
			}
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}

			hold := e.slack.Mention(channel, requester, "please hold")
			<-m.held
			e.slack.ThreadReply(channel, hold, requester, "<@"+e.slack.BotUserID()+"> and then?")
			// The reply is recorded alone while the turn holds the
			// conversation, then waits on its queue.
			select {
			case text := <-steps.recorded:
				if text != "and then?" {
					t.Errorf("recorded %q alone, want the reply", text)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the reply was not recorded while the turn was held")
			}
			if got := steps.take(); got["AcceptBegin"] != 1 || got["AcceptMessage"] != 1 {
				t.Errorf("store steps of the held mention and the reply = %v, want one AcceptBegin, one AcceptMessage", got)
			}
			m.unblock()
			e.answer(hold, "Held answer.")
			e.answer(hold, "ok")
			var answers []string
			for _, msg := range e.slack.Thread(channel, hold) {
				if msg.BotID != "" && (msg.Text == "Held answer." || msg.Text == "ok") {
					answers = append(answers, msg.Text)
				}
			}
			if !slices.Equal(answers, []string{"Held answer.", "ok"}) {
				t.Errorf("answers in the held thread = %q, want the held turn's, then the reply's", answers)
			}
		})
	}
}
