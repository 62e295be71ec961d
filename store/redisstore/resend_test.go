package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// resendAfterHook runs the first script sent after it is armed whose first
// key names key, then runs between, then sends the script again: the
// client's resending after a lost reply, with another replica's step in
// between.
type resendAfterHook struct {
	armed   *bool
	key     string
	between func()
	// on, if set, tells the script in place of key.
	on func(redis.Cmder) bool
}

func (resendAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h resendAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.matches(cmd) {
			if err := next(ctx, cmd); err != nil {
				// A node that had not loaded the script (a Cluster's
				// other node) refuses its EVALSHA: the EVAL that follows
				// is the sending.
				return err
			}
			*h.armed = false
			h.between()
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook does the same with a pipeline that holds the script
// (a Cluster sends a decision beside its run's listing).
func (h resendAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, h.matches) {
			if err := next(ctx, cmds); err != nil {
				return err // as above
			}
			*h.armed = false
			h.between()
		}
		return next(ctx, cmds)
	}
}

// matches reports whether cmd is, while armed, a script whose first key
// names h.key.
func (h resendAfterHook) matches(cmd redis.Cmder) bool {
	if h.on != nil {
		return *h.armed && h.on(cmd)
	}
	args := cmd.Args()
	return *h.armed && len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[0]), "eval") && strings.Contains(fmt.Sprint(args[3]), h.key)
}

// An approval counted (1 of 2) whose reply is lost, sent again after
// another replica cancelled the call (completing the step), is not
// answered as the decision that completed the step: exactly one decision
// of a run is complete.
func TestCountedApprovalSentAgainAfterACancel(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			c, s, other, callID := approvalResentPair(t, topo.url)
			ctx := t.Context()
			var cancelComplete bool
			armed := true
			c.AddHook(resendAfterHook{armed: &armed, key: store.RunOf(callID), between: func() {
				_, complete, err := other.Decide(ctx, callID, "", store.Decision{Kind: "cancel", Decider: "U9", At: time.Now()})
				if err != nil {
					t.Errorf("cancel by another replica: %v", err)
				}
				cancelComplete = complete
			}})
			got, complete, err := s.Approve(ctx, callID, "fp0", store.Approval{Approver: "U1"}, nil, 2, store.Decision{Kind: "approve", Decider: "U1"})
			if armed {
				t.Fatal("the approval was not sent")
			}
			if !cancelComplete || complete {
				t.Errorf("cancel complete %v, the approval sent again complete %v (%s, %v); want only the cancel", cancelComplete, complete, got.Status, err)
			}
			if err == nil && got.Status != store.Pending {
				t.Errorf("the approval sent again after the cancel = %s, nil; want it counted or refused", got.Status)
			}
		})
	}
}

// A FinishRun sent again after its reply was lost (the script ran, and
// finds the run finished the second time) still cleans up after it: the
// conversation is no longer paused on the run, and the run's calls leave
// the indexes.
func TestFinishRunSentAgainCleansUp(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		// Loads the scripts, so the hook sees EVALSHA once.
		_, warm := pausedOnOneCall(t, s, "fpw")
		if err := s.FinishRun(ctx, store.RunOf(warm[0].ID)); err != nil {
			t.Fatal(err)
		}
		conv, calls := pausedOnOneCall(t, s, "fp0")
		runID := store.RunOf(calls[0].ID)
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: "{" + runID + "}"})
		if err := s.FinishRun(ctx, runID); err != nil {
			t.Fatal(err)
		}
		if armed {
			t.Fatal("FinishRun was not sent twice")
		}
		if got, err := s.LoadConversation(ctx, conv); err != nil || got.PausedRun == runID {
			t.Errorf("after FinishRun sent twice the conversation is paused on %q, %v; want it cleared", got.PausedRun, err)
		}
		for _, key := range s.IndexKeys() {
			n, err := c.ZScore(ctx, key, calls[0].ID).Result()
			if !errors.Is(err, redis.Nil) {
				t.Errorf("the finished run's call is still in %s (%v, %v)", key, n, err)
			}
		}
	})
}

