package redisstore_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// A decision made on Redis Cluster while the audit log's hash slot moves
// to another node (a live reshard) has its audit entry once the move is
// over: the entry's script, answered TRYAGAIN meanwhile (it names the
// log, which has not moved yet, and the sending's mark, which does not
// exist yet), is sent again.
func TestDecisionAuditedWhileTheAuditSlotMoves(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	prefix := newPrefix(t, u)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	conv := "T1/C1/1.000001"
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: conv, Channel: "C1", ExpiresAt: time.Now().Add(time.Hour)}
	if err := s.CreateRun(ctx, r, []store.Call{call}); err != nil {
		t.Fatal(err)
	}
	// An entry already in the log, as in any running bot.
	if err := s.Audit(ctx, store.AuditEntry{At: time.Now(), Actor: "U1", Action: "request", CallID: call.ID}); err != nil {
		t.Fatal(err)
	}

	src, finish := moveSlotSlowly(t, c.(*redis.ClusterClient), prefix+":audit")
	tryAgains := func() int { return errorCount(t, src, "TRYAGAIN") }
	before := tryAgains()
	d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now(), Attempt: "attempt-1"}
	fx := store.Effects{
		Audit:      store.AuditEntry{At: d.At, Actor: "U2", Action: "decide", Channel: "C1", Thread: conv, Tool: "t", CallID: call.ID, Fingerprint: "fp", Decision: "approve", Outcome: store.OutcomeRecorded},
		Unanswered: conv,
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := s.DecideAudited(ctx, call.ID, "fp", d, fx)
		done <- err
	}()
	// The slot stays open past the client's own few retries of a
	// TRYAGAIN, as a slot of many keys does.
	for tryAgains() < before+8 {
		select {
		case err := <-done:
			t.Fatalf("DecideAudited returned (%v) while the slot was still moving, after %d TRYAGAIN answers", err, tryAgains()-before)
		case <-time.After(10 * time.Millisecond):
		}
	}
	finish()
	if err := <-done; err != nil {
		t.Fatalf("DecideAudited: %v", err)
	}
	log, err := s.AuditLog(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range log {
		if e.CallID == call.ID && e.Action == "decide" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the audit log holds %d decide entries of the call once the slot moved; want 1", n)
	}
}

// moveSlotSlowly begins moving key's hash slot from the primary that
// holds it to another, as a live reshard does (MIGRATING there, IMPORTING
// on the other), and returns the first, with finish, which moves the
// slot's keys and gives the slot to the other node everywhere (also at
// the end of the test).
func moveSlotSlowly(t *testing.T, cc *redis.ClusterClient, key string) (src *redis.Client, finish func()) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := cc.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var owner string
	var others []string
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			owner = r.Nodes[0].Addr
		} else if !strings.Contains(strings.Join(others, ","), r.Nodes[0].Addr) {
			others = append(others, r.Nodes[0].Addr)
		}
	}
	others = removeAddr(others, owner)
	if owner == "" || len(others) == 0 {
		t.Fatalf("slot %d: no owner, or no other primary, in %v", slot, ranges)
	}
	src = redis.NewClient(&redis.Options{Addr: owner})
	dst := redis.NewClient(&redis.Options{Addr: others[0]})
	t.Cleanup(func() { _ = src.Close(); _ = dst.Close() })
	do := func(c *redis.Client, args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v on %s: %v", args, c.Options().Addr, err)
		}
	}
	srcID, dstID := src.Do(ctx, "cluster", "myid").Val(), dst.Do(ctx, "cluster", "myid").Val()
	do(dst, "cluster", "setslot", slot, "importing", srcID)
	do(src, "cluster", "setslot", slot, "migrating", dstID)
	finished := false
	finish = func() {
		if finished {
			return
		}
		finished = true
		host, port, _ := strings.Cut(dst.Options().Addr, ":")
		for {
			keys, err := src.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) == 0 {
				break
			}
			args := []any{"migrate", host, port, "", 0, 5000, "keys"}
			for _, k := range keys {
				args = append(args, k)
			}
			do(src, args...)
		}
		do(dst, "cluster", "setslot", slot, "node", dstID)
		do(src, "cluster", "setslot", slot, "node", dstID)
		for _, a := range others[1:] {
			o := redis.NewClient(&redis.Options{Addr: a})
			do(o, "cluster", "setslot", slot, "node", dstID)
			_ = o.Close()
		}
	}
	t.Cleanup(finish)
	return src, finish
}

func removeAddr(addrs []string, addr string) []string {
	var out []string
	for _, a := range addrs {
		if a != addr {
			out = append(out, a)
		}
	}
	return out
}

// errorCount is how many errors of code the node c has answered
// (INFO errorstats).
func errorCount(t *testing.T, c *redis.Client, code string) int {
	t.Helper()
	info, err := c.Info(t.Context(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+code+":count="); ok {
			n, _ := strconv.Atoi(rest)
			return n
		}
	}
	return 0
}
