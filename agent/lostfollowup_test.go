package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// lostReplies is a go-redis hook that loses replies after Redis ran the
// commands, and after the client's every sending (a connection reset
// that go-redis's own resends did not get past): in the first left
// batches (a command sent alone, or a pipeline) whose first command that
// pick picks ran, that command's reply, or with whole every reply of the
// batch; then after runs. While down is set every command fails unsent:
// Redis is unreachable.
type lostReplies struct {
	pick  func(redis.Cmder) bool
	whole bool
	left  *atomic.Int32
	after func()
	down  *atomic.Bool
}

// errReset is what go-redis returns for a connection the server reset.
var errReset = &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}

func (lostReplies) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lostReplies) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func(ctx context.Context, cmds []redis.Cmder) error { return next(ctx, cmds[0]) })
	}
}
func (h lostReplies) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { return h.process(ctx, cmds, next) }
}

func (h lostReplies) process(ctx context.Context, cmds []redis.Cmder, next redis.ProcessPipelineHook) error {
	if h.down.Load() {
		for _, c := range cmds {
			c.SetErr(errReset)
		}
		return errReset
	}
	err := next(ctx, cmds)
	i := slices.IndexFunc(cmds, h.pick)
	// A script the node had not loaded did not run: the EVAL that
	// follows is the sending.
	if i < 0 || redis.HasErrorPrefix(cmds[i].Err(), "NOSCRIPT") || h.left.Add(-1) < 0 {
		return err
	}
	lost := cmds[i : i+1]
	if h.whole {
		lost = cmds
	}
	for _, c := range lost {
		c.SetErr(errReset)
	}
	if h.after != nil {
		h.after()
	}
	return errReset
}

// scriptOn reports whether a command runs a script whose first key is
// key, or with suffix set one that ends with key.
func scriptOn(key string, suffix bool) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		args := c.Args()
		if !strings.HasPrefix(c.Name(), "eval") || len(args) < 4 {
			return false
		}
		k := fmt.Sprint(args[3])
		return k == key || suffix && strings.HasSuffix(k, key)
	}
}

// lostFollowUpWorld is a world on the Redis at url (under a prefix of its
// own), the store it reads, and a store on the same prefix through a
// client whose replies h loses, for the agent under test.
func lostFollowUpWorld(t *testing.T, name, url string, h lostReplies) (w *world, plain, hooked *redisstore.Store, prefix string) {
	t.Helper()
	prefix = teststore.Prefix(t, url, "test")
	open := func() *redisstore.Store {
		s, err := redisstore.New(context.Background(), url, redisstore.Options{Prefix: prefix})
		must(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	plain = open()
	w = newWorld(t, backend{name: name, open: func(*testing.T) (agent.Store, func() agent.Store) {
		return plain, func() agent.Store { return open() }
	}})
	c, err := redisstore.NewClient(url)
	must(t, err)
	c.AddHook(h)
	hooked = redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = hooked.Close() })
	return w, plain, hooked, prefix
}

// redisTopologies are the Redis deployments the tests run on: a single
// node, and a Cluster, whose decisions' effects follow their scripts.
func redisTopologies(t *testing.T) []struct{ name, url string } {
	var out []struct{ name, url string }
	if u, ok := teststore.RedisURL(t); ok {
		out = append(out, struct{ name, url string }{"redis", u})
	}
	if u, ok := teststore.ClusterURL(t); ok {
		out = append(out, struct{ name, url string }{"redis-cluster", u})
	}
	if len(out) == 0 {
		t.Skip("neither REDIS_URL nor REDIS_CLUSTER_URL is set")
	}
	return out
}

// decisionEntries returns the audit entries of decisions on call id.
func decisionEntries(t *testing.T, s *redisstore.Store, id string) []store.AuditEntry {
	t.Helper()
	log, err := s.AuditLog(t.Context(), 0)
	must(t, err)
	var out []store.AuditEntry
	for _, e := range log {
		if e.CallID == id && e.Action == "decide" {
			out = append(out, e)
		}
	}
	return out
}

// listedUnanswered reports whether the store lists conv for takeover.
func listedUnanswered(t *testing.T, s *redisstore.Store, conv string) bool {
	t.Helper()
	keys, err := s.Unanswered(t.Context(), time.Now().Add(time.Hour), 0, 0)
	must(t, err)
	return slices.Contains(keys, conv)
}

