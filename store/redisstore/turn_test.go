package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// A lease released by CommitTurn is announced to the processes waiting for
// it, as one released by ReleaseLease is.
func TestCommitTurnAnnouncesRelease(t *testing.T) {
	for _, u := range []string{redisURL(t), envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")} {
		s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u)})
		t.Cleanup(func() { _ = s.Close() })
		ctx := t.Context()
		conv := "C1:" + store.NewRunID()
		if b, err := s.BeginTurn(ctx, conv, "a", time.Minute); err != nil || !b.Acquired {
			t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
		}
		w, err := s.WatchLease(ctx, store.TurnLease(conv))
		if err != nil {
			t.Fatalf("WatchLease: %v", err)
		}
		if err := s.CommitTurn(ctx, store.Commit{Key: conv, Release: "a"}); err != nil {
			t.Fatalf("CommitTurn: %v", err)
		}
		select {
		case <-w.Released():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no release announced within 10s of the commit", u)
		}
		_ = w.Close()
	}
}

// indexMembers returns the members of every sorted set under prefix, on
// every master.
func indexMembers(t *testing.T, rawURL, prefix string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var mu sync.Mutex
	err := teststore.EachKey(t.Context(), rawURL, prefix, func(ctx context.Context, node *redis.Client, key string) error {
		if node.Type(ctx, key).Val() != "zset" {
			return nil
		}
		ms, err := node.ZRange(ctx, key, 0, -1).Result()
		mu.Lock()
		out[key] = ms
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A commit that finishes a run takes its calls out of every index that
// listed them and clears the conversation's paused run: on a single node
// in the finishing script, on Redis Cluster with the pipeline after it, and
// for a run created before runs kept their conversation's key (no conv
// field) by the general path.
func TestCommitTurnFinishUnindexes(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		legacy    bool
	}{
		{"single node", redisURL(t), false},
		{"single node, legacy run", redisURL(t), true},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := newPrefix(t, tc.url)
			s := newStore(t, tc.url, redisstore.Options{Prefix: prefix})
			t.Cleanup(func() { _ = s.Close() })
			ctx := t.Context()
			conv := "C1:" + store.NewRunID()
			if _, _, err := s.AcceptMessage(ctx, conv, store.Inbound{User: "U1", Channel: "C1", Text: "hi"}, false); err != nil {
				t.Fatal(err)
			}
			r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
			calls := []store.Call{
				{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, Approvers: []string{"UA", "UB"}, ExpiresAt: time.Now().Add(time.Hour), RemindAt: time.Now().Add(time.Minute)},
				{ID: store.CallID(r.ID, 1), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)},
			}
			b, err := s.BeginTurn(ctx, conv, "a", time.Minute)
			if err != nil || !b.Acquired {
				t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
			}
			paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
			if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls, Answer: true, AnswerUpTo: b.Inbox[0].Seq, Release: "a"}); err != nil {
				t.Fatalf("CommitTurn (pause): %v", err)
			}
			listed := 0
			for _, ms := range indexMembers(t, tc.url, prefix) {
				for _, m := range ms {
					if strings.HasPrefix(m, r.ID) {
						listed++
					}
				}
			}
			if listed < 8 {
				t.Fatalf("the paused run is in %d index entries, want at least 8", listed)
			}
			if tc.legacy {
				c, err := redisstore.NewClient(tc.url)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if err := c.HDel(ctx, prefix+":run:{"+r.ID+"}", "conv").Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range calls {
				if _, _, err := s.Decide(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "UA", At: time.Now()}); err != nil {
					t.Fatalf("Decide(%s): %v", c.ID, err)
				}
			}
			done := store.Conversation{State: []byte(`{"done":true}`)}
			if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &done, Finish: r.ID,
				Audit: []store.AuditEntry{{Actor: "UA", Action: "execute", CallID: calls[0].ID}}}); err != nil {
				t.Fatalf("CommitTurn (finish): %v", err)
			}
			for k, ms := range indexMembers(t, tc.url, prefix) {
				for _, m := range ms {
					if strings.HasPrefix(m, r.ID) {
						t.Errorf("index %s still lists %s after the run was finished", k, m)
					}
				}
			}
			got, _, err := s.LoadRun(ctx, r.ID)
			if err != nil || !got.Finished {
				t.Errorf("LoadRun = finished %v, %v; want finished", got.Finished, err)
			}
			if c, err := s.LoadConversation(ctx, conv); err != nil || c.PausedRun != "" || string(c.State) != `{"done":true}` {
				t.Errorf("LoadConversation = %+v, %v; want the saved state, not paused", c, err)
			}
			if log, err := s.AuditLog(ctx, 1); err != nil || len(log) != 1 || log[0].Action != "execute" {
				t.Errorf("AuditLog = %+v, %v; want the execute entry", log, err)
			}
		})
	}
}

// DecideBegin works when Redis has forgotten its scripts (after a restart
// or SCRIPT FLUSH): the pipeline's EVALSHAs fail unrun, and the decision
// and the resume's start are sent again, each loading its script.
func TestDecideBeginAfterScriptFlush(t *testing.T) {
	u := redisURL(t)
	s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	r, calls := testRun()
	r.Conversation = "C1:" + store.NewRunID()
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatalf("SCRIPT FLUSH: %v", err)
	}
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute}
	_, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, calls[0].Fingerprint, store.Decision{Kind: "approve", Decider: "U1", At: time.Now()}, store.Effects{}, rb)
	if err != nil || !complete || !rs.Claimed || rs.Run.ID != r.ID {
		t.Fatalf("DecideBegin after SCRIPT FLUSH = complete %v, claimed %v, run %q, %v; want complete, claimed, %s", complete, rs.Claimed, rs.Run.ID, err, r.ID)
	}
}

