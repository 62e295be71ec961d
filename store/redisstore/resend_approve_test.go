package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// oneCall creates a run of one call with fingerprint fp, in a
// conversation of its own, and returns the conversation and the call.
func oneCall(t *testing.T, s *redisstore.Store, fp string) (string, store.Call) {
	t.Helper()
	r := store.Run{ID: store.NewRunID(), Requester: "U1", Channel: "C1"}
	r.Conversation = "C1:" + r.ID
	c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: fp, Requester: "U1", Conversation: r.Conversation, ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.CreateRun(t.Context(), r, []store.Call{c}); err != nil {
		t.Fatal(err)
	}
	return r.Conversation, c
}

// approvers lists who approved c, in order.
func approvers(c store.Call) []string {
	var out []string
	for _, a := range c.Approvals {
		out = append(out, a.Approver)
	}
	return out
}

// An approval counted (1 of 2) whose reply is lost, sent again after
// another approval dropped it as stale, is not counted again: counted
// behind the approval that dropped it, it decided the call with an
// approval that no longer counts.
func TestDroppedApprovalSentAgainIsNotCounted(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			c, s, other := hookedPair(t, topo.url)
			ctx := t.Context()
			// Loaded on every node, so the hook sees the script's
			// EVALSHA succeed once.
			if err := redisstore.LoadDecisionScripts(ctx, c); err != nil {
				t.Fatal(err)
			}
			_, call := oneCall(t, s, "fp0")
			id := call.ID
			armed := true
			c.AddHook(resendAfterHook{armed: &armed, key: store.RunOf(id), between: func() {
				got, complete, err := other.ApproveAudited(ctx, id, "fp0", store.Approval{Approver: "U3"}, []string{"U1"}, nil, 2, store.Decision{Kind: "approve", Decider: "U3"}, store.Effects{})
				if err != nil || complete || !slices.Equal(approvers(got), []string{"U3"}) {
					t.Errorf("U3's approval dropping U1's = %v, complete %v, %v; want U3's alone counted", approvers(got), complete, err)
				}
			}})
			got, complete, err := s.Approve(ctx, id, "fp0", store.Approval{Approver: "U1"}, nil, 2, store.Decision{Kind: "approve", Decider: "U1"})
			if armed {
				t.Fatal("the approval was not sent again")
			}
			if complete || !errors.Is(err, store.ErrDuplicateApproval) {
				t.Errorf("U1's approval sent again after it was dropped = %s with %v, complete %v, %v; want ErrDuplicateApproval", got.Status, approvers(got), complete, err)
			}
			if got, err := s.GetCall(ctx, id); err != nil || got.Status != store.Pending || !slices.Equal(approvers(got), []string{"U3"}) {
				t.Errorf("call after U1's approval sent again = %s with %v, %v; want pending with U3's approval alone", got.Status, approvers(got), err)
			}
		})
	}
}

// The same with an approval conditional on the approvals it was judged
// with (approveIf), of 3 needed: the approvals it finds when sent again
// can be those it was judged with once more (U2 approved again, dropping
// U1's approval and its own stale one), and it is still not counted
// again.
func TestDroppedConditionalApprovalSentAgainIsNotCounted(t *testing.T) {
	u := redisURL(t)
	if _, err := redis.ParseURL(u); err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	ctx := t.Context()
	c, s, other := hookedPair(t, u)
	if err := redisstore.LoadDecisionScripts(ctx, c); err != nil {
		t.Fatal(err)
	}
	r, call, version := versionedRun(t, s)
	fp := call.Fingerprint
	u2 := func(drop []string) store.Call {
		got, _, err := other.ApproveAudited(ctx, call.ID, fp, store.Approval{Approver: "U2"}, drop, nil, 3, store.Decision{Kind: "approve", Decider: "U2"}, store.Effects{})
		if err != nil {
			t.Errorf("U2's approval dropping %v: %v", drop, err)
		}
		return got
	}
	u2(nil)
	armed := true
	c.AddHook(resendAfterHook{armed: &armed, key: call.ID, between: func() {
		if got := u2([]string{"U1", "U2"}); !slices.Equal(approvers(got), []string{"U2"}) {
			t.Errorf("U2's approval dropping U1's and its own = %v, want U2's alone", approvers(got))
		}
	}})
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute,
		Start: []string{"approve"}}
	fx := store.Effects{Condition: store.Condition{IfRecords: version, IfApprovers: []string{"U2"}}}
	got, complete, _, err := s.ApproveBegin(ctx, call.ID, fp, store.Approval{Approver: "U1"}, nil, nil, 3, store.Decision{Kind: "approve", Decider: "U1"}, fx, rb)
	if armed {
		t.Fatal("the approval was not sent again")
	}
	if complete || !errors.Is(err, store.ErrDuplicateApproval) {
		t.Errorf("U1's approval sent again after it was dropped = %s with %v, complete %v, %v; want ErrDuplicateApproval", got.Status, approvers(got), complete, err)
	}
	if got, err := s.GetCall(ctx, call.ID); err != nil || got.Status != store.Pending || !slices.Equal(approvers(got), []string{"U2"}) {
		t.Errorf("call after U1's approval sent again = %s with %v, %v; want pending with U2's approval alone", got.Status, approvers(got), err)
	}
}

