package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
	"github.com/toolgate/toolgate/store/storetest"
)

// dyingStore is the store as a process sees it until it is killed: after
// kill, nothing it writes reaches the store (its lease is neither renewed
// nor released, its results are not saved), as with kill -9.
type dyingStore struct {
	agent.Store
	dead atomic.Bool
	// saved is closed once a result is saved.
	saved     chan struct{}
	savedOnce sync.Once
}

var errKilled = errors.New("process killed")

func (d *dyingStore) kill() { d.dead.Store(true) }

func (d *dyingStore) check() error {
	if d.dead.Load() {
		return errKilled
	}
	return nil
}

func (d *dyingStore) BeginTurn(ctx context.Context, conv, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	if err := d.check(); err != nil {
		return store.Begun{}, err
	}
	return d.Store.BeginTurn(ctx, conv, owner, ttl, kinds...)
}

func (d *dyingStore) CommitTurn(ctx context.Context, c store.Commit) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Store.CommitTurn(ctx, c)
}

func (d *dyingStore) Audit(ctx context.Context, e store.AuditEntry) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Store.Audit(ctx, e)
}

func (d *dyingStore) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	if err := d.check(); err != nil {
		return false, err
	}
	return d.Store.BeginExecution(ctx, id, attempt)
}

func (d *dyingStore) SaveResult(ctx context.Context, id string, r []byte, e store.AuditEntry) error {
	if err := d.check(); err != nil {
		return err
	}
	err := d.Store.SaveResult(ctx, id, r, e)
	if err == nil {
		d.savedOnce.Do(func() { close(d.saved) })
	}
	return err
}

func (d *dyingStore) RenewClaim(ctx context.Context, id, owner string, lease time.Duration) (bool, error) {
	if err := d.check(); err != nil {
		return false, err
	}
	return d.Store.RenewClaim(ctx, id, owner, lease)
}

func (d *dyingStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := d.check(); err != nil {
		return false, err
	}
	return d.Store.AcquireLease(ctx, key, owner, ttl)
}

func (d *dyingStore) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := d.check(); err != nil {
		return false, err
	}
	return d.Store.RenewLease(ctx, key, owner, ttl)
}

func (d *dyingStore) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if err := d.check(); err != nil {
		return store.ResumeStart{}, err
	}
	return d.Store.BeginResume(ctx, runID, r)
}

func (d *dyingStore) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.Store.ReleaseLease(ctx, key, owner)
}

// doomed builds an agent on w's store that kill cuts off from it, with a
// reporter of its own (what a killed process posts is lost with it).
func (w *world) doomed() (*agent.Agent, *dyingStore) {
	w.t.Helper()
	d := &dyingStore{Store: w.store, saved: make(chan struct{})}
	return w.agentWith(d, &recorder{}), d
}

// takeOver lists the conversation as unanswered once the takeover delay
// has passed, and takes it over as soon as the dead process's lease lapses.
func takeOver(t *testing.T, w *world, a *agent.Agent, conv string) agent.Outcome {
	t.Helper()
	ctx := t.Context()
	w.advance(time.Minute) // past Config.TakeoverAfter on the agent's clock
	keys, err := a.Unanswered(ctx, 0, 0)
	must(t, err)
	if !slices.Contains(keys, conv) {
		t.Fatalf("Unanswered = %q, want it to list %s", keys, conv)
	}
	// Idle: the dead process's lease has not lapsed yet.
	return untilNotIdle(t, "TakeOver", func() (agent.Outcome, error) { return a.TakeOver(ctx, conv) })
}

// untilNotIdle calls f until it returns another status than Idle (a lease
// or claim of a process gone lapsing meanwhile), for at most 10 s.
func untilNotIdle(t *testing.T, what string, f func() (agent.Outcome, error)) agent.Outcome {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := f()
		must(t, err)
		if out.Status != agent.Idle {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed idle for 10s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const takeoverPolicy = `
policy:
  default: ask
  rules:
    - tool: "*"
      verdict: allow
`

func TestTakeOverAfterDeathInModelCall(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = takeoverPolicy
			w.cfg.LeaseTTL = 300 * time.Millisecond
			entered := make(chan struct{})
			release := make(chan struct{})
			var n atomic.Int64
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				if n.Add(1) == 1 {
					close(entered)
					<-release
					return fakeopenai.Error(500, "the process asking is gone")
				}
				return fakeopenai.Text("taken over and answered")
			})
			a, d := w.doomed()
			done := make(chan error, 1)
			req := request("what changed in prod?")
			go func() {
				_, err := a.Run(context.Background(), req)
				done <- err
			}()
			<-entered
			d.kill()
			close(release)
			if err := <-done; err == nil {
				t.Fatal("the killed process's turn succeeded")
			}

			b := w.restart()
			out := takeOver(t, w, b, req.Conversation)
			if out.Status != agent.Answered || out.Answer != "taken over and answered" {
				t.Fatalf("TakeOver = %+v, want the answer", out)
			}
			if got := w.rec.Answers(); !slices.Equal(got, []string{"taken over and answered"}) {
				t.Errorf("answers in the thread = %q, want the survivor's one", got)
			}
			users := lastUserMessages(w.model)
			if !slices.Equal(users, []string{"what changed in prod?"}) {
				t.Errorf("the survivor sent the user messages %q, want the message once", users)
			}
			keys, err := b.Unanswered(t.Context(), 0, 0)
			must(t, err)
			if len(keys) != 0 {
				t.Errorf("Unanswered after the takeover = %q, want nothing", keys)
			}
			// Nothing left to take over: a second takeover does nothing.
			if out, err := b.TakeOver(t.Context(), req.Conversation); err != nil || out.Status != agent.Idle {
				t.Errorf("second TakeOver = %+v, %v; want Idle", out, err)
			}
			// The conversation goes on from the answer.
			w.model.Reply(fakeopenai.Text("and here is more"))
			next := request("more?")
			if out, err := b.Run(t.Context(), next); err != nil || out.Answer != "and here is more" {
				t.Fatalf("next Run = %+v, %v", out, err)
			}
		})
	}
}