// AcceptBegin works when Redis has forgotten its scripts: the pipeline's
// EVALSHA fails unrun, and the pipeline is sent again with the script's
// text; the message is recorded once and the turn begun.
func TestAcceptBeginAfterScriptFlush(t *testing.T) {
	u := redisURL(t)
	s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conv := "C1:" + store.NewRunID()
	for i, id := range []string{"E1", "E2"} {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
		m := store.Inbound{EventID: id, MsgID: "M" + id, User: "U1", Channel: "C1", Text: "hi", At: time.Now()}
		got, acc, b, err := s.AcceptBegin(ctx, conv, m, false, "a", time.Minute, "rules")
		if err != nil || acc != store.Accepted || !b.Acquired || len(b.Inbox) != i+1 || b.Inbox[i].Seq != got.Seq {
			t.Fatalf("AcceptBegin(%s) after SCRIPT FLUSH = %q, acquired %v, inbox %+v, %v; want accepted, acquired, %d in the inbox", id, acc, b.Acquired, b.Inbox, err, i+1)
		}
		if err := s.ReleaseLease(ctx, store.TurnLease(conv), "a"); err != nil {
			t.Fatalf("ReleaseLease: %v", err)
		}
	}
}

// unlistHook runs before once, just before the first pipeline that takes
// member out of the sorted set key (ZREM, or a script given both).
type unlistHook struct {
	key, member string
	before      func()
	once        *sync.Once
}

func (unlistHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (unlistHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h unlistHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			switch c.Name() {
			case "zrem", "eval", "evalsha":
				if a := c.Args(); slices.Contains(a, any(h.key)) && slices.Contains(a, any(h.member)) {
					h.once.Do(h.before)
				}
			}
		}
		return next(ctx, cmds)
	}
}

// A commit that pauses saves the run and its calls before it takes the
// answered conversation out of the unanswered index: on Redis Cluster
// always, on a single node when the turn was a resume whose run it
// finishes. A decision made in between (a click on the card, posted before
// the commit) lists the conversation for the takeover until the resume
// saves its result; the commit's unlist must not undo that listing.
func TestDecisionDuringPauseCommitKeepsTheConversationListed(t *testing.T) {
	cluster := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	for _, tc := range []struct {
		name, url string
		resume    bool
	}{
		{"cluster, first pause", cluster, false},
		{"cluster, pause of a resume", cluster, true},
		{"single node, pause of a resume", redisURL(t), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := newPrefix(t, tc.url)
			c, err := redisstore.NewClient(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			s := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
			t.Cleanup(func() { _ = s.Close() })
			ctx := t.Context()
			conv := "C1:" + store.NewRunID()
			if _, _, err := s.AcceptMessage(ctx, conv, store.Inbound{User: "U1", Channel: "C1", Text: "deploy"}, false); err != nil {
				t.Fatal(err)
			}
			pause := func(finish string, before func()) store.Call {
				t.Helper()
				r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
				call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
				if before != nil {
					c.AddHook(unlistHook{key: prefix + ":unanswered", member: conv, once: new(sync.Once), before: func() { before(); decide(t, s, conv, call) }})
				}
				b, err := s.BeginTurn(ctx, conv, "a", time.Minute)
				if err != nil || !b.Acquired {
					t.Fatalf("BeginTurn = %v, %v", b.Acquired, err)
				}
				var upTo int64
				for _, m := range b.Inbox {
					upTo = max(upTo, m.Seq)
				}
				paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
				if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: []store.Call{call}, Finish: finish, Answer: true, AnswerUpTo: upTo, Release: "a"}); err != nil {
					t.Fatalf("CommitTurn (pause): %v", err)
				}
				return call
			}
			decided := false
			mark := func() { decided = true }
			if tc.resume {
				first := pause("", nil)
				decide(t, s, conv, first)
				pause(store.RunOf(first.ID), mark)
			} else {
				pause("", mark)
			}
			if !decided {
				t.Fatal("the commit never unlisted the conversation; the test did not decide in between")
			}
			listed, err := s.Unanswered(ctx, time.Now().Add(time.Hour), 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(listed, conv) {
				t.Errorf("Unanswered = %v after a decision made during the pause's commit; want %s listed for the resume", listed, conv)
			}
		})
	}
}

// decide approves call, listing conv as a click's decision does.
func decide(t *testing.T, s *redisstore.Store, conv string, call store.Call) {
	t.Helper()
	d := store.Decision{Kind: "approve", Decider: "UA", At: time.Now()}
	if _, complete, err := s.DecideAudited(t.Context(), call.ID, call.Fingerprint, d, store.Effects{Unanswered: conv}); err != nil || !complete {
		t.Errorf("DecideAudited(%s) = complete %v, %v; want the step complete", call.ID, complete, err)
	}
}

// pipelineHook calls between, once, within the first pipeline sent after
// it is armed: after its first at commands went out (0: before any), as
// another client's command reaching Redis there would.
type pipelineHook struct {
	armed   *bool
	at      int
	between func()
}

