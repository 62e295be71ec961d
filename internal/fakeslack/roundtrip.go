package fakeslack

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// rttProbes are the PING frames sent by RoundTrip that wait for their PONG.
type rttProbes struct {
	mu      sync.Mutex
	seq     int
	next    int // connection to probe next, round-robin
	waiting map[string]chan time.Time
}

// pong is the PONG handler of every connection: it wakes the RoundTrip
// waiting for this payload. PONGs for the fake's periodic pings are
// ignored.
func (p *rttProbes) pong(data string) {
	now := time.Now()
	p.mu.Lock()
	ch := p.waiting[data]
	delete(p.waiting, data)
	p.mu.Unlock()
	if ch != nil {
		ch <- now
	}
}

// RoundTrip measures the loopback websocket round trip to the app: it
// sends a PING frame on the next open Socket Mode connection in turn and
// waits for the client's PONG carrying the same payload, which the client
// writes from its reading goroutine. It returns the time from writing the
// PING to reading the PONG. It fails when no connection is open, the write
// fails, or no PONG comes within timeout. Load tools compare envelope ack
// times with it, measured in the same run on the same connections.
func (s *Server) RoundTrip(timeout time.Duration) (time.Duration, error) {
	s.mu.Lock()
	if len(s.conns) == 0 {
		s.mu.Unlock()
		return 0, fmt.Errorf("fakeslack: round trip: no socket mode connection")
	}
	s.rtt.mu.Lock()
	c := s.conns[s.rtt.next%len(s.conns)]
	s.rtt.next++
	s.rtt.seq++
	payload := "rtt-" + strconv.Itoa(s.rtt.seq)
	ch := make(chan time.Time, 1)
	if s.rtt.waiting == nil {
		s.rtt.waiting = make(map[string]chan time.Time)
	}
	s.rtt.waiting[payload] = ch
	s.rtt.mu.Unlock()
	s.mu.Unlock()
	forget := func() {
		s.rtt.mu.Lock()
		delete(s.rtt.waiting, payload)
		s.rtt.mu.Unlock()
	}

	sent := time.Now()
	if err := c.ws.WriteControl(websocket.PingMessage, []byte(payload), sent.Add(writeTimeout)); err != nil {
		forget()
		return 0, fmt.Errorf("fakeslack: round trip: write ping: %w", err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case at := <-ch:
		return at.Sub(sent), nil
	case <-c.done:
		forget()
		return 0, fmt.Errorf("fakeslack: round trip: connection %d closed", c.id)
	case <-timer.C:
		forget()
		return 0, fmt.Errorf("fakeslack: round trip: no pong within %v: %w", timeout, ErrTimeout)
	}
}
