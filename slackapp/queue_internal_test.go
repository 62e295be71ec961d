package slackapp

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/store"
)

// queueSlack is a fake Slack with two people in one channel, and an app
// against it that runs the queues' work as Run would (the app's goroutine
// count stays positive until the test calls done, which waits for all of
// the app's goroutines).
func queueSlack(t *testing.T, cfg Config) (fs *fakeslack.Server, a *App, done func()) {
	t.Helper()
	fs = fakeslack.New(t)
	for _, u := range []string{"U1", "U2"} {
		fs.AddUser(fakeslack.User{ID: u, Name: strings.ToLower(u)})
	}
	fs.AddChannel(fakeslack.Channel{ID: "C1", Name: "general", Members: []string{"U1", "U2", fs.BotUserID()}})
	cfg.BotToken, cfg.AppToken, cfg.APIURL = fs.BotToken(), fs.AppToken(), fs.APIURL()
	a, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.active.Add(1)
	return fs, a, func() {
		a.active.Add(-1)
		a.wg.Wait()
	}
}

// queuedNotes counts the notes in a thread telling it that its turn is
// queued.
func queuedNotes(fs *fakeslack.Server, channel, thread string) int {
	n := 0
	for _, m := range fs.Thread(channel, thread) {
		if strings.Contains(m.Text, queuedText) {
			n++
		}
	}
	return n
}

