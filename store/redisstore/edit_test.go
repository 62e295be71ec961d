package redisstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// failCommandHook fails the first command named name (ZADD, EVALSHA...)
// sent after it is armed, as a connection reset would, without sending it.
type failCommandHook struct {
	armed *bool
	name  string
}

func (failCommandHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failCommandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if *h.armed && strings.EqualFold(fmt.Sprint(cmd.Args()[0]), h.name) {
			*h.armed = false
			err := errors.New("read tcp: connection reset by peer")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}
func (failCommandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// An edit that brings a call's expiry forward lists it in the due index at
// the new time before the call is changed: if that fails nothing changes
// (the edit can be made again), and if the edit then fails the earlier
// entry lists nothing before the call's own expiry.
func TestEditExpiryIsIndexedFirst(t *testing.T) {
	onNodeAndCluster(t, func(t *testing.T, c redis.UniversalClient, s *redisstore.Store) {
		ctx := t.Context()
		_, calls := pausedOnOneCall(t, s, "fp0") // expires in an hour
		id := calls[0].ID
		sooner := time.Now().Add(time.Minute).Truncate(time.Millisecond)
		edit := &store.Proposal{Fingerprint: "fp1", Edit: store.Decision{Kind: "edit", Decider: "UB", At: time.Now(), Args: json.RawMessage(`{"x":1}`), ExpiresAt: sooner}}
		approve := store.Decision{Kind: "approve", Decider: "UB"}

		armed := true
		c.AddHook(failCommandHook{armed: &armed, name: "zadd"})
		if _, _, err := s.Approve(ctx, id, "fp0", store.Approval{Approver: "UB"}, edit, 2, approve); err == nil {
			t.Fatal("the edit was recorded although its expiry could not be indexed")
		}
		got, err := s.GetCall(ctx, id)
		if err != nil || got.Fingerprint != "fp0" || got.Edit != nil || got.ExpiresAt.Before(time.Now().Add(30*time.Minute)) {
			t.Fatalf("after a failed edit the call is %+v, %v; want it unchanged", got, err)
		}

		// The index takes the earlier time, the edit fails: nothing is
		// due before the call's own expiry.
		armed = true
		c.AddHook(failCommandHook{armed: &armed, name: "evalsha"})
		if _, _, err := s.Approve(ctx, id, "fp0", store.Approval{Approver: "UB"}, edit, 2, approve); err == nil {
			t.Fatal("the edit whose script failed was reported recorded")
		}
		if due, err := s.Due(ctx, sooner, 0); err != nil || len(due) != 0 {
			t.Errorf("Due(the refused edit's expiry) = %d calls, %v; want none", len(due), err)
		}
		if next, err := s.NextExpiry(ctx); err != nil || !next.Equal(calls[0].ExpiresAt.Truncate(time.Microsecond)) {
			t.Errorf("NextExpiry = %v, %v; want the call's own %v", next, err, calls[0].ExpiresAt)
		}

		// Made again, the edit moves the expiry, and Due lists the call then.
		if got, _, err = s.Approve(ctx, id, "fp0", store.Approval{Approver: "UB"}, edit, 2, approve); err != nil || !got.ExpiresAt.Equal(sooner) {
			t.Fatalf("the edit made again: expires %v, %v; want %v", got.ExpiresAt, err, sooner)
		}
		if due, err := s.Due(ctx, sooner, 0); err != nil || len(due) != 1 {
			t.Errorf("Due(the edit's expiry) = %d calls, %v; want the call", len(due), err)
		}
	})
}