// CreateRun sent again after its reply was lost (the script ran, and finds
// the run there the second time) reports the run created, not
// ErrRunExists: on Redis Cluster a pause commits through it, and failing
// there withdrew the cards of a run that was stored.
func TestCreateRunSentAgainIsCreated(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		// Loads the script, so the hook sees EVALSHA once.
		w := store.Run{ID: store.NewRunID(), Conversation: "C1:" + store.NewRunID(), Requester: "U1"}
		if err := s.CreateRun(ctx, w, []store.Call{{ID: store.CallID(w.ID, 0), Fingerprint: "f", ExpiresAt: time.Now().Add(time.Hour)}}); err != nil {
			t.Fatal(err)
		}
		r := store.Run{ID: store.NewRunID(), Conversation: "C1:" + store.NewRunID(), Requester: "U1"}
		call := store.Call{ID: store.CallID(r.ID, 0), Fingerprint: "f", ExpiresAt: time.Now().Add(time.Hour)}
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: r.ID})
		if err := s.CreateRun(ctx, r, []store.Call{call}); err != nil {
			t.Errorf("CreateRun sent twice = %v, want it created", err)
		}
		if armed {
			t.Fatal("CreateRun was not sent twice")
		}
		if err := s.CreateRun(ctx, r, []store.Call{call}); !errors.Is(err, store.ErrRunExists) {
			t.Errorf("another CreateRun of the run = %v, want ErrRunExists", err)
		}
		if got, err := s.Pending(ctx, store.Filter{}); err != nil || !slices.ContainsFunc(got, func(c store.Call) bool { return c.ID == call.ID }) {
			t.Errorf("Pending after CreateRun sent twice lists %d calls, %v; want the run's call", len(got), err)
		}
	})
}

// A compare-and-set PutRecord sent again after its reply was lost is
// answered with the version it wrote, not as a conflict with itself, and
// counts as one change; a delete leaves none of the record's fields.
func TestPutRecordSentAgain(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		// Loads the script, so the hook sees EVALSHA once.
		if _, err := s.PutRecord(ctx, store.Record{Kind: "warm", ID: "w", Data: []byte(`{}`)}, -1); err != nil {
			t.Fatal(err)
		}
		armed := true
		c.AddHook(sendTwiceHook{armed: &armed, key: "policy_rule"})
		got, err := s.PutRecord(ctx, store.Record{Kind: "policy_rule", ID: "r1", Data: []byte(`{"x":1}`)}, 0)
		if armed {
			t.Fatal("PutRecord was not sent twice")
		}
		if err != nil || got.Version != 1 {
			t.Errorf("PutRecord sent twice = version %d, %v; want version 1", got.Version, err)
		}
		if _, err := s.PutRecord(ctx, store.Record{Kind: "policy_rule", ID: "r1", Data: []byte(`{"x":2}`)}, 0); !errors.Is(err, store.ErrConflict) {
			t.Errorf("another PutRecord expecting version 0 = %v, want ErrConflict", err)
		}
		if err := s.DeleteRecord(ctx, "policy_rule", "r1"); err != nil {
			t.Fatal(err)
		}
		if recs, err := s.Records(ctx, "policy_rule"); err != nil || len(recs) != 0 {
			t.Errorf("Records after the delete = %v, %v; want none", recs, err)
		}
		if got, err := s.PutRecord(ctx, store.Record{Kind: "policy_rule", ID: "r1", Data: []byte(`{"x":3}`)}, 0); err != nil || got.Version != 1 {
			t.Errorf("PutRecord after the delete = version %d, %v; want a new record at version 1", got.Version, err)
		}
	})
}

// resendPipelineAfterHook is resendAfterHook for a pipeline: the first
// pipeline sent after it is armed that holds a script whose first key
// names key runs, then between runs, then the pipeline is sent again.
type resendPipelineAfterHook struct {
	armed   *atomic.Bool // read by the goroutines of a Cluster's nodes at once
	key     string
	between func()
}

func (resendPipelineAfterHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (resendPipelineAfterHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h resendPipelineAfterHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.armed.Load() && slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool {
			args := cmd.Args()
			return len(args) > 3 && strings.HasPrefix(fmt.Sprint(args[0]), "eval") && strings.Contains(fmt.Sprint(args[3]), h.key)
		}) && h.armed.CompareAndSwap(true, false) {
			if err := next(ctx, cmds); err != nil {
				return err
			}
			h.between()
		}
		return next(ctx, cmds)
	}
}

