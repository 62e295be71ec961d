package slackapp

import (
	"slices"
	"testing"
)

// A user's tab is published by one round or one opening at a time: an
// opening waits for the round that holds the tab, and a round leaves out
// a tab an opening holds, for the next round once it is out.
func TestHomeTabsPublishedOneAtATime(t *testing.T) {
	h := newHomeRefresh()
	if got := h.claim([]string{"U1", "U2"}); !slices.Equal(got, []string{"U1", "U2"}) {
		t.Fatalf("claim = %v, want both users", got)
	}
	acquired := make(chan bool)
	go func() { acquired <- h.acquire(t.Context(), "U1") }()
	select {
	case <-acquired:
		t.Fatal("an opening took a tab a round is publishing")
	default:
	}
	h.release([]string{"U1", "U2"})
	if !<-acquired {
		t.Fatal("the opening did not get the tab once the round was over")
	}

	if got := h.claim([]string{"U1", "U2"}); !slices.Equal(got, []string{"U2"}) {
		t.Fatalf("claim = %v while U1's tab is being published as they opened it, want U2 only", got)
	}
	h.release([]string{"U2"})
	if _, users := h.take(); len(users) != 0 {
		t.Fatalf("users %v left for the next round before the opening's tab is out", users)
	}
	h.release([]string{"U1"})
	if _, users := h.take(); !slices.Equal(users, []string{"U1"}) {
		t.Fatalf("users left for the next round = %v, want U1, whose tab the round left out", users)
	}
	select {
	case <-h.wake:
	default:
		t.Error("no round is coming for the tab left out")
	}
}