func (pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !*h.armed || len(cmds) <= h.at {
			return next(ctx, cmds)
		}
		*h.armed = false
		var err error
		if h.at > 0 {
			err = next(ctx, cmds[:h.at])
		}
		h.between()
		return errors.Join(err, next(ctx, cmds[h.at:]))
	}
}

// On Redis Cluster a pause writes its run and calls in their hash slot
// before the conversation in its own. If another owner takes the
// conversation's lease in between, the conversation's step is refused,
// and the conversation is left as it was: not paused on a run it never
// recorded (a resume of that run, after an approval of one of its cards,
// then runs nothing), and not overwriting the new owner's work.
func TestPauseRefusedMidwayLeavesTheConversationAlone(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	c, s, other := hookedPair(t, u)
	ctx := t.Context()
	conv := "C1:" + store.NewRunID()
	if _, _, err := s.AcceptMessage(ctx, conv, store.Inbound{User: "U1", Channel: "C1", Text: "deploy"}, false); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by a = %v, %v", ok, err)
	}
	armed := true
	took := false
	c.AddHook(pipelineHook{armed: &armed, between: func() {
		// a's lease runs out, and b takes the conversation over.
		if err := other.ReleaseLease(ctx, store.TurnLease(conv), "a"); err != nil {
			t.Error(err)
		}
		ok, err := other.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute)
		took = ok && err == nil
	}})
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
	paused := store.Conversation{State: []byte(`{"by":"a"}`), PausedRun: r.ID}
	err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: []store.Call{call}, Answer: true, AnswerUpTo: 1, Holder: "a", Release: "a"})
	if !took {
		t.Fatal("the other owner did not take the lease between the run's step and the conversation's")
	}
	if !errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("CommitTurn of a pause whose lease was taken midway = %v, want ErrNotHolder", err)
	}
	if got, err := s.LoadConversation(ctx, conv); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadConversation after the refused pause = %+v, %v; want no conversation (none was saved)", got, err)
	}
	if in, err := s.Inbox(ctx, conv); err != nil || len(in) != 1 {
		t.Errorf("Inbox after the refused pause = %v, %v; want the message still there", in, err)
	}
}

// A pause's announcement is published to the processes that follow pauses
// once the pause is recorded, by its own script: a pause in one step, and
// a resume's pause (which also finishes the resumed run); a pause the
// store refuses announces nothing.
func TestPausesAnnouncedOnceRecorded(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	heard := followPauses(t, s)
	next := func() string {
		t.Helper()
		select {
		case b := <-heard:
			return b
		case <-time.After(10 * time.Second):
			t.Fatal("no announcement within 10s")
			return ""
		}
	}
	pause := func(conv, holder, finish, announce string) (store.Call, error) {
		r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
		call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
		paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
		return call, s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: []store.Call{call}, Finish: finish, Holder: holder, Announce: []byte(announce)})
	}

	first, err := pause("C1:"+store.NewRunID(), "", "", "first")
	if err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "first" {
		t.Errorf("announcement = %q, want the pause's", got)
	}

	refused := "C1:" + store.NewRunID()
	if ok, err := s.AcquireLease(ctx, store.TurnLease(refused), "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if _, err := pause(refused, "a", "", "refused"); !errors.Is(err, store.ErrNotHolder) {
		t.Fatalf("CommitTurn of a pause while another owner holds the lease = %v, want ErrNotHolder", err)
	}
	decide(t, s, first.Conversation, first)
	if _, err := pause(first.Conversation, "", store.RunOf(first.ID), "again"); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "again" {
		t.Errorf("announcement after a refused pause and a resume's pause = %q, want the resume's pause's only", got)
	}
}

// followPauses follows the pauses s hears announced until the test ends,
// and returns once it listens: each announcement heard goes to the
// channel it returns.
func followPauses(t *testing.T, s *redisstore.Store) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	heard := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.FollowPauses(ctx, sync.OnceFunc(func() { close(ready) }), func(b []byte) { heard <- string(b) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("FollowPauses ended with %v, want nil once its context ended", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("FollowPauses ended before it listened: %v", err)
	}
	return heard
}

// decisionPipelineStore is a store on a fresh prefix of REDIS_URL with its
// client c, for hooks on the pipeline of a decision and the resume it
// begins: one pipeline on a single node only, so the test is skipped on a
// Cluster (and fails in CI, whose REDIS_URL is a single node).
func decisionPipelineStore(t *testing.T) (u, prefix string, c redis.UniversalClient, s *redisstore.Store) {
	u = redisURL(t)
	prefix = newPrefix(t, u)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, cluster := c.(*redis.ClusterClient); cluster {
		skipOutsideCI(t, "a decision and its resume are one pipeline on a single node only, and REDIS_URL is a Cluster")
	}
	s = redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	return u, prefix, c, s
}

// On a single node a decision and the resume it begins are two scripts of
// one pipeline. When another decision completes the step between them, the
// first decision, which left a call pending, begins nothing: it neither
// claims the resume nor marks its call as running, so the resume of the
// decision that completed the step starts with it.
func TestDecisionThatLeftACallPendingBeginsNoResume(t *testing.T) {
	u, prefix, c, s := decisionPipelineStore(t)
	other := newStore(t, u, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	conv := "C1:" + store.NewRunID()
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	calls := []store.Call{
		{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp0", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)},
		{ID: store.CallID(r.ID, 1), Tool: "t", Fingerprint: "fp1", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)},
	}
	paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease by a = %v, %v", ok, err)
	}
	if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls, Holder: "a", Release: "a"}); err != nil {
		t.Fatal(err)
	}
	armed := true
	c.AddHook(pipelineHook{armed: &armed, at: 1, between: func() {
		decide(t, other, conv, calls[1])
	}})
	begin := store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
	_, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, "fp0", store.Decision{Kind: "approve", Decider: "UA"}, store.Effects{}, begin)
	if armed {
		t.Fatal("the decision was not sent as a pipeline of two")
	}
	if err != nil || complete || rs.Claimed {
		t.Fatalf("DecideBegin of the first call = complete %v, claimed %v, %v; want neither, nil", complete, rs.Claimed, err)
	}
	rs, err = other.BeginResume(ctx, r.ID, store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "b", TTL: time.Minute, Start: []string{"approve"}})
	if err != nil || !rs.Claimed {
		t.Fatalf("BeginResume by the decider that completed the step = claimed %v, busy %v, %v; want it claimed", rs.Claimed, rs.Busy, err)
	}
	if rs.Started != calls[0].ID {
		t.Errorf("the resume started %q, want the first approved call %s, not left marked as running by the other decision", rs.Started, calls[0].ID)
	}
}