// A decision conditional on the records' version whose reply is lost,
// sent again after the records changed, is answered as the decision it
// is, recorded, with the resume it began: not as refused for stale
// records (which would leave its claim and its started call to no one).
func TestConditionalDecisionSentAgainAfterARecordChange(t *testing.T) {
	u := redisURL(t)
	if _, err := redis.ParseURL(u); err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	ctx := t.Context()
	c, s, other := hookedPair(t, u)
	r, call, version := versionedRun(t, s)
	var armed atomic.Bool
	armed.Store(true)
	c.AddHook(resendPipelineAfterHook{armed: &armed, key: call.ID, between: func() {
		if _, err := other.PutRecord(ctx, store.Record{Kind: "rules", ID: "r1", Data: []byte(`{}`)}, -1); err != nil {
			t.Errorf("PutRecord between the sendings: %v", err)
		}
	}})
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute,
		Start: []string{"approve"}, Nonce: "attempt-1"}
	fx := store.Effects{Condition: store.Condition{IfRecords: version}}
	got, complete, rs, err := s.DecideBegin(ctx, call.ID, call.Fingerprint, store.Decision{Kind: "approve", Decider: "U1", Attempt: "attempt-1"}, fx, rb)
	if armed.Load() {
		t.Fatal("the decision was not sent again")
	}
	if err != nil || !complete || got.Status != store.Decided || !rs.Claimed || rs.Started != call.ID {
		t.Fatalf("DecideBegin sent again after a record change = %s, complete %v, claimed %v, started %q, %v; want decided, complete, its resume begun with the call started", got.Status, complete, rs.Claimed, rs.Started, err)
	}
}

// A result saved whose reply is lost, sent again by the client, is
// answered as saved, with its audit entry written once: on a single node
// the script sent again finds its own sending's result; on a Cluster the
// node of the call gets its part of the pipeline again, with the entry
// beside it when the audit log is on that node too.
func TestSavedResultSentAgainIsAuditedOnce(t *testing.T) {
	for _, topo := range topologies(t) {
		for _, logBeside := range []bool{false, true} {
			name := topo.name
			if logBeside {
				name += "/log on the call's node"
			}
			t.Run(name, func(t *testing.T) {
				savedResultSentAgain(t, topo.url, logBeside)
			})
		}
	}
}

func savedResultSentAgain(t *testing.T, url string, logBeside bool) {
	c, s, _ := hookedPair(t, url)
	ctx := t.Context()
	cc, cluster := c.(*redis.ClusterClient)
	if !cluster && logBeside {
		t.Skip("a single node holds every key")
	}
	_, calls := pausedOnOneCall(t, s, "fp0")
	for cluster && sameNode(t, cc, "{"+store.RunOf(calls[0].ID)+"}", s.AuditKey()) != logBeside {
		_, calls = pausedOnOneCall(t, s, "fp0")
	}
	id := calls[0].ID
	if _, _, err := s.Decide(ctx, id, "fp0", store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.BeginExecution(ctx, id, ""); err != nil || !ok {
		t.Fatalf("BeginExecution = %v, %v", ok, err)
	}
	var armed atomic.Bool
	armed.Store(true)
	notSent := armed.Load
	if cluster {
		hook := resendPipelineAfterHook{armed: &armed, key: id, between: func() {}}
		cc.OnNewNode(func(n *redis.Client) { n.AddHook(hook) })
		if err := cc.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error { n.AddHook(hook); return nil }); err != nil {
			t.Fatal(err)
		}
	} else {
		once := true
		c.AddHook(resendAfterHook{armed: &once, key: id, between: func() {}})
		notSent = func() bool { return once }
	}
	entry := store.AuditEntry{Actor: "U2", Action: "execute", CallID: id, Outcome: "ok"}
	if err := s.SaveResult(ctx, id, []byte(`{"content":"done"}`), entry); err != nil {
		t.Fatalf("SaveResult sent again = %v, want nil", err)
	}
	if notSent() {
		t.Fatal("the save was not sent again")
	}
	if got, err := s.GetCall(ctx, id); err != nil || string(got.Result) != `{"content":"done"}` {
		t.Errorf("saved result = %s, %v; want the one sent", got.Result, err)
	}
	log, err := s.AuditLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1 || log[0].CallID != id {
		t.Errorf("audit log = %+v, want the execution's entry once", log)
	}
}

// sameNode reports whether keys a and b are on one node of the local
// Cluster (three primaries, equal slot ranges).
func sameNode(t *testing.T, cc *redis.ClusterClient, a, b string) bool {
	t.Helper()
	sa, err := cc.ClusterKeySlot(t.Context(), a).Result()
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cc.ClusterKeySlot(t.Context(), b).Result()
	if err != nil {
		t.Fatal(err)
	}
	return sa/5461 == sb/5461
}

// setTwiceHook sends the first SET of the key ending in suffix twice, as
// go-redis does when the first reply is lost, and keeps the second reply;
// sent counts the SETs of that key made through it.
type setTwiceHook struct {
	suffix string
	sent   *atomic.Int32
}

