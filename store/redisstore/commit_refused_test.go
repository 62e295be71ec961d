package redisstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// beforeCommitHook runs between once, before the first script sent after
// it is armed that is given the key of conversation conv (alone or in a
// pipeline): another client's step reaching Redis just before the
// conversation's script.
type beforeCommitHook struct {
	armed   *bool
	conv    string
	between func()
}

func (h beforeCommitHook) fire(cmd redis.Cmder) bool {
	if !*h.armed || !scriptOn(cmd, convSuffix(h.conv)) {
		return false
	}
	*h.armed = false
	return true
}

func (beforeCommitHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h beforeCommitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fire(cmd) {
			h.between()
		}
		return next(ctx, cmd)
	}
}
func (h beforeCommitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.fire) {
			h.between()
		}
		return next(ctx, cmds)
	}
}

// A pause whose run was created while its holder held the lease, and
// whose conversation's script is refused because another owner took the
// lease in between, leaves no trace of the run: no approver is asked, or
// reminded, to decide a call that no conversation is paused on, and the
// conversation is not marked as paused on it (a commit with no
// conversation record marks it). A single node takes that path for a
// resume that pauses again (a pause alone is one script there); a
// Cluster for every pause.
func TestRefusedPauseLeavesNoRun(t *testing.T) {
	forGeneralPauses(t, func(t *testing.T, u string, finish bool) {
		for _, record := range []bool{true, false} {
			t.Run(map[bool]string{true: "record", false: "no record"}[record], func(t *testing.T) {
				testRefusedPauseLeavesNoRun(t, u, finish, record)
			})
		}
	})
}

// forGeneralPauses runs f for each pause that takes CommitTurn's general
// path: on a single node the resume that pauses again (a pause alone is
// one script there), on a Cluster every pause and that resume.
func forGeneralPauses(t *testing.T, f func(t *testing.T, u string, finish bool)) {
	for _, topo := range []struct {
		name, url string
		finish    []bool
	}{
		{"node", redisURL(t), []bool{true}},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"), []bool{false, true}},
	} {
		for _, finish := range topo.finish {
			t.Run(topo.name+"/"+map[bool]string{true: "resume", false: "pause"}[finish], func(t *testing.T) {
				f(t, topo.url, finish)
			})
		}
	}
}

// refusedPause is a pause that a, holding the conversation's lease, is
// about to commit on a conversation paused before (with finish, as the
// resume of that pause that pauses again), and the conversation as it was.
type refusedPause struct {
	c        redis.UniversalClient
	s, other *redisstore.Store
	conv     string
	now      time.Time
	run      store.Run
	call     store.Call
	commit   store.Commit
	before   store.Conversation
}

// newRefusedPause makes a refusedPause on the Redis at u; with record the
// commit writes the conversation's record, paused on the new run.
func newRefusedPause(t *testing.T, u string, finish, record bool) *refusedPause {
	t.Helper()
	p := &refusedPause{now: time.Now()}
	p.c, p.s, p.other = hookedPair(t, u)
	ctx := t.Context()
	var resumed []store.Call
	p.conv, resumed = pausedOnOneCall(t, p.s, "fp0")
	if b, err := p.s.BeginTurn(ctx, p.conv, "a", time.Minute); err != nil || !b.Acquired {
		t.Fatalf("BeginTurn by a = %v, %v", b.Acquired, err)
	}
	p.run = store.Run{ID: store.NewRunID(), Conversation: p.conv, Requester: "U1", Channel: "C1"}
	p.call = store.Call{ID: store.CallID(p.run.ID, 0), Tool: "t", Fingerprint: "fp1", Requester: "U1", Approvers: []string{"UA"}, Conversation: p.conv,
		ExpiresAt: p.now.Add(time.Hour), RemindAt: p.now.Add(time.Minute)}
	p.commit = store.Commit{Key: p.conv, Run: &p.run, Calls: []store.Call{p.call}, Holder: "a", Release: "a"}
	if record {
		p.commit.Conversation = &store.Conversation{State: []byte(`{"by":"a"}`), PausedRun: p.run.ID}
	}
	if finish {
		p.commit.Finish = store.RunOf(resumed[0].ID)
	}
	var err error
	if p.before, err = p.s.LoadConversation(ctx, p.conv); err != nil {
		t.Fatal(err)
	}
	return p
}