// pausedOnOneCall pauses a new conversation on a new run with one call
// whose fingerprint is fp.
func pausedOnOneCall(t *testing.T, s *redisstore.Store, fp string) (string, []store.Call) {
	t.Helper()
	conv := "C1:" + store.NewRunID()
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	calls := []store.Call{{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: fp, Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}}
	paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
	if err := s.CommitTurn(t.Context(), store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls}); err != nil {
		t.Fatal(err)
	}
	return conv, calls
}

// loseReplyHook runs the first pipeline sent after it is armed, then
// loses the reply of its command at index, as a connection reset after
// Redis ran it would.
type loseReplyHook struct {
	armed *bool
	index int
}

func (loseReplyHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loseReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h loseReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if *h.armed && len(cmds) > h.index {
			*h.armed = false
			cmds[h.index].SetErr(errors.New("read tcp: connection reset by peer"))
		}
		return err
	}
}

// On a single node, when the reply of the script that begins a
// decision's resume is lost after it ran (it took the claim and marked
// the call), DecideBegin asks for that attempt's claim again: the caller
// gets the claim and the call to run, not a claim that lapses with the
// call marked as running and never run.
func TestDecisionWhoseResumeReplyIsLostStillBeginsIt(t *testing.T) {
	_, _, c, s := decisionPipelineStore(t)
	ctx := t.Context()
	conv, calls := pausedOnOneCall(t, s, "fp0")
	// A first decision elsewhere loads the scripts, so that the one
	// under test runs in its pipeline.
	warmConv, warm := pausedOnOneCall(t, s, "fpw")
	if _, _, _, err := s.DecideBegin(ctx, warm[0].ID, "fpw", store.Decision{Kind: "approve", Decider: "UA"}, store.Effects{},
		store.ResumeBegin{Conversation: warmConv, Lease: store.TurnLease(warmConv), Owner: "w", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	armed := true
	c.AddHook(loseReplyHook{armed: &armed, index: 1})
	begin := store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Nonce: "n1"}
	_, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, "fp0", store.Decision{Kind: "approve", Decider: "UA"}, store.Effects{}, begin)
	if armed {
		t.Fatal("the decision was not sent as a pipeline")
	}
	if err != nil || !complete || !rs.Claimed || rs.Started != calls[0].ID {
		t.Fatalf("DecideBegin with its resume's reply lost = complete %v, claimed %v, started %q, %v; want complete, claimed, %s started", complete, rs.Claimed, rs.Started, err, calls[0].ID)
	}
	if rs.Calls[0].Executing {
		t.Errorf("the started call is shown executing, want it as it was before the mark")
	}
}

// loseRepliesHook runs each of the next n pipelines holding a script whose
// first key is key, then loses their replies, as a connection reset after
// Redis ran them would.
type loseRepliesHook struct {
	key string
	n   *atomic.Int32
}

func (loseRepliesHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loseRepliesHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h loseRepliesHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		held := slices.ContainsFunc(cmds, func(c redis.Cmder) bool {
			args := c.Args()
			return strings.HasPrefix(fmt.Sprint(args[0]), "eval") && len(args) > 3 && args[3] == h.key
		})
		if held && h.n.Add(-1) >= 0 {
			lost := errors.New("read tcp: connection reset by peer")
			for _, c := range cmds {
				c.SetErr(lost)
			}
			return lost
		}
		return err
	}
}

