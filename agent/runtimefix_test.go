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

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// registerMigrate registers "migrate", a tool that may not run twice and
// returns at once; runs counts the runs that did their work. A run given
// a context that has ended does nothing, as a real tool would.
func registerMigrate(t *testing.T, w *world) *atomic.Int64 {
	t.Helper()
	var runs atomic.Int64
	must(t, w.reg.Register(agent.Tool{
		Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
			if err := ctx.Err(); err != nil {
				return agent.Result{}, err
			}
			runs.Add(1)
			return agent.Result{Content: "migrated"}, nil
		},
	}))
	return &runs
}

// toolExecutions returns the audit log's execute entries of tool, as
// "tool outcome".
func toolExecutions(t *testing.T, st agent.Store, tool string) []string {
	t.Helper()
	return slices.DeleteFunc(executions(t, st), func(e string) bool { return !strings.HasPrefix(e, tool+" ") })
}

// A call that may not run twice and returned is recorded with its result
// before the step goes on to a slow read-only call: a crash during that
// one leaves the first call done, not of unknown outcome.
func TestCrashAfterACallReturnedKeepsItsResult(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = takeoverPolicy
			w.cfg.LeaseTTL = time.Second // room for renewals on a loaded machine; takeOver waits for the dead process's to lapse
			migrated := registerMigrate(t, w)
			entered := make(chan struct{})
			var probes atomic.Int64
			must(t, w.reg.Register(agent.Tool{
				Name: "probe", Schema: json.RawMessage(`{"type":"object"}`),
				Annotations: approvals.Hints{ReadOnly: true},
				Handler: func(ctx context.Context, _ json.RawMessage) (agent.Result, error) {
					if probes.Add(1) == 1 {
						close(entered)
						<-ctx.Done() // until the process is gone
						return agent.Result{}, ctx.Err()
					}
					return agent.Result{Content: "probed"}, nil
				},
			}))
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`), call("c2", "probe", `{}`)))
			w.model.Reply(fakeopenai.Text("migrated and probed"))
			req := request("migrate, then probe")
			crashWhileRunning(w, req, entered)

			out := takeOver(t, w, w.restart(), req.Conversation)
			if out.Status != agent.Answered || out.Answer != "migrated and probed" {
				t.Fatalf("TakeOver = %+v, want the answer", out)
			}
			if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: migrated", "c2: probed"}) {
				t.Errorf("tool results = %q, want migrate's result and the second probe's", got)
			}
			if n := migrated.Load(); n != 1 {
				t.Errorf("migrate ran %d times, want once", n)
			}
			if got := toolExecutions(t, w.store, "migrate"); !slices.Equal(got, []string{"migrate ok"}) {
				t.Errorf("migrate's execute entries = %q, want one, ok", got)
			}
		})
	}
}

// The same with an asked call whose preview is slow: a crash while the
// pause prepares its cards leaves the call that ran done.
func TestCrashWhileAPausePreviewsKeepsTheResultBeforeIt(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = "policy:\n  default: ask\n  rules:\n    - tool: migrate\n      verdict: allow\n"
			w.cfg.LeaseTTL = time.Second // room for renewals on a loaded machine; takeOver waits for the dead process's to lapse
			migrated := registerMigrate(t, w)
			entered := make(chan struct{})
			var previews atomic.Int64
			must(t, w.reg.Register(agent.Tool{
				Name: "gate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
					return agent.Result{Content: "opened"}, nil
				},
				Preview: func(ctx context.Context, _ json.RawMessage) (string, error) {
					if previews.Add(1) == 1 {
						close(entered)
						<-ctx.Done() // until the process is gone
						return "", ctx.Err()
					}
					return "opens the gate", nil
				},
			}))
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`), call("c2", "gate", `{}`)))
			req := request("migrate, then open the gate")
			crashWhileRunning(w, req, entered)

			survivor := w.restart()
			out := takeOver(t, w, survivor, req.Conversation)
			if out.Status != agent.Paused || len(out.Pending) != 1 || out.Pending[0].Tool != "gate" {
				t.Fatalf("TakeOver = %+v, want the gate paused", out)
			}
			p := out.Pending[0]
			if _, err := survivor.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatal(err)
			}
			w.model.Reply(fakeopenai.Text("migrated and opened"))
			if out, err := survivor.Resume(t.Context(), p.RunID); err != nil || out.Status != agent.Answered {
				t.Fatalf("Resume = %+v, %v; want the answer", out, err)
			}
			if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: migrated", "c2: opened"}) {
				t.Errorf("tool results = %q, want migrate's result and the gate's", got)
			}
			if n := migrated.Load(); n != 1 {
				t.Errorf("migrate ran %d times, want once", n)
			}
			if got := toolExecutions(t, w.store, "migrate"); !slices.Equal(got, []string{"migrate ok"}) {
				t.Errorf("migrate's execute entries = %q, want one, ok", got)
			}
		})
	}
}

