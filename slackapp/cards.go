package slackapp

import (
	"container/list"
	"sync"
)

// maxCardMemory bounds the cards whose locations a process remembers;
// past it the oldest are forgotten (their updates read the store).
const maxCardMemory = 10000

// cardMemory remembers where this process posted cards, so that updating
// them needs no store read. The store stays the truth, read for cards
// posted by another replica or before a restart, and for those forgotten.
// A card's locations never change once posted, so what is remembered is
// never stale, only incomplete while the card is being posted.
type cardMemory struct {
	mu    sync.Mutex
	cards map[string]*list.Element // of *postedCard, by call id
	order list.List                // oldest first
}

// postedCard is where one card's copies went.
type postedCard struct {
	callID string
	// posted is closed once every copy is posted and recorded in the
	// store.
	posted chan struct{}
	refs   []cardRef
}

// posting starts remembering a card being posted, replacing what was
// remembered of it, and returns it for add and done.
func (m *cardMemory) posting(callID string) *postedCard {
	c := &postedCard{callID: callID, posted: make(chan struct{})}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cards == nil {
		m.cards = map[string]*list.Element{}
	}
	if e, ok := m.cards[callID]; ok {
		m.order.Remove(e)
	}
	for len(m.cards) >= maxCardMemory {
		oldest := m.order.Front()
		m.order.Remove(oldest)
		delete(m.cards, oldest.Value.(*postedCard).callID)
	}
	m.cards[callID] = m.order.PushBack(c)
	return c
}

// add notes that a copy of c is out.
func (m *cardMemory) add(c *postedCard, ref cardRef) {
	m.mu.Lock()
	c.refs = append(c.refs, ref)
	m.mu.Unlock()
}

// done notes that every copy of c is out and recorded.
func (m *cardMemory) done(c *postedCard) { close(c.posted) }

// lookup returns the card remembered for callID, if any, with a channel
// closed once it is posted.
func (m *cardMemory) lookup(callID string) (c *postedCard, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.cards[callID]
	if !ok {
		return nil, false
	}
	return e.Value.(*postedCard), true
}

// refsOf returns the copies of c out so far.
func (m *cardMemory) refsOf(c *postedCard) []cardRef {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]cardRef(nil), c.refs...)
}

// forget drops what is remembered of callID's card, once nothing will
// update it again.
func (m *cardMemory) forget(callID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.cards[callID]; ok {
		m.order.Remove(e)
		delete(m.cards, callID)
	}
}
