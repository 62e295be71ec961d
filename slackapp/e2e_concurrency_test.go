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

	"github.com/toolgate/toolgate/approvals"
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
	waitUntil(t, "B's second turn waits for the slot", func() bool { return counter(t, reg, "toolgate_turns_queued_total", "") == 3 })
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
	waitUntil(t, "B's turn waits for the slot", func() bool { return counter(t, reg, "toolgate_turns_queued_total", "") == 1 })
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
			matches := value == ""
			for _, l := range m.GetLabel() {
				matches = matches || l.GetValue() == value
			}
			if matches {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// plainCounter reads the counter name of reg, which has no labels.
func plainCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	must(t, err)
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
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

// deployedOnceEach checks that services svc0 to svc<n-1> were deployed
// once each, and no other.
func (e *env) deployedOnceEach(n int) {
	e.t.Helper()
	runs := map[string]int{}
	for _, a := range e.deployArgs() {
		var args struct{ Service string }
		must(e.t, json.Unmarshal([]byte(a), &args))
		runs[args.Service]++
	}
	for i := range n {
		if k := runs[fmt.Sprintf("svc%d", i)]; k != 1 {
			e.t.Errorf("svc%d was deployed %d times, want once", i, k)
		}
	}
	if len(runs) != n {
		e.t.Errorf("%d services deployed, want %d", len(runs), n)
	}
}

// replicas runs n replicas on one store, with a model that answers at
// once, until the test ends, and returns once all are connected.
func (e *env) replicas(n int) {
	e.t.Helper()
	m := newScriptedModel()
	m.unblock()
	e.model.Handle(m.answer)
	e.startReplicas(n)
}

// startReplicas runs n replicas on one store until the test ends, and
// returns them once all are connected.
func (e *env) startReplicas(n int) []*bot {
	e.t.Helper()
	st := e.open()
	e.shared = st
	var bots []*bot
	for range n {
		bots = append(bots, e.run(st))
	}
	e.t.Cleanup(func() {
		for _, b := range bots {
			b.cancel()
			if err := <-b.done; err != nil {
				e.t.Errorf("replica stopped with %v", err)
			}
		}
	})
	if err := e.slack.WaitConnected(n, 10*time.Second); err != nil {
		e.t.Fatal(err)
	}
	return bots
}

// Three replicas on one Redis, envelopes spread over their connections, a
// tenth of the clicks sent twice: every approved call runs exactly once and
// every thread is answered.
func TestReplicasRunEachApprovedCallOnce(t *testing.T) {
	const conversations = 300
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.replicas(3)
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
					clickers := []string{approver}
					if i%10 == 0 {
						// Twice on the same version of the card, before
						// the first click's decision updates it.
						clickers = append(clickers, approver)
					}
					_, err := e.slack.ClickMany(clickers, channels[i], card.TS, slackapp.ActionApprove)
					must(t, err)
				}
			}
			t.Logf("cards and clicks: %v", time.Since(start))
			for i, ts := range threads {
				e.answerIn(channels[i], ts, "Deployed: deployed")
			}
			t.Logf("answers: %v", time.Since(start))
			e.deployedOnceEach(conversations)
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
	waitUntil(t, "B waits", func() bool { return counter(t, reg, "toolgate_turns_queued_total", "") == 1 })
	e.slack.Mention(channel, requester, "hold c")
	waitUntil(t, "C waits", func() bool { return counter(t, reg, "toolgate_turns_queued_total", "") == 2 })
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
	waitUntil(t, "B's second turn waits for the slot", func() bool { return counter(t, reg, "toolgate_turns_queued_total", "") == 3 })
	e.stop()
	if thread := dumpThread(e.slack.Thread(channel, tsB)); strings.Contains(thread, "as soon as I'm back") {
		t.Errorf("the thread is promised an answer it already has:\n%s", thread)
	}
}

// resumeHeldModel answers a mention "deploy SERVICE VERSION" with a deploy
// call, and holds the answer after a tool result until release: asked is
// closed once the resume asks the model.
func resumeHeldModel(e *env) (asked <-chan struct{}, release func()) {
	resumed, held := make(chan struct{}), make(chan struct{})
	var askedOnce, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(held) }) }
	e.t.Cleanup(release)
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		last := req.Messages[len(req.Messages)-1]
		if last.Role == openai.ChatMessageRoleTool {
			askedOnce.Do(func() { close(resumed) })
			<-held
			return fakeopenai.Text("Deployed.")
		}
		if w := strings.Fields(last.Content); len(w) >= 3 && w[len(w)-3] == "deploy" {
			return fakeopenai.ToolCalls(tc("c-"+w[len(w)-2], "deploy", `{"service":"`+w[len(w)-2]+`","version":"`+w[len(w)-1]+`"}`))
		}
		return fakeopenai.Text("ok")
	})
	return resumed, release
}

// A resume that a click runs at once serves its conversation's queue: a
// reply sent in the thread meanwhile waits behind it, holding no turn
// slot (another conversation gets the only other one) and never told the
// thread is busy.
func TestReplyDuringAClicksResumeWaitsOnItsQueue(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 2
	e.leaseWait = 300 * time.Millisecond
	resumed, release := resumeHeldModel(e)
	e.start()
	tsA := e.slack.Mention(channel, requester, "deploy a 1")
	card := e.card(tsA, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	<-resumed
	reply := e.slack.ThreadReply(channel, tsA, requester, "<@"+e.slack.BotUserID()+"> how is it going?")
	for _, env := range e.slack.EnvelopesByTS(reply) {
		_, err := e.slack.WaitAck(env.ID, 15*time.Second)
		must(t, err)
	}
	tsB := e.slack.Mention(channel, other, "hello b")
	e.answer(tsB, "ok")
	release()
	e.answer(tsA, "Deployed.")
	e.waitThread(tsA, "the reply answered", func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text+blocksText(m), "ok")
	})
	for _, m := range e.slack.Messages(channel) {
		if strings.Contains(m.Text, "busy with an earlier message") || strings.Contains(m.Text, "yours is queued") {
			t.Errorf("the bot said %q; the reply waits behind this process's own resume", m.Text)
		}
	}
}

