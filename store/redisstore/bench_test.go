package redisstore_test

import (
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// benchStore opens a store on REDIS_URL under a prefix of its own, whose
// keys are deleted at the end, or skips the benchmark.
func benchStore(b *testing.B) *redisstore.Store {
	return benchStoreOn(b, "REDIS_URL")
}

// benchStoreOn is benchStore on the Redis of the URL in the environment
// variable env.
func benchStoreOn(b *testing.B, env string) *redisstore.Store {
	u := os.Getenv(env)
	if u == "" {
		b.Skip(env + " is not set")
	}
	prefix := "toolgate-bench-" + store.NewRunID()
	s, err := redisstore.New(b.Context(), u, redisstore.Options{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	c, err := redisstore.NewClient(u)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		defer c.Close()
		_ = redisstore.EachPrimary(context.Background(), c, func(ctx context.Context, node *redis.Client) error {
			keys, _ := node.Keys(ctx, prefix+"*").Result()
			for len(keys) > 0 {
				n := min(len(keys), 1000)
				for _, k := range keys[:n] {
					node.Del(ctx, k) // one by one: a Cluster's keys are in many slots
				}
				keys = keys[n:]
			}
			return nil
		})
	})
	return s
}

// BenchmarkDecideBegin is the one store step of a click on a paused call
// that this process paused: the decision, its audit entry, and the start
// of the resume with the run, its call and the conversation read back. The
// pause before each is not timed. BenchmarkPing, one command's round trip
// on the same connection pool, is the floor.
func BenchmarkDecideBegin(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	state := json.RawMessage(`{"messages":[{"role":"user","content":"` + strings.Repeat("x", 800) + `"}]}`)
	args := json.RawMessage(`{"url":"http://127.0.0.1/exec/ask/conv-1"}`)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		conv := "T1/C1/" + store.NewRunID()
		r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1", State: state}
		c := store.Call{ID: store.CallID(r.ID, 0), Tool: "http_get", Args: args, Fingerprint: "fp", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}
		lease := store.TurnLease(conv)
		if ok, err := s.AcquireLease(ctx, lease, "a", time.Minute); err != nil || !ok {
			b.Fatalf("AcquireLease = %v, %v", ok, err)
		}
		paused := store.Conversation{State: state, PausedRun: r.ID}
		if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: []store.Call{c}, Holder: "a", Release: "a"}); err != nil {
			b.Fatal(err)
		}
		d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now(), Attempt: store.NewRunID()}
		fx := store.Effects{Audit: store.AuditEntry{Actor: "U2", Action: "decide", CallID: c.ID, Tool: c.Tool, Decision: "approve", Outcome: "recorded"}, Unanswered: conv}
		rb := store.ResumeBegin{Conversation: conv, Lease: lease, Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Kinds: []string{"rule"}, Nonce: d.Attempt}
		b.StartTimer()
		_, complete, rs, err := s.DecideBegin(ctx, c.ID, c.Fingerprint, d, fx, rb)
		if err != nil || !complete || !rs.Claimed {
			b.Fatalf("DecideBegin = complete %v, claimed %v, %v", complete, rs.Claimed, err)
		}
	}
}

func BenchmarkPing(b *testing.B) {
	s := benchStore(b)
	for b.Loop() {
		if err := s.Ping(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextExpiry reads the earliest deadline among 1,000 pending calls
// of 2 KiB of arguments each, as the expiry timer does on every pass.
func BenchmarkNextExpiry(b *testing.B) {
	s := benchStore(b)
	args := json.RawMessage(`{"blob":"` + strings.Repeat("x", 2048) + `"}`)
	now := time.Now()
	for i := range 1000 {
		r := store.Run{ID: store.NewRunID(), Conversation: "C1:" + strconv.Itoa(i), Requester: "U1", Channel: "C1"}
		c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Args: args, Fingerprint: "fp", ExpiresAt: now.Add(time.Hour + time.Duration(i)*time.Second)}
		if err := s.CreateRun(b.Context(), r, []store.Call{c}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.NextExpiry(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStalledWithPausedRuns is one stalled-resume sweep with 10,000
// paused runs (1.5 KB of history each) and 10 decided ones, as every
// replica makes every SWEEP_INTERVAL, on a single node (REDIS_URL) and on
// a Cluster (REDIS_CLUSTER_URL).
func BenchmarkStalledWithPausedRuns(b *testing.B) {
	for _, tc := range []struct{ name, env string }{{"single node", "REDIS_URL"}, {"cluster", "REDIS_CLUSTER_URL"}} {
		b.Run(tc.name, func(b *testing.B) { benchStalled(b, benchStoreOn(b, tc.env)) })
	}
}

func benchStalled(b *testing.B, s *redisstore.Store) {
	state := json.RawMessage(`{"messages":"` + strings.Repeat("x", 1500) + `"}`)
	now := time.Now()
	var g errgroup.Group
	g.SetLimit(8)
	for i := range 10010 {
		g.Go(func() error {
			r := store.Run{ID: store.NewRunID(), Conversation: "C1:" + strconv.Itoa(i), Requester: "U1", Channel: "C1", State: state}
			c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", ExpiresAt: now.Add(time.Hour)}
			if err := s.CreateRun(b.Context(), r, []store.Call{c}); err != nil || i < 10000 {
				return err
			}
			_, _, err := s.Decide(b.Context(), c.ID, "fp", store.Decision{Kind: "approve", Decider: "U2", At: time.Now()})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if ids, err := s.Stalled(b.Context(), 100); err != nil || len(ids) != 10 {
			b.Fatalf("Stalled = %d runs, %v; want 10", len(ids), err)
		}
	}
}
