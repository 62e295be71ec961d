package agent

import (
	"sync"

	"github.com/toolgate/toolgate/store"
)

// maxPausedCalls bounds the calls a pausedCalls remembers; past it the
// oldest are forgotten, and a decision on one of them reads it from the
// store.
const maxPausedCalls = 1024

// maxPausedArgs bounds the arguments of a call worth remembering.
const maxPausedArgs = 4 << 10

// pausedCalls remembers the calls this process paused, as it created
// them, with the policy's records their turn read and the version of those
// records (store.Begun.RecordsVersion), so that a decision on one of them
// soon after is checked without reading the call again: the decision is
// then written on the condition that the records are still at that
// version (store.ResumeBegin.IfRecords), and the store's own checks of the
// call (pending, fingerprint, expiry) cover what else may have changed.
// The records of one version are the same whichever turn read them, so
// one copy of them is kept per version.
type pausedCalls struct {
	mu   sync.Mutex
	byID map[string]pausedCall
	ring []string // the ids in byID, oldest at next; empty where taken
	next int
	recs map[int64]*sharedRecords
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

// add remembers calls, checked against recs at version; nothing without a
// version, and no call whose arguments are large.
func (p *pausedCalls) add(calls []store.Call, recs map[string][]store.Record, version int64) {
	if version == 0 || recs == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = make(map[string]pausedCall)
		p.ring = make([]string, maxPausedCalls)
		p.recs = make(map[int64]*sharedRecords)
	}
	for _, c := range calls {
		if len(c.Args) > maxPausedArgs {
			continue
		}
		if old := p.ring[p.next]; old != "" {
			p.forget(old)
		}
		p.ring[p.next] = c.ID
		p.next = (p.next + 1) % len(p.ring)
		sr := p.recs[version]
		if sr == nil {
			sr = &sharedRecords{recs: recs}
			p.recs[version] = sr
		}
		sr.uses++
		p.byID[c.ID] = pausedCall{call: c, version: version, recs: sr.recs}
	}
}

// take returns and forgets the call id, if remembered. Its ring slot is
// reused in turn: call ids are never added twice.
func (p *pausedCalls) take(id string) (pausedCall, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pc, ok := p.byID[id]
	if ok {
		p.forget(id)
	}
	return pc, ok
}

// forget drops a remembered call, and its records when no other call uses
// them.
func (p *pausedCalls) forget(id string) {
	pc, ok := p.byID[id]
	if !ok {
		return
	}
	delete(p.byID, id)
	if sr := p.recs[pc.version]; sr != nil {
		if sr.uses--; sr.uses == 0 {
			delete(p.recs, pc.version)
		}
	}
}