// A decision whose script ran but whose reply, and go-redis's resends,
// were lost is found recorded once the store answers again, and then has
// its effects as a decision answered at once has them: its audit entry,
// once, and its conversation listed for takeover until the resume
// answers. On a Cluster, where the effects follow the script, the lost
// reply left them unwritten; on a single node they were the script's.
// The same holds for a decision whose store did not answer within
// lostDecisionWait, found recorded by its UnconfirmedError's Recover.
func TestLostDecisionReplyKeepsItsEffects(t *testing.T) {
	defer agent.SetLostDecisionWait(300 * time.Millisecond)()
	for _, topo := range redisTopologies(t) {
		for _, unconfirmed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/unconfirmed %v", topo.name, unconfirmed), func(t *testing.T) {
				ctx := t.Context()
				var left atomic.Int32
				var down atomic.Bool
				h := lostReplies{left: &left, down: &down}
				if unconfirmed {
					h.after = func() { down.Store(true) }
				}
				var callID atomic.Value
				callID.Store("none")
				h.pick = func(c redis.Cmder) bool { return scriptOn(":call:"+callID.Load().(string), true)(c) }
				w, plain, hooked, _ := lostFollowUpWorld(t, topo.name, topo.url, h)
				a := w.agentWith(hooked, w.rec)
				p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
				conv := request("please").Conversation
				if listedUnanswered(t, plain, conv) {
					t.Fatalf("%s is listed unanswered while its step waits", conv)
				}
				callID.Store(p.ID)
				left.Store(1)
				res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				if left.Load() > 0 {
					t.Fatal("the decision's reply was not lost")
				}
				if unconfirmed {
					var u *agent.UnconfirmedError
					if !errors.As(err, &u) {
						t.Fatalf("DecideTaking with the store gone after its reply was lost = %v; want an UnconfirmedError", err)
					}
					down.Store(false)
					if !u.Recover(ctx) {
						t.Fatal("Recover found the decision not recorded, or its step not complete")
					}
				} else if err != nil || !res.Complete {
					t.Fatalf("DecideTaking with its reply lost = %+v, %v; want it recorded, its step complete", res, err)
				}
				if got := decisionEntries(t, plain, p.ID); len(got) != 1 {
					t.Errorf("audit entries of the decision = %+v, want one", got)
				}
				if !listedUnanswered(t, plain, conv) {
					t.Errorf("%s is not listed unanswered after the decision that completed its step", conv)
				}
				w.model.Reply(fakeopenai.Text("deployed"))
				out, err := resumeTakenOr(ctx, a, taken, p.RunID)
				must(t, err)
				deployedOnce(t, w, out)
				if got := decisionEntries(t, plain, p.ID); len(got) != 1 {
					t.Errorf("audit entries of the decision after its resume = %+v, want one", got)
				}
			})
		}
	}
}

// pausedTwoOfThree is a world on the Redis at url whose agent paused a
// call that needs two approvals of three approvers, through a client that
// loses the reply of a script on that call (and go-redis's resends) as
// many times as *left says.
func pausedTwoOfThree(t *testing.T, name, url string) (w *world, plain *redisstore.Store, a *agent.Agent, p agent.PendingCall, left *atomic.Int32) {
	t.Helper()
	left = new(atomic.Int32)
	var callID atomic.Value
	callID.Store("none")
	h := lostReplies{left: left, down: &atomic.Bool{}, pick: func(c redis.Cmder) bool { return scriptOn(":call:"+callID.Load().(string), true)(c) }}
	w, plain, hooked, _ := lostFollowUpWorld(t, name, url, h)
	w.policy = twoOfThree
	a = w.agentWith(hooked, w.rec)
	p = pauseOne(t, w, a, call("c1", "restart", `{"env":"prod"}`))
	callID.Store(p.ID)
	return w, plain, a, p, left
}

