package fakeslack

import (
	"encoding/json"
)

// APIEvent is one answered Web API call, as an observer set with
// WithAPIObserver sees it: the recorded call (its At is when the request
// arrived, before the fake read its body or waited for its lock) and the
// JSON answer the app gets.
type APIEvent struct {
	Call     Call
	Response json.RawMessage
}

// WithAPIObserver makes the fake call f with every Web API call it
// answers, including failed and rate-limited ones (whose Response is
// empty), in the order they are recorded. f runs in the request's
// goroutine, without the fake's lock held and before the answer is
// written, so it may call the fake's methods; it should return quickly,
// since the app waits for the answer meanwhile. A load tool uses it to see
// posts, updates and streams as they happen instead of polling Messages.
func WithAPIObserver(f func(APIEvent)) Option {
	return func(c *config) { c.observe = f }
}

// observe hands a call and its answer to the observer, if any.
func (s *Server) observe(c Call, res response) {
	if s.cfg.observe == nil {
		return
	}
	var raw json.RawMessage
	if res != nil {
		raw, _ = json.Marshal(res)
	}
	s.cfg.observe(APIEvent{Call: c, Response: raw})
}