// noTrace checks that the pause, refused or failed as what says, left no
// trace: no run, none of its calls listed, the conversation as it was and
// the run it resumed, with finish, not finished.
func (p *refusedPause) noTrace(t *testing.T, what string) {
	t.Helper()
	ctx, s := t.Context(), p.s
	if _, _, err := s.LoadRun(ctx, p.run.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(%s) of the %s pause = %v, want ErrNotFound", p.run.ID, what, err)
	}
	isCall := func(c store.Call) bool { return c.ID == p.call.ID }
	for _, f := range []store.Filter{{}, {Approver: "UA"}, {Requester: "U1"}, {Conversation: p.conv}} {
		if got, err := s.Pending(ctx, f); err != nil || slices.ContainsFunc(got, isCall) {
			t.Errorf("Pending(%+v) after the %s pause = %d calls, %v; want none of its calls", f, what, len(got), err)
		}
	}
	if got, err := s.DueReminders(ctx, p.now.Add(2*time.Minute), 0); err != nil || slices.ContainsFunc(got, isCall) {
		t.Errorf("DueReminders after the %s pause = %d calls, %v; want none of its calls", what, len(got), err)
	}
	if got, err := s.Due(ctx, p.now.Add(2*time.Hour), 0); err != nil || slices.ContainsFunc(got, isCall) {
		t.Errorf("Due after the %s pause = %d calls, %v; want none of its calls", what, len(got), err)
	}
	if got, err := s.LoadConversation(ctx, p.conv); err != nil || got.PausedRun != p.before.PausedRun || string(got.State) != string(p.before.State) {
		t.Errorf("LoadConversation after the %s pause = paused on %q (%s), %v; want it as before, paused on %q", what, got.PausedRun, got.State, err, p.before.PausedRun)
	}
	if got, _, err := s.LoadRun(ctx, p.commit.Finish); p.commit.Finish != "" && (err != nil || got.Finished) {
		t.Errorf("LoadRun(%s) after a %s resume = finished %v, %v; want it not finished", p.commit.Finish, what, got.Finished, err)
	}
}

func testRefusedPauseLeavesNoRun(t *testing.T, u string, finish, record bool) {
	p := newRefusedPause(t, u, finish, record)
	c, s, other, conv, commit := p.c, p.s, p.other, p.conv, p.commit
	ctx := t.Context()
	armed := true
	took := false
	c.AddHook(beforeCommitHook{armed: &armed, conv: conv, between: func() {
		// a's lease runs out after its run is created, and b takes the
		// conversation over.
		if err := other.ReleaseLease(ctx, store.TurnLease(conv), "a"); err != nil {
			t.Error(err)
		}
		ok, err := other.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute)
		took = ok && err == nil
	}})
	err := s.CommitTurn(ctx, commit)
	if !took {
		t.Fatal("b did not take the lease before the conversation's script")
	}
	if !errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("CommitTurn of a pause whose lease was taken before the conversation's script = %v, want ErrNotHolder", err)
	}
	p.noTrace(t, "refused")
}

// failWhile fails the part of a pipeline a Cluster node gets when it
// holds a command match picks, for as long as armed is set (its node is
// down, as in a failover that outlasts the store's retries).
type failWhile struct {
	match func(redis.Cmder) bool
	armed *atomic.Bool
	hits  *atomic.Int32
}