// turnsQueued reads toolgate_turns_queued_total from reg.
func turnsQueued(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "toolgate_turns_queued_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// passAgent lists one conversation in each background pass (takeover
// scan, sweep, expiry), whose takeover or resume finds nothing to do (as
// when another process answers the conversation); it records and answers
// a person's message at once.
type passAgent struct {
	Agent
	key string
}

func (f *passAgent) Unanswered(context.Context, int, int) ([]string, error) {
	return []string{f.key}, nil
}

func (f *passAgent) Sweep(_ context.Context, resume func(runID, conversation string)) error {
	resume("r1", f.key)
	return nil
}

func (f *passAgent) Expire(_ context.Context, resume func(runID, conversation string)) (time.Time, error) {
	resume("r1", f.key)
	return time.Time{}, nil
}

func (f *passAgent) TakeOver(context.Context, string) (agent.Outcome, error) {
	return agent.Outcome{Status: agent.Idle}, nil
}

func (f *passAgent) Resume(context.Context, string) (agent.Outcome, error) {
	return agent.Outcome{Status: agent.Idle}, nil
}

func (f *passAgent) Accept(_ context.Context, r agent.Request, _ bool) (agent.Request, store.Acceptance, error) {
	r.Seq = 1
	return r, store.Accepted, nil
}

func (f *passAgent) Run(context.Context, agent.Request) (agent.Outcome, error) {
	return agent.Outcome{Status: agent.Answered}, nil
}

// untoldPasses are the passes that queue work nobody in its thread asked
// this process for: a takeover, and resumes the sweep or the expiry found.
var untoldPasses = map[string]func(a *App, ctx context.Context, stopping <-chan struct{}){
	"takeover": (*App).takeover,
	"sweep":    (*App).sweep,
	"expiry":   (*App).expire,
}

// untoldWait is an app whose only turn slot is busy (as with a long turn
// of a third conversation), with the work a pass queued in thread listed
// waiting for it, and another thread, other, whose message waits too and
// has been told so: by then the listed work has waited past
// QueuedNoticeAfter as well.
type untoldWait struct {
	fs            *fakeslack.Server
	a             *App
	listed, other string
	stop          func() // frees the slot and waits for everything started
}

func newUntoldWait(t *testing.T, name string, pass func(a *App, ctx context.Context, stopping <-chan struct{})) *untoldWait {
	t.Helper()
	reg := prometheus.NewRegistry()
	fs, a, done := queueSlack(t, Config{MaxTurns: 1, QueuedNoticeAfter: time.Millisecond, SweepInterval: time.Hour, TakeoverInterval: time.Hour, Metrics: NewMetrics(reg)})
	w := &untoldWait{fs: fs, a: a}
	w.listed = fs.Post("C1", "U1", "a thread whose work was left unanswered")
	w.other = fs.Post("C1", "U2", "a thread whose message waits here")
	a.ag = &passAgent{key: ConversationKey("T1", "C1", w.listed)}
	ctx := t.Context()
	if err := a.slots.Acquire(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stopping := make(chan struct{})
	a.spawn(ctx, name, func(ctx context.Context) { pass(a, ctx, stopping) })
	waitFor(t, "the "+name+" waiting for the slot", func() bool { return turnsQueued(t, reg) == 1 })
	a.onMessage(ctx, message{team: "T1", channel: "C1", user: "U2", text: "hello", ts: w.other}, "E1", false, func() {})
	waitFor(t, "the other thread told that its message is queued", func() bool { return queuedNotes(fs, "C1", w.other) == 1 })
	w.stop = func() {
		a.slots.Release(1)
		close(stopping)
		done()
	}
	return w
}

// A takeover, or a resume the sweep or the expiry found, that waits for a
// turn slot leaves its thread untold: nobody there sent this process
// anything, and another process may be answering the conversation. A
// person's message queued after it, which waits as long, is told.
func TestWorkNobodyAskedForWaitsUntold(t *testing.T) {
	for name, pass := range untoldPasses {
		t.Run(name, func(t *testing.T) {
			w := newUntoldWait(t, name, pass)
			w.stop()
			if n := queuedNotes(w.fs, "C1", w.listed); n != 0 {
				t.Errorf("the thread of work the %s pass queued, which waited for a slot, was told %d times that it is queued, want never:\n%s", name, n, dumpMessages(w.fs.Thread("C1", w.listed)))
			}
		})
	}
}

// A person's message in the thread of a takeover, or of a resume the sweep
// or the expiry found, that waits for a turn slot queues behind that work,
// and waits as long: the thread is told that it is queued while the slot
// is still busy, not once the work ahead has had its turn. Until the
// person writes, the thread is told nothing.
func TestAPersonBehindUntoldWorkIsTold(t *testing.T) {
	for name, pass := range untoldPasses {
		t.Run(name, func(t *testing.T) {
			w := newUntoldWait(t, name, pass)
			fs, listed, ctx := w.fs, w.listed, t.Context()
			if n := queuedNotes(fs, "C1", listed); n != 0 {
				t.Fatalf("the thread of work the %s pass queued was told %d times that it is queued before anyone wrote there, want never:\n%s", name, n, dumpMessages(fs.Thread("C1", listed)))
			}
			reply := fs.ThreadReply("C1", listed, "U1", "is anyone there?")
			w.a.onMessage(ctx, message{team: "T1", channel: "C1", user: "U1", text: "is anyone there?", ts: reply, threadTS: listed}, "E2", true, func() {})
			// The slot is still held: the person's message waits behind
			// the listed work, and its thread hears so now.
			waitFor(t, "the thread of the message queued behind the "+name+" told that it is queued", func() bool { return queuedNotes(fs, "C1", listed) == 1 })
			w.stop()
			if n := queuedNotes(fs, "C1", listed); n != 1 {
				t.Errorf("the thread of the message queued behind the %s was told %d times that it is queued, want once:\n%s", name, n, dumpMessages(fs.Thread("C1", listed)))
			}
		})
	}
}

// clickAgent holds a click's decision, and then the turn of a message
// queued on the conversation meanwhile, each until the test releases it.
type clickAgent struct {
	Agent
	deciding, decide chan struct{}
	res              agent.DecideResult
	taken            *agent.Taken
	err              error
	running, answer  chan struct{}
}

func (f *clickAgent) DecideTaking(ctx context.Context, _ approvals.Decision) (agent.DecideResult, *agent.Taken, error) {
	close(f.deciding)
	select {
	case <-f.decide:
	case <-ctx.Done():
	}
	return f.res, f.taken, f.err
}

func (f *clickAgent) ResumeTaken(context.Context, *agent.Taken) (agent.Outcome, error) {
	return agent.Outcome{Status: agent.Answered}, nil
}

func (f *clickAgent) ReleaseTaken(context.Context, *agent.Taken) {}

func (f *clickAgent) Accept(_ context.Context, r agent.Request, _ bool) (agent.Request, store.Acceptance, error) {
	r.Seq = 2
	return r, store.Accepted, nil
}

func (f *clickAgent) Run(ctx context.Context, _ agent.Request) (agent.Outcome, error) {
	close(f.running)
	select {
	case <-f.answer:
	case <-ctx.Done():
	}
	return agent.Outcome{Status: agent.Answered}, nil
}

// A click in a conversation's thread is decided with the conversation's
// queue reserved; a reply that arrives meanwhile queues behind the
// decision. The clicker is told how the decision went (refused; or
// decided, its resume run at once, with a note for them) while the
// reply's turn still runs: they never wait for a whole turn.
func TestClickIsAnsweredBeforeTheTurnQueuedBehindIt(t *testing.T) {
	const run = "0123456789abcdef"
	refused := &approvals.RefusedError{Err: approvals.ErrAlreadyDecided, DecidedBy: "U2", Kind: approvals.Approve, DecidedAt: time.Now()}
	refusal, _ := refusalText(agent.Call{}, "U1", refused)
	for _, tt := range []struct {
		name   string
		action string
		taken  bool
		err    error
		want   string
	}{
		{"refused", ActionApprove, false, refused, refusal},
		{"decided", ActionRemember, true, nil, UnrememberedText()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fs, a, done := queueSlack(t, Config{})
			defer done()
			root := fs.Post("C1", "U2", "deploy api 17")
			key := ConversationKey("T1", "C1", root)
			f := &clickAgent{deciding: make(chan struct{}), decide: make(chan struct{}), running: make(chan struct{}), answer: make(chan struct{}), err: tt.err}
			if tt.taken {
				f.res = agent.DecideResult{Call: agent.Call{ID: run + ".0", RunID: run, Conversation: key, Status: agent.CallDecided, CreatedAt: time.Now()}, Complete: true, Unremembered: true}
				f.taken = &agent.Taken{}
			}
			defer close(f.answer)
			a.ag = f
			ctx := t.Context()
			guard := time.After(10 * time.Second)

			c := click{user: "U1", channel: "C1", thread: root, conversation: key, actionID: tt.action,
				value: run + ".0~" + strings.Repeat("a", 64), redelivered: func() bool { return false }}
			a.spawn(ctx, "click", func(ctx context.Context) { a.onClick(ctx, c) })
			select {
			case <-f.deciding:
			case <-guard:
				t.Fatal("the click was not decided")
			}
			reply := fs.ThreadReply("C1", root, "U2", "are you there?")
			a.onMessage(ctx, message{team: "T1", channel: "C1", user: "U2", text: "are you there?", ts: reply, threadTS: root}, "E2", true, func() {})
			waitFor(t, "the reply queued behind the decision", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				q := a.queues[key]
				return q != nil && len(q.jobs) == 1
			})
			close(f.decide)
			select {
			case <-f.running:
			case <-guard:
				t.Fatal("the reply's turn did not start")
			}
			// The reply's turn is held: the clicker is told all the same.
			waitFor(t, "the clicker told while the reply's turn runs", func() bool { return len(fs.Ephemerals("U1")) > 0 })
			if got := fs.Ephemerals("U1")[0]; got.Text != tt.want || got.ThreadTS != root {
				t.Errorf("the clicker was told %q in thread %q, want %q in %q", got.Text, got.ThreadTS, tt.want, root)
			}
		})
	}
}

