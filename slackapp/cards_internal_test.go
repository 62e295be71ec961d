package slackapp

import (
	"fmt"
	"slices"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// post remembers a card posted with refs.
func (m *cardMemory) post(callID string, refs ...cardRef) {
	c := m.posting(callID)
	for _, r := range refs {
		m.add(c, r)
	}
	m.done(c)
}

// remembered returns the refs remembered for callID, or ok false.
func (m *cardMemory) remembered(t *testing.T, callID string) (refs []cardRef, ok bool) {
	t.Helper()
	c, ok := m.lookup(callID)
	if !ok {
		return nil, false
	}
	select {
	case <-c.posted:
	default:
		t.Fatalf("card %s is remembered as still being posted", callID)
	}
	return m.refsOf(c), true
}

// The card memory keeps at most maxCardMemory posted cards, forgetting the
// oldest first, and a card posted again replaces what was remembered of
// it and counts as the newest.
func TestCardMemoryIsBounded(t *testing.T) {
	var m cardMemory
	for i := range maxCardMemory {
		m.post(fmt.Sprint(i), cardRef{Channel: "C1", TS: fmt.Sprint(i)})
	}
	m.post("0", cardRef{Channel: "C2", TS: "again"}) // now the newest
	m.post("new")
	if _, ok := m.remembered(t, "1"); ok {
		t.Errorf("card 1, the oldest, is still remembered past the bound")
	}
	if refs, ok := m.remembered(t, "0"); !ok || !slices.Equal(refs, []cardRef{{Channel: "C2", TS: "again"}}) {
		t.Errorf("card 0 posted again: remembered %v (%+v); want only the copy posted again", ok, refs)
	}
	if refs, ok := m.remembered(t, "new"); !ok || len(refs) != 0 {
		t.Errorf("card with no copy: remembered %v (%+v); want remembered with none", ok, refs)
	}
	if refs, ok := m.remembered(t, "2"); !ok || !slices.Equal(refs, []cardRef{{Channel: "C1", TS: "2"}}) {
		t.Errorf("card 2: remembered %v (%+v); want its copy", ok, refs)
	}
	if n := len(m.posted); n != maxCardMemory {
		t.Errorf("%d cards remembered; want %d", n, maxCardMemory)
	}
	m.forget("0")
	if _, ok := m.lookup("0"); ok {
		t.Errorf("card 0 is remembered after forget")
	}
	// The place card 0 left holds no card: the post that reaches it
	// forgets none, and the card after it was posted is the oldest left.
	for i := range maxCardMemory - 1 {
		m.post(fmt.Sprint("more", i))
	}
	if n := len(m.posted); n != maxCardMemory {
		t.Errorf("after forgetting one and posting %d more, %d cards remembered; want %d", maxCardMemory-1, n, maxCardMemory)
	}
	if _, ok := m.remembered(t, "new"); !ok {
		t.Errorf("card new, the oldest left, was forgotten")
	}
	m.post("last")
	if _, ok := m.remembered(t, "new"); ok {
		t.Errorf("card new, the oldest, is still remembered past the bound")
	}
}

// A card being posted is found at once, with its copies so far, and counts
// as posted once done; one forgotten or posted again meanwhile is not
// brought back by its first post's end.
func TestCardMemoryPosting(t *testing.T) {
	var m cardMemory
	c := m.posting("a")
	m.add(c, cardRef{Channel: "C1", TS: "1.0"})
	got, ok := m.lookup("a")
	if !ok {
		t.Fatal("a card being posted is not found")
	}
	select {
	case <-got.posted:
		t.Fatal("a card being posted is found as posted")
	default:
	}
	m.add(c, cardRef{Channel: "D2", TS: "2.0"})
	m.done(c)
	<-got.posted
	want := []cardRef{{Channel: "C1", TS: "1.0"}, {Channel: "D2", TS: "2.0"}}
	if refs := m.refsOf(got); !slices.Equal(refs, want) {
		t.Errorf("copies of the card looked up while posted: %+v; want %+v", refs, want)
	}
	if refs, ok := m.remembered(t, "a"); !ok || !slices.Equal(refs, want) {
		t.Errorf("card a once posted: remembered %v (%+v); want %+v", ok, refs, want)
	}
	if m.inFlight != nil {
		t.Errorf("%d cards left as being posted; want none", len(m.inFlight))
	}

	first := m.posting("b")
	m.forget("b")
	m.add(first, cardRef{Channel: "C1", TS: "3.0"})
	m.done(first)
	if _, ok := m.lookup("b"); ok {
		t.Errorf("card b, forgotten while posted, is remembered")
	}

	first = m.posting("c")
	second := m.posting("c")
	m.add(first, cardRef{Channel: "C1", TS: "4.0"})
	m.done(first)
	if got, ok := m.lookup("c"); !ok || got != second {
		t.Errorf("card c posted again: the first post's end replaced the second post")
	}
	m.add(second, cardRef{Channel: "C1", TS: "5.0"})
	m.done(second)
	if refs, ok := m.remembered(t, "c"); !ok || !slices.Equal(refs, []cardRef{{Channel: "C1", TS: "5.0"}}) {
		t.Errorf("card c: remembered %v (%+v); want the second post's copy", ok, refs)
	}
}

// Locations survive packing, and ones that cannot be packed are not
// remembered (their updates read the store).
func TestCardRefsPacking(t *testing.T) {
	for _, refs := range [][]cardRef{
		nil,
		{{Channel: "C1", TS: "1700000000.000100"}},
		{{Channel: "C1", TS: "1.0"}, {Channel: "D2", TS: "2.0"}, {Channel: "G3", TS: "3.0"}},
	} {
		s, ok := packRefs(refs)
		if got := unpackRefs(s); !ok || !slices.Equal(got, refs) {
			t.Errorf("packRefs(%+v) = %q, %v; unpacked %+v", refs, s, ok, got)
		}
	}
	var m cardMemory
	m.post("odd", cardRef{Channel: "C 1", TS: "1.0"})
	if _, ok := m.lookup("odd"); ok {
		t.Errorf("a card whose channel has a space is remembered")
	}
	long := "0123456789abcdef0123456789abcdef.0"
	m.post(long, cardRef{Channel: "C1", TS: "1.0"})
	if _, ok := m.lookup(long); ok {
		t.Errorf("a card whose call id is longer than a key is remembered")
	}
	// Locations too long to keep in place are kept beside.
	many := []cardRef{
		{Channel: "C0123456789", TS: "1700000000.000100"}, {Channel: "D0123456789", TS: "1700000000.000200"},
		{Channel: "D9876543210", TS: "1700000000.000300"},
	}
	m.post("0123456789abcdef.1", many...)
	if refs, ok := m.remembered(t, "0123456789abcdef.1"); !ok || !slices.Equal(refs, many) {
		t.Errorf("card with three copies: remembered %v (%+v); want %+v", ok, refs, many)
	}
}

// The outcome a card shows for a call skipped at resume: an interrupted
// call's outcome is unknown (it may have run), and notes are not prefixed
// twice.
func TestSkippedCardOutcome(t *testing.T) {
	decided := agent.Call{ID: "r.0", Tool: "deploy", Status: agent.CallDecided, Decision: &agent.Decision{Kind: approvals.Approve, Decider: "UAPPROVER1"}}
	for note, want := range map[string]string{
		agent.NoteInterrupted:              "outcome unknown: the bot stopped while it ran, and it was not run again",
		"the requester cancelled the turn": "not run: the requester cancelled the turn",
	} {
		card := cardOf(agent.PendingCall{Call: decided}, &agent.CallUpdate{Call: decided, Phase: agent.PhaseSkipped, Note: note})
		if card.Outcome != want {
			t.Errorf("note %q: outcome %q, want %q", note, card.Outcome, want)
		}
	}
}