// On Redis Cluster, when the reply of the step that begins a decision's
// resume (the run's claim and its call's mark) is lost after it ran, and
// lost again when asked again, DecideBegin fails as a step whose answer
// was lost, not as a decision whose effects are missing: its caller then
// asks for that attempt's claim until the store answers, and finds the
// claim, and the call to run, instead of a call marked as running that
// nothing runs.
func TestClusterDecisionWhoseResumeAnswerIsLost(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	prefix := newPrefix(t, u)
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	conv, calls := pausedOnOneCall(t, s, "fp0")
	var n atomic.Int32
	n.Store(2) // the step, and its ask again
	c.AddHook(loseRepliesHook{key: prefix + ":run:{" + store.RunOf(calls[0].ID) + "}", n: &n})
	begin := store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Nonce: "n1"}
	d := store.Decision{Kind: "approve", Decider: "UA", Attempt: "n1"}
	_, _, rs, err := s.DecideBegin(ctx, calls[0].ID, "fp0", d, store.Effects{}, begin)
	if n.Load() > 0 {
		t.Fatalf("the resume's step was sent %d times, want 2", 2-n.Load())
	}
	if err == nil || errors.Is(err, store.ErrEffects) || rs.Claimed {
		t.Fatalf("DecideBegin with its resume's answer lost twice = claimed %v, %v; want an error that is not the effects'", rs.Claimed, err)
	}
	begin.Again = true
	again, err := s.BeginResume(ctx, store.RunOf(calls[0].ID), begin)
	if err != nil || !again.Claimed || again.Started != calls[0].ID {
		t.Errorf("BeginResume of the same attempt once the store answers = claimed %v, started %q, %v; want the claim and %s to run", again.Claimed, again.Started, err, calls[0].ID)
	}
}

// A decision sent again by the client after its reply was cut (go-redis
// resends a command or pipeline whose reply an EOF or a read time-out
// lost) is answered as the first sending recorded it: complete, with the
// resume that sending claimed, not "already decided" with the claim and
// the marked call stranded. Another sending, even of a like decision by
// the same person at the same time, still finds it decided.
func TestDecisionSentAgainIsAnsweredAsRecorded(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			t.Cleanup(func() { _ = s.Close() })
			ctx := t.Context()
			conv, calls := pausedOnOneCall(t, s, "fp0")
			d := store.Decision{Kind: "approve", Decider: "UA", At: time.Now(), Attempt: "n1"}
			begin := store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Nonce: "n1"}
			fx := store.Effects{Audit: store.AuditEntry{Actor: "UA", Action: "decide", CallID: calls[0].ID}}
			if _, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, "fp0", d, fx, begin); err != nil || !complete || !rs.Claimed {
				t.Fatalf("DecideBegin = complete %v, claimed %v, %v; want both", complete, rs.Claimed, err)
			}
			got, complete, rs, err := s.DecideBegin(ctx, calls[0].ID, "fp0", d, fx, begin)
			if err != nil || !complete || !rs.Claimed || rs.Started != calls[0].ID || got.Status != store.Decided {
				t.Fatalf("the same DecideBegin sent again = %v complete %v, claimed %v, started %q, %v; want it answered as recorded", got.Status, complete, rs.Claimed, rs.Started, err)
			}
			other := store.Decision{Kind: "approve", Decider: "UA", At: d.At, Attempt: "n2"}
			if _, _, _, err := s.DecideBegin(ctx, calls[0].ID, "fp0", other, store.Effects{}, begin); !errors.Is(err, store.ErrAlreadyDecided) {
				t.Errorf("another sending of a like decision = %v, want ErrAlreadyDecided", err)
			}
		})
	}
}

// sendTwiceHook sends the first script run for a key containing key twice,
// as go-redis does when the first reply is lost, and keeps the second
// reply.
type sendTwiceHook struct {
	armed *bool
	key   string
}

func (sendTwiceHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h sendTwiceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fire(cmd) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook sends a pipeline that holds the script twice (a
// Cluster sends a decision beside its run's listing).
func (h sendTwiceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.fire) {
			if err := next(ctx, cmds); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// fire reports whether cmd is the script on h.key to send twice, while
// armed, and disarms it.
func (h sendTwiceHook) fire(cmd redis.Cmder) bool {
	args := cmd.Args()
	if !*h.armed || len(args) <= 3 || !strings.HasPrefix(fmt.Sprint(args[0]), "eval") || !strings.Contains(fmt.Sprint(args[3]), h.key) {
		return false
	}
	*h.armed = false
	return true
}

// BeginExecution sent again by the client after its reply was lost is
// answered as its first sending was: the call is this caller's to run, not
// marked as started by someone else and never run.
func TestBeginExecutionSentAgainIsAnsweredAsRecorded(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		decided := func() store.Call {
			_, calls := pausedOnOneCall(t, s, "fp0")
			if _, _, err := s.Decide(ctx, calls[0].ID, "fp0", store.Decision{Kind: "approve", Decider: "UA", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			return calls[0]
		}
		// The script is loaded first, so that the sending under test
		// is one EVALSHA.
		if _, err := s.BeginExecution(ctx, decided().ID, ""); err != nil {
			t.Fatal(err)
		}
		call := decided()
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: call.ID})
		first, err := s.BeginExecution(ctx, call.ID, "")
		if armed {
			t.Fatal("BeginExecution was not sent")
		}
		if err != nil || !first {
			t.Fatalf("BeginExecution sent twice = %v, %v; want it first", first, err)
		}
		if again, err := s.BeginExecution(ctx, call.ID, ""); err != nil || again {
			t.Errorf("another BeginExecution = %v, %v; want false", again, err)
		}
	})
}

// ClaimReminder sent again by the client after its reply was lost is
// answered as its first sending was: the reminder is this caller's to
// send, not claimed by someone else and never sent.
func TestClaimReminderSentAgainIsAnsweredAsRecorded(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		reminded := func() store.Call {
			conv := "C1:" + store.NewRunID()
			r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
			calls := []store.Call{{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour), RemindAt: time.Now()}}
			paused := store.Conversation{State: []byte(`{}`), PausedRun: r.ID}
			if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls}); err != nil {
				t.Fatal(err)
			}
			return calls[0]
		}
		if _, err := s.ClaimReminder(ctx, reminded().ID, 1, time.Time{}); err != nil { // loads the script
			t.Fatal(err)
		}
		call := reminded()
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: call.ID})
		ok, err := s.ClaimReminder(ctx, call.ID, 1, time.Now().Add(time.Hour))
		if armed {
			t.Fatal("ClaimReminder was not sent")
		}
		if err != nil || !ok {
			t.Fatalf("ClaimReminder sent twice = %v, %v; want it claimed", ok, err)
		}
		if again, err := s.ClaimReminder(ctx, call.ID, 1, time.Now().Add(time.Hour)); err != nil || again {
			t.Errorf("another ClaimReminder of the same reminder = %v, %v; want false", again, err)
		}
	})
}