func TestTakeOverAfterDeathInToolCall(t *testing.T) {
	for _, b := range backends(t) {
		for _, idempotent := range []bool{false, true} {
			name := b.name + "/not-idempotent"
			if idempotent {
				name = b.name + "/idempotent"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = takeoverPolicy
				w.cfg.LeaseTTL = 300 * time.Millisecond
				var runs atomic.Int64
				entered := make(chan struct{})
				must(t, w.reg.Register(agent.Tool{
					Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
					Annotations: approvals.Hints{Idempotent: idempotent},
					Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
						if runs.Add(1) == 1 {
							close(entered)
							<-ctx.Done() // until the process is gone
							return agent.Result{}, ctx.Err()
						}
						return agent.Result{Content: "migrated"}, nil
					},
				}))
				w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
				if idempotent {
					// The survivor runs the turn again from the message.
					w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
				}
				w.model.Reply(fakeopenai.Text("here is what happened"))
				req := request("migrate the schema")
				crashWhileRunning(w, req, entered)

				b := w.restart()
				out := takeOver(t, w, b, req.Conversation)
				if out.Status != agent.Answered || out.Answer != "here is what happened" {
					t.Fatalf("TakeOver = %+v, want the answer", out)
				}
				entries := []string{"migrate unknown"} // the crashed process wrote none
				if idempotent {
					entries = []string{"migrate ok"} // the second run's
				}
				if got := executions(t, w.store); !slices.Equal(got, entries) {
					t.Errorf("execute entries = %q, want %q", got, entries)
				}
				log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
				must(t, err)
				for _, e := range log {
					if e.Action == "execute" && (e.CallID != "c1" || e.Fingerprint == "" || e.Actor != "UREQUESTER" || e.Thread != req.Conversation) {
						t.Errorf("execute entry %+v, want it to name c1, its fingerprint, the requester and the thread", e)
					}
				}
				got := toolResults(t, w.model)
				if idempotent {
					if n := runs.Load(); n != 2 {
						t.Errorf("an idempotent tool ran %d times, want 2 (again after the crash)", n)
					}
					if !slices.Equal(got, []string{"c1: migrated"}) {
						t.Errorf("tool results = %q, want the second run's", got)
					}
					return
				}
				if n := runs.Load(); n != 1 {
					t.Errorf("a tool that may not repeat ran %d times, want 1", n)
				}
				want := "c1: outcome unknown: the bot stopped while migrate was running"
				if len(got) != 1 || !strings.HasPrefix(got[0], want) {
					t.Errorf("tool results = %q, want one starting %q", got, want)
				}
				if w.model.Pending() != 0 {
					t.Errorf("%d model answers unused", w.model.Pending())
				}
			})
		}
	}
}

// An allowed call whose tool was neither read-only nor idempotent when it
// started, cut by a crash, is not run again by the survivor though its
// tool says idempotentHint now (its MCP server was redeployed meanwhile):
// whether it may run twice is what it was when it ran.
func TestCallThatStartedNotIdempotentIsNotRunAgain(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = takeoverPolicy
			w.cfg.LeaseTTL = 300 * time.Millisecond
			var runs atomic.Int64
			entered := make(chan struct{})
			migrate := agent.Tool{
				Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					if runs.Add(1) == 1 {
						close(entered)
						<-ctx.Done() // until the process is gone
						return agent.Result{}, ctx.Err()
					}
					return agent.Result{Content: "migrated"}, nil
				},
			}
			must(t, w.reg.Register(migrate))
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
			w.model.Reply(fakeopenai.Text("here is what happened"))
			req := request("migrate the schema")
			crashWhileRunning(w, req, entered)
			migrate.Annotations = approvals.Hints{Idempotent: true}
			must(t, w.reg.Replace(func(n string) bool { return n == "migrate" }, []agent.Tool{migrate}))

			out := takeOver(t, w, w.restart(), req.Conversation)
			if out.Status != agent.Answered {
				t.Fatalf("TakeOver = %+v, want the answer", out)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("migrate ran %d times, want 1: it started as a tool that may not run twice", n)
			}
			want := "c1: outcome unknown: the bot stopped while migrate was running"
			if got := toolResults(t, w.model); len(got) != 1 || !strings.HasPrefix(got[0], want) {
				t.Errorf("tool results = %q, want one starting %q", got, want)
			}
		})
	}
}

// A resume whose process died in the model call, after the approved call
// ran: the conversation is listed for TakeOver, which resumes it from the
// saved result without running the call again.
func TestTakeOverAfterDeathInResume(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			entered, release := heldAt(w, 1, func(int64) fakeopenai.Response { return fakeopenai.Text("resumed by the survivor") })
			a, d := w.doomed()
			done := resumeApproved(t, a, p)
			<-entered
			<-d.saved // saved while the model is asked
			d.kill()
			close(release)
			<-done

			b := w.restart()
			out := takeOver(t, w, b, p.Conversation)
			if out.Status != agent.Answered || out.Answer != "resumed by the survivor" {
				t.Fatalf("TakeOver = %+v, want the resumed answer", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: deployed"}) {
				t.Errorf("tool results = %q, want the saved result", got)
			}
			if got := executions(t, w.store); !slices.Equal(got, []string{"deploy ok"}) {
				t.Errorf("execute entries = %q, want the one written with the saved result", got)
			}
			keys, err := b.Unanswered(t.Context(), 0, 0)
			must(t, err)
			if len(keys) != 0 {
				t.Errorf("Unanswered after the takeover = %q, want nothing", keys)
			}
			if out, err := b.Resume(t.Context(), p.RunID); err != nil || out.Status != agent.Idle {
				t.Errorf("Resume after the takeover = %+v, %v; want Idle", out, err)
			}
		})
	}
}

// An approved call that started before a crash and saved no result runs
// again on the next resume only if its tool is idempotent.
func TestReclaimedResumeRunsIdempotentCallAgain(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = `
policy:
  default: ask
`
	var runs atomic.Int64
	must(t, w.reg.Register(agent.Tool{
		Name: "warm_cache", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{Idempotent: true},
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			runs.Add(1)
			return agent.Result{Content: "warm"}, nil
		},
	}))
	ctx := t.Context()
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "warm_cache", `{}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	// A first resumer started the call and died before saving its result.
	ok, err := w.store.BeginExecution(ctx, p.ID, "")
	must(t, err)
	if !ok {
		t.Fatal("BeginExecution refused")
	}
	w.model.Reply(fakeopenai.Text("done"))
	_, err = w.restart().Resume(ctx, p.RunID)
	must(t, err)
	if n := runs.Load(); n != 1 {
		t.Errorf("warm_cache ran %d times on the second resume, want 1", n)
	}
	if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: warm"}) {
		t.Errorf("tool results = %q, want the new run's", got)
	}
}

// A message accepted after a crash stays to be answered through a second
// crash: the survivor that takes over the step answers it once the step's
// calls are done, and the mark it records before its next call keeps it,
// so that whoever takes over after the survivor dies answers it too.
func TestTakeOverTwiceKeepsMessageAcceptedBetween(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = takeoverPolicy
			w.cfg.LeaseTTL = 300 * time.Millisecond
			var runs atomic.Int64
			entered := make(chan int, 3)
			must(t, w.reg.Register(agent.Tool{
				Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					entered <- int(runs.Add(1))
					<-ctx.Done() // until the process is gone
					return agent.Result{}, ctx.Err()
				},
			}))
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{"db":"a"}`), call("c2", "migrate", `{"db":"b"}`)))
			req := request("migrate both databases")

			// The first process dies while c1 runs.
			a, d := w.doomed()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				_, err := a.Run(ctx, req)
				done <- err
			}()
			if n := <-entered; n != 1 {
				t.Fatalf("run %d of the tool first, want 1", n)
			}
			d.kill()
			cancel()
			<-done

			// A message is recorded (and acked) meanwhile.
			w.store = w.reopen()
			if _, acc, err := w.agent().Accept(t.Context(), request("and tell me when it is done"), false); err != nil || acc != store.Accepted {
				t.Fatalf("Accept = %q, %v; want accepted", acc, err)
			}

			// The survivor takes the step over and dies while c2 runs.
			s, sd := w.doomed()
			w.advance(time.Minute)
			sctx, scancel := context.WithCancel(context.Background())
			sdone := make(chan struct{})
			var serr error
			var sout agent.Outcome
			go func() {
				defer close(sdone)
				for sctx.Err() == nil {
					sout, serr = s.TakeOver(sctx, req.Conversation)
					if serr != nil || sout.Status != agent.Idle {
						return
					}
					time.Sleep(50 * time.Millisecond) // the first lease has not lapsed yet
				}
			}()
			select {
			case n := <-entered:
				if n != 2 {
					t.Fatalf("run %d of the tool second, want 2", n)
				}
			case <-sdone:
				t.Fatalf("the survivor's takeover ended (%s, %v) before it ran the tool", sout.Status, serr)
			}
			sd.kill()
			scancel()
			<-sdone

			// The third process answers both messages.
			w.model.Reply(fakeopenai.Text("both interrupted; I will tell you"))
			c := w.restart()
			out := takeOver(t, w, c, req.Conversation)
			if out.Status != agent.Answered {
				t.Fatalf("TakeOver = %+v, want the answer", out)
			}
			if n := runs.Load(); n != 2 {
				t.Errorf("the tool ran %d times, want 2 (each call once)", n)
			}
			users := lastUserMessages(w.model)
			if want := []string{"migrate both databases", "and tell me when it is done"}; !slices.Equal(users, want) {
				t.Errorf("the last model request holds the user messages %q, want %q", users, want)
			}
			got := toolResults(t, w.model)
			if len(got) != 2 || !strings.HasPrefix(got[0], "c1: outcome unknown") || !strings.HasPrefix(got[1], "c2: outcome unknown") {
				t.Errorf("tool results = %q, want both calls' outcome unknown", got)
			}
			if keys, err := c.Unanswered(t.Context(), 0, 0); err != nil || len(keys) != 0 {
				t.Errorf("Unanswered after the takeover = %q, %v; want nothing", keys, err)
			}
		})
	}
}