// twoApproversPolicy asks either of two named approvers about deploys.
const twoApproversPolicy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001]
`

// heldRememberStore holds the write of a standing rule until release, and
// closes audited once its audit entry is written.
type heldRememberStore struct {
	fullStore
	arrived, release, audited chan struct{}
}

func (s *heldRememberStore) PutRecord(ctx context.Context, r store.Record, expect int64) (store.Record, error) {
	if r.Kind == approvals.KindStandingRule {
		close(s.arrived)
		<-s.release
	}
	return s.fullStore.PutRecord(ctx, r, expect)
}

func (s *heldRememberStore) Audit(ctx context.Context, e store.AuditEntry) error {
	err := s.fullStore.Audit(ctx, e)
	if e.Action == approvals.AuditStandingAdd {
		close(s.audited)
	}
	return err
}

// A card shows its call's news in order: the render of a decision that
// comes after the call ran (another click completed the step, and the
// resume ran it, while the decision wrote its standing rule) leaves the
// card saying it ran. The clicks are on the copies in APPROVALS_CHANNEL,
// outside the conversation's thread.
func TestLateDecisionRenderLeavesTheCardSayingItRan(t *testing.T) {
	held := &heldRememberStore{arrived: make(chan struct{}), release: make(chan struct{}), audited: make(chan struct{})}
	e := newEnv(t, storeKinds(t)[0])
	e.policy = twoApproversPolicy
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: []string{approver, other, e.slack.BotUserID()}})
	e.cfg.ApprovalsChannel = approvalsChannel
	open := e.open
	e.open = func() fullStore { held.fullStore = open(); return held }
	e.start()
	released := sync.OnceFunc(func() { close(held.release) })
	defer released()
	e.model.Reply(fakeopenai.ToolCalls(
		tc("cx", "deploy", `{"service":"xsvc","version":"1"}`),
		tc("cy", "deploy", `{"service":"ysvc","version":"1"}`)),
		fakeopenai.Text("done both"))
	ts := e.slack.Mention(private, requester, "deploy two")
	var cardX, copyX, copyY fakeslack.Message
	waitUntil(t, "both cards and their copies", func() bool {
		for _, c := range e.cards(private, ts) {
			if strings.Contains(blocksText(c), "xsvc") {
				cardX = c
			}
		}
		var copies []fakeslack.Message
		for _, m := range e.slack.Messages(approvalsChannel) {
			if isCard(m) {
				copies = append(copies, m)
			}
		}
		if len(copies) == 2 {
			copyX, copyY = copies[0], copies[1]
		}
		return cardX.TS != "" && copyY.TS != ""
	})
	if !strings.Contains(blocksText(cardX), "xsvc") || strings.Contains(blocksText(copyX), "ysvc") {
		// Sealed copies do not say which is which; they are posted in order.
		t.Logf("copies taken in the order the calls were made")
	}
	_, err := e.slack.Click(approver, approvalsChannel, copyX.TS, slackapp.ActionRemember, "")
	must(t, err)
	<-held.arrived
	_, err = e.slack.Click(other, approvalsChannel, copyY.TS, slackapp.ActionDeny, "")
	must(t, err)
	e.answerIn(private, ts, "done both")
	ran := func() bool {
		m, _ := e.slack.Message(private, cardX.TS)
		return strings.Contains(blocksText(m), "*Outcome:* ran")
	}
	waitUntil(t, "X's card says it ran", ran)
	released()
	<-held.audited
	// The decision's render is queued right after its audit entry.
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !ran() {
			m, _ := e.slack.Message(private, cardX.TS)
			t.Fatalf("X's card, which said it ran, shows its decision's older render:\n%s", blocksText(m))
		}
	}
}

// panicRememberStore panics writing a standing rule, as a bug in a store
// client would.
type panicRememberStore struct{ fullStore }

func (s *panicRememberStore) PutRecord(ctx context.Context, r store.Record, expect int64) (store.Record, error) {
	if r.Kind == approvals.KindStandingRule {
		panic("a bug while writing the standing rule")
	}
	return s.fullStore.PutRecord(ctx, r, expect)
}

// A decision that panics after it took the resume gives back the
// conversation's lease: the thread's next message is answered, not told
// the thread is busy.
func TestPanicAfterTakingAResumeLeavesNoLease(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.leaseWait = 500 * time.Millisecond
	e.policy = twoApproversPolicy
	open := e.open
	e.open = func() fullStore { return &panicRememberStore{open()} }
	e.model.Reply(fakeopenai.ToolCalls(tc("cx", "deploy", `{"service":"xsvc","version":"1"}`)), fakeopenai.Text("deployed x"), fakeopenai.Text("second answer"))
	e.start()
	ts := e.slack.Mention(channel, requester, "deploy x")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
	waitUntil(t, "the decision is recorded", func() bool {
		c, err := e.bot.st.GetCall(t.Context(), callID)
		return err == nil && c.Status == store.Decided
	})
	e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> anything?")
	m := e.waitThread(ts, "the reply answered", func(m fakeslack.Message) bool {
		return m.BotID != "" && (strings.Contains(m.Text, "second answer") || strings.Contains(m.Text, "deployed x") || strings.Contains(m.Text, "busy with an earlier message"))
	})
	if strings.Contains(m.Text, "busy") {
		t.Fatalf("the conversation is still held by a decision that panicked: %q", m.Text)
	}
}