// An approval sent again by the client after its reply was lost is
// answered as its first sending was: counted, or complete, not refused as
// a duplicate or as decided by someone else.
func TestApprovalSentAgainIsAnsweredAsRecorded(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		approve := func(call store.Call, who string) (store.Call, bool, error) {
			now := time.Now()
			return s.ApproveAudited(ctx, call.ID, "fp0", store.Approval{Approver: who, At: now}, nil, nil, 2,
				store.Decision{Kind: "approve", Decider: who, At: now}, store.Effects{Audit: store.AuditEntry{Actor: who, Action: "decide", CallID: call.ID}})
		}
		_, warm := pausedOnOneCall(t, s, "fp0")
		if _, _, err := approve(warm[0], "UA"); err != nil { // loads the script
			t.Fatal(err)
		}
		_, calls := pausedOnOneCall(t, s, "fp0")
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: calls[0].ID})
		got, complete, err := approve(calls[0], "UA")
		if armed {
			t.Fatal("the approval was not sent")
		}
		if err != nil || complete || got.Status != store.Pending {
			t.Fatalf("the first approval sent twice = %s complete %v, %v; want counted", got.Status, complete, err)
		}
		armed = true
		got, complete, err = approve(calls[0], "UB")
		if err != nil || !complete || got.Status != store.Decided {
			t.Fatalf("the second approval sent twice = %s complete %v, %v; want it to complete the step", got.Status, complete, err)
		}
		if _, _, err := approve(calls[0], "UC"); !errors.Is(err, store.ErrAlreadyDecided) {
			t.Errorf("another approval = %v, want ErrAlreadyDecided", err)
		}
	})
}

// sendPipelineTwiceHook sends the first pipeline whose commands name key
// twice, as go-redis does when the first reply is lost, and keeps the
// second replies.
type sendPipelineTwiceHook struct {
	armed *bool
	key   string
}

func (sendPipelineTwiceHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (sendPipelineTwiceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h sendPipelineTwiceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if *h.armed && slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return strings.Contains(fmt.Sprint(c.Args()), h.key) }) {
			*h.armed = false
			if err := next(ctx, cmds); err != nil {
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// A commit sent again by the client after its reply was lost is answered
// as its first sending was: applied, not refused as not held because the
// first sending released the lease.
func TestCommitSentAgainIsAnsweredAsApplied(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		for _, finish := range []bool{false, true} {
			conv, calls := pausedOnOneCall(t, s, "fp0")
			if _, err := s.BeginTurn(ctx, conv, "a", time.Minute); err != nil {
				t.Fatal(err)
			}
			commit := store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{"done":true}`)}, Answer: true, Holder: "a", Release: "a"}
			if finish {
				commit.Finish = store.RunOf(calls[0].ID)
			}
			armed := true
			c.AddHook(sendTwiceHook{armed: &armed, key: conv})
			c.AddHook(sendPipelineTwiceHook{armed: &armed, key: conv})
			err := s.CommitTurn(ctx, commit)
			if armed {
				t.Fatal("the commit was not sent")
			}
			if err != nil {
				t.Errorf("a commit (finishing a run: %v) sent twice = %v, want it applied", finish, err)
			}
			if got, err := s.LoadConversation(ctx, conv); err != nil || string(got.State) != `{"done":true}` {
				t.Errorf("the conversation after the commit = %s, %v", got.State, err)
			}
		}
		// A resume's commit that leaves queued messages answers
		// nothing, so the conversation stays listed as the decision
		// listed it; the same commit sent again keeps it listed too.
		conv, calls := pausedOnOneCall(t, s, "fp0")
		if _, _, err := s.DecideAudited(ctx, calls[0].ID, "fp0", store.Decision{Kind: "approve", Decider: "UA", At: time.Now()}, store.Effects{Unanswered: conv}); err != nil && !errors.Is(err, store.ErrEffects) {
			t.Fatal(err)
		}
		if _, err := s.BeginTurn(ctx, conv, "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: conv})
		c.AddHook(sendPipelineTwiceHook{armed: &armed, key: conv})
		queued := store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{"queued":1}`)}, Finish: store.RunOf(calls[0].ID), Holder: "a"}
		if err := s.CommitTurn(ctx, queued); err != nil {
			t.Fatalf("a commit leaving queued messages, sent twice = %v", err)
		}
		keys, err := s.Unanswered(ctx, time.Now().Add(time.Hour), 0, 0)
		if err != nil || !slices.Contains(keys, conv) {
			t.Errorf("Unanswered after a commit that answered nothing, sent twice = %q, %v; want %s listed", keys, err, conv)
		}
	})
}

