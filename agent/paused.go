package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/internal/fixedkey"
	"github.com/toolgate/toolgate/store"
)

const (
	// maxPausedCalls bounds the calls a pausedCalls remembers; past it
	// the oldest are forgotten, and a decision on one of them reads it
	// from the store.
	maxPausedCalls = 1024
	// maxPausedArgs bounds the arguments of a call worth remembering.
	maxPausedArgs = 4 << 10
	// pausedBytes is the size of the ring the remembered calls are
	// encoded in: about 700 bytes a call, so the count is what binds
	// unless arguments are large.
	pausedBytes = 1 << 20
)

// pausedCalls remembers the calls this process paused, as it created
// them, with the policy's records their turn read and the version of those
// records (store.Begun.RecordsVersion), so that a decision on one of them
// soon after is checked without reading the call again: the decision is
// then written on the condition that the records are still at that
// version (store.ResumeBegin.IfRecords), and the store's own checks of the
// call (pending, fingerprint, expiry) cover what else may have changed.
// The records of one version are the same whichever turn read them, so
// one copy of them is kept per version.
//
// The calls are kept for as long as they are pending, up to the bound, so
// they are encoded one after the other in a ring of bytes allocated once,
// found through a map of fixed-size keys: remembering one allocates
// nothing that outlives it, and nothing long-lived is scattered among the
// short-lived allocations of the turns that paused them.
type pausedCalls struct {
	mu sync.Mutex
	// buf holds the encoded calls of slots, in slot order, wrapping
	// around; head is where the next one goes.
	buf  []byte
	head int
	// slots holds the remembered calls, oldest at tail, n of them; a
	// taken one stays, with a zero key, until its turn to go.
	slots   []pausedSlot
	tail, n int
	byKey   map[fixedkey.Key]int32 // the slot of each remembered call
	recs    map[int64]*sharedRecords
}

// pausedSlot is a remembered call: its encoding is buf[off:off+size].
type pausedSlot struct {
	key       fixedkey.Key // zero: taken
	off, size int32
	version   int64
}

// pausedCall is a call as paused, and the version of the records it is
// checked against.
type pausedCall struct {
	call    store.Call
	version int64
	recs    map[string][]store.Record
}

// sharedRecords are the records of one version, and how many remembered
// calls use them.
type sharedRecords struct {
	recs map[string][]store.Record
	uses int
}

// rememberable returns, as an announcement, the calls worth remembering,
// checked against recs at version: none without a version, and no call
// whose arguments are large; and, in any case, the earliest deadline of
// all of them.
func rememberable(calls []store.Call, recs map[string][]store.Record, version int64) announcement {
	an := announcement{Version: version, Due: dueOf(calls)}
	if version == 0 || recs == nil {
		return an
	}
	for _, c := range calls {
		if len(c.Args) > maxPausedArgs {
			continue
		}
		enc, err := json.Marshal(c)
		if err != nil || len(enc) > pausedBytes/16 {
			continue
		}
		an.IDs = append(an.IDs, c.ID)
		an.Calls = append(an.Calls, enc)
	}
	return an
}

// dueOf returns the earliest deadline of calls, an expiry or a reminder,
// in Unix milliseconds rounded up (so that it is not before the deadline);
// zero if they have none.
func dueOf(calls []store.Call) int64 {
	var due time.Time
	for _, c := range calls {
		for _, t := range [...]time.Time{c.ExpiresAt, c.RemindAt} {
			if !t.IsZero() && (due.IsZero() || t.Before(due)) {
				due = t
			}
		}
	}
	if due.IsZero() {
		return 0
	}
	return due.Add(time.Millisecond - 1).UnixMilli()
}

// addAll remembers the calls of an, checked against recs.
func (p *pausedCalls) addAll(an announcement, recs map[string][]store.Record) {
	for i, id := range an.IDs {
		p.addEncoded(id, an.Calls[i], recs, an.Version)
	}
}

// remember remembers c, checked against recs at version, unless its
// arguments are large; with keep, only if that forgets no call remembered
// (a call remembered already stays as it is). It reports whether c is
// remembered.
func (p *pausedCalls) remember(c store.Call, recs map[string][]store.Record, version int64, keep bool) bool {
	key, ok := fixedkey.Of(c.ID)
	if !ok || len(c.Args) > maxPausedArgs {
		return false
	}
	if keep && p.has(key) {
		return true
	}
	enc, err := json.Marshal(c)
	if err != nil || len(enc) > pausedBytes/16 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byKey[key]; ok && keep {
		return true
	}
	return p.put(key, enc, recs, version, keep)
}

// has reports whether the call of key is remembered.
func (p *pausedCalls) has(key fixedkey.Key) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byKey[key]
	return ok
}

