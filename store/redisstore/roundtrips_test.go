package redisstore_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// A decision, or an approval, that completes its step and begins its
// resume is one round trip on a single node; on a Cluster, where the
// call, the conversation's lease and the decision's effects are in other
// hash slots, two: the decision beside the lease, then the run's claim
// and what the resume reads beside the effects.
func TestDecisionAndItsResumeRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		want      int64
	}{
		{"single node", redisURL(t), 1},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			client, err := redisstore.NewClient(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			var trips atomic.Int64
			client.AddHook(redisstore.RoundTrips(func() { trips.Add(1) }))
			s := redisstore.NewFromClient(client, redisstore.Options{Prefix: newPrefix(t, tc.url)})
			t.Cleanup(func() { _ = s.Close() })
			if err := redisstore.LoadDecisionScripts(ctx, client); err != nil {
				t.Fatal(err)
			}
			for _, approval := range []bool{false, true} {
				r, calls := testRun()
				r.Conversation = "C1:" + r.ID
				if err := s.CreateRun(ctx, r, calls); err != nil {
					t.Fatalf("CreateRun: %v", err)
				}
				c := calls[0]
				rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute, Start: []string{"approve"}, Kinds: []string{"rules"}}
				fx := store.Effects{Audit: store.AuditEntry{Actor: "U1", Action: "decide", CallID: c.ID, Decision: "approve"}, Unanswered: r.Conversation}
				d := store.Decision{Kind: "approve", Decider: "U1", Attempt: "attempt"}
				before := trips.Load()
				var rs store.ResumeStart
				var complete bool
				if approval {
					_, complete, rs, err = s.ApproveBegin(ctx, c.ID, c.Fingerprint, store.Approval{Approver: "U1", At: time.Now()}, nil, nil, 1, d, fx, rb)
				} else {
					_, complete, rs, err = s.DecideBegin(ctx, c.ID, c.Fingerprint, d, fx, rb)
				}
				if err != nil || !complete || !rs.Claimed || rs.Started != c.ID {
					t.Fatalf("approval %v = complete %v, claimed %v, started %q, %v; want complete, its resume begun", approval, complete, rs.Claimed, rs.Started, err)
				}
				if n := trips.Load() - before; n != tc.want {
					t.Errorf("approval %v took %d round trips, want %d", approval, n, tc.want)
				}
				log, err := s.AuditLog(ctx, 0)
				if err != nil || len(log) == 0 || log[0].CallID != c.ID {
					t.Errorf("audit log after approval %v = %+v, %v; want the decision's entry first", approval, log, err)
				}
				if ok, err := s.AcquireLease(ctx, rb.Lease, "b", time.Minute); err != nil || ok {
					t.Errorf("AcquireLease by another owner after approval %v = %v, %v; want false: the resume holds it", approval, ok, err)
				}
			}
		})
	}
}