func (failWhile) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failWhile) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failWhile) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, h.match) {
			h.hits.Add(1)
			err := errors.New("node unreachable")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// On Redis Cluster a pause whose listings cannot be written (their node
// stays down through the store's retries) fails without pausing the
// conversation: the listings are written before the conversation's
// script, so a failure never leaves a conversation paused on calls that
// are in no listing (never expired, reminded or listed as pending), and
// the run, which no conversation is paused on, is deleted again.
func TestPauseWhoseListingsCannotBeWrittenIsNotSaved(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	prefix := newPrefix(t, u)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	cc := c.(*redis.ClusterClient)
	var armed atomic.Bool
	var hits atomic.Int32
	hook := failWhile{match: on("zadd", prefix+":due"), armed: &armed, hits: &hits}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
	if err := cc.ForEachShard(t.Context(), func(_ context.Context, n *redis.Client) error { n.AddHook(hook); return nil }); err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	conv := convOffNode(t, cc, prefix, prefix+":due")
	m, _, err := s.AcceptMessage(ctx, conv, store.Inbound{User: "U1", Channel: "C1", Text: "deploy"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by a = %v, %v", ok, err)
	}
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	for sameNode(t, cc, prefix+":run:{"+r.ID+"}", prefix+":due") {
		r.ID = store.NewRunID()
	}
	call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
	armed.Store(true)
	err = s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{}`), PausedRun: r.ID}, Run: &r, Calls: []store.Call{call},
		Answer: true, AnswerUpTo: m.Seq, Holder: "a", Release: "a"})
	armed.Store(false)
	if hits.Load() == 0 {
		t.Fatal("the listings' part of the pipeline was not failed")
	}
	if err == nil {
		t.Fatal("CommitTurn whose listings cannot be written = nil, want its error")
	}
	if got, err := s.LoadConversation(ctx, conv); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadConversation after the failed pause = paused on %q, %v; want no conversation saved", got.PausedRun, err)
	}
	if in, err := s.Inbox(ctx, conv); err != nil || len(in) != 1 {
		t.Errorf("Inbox after the failed pause = %v, %v; want the message still there", in, err)
	}
	if _, _, err := s.LoadRun(ctx, r.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(%s) after the failed pause = %v, want ErrNotFound", r.ID, err)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after the failed pause = %v, %v; want false: a still holds it", ok, err)
	}
}

// A pause whose commit is refused leaves its run when an approver decided
// its call, or another process claimed the run's resume, after the run was
// created and before the conversation's script: the cards are posted
// before the commit, and the process that took the lapsed lease may be
// resuming the run already. Deleted then, the run would be lost to that
// resume (its claim, its calls, and where to save its result and finish),
// though the tool may have run. The run stays as the decision left it,
// listed for Stalled while no resume holds it; the resume that finds its
// conversation not paused on it finishes it without running its calls.
func TestRefusedPauseLeavesADecidedRun(t *testing.T) {
	forGeneralPauses(t, func(t *testing.T, u string, finish bool) {
		for _, claim := range []bool{false, true} {
			t.Run(map[bool]string{true: "claimed", false: "decided"}[claim], func(t *testing.T) {
				testRefusedPauseLeavesADecidedRun(t, u, finish, claim)
			})
		}
	})
}

func testRefusedPauseLeavesADecidedRun(t *testing.T, u string, finish, claim bool) {
	p := newRefusedPause(t, u, finish, true)
	c, s, other, conv, r, call, commit, before := p.c, p.s, p.other, p.conv, p.run, p.call, p.commit, p.before
	ctx := t.Context()
	armed := true
	acted := false
	c.AddHook(beforeCommitHook{armed: &armed, conv: conv, between: func() {
		// a's lease runs out after its run is created; an approver
		// decides the call from its card, and another process takes the
		// conversation's lease and, when asked, claims the resume of the
		// step the decision completed.
		if err := other.ReleaseLease(ctx, store.TurnLease(conv), "a"); err != nil {
			t.Error(err)
		}
		d := store.Decision{Kind: "approve", Decider: "UA", At: time.Now()}
		if _, complete, err := other.DecideAudited(ctx, call.ID, call.Fingerprint, d, store.Effects{Unanswered: conv}); err != nil || !complete {
			t.Errorf("DecideAudited(%s) before the conversation's script = complete %v, %v; want the step complete", call.ID, complete, err)
			return
		}
		if ok, err := other.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || !ok {
			t.Errorf("AcquireLease by b = %v, %v", ok, err)
			return
		}
		acted = true
		if claim {
			ok, err := other.ClaimResume(ctx, r.ID, "b", time.Minute)
			acted = ok && err == nil
		}
	}})
	err := s.CommitTurn(ctx, commit)
	if !acted {
		t.Fatal("the call was not decided, or the resume not claimed, before the conversation's script")
	}
	if !errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("CommitTurn of a pause whose lease was taken before the conversation's script = %v, want ErrNotHolder", err)
	}
	_, calls, err := s.LoadRun(ctx, r.ID)
	if err != nil {
		t.Fatalf("LoadRun(%s) of the refused pause whose call was decided = %v, want the run left to its resume", r.ID, err)
	}
	if len(calls) != 1 || calls[0].Status != store.Decided {
		t.Errorf("the calls of the refused pause = %+v, want its call, decided", calls)
	}
	if claim {
		if ok, err := s.RenewClaim(ctx, r.ID, "b", time.Minute); err != nil || !ok {
			t.Errorf("RenewClaim by b after the refused pause = %v, %v; want b's claim still held", ok, err)
		}
	} else if got, err := s.Stalled(ctx, 0); err != nil || !slices.Contains(got, r.ID) {
		t.Errorf("Stalled after the refused pause = %v, %v; want %s listed for its resume", got, err, r.ID)
	}
	if got, err := s.LoadConversation(ctx, conv); err != nil || got.PausedRun != before.PausedRun || string(got.State) != string(before.State) {
		t.Errorf("LoadConversation after the refused pause = paused on %q (%s), %v; want it as before, paused on %q", got.PausedRun, got.State, err, before.PausedRun)
	}
}

// unloadedAndFailHook, once armed, sends the conversation's script of the
// first pipeline that holds a script given the key of conversation conv
// by a SHA that Redis does not know, as when Redis has forgotten its
// scripts (a restart, SCRIPT FLUSH), then fails the commands that fail
// picks, as if their node went down, though the rest was applied. A SCRIPT
// FLUSH would do the same for every client of the Redis, and change how
// other tests' scripts are sent. noscript is set if the conversation's
// script was refused unrun.
type unloadedAndFailHook struct {
	armed    *bool
	conv     string
	fail     func(redis.Cmder) bool
	noscript *bool
}

func (unloadedAndFailHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (unloadedAndFailHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h unloadedAndFailHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		isScript := func(c redis.Cmder) bool { return c.Name() == "evalsha" && scriptOn(c, convSuffix(h.conv)) }
		if !*h.armed || !slices.ContainsFunc(cmds, isScript) {
			return next(ctx, cmds)
		}
		*h.armed = false
		for _, c := range cmds {
			if isScript(c) {
				c.Args()[1] = strings.Repeat("f", 40)
			}
		}
		err := next(ctx, cmds)
		for _, c := range cmds {
			if isScript(c) {
				*h.noscript = redis.HasErrorPrefix(c.Err(), "NOSCRIPT")
			}
			if h.fail(c) {
				c.SetErr(errors.New("node unreachable"))
			}
		}
		return err
	}
}

// A pause whose conversation's script was refused unrun (Redis had
// forgotten its scripts) while another command of its pipeline failed is
// not sent again and fails; its run, which no conversation is paused on,
// is deleted and unlisted, as after a refusal, rather than asked about
// and reminded of until it expires.
func TestPauseWhoseScriptNeverRanLeavesNoRun(t *testing.T) {
	forGeneralPauses(t, testPauseWhoseScriptNeverRanLeavesNoRun)
}

func testPauseWhoseScriptNeverRanLeavesNoRun(t *testing.T, u string, finish bool) {
	p := newRefusedPause(t, u, finish, true)
	c, s, conv, call, commit := p.c, p.s, p.conv, p.call, p.commit
	ctx := t.Context()
	commit.Audit = []store.AuditEntry{{Actor: "a", Action: "request", Thread: conv, CallID: call.ID}}
	armed, noscript := true, false
	c.AddHook(unloadedAndFailHook{armed: &armed, conv: conv, noscript: &noscript, fail: auditPush(s.AuditKey())})
	err := s.CommitTurn(ctx, commit)
	if armed || !noscript {
		t.Fatal("the conversation's script was not refused unrun")
	}
	if err == nil || errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("CommitTurn whose script was refused unrun beside a failed command = %v, want that command's error", err)
	}
	p.noTrace(t, "failed")
}
