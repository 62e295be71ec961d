package slackapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// scriptedModel answers by the conversation's last message: "deploy S V"
// asks to deploy, a tool result is answered "Deployed ...", "hold" waits
// for release, anything else gets "ok".
type scriptedModel struct {
	release     chan struct{}
	releaseOnce sync.Once
	once        sync.Once
	held        chan struct{} // closed when a "hold" request arrived
}

// unblock releases held requests, now and from then on.
func (s *scriptedModel) unblock() { s.releaseOnce.Do(func() { close(s.release) }) }

func newScriptedModel() *scriptedModel {
	return &scriptedModel{release: make(chan struct{}), held: make(chan struct{})}
}

func (s *scriptedModel) answer(req openai.ChatCompletionRequest) fakeopenai.Response {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == openai.ChatMessageRoleTool {
		return fakeopenai.Text("Deployed: " + last.Content)
	}
	words := strings.Fields(last.Content)
	switch {
	case len(words) >= 3 && words[len(words)-3] == "deploy":
		svc, version := words[len(words)-2], words[len(words)-1]
		return fakeopenai.ToolCalls(tc("c-"+svc+"-"+version, "deploy", fmt.Sprintf(`{"service":%q,"version":%q}`, svc, version)))
	case strings.HasSuffix(last.Content, "hold"):
		s.once.Do(func() { close(s.held) })
		<-s.release
		return fakeopenai.Text("Held answer.")
	}
	return fakeopenai.Text("ok")
}

// While conversation A's model call is held, conversation B gets its card
// and a click on conversation C's card is decided, run and answered.
func TestConversationsDoNotWaitForEachOther(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			m := newScriptedModel()
			t.Cleanup(m.unblock)
			e.model.Handle(m.answer)
			e.start()
			tsC := e.slack.Mention(channel, requester, "deploy c 1")
			cardC := e.card(tsC, "deploy")

			tsA := e.slack.Mention(channel, requester, "hold")
			<-m.held
			tsB := e.slack.Mention(channel, requester, "deploy b 2")
			e.card(tsB, "deploy")
			_, err := e.slack.Click(approver, channel, cardC.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(tsC, "Deployed: deployed")
			if got := e.deployArgs(); len(got) != 1 || !strings.Contains(got[0], `"c"`) {
				t.Errorf("deploys while A's model call is held: %v, want c's only", got)
			}
			for _, msg := range e.slack.Thread(channel, tsA) {
				if strings.Contains(msg.Text, "Held answer") {
					t.Fatal("A was answered although its model call is held")
				}
			}
			m.unblock()
			e.answer(tsA, "Held answer.")
		})
	}
}

// A click that arrives while its own conversation's turn is still running
// (here: posting the card's copies for approvers outside the channel) is
// decided at once, and the resume runs right after that turn.
func TestClickDuringItsTurnIsDecidedAtOnce(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			const private = "CPRIVATE09"
			e := newEnv(t, kind)
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "ops", Private: true, Members: []string{requester, e.slack.BotUserID()}})
			m := newScriptedModel()
			m.unblock()
			e.model.Handle(m.answer)
			b := e.start()
			// The turn stops, after posting the card in the thread, at the
			// DM to the first approver outside the channel.
			arrived, release := e.slack.HoldNext("conversations.open")
			defer release()
			ts := e.slack.Mention(private, requester, "deploy vault 3")
			card := e.cardIn(private, ts, "deploy")
			<-arrived

			_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
			waitUntil(t, "the click is recorded while the turn still runs", func() bool {
				c, err := b.st.GetCall(t.Context(), callID)
				return err == nil && c.Status == store.Decided
			})
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times before the turn that paused it ended", n)
			}
			if msgs := e.slack.Messages(e.slack.DMChannel(approver)); len(msgs) != 0 {
				t.Fatalf("the held turn already posted the DM copy: %+v", msgs)
			}
			release()
			e.answerIn(private, ts, "Deployed: deployed")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			for _, u := range []string{approver, other} {
				dm := e.slack.DMChannel(u)
				if _, err := e.slack.WaitMessage(dm, func(m fakeslack.Message) bool { return m.BotID != "" }, 10*time.Second); err != nil {
					t.Errorf("%s got no copy of the card: %v", u, err)
				}
			}
			waitUntil(t, "the thread's card shows the call ran", func() bool {
				m, _ := e.slack.Message(private, card.TS)
				return !isCard(m) && strings.Contains(blocksText(m), "Approved by")
			})
		})
	}
}