// sweepAgent lists one decided run in each sweep pass the test lets run,
// until the run is resumed.
type sweepAgent struct {
	Agent
	key     string
	passes  chan chan struct{}
	stop    chan struct{}
	resumed atomic.Int64
}

func (f *sweepAgent) Sweep(_ context.Context, resume func(runID, conversation string)) error {
	select {
	case done := <-f.passes:
		defer close(done)
		if f.resumed.Load() == 0 {
			resume("r1", f.key)
		}
	case <-f.stop:
	}
	return nil
}

func (f *sweepAgent) Resume(context.Context, string) (agent.Outcome, error) {
	f.resumed.Add(1)
	return agent.Outcome{Status: agent.Idle}, nil
}

// A decided run whose conversation is busy here (a long turn) is left to
// a later sweep, not queued behind that work by every sweep; once the
// conversation is free, a sweep resumes it, once.
func TestSweepLeavesABusyConversationToALaterSweep(t *testing.T) {
	_, a, done := queueSlack(t, Config{SweepInterval: time.Millisecond})
	f := &sweepAgent{key: "T1/C1/1.1", passes: make(chan chan struct{}), stop: make(chan struct{})}
	a.ag = f
	ctx := t.Context()
	guard := time.After(10 * time.Second)
	pass := func() {
		t.Helper()
		finished := make(chan struct{})
		select {
		case f.passes <- finished:
		case <-guard:
			t.Fatal("no sweep pass")
		}
		<-finished
	}

	running, release := make(chan struct{}), make(chan struct{})
	a.enqueue(ctx, f.key, func(context.Context) {
		close(running)
		<-release
	})
	<-running
	stopping := make(chan struct{})
	a.spawn(ctx, "sweep", func(ctx context.Context) { a.sweep(ctx, stopping) })
	pass()
	pass()
	a.mu.Lock()
	queued := len(a.queues[f.key].jobs)
	a.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d resumes queued behind the conversation's turn by two sweeps, want none", queued)
	}

	close(release)
	waitFor(t, "the conversation free", func() bool { return !a.busy(f.key) })
	pass()
	waitFor(t, "the run resumed", func() bool { return f.resumed.Load() > 0 })
	pass()
	close(stopping)
	close(f.stop)
	done()
	if n := f.resumed.Load(); n != 1 {
		t.Errorf("the run was resumed %d times, want once", n)
	}
}