// A decision or an approval that begins its resume without a lease (the
// caller holds the conversation) takes none: on a single node it took the
// lease of the empty name, one for every conversation, and the next such
// resume of another owner was answered busy.
func TestBeginWithoutLeaseTakesNone(t *testing.T) {
	u := redisURL(t)
	if _, err := redis.ParseURL(u); err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	ctx := t.Context()
	_, s, _ := hookedPair(t, u)
	conv, call := oneCall(t, s, "fp0")
	rb := store.ResumeBegin{Conversation: conv, Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
	_, complete, rs, err := s.DecideBegin(ctx, call.ID, "fp0", store.Decision{Kind: "approve", Decider: "U1"}, store.Effects{}, rb)
	if err != nil || !complete || !rs.Claimed {
		t.Fatalf("DecideBegin without a lease = complete %v, claimed %v, busy %v, %v; want its resume claimed", complete, rs.Claimed, rs.Busy, err)
	}
	conv, call = oneCall(t, s, "fp1")
	rb = store.ResumeBegin{Conversation: conv, Owner: "b", TTL: time.Minute, Start: []string{"approve"}}
	_, complete, rs, err = s.ApproveBegin(ctx, call.ID, "fp1", store.Approval{Approver: "U1"}, nil, nil, 1, store.Decision{Kind: "approve", Decider: "U1"}, store.Effects{}, rb)
	if err != nil || !complete || !rs.Claimed {
		t.Errorf("ApproveBegin without a lease, by another owner = complete %v, claimed %v, busy %v, %v; want its resume claimed", complete, rs.Claimed, rs.Busy, err)
	}
	if ok, err := s.AcquireLease(ctx, "", "c", time.Minute); err != nil || !ok {
		t.Errorf("AcquireLease of the empty name = %v, %v; want it free", ok, err)
	}
}

// loseScriptReplyHook loses the reply of the first script sent after it is
// armed whose first key names key, once Redis ran it: a reply cut after
// the client's every sending.
type loseScriptReplyHook struct {
	armed *bool
	key   string
}

func (loseScriptReplyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h loseScriptReplyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.lose(cmd)
		return err
	}
}
func (h loseScriptReplyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.lose(cmd)
		}
		return err
	}
}

// lose loses the reply of cmd if it is the script, and it ran: a script
// not loaded (NOSCRIPT) is sent again, and that sending's reply is lost.
func (h loseScriptReplyHook) lose(cmd redis.Cmder) {
	args := cmd.Args()
	if !*h.armed || len(args) <= 3 || !strings.HasPrefix(fmt.Sprint(args[0]), "eval") || !strings.Contains(fmt.Sprint(args[3]), h.key) ||
		redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		return
	}
	*h.armed = false
	cmd.SetErr(errors.New("read tcp: connection reset by peer"))
}