// A process stalled past its lease (a VM paused, starved of CPU) whose
// conversation another process took over meanwhile writes nothing when it
// wakes, before its renewer notices: its next write is refused by the
// store, so it neither runs the tool it was about to start nor overwrites
// the conversation, and its turn ends with ErrLeaseLost.
func TestStalledProcessWritesNothingAfterTakeover(t *testing.T) {
	for _, b := range backends(t) {
		for _, finished := range []bool{false, true} {
			name := b.name
			if finished {
				name += "/survivor finished"
			}
			t.Run(name, func(t *testing.T) { stalledAfterTakeover(t, b, finished) })
		}
	}
}

// stalledAfterTakeover is TestStalledProcessWritesNothingAfterTakeover
// with the survivor still holding the conversation when the stalled
// process wakes up, or (finished) done with it and the lease free.
func stalledAfterTakeover(t *testing.T, b backend, finished bool) {
	w := newWorld(t, b)
	w.policy = takeoverPolicy
	w.cfg.LeaseTTL = time.Hour // its renewer would notice only much later
	w.cfg.Owner = "stalled"
	var runs atomic.Int64
	must(t, w.reg.Register(agent.Tool{
		Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			runs.Add(1)
			return agent.Result{Content: "migrated"}, nil
		},
	}))
	entered := make(chan struct{})
	release := make(chan struct{})
	var asked atomic.Int64
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		if asked.Add(1) > 1 {
			return fakeopenai.Text("migrated")
		}
		close(entered)
		<-release
		return fakeopenai.ToolCalls(call("c1", "migrate", `{}`))
	})
	holds := newHoldLog(w.store)
	a := w.agentWith(holds, w.rec)
	req := request("migrate the schema")
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(context.Background(), req)
		done <- err
	}()
	<-entered
	// Its lease runs out, and another process takes the
	// conversation over.
	ctx := t.Context()
	lease := store.TurnLease(req.Conversation)
	holds.lapse(t, req.Conversation, "")
	if ok, err := w.store.AcquireLease(ctx, lease, "survivor", time.Hour); err != nil || !ok {
		t.Fatalf("AcquireLease by the survivor = %v, %v", ok, err)
	}
	if finished {
		// The survivor answered and let the conversation go.
		must(t, w.store.ReleaseLease(ctx, lease, "survivor"))
	}
	before, beforeErr := w.store.LoadConversation(ctx, req.Conversation)
	close(release)
	if err := <-done; !errors.Is(err, agent.ErrLeaseLost) {
		t.Fatalf("the stalled turn ended with %v, want ErrLeaseLost", err)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the stalled process ran the tool %d times after losing the conversation, want 0", n)
	}
	after, err := w.store.LoadConversation(ctx, req.Conversation)
	if errors.Is(err, store.ErrNotFound) != errors.Is(beforeErr, store.ErrNotFound) || string(after.State) != string(before.State) {
		t.Errorf("the conversation after the stalled turn = %s, %v; want it as the survivor had it: %s, %v", after.State, err, before.State, beforeErr)
	}
	if keys, err := w.store.Unanswered(ctx, time.Now().Add(time.Hour), 0, 0); err != nil || !slices.Contains(keys, req.Conversation) {
		t.Errorf("Unanswered after the stalled turn = %q, %v; want the conversation still listed", keys, err)
	}
	if ok, err := w.store.AcquireLease(ctx, lease, "third", time.Hour); err != nil || ok == !finished {
		t.Errorf("AcquireLease by a third process = %v, %v; want %v (the survivor holding it unless it finished)", ok, err, finished)
	}
	if got := w.rec.Answers(); len(got) != 0 {
		t.Errorf("the stalled process answered %q in the thread, want nothing", got)
	}
}

// A turn stalled past its lease in its model call (a long GC pause, a
// paused VM), whose conversation another process took over meanwhile,
// starts no tool when it wakes, one that may run again included (read-only
// or idempotent), before which it writes nothing: it renews its lease
// first, as the renewal is overdue, is refused, and stops with
// ErrLeaseLost.
func TestStalledTurnRunsNoRepeatableToolAfterTakeover(t *testing.T) {
	for _, b := range backends(t) {
		for _, hints := range []approvals.Hints{{Idempotent: true}, {ReadOnly: true}} {
			t.Run(fmt.Sprintf("%s/read-only=%v", b.name, hints.ReadOnly), func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = "policy:\n  rules:\n    - tool: set_replicas\n      verdict: allow\n"
				w.cfg.LeaseTTL = time.Hour // its renewer would notice only much later
				w.cfg.Owner = "stalled"
				var runs atomic.Int64
				must(t, w.reg.Register(agent.Tool{
					Name: "set_replicas", Schema: json.RawMessage(`{"type":"object"}`), Annotations: hints,
					Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
						runs.Add(1)
						return agent.Result{Content: "set"}, nil
					},
				}))
				entered, release := make(chan struct{}), make(chan struct{})
				var asked atomic.Int64
				w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
					if asked.Add(1) > 1 {
						return fakeopenai.Text("done")
					}
					close(entered)
					<-release
					return fakeopenai.ToolCalls(call("c1", "set_replicas", `{"n":3}`))
				})
				holds := newHoldLog(w.store)
				a := w.agentWith(holds, w.rec)
				req := request("scale api to 3")
				done := make(chan error, 1)
				go func() {
					_, err := a.Run(context.Background(), req)
					done <- err
				}()
				<-entered
				ctx := t.Context()
				holds.lapse(t, req.Conversation, "")
				if ok, err := w.store.AcquireLease(ctx, store.TurnLease(req.Conversation), "survivor", time.Hour); err != nil || !ok {
					t.Fatalf("AcquireLease by the survivor = %v, %v", ok, err)
				}
				// The stall: the lease's last renewal is a TTL old.
				defer agent.ShiftHoldClock(w.cfg.LeaseTTL)()
				close(release)
				if err := <-done; !errors.Is(err, agent.ErrLeaseLost) {
					t.Errorf("the stalled turn ended with %v, want ErrLeaseLost", err)
				}
				if n := runs.Load(); n != 0 {
					t.Errorf("the stalled process ran the tool %d times after another process took the conversation over, want 0", n)
				}
				if got := w.rec.Answers(); len(got) != 0 {
					t.Errorf("the stalled process answered %q in the thread, want nothing", got)
				}
			})
		}
	}
}

