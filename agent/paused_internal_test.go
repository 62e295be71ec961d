package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fixedkey"
	"github.com/toolgate/toolgate/store"
)

// The remembered calls are bounded, one copy of the records is kept per
// version and dropped with the last call that uses it, and calls without
// a version of the records, or with large arguments, are not remembered.
func TestPausedCallsAreBounded(t *testing.T) {
	var p pausedCalls
	recs := func() map[string][]store.Record {
		return map[string][]store.Record{"rule": {{Kind: "rule", ID: "r1"}}}
	}
	call := func(id string) store.Call { return store.Call{ID: id, Args: json.RawMessage(`{}`)} }
	p.addAll(rememberable([]store.Call{call("a.0")}, recs(), 0), recs())
	p.addAll(rememberable([]store.Call{call("b.0")}, nil, 3), nil)
	p.addAll(rememberable([]store.Call{{ID: "c.0", Args: json.RawMessage(`"` + strings.Repeat("x", maxPausedArgs) + `"`)}}, recs(), 3), recs())
	if len(p.byKey) != 0 {
		t.Fatalf("remembered %d calls without a version, records or with large arguments, want none", len(p.byKey))
	}
	first := recs()
	p.addAll(rememberable([]store.Call{call("d.0"), call("d.1")}, first, 7), first)
	p.addAll(rememberable([]store.Call{call("e.0")}, recs(), 7), recs())
	if got, ok := p.take("e.0"); !ok || got.version != 7 || &got.recs["rule"][0] != &first["rule"][0] {
		t.Errorf("take(e.0) = version %d, %v, records shared %v; want version 7 with the records first read at it", got.version, ok, ok && &got.recs["rule"][0] == &first["rule"][0])
	}
	if _, ok := p.take("e.0"); ok {
		t.Error("take(e.0) twice found it twice")
	}
	for i := range maxPausedCalls {
		p.addAll(rememberable([]store.Call{call(store.CallID("f", i))}, recs(), 8), recs())
	}
	if _, ok := p.take("d.0"); ok {
		t.Error("the oldest call is remembered past the bound")
	}
	if len(p.byKey) != maxPausedCalls || len(p.recs) != 1 || p.recs[8].uses != maxPausedCalls {
		t.Errorf("remembered %d calls with %d record versions (uses %v), want %d calls, one version", len(p.byKey), len(p.recs), p.recs[8], maxPausedCalls)
	}
}

// The calls are encoded in a ring of bytes: calls of every size, taken or
// not, wrap around it many times; a call taken is the call added, field
// for field; the newest calls are remembered as far as the ring holds
// them; and no two remembered calls share bytes.
func TestPausedCallsRing(t *testing.T) {
	var p pausedCalls
	recs := map[string][]store.Record{}
	rng := rand.New(rand.NewPCG(1, 2))
	added := map[string]store.Call{}
	var order []string
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for i := range 20000 {
		// Phases of small calls, where the count binds, and of large
		// ones, where the bytes do.
		size := rng.IntN(64)
		if i/3000%2 == 1 || rng.IntN(10) == 0 {
			size = rng.IntN(maxPausedArgs - 8)
		}
		c := store.Call{
			ID: store.CallID(fmt.Sprintf("%016x", i), i%3), RunID: fmt.Sprintf("%016x", i), Tool: "deploy",
			Args: json.RawMessage(`{"v":"` + strings.Repeat("x", size) + `"}`), Fingerprint: fmt.Sprint(i),
			Requester: "U1", Requesters: []string{"U1", "U2"}, Approvers: []string{"@oncall"}, FourEyes: i%2 == 0,
			Channel: "C1", Conversation: "C1/1.2", CreatedAt: at, ExpiresAt: at.Add(time.Hour), Status: store.Pending, MinApprovals: i % 3,
		}
		p.addAll(rememberable([]store.Call{c}, recs, 5), recs)
		added[c.ID] = c
		order = append(order, c.ID)
		if rng.IntN(4) == 0 { // a decision on a recent call
			id := order[len(order)-1-rng.IntN(min(len(order), 50))]
			if got, ok := p.take(id); ok {
				want, _ := json.Marshal(added[id])
				have, _ := json.Marshal(got.call)
				if string(have) != string(want) || got.version != 5 {
					t.Fatalf("take(%s) = %s (version %d), want %s (version 5)", id, have, got.version, want)
				}
				delete(added, id)
			}
		}
		if _, ok := p.byKey[mustKey(t, order[len(order)-1])]; !ok {
			if _, kept := added[order[len(order)-1]]; kept {
				t.Fatalf("the call just added, %s, is not remembered", order[len(order)-1])
			}
		}
		checkRing(t, &p)
	}
	if len(p.byKey) < maxPausedCalls/4 {
		t.Errorf("%d calls remembered at the end, want the ring to hold hundreds", len(p.byKey))
	}
}

func mustKey(t *testing.T, id string) fixedkey.Key {
	t.Helper()
	k, ok := fixedkey.Of(id)
	if !ok {
		t.Fatalf("no key for %q", id)
	}
	return k
}