// Past MaxTurns, a new turn waits for a slot in arrival order, and its
// thread is told that it is queued, once however many of its turns wait.
func TestTurnsPastTheBoundWaitAndAreToldOnce(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Millisecond
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	held := newHeldModel(e, "hold a", "hold c")
	e.start()
	tsA := e.slack.Mention(channel, requester, "hold a")
	held.arrived(t, "hold a")
	tsB := e.slack.Mention(channel, requester, "hello")
	e.answer(tsB, "yours is queued")
	tsC := e.slack.Mention(channel, requester, "hold c")
	e.answer(tsC, "yours is queued")
	// B's second message waits behind its first, and then, once C has
	// the slot, for the slot: its thread was told already.
	again := e.slack.ThreadReply(channel, tsB, requester, "<@"+e.slack.BotUserID()+"> and again")
	for _, env := range e.slack.EnvelopesByTS(again) {
		if _, err := e.slack.WaitAck(env.ID, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	held.release("hold a")
	e.answer(tsA, "held: hold a")
	held.arrived(t, "hold c")
	waitUntil(t, "B's second turn waits for the slot", func() bool { return counter(t, reg, "toolgate_errors_total", "turns_queued") == 3 })
	held.release("hold c")
	e.answer(tsC, "held: hold c")
	e.answer(tsB, "ok")
	// A, B's two turns (the first answered both messages) and C.
	waitUntil(t, "every turn ended", func() bool { return counter(t, reg, "toolgate_turns_total", "") == 4 })
	if n := strings.Count(dumpThread(e.slack.Thread(channel, tsB)), "yours is queued"); n != 1 {
		t.Errorf("the waiting thread was told %d times that it is queued, want once", n)
	}
}

// A turn that gets its slot within QueuedNoticeAfter is not told that it
// was queued.
func TestShortWaitForATurnIsNotTold(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Hour
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	held := newHeldModel(e, "hold a")
	e.start()
	tsA := e.slack.Mention(channel, requester, "hold a")
	held.arrived(t, "hold a")
	tsB := e.slack.Mention(channel, requester, "hello")
	waitUntil(t, "B's turn waits for the slot", func() bool { return counter(t, reg, "toolgate_errors_total", "turns_queued") == 1 })
	held.release("hold a")
	e.answer(tsA, "held: hold a")
	e.answer(tsB, "ok")
	if strings.Contains(dumpThread(e.slack.Thread(channel, tsB)), "yours is queued") {
		t.Error("a turn that waited less than QueuedNoticeAfter was told it is queued")
	}
}

// heldModel holds the model requests whose last message ends with one of
// its keys until the test releases that key, and answers "held: <key>";
// other requests are answered "ok".
type heldModel struct {
	holds map[string]chan struct{}
	got   chan string
}

func newHeldModel(e *env, keys ...string) *heldModel {
	h := &heldModel{holds: map[string]chan struct{}{}, got: make(chan string, len(keys))}
	for _, k := range keys {
		h.holds[k] = make(chan struct{})
	}
	e.t.Cleanup(func() {
		for k := range h.holds {
			h.release(k)
		}
	})
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		last := req.Messages[len(req.Messages)-1].Content
		for k, release := range h.holds {
			if strings.HasSuffix(last, k) {
				h.got <- k
				<-release
				return fakeopenai.Text("held: " + k)
			}
		}
		return fakeopenai.Text("ok")
	})
	return h
}

// arrived waits until the request held by key reached the model.
func (h *heldModel) arrived(t *testing.T, key string) {
	t.Helper()
	select {
	case got := <-h.got:
		if got != key {
			t.Fatalf("the model was asked %q first, want %q", got, key)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the model was never asked %q", key)
	}
}

// release lets the requests held by key through, now and from then on.
func (h *heldModel) release(key string) {
	select {
	case <-h.holds[key]:
	default:
		close(h.holds[key])
	}
}

// counter reads the counter name of reg with the label value (any one
// label), or the sum over all its labels when value is empty.
func counter(t *testing.T, reg *prometheus.Registry, name, value string) float64 {
	t.Helper()
	families, err := reg.Gather()
	must(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if value == "" || l.GetValue() == value {
					sum += m.GetCounter().GetValue()
					break
				}
			}
		}
	}
	return sum
}

