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

// testPendingCoRequesters: a call made by a turn that answers the messages
// of several people is a request of each of them, so a Filter's Requester
// selects it under any of its Requesters, through the requester index and
// with other fields, until it is decided or its run finishes. A call
// stored without Requesters is the request of its Requester alone.
func testPendingCoRequesters(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	u := store.NewRunID()
	first, second, alice := "URF"+u, "URS"+u, "UAL"+u
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	// The turn answered first's message, then second's: the calls name
	// second as their Requester and both as their Requesters.
	r, shared := create(t, s, 2, func(r *store.Run, cs []store.Call) {
		r.Conversation, r.Requester, r.CreatedAt = "CR:"+u, second, base
		for i := range cs {
			c := &cs[i]
			c.Conversation, c.Requester, c.Requesters = r.Conversation, second, []string{first, second}
			c.Approvers, c.CreatedAt = []string{alice}, base.Add(time.Duration(i)*time.Second)
		}
	})
	_, alone := create(t, s, 1, func(r *store.Run, cs []store.Call) {
		r.Conversation, r.Requester, r.CreatedAt = "CS:"+u, second, base.Add(time.Minute)
		cs[0].Conversation, cs[0].Requester, cs[0].Requesters = r.Conversation, second, nil
		cs[0].Approvers, cs[0].CreatedAt = []string{alice}, base.Add(time.Minute)
	})
	pending := func(f store.Filter, want ...string) {
		t.Helper()
		got, err := s.Pending(ctx, f)
		if err != nil {
			t.Fatalf("Pending(%+v): %v", f, err)
		}
		if ids := callIDs(got); !slices.Equal(ids, want) {
			t.Errorf("Pending(%+v) = %v, want %v", f, ids, want)
		}
	}
	pending(store.Filter{Requester: first}, shared[0].ID, shared[1].ID)
	pending(store.Filter{Requester: first, Limit: 1}, shared[0].ID)
	pending(store.Filter{Requester: first, Approver: alice}, shared[0].ID, shared[1].ID)
	pending(store.Filter{Conversation: "CR:" + u, Requester: first}, shared[0].ID, shared[1].ID)
	pending(store.Filter{Requester: second}, shared[0].ID, shared[1].ID, alone[0].ID)

	decideAll(t, s, shared[:1])
	pending(store.Filter{Requester: first}, shared[1].ID)
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", r.ID, err)
	}
	pending(store.Filter{Requester: first})
	pending(store.Filter{Requester: second}, alone[0].ID)
}