func (setTwiceHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h setTwiceHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "set" && len(args) > 1 && strings.HasSuffix(fmt.Sprint(args[1]), h.suffix) && h.sent.Add(1) == 1 {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}
func (setTwiceHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An event recorded by a sending whose reply was lost, sent again by the
// client, is new to its caller, not seen before by someone else.
func TestSeenEventSentAgainIsNew(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		id := "Ev" + store.NewRunID()
		var sent atomic.Int32
		c.AddHook(setTwiceHook{suffix: ":seen:" + id, sent: &sent})
		if first, err := s.SeenEvent(t.Context(), id, time.Minute); err != nil || !first {
			t.Errorf("SeenEvent sent twice = %v, %v; want it new", first, err)
		}
		if sent.Load() != 1 {
			t.Fatal("the event's SET was not sent twice")
		}
		if first, err := s.SeenEvent(t.Context(), id, time.Minute); err != nil || first {
			t.Errorf("another SeenEvent = %v, %v; want it seen", first, err)
		}
	})
}

// approvalResentPair is hookedPair with the approve script loaded through
// s (so the hook sees its EVALSHA once) and one paused call of fingerprint
// fp0, whose id it returns.
func approvalResentPair(t *testing.T, rawURL string) (c redis.UniversalClient, s, other *redisstore.Store, callID string) {
	t.Helper()
	c, s, other = hookedPair(t, rawURL)
	_, warm := pausedOnOneCall(t, s, "fpw")
	if _, _, err := s.Approve(t.Context(), warm[0].ID, "fpw", store.Approval{Approver: "U0"}, nil, 2, store.Decision{Kind: "approve", Decider: "U0"}); err != nil {
		t.Fatal(err)
	}
	_, calls := pausedOnOneCall(t, s, "fp0")
	return c, s, other, calls[0].ID
}

// A stopping resume (A) takes back the mark BeginResume set on its call
// (AbandonExecution). The script runs, its reply is lost, and the client
// sends it again; in between, another replica (B) claims the run, marks
// the call and starts its tool. The second sending leaves B's mark, the
// attempt it names being A's: once B dies mid-run, a third resume (C)
// finds the call started and does not mark it to run a second time.
func TestAbandonSentAgainLeavesAnotherMark(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			c, s, other := hookedPair(t, topo.url)
			// Warm: the abandon script loaded, so the hook sees one sending.
			_, warm := pausedOnOneCall(t, s, "fpw")
			if err := s.AbandonExecution(ctx, warm[0].ID, "warm"); err != nil {
				t.Fatal(err)
			}
			conv, calls := pausedOnOneCall(t, s, "fp0")
			id, runID := calls[0].ID, store.RunOf(calls[0].ID)
			if _, _, err := s.Decide(ctx, id, "fp0", store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			rb := func(owner string) store.ResumeBegin {
				return store.ResumeBegin{Conversation: conv, Owner: owner, TTL: time.Minute, Start: []string{"approve"}, Nonce: owner + "-nonce"}
			}
			a, err := s.BeginResume(ctx, runID, rb("A"))
			if err != nil || !a.Claimed || a.Started != id {
				t.Fatalf("A's BeginResume = %+v, %v; want it claimed with %s marked", a, err, id)
			}
			// A's claim is lost (it lapsed); A stops and takes its mark back.
			if err := s.ReleaseClaim(ctx, runID, "A"); err != nil {
				t.Fatal(err)
			}
			var bStarted string
			armed := true
			c.AddHook(resendAfterHook{armed: &armed, key: id, between: func() {
				b, err := other.BeginResume(ctx, runID, rb("B"))
				if err != nil || !b.Claimed {
					t.Errorf("B's BeginResume = %+v, %v; want it claimed", b, err)
				}
				bStarted = b.Started // B runs the tool now
			}})
			if err := s.AbandonExecution(ctx, id, "A-nonce"); err != nil {
				t.Fatal(err)
			}
			if armed {
				t.Fatal("the abandon was not sent")
			}
			if bStarted != id {
				t.Fatalf("B marked %q, want %s", bStarted, id)
			}
			got, err := other.GetCall(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Executing {
				t.Errorf("after A's abandon was sent again, the call B marked (and is running) is no longer marked")
			}
			// B dies while its tool runs; its claim lapses; C resumes.
			if err := other.ReleaseClaim(ctx, runID, "B"); err != nil {
				t.Fatal(err)
			}
			cs, err := other.BeginResume(ctx, runID, rb("C"))
			if err != nil {
				t.Fatal(err)
			}
			if cs.Started == id {
				t.Errorf("C's BeginResume marked %s to run again: it would run a second time", id)
			}
		})
	}
}