// cancelOnMark ends the turn's context (cancel: the shutdown's grace runs
// out) once a step mark naming a call about to start has been saved, once;
// with lose, the mark's answer is lost as the context ends.
type cancelOnMark struct {
	agent.Store
	cancel context.CancelFunc
	lose   bool
	done   atomic.Bool
}

func (s *cancelOnMark) CommitTurn(ctx context.Context, c store.Commit) error {
	err := s.Store.CommitTurn(ctx, c)
	if err != nil || c.Conversation == nil || s.done.Load() {
		return err
	}
	var st struct {
		Step *struct {
			Started int `json:"started"`
		} `json:"step"`
	}
	if json.Unmarshal(c.Conversation.State, &st) != nil || st.Step == nil || st.Step.Started < 0 {
		return nil
	}
	s.done.Store(true)
	s.cancel()
	if s.lose {
		return context.Canceled
	}
	return nil
}

// A shutdown that ends the turn as the mark of a call about to start is
// written leaves the call to the restart, which runs it: it never ran, so
// it is neither reported as of unknown outcome nor as not performed.
func TestShutdownAsACallIsMarkedLeavesItToTheRestart(t *testing.T) {
	for _, lose := range []bool{false, true} {
		for _, b := range backends(t) {
			name := b.name
			if lose {
				name += "/answer lost"
			}
			t.Run(name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = takeoverPolicy
				w.cfg.LeaseTTL = time.Second // room for renewals on a loaded machine; takeOver waits for the cut turn's to lapse
				migrated := registerMigrate(t, w)
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				a := w.agentWith(&cancelOnMark{Store: w.store, cancel: cancel, lose: lose}, &recorder{})
				w.model.Reply(fakeopenai.ToolCalls(call("c1", "migrate", `{}`)))
				req := request("migrate the schema")
				if _, err := a.Run(ctx, req); !errors.Is(err, context.Canceled) {
					t.Fatalf("the cut turn = %v, want the context's end", err)
				}
				if n := migrated.Load(); n != 0 {
					t.Fatalf("migrate ran %d times in the cut turn, want none", n)
				}

				w.model.Reply(fakeopenai.Text("migrated"))
				out := takeOver(t, w, w.restart(), req.Conversation)
				if out.Status != agent.Answered || out.Answer != "migrated" {
					t.Fatalf("TakeOver = %+v, want the answer", out)
				}
				if n := migrated.Load(); n != 1 {
					t.Errorf("migrate ran %d times, want once (after the restart)", n)
				}
				if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: migrated"}) {
					t.Errorf("tool results = %q, want c1 migrated", got)
				}
				if got := toolExecutions(t, w.store, "migrate"); !slices.Equal(got, []string{"migrate ok"}) {
					t.Errorf("migrate's execute entries = %q, want one, ok", got)
				}
			})
		}
	}
}

// replyError is an error reply of Redis, as go-redis returns one (a type
// with a RedisError method): the store answered, with an error.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// failingResume fails every BeginResume with err, without asking the
// store; entered is closed at the first.
type failingResume struct {
	agent.Store
	err     error
	entered chan struct{}
	once    sync.Once
}

func (s *failingResume) BeginResume(context.Context, string, store.ResumeBegin) (store.ResumeStart, error) {
	s.once.Do(func() { close(s.entered) })
	return store.ResumeStart{}, s.err
}

