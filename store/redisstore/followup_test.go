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

// loseFollowUpHook loses, once armed, the replies of the first pipeline
// that writes the audit log with key, after Redis ran it: on a Cluster, a
// decision's follow-up made, its answer cut.
type loseFollowUpHook struct {
	armed *atomic.Bool
	key   string
}

func (loseFollowUpHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (loseFollowUpHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h loseFollowUpHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, h.writes) || !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		lost := errors.New("read tcp: connection reset by peer")
		for _, c := range cmds {
			c.SetErr(lost)
		}
		return lost
	}
}

// writes reports whether cmd's first key is h.key.
func (h loseFollowUpHook) writes(cmd redis.Cmder) bool {
	args, i := cmd.Args(), 1
	if strings.HasPrefix(cmd.Name(), "eval") {
		i = 3
	}
	return len(args) > i && fmt.Sprint(args[i]) == h.key
}

// A decision or an approval found recorded after its answer was lost is
// sent again with the same Attempt by the agent, so that a Cluster makes
// the follow-up that the lost answer left unmade. Whether or not the first
// sending's follow-up was made (its reply lost), the sending again is
// answered as the first was, the log holds the decision's or the
// approval's entry once, and a decision that completes its step lists its
// conversation as unanswered. On a single node the effects were the
// script's, and the sending again writes none.
func TestDecisionSentAgainByTheCallerIsAuditedOnce(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		for _, kind := range []string{"decide", "approve counted", "approve complete"} {
			for _, lost := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/follow-up lost %v", kind, lost), func(t *testing.T) {
					conv, call := oneCall(t, s, "fp0")
					d := store.Decision{Kind: "approve", Decider: "U1", At: time.Now(), Attempt: "attempt-" + call.ID}
					fx := store.Effects{Audit: store.AuditEntry{Actor: "U1", Action: "decide", CallID: call.ID, Decision: "approve"}, Unanswered: conv}
					send := func() (store.Call, bool, error) {
						switch kind {
						case "approve counted":
							return s.ApproveAudited(ctx, call.ID, "fp0", store.Approval{Approver: "U1", At: d.At}, nil, nil, 2, d, fx)
						case "approve complete":
							return s.ApproveAudited(ctx, call.ID, "fp0", store.Approval{Approver: "U1", At: d.At}, nil, nil, 1, d, fx)
						}
						return s.DecideAudited(ctx, call.ID, "fp0", d, fx)
					}
					var armed atomic.Bool
					armed.Store(lost)
					c.AddHook(loseFollowUpHook{armed: &armed, key: s.AuditKey()})
					if _, _, err := send(); err != nil && !errors.Is(err, store.ErrEffects) {
						t.Fatalf("the first sending = %v", err)
					}
					if _, cluster := c.(*redis.ClusterClient); cluster && armed.Swap(false) {
						t.Fatal("the follow-up's reply was not lost")
					}
					got, complete, err := send()
					wantComplete := kind != "approve counted"
					if err != nil || complete != wantComplete || (got.Status == store.Pending) == wantComplete {
						t.Fatalf("sent again = %s, complete %v, %v; want it answered as recorded, complete %v", got.Status, complete, err, wantComplete)
					}
					log, err := s.AuditLog(ctx, 0)
					if err != nil {
						t.Fatal(err)
					}
					var entries []store.AuditEntry
					for _, e := range log {
						if e.CallID == call.ID {
							entries = append(entries, e)
						}
					}
					if len(entries) != 1 {
						t.Errorf("audit entries of the call = %+v, want one", entries)
					}
					listed, err := s.Unanswered(ctx, time.Now().Add(time.Hour), 0, 0)
					if err != nil {
						t.Fatal(err)
					}
					if slices.Contains(listed, conv) != wantComplete {
						t.Errorf("unanswered lists %q; want %s listed: %v", listed, conv, wantComplete)
					}
				})
			}
		}
	})
}