// The same for the approval that meets the count of a call that needs
// two: found recorded after its reply was lost, it has its audit entry
// once, beside the counted approval's, and its conversation listed.
func TestLostApprovalReplyKeepsItsEffects(t *testing.T) {
	for _, topo := range redisTopologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			w, plain, a, p, left := pausedTwoOfThree(t, topo.name, topo.url)
			d := func(who string) approvals.Decision {
				return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
			}
			if res, _, err := a.DecideTaking(ctx, d("UONE000001")); err != nil || res.Complete {
				t.Fatalf("the first approval = %+v, %v; want it counted", res, err)
			}
			left.Store(1)
			w.model.Reply(fakeopenai.Text("restarted"))
			res, taken, err := a.DecideTaking(ctx, d("UTWO000002"))
			if left.Load() > 0 {
				t.Fatal("the approval's reply was not lost")
			}
			if err != nil || !res.Complete {
				t.Fatalf("the second approval with its reply lost = %+v, %v; want it recorded, its step complete", res, err)
			}
			var second []store.AuditEntry
			for _, e := range decisionEntries(t, plain, p.ID) {
				if e.Actor == "UTWO000002" {
					second = append(second, e)
				}
			}
			if len(second) != 1 || second[0].Outcome != store.OutcomeRecorded {
				t.Errorf("audit entries of the second approval = %+v, want one, recorded", second)
			}
			if !listedUnanswered(t, plain, request("please").Conversation) {
				t.Error("the conversation is not listed unanswered after the approval that completed its step")
			}
			out, err := resumeTakenOr(ctx, a, taken, p.RunID)
			must(t, err)
			if out.Status != agent.Answered || w.restarts.n.Load() != 1 {
				t.Errorf("the resume = %+v, restart ran %d times; want it answered, once", out, w.restarts.n.Load())
			}
		})
	}
}

// A decision whose follow-up on a Cluster was made (its audit entry
// written beside the claim of its resume) but whose reply was lost, and
// lost again when the claim was asked for, is found recorded, and sent
// again, with its audit entry still once: the follow-up that sending
// makes pushes no second one.
func TestLostFollowUpReplyAuditsOnce(t *testing.T) {
	for _, topo := range redisTopologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			var left atomic.Int32
			var runKey atomic.Value
			runKey.Store("none")
			h := lostReplies{left: &left, down: &atomic.Bool{}, whole: true, pick: func(c redis.Cmder) bool { return scriptOn(runKey.Load().(string), false)(c) }}
			w, plain, hooked, prefix := lostFollowUpWorld(t, topo.name, topo.url, h)
			a := w.agentWith(hooked, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			runKey.Store(prefix + ":run:{" + p.RunID + "}")
			left.Store(2) // the follow-up's, and its claim's asked again
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if left.Swap(0) > 0 && topo.name == "redis-cluster" {
				t.Fatal("the follow-up's reply was not lost, or not asked again")
			}
			if err != nil || !res.Complete {
				t.Fatalf("DecideTaking with its follow-up's reply lost = %+v, %v; want it recorded, its step complete", res, err)
			}
			if got := decisionEntries(t, plain, p.ID); len(got) != 1 {
				t.Errorf("audit entries of the decision = %+v, want one", got)
			}
			if !listedUnanswered(t, plain, request("please").Conversation) {
				t.Error("the conversation is not listed unanswered after the decision that completed its step")
			}
			w.model.Reply(fakeopenai.Text("deployed"))
			out, err := resumeTakenOr(ctx, a, taken, p.RunID)
			must(t, err)
			deployedOnce(t, w, out)
		})
	}
}

// A decision that begins no resume (Decide, as while a turn of this
// process holds the conversation) and an approval that only counts, whose
// replies and go-redis's resends were lost, are sent again under the same
// attempt until the store answers: the decider is told they were made,
// and each has its audit entry once (on a Cluster the resend writes it).
func TestLostReplyOfADecisionAloneIsAskedAgain(t *testing.T) {
	for _, topo := range redisTopologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			w, plain, a, p, left := pausedTwoOfThree(t, topo.name, topo.url)
			for _, who := range []string{"UONE000001", "UTWO000002"} {
				left.Store(1)
				res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who})
				if left.Load() > 0 {
					t.Fatalf("the reply of %s's approval was not lost", who)
				}
				if err != nil || res.Complete != (who == "UTWO000002") {
					t.Fatalf("%s's approval with its reply lost = %+v, %v; want it recorded", who, res, err)
				}
				var mine []store.AuditEntry
				for _, e := range decisionEntries(t, plain, p.ID) {
					if e.Actor == who {
						mine = append(mine, e)
					}
				}
				if len(mine) != 1 {
					t.Errorf("audit entries of %s's approval = %+v, want one", who, mine)
				}
			}
			if !listedUnanswered(t, plain, request("please").Conversation) {
				t.Error("the conversation is not listed unanswered after the approval that completed its step")
			}
			w.model.Reply(fakeopenai.Text("restarted"))
			out, err := a.Resume(ctx, p.RunID)
			must(t, err)
			if out.Status != agent.Answered || w.restarts.n.Load() != 1 {
				t.Errorf("the resume = %+v, restart ran %d times; want it answered, once", out, w.restarts.n.Load())
			}
		})
	}
}