// lastUserMessages returns the user messages of the last request the model
// got.
func lastUserMessages(m *fakeopenai.Server) []string {
	reqs := m.Requests()
	var users []string
	for _, msg := range reqs[len(reqs)-1].Messages {
		if msg.Role == openai.ChatMessageRoleUser {
			users = append(users, msg.Content)
		}
	}
	return users
}

// killBeforePipeline makes the process whose store client it hooks die
// ahead of the first pipeline it would send once armed that writes a
// conversation (a command whose keys include one): that pipeline and
// everything after it fail, and nothing of them reaches Redis.
type killBeforePipeline struct {
	armed *atomic.Bool
	d     *dyingStore
}

func (killBeforePipeline) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (killBeforePipeline) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h killBeforePipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, writesConversation) {
			h.d.kill()
		}
		if h.d.dead.Load() {
			return errKilled
		}
		return next(ctx, cmds)
	}
}

// writesConversation reports whether one of c's keys is a conversation's.
func writesConversation(c redis.Cmder) bool {
	args := c.Args()
	keys := args[min(1, len(args)):min(2, len(args))]
	if name := c.Name(); name == "evalsha" || name == "eval" {
		n, _ := args[2].(int)
		keys = args[3:min(3+n, len(args))]
	}
	return slices.ContainsFunc(keys, func(k any) bool {
		s, _ := k.(string)
		return strings.Contains(s, ":conv:{conv:")
	})
}

// On Redis Cluster a pause writes its run and calls in their hash slot,
// then the conversation in its own. A process that dies between the two
// leaves calls that can be decided while no conversation is paused on
// their run (here the conversation's first turn: it has no record at
// all). An approval of one of them runs nothing (its card is told it did
// not run); the survivor answers the recorded message again, and its own
// card is the one whose approval runs the tool.
func TestApprovalOfAPauseNeverRecordedRunsNothing(t *testing.T) {
	url, ok := teststore.ClusterURL(t)
	if !ok {
		t.Skip("REDIS_CLUSTER_URL is not set: a pause is written in two steps only on Redis Cluster")
	}
	prefix := "test-" + store.NewRunID()
	openPlain := func() agent.Store {
		s, err := redisstore.New(context.Background(), url, redisstore.Options{Prefix: prefix})
		must(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	w := newWorld(t, backend{name: "redis-cluster", open: func(*testing.T) (agent.Store, func() agent.Store) { return openPlain(), openPlain }})
	w.cfg.LeaseTTL = 300 * time.Millisecond
	ctx := t.Context()

	c, err := redisstore.NewClient(url)
	must(t, err)
	hooked := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = hooked.Close() })
	d := &dyingStore{Store: hooked, saved: make(chan struct{})}
	var armed atomic.Bool
	c.AddHook(killBeforePipeline{armed: &armed, d: d})
	cards := &announcer{st: hooked}
	dying := w.agentWith(d, cards)
	req := request("ship api 2")
	deploy := call("c1", "deploy", `{"service":"api","version":"2"}`)
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		armed.Store(true) // the next pipeline that writes the conversation is the pause's second step
		return fakeopenai.ToolCalls(deploy)
	})
	if _, err := dying.Run(ctx, req); !errors.Is(err, errKilled) {
		t.Fatalf("the dying process's turn ended with %v, want it killed while saving its pause", err)
	}
	cards.mu.Lock()
	announced := slices.Clone(cards.announced)
	cards.mu.Unlock()
	if len(announced) != 1 {
		t.Fatalf("cards posted before the crash: %q, want one", announced)
	}
	orphan, err := w.store.(storetest.Store).GetCall(ctx, announced[0])
	if err != nil {
		t.Fatalf("GetCall(%s) after the crash: %v; want the call the pause's first step wrote", announced[0], err)
	}

	a := w.restart()
	w.model.Reply(fakeopenai.ToolCalls(deploy))
	res, err := a.Decide(ctx, approvals.Decision{CallID: orphan.ID, Fingerprint: orphan.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if !res.Complete {
		t.Fatalf("Decide = %+v, want the step complete", res)
	}
	out, err := a.Resume(ctx, orphan.RunID)
	must(t, err)
	if out.Status != agent.Idle {
		t.Errorf("Resume of the run nothing recorded = %+v, want idle", out)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Fatalf("deploy ran %d times from a pause whose conversation was never saved, want none", n)
	}
	var skipped bool
	for _, u := range w.rec.Updates() {
		skipped = skipped || u.Call.ID == orphan.ID && u.Phase == agent.PhaseSkipped
	}
	if !skipped {
		t.Errorf("updates %+v, want the approved call's card told it did not run", w.rec.Updates())
	}

	again := takeOver(t, w, a, req.Conversation)
	if again.Status != agent.Paused || len(again.Pending) != 1 || again.Pending[0].ID == orphan.ID {
		t.Fatalf("TakeOver = %+v, want the message answered again with a card of its own", again)
	}
	p := again.Pending[0]
	if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Fatal(err)
	}
	w.model.Reply(fakeopenai.Text("shipped"))
	if out, err := a.Resume(ctx, p.RunID); err != nil || out.Status != agent.Answered {
		t.Fatalf("Resume of the survivor's run = %+v, %v; want answered", out, err)
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once (the survivor's approved call)", n)
	}
}

// Messages sent while a step waited are answered after its resume, in a
// turn of their own; a process that dies during that turn leaves them
// listed, and the survivor answers them.
func TestTakeOverAfterDeathWhileAnsweringQueuedMessages(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			first := w.agent()
			p := pauseOne(t, w, first, call("c1", "deploy", `{"service":"api","version":"2"}`))
			if _, err := first.Run(t.Context(), request("also, what time is it?")); err != nil {
				t.Fatal(err)
			}
			survivor := dieAnsweringQueued(t, w, p, "noon")
			out := takeOver(t, w, survivor, p.Conversation)
			if out.Status != agent.Answered || out.Answer != "noon" {
				t.Fatalf("TakeOver = %+v, want the queued message answered", out)
			}
			reqs := w.model.Requests()
			last := reqs[len(reqs)-1].Messages
			if m := last[len(last)-1]; m.Role != "user" || m.Content != "also, what time is it?" {
				t.Errorf("the survivor's request ends with %s %q, want the queued message", m.Role, m.Content)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			keys, err := survivor.Unanswered(t.Context(), 0, 0)
			must(t, err)
			if len(keys) != 0 {
				t.Errorf("Unanswered after the takeover = %q, want nothing", keys)
			}
		})
	}
}