// dueFailsOnce fails the first expiry pass at or after deadline, as a
// store failover at the deadline would: its Due, then the reads of the
// next deadlines, until the next Due.
type dueFailsOnce struct {
	fullStore
	deadline atomic.Pointer[time.Time]
	failed   atomic.Bool
	down     atomic.Bool
}

func (s *dueFailsOnce) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	if d := s.deadline.Load(); d != nil && !now.Before(*d) && s.failed.CompareAndSwap(false, true) {
		s.down.Store(true)
		return nil, errOutage
	}
	s.down.Store(false)
	return s.fullStore.Due(ctx, now, limit)
}

func (s *dueFailsOnce) NextExpiry(ctx context.Context) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errOutage
	}
	return s.fullStore.NextExpiry(ctx)
}

func (s *dueFailsOnce) NextReminder(ctx context.Context) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errOutage
	}
	return s.fullStore.NextReminder(ctx)
}

// Without any sweep, an approval expires on time: the card says so within
// a generous bound after its deadline, also when the expiry pass at the
// deadline fails (it is tried again in a moment, not at the next sweep).
func TestExpiryFollowsTheDeadline(t *testing.T) {
	for _, kind := range storeKinds(t) {
		for _, failing := range []bool{false, true} {
			name := kind.name
			if failing {
				name += "/a pass fails"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, kind)
				e.policy = ttlPolicy
				e.cfg.SweepInterval = time.Hour // only the expiry timer can expire it
				st := &dueFailsOnce{}
				if failing {
					open := e.open
					e.open = func() fullStore { st.fullStore = open(); return st }
				}
				m := newScriptedModel()
				m.unblock()
				e.model.Handle(m.answer)
				e.start()
				ts := e.slack.Mention(channel, requester, "deploy api 7")
				card := e.card(ts, "deploy")
				callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
				c, err := e.bot.st.GetCall(t.Context(), callID)
				must(t, err)
				st.deadline.Store(&c.ExpiresAt)
				e.waitThread(ts, "with the expired card", func(m fakeslack.Message) bool {
					return m.TS == card.TS && strings.Contains(blocksText(m), "Expired")
				})
				if failing && !st.failed.Load() {
					t.Fatal("no expiry pass failed: the test did not test a failure")
				}
				if late := time.Since(c.ExpiresAt); late > 3*time.Second {
					t.Errorf("the card said it expired %v after the deadline", late)
				}
				if n := e.deploy.Load(); n != 0 {
					t.Errorf("deploy ran %d times on an expired approval", n)
				}
			})
		}
	}
}