// A SaveResult whose script's reply is lost after it saved the result,
// made again with the same entry (as a turn's end does with a save that
// failed), is answered as saved, with the execution's entry in the log
// once: on a Cluster the first took its entry back, not knowing whether it
// had saved, and the second found the result saved and took its own back
// too, leaving the execution unaudited.
func TestSaveResultMadeAgainAfterALostReplyIsAudited(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	c, s, _ := hookedPair(t, u)
	ctx := t.Context()
	cc := c.(*redis.ClusterClient)
	_, call := oneCall(t, s, "fp0")
	for sameNode(t, cc, "{"+store.RunOf(call.ID)+"}", s.AuditKey()) {
		// The entry beside the script is on another node: the script's
		// reply is lost where the entry's is not.
		_, call = oneCall(t, s, "fp0")
	}
	id := call.ID
	if _, _, err := s.Decide(ctx, id, "fp0", store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.BeginExecution(ctx, id, ""); err != nil || !ok {
		t.Fatalf("BeginExecution = %v, %v", ok, err)
	}
	// Loaded, so that the script goes in the pipeline: the client would
	// send its NOSCRIPT fallback again by itself after the lost reply.
	if err := redisstore.LoadSaveResultScript(ctx, c); err != nil {
		t.Fatal(err)
	}
	armed := true
	c.AddHook(loseScriptReplyHook{armed: &armed, key: id})
	result := []byte(`{"content":"done"}`)
	entry := store.AuditEntry{At: time.Now(), Actor: "U2", Action: "execute", CallID: id, Outcome: "ok"}
	if err := s.SaveResult(ctx, id, result, entry); err == nil {
		t.Error("SaveResult whose reply was lost = nil, want its error")
	}
	if armed {
		t.Fatal("the save's reply was not lost")
	}
	if err := s.SaveResult(ctx, id, result, entry); err != nil {
		t.Errorf("SaveResult made again = %v, want nil", err)
	}
	if got, err := s.GetCall(ctx, id); err != nil || string(got.Result) != string(result) {
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

// resendOnKeyHook runs the first command sent after it is armed on a key
// that names key (a script by its first key), then runs between, then
// sends the command again: the client's resending after a lost reply,
// with another replica's write in between.
type resendOnKeyHook struct {
	armed   *bool
	key     string
	between func()
}

func (resendOnKeyHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h resendOnKeyHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		i := 1
		if strings.HasPrefix(cmd.Name(), "eval") {
			i = 3
		}
		if *h.armed && len(args) > i && strings.Contains(fmt.Sprint(args[i]), h.key) {
			if err := next(ctx, cmd); err != nil {
				return err // a script not loaded: the EVAL that follows is the sending
			}
			*h.armed = false
			h.between()
		}
		return next(ctx, cmd)
	}
}
func (resendOnKeyHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A record's write or delete sent again after its reply was lost, with
// another write of the record landing in between, is answered as its
// first sending was, and writes nothing more: a compare-and-set was
// answered as a conflict, an unconditional put overwrote the write in
// between, a delete was answered as not found, or deleted the record
// written in between.
func TestRecordWriteSentAgainAfterAnother(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		other := func(data string) {
			if _, err := s.PutRecord(ctx, store.Record{Kind: "rules", ID: "r1", Data: []byte(data)}, -1); err != nil {
				t.Errorf("PutRecord between the sendings: %v", err)
			}
		}
		sentAgain := func(between func(), send func() error) error {
			t.Helper()
			armed := true
			c.AddHook(resendOnKeyHook{armed: &armed, key: ":records:rules", between: between})
			err := send()
			if armed {
				t.Fatal("the write was not sent again")
			}
			return err
		}
		want := func(data string, version int64) {
			t.Helper()
			recs, err := s.Records(ctx, "rules")
			switch {
			case err != nil:
				t.Fatal(err)
			case data == "" && len(recs) != 0:
				t.Errorf("records = %+v, want none", recs)
			case data != "" && (len(recs) != 1 || string(recs[0].Data) != data || recs[0].Version != version):
				t.Errorf("records = %+v, want r1 at version %d with %s", recs, version, data)
			}
		}

		put := func(data string, expect int64) func() error {
			return func() error {
				got, err := s.PutRecord(ctx, store.Record{Kind: "rules", ID: "r1", Data: []byte(data)}, expect)
				if err == nil && got.Version != 1 {
					return fmt.Errorf("answered version %d", got.Version)
				}
				return err
			}
		}
		if err := sentAgain(func() { other(`{"x":2}`) }, put(`{"x":1}`, 0)); err != nil {
			t.Errorf("compare-and-set PutRecord sent again after another write = %v, want version 1", err)
		}
		want(`{"x":2}`, 2)

		del := func() error { return s.DeleteRecord(ctx, "rules", "r1") }
		if err := sentAgain(func() {}, del); err != nil {
			t.Errorf("DeleteRecord sent again = %v, want nil", err)
		}
		want("", 0)

		if err := sentAgain(func() { other(`{"x":3}`) }, put(`{"x":1}`, -1)); err != nil {
			t.Errorf("PutRecord sent again after another write = %v, want version 1", err)
		}
		want(`{"x":3}`, 2)

		if err := sentAgain(func() { other(`{"x":4}`) }, del); err != nil {
			t.Errorf("DeleteRecord sent again after another write = %v, want nil", err)
		}
		want(`{"x":4}`, 1)
		if err := del(); err != nil {
			t.Errorf("another DeleteRecord = %v, want nil", err)
		}
		if err := del(); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteRecord of a deleted record = %v, want ErrNotFound", err)
		}
	})
}