// A tool cut by the end of its turn (a shutdown) did not simply fail: what
// it did before it stopped is unknown, and the model is told so, as after
// a crash, so that it does not take a write that may have happened for one
// that did not.
func TestToolCutByShutdownHasAnUnknownOutcome(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = takeoverPolicy
	running := registerMigrateUntilCut(t, w)
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(ctx, request("migrate the db"))
		done <- err
	}()
	<-running
	cancel() // the shutdown's grace ran out
	if err := <-done; err == nil {
		t.Fatal("the cut turn succeeded")
	}
	w.model.Reply(fakeopenai.Text("it may or may not have run"))
	_, err := a.Run(t.Context(), request("did it work?"))
	must(t, err)
	got := toolResults(t, w.model)
	if len(got) != 1 || !strings.Contains(got[0], "outcome unknown: the bot stopped while migrate was running") {
		t.Errorf("tool results = %q, want migrate's outcome unknown", got)
	}
	if got := executions(t, w.store); !slices.Equal(got, []string{"migrate unknown"}) {
		t.Errorf("execute entries = %q, want migrate's outcome unknown", got)
	}
}

// A turn whose work ends (the shutdown) after a step ran is not a model
// failure: the model is not asked again with the ended context, the error
// is the context's, and the step is recorded, so that the restarted bot
// gives the model its results without running its calls again.
func TestShutdownAfterAStepRecordsItForTheRestart(t *testing.T) {
	for _, tt := range []struct {
		name string
		cut  string // where the shutdown's grace runs out
	}{
		{"while the tool runs", "tool"},
		{"while the model answers the step", "model"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, backends(t)[0])
			w.policy = takeoverPolicy
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var ran atomic.Int64
			must(t, w.reg.Register(agent.Tool{
				Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					ran.Add(1)
					if tt.cut == "tool" {
						cancel()
						<-ctx.Done()
						return agent.Result{}, ctx.Err()
					}
					return agent.Result{Content: "migrated"}, nil
				},
			}))
			var asked atomic.Int64
			w.model.Handle(func(r openai.ChatCompletionRequest) fakeopenai.Response {
				switch asked.Add(1) {
				case 1:
					return fakeopenai.ToolCalls(call("c1", "migrate", `{}`))
				case 2:
					if tt.cut == "model" {
						cancel()
						<-ctx.Done()
						return fakeopenai.Error(500, "the process asking is gone")
					}
				}
				return fakeopenai.Text("answered after the restart")
			})
			_, err := w.agent().Run(ctx, request("migrate the db"))
			var me *agent.ModelError
			if !errors.Is(err, context.Canceled) || errors.As(err, &me) {
				t.Errorf("Run = %v, want the context's end, not a model error", err)
			}
			want := int64(1)
			if tt.cut == "model" {
				want = 2
			}
			if n := asked.Load(); n != want {
				t.Errorf("the model was asked %d times, want %d: not again once the context ended", n, want)
			}

			out, err := w.restart().TakeOver(t.Context(), request("").Conversation)
			must(t, err)
			if out.Status != agent.Answered || out.Answer != "answered after the restart" {
				t.Errorf("TakeOver after the restart = %+v, want the answer", out)
			}
			if n := ran.Load(); n != 1 {
				t.Errorf("migrate ran %d times, want once", n)
			}
			got := toolResults(t, w.model)
			if len(got) != 1 || (tt.cut == "tool") != strings.Contains(got[0], "outcome unknown") {
				t.Errorf("tool results after the restart = %q, want migrate's result", got)
			}
		})
	}
}

// executions returns the audit log's execute entries as "tool outcome".
func executions(t *testing.T, st agent.Store) []string {
	t.Helper()
	log, err := st.(storetest.Store).AuditLog(t.Context(), 0)
	must(t, err)
	var out []string
	for _, e := range log {
		if e.Action == "execute" {
			out = append(out, e.Tool+" "+e.Outcome)
		}
	}
	return out
}

// An approved call whose tool the end of the resume (a shutdown) cuts is
// reported and audited as after a crash: skipped, interrupted with its
// outcome unknown, not run and failed.
func TestApprovedToolCutByShutdownHasAnUnknownOutcome(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n"
	running := registerMigrateUntilCut(t, w)
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
	out, err := a.Run(t.Context(), request("migrate the db"))
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("Run = %s with %d pending, want one paused call", out.Status, len(out.Pending))
	}
	p := out.Pending[0]
	if _, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := a.Resume(ctx, p.RunID)
		done <- err
	}()
	<-running
	cancel() // the shutdown's grace ran out
	if err := <-done; err == nil {
		t.Fatal("the cut resume succeeded")
	}
	var got []string
	for _, u := range w.rec.Updates() {
		if u.Call.ID == p.ID && u.Phase != agent.PhaseDecided {
			got = append(got, fmt.Sprintf("%s (%s)", u.Phase, u.Note))
		}
	}
	if want := []string{fmt.Sprintf("%s (%s)", agent.PhaseSkipped, agent.NoteInterrupted)}; !slices.Equal(got, want) {
		t.Errorf("updates of the cut call = %q, want %q", got, want)
	}
	if got := executions(t, w.store); !slices.Equal(got, []string{"migrate unknown"}) {
		t.Errorf("execute entries = %q, want migrate's outcome unknown", got)
	}
}

// heldAt makes the model's nth answer (counting from 1) close entered,
// wait for release and fail, as a call whose process is gone; answer gives
// the others.
func heldAt(w *world, nth int64, answer func(n int64) fakeopenai.Response) (entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		if k := n.Add(1); k != nth {
			return answer(k)
		}
		close(entered)
		<-release
		return fakeopenai.Error(500, "the process asking is gone")
	})
	return entered, release
}

