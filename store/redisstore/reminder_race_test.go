package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// beforeHook runs fn before the first command named name (ZADD,
// EVALSHA...) sent after it is armed, alone or in a pipeline.
type beforeHook struct {
	armed *bool
	name  string
	fn    func()
}

func (h beforeHook) fire(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if *h.armed && strings.EqualFold(fmt.Sprint(cmd.Args()[0]), h.name) {
			*h.armed = false
			h.fn()
			return
		}
	}
}

func (beforeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h beforeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.fire(cmd)
		return next(ctx, cmd)
	}
}
func (h beforeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.fire(cmds...)
		return next(ctx, cmds)
	}
}

// reminding pauses a call that expires in 4 hours and reminds after 10
// minutes, and again at 3 hours. Once the first reminder is claimed
// (claimFirst), an edit that brings its expiry to 2 hours brings the next
// to 1 hour 30 minutes, which the returned proposal and time are.
func reminding(t *testing.T, s *redisstore.Store) (store.Call, *store.Proposal, time.Time) {
	t.Helper()
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	conv := "C1:" + store.NewRunID()
	r := store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
	call := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp0", Requester: "U1", Conversation: conv,
		CreatedAt: now, ExpiresAt: now.Add(4 * time.Hour), RemindAfter: 10 * time.Minute}
	call.RemindAt = store.Reminders(call)[0]
	if err := s.CreateRun(ctx, r, []store.Call{call}); err != nil {
		t.Fatal(err)
	}
	edit := &store.Proposal{Fingerprint: "fp1", Edit: store.Decision{Kind: "edit", Decider: "UB", Args: json.RawMessage(`{"x":1}`), ExpiresAt: now.Add(2 * time.Hour)}}
	return call, edit, now.Add(90 * time.Minute)
}

// claimFirst claims the first reminder of a call made by reminding.
func claimFirst(t *testing.T, s *redisstore.Store, c store.Call) {
	t.Helper()
	if ok, err := s.ClaimReminder(t.Context(), c.ID, 1, store.Reminders(c)[1]); !ok || err != nil {
		t.Fatalf("ClaimReminder = %v, %v", ok, err)
	}
}

// approveEdit counts an approval with edit on call c.
func approveEdit(t *testing.T, s *redisstore.Store, c store.Call, edit *store.Proposal) {
	t.Helper()
	if _, _, err := s.Approve(t.Context(), c.ID, "fp0", store.Approval{Approver: "UB"}, edit, 2, store.Decision{Kind: "approve", Decider: "UB"}); err != nil {
		t.Errorf("Approve with an edit: %v", err)
	}
}

// wantReminderListed checks that the reminder of c at at is due then.
func wantReminderListed(t *testing.T, c redis.UniversalClient, s *redisstore.Store, call store.Call, at time.Time) {
	t.Helper()
	got, err := s.GetCall(t.Context(), call.ID)
	if err != nil || !got.RemindAt.Equal(at) {
		t.Fatalf("RemindAt = %v, %v; want %v", got.RemindAt, err, at)
	}
	due, err := s.DueReminders(t.Context(), at, 0)
	if err != nil || len(due) != 1 {
		score, _ := c.ZScore(t.Context(), s.RemindKey(), call.ID).Result()
		t.Errorf("DueReminders(the call's RemindAt) = %d calls, %v; want the call (its index entry is %v later, past its expiry at %v)",
			len(due), err, time.UnixMilli(int64(score)).Sub(at), got.ExpiresAt)
	}
}

// An edit that brings a call's next reminder forward keeps it listed then
// whatever a reader of the reminder index, which moves entries scored
// before their call's RemindAt to it, does meanwhile: the reminder was
// left listed past the call's expiry, and never sent.
func TestEditedReminderStaysListedPastAReader(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			// The reader reads and moves the entry between the edit's
			// listing and its script.
			t.Run("whole before the script", func(t *testing.T) {
				c, s, other := hookedPair(t, topo.url)
				call, edit, at := reminding(t, s)
				claimFirst(t, s, call)
				armed := true
				c.AddHook(beforeHook{armed: &armed, name: "evalsha", fn: func() {
					if _, err := other.NextReminder(t.Context()); err != nil {
						t.Errorf("NextReminder: %v", err)
					}
				}})
				approveEdit(t, s, call, edit)
				if armed {
					t.Fatal("the approval sent no script")
				}
				wantReminderListed(t, c, s, call, at)
			})
			// The reader reads the entry the edit listed and the call as
			// it was, and moves the entry once the edit is whole.
			t.Run("moving it after the edit", func(t *testing.T) {
				c, s, other := hookedPair(t, topo.url)
				call, edit, at := reminding(t, s)
				claimFirst(t, s, call)
				// Where an edit whose script failed leaves it.
				if err := c.ZAdd(t.Context(), s.RemindKey(), redis.Z{Score: float64(at.UnixMilli()), Member: call.ID}).Err(); err != nil {
					t.Fatal(err)
				}
				armed := true
				c.AddHook(beforeHook{armed: &armed, name: "zadd", fn: func() { approveEdit(t, other, call, edit) }})
				if due, err := s.DueReminders(t.Context(), at.Add(time.Minute), 0); err != nil || len(due) != 0 {
					t.Fatalf("DueReminders before the edit = %d calls, %v; want none", len(due), err)
				}
				if armed {
					t.Fatal("the reader moved no entry")
				}
				wantReminderListed(t, c, s, call, at)
			})
		})
	}
}

// A claimed reminder's move of its index entry to the next reminder does
// not overtake an edit that brought that reminder forward after the claim.
func TestClaimedReminderDoesNotOvertakeAnEdit(t *testing.T) {
	for _, topo := range topologies(t) {
		t.Run(topo.name, func(t *testing.T) {
			c, s, other := hookedPair(t, topo.url)
			call, edit, at := reminding(t, s)
			armed := true
			c.AddHook(beforeHook{armed: &armed, name: "zadd", fn: func() { approveEdit(t, other, call, edit) }})
			claimFirst(t, s, call)
			if armed {
				t.Fatal("the claim moved no entry")
			}
			wantReminderListed(t, c, s, call, at)
		})
	}
}