// count returns how many calls are remembered.
func (p *pausedCalls) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byKey)
}

// addEncoded remembers the call id encoded as enc, checked against recs
// at version, unless it is too large to keep.
func (p *pausedCalls) addEncoded(id string, enc []byte, recs map[string][]store.Record, version int64) {
	key, ok := fixedkey.Of(id)
	if !ok || len(enc) > pausedBytes/16 {
		return
	}
	p.mu.Lock()
	p.put(key, enc, recs, version, false)
	p.mu.Unlock()
}

// recordsAt returns the records of version that remembered calls use, or
// nil.
func (p *pausedCalls) recordsAt(version int64) map[string][]store.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	if sr := p.recs[version]; sr != nil {
		return sr.recs
	}
	return nil
}

// announcement is what a process tells the others that share its store
// about the calls it paused (see Agent.FollowPauses): when the first of
// them is due, and each call as pausedCalls keeps it (none when it cannot
// be remembered: see rememberable), with the version of the records its
// turn judged it by.
type announcement struct {
	Owner   string `json:"owner"`
	Version int64  `json:"version"`
	// Due is the earliest deadline of the calls paused, an expiry or a
	// reminder, in Unix milliseconds (zero: none), whether the calls are
	// here or not: the others act on it should this process stop first.
	Due   int64             `json:"due,omitempty"`
	IDs   []string          `json:"ids"`
	Calls []json.RawMessage `json:"calls"`
	// Records are the records of the version, unless they are large:
	// for a process that has not read them itself.
	Records json.RawMessage `json:"records,omitempty"`
}

// maxAnnouncedRecords bounds the records an announcement carries.
const maxAnnouncedRecords = 16 << 10

// readRecords are records a turn read, and their version.
type readRecords struct {
	version int64
	recs    map[string][]store.Record
}

// PauseFeed is a store that several processes share and that announces
// each pause to all of them (redisstore on one node: see store.Commit's
// Announce).
type PauseFeed interface {
	// FollowPauses calls fn with each announcement until ctx ends, and
	// live each time announcements reach this process: first, and
	// again after a reconnection.
	FollowPauses(ctx context.Context, live func(), fn func(announce []byte)) error
}

// FollowPauses remembers the calls other processes pause, as each
// remembers its own, so that a decision made here on one of them soon
// after takes one store step (see pausedCalls), until ctx ends. due, if
// set, is told the earliest deadline (an expiry or a reminder) of the
// calls of each pause another process announces, whether they can be
// remembered or not, so that the timer that calls Expire here acts on
// time should that process stop before; it must not block. It needs a
// store that announces pauses (PauseFeed) and, for each announcement, the
// records of the version its calls were judged by, as a turn of this
// process read them last or as other remembered calls use them;
// otherwise a decision reads the call first, as it always may. Each time
// the announcements reach this process, first and again after a
// reconnection (announcements made meanwhile are not replayed), it
// recalls the pending calls (see recall), and after a reconnection tells
// due the time now, so that the timer reads the next deadline again; with
// a store that announces nothing it recalls them once and returns. ready,
// if set, is called once the first recall is done.
func (a *Agent) FollowPauses(ctx context.Context, ready func(), due func(time.Time)) error {
	again := false
	live := func() {
		a.recall(ctx)
		if ready != nil {
			ready()
			ready = nil
		}
		if again && due != nil {
			// Announcements published while the subscription was cut
			// are lost with their due times: the next deadline is read
			// from the store again, at once, should the process that
			// paused a call stop before it is due.
			due(a.cfg.Now())
		}
		again = true
	}
	feed, ok := a.store.(PauseFeed)
	if !ok {
		live()
		return nil
	}
	announced := func(b []byte) { a.announced(b, due) }
	if err := feed.FollowPauses(ctx, live, announced); err != nil {
		return fmt.Errorf("follow pauses: %w", err)
	}
	return nil
}

// recall remembers the pending calls (the oldest, as many as there is
// room for without forgetting any call remembered: up to maxPausedCalls
// when the process starts) with the policy's records as they are now, so
// that a decision on one of them takes one store step, as on a call this
// process paused, after a restart or after announcements were missed.
// The records are read first: a decision is made only while they are
// still at their version, and the store checks the rest of the call (see
// decidePaused). A failure is logged: decisions read the call.
func (a *Agent) recall(ctx context.Context) {
	kinds := a.policyKinds()
	room := maxPausedCalls - a.paused.count()
	if len(kinds) == 0 || room <= 0 {
		return
	}
	recs, version, err := a.store.VersionedRecords(ctx, kinds...)
	if err == nil && version != 0 {
		var calls []store.Call
		calls, err = a.store.Pending(ctx, store.Filter{Limit: room})
		for _, c := range calls {
			if !a.paused.remember(c, recs, version, true) {
				break
			}
		}
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("recall the pending calls; a decision on one reads it first", "err", err)
	}
}

