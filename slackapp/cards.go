package slackapp

import (
	"strings"
	"sync"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fixedkey"
)

// maxCardMemory bounds the posted cards whose locations a process
// remembers; past it the oldest are forgotten (their updates read the
// store, as on another replica). It covers the cards of several seconds at
// the bot's peak rate, and of hours at a person's pace, which is when
// their updates come: a decision, an expiry or a cancellation.
const maxCardMemory = 4096

// cardMemory remembers where this process posted cards, so that updating
// them needs no store read. The store stays the truth, read for cards
// posted by another replica or before a restart, and for those forgotten.
// A card's locations never change once posted, so what is remembered is
// never stale, only incomplete while the card is being posted.
//
// It may hold maxCardMemory cards for as long as they are pending, so the
// posted cards live in one ring allocated once, oldest forgotten first,
// found through a map of fixed-size keys: remembering a card allocates
// nothing that outlives it, and nothing long-lived is scattered among the
// short-lived allocations of the burst that posted it. Only the few cards
// being posted have a postedCard.
type cardMemory struct {
	mu sync.Mutex
	// inFlight holds the cards being posted, by call id.
	inFlight map[string]*postedCard
	// posted finds the cards posted in ring.
	posted map[fixedkey.Key]int32
	// ring holds the cards posted, oldest at next.
	ring []rememberedCard
	next int
	// finished holds the latest maxCardMemory cards forgotten once their
	// final render was out (see forget), oldest at finNext in finRing: a
	// render of an earlier phase that comes later is older news.
	finished map[fixedkey.Key]struct{}
	finRing  []fixedkey.Key
	finNext  int
	// retrying holds the copies of cards whose update Slack refused with a
	// rate limit, each with the update to make once Slack allows it (see
	// App.cardRetryLater).
	retrying map[cardCopy]*cardRetry
}

// cardCopy is one copy of a call's card.
type cardCopy struct {
	callID string
	ref    cardRef
}

// rememberedCard is a posted card: where its copies are (packRefs), in
// place when they fit, as is the case of a card with one copy.
type rememberedCard struct {
	key  fixedkey.Key // zero: no card
	n    uint8        // of refs used; 0 when the locations are in more
	rank uint8        // of the latest phase rendered on it (see advance)
	refs [62]byte
	more string
}

func (r *rememberedCard) set(key fixedkey.Key, refs string) {
	*r = rememberedCard{key: key}
	if len(refs) > 0 && len(refs) <= len(r.refs) {
		r.n = uint8(copy(r.refs[:], refs))
	} else {
		r.more = strings.Clone(refs) // it may be cut from a bigger string
	}
}

func (r *rememberedCard) locations() string {
	if r.n > 0 {
		return string(r.refs[:r.n])
	}
	return r.more
}

// postedCard is where one card's copies went, while they are posted, or
// as remembered once they are.
type postedCard struct {
	callID string
	// posted is closed once every copy is posted and recorded in the
	// store.
	posted chan struct{}
	refs   []cardRef
}

// cardPosted is the posted channel of the cards already posted.
var cardPosted = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