// A deleted record leaves no field of its own in its kind's hash, which
// every turn reads whole: records made and deleted by the thousand
// (standing rules that expire) cost nothing later, and a replica of an
// earlier version deleting it again finds nothing to delete.
func TestDeletedRecordsLeaveNoFields(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			const kind = "rules"
			for i := range 50 {
				id := "sr-" + strconv.Itoa(i)
				if _, err := s.PutRecord(ctx, store.Record{Kind: kind, ID: id, Data: json.RawMessage(`{}`)}, -1); err != nil {
					t.Fatal(err)
				}
				if err := s.DeleteRecord(ctx, kind, id); err != nil {
					t.Fatal(err)
				}
			}
			c, err := redisstore.NewClient(topo.url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			fields, err := c.HKeys(ctx, s.RecordsKey(kind)).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(fields) > 1 {
				t.Errorf("the records' hash holds %d fields after every record was deleted, want one at most (the deletions' sendings): %q", len(fields), fields)
			}
		})
	}
}

// An approval counted (1 of 2) whose reply is lost, sent again after
// another approval decided the call, is answered as counted, not as
// already decided: it was counted, and the call it reports is decided with
// both approvals. On a Cluster the counted approval's audit entry, written
// after the reply, is written then.
func TestCountedApprovalSentAgainAfterAnotherDecided(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			c, s, other, callID := approvalResentPair(t, topo.url)
			ctx := t.Context()
			var otherComplete bool
			armed := true
			c.AddHook(resendAfterHook{armed: &armed, key: store.RunOf(callID), between: func() {
				_, complete, err := other.Approve(ctx, callID, "fp0", store.Approval{Approver: "U2"}, nil, 2, store.Decision{Kind: "approve", Decider: "U2"})
				if err != nil {
					t.Errorf("the other approval: %v", err)
				}
				otherComplete = complete
			}})
			fx := store.Effects{Audit: store.AuditEntry{Actor: "U1", Action: "approve", CallID: callID, Decision: "approve"}}
			got, complete, err := s.ApproveAudited(ctx, callID, "fp0", store.Approval{Approver: "U1"}, nil, nil, 2, store.Decision{Kind: "approve", Decider: "U1"}, fx)
			if armed {
				t.Fatal("the approval was not sent")
			}
			if err != nil || complete || !otherComplete {
				t.Errorf("the approval sent again after another decided = complete %v, %v (the other complete %v); want it counted, the other complete", complete, err, otherComplete)
			}
			if got.Status != store.Decided {
				t.Errorf("the approval sent again reports the call %s; want it decided, as stored", got.Status)
			}
			stored, err := s.GetCall(ctx, callID)
			if err != nil {
				t.Fatal(err)
			}
			var approvers []string
			for _, a := range stored.Approvals {
				approvers = append(approvers, a.Approver)
			}
			if stored.Status != store.Decided || !slices.Equal(approvers, []string{"U1", "U2"}) {
				t.Errorf("stored call %s approved by %v; want decided, approved by U1 and U2", stored.Status, approvers)
			}
			log, err := s.AuditLog(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range log {
				if e.CallID == callID && e.Actor == "U1" {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d audit entries of U1's approval; want 1", n)
			}
		})
	}
}
