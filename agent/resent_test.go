package agent_test

import (
	"context"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/store"
)

// resentDecisions is a store whose client sends every audited decision
// twice, answering with the second sending: as a Redis client does when
// the first's reply is lost after Redis applied it.
type resentDecisions struct{ agent.Store }

func (s resentDecisions) DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	_, _, _ = s.Store.DecideAudited(ctx, callID, fingerprint, d, fx)
	return s.Store.DecideAudited(ctx, callID, fingerprint, d, fx)
}

// A cancel or an expiry whose sending the client made again after its
// reply was lost is answered as the first sending was (store.Decision
// names each sending), not as a call decided already: the requester is
// told the run is cancelled, and the expired call is reported expired.
func TestCancelAndExpirySentAgainAreAnsweredAsTheFirst(t *testing.T) {
	for _, b := range backends(t) {
		if b.name == "bolt" {
			continue // an embedded store's write is never sent twice
		}
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.ApprovalTTL = time.Hour
			a := w.agentWith(resentDecisions{w.store}, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			res, err := a.Cancel(ctx, p.RunID, "UREQUESTER")
			if err != nil || !res.Complete {
				t.Errorf("Cancel sent twice = complete %v, %v; want the run's step cancelled", res.Complete, err)
			}

			q := pauseWith(t, w, a, agent.Request{Conversation: "T1/C1/1700000000.000200", User: "UREQUESTER", Channel: "C1", Text: "again"}, call("c2", "deploy", `{"service":"api","version":"3"}`))
			w.advance(2 * time.Hour)
			var resumed []string
			if _, err := a.Expire(ctx, func(runID, _ string) { resumed = append(resumed, runID) }); err != nil {
				t.Fatal(err)
			}
			if len(resumed) != 1 || resumed[0] != q.RunID {
				t.Errorf("the expiry sent twice handed on runs %q, want %s's", resumed, q.RunID)
			}
			var expired bool
			for _, u := range w.rec.Updates() {
				if u.Call.ID == q.ID && u.Call.Status == agent.CallExpired {
					expired = true
				}
			}
			if !expired {
				t.Errorf("no update reported %s expired: %+v", q.ID, w.rec.Updates())
			}
		})
	}
}