// Three replicas on one Redis, envelopes spread over their connections, a
// tenth of the clicks sent twice: every approved call runs exactly once and
// every thread is answered.
func TestReplicasRunEachApprovedCallOnce(t *testing.T) {
	const conversations = 300
	for _, kind := range storeKinds(t) {
		if kind.name == "bolt" {
			continue // the embedded store serves one process
		}
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			m := newScriptedModel()
			m.unblock()
			e.model.Handle(m.answer)
			st := e.open()
			var bots []*bot
			for range 3 {
				bots = append(bots, e.run(st))
			}
			t.Cleanup(func() {
				for _, b := range bots {
					b.cancel()
					if err := <-b.done; err != nil {
						t.Errorf("replica stopped with %v", err)
					}
				}
			})
			if err := e.slack.WaitConnected(3, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			// A channel per conversation: finding a thread's messages in
			// the fake then costs the same whatever the number of
			// conversations. Mentions come in waves of a batch, each
			// wave's cards clicked while the resumes of the wave before
			// run: all of them at once, in one test process with one store
			// client for the three replicas, starve the lease renewals
			// (2 s leases here) on a loaded machine. Bursts are
			// cmd/loadbench's.
			const batch = 50
			channels := make([]string, conversations)
			threads := make([]string, conversations)
			start := time.Now()
			for first := 0; first < conversations; first += batch {
				wave := min(conversations, first+batch)
				for i := first; i < wave; i++ {
					channels[i] = fmt.Sprintf("CREPL%04d", i)
					e.slack.AddChannel(fakeslack.Channel{ID: channels[i], Name: fmt.Sprintf("repl%d", i), Members: []string{requester, approver, other, e.slack.BotUserID()}})
					threads[i] = e.slack.Mention(channels[i], requester, fmt.Sprintf("deploy svc%d %d", i, i))
				}
				for i := first; i < wave; i++ {
					card := e.cardIn(channels[i], threads[i], "deploy")
					_, err := e.slack.Click(approver, channels[i], card.TS, slackapp.ActionApprove, "")
					must(t, err)
					if i%10 == 0 {
						_, err := e.slack.Click(approver, channels[i], card.TS, slackapp.ActionApprove, "")
						must(t, err)
					}
				}
			}
			t.Logf("cards and clicks: %v", time.Since(start))
			for i, ts := range threads {
				e.answerIn(channels[i], ts, "Deployed: deployed")
			}
			t.Logf("answers: %v", time.Since(start))
			runs := map[string]int{}
			for _, a := range e.deployArgs() {
				var args struct{ Service string }
				must(t, json.Unmarshal([]byte(a), &args))
				runs[args.Service]++
			}
			for i := range conversations {
				if n := runs[fmt.Sprintf("svc%d", i)]; n != 1 {
					t.Errorf("svc%d was deployed %d times, want once", i, n)
				}
			}
			if len(runs) != conversations {
				t.Errorf("%d services deployed, want %d", len(runs), conversations)
			}
		})
	}
}

// A click on a card whose call the store no longer has (here: the bot
// restarted on an empty store) is answered at once, while a turn of the
// same conversation is running: that turn is not the one saving the card's
// pause, so the click does not wait for it.
func TestClickOnAForgottenCardDoesNotWaitForTheRunningTurn(t *testing.T) {
	kind := storeKinds(t)[0]
	e := newEnv(t, kind)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 2")
	card := e.card(ts, "deploy")
	e.stop()
	e.open = kind.open(t) // the store is lost
	e.start()

	m := newScriptedModel()
	t.Cleanup(m.unblock)
	e.model.Handle(m.answer)
	e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> hold")
	<-m.held
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.ephemeral(approver, "I don't know this request any more") // while the model is held
	m.unblock()
	e.answer(ts, "Held answer.")
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times", n)
	}
}

// A message answered by an earlier turn of its conversation (which answers
// every message recorded before it began) while its own queued turn still
// waits for a slot is not promised an answer after the restart when the
// shutdown cuts that wait: there is nothing left to answer.
func TestShutdownPromisesNoAnswerAlreadyGiven(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.cfg.QueuedNoticeAfter = time.Hour
	e.cfg.ShutdownGrace = 300 * time.Millisecond
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	held := newHeldModel(e, "hold a", "hold c")
	e.start()
	tsA := e.slack.Mention(channel, requester, "hold a")
	held.arrived(t, "hold a")
	tsB := e.slack.Mention(channel, requester, "hello")
	waitUntil(t, "B waits", func() bool { return counter(t, reg, "toolgate_errors_total", "turns_queued") == 1 })
	e.slack.Mention(channel, requester, "hold c")
	waitUntil(t, "C waits", func() bool { return counter(t, reg, "toolgate_errors_total", "turns_queued") == 2 })
	again := e.slack.ThreadReply(channel, tsB, requester, "<@"+e.slack.BotUserID()+"> and again")
	for _, env := range e.slack.EnvelopesByTS(again) {
		if _, err := e.slack.WaitAck(env.ID, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	held.release("hold a")
	e.answer(tsA, "held: hold a")
	held.arrived(t, "hold c")
	e.answer(tsB, "ok") // B's first turn answers both of B's messages
	waitUntil(t, "B's second turn waits for the slot", func() bool { return counter(t, reg, "toolgate_errors_total", "turns_queued") == 3 })
	e.stop()
	if thread := dumpThread(e.slack.Thread(channel, tsB)); strings.Contains(thread, "as soon as I'm back") {
		t.Errorf("the thread is promised an answer it already has:\n%s", thread)
	}
}