// posting starts remembering a card being posted, replacing what was
// remembered of it, and returns it for add and done.
func (m *cardMemory) posting(callID string) *postedCard {
	c := &postedCard{callID: callID, posted: make(chan struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropPosted(callID)
	if m.inFlight == nil {
		m.inFlight = map[string]*postedCard{}
	}
	m.inFlight[callID] = c
	return c
}

// add notes that a copy of c is out.
func (m *cardMemory) add(c *postedCard, ref cardRef) {
	m.mu.Lock()
	c.refs = append(c.refs, ref)
	m.mu.Unlock()
}

// done notes that every copy of c is out and recorded: c is remembered as
// posted, unless it was forgotten or posted again meanwhile, or its id or
// its locations cannot be kept.
func (m *cardMemory) done(c *postedCard) {
	m.mu.Lock()
	if m.inFlight[c.callID] == c {
		delete(m.inFlight, c.callID)
		if len(m.inFlight) == 0 {
			m.inFlight = nil // a map keeps the size a burst gave it
		}
		key, ok := fixedkey.Of(c.callID)
		refs, packed := packRefs(c.refs)
		if ok && packed {
			m.remember(key, refs)
		}
	}
	m.mu.Unlock()
	close(c.posted)
}

// remember adds a posted card in the ring's oldest place, forgetting the
// card there.
func (m *cardMemory) remember(key fixedkey.Key, refs string) {
	if m.ring == nil {
		m.ring = make([]rememberedCard, maxCardMemory)
		m.posted = make(map[fixedkey.Key]int32, maxCardMemory)
	}
	slot := &m.ring[m.next]
	if slot.key != (fixedkey.Key{}) {
		delete(m.posted, slot.key)
	}
	slot.set(key, refs)
	m.posted[key] = int32(m.next)
	m.next = (m.next + 1) % len(m.ring)
	if m.next == 0 {
		m.posted = fixedkey.Compacted(m.posted, maxCardMemory)
	}
}

// dropPosted forgets the posted card of callID, if remembered.
func (m *cardMemory) dropPosted(callID string) {
	key, ok := fixedkey.Of(callID)
	if !ok {
		return
	}
	if i, ok := m.posted[key]; ok {
		m.ring[i] = rememberedCard{}
		delete(m.posted, key)
	}
}

// lookup returns the card remembered for callID, if any, with a channel
// closed once it is posted.
func (m *cardMemory) lookup(callID string) (c *postedCard, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.inFlight[callID]; ok {
		return c, true
	}
	key, ok := fixedkey.Of(callID)
	if !ok {
		return nil, false
	}
	i, ok := m.posted[key]
	if !ok {
		return nil, false
	}
	return &postedCard{callID: callID, posted: cardPosted, refs: unpackRefs(m.ring[i].locations())}, true
}

// phaseRank orders what a card shows of its call's phases: counted, then
// decided, then ran or skipped (finalRank).
func phaseRank(p agent.Phase) uint8 {
	switch p {
	case agent.PhaseCounted:
		return 1
	case agent.PhaseDecided:
		return 2
	case agent.PhaseExecuted, agent.PhaseSkipped:
		return finalRank
	}
	return 0
}

const finalRank = 3

// advance reports whether a render of rank may replace what callID's card
// shows, and notes rank when it may: not when this process rendered a
// later phase of the call on it already, as when the render of a decision
// comes after the call ran (another click completed its step and the
// resume ran meanwhile). A card this process does not remember renders
// whatever comes.
func (m *cardMemory) advance(callID string, rank uint8) bool {
	key, ok := fixedkey.Of(callID)
	if !ok {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.finished[key]; ok {
		return rank >= finalRank
	}
	i, ok := m.posted[key]
	if !ok {
		return true
	}
	r := &m.ring[i]
	if rank < r.rank {
		return false
	}
	r.rank = rank
	return true
}

// announcing reports whether this process is posting callID's card, or
// its copies.
func (m *cardMemory) announcing(callID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.inFlight[callID]
	return ok
}

// refsOf returns the copies of c out so far.
func (m *cardMemory) refsOf(c *postedCard) []cardRef {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]cardRef(nil), c.refs...)
}

// forget drops what is remembered of callID's card once its final render
// is out, and notes that it is (see advance).
func (m *cardMemory) forget(callID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.inFlight, callID)
	m.dropPosted(callID)
	key, ok := fixedkey.Of(callID)
	if !ok {
		return
	}
	if m.finRing == nil {
		m.finRing = make([]fixedkey.Key, maxCardMemory)
		m.finished = make(map[fixedkey.Key]struct{}, maxCardMemory)
	}
	if _, ok := m.finished[key]; ok {
		return
	}
	if old := m.finRing[m.finNext]; old != (fixedkey.Key{}) {
		delete(m.finished, old)
	}
	m.finRing[m.finNext] = key
	m.finished[key] = struct{}{}
	m.finNext = (m.finNext + 1) % len(m.finRing)
	if m.finNext == 0 {
		m.finished = fixedkey.Compacted(m.finished, maxCardMemory)
	}
}

// packRefs joins a card's locations in one string, "channel ts" pairs
// separated by spaces. Slack's channel ids and message timestamps have no
// spaces; ok is false for refs that do, which are not remembered.
func packRefs(refs []cardRef) (string, bool) {
	var b strings.Builder
	for i, r := range refs {
		if r.Channel == "" || r.TS == "" || strings.Contains(r.Channel, " ") || strings.Contains(r.TS, " ") {
			return "", false
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Channel)
		b.WriteByte(' ')
		b.WriteString(r.TS)
	}
	return b.String(), true
}

// unpackRefs is the inverse of packRefs.
func unpackRefs(s string) []cardRef {
	if s == "" {
		return nil
	}
	f := strings.Split(s, " ")
	refs := make([]cardRef, 0, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		refs = append(refs, cardRef{Channel: f[i], TS: f[i+1]})
	}
	return refs
}

// refused notes that Slack refused to update a copy of callID's card with
// r until r.due (a rate limit). A copy with an update waiting already
// waits for r instead, the latest news, and keeps the time of its first
// refusal; for one without, refused reports true, and the caller sees to
// it that r is made once due.
func (m *cardMemory) refused(callID string, ref cardRef, r cardRetry) (first bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := cardCopy{callID: callID, ref: ref}
	if old, ok := m.retrying[k]; ok {
		r.since = old.since
		*old = r
		return false
	}
	if m.retrying == nil {
		m.retrying = map[cardCopy]*cardRetry{}
	}
	m.retrying[k] = &r
	return true
}

// failed notes that an update of a copy of callID's card failed otherwise
// than by a rate limit: an update waiting for the copy makes r instead,
// the latest news.
func (m *cardMemory) failed(callID string, ref cardRef, r cardRetry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.retrying[cardCopy{callID: callID, ref: ref}]; ok {
		old.call, old.rank, old.blocks, old.text = r.call, r.rank, r.blocks, r.text
	}
}

// settled forgets the update waiting for a copy of callID's card, if any:
// a later one was made, or it was made, or given up.
func (m *cardMemory) settled(callID string, ref cardRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.retrying, cardCopy{callID: callID, ref: ref})
	if len(m.retrying) == 0 {
		m.retrying = nil // a map keeps the size a burst gave it
	}
}

// waiting returns the update waiting for a copy of callID's card; ok is
// false when there is none.
func (m *cardMemory) waiting(callID string, ref cardRef) (r cardRetry, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.retrying[cardCopy{callID: callID, ref: ref}]; ok {
		return *p, true
	}
	return cardRetry{}, false
}