// onNodeAndCluster runs f on a store of one Redis node and on one of the
// Cluster, each with its client, to add hooks to.
func onNodeAndCluster(t *testing.T, f func(t *testing.T, c redis.UniversalClient, s *redisstore.Store)) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			c, err := redisstore.NewClient(topo.url)
			if err != nil {
				t.Fatal(err)
			}
			s := redisstore.NewFromClient(c, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			t.Cleanup(func() { _ = s.Close() })
			f(t, c, s)
		})
	}
}

// A message recorded by a sending whose reply was lost, sent again by the
// client, is answered as its first sending was: accepted, with its turn
// begun, not a duplicate with no turn (which left it to a takeover once
// the lease lapsed).
func TestAcceptSentAgainIsAnsweredAsRecorded(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		conv := "C1:" + store.NewRunID()
		m := store.Inbound{User: "U1", Channel: "C1", Text: "deploy", EventID: "Ev" + store.NewRunID(), MsgID: "C1:" + store.NewRunID()}
		// A first message loads the scripts, so that those under test are
		// sent by their SHA.
		if _, _, _, err := s.AcceptBegin(ctx, "C1:"+store.NewRunID(), store.Inbound{User: "U1", Channel: "C1", Text: "warm", EventID: "Ew" + store.NewRunID()}, false, "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: conv})
		c.AddHook(sendPipelineTwiceHook{armed: &armed, key: conv})
		got, acc, begun, err := s.AcceptBegin(ctx, conv, m, false, "a", time.Minute)
		if armed {
			t.Fatal("the message was not sent")
		}
		if err != nil || acc != store.Accepted || !begun.Acquired || len(begun.Inbox) != 1 || begun.Inbox[0].Seq != got.Seq {
			t.Fatalf("AcceptBegin sent twice = %s, begun %+v, %v; want it accepted with its turn begun and one message", acc, begun, err)
		}
		// Another copy of the message is still a duplicate.
		other := m
		other.EventID = "Ev" + store.NewRunID()
		if _, acc, _, err := s.AcceptBegin(ctx, conv, other, false, "a", time.Minute); err != nil || acc != store.Duplicate {
			t.Errorf("another copy of the message = %s, %v; want a duplicate", acc, err)
		}
	})
}

// failOnce fails, once, the part of a pipeline a Cluster node gets when
// it holds a command match picks (its node is down for a moment, as in a
// failover).
type failOnce struct {
	match  func(redis.Cmder) bool
	failed *atomic.Bool
}

func (failOnce) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (failOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if h.match(c) && h.failed.CompareAndSwap(false, true) {
				err := errors.New("node unreachable")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// on matches a command named name whose first key is key.
func on(name, key string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		args := c.Args()
		return c.Name() == name && len(args) > 1 && args[1] == key
	}
}

// auditPush picks the command that appends an entry to the audit log
// key: a script whose first key it is (a commit's entry, added once for
// its sending).
func auditPush(key string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		args := c.Args()
		return (c.Name() == "eval" || c.Name() == "evalsha") && len(args) > 3 && args[3] == key
	}
}

// failingCluster is a store on the local Redis Cluster, under prefix,
// whose nodes fail once the part of a pipeline with a command that
// matchOf(prefix) picks; failed is set then.
func failingCluster(t *testing.T, matchOf func(prefix string) func(redis.Cmder) bool) (s *redisstore.Store, cc *redis.ClusterClient, prefix string, failed *atomic.Bool) {
	t.Helper()
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	prefix = newPrefix(t, u)
	match := matchOf(prefix)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	cc = c.(*redis.ClusterClient)
	failed = &atomic.Bool{}
	hook := failOnce{match: match, failed: failed}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
	if err := cc.ForEachShard(t.Context(), func(_ context.Context, n *redis.Client) error { n.AddHook(hook); return nil }); err != nil {
		t.Fatal(err)
	}
	s = redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	return s, cc, prefix, failed
}

// convOffNode returns a conversation key whose keys are on another node
// of the local Cluster than key.
func convOffNode(t *testing.T, cc *redis.ClusterClient, prefix, key string) string {
	t.Helper()
	for i := 0; ; i++ {
		k := fmt.Sprintf("C1:%d.%s", i, store.NewRunID())
		if !sameNode(t, cc, prefix+":conv:{conv:"+k+"}", key) {
			return k
		}
	}
}

