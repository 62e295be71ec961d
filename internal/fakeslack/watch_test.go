package fakeslack_test

import (
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

func TestChangedWakesOnEachChange(t *testing.T) {
	s := newServer(t)
	ch := s.Changed()
	select {
	case <-ch:
		t.Fatal("Changed fired before any change")
	default:
	}
	s.Post("C1OPS", "U1ALICE", "hello")
	<-ch // a post is a change; blocks (and times out the test) if not
	next := s.Changed()
	select {
	case <-next:
		t.Fatal("the next Changed channel fired before the next change")
	default:
	}
	s.Close()
	<-s.Changed() // closed at once after Close
}

func TestCloseView(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, ackAll)
	b.next(t, socketmode.EventTypeHello)

	req := modal("Reject")
	req.NotifyOnClose = true
	v, err := b.api.OpenView(s.IssueTrigger("U1ALICE"), req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CloseView("U2BOSS", v.ID); err == nil {
		t.Error("someone else closed alice's modal: got no error")
	}
	if err := s.CloseView("U1ALICE", "VNOPE"); err == nil {
		t.Error("closing an unknown view: got no error")
	}
	if err := s.CloseView("U1ALICE", v.ID); err != nil {
		t.Fatal(err)
	}
	if got := s.OpenModals("U1ALICE"); len(got) != 0 {
		t.Errorf("after CloseView: got %d open modals, want 0", len(got))
	}
	evt := b.next(t, socketmode.EventTypeInteractive)
	if cb, ok := evt.Data.(slack.InteractionCallback); !ok || cb.Type != slack.InteractionTypeViewClosed || cb.View.ID != v.ID {
		t.Errorf("got %+v, want a view_closed interaction for %s", evt.Data, v.ID)
	}
	if err := s.CloseView("U1ALICE", v.ID); err != nil {
		t.Errorf("closing it again: %v", err)
	}
}

func TestUsersListsThePeople(t *testing.T) {
	s := newServer(t)
	names := map[string]bool{}
	for _, u := range s.Users() {
		names[u.Name] = true
	}
	if !names["alice"] || !names["boss"] {
		t.Errorf("got users %v, want alice and boss among them", names)
	}
}