// A resume whose claim the store refuses with an error (a script error on
// a damaged run), or keeps failing, does not hold the conversation: the
// takeover fails within a bounded time and gives the lease back, and
// another turn on the thread is answered.
func TestFailingResumeClaimDoesNotWedgeTheConversation(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
	}{
		{"error reply", fmt.Errorf("begin resume: %w", replyError("ERR user_script:12: Script attempted to access nonexistent global variable"))},
		{"decode error", fmt.Errorf("begin resume: decode run: %w", json.Unmarshal([]byte("{"), new(any)))},
		{"no answer", errors.New("read tcp: i/o timeout, and again")},
	} {
		for _, b := range backends(t) {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				defer agent.SetLostDecisionWait(300 * time.Millisecond)()
				w := newWorld(t, b)
				w.cfg.LeaseTTL = 300 * time.Millisecond
				w.cfg.LeaseWait = 2 * time.Second
				p := approvedDeploy(t, w, w.agent())
				st := &failingResume{Store: w.store, err: tt.err, entered: make(chan struct{})}
				failing := w.agentWith(st, &recorder{})
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				type result struct {
					err  error
					took time.Duration
				}
				done := make(chan result, 1)
				go func() {
					start := time.Now()
					_, err := failing.TakeOver(ctx, p.Conversation)
					done <- result{err, time.Since(start)}
				}()
				// The other turn comes once the failing one holds the
				// conversation (it may have given it back already).
				select {
				case <-st.entered:
				case r := <-done:
					select {
					case <-st.entered:
						done <- r
					default:
						t.Fatalf("TakeOver = %v before any BeginResume", r.err)
					}
				}
				w.model.Reply(fakeopenai.Text("deployed"), fakeopenai.Text("all is well"))
				next := request("how is it going?")
				next.MsgID = "C1:1700000000.000900"
				out, err := w.agent().Run(t.Context(), next)
				if err != nil || out.Status != agent.Answered || out.Answer != "all is well" {
					t.Errorf("another Run on the thread = %+v, %v; want it answered", out, err)
				}
				cancel()
				r := <-done
				if r.err == nil || errors.Is(r.err, context.Canceled) || errors.Is(r.err, context.DeadlineExceeded) {
					t.Errorf("the failing TakeOver = %v, want the store's error before its context ended", r.err)
				}
				if r.took > 2*time.Second {
					t.Errorf("the failing TakeOver took %s, want it to give up within the lease wait", r.took)
				}
				if n := w.deploys.n.Load(); n != 1 {
					t.Errorf("deploy ran %d times, want once", n)
				}
			})
		}
	}
}

// A pause saved although its store step answered with an error stores
// its request and pause entries once: the entries that step carried are
// not written again when the turn ends.
func TestPauseSavedDespiteAnErrorAuditsOnce(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			st := &lostCommit{Store: w.store.(storetest.Store)}
			st.lose.Store(1)
			p := pauseOne(t, w, w.agentWith(st, w.rec), call("c1", "deploy", `{"service":"api","version":"2"}`))
			if st.lose.Load() >= 1 {
				t.Fatal("no commit answer was lost")
			}
			log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
			must(t, err)
			count := map[string]int{}
			for _, e := range log {
				count[e.Action+" "+e.CallID]++
			}
			for _, k := range []string{"request " + p.ID, "pause " + p.ID} {
				if count[k] != 1 {
					t.Errorf("%d audit entries %q, want 1 (all: %v)", count[k], k, count)
				}
			}
		})
	}
}

// A conversation whose recorded step does not fit its history (no
// messages, or fewer slots than the calls of its last message) is
// reported as unreadable by a takeover, which does not panic.
func TestMalformedStepIsUnreadable(t *testing.T) {
	calls := `{"role":"assistant","tool_calls":[` +
		`{"id":"c1","type":"function","function":{"name":"migrate","arguments":"{}"}},` +
		`{"id":"c2","type":"function","function":{"name":"migrate","arguments":"{}"}}]}`
	for _, tt := range []struct{ name, state string }{
		{"no messages", `{"step":{"slots":[{"tool_call_id":"c1","tool":"migrate"}],"started":-1,"steps":1,"user":"UREQUESTER","channel":"C1"}}`},
		{"a slot short", `{"messages":[{"role":"user","content":"migrate twice"},` + calls + `],` +
			`"step":{"slots":[{"tool_call_id":"c1","tool":"migrate","result":{"content":"migrated"}}],"started":-1,"steps":1,"user":"UREQUESTER","channel":"C1"}}`},
		{"not the assistant's", `{"messages":[{"role":"user","content":"migrate"}],` +
			`"step":{"slots":[{"tool_call_id":"c1","tool":"migrate"}],"started":-1,"steps":1,"user":"UREQUESTER","channel":"C1"}}`},
	} {
		for _, b := range backends(t) {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = takeoverPolicy
				migrated := registerMigrate(t, w)
				conv := request("").Conversation
				must(t, w.store.CommitTurn(t.Context(), store.Commit{Key: conv, Conversation: &store.Conversation{State: json.RawMessage(tt.state), UpdatedAt: w.now}}))
				a := w.agent()
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Errorf("TakeOver panicked: %v", r)
						}
					}()
					if out, err := a.TakeOver(t.Context(), conv); err == nil {
						t.Errorf("TakeOver = %+v, want an error", out)
					}
				}()
				if n := migrated.Load(); n != 0 {
					t.Errorf("migrate ran %d times, want none", n)
				}
			})
		}
	}
}
