package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

var _ agent.PauseFeed = (*redisstore.Store)(nil)

// following is a store that tells when an announcement of a pause was
// handed to its follower, and counts the calls read for a decision and
// the approval steps taken.
type following struct {
	agent.Store
	heard            chan struct{}
	reads, approvals atomic.Int64
}

func (f *following) ApproveBegin(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	f.approvals.Add(1)
	return f.Store.ApproveBegin(ctx, callID, fingerprint, ap, drop, edit, need, d, fx, r)
}

func (f *following) ApproveAudited(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	f.approvals.Add(1)
	return f.Store.ApproveAudited(ctx, callID, fingerprint, ap, drop, edit, need, d, fx)
}

func (f *following) FollowPauses(ctx context.Context, ready func(), fn func([]byte)) error {
	return f.Store.(agent.PauseFeed).FollowPauses(ctx, ready, func(b []byte) {
		fn(b)
		f.heard <- struct{}{}
	})
}

func (f *following) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	f.reads.Add(1)
	return f.Store.GetCallWith(ctx, id, kinds...)
}

// A process that follows the pauses of the others that share its Redis
// decides a click on a call another one paused from the call as
// announced, in one store step, without reading it first (as the process
// that paused it would); the call runs once, and a second click on the
// process that paused it is refused.
func TestDecisionOnAnotherProcessesPauseReadsNothing(t *testing.T) {
	redis := redisBackend(t)
	ctx := t.Context()
	w := newWorld(t, *redis)
	paused := w.agent()
	f := &following{Store: w.store, heard: make(chan struct{}, 10)}
	other := w.agentWith(f, w.rec)
	follow(t, other)

	p := pauseOne(t, w, paused, call("c1", "deploy", `{"service":"api","version":"2"}`))
	select {
	case <-f.heard:
	case <-time.After(10 * time.Second):
		t.Fatal("the other process heard of no pause within 10s")
	}
	res, taken, err := other.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	if !res.Complete || taken == nil {
		t.Fatalf("DecideTaking = %+v, taken %v; want the step complete and its resume begun", res, taken != nil)
	}
	if n := f.reads.Load(); n != 0 {
		t.Errorf("the other process read the call %d times to decide it, want none (it was announced)", n)
	}
	out, err := other.ResumeTaken(ctx, taken)
	must(t, err)
	if out.Status != agent.Answered {
		t.Errorf("Resume = %+v, want answered", out)
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	// A second click, on the process that paused the call, finds it
	// decided, from what is stored.
	if _, _, err := paused.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"}); err == nil {
		t.Error("a second approval on the process that paused the call succeeded, want it refused as decided")
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times after a second click, want once", n)
	}
}

// A process that starts following pauses recalls the pending calls first:
// after a restart, a click on a card posted before it is decided in one
// store step with no read of the call, as on the process that paused it
// (on a store that keeps a version of the records: a Cluster keeps none,
// and the call is read). The call runs once.
func TestDecisionAfterARestartReadsNothing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			st := &steps{Store: w.reopen()}
			w.store = st.Store
			a := w.agentWith(st, w.rec)
			follow(t, a)
			res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if !res.Complete || taken == nil {
				t.Fatalf("DecideTaking = %+v, taken %v; want the step complete and its resume begun", res, taken != nil)
			}
			want := int64(0)
			if b.name == "redis-cluster" {
				want = 1
			}
			if n := st.reads.Load(); n != want {
				t.Errorf("the restarted process read the call %d times to decide it, want %d", n, want)
			}
			w.model.Reply(fakeopenai.Text("Deployed."))
			out, err := a.ResumeTaken(ctx, taken)
			must(t, err)
			if out.Status != agent.Answered {
				t.Errorf("ResumeTaken = %+v, want answered", out)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// follow has a follow the pauses of the others until the test ends, and
// returns once it is ready (its first recall done, announcements reaching
// it).
func follow(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- a.FollowPauses(ctx, func() { close(ready) }, nil) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("FollowPauses = %v, want nil once its context ended", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		done <- err // for the cleanup
		select {
		case <-ready: // it returns once ready with a store that announces nothing
		default:
			t.Fatalf("FollowPauses ended before it was ready: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("FollowPauses not ready within 10s")
	}
}

// An approval counted on one process is announced, as a pause is: the
// next approval of the call, on another process that follows pauses, is
// judged from the call with that count and decides it in one store step,
// with no read, beginning its resume. The call runs once.
func TestCountedApprovalIsAnnounced(t *testing.T) {
	redis := redisBackend(t)
	ctx := t.Context()
	w := newWorld(t, *redis)
	w.policy = twoOfThree
	paused := w.agent()
	f := &following{Store: w.store, heard: make(chan struct{}, 10)}
	other := w.agentWith(f, w.rec)
	follow(t, other)
	heard := func(what string) {
		t.Helper()
		select {
		case <-f.heard:
		case <-time.After(10 * time.Second):
			t.Fatalf("the other process heard no %s within 10s", what)
		}
	}
	p := pauseOne(t, w, paused, call("c1", "restart", `{"env":"prod"}`))
	heard("pause")
	d := func(who string) approvals.Decision {
		return approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: who}
	}
	if res, _, err := paused.DecideTaking(ctx, d("UONE000001")); err != nil || res.Complete {
		t.Fatalf("the first approval = %+v, %v; want it counted", res, err)
	}
	heard("counted approval")
	w.model.Reply(fakeopenai.Text("restarted"))
	res, taken, err := other.DecideTaking(ctx, d("UTWO000002"))
	if err != nil || !res.Complete || taken == nil {
		t.Fatalf("the second approval, on the other process = %+v, taken %v, %v; want the step complete and its resume begun", res, taken != nil, err)
	}
	if n := f.reads.Load(); n != 0 {
		t.Errorf("the other process read the call %d times, want none", n)
	}
	if n := f.approvals.Load(); n != 1 {
		t.Errorf("the other process took %d approval steps, want 1", n)
	}
	out, err := other.ResumeTaken(ctx, taken)
	must(t, err)
	if out.Status != agent.Answered || w.restarts.n.Load() != 1 {
		t.Errorf("the resume = %+v, restart ran %d times; want it answered, once", out, w.restarts.n.Load())
	}
}

// redisBackend is the single Redis node's backend; the test is skipped
// without one (pauses are announced on Redis only).
func redisBackend(t *testing.T) *backend {
	t.Helper()
	for _, b := range backends(t) {
		if b.name == "redis" {
			return &b
		}
	}
	t.Skip("REDIS_URL is not set: pauses are announced on Redis only")
	return nil
}