// checkRing checks that the remembered calls are those of live slots, and
// that no two of them share bytes.
func checkRing(t *testing.T, p *pausedCalls) {
	t.Helper()
	type span struct{ off, end int32 }
	var live []span
	for k := range p.n {
		i := (p.tail + k) % len(p.slots)
		s := p.slots[i]
		if s.key == (fixedkey.Key{}) {
			continue
		}
		if j, ok := p.byKey[s.key]; !ok || int(j) != i {
			t.Fatalf("slot %d is live but the map has %d, %v", i, j, ok)
		}
		live = append(live, span{s.off, s.off + s.size})
	}
	if len(live) != len(p.byKey) {
		t.Fatalf("%d live slots, %d calls in the map", len(live), len(p.byKey))
	}
	slices.SortFunc(live, func(a, b span) int { return int(a.off - b.off) })
	for i := 1; i < len(live); i++ {
		if live[i].off < live[i-1].end {
			t.Fatalf("remembered calls share bytes: %v and %v", live[i-1], live[i])
		}
	}
}

// recallStore lists pending calls, and the records at a version, for
// recall; it records the limit it was asked for.
type recallStore struct {
	Store   // not called
	pending []store.Call
	limit   int
}

func (s *recallStore) VersionedRecords(context.Context, ...string) (map[string][]store.Record, int64, error) {
	return map[string][]store.Record{"rule": nil}, 5, nil
}

func (s *recallStore) Pending(_ context.Context, f store.Filter) ([]store.Call, error) {
	s.limit = f.Limit
	return s.pending[:min(f.Limit, len(s.pending))], nil
}

// kindsPolicy is a RecordPolicy that judges by one kind of record; it
// judges nothing.
type kindsPolicy struct {
	Policy
	RecordPolicy
}

func (kindsPolicy) RecordKinds() []string { return []string{"rule"} }

// Recalling the pending calls remembers them, as many as there is room
// for: it never forgets a call remembered before (the newest pauses, more
// likely clicked soon than the oldest pending calls).
func TestRecallForgetsNothingRemembered(t *testing.T) {
	call := func(id string) store.Call { return store.Call{ID: id, Args: json.RawMessage(`{}`)} }
	st := &recallStore{}
	for i := range maxPausedCalls {
		st.pending = append(st.pending, call(store.CallID("old", i)))
	}
	a := &Agent{store: st, policy: kindsPolicy{}, log: slog.New(slog.DiscardHandler)}
	own := map[string][]store.Record{"rule": nil}
	for i := range 10 {
		a.paused.remember(call(store.CallID("own", i)), own, 5, false)
	}
	a.recall(t.Context())
	if st.limit != maxPausedCalls-10 {
		t.Errorf("recall asked for %d pending calls with 10 remembered, want %d", st.limit, maxPausedCalls-10)
	}
	if n := a.paused.count(); n != maxPausedCalls {
		t.Errorf("remembered %d calls after the recall, want %d", n, maxPausedCalls)
	}
	for i := range 10 {
		if _, ok := a.paused.take(store.CallID("own", i)); !ok {
			t.Errorf("call own.%d, remembered before the recall, was forgotten", i)
		}
	}
	if _, ok := a.paused.take(store.CallID("old", 0)); !ok {
		t.Error("the oldest pending call was not recalled")
	}
	// Slots of calls taken (decided) count against no room, but they
	// are still in the ring: a recall forgets them, never a call
	// remembered, however few are.
	a.paused = pausedCalls{}
	for i := range maxPausedCalls - 1 {
		if i == 500 {
			a.paused.remember(call("kept.0"), own, 5, false)
		}
		id := store.CallID("decided", i)
		a.paused.remember(call(id), own, 5, false)
		a.paused.take(id)
	}
	a.recall(t.Context())
	if n := a.paused.count(); n != 501 {
		t.Errorf("remembered %d calls after a recall into the room of 500 taken calls older than a remembered one, want 501", n)
	}
	if _, ok := a.paused.take("kept.0"); !ok {
		t.Error("a call remembered before a recall, among taken ones, was forgotten")
	}
	st.limit = -1
	a.paused = pausedCalls{}
	for i := range maxPausedCalls {
		a.paused.remember(call(store.CallID("new", i)), own, 5, false)
	}
	a.recall(t.Context())
	if st.limit != -1 {
		t.Errorf("recall with no room asked for %d pending calls, want no listing", st.limit)
	}
}

// Runs whose Resume never comes here (a turn, or another process, resumed
// them) do not fill what resumable remembers for good: a run added once
// maxResumable are kept is remembered, another forgotten.
func TestResumableMakesRoom(t *testing.T) {
	var r resumable
	for i := range maxResumable {
		r.add(fmt.Sprint("stale", i), "T1/C1/1")
	}
	r.add("new", "T1/C1/2")
	if conv, ok := r.take("new"); !ok || conv != "T1/C1/2" {
		t.Errorf("a run added with %d kept: take = %q, %v; want it remembered", maxResumable, conv, ok)
	}
	if n := len(r.runs); n != maxResumable-1 {
		t.Errorf("%d runs kept after one was taken; want %d", n, maxResumable-1)
	}
}
