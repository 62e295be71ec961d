package redisstore_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// A decision whose edited arguments nest deeper than Redis's JSON decoder
// reads (1000) still has its step resumed: the script that begins the
// resume reads only the decision's kind, and never fails half-way with
// the lease and the claim taken, which would stop every later resume too.
func TestResumeOfADecisionWithDeeplyNestedArgs(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, topo.url, redisstore.Options{Prefix: newPrefix(t, topo.url)})
			conv, c := oneCall(t, s, "fp")
			deep := `{"a":` + strings.Repeat("[", 1100) + strings.Repeat("]", 1100) + `}`
			if !json.Valid([]byte(deep)) {
				t.Fatal("the test's arguments are not JSON")
			}
			d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now(), Args: json.RawMessage(deep)}
			if _, _, err := s.Decide(ctx, c.ID, "fp", d); err != nil {
				t.Fatal(err)
			}
			rs, err := s.BeginResume(ctx, store.RunOf(c.ID), store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "me", TTL: time.Minute, Start: []string{"approve"}, Nonce: "n1"})
			if err != nil || !rs.Claimed {
				t.Fatalf("BeginResume = claimed %v, %v; want the resume begun", rs.Claimed, err)
			}
			if rs.Started != c.ID {
				t.Errorf("BeginResume marked %q as started, want %q", rs.Started, c.ID)
			}
		})
	}
}