// On Redis Cluster a pause's pipeline is split by node, each part applied
// on its own: when the node of the listings fails while the
// conversation's is made, the listings are written again, so the paused
// call still expires and is listed as pending.
func TestPauseWhoseListingsFailedIsListed(t *testing.T) {
	s, cc, prefix, failed := failingCluster(t, func(prefix string) func(redis.Cmder) bool { return on("zadd", prefix+":due") })
	ctx := t.Context()
	conv := convOffNode(t, cc, prefix, prefix+":due")
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
	err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{}`), PausedRun: r.ID}, Run: &r, Calls: []store.Call{call}})
	if !failed.Load() {
		t.Fatal("the listings' part of the pipeline was not failed")
	}
	if err != nil {
		t.Fatalf("CommitTurn whose listings' part failed once = %v, want nil once written again", err)
	}
	if got, err := s.Due(ctx, call.ExpiresAt.Add(time.Second), 0); err != nil || len(got) != 1 {
		t.Errorf("Due after the expiry = %d calls, %v; want the paused call", len(got), err)
	}
	if got, err := s.Pending(ctx, store.Filter{}); err != nil || len(got) != 1 {
		t.Errorf("Pending = %d calls, %v; want the paused call", len(got), err)
	}
}

// On Redis Cluster the audit entries of a commit go to the audit log's
// node beside the conversation's script: when that part fails while the
// rest is made, the commit stands and the entries are written again, once.
func TestCommitWhoseAuditPartFailedIsAudited(t *testing.T) {
	for _, pause := range []bool{true, false} {
		t.Run(map[bool]string{true: "pause", false: "answer"}[pause], func(t *testing.T) {
			s, cc, prefix, failed := failingCluster(t, func(prefix string) func(redis.Cmder) bool { return auditPush(prefix + ":audit") })
			ctx := t.Context()
			conv := convOffNode(t, cc, prefix, prefix+":audit")
			commit := store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{}`)}, Answer: true,
				Audit: []store.AuditEntry{{Actor: "U1", Action: "request", CallID: "c1"}, {Actor: "U1", Action: "execute", CallID: "c1"}}}
			if pause {
				r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
				call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
				commit.Conversation.PausedRun, commit.Run, commit.Calls, commit.Answer = r.ID, &r, []store.Call{call}, false
			}
			err := s.CommitTurn(ctx, commit)
			if !failed.Load() {
				t.Fatal("the audit log's part of the pipeline was not failed")
			}
			if err != nil {
				t.Fatalf("CommitTurn whose audit part failed once = %v, want nil once written again", err)
			}
			log, err := s.AuditLog(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range log {
				got = append(got, e.Action)
			}
			if want := []string{"execute", "request"}; !slices.Equal(got, want) {
				t.Errorf("audit log = %q, want %q (newest first), once each", got, want)
			}
		})
	}
}

// A commit whose conversation's script fails while its audit entries were
// added beside it takes them back: its writer keeps them for its next
// write, which would add them a second time.
func TestFailedCommitTakesItsAuditEntriesBack(t *testing.T) {
	var conv string
	s, cc, prefix, failed := failingCluster(t, func(prefix string) func(redis.Cmder) bool {
		return func(c redis.Cmder) bool {
			return (c.Name() == "evalsha" || c.Name() == "eval") && conv != "" && slices.ContainsFunc(c.Args(), func(a any) bool {
				k, _ := a.(string)
				return strings.Contains(k, conv)
			})
		}
	})
	ctx := t.Context()
	conv = convOffNode(t, cc, prefix, prefix+":audit")
	audit := []store.AuditEntry{{Actor: "U1", Action: "execute", CallID: "c1"}}
	err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{}`)}, Answer: true, Audit: audit})
	if !failed.Load() {
		t.Fatal("the conversation's part of the pipeline was not failed")
	}
	if err == nil {
		t.Fatal("CommitTurn whose conversation's part failed = nil, want its error")
	}
	if log, err := s.AuditLog(ctx, 0); err != nil || len(log) != 0 {
		t.Errorf("audit log after the failed commit = %+v, %v; want its entries taken back", log, err)
	}
}

// On Redis Cluster a decision's run is moved to the decision's time in
// the runs index beside the decision's script, on another node: when that
// node fails while the decision is made, the move is written again, so
// the stalled-resume sweep finds the run at once if its resume is lost,
// not once its expiry passes.
func TestDecisionWhoseRunListingFailedIsListed(t *testing.T) {
	for _, begin := range []bool{false, true} {
		t.Run(fmt.Sprintf("begin resume %v", begin), func(t *testing.T) {
			s, cc, prefix, failed := failingCluster(t, func(prefix string) func(redis.Cmder) bool {
				listing := on("zadd", prefix+":runs")
				return func(c redis.Cmder) bool { return listing(c) && c.Args()[2] == "lt" }
			})
			ctx := t.Context()
			r, calls := testRun()
			for sameNode(t, cc, prefix+":run:{"+r.ID+"}", prefix+":runs") {
				r, calls = testRun()
			}
			r.Conversation = convOffNode(t, cc, prefix, prefix+":runs")
			if err := s.CreateRun(ctx, r, calls); err != nil {
				t.Fatalf("CreateRun: %v", err)
			}
			d := store.Decision{Kind: "approve", Decider: "U1"}
			var err error
			var complete bool
			if begin {
				rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
				var rs store.ResumeStart
				_, complete, rs, err = s.DecideBegin(ctx, calls[0].ID, "fp", d, store.Effects{}, rb)
				if err == nil && !rs.Claimed {
					t.Errorf("DecideBegin claimed no resume")
				}
			} else {
				_, complete, err = s.DecideAudited(ctx, calls[0].ID, "fp", d, store.Effects{})
			}
			if !failed.Load() {
				t.Fatal("the listing's part of the pipeline was not failed")
			}
			if err != nil || !complete {
				t.Fatalf("decision whose listing's part failed once = complete %v, %v; want complete, nil once written again", complete, err)
			}
			if at, err := cc.ZScore(ctx, prefix+":runs", r.ID).Result(); err != nil || at > float64(time.Now().UnixMilli()) {
				t.Errorf("run %s in the runs index at %v, %v; want it listed by now", r.ID, at, err)
			}
			if !begin {
				if ids, err := s.Stalled(ctx, 0); err != nil || !slices.Equal(ids, []string{r.ID}) {
					t.Errorf("Stalled = %v, %v; want [%s]", ids, err, r.ID)
				}
			}
		})
	}
}
