package fakeslack

import (
	"context"
	"sync"
)

// hold keeps one Web API call waiting until it is released.
type hold struct {
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

// wait says the call arrived and waits until it is released or ctx (the
// request's) ends.
func (h *hold) wait(ctx context.Context) {
	close(h.arrived)
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

// HoldNext makes the next call to method wait, before it is handled, until
// release is called (or the client gives up on the request), as a slow
// Slack would. arrived is closed once that call has reached the server.
// Tests use it to put events in a known order without sleeping. release
// may be called more than once.
func (s *Server) HoldNext(method string) (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.inject[method] = append(s.inject[method], injection{hold: h})
	s.mu.Unlock()
	return h.arrived, func() { h.once.Do(func() { close(h.release) }) }
}
