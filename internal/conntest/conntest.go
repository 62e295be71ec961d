// Package conntest serves HTTP for tests that check whether a client keeps
// its connections for reuse: each round of requests is held until a given
// number of them is in flight at once, and the server counts the
// connections it accepted.
package conntest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Server is an HTTP server that answers in rounds of N requests.
type Server struct {
	URL   string
	dials atomic.Int64
}

// Start starts a server, closed when t ends, whose every request waits
// until n requests have arrived (so a round holds n connections at once),
// then is answered by h.
func Start(t testing.TB, n int, h http.HandlerFunc) *Server {
	t.Helper()
	s := &Server{}
	var (
		mu      sync.Mutex
		arrived int
		round   = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		wait := round
		if arrived == n {
			arrived = 0
			close(round)
			round = make(chan struct{})
		}
		mu.Unlock()
		<-wait
		h(w, r)
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	s.URL = srv.URL
	return s
}

// Dials is the number of connections the server has accepted.
func (s *Server) Dials() int { return int(s.dials.Load()) }

// Rounds makes rounds rounds of n concurrent calls of call and reports
// the connections accepted after the first round and over the later ones.
func (s *Server) Rounds(t testing.TB, n, rounds int, call func() error) (first, later int) {
	t.Helper()
	for r := range rounds {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if err := call(); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if r == 0 {
			first = s.Dials()
		}
	}
	return first, s.Dials() - first
}
