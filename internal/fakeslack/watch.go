package fakeslack

import "fmt"

// Changed returns a channel that is closed at the next change of the
// fake's state: a message posted, updated or streamed, an ephemeral
// message, a view opened, updated or closed, a thread status, an envelope
// sent or acked. Call it again after each wake-up for the change after
// that. It lets a client (such as the playground's web page) follow the
// workspace live without polling. After Close the returned channel is
// closed at once.
func (s *Server) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	return s.changed
}

// CloseView closes the modal viewID for user, as when they press its
// Cancel button or the X. If the view asked for notify_on_close, the app
// receives a view_closed interaction. It fails if the view does not exist,
// belongs to someone else or is not a modal; closing a closed view does
// nothing.
func (s *Server) CloseView(user, viewID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.views[viewID]
	if vs == nil || vs.User != user || vs.Type != "modal" {
		return fmt.Errorf("fakeslack: %s has no modal %s", user, viewID)
	}
	if vs.Closed {
		return nil
	}
	vs.Closed = true
	if notify, _ := vs.obj["notify_on_close"].(bool); notify {
		e := s.newEnvelopeLocked("interactive", jsonObject{
			"type":       "view_closed",
			"team":       s.teamJSON(),
			"user":       s.userRefJSON(user),
			"api_app_id": s.cfg.appID,
			"view":       vs.obj,
			"is_cleared": false,
		}, false)
		e.InteractionType = "view_closed"
	}
	s.notifyLocked()
	return nil
}

// Users returns the workspace's people, the bot included, in no
// particular order.
func (s *Server) Users() []User {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]User, 0, len(s.users))
	for _, u := range s.users {
		out = append(out, *u)
	}
	return out
}