// resumeApproved approves p on a and resumes its run in the background;
// the resume's error comes on the channel returned.
func resumeApproved(t *testing.T, a *agent.Agent, p agent.PendingCall) <-chan error {
	t.Helper()
	if _, err := a.Decide(context.Background(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := a.Resume(context.Background(), p.RunID)
		done <- err
	}()
	return done
}

// A step taken over after a crash, then the messages recorded meanwhile:
// what the model does for those is judged as asked by the one who wrote
// them, not by the writer of the step's message.
func TestTakeOverJudgesLaterMessagesAsTheirWriter(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  default: ask
  rules:
    - tool: migrate
      verdict: allow
    - tool: read_file
      when: 'user == "UREQUESTER"'
      verdict: allow
    - tool: read_file
      verdict: deny
      reason: only the requester reads files
`
			w.cfg.LeaseTTL = 300 * time.Millisecond
			entered := registerMigrateUntilCut(t, w)
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
			req := request("migrate")
			crashWhileRunning(w, req, entered)

			w.store = w.reopen()
			later := request("read /etc/hosts for me")
			later.User, later.MsgID = "USOMEONE01", "C1:1700000000.000300"
			if _, acc, err := w.agent().Accept(t.Context(), later, false); err != nil || acc != store.Accepted {
				t.Fatalf("Accept = %q, %v; want accepted", acc, err)
			}
			// After the step's outcome: the read for the later message.
			w.model.Reply(fakeopenai.ToolCalls(call("c2", "read_file", `{"path":"/etc/hosts"}`)), fakeopenai.Text("done"))
			out := takeOver(t, w, w.restart(), req.Conversation)
			if out.Status != agent.Answered {
				t.Fatalf("TakeOver = %+v, want the answer", out)
			}
			if n := w.reads.n.Load(); n != 0 {
				t.Errorf("read_file ran %d times for USOMEONE01, whom the policy denies", n)
			}
			if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "only the requester reads files") {
				t.Errorf("tool results = %q, want read_file denied", got)
			}
		})
	}
}

// A resume that saved its result with the bounded queue left, then died
// before answering it: the survivor that takes the conversation over tells
// the model how many earlier messages were left out, as the resume would.
func TestTakeOverKeepsTheCountOfSkippedMessages(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.LeaseTTL = 300 * time.Millisecond
	first := w.agent()
	p := pauseOne(t, w, first, call("c1", "deploy", `{"service":"api","version":"2"}`))
	const sent = 205
	for i := range sent {
		if _, err := first.Run(t.Context(), request(fmt.Sprintf("update %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	survivor := dieAnsweringQueued(t, w, p, "read them")
	takeOver(t, w, survivor, p.Conversation)
	users := slices.DeleteFunc(lastUserMessages(w.model), func(m string) bool { return !strings.Contains(m, "update ") })
	if len(users) == 0 {
		t.Fatal("no queued messages")
	}
	if want := fmt.Sprintf("[%d earlier messages", sent-200); !strings.HasPrefix(users[0], want) {
		t.Errorf("after takeover the first queued message is %q, want it to start with %q (%d queued shown)", users[0][:min(60, len(users[0]))], want, len(users))
	}
}

// dieAnsweringQueued approves p and resumes it in a process that dies
// while the model answers the messages queued meanwhile (the resume's
// result saved by then; the model's answer would be answer), and returns
// the agent of a restarted process.
func dieAnsweringQueued(t *testing.T, w *world, p agent.PendingCall, answer string) *agent.Agent {
	t.Helper()
	entered, release := heldAt(w, 2, func(n int64) fakeopenai.Response {
		if n == 1 {
			return fakeopenai.Text("deployed")
		}
		return fakeopenai.Text(answer)
	})
	a, d := w.doomed()
	done := resumeApproved(t, a, p)
	<-entered
	d.kill()
	close(release)
	<-done
	return w.restart()
}

// registerMigrateUntilCut registers a "migrate" tool that runs until its
// context ends, and returns a channel closed once it started.
func registerMigrateUntilCut(t *testing.T, w *world) <-chan struct{} {
	t.Helper()
	running := make(chan struct{})
	must(t, w.reg.Register(agent.Tool{
		Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			close(running)
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		},
	}))
	return running
}

// A shutdown that cuts a resume after one approved call ran (or while it
// ran) and before the next started leaves the next to the restart, which
// runs it: it is not reported as "not performed" for the context's end.
// The call that ran is neither run again nor audited twice; one cut while
// it ran is reported with its outcome unknown.
func TestShutdownBeforeAnApprovedCallStartsLeavesItToTheRestart(t *testing.T) {
	for _, tt := range []struct {
		name       string
		cut        string // where the shutdown's grace runs out
		idempotent bool   // migrate may run again
		first      string
		outcome    []string // migrate's execute entries
	}{
		{"as the first call returns", "returns", false, "c1: migrated", []string{"migrate ok"}},
		{"while the first call runs", "runs", false, "c1: outcome unknown: the bot stopped while migrate was running", []string{"migrate unknown"}},
		{"while an idempotent first call runs", "runs", true, "c1: migrated", []string{"migrate ok", "migrate unknown"}},
		{"as the second call is marked", "marked", false, "c1: migrated", []string{"migrate ok"}},
		{"as the second call's mark is sent, its answer lost", "lost", false, "c1: migrated", []string{"migrate ok"}},
	} {
		for _, b := range backends(t) {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = "policy:\n  default: ask\n"
				// Long enough that a loaded machine's slow renewal does not
				// lose the lease before the shutdown's cut, which is what
				// this tests.
				w.cfg.LeaseTTL = time.Second
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var migrated atomic.Int64
				must(t, w.reg.Register(agent.Tool{
					Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
					Annotations: approvals.Hints{Idempotent: tt.idempotent},
					Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
						if migrated.Add(1) > 1 {
							return agent.Result{Content: "migrated"}, nil // run again after the restart
						}
						switch tt.cut {
						case "runs":
							cancel()
							<-ctx.Done()
							return agent.Result{}, ctx.Err()
						case "returns":
							cancel()
						}
						return agent.Result{Content: "migrated"}, nil
					},
				}))
				a := w.agent()
				if tt.cut == "marked" || tt.cut == "lost" {
					var lose atomic.Bool
					lose.Store(tt.cut == "lost")
					a = w.agentWith(cutOnBegin{Store: w.store, cancel: cancel, lose: &lose}, w.rec)
				}
				out := pauseApproved(t, w, a, request("migrate, then deploy"), call("c1", "migrate", `{}`), call("c2", "deploy", `{"service":"api","version":"2"}`))
				runID := out.Pending[0].RunID
				if _, err := a.Resume(ctx, runID); !errors.Is(err, context.Canceled) {
					t.Fatalf("the cut resume = %v, want the context's end", err)
				}
				if n := w.deploys.n.Load(); n != 0 {
					t.Fatalf("deploy ran %d times during the cut resume, want none", n)
				}

				w.model.Reply(fakeopenai.Text("migrated and deployed"))
				out = resumeOnceFree(t, w.restart(), runID)
				if out.Status != agent.Answered || out.Answer != "migrated and deployed" {
					t.Fatalf("Resume after the restart = %+v, want the answer", out)
				}
				runs := int64(1)
				if tt.idempotent {
					runs = 2 // again after the restart
				}
				if m, d := migrated.Load(), w.deploys.n.Load(); m != runs || d != 1 {
					t.Errorf("migrate ran %d times and deploy %d, want %d and once", m, d, runs)
				}
				got := toolResults(t, w.model)
				if len(got) != 2 || !strings.HasPrefix(got[0], tt.first) || got[1] != "c2: deployed" {
					t.Errorf("tool results after the restart = %q, want %q then c2 deployed", got, tt.first)
				}
				for _, u := range w.rec.Updates() {
					if u.Phase == agent.PhaseSkipped && u.Call.ID == out.RunID+".1" {
						t.Errorf("deploy was skipped (%s), want it run", u.Note)
					}
				}
				got = executions(t, w.store)
				slices.Sort(got)
				if want := append([]string{"deploy ok"}, tt.outcome...); !slices.Equal(got, want) {
					t.Errorf("execute entries = %q, want %q", got, want)
				}
			})
		}
	}
}

// lostBegin loses the answer of the first BeginExecution, after the store
// applied it, with a connection's error.
type lostBegin struct {
	agent.Store
	lose *atomic.Bool
}

func (s lostBegin) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	ok, err := s.Store.BeginExecution(ctx, id, attempt)
	if s.lose.CompareAndSwap(true, false) {
		return false, errors.New("read tcp 127.0.0.1:6379: connection reset by peer")
	}
	return ok, err
}

// An approved call whose mark's answer is lost is asked again under the
// same attempt's name: its mark is this resume's, so the call runs now,
// once, instead of being reported as not performed (and, to a resume
// claimed again, as of unknown outcome).
func TestApprovedCallWhoseMarksAnswerIsLostRuns(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = "policy:\n  default: ask\n"
			var lose atomic.Bool
			lose.Store(true)
			a := w.agentWith(lostBegin{Store: w.store, lose: &lose}, w.rec)
			out := pauseApproved(t, w, a, request("restart, then deploy"), call("c1", "restart", `{"env":"staging"}`), call("c2", "deploy", `{"service":"api","version":"2"}`))
			w.model.Reply(fakeopenai.Text("deployed"))
			if got := resumeOnceFree(t, a, out.Pending[0].RunID); got.Status != agent.Answered {
				t.Fatalf("Resume = %+v, want the answer", got)
			}
			if lose.Load() {
				t.Fatal("no BeginExecution was made: the test lost no answer")
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			if got := toolResults(t, w.model); len(got) != 2 || got[1] != "c2: deployed" {
				t.Errorf("tool results = %q, want c2 deployed", got)
			}
		})
	}
}

// unwritable fails every CommitTurn: a store that took the lease but
// then became unreachable for writes.
type unwritable struct{ agent.Store }

func (unwritable) CommitTurn(context.Context, store.Commit) error { return errInjected }

// An allowed call that was running at a crash is audited, as of unknown
// outcome, with the write that records its step's results: a takeover
// that cannot write leaves it to the next one, so the entry is written
// once.
func TestInterruptedAllowedCallAuditedOnceThroughAFailedTakeover(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = takeoverPolicy
	w.cfg.LeaseTTL = 300 * time.Millisecond
	entered := registerMigrateUntilCut(t, w)
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
	req := request("migrate the schema")
	crashWhileRunning(w, req, entered)

	// The first survivor answers but cannot record it.
	w.model.Reply(fakeopenai.Text("it may have run"))
	w.store = w.reopen()
	first := w.agentWith(unwritable{w.store}, &recorder{})
	w.advance(time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := first.TakeOver(t.Context(), req.Conversation)
		if err != nil {
			break
		}
		if out.Status != agent.Idle {
			t.Fatalf("TakeOver on a store that cannot write = %+v, want an error", out)
		}
		if time.Now().After(deadline) {
			t.Fatal("TakeOver stayed idle for 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	w.model.Reply(fakeopenai.Text("it may or may not have run"))
	if out := takeOver(t, w, w.restart(), req.Conversation); out.Status != agent.Answered {
		t.Fatalf("TakeOver = %+v, want the answer", out)
	}
	if got := executions(t, w.store); !slices.Equal(got, []string{"migrate unknown"}) {
		t.Errorf("execute entries = %q, want migrate's unknown outcome once", got)
	}
}

// cutOnBegin ends a context (cancel: the shutdown's grace runs out) once
// BeginExecution has marked a call; with lose set, the first mark's
// answer is lost as the context ends (as a Redis client answers a command
// in flight).
type cutOnBegin struct {
	agent.Store
	cancel context.CancelFunc
	lose   *atomic.Bool
}

func (s cutOnBegin) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	ok, err := s.Store.BeginExecution(ctx, id, attempt)
	s.cancel()
	if s.lose != nil && s.lose.CompareAndSwap(true, false) {
		return false, context.Canceled
	}
	return ok, err
}

// crashWhileRunning runs req on a doomed agent of w until entered is
// closed (its tool runs), then kills its process and waits for the run to
// end.
func crashWhileRunning(w *world, req agent.Request, entered <-chan struct{}) {
	a, d := w.doomed()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := a.Run(ctx, req)
		done <- err
	}()
	<-entered
	d.kill()
	cancel()
	<-done
}

// pauseApproved runs req on a, the model asking for tcs, which all pause,
// and approves each.
func pauseApproved(t *testing.T, w *world, a *agent.Agent, req agent.Request, tcs ...fakeopenai.ToolCall) agent.Outcome {
	t.Helper()
	w.model.Reply(fakeopenai.ToolCalls(tcs...))
	out, err := a.Run(t.Context(), req)
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != len(tcs) {
		t.Fatalf("Run = %s with %d pending, want %d paused calls", out.Status, len(out.Pending), len(tcs))
	}
	for _, p := range out.Pending {
		if _, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// An approved call of an idempotent tool that a shutdown cut while it ran
// runs again after the restart: the cut resume records nothing that would
// give the model its outcome as unknown instead.
func TestApprovedIdempotentToolCutByShutdownRunsAgain(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n"
	w.cfg.LeaseTTL = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var runs atomic.Int64
	must(t, w.reg.Register(agent.Tool{
		Name: "warm_cache", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{Idempotent: true},
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			if runs.Add(1) == 1 {
				cancel() // the shutdown's grace runs out while it runs
				<-ctx.Done()
				return agent.Result{}, ctx.Err()
			}
			return agent.Result{Content: "warm"}, nil
		},
	}))
	a := w.agent()
	out := pauseApproved(t, w, a, request("warm the cache"), call("c1", "warm_cache", `{}`))
	if _, err := a.Resume(ctx, out.Pending[0].RunID); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut resume = %v, want the context's end", err)
	}
	w.model.Reply(fakeopenai.Text("warmed"))
	resumeOnceFree(t, w.restart(), out.Pending[0].RunID)
	if n := runs.Load(); n != 2 {
		t.Errorf("warm_cache ran %d times, want twice (again after the restart)", n)
	}
	if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: warm"}) {
		t.Errorf("tool results after the restart = %q, want the second run's", got)
	}
}

// resumeOnceFree resumes runID on a as soon as the claim of the resume
// before it, which a shutdown cut, has lapsed (Resume is Idle until then).
func resumeOnceFree(t *testing.T, a *agent.Agent, runID string) agent.Outcome {
	t.Helper()
	return untilNotIdle(t, "Resume after the restart", func() (agent.Outcome, error) { return a.Resume(t.Context(), runID) })
}

// An edited call cut by a crash is reported with the edit: what may have
// run is the edited call, not the one the model asked for.
func TestEditedCallCutByACrashNamesTheEdit(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UAPPROVER1",
		Args: json.RawMessage(`{"service":"api","version":"1"}`)})
	must(t, err)
	// A first resume started the edited call and died.
	if ok, err := w.store.BeginExecution(ctx, p.ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution = %v, %v", ok, err)
	}
	w.model.Reply(fakeopenai.Text("done"))
	_, err = w.restart().Resume(ctx, p.RunID)
	must(t, err)
	got := toolResults(t, w.model)
	if len(got) != 1 || !strings.Contains(got[0], "outcome unknown") || !strings.Contains(got[0], "edited the arguments") || !strings.Contains(got[0], `It was started with {"service":"api","version":"1"}`) {
		t.Errorf("the model read %q; want the outcome unknown of the edited call, version 1", got)
	}
	if n := w.deploys.n.Load(); n != 0 {
		t.Errorf("deploy ran %d times after the crash; want none", n)
	}
}

// An idempotent call that started before a crash, which the policy denies
// by the time it is taken over, is not run again, and its outcome is
// unknown: the attempt may have taken effect, not "not performed".
func TestStartedIdempotentCallThePolicyNowDeniesHasAnUnknownOutcome(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	p, scales := startedScale(t, w)
	w.policy = "policy:\n  rules:\n    - id: no-scale\n      tool: scale\n      verdict: deny\n      reason: Scaling is frozen.\n"
	got := takenOverUnrun(t, w, p, scales)
	if len(got) != 1 || strings.Contains(got[0], "not performed") || !strings.Contains(got[0], "outcome unknown") || !strings.Contains(got[0], "Scaling is frozen") {
		t.Errorf("the model read %q; want the outcome unknown, not run again because the policy now denies it", got)
	}
}

// An idempotent call cut by a shutdown while it ran is audited (outcome
// unknown) by the cut resume; the restart, which the policy now forbids
// to run it again, must not audit the same attempt a second time.
func TestIdempotentCallCutThenDeniedIsAuditedOnce(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.policy = "policy:\n  default: ask\n"
	w.cfg.LeaseTTL = time.Second
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	must(t, w.reg.Register(agent.Tool{Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
		Annotations: approvals.Hints{Idempotent: true},
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			cancel()
			<-ctx.Done()
			return agent.Result{}, ctx.Err()
		}}))
	a := w.agent()
	out := pauseApproved(t, w, a, request("migrate"), call("c1", "migrate", `{}`))
	if _, err := a.Resume(ctx, out.Pending[0].RunID); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cut resume = %v", err)
	}
	w.policy = "policy:\n  rules:\n    - id: frozen\n      tool: migrate\n      verdict: deny\n      reason: Frozen.\n"
	w.model.Reply(fakeopenai.Text("ok"))
	resumeOnceFree(t, w.restart(), out.Pending[0].RunID)
	if got := executions(t, w.store); !slices.Equal(got, []string{"migrate unknown"}) {
		t.Errorf("execute entries = %q, want one migrate unknown (one attempt ran)", got)
	}
}

// An idempotent call that started before a crash, whose tool's definition
// changed by the takeover, is not run again, and its outcome is unknown:
// the attempt may have taken effect (not "not performed").
func TestStartedCallWhoseToolChangedHasAnUnknownOutcome(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	p, scales := startedScale(t, w)
	// The tool now refuses the approved arguments.
	must(t, w.reg.Replace(func(n string) bool { return n == "scale" }, []agent.Tool{{Name: "scale", Description: "Scale", Schema: json.RawMessage(`{"type":"object","properties":{"env":{"type":"string","enum":["staging"]}},"required":["env"]}`),
		Annotations: approvals.Hints{Idempotent: true}, Handler: scales.handler("scaled")}}))
	got := takenOverUnrun(t, w, p, scales)
	if len(got) != 1 || strings.Contains(got[0], "not performed") || !strings.Contains(got[0], "outcome unknown") || !strings.Contains(got[0], "definition of tool scale changed") {
		t.Errorf("the model read %q; want an unknown outcome, saying the tool changed", got)
	}
}

// startedScale pauses a call of the idempotent tool scale, approves it and
// marks it started, as a resume that died while it ran leaves it: the
// takeover finds it begun, with no result.
func startedScale(t *testing.T, w *world) (agent.PendingCall, *counter) {
	t.Helper()
	scales := &counter{}
	must(t, w.reg.Register(agent.Tool{Name: "scale", Description: "Scale", Schema: json.RawMessage(envSchema),
		Annotations: approvals.Hints{Idempotent: true}, Handler: scales.handler("scaled")}))
	w.policy = "policy:\n  rules:\n    - id: scale\n      tool: scale\n      verdict: ask\n"
	a := w.agent()
	p := pauseOne(t, w, a, call("c1", "scale", `{"env":"prod"}`))
	_, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if ok, err := w.store.BeginExecution(t.Context(), p.ID, ""); err != nil || !ok {
		t.Fatalf("BeginExecution = %v, %v", ok, err)
	}
	return p, scales
}

// takenOverUnrun resumes p's run as the process that takes it over after
// the crash, checks that scale did not run again, and returns what the
// model read of the step.
func takenOverUnrun(t *testing.T, w *world, p agent.PendingCall, scales *counter) []string {
	t.Helper()
	w.model.Reply(fakeopenai.Text("done"))
	_, err := w.restart().Resume(t.Context(), p.RunID)
	must(t, err)
	if n := scales.n.Load(); n != 0 {
		t.Fatalf("scale ran %d times after the crash", n)
	}
	return toolResults(t, w.model)
}

// A step with a call that asks and an allowed call that may not run twice
// is marked before the allowed call runs, with the request entries of
// both. Taken over after a crash during the allowed call, the step pauses
// its asked call by the id those entries gave it, and writes none again:
// the log names each call by one id from its request on, on every store.
func TestCallAskedBeforeACrashIsRequestedOnceByItsId(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = `
policy:
  default: ask
  rules:
    - id: migrations
      tool: migrate
      verdict: allow
`
			w.cfg.LeaseTTL = 300 * time.Millisecond
			entered := make(chan struct{})
			var runs atomic.Int32
			must(t, w.reg.Register(agent.Tool{Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					if runs.Add(1) == 1 {
						close(entered)
						<-ctx.Done()
						return agent.Result{}, ctx.Err()
					}
					return agent.Result{Content: "migrated"}, nil
				}}))
			w.model.Reply(fakeopenai.ToolCalls(call("c0", "deploy", `{"service":"api","version":"2"}`), call("c1", "migrate", `{}`)))
			req := request("deploy and migrate")
			crashWhileRunning(w, req, entered)

			b := w.restart()
			out := takeOver(t, w, b, req.Conversation)
			if out.Status != agent.Paused || len(out.Pending) != 1 {
				t.Fatalf("TakeOver = %+v, want the deploy paused", out)
			}
			log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
			must(t, err)
			var ids []string
			for _, e := range log {
				if e.Action == "request" && e.Tool == "deploy" {
					ids = append(ids, e.CallID)
				}
			}
			if len(ids) != 1 || ids[0] != out.Pending[0].ID {
				t.Errorf("request entries of the deploy name %q, want one naming its paused call %s", ids, out.Pending[0].ID)
			}
		})
	}
}
