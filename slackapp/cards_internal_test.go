package slackapp

import (
	"fmt"
	"testing"
)

// The card memory keeps at most maxCardMemory cards, forgetting the oldest
// first, and a card posted again replaces what was remembered of it.
func TestCardMemoryIsBounded(t *testing.T) {
	var m cardMemory
	for i := range maxCardMemory {
		c := m.posting(fmt.Sprint(i))
		m.add(c, cardRef{Channel: "C1", TS: fmt.Sprint(i)})
		m.done(c)
	}
	again := m.posting("0") // now the newest
	m.add(again, cardRef{Channel: "C2", TS: "again"})
	m.done(again)
	m.posting("new")
	if _, ok := m.lookup("1"); ok {
		t.Errorf("card 1, the oldest, is still remembered past the bound")
	}
	c, ok := m.lookup("0")
	if !ok {
		t.Fatalf("card 0, posted again, was forgotten")
	}
	if refs := m.refsOf(c); len(refs) != 1 || refs[0].TS != "again" {
		t.Errorf("card 0 refs = %+v; want only the copy posted again", refs)
	}
	if n := len(m.cards); n != maxCardMemory {
		t.Errorf("%d cards remembered; want %d", n, maxCardMemory)
	}
	m.forget("0")
	if _, ok := m.lookup("0"); ok {
		t.Errorf("card 0 is remembered after forget")
	}
}
