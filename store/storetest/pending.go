package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// testPendingLimit: a Filter's Limit lists the oldest Limit pending calls
// it selects, by CreatedAt then id, whatever their expiry, through every
// index; a decided call is not counted.
func testPendingLimit(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	u := store.NewRunID()
	conv, req, alice := "CL:"+u, "URL"+u, "UAL"+u
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// One call per run, created in this order and expiring in the reverse
	// order. The last two are created in the same millisecond, the later
	// with the smaller id.
	var calls []store.Call
	for i, at := range []struct {
		id      string
		created time.Time
	}{
		{"a" + u, base},
		{"b" + u, base.Add(time.Second)},
		{"c" + u, base.Add(2 * time.Second)},
		{"e" + u, base.Add(3*time.Second + 200*time.Microsecond)},
		{"d" + u, base.Add(3*time.Second + 700*time.Microsecond)},
	} {
		_, cs := create(t, s, 1, func(r *store.Run, cs []store.Call) {
			r.ID, r.Conversation, r.Requester, r.CreatedAt = at.id, conv, req, at.created
			r.CallIDs = []string{store.CallID(r.ID, 0)}
			c := &cs[0]
			c.ID, c.RunID, c.Conversation, c.Requester = r.CallIDs[0], r.ID, conv, req
			c.Approvers, c.CreatedAt = []string{alice}, at.created
			c.ExpiresAt = time.Now().Add(time.Duration(5-i) * time.Hour)
		})
		calls = append(calls, cs[0])
	}
	decideAll(t, s, calls[:1]) // the oldest is no longer pending
	ids := callIDs(calls[1:])  // b, c, e, d: oldest first

	for _, f := range []store.Filter{
		{Conversation: conv},
		{Requester: req},
		{Approver: alice},
		{Conversation: conv, Approver: alice},
		{Requester: req, Approver: alice},
	} {
		for _, tt := range []struct {
			limit int
			want  []string
		}{
			{0, ids},
			{1, ids[:1]},
			{3, ids[:3]},
			{4, ids},
			{10, ids},
		} {
			f.Limit = tt.limit
			got, err := s.Pending(ctx, f)
			if err != nil {
				t.Fatalf("Pending(%+v): %v", f, err)
			}
			if got := callIDs(got); !slices.Equal(got, tt.want) {
				t.Errorf("Pending(%+v) = %v, want %v", f, got, tt.want)
			}
		}
	}

	// Other tests share the store: all pending calls number at least
	// these four, and the oldest two come in order.
	got, err := s.Pending(ctx, store.Filter{Limit: 2})
	if err != nil {
		t.Fatalf("Pending(limit 2): %v", err)
	}
	if len(got) != 2 || got[0].CreatedAt.After(got[1].CreatedAt) {
		t.Errorf("Pending(limit 2) = %v, want the two oldest pending calls, oldest first", callIDs(got))
	}
}