// announced tells due, if set, when the calls of another process's
// announcement are due, and remembers them.
func (a *Agent) announced(b []byte, due func(time.Time)) {
	var an announcement
	if json.Unmarshal(b, &an) != nil || an.Owner == a.cfg.Owner {
		return
	}
	if an.Due != 0 && due != nil {
		due(time.UnixMilli(an.Due))
	}
	if an.Version == 0 || len(an.IDs) != len(an.Calls) {
		return
	}
	recs := a.paused.recordsAt(an.Version)
	if r := a.read.Load(); recs == nil && r != nil && r.version == an.Version {
		recs = r.recs
	}
	if recs == nil && (len(an.Records) == 0 || json.Unmarshal(an.Records, &recs) != nil || recs == nil) {
		return
	}
	a.paused.addAll(an, recs)
}

// announce returns the announcement of the calls in remember, checked
// against recs, for the other processes: the records go with the calls,
// if any.
func (a *Agent) announce(remember announcement, recs map[string][]store.Record) []byte {
	remember.Owner = a.cfg.Owner
	if len(remember.IDs) == 0 {
		return mustJSON(remember)
	}
	if b, err := json.Marshal(recs); err == nil && len(b) <= maxAnnouncedRecords {
		remember.Records = b
	}
	return mustJSON(remember)
}

// put stores a call's encoding in the ring, forgetting the oldest calls
// as far as needed for the room; with keep, it forgets only calls taken
// already, and stores nothing (reporting false) when that leaves no room.
func (p *pausedCalls) put(key fixedkey.Key, enc []byte, recs map[string][]store.Record, version int64, keep bool) bool {
	if p.buf == nil {
		p.buf = make([]byte, pausedBytes)
		p.slots = make([]pausedSlot, maxPausedCalls)
		p.byKey = make(map[fixedkey.Key]int32, maxPausedCalls)
		p.recs = make(map[int64]*sharedRecords)
	}
	if i, ok := p.byKey[key]; ok {
		p.drop(i)
	}
	// The calls lie in slot order from the tail's to head, wrapping
	// around once at most. Without a wrap the room after head is free up
	// to the tail's call (if it lies after head) and the calls in the way
	// go oldest first. With one, the calls at head or after it are the
	// previous lap's: they go first, then those in the way from the start.
	off, wrap := p.head, false
	if off+len(enc) > len(p.buf) {
		off, wrap = 0, true
	}
	end := off + len(enc)
	for p.n > 0 {
		t := p.slots[p.tail]
		tOff, tEnd := int(t.off), int(t.off+t.size)
		inTheWay := tOff < end && off < tEnd
		if p.n < len(p.slots) && !inTheWay && !(wrap && tOff >= p.head) {
			break
		}
		if keep && t.key != (fixedkey.Key{}) {
			return false
		}
		p.drop(int32(p.tail))
		p.tail = (p.tail + 1) % len(p.slots)
		p.n--
	}
	copy(p.buf[off:], enc)
	p.head = end
	i := (p.tail + p.n) % len(p.slots)
	p.slots[i] = pausedSlot{key: key, off: int32(off), size: int32(len(enc)), version: version}
	p.n++
	p.byKey[key] = int32(i)
	sr := p.recs[version]
	if sr == nil {
		sr = &sharedRecords{recs: recs}
		p.recs[version] = sr
	}
	sr.uses++
	return true
}

// take returns and forgets the call id, if remembered.
func (p *pausedCalls) take(id string) (pausedCall, bool) {
	key, ok := fixedkey.Of(id)
	if !ok {
		return pausedCall{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byKey[key]
	if !ok {
		return pausedCall{}, false
	}
	s := p.slots[i]
	pc := pausedCall{version: s.version, recs: p.recs[s.version].recs}
	err := fastjson.Unmarshal(p.buf[s.off:s.off+s.size], &pc.call)
	p.drop(i)
	if err != nil || pc.call.ID != id {
		return pausedCall{}, false
	}
	return pc, true
}

// drop forgets the call in slot i, if it is still remembered, and its
// records when no other call uses them.
func (p *pausedCalls) drop(i int32) {
	s := &p.slots[i]
	if s.key == (fixedkey.Key{}) {
		return
	}
	delete(p.byKey, s.key)
	s.key = fixedkey.Key{}
	if sr := p.recs[s.version]; sr != nil {
		if sr.uses--; sr.uses == 0 {
			delete(p.recs, s.version)
		}
	}
}
