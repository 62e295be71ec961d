package slackapp

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// helloServer is a Socket Mode server whose connections say hello, send
// then, and close, all at once; it counts the connections it accepted.
// A connection keep picks is handed to the test (kept) after its hello
// instead, and stays open until the test closes it.
type helloServer struct {
	srv      *httptest.Server
	accepted atomic.Int64
	then     []string
	keep     func(n int64) bool
	kept     chan *websocket.Conn
}

func newHelloServer(t *testing.T, then []string, keep func(n int64) bool) *helloServer {
	t.Helper()
	h := &helloServer{then: then, keep: keep, kept: make(chan *websocket.Conn, 1)}
	upgrader := websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		n := h.accepted.Add(1)
		if ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"hello"}`)) != nil {
			return
		}
		if h.keep != nil && h.keep(n) {
			h.kept <- ws
			// The test writes on it from now on; this reads until it is
			// closed.
			for {
				if _, _, err := ws.NextReader(); err != nil {
					return
				}
			}
		}
		for _, msg := range h.then {
			if ws.WriteMessage(websocket.TextMessage, []byte(msg)) != nil {
				return
			}
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// url is the websocket URL apps.connections.open would hand out.
func (h *helloServer) url() string { return "ws" + strings.TrimPrefix(h.srv.URL, "http") }

// Connections that end as soon as they said hello (closed, or with Slack
// asking for a new one) are not replaced at once, over and over: the
// reconnects back off, so in two seconds only a handful are opened. Load
// on the machine only makes it fewer.
func TestReconnectsBackOffWhenConnectionsDieYoung(t *testing.T) {
	for _, tt := range []struct {
		name string
		then []string
	}{
		{"closed", nil},
		{"refresh requested", []string{`{"type":"disconnect","reason":"refresh_requested"}`}},
		{"link disabled", []string{`{"type":"disconnect","reason":"link_disabled"}`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := newHelloServer(t, tt.then, nil)
			var opens atomic.Int64
			s := newSocket(func(ctx context.Context) (string, error) {
				opens.Add(1)
				return h.url(), nil
			}, slog.New(slog.DiscardHandler), false, 0)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			if err := s.Run(ctx); err != context.DeadlineExceeded {
				t.Fatalf("Run() = %v, want the context's end", err)
			}
			// Without backoff this is thousands; with it, about five.
			if n := opens.Load(); n > 10 {
				t.Errorf("%d connections opened in 2s against a server whose connections end after their hello, want a handful", n)
			}
		})
	}
}

// The wait before replacing a connection that died young grows with each
// one in a row, and starts again from the first after a connection that
// lived: the count is of dying young in a row. A connection Slack ends
// with link_disabled counts as dying young however long it lived. Time is
// the test's clock, and the waits are the test's: each is held until the
// test lets Run go on.
func TestYoungConnectionsBackOffInARow(t *testing.T) {
	h := newHelloServer(t, nil, func(n int64) bool { return n == 4 || n == 6 })
	s := newSocket(func(ctx context.Context) (string, error) { return h.url(), nil }, slog.New(slog.DiscardHandler), false, 0)
	var clock atomic.Int64
	clock.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s.now = func() time.Time { return time.Unix(0, clock.Load()) }
	ctx, cancel := context.WithCancel(t.Context())
	waits := make(chan int)
	proceed := make(chan struct{})
	s.youngWait = func(n int) time.Duration {
		select {
		case waits <- n:
			select {
			case <-proceed:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
		return 0
	}
	s.crowdedWait = func(n int) time.Duration {
		t.Errorf("waited as refusal %d for too many connections, which Slack did not send", n)
		return 0
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	// wait takes the next wait, which must be the nth in a row and come
	// when accepted connections were accepted, none since.
	wait := func(want int, accepted int64) {
		t.Helper()
		select {
		case n := <-waits:
			if n != want {
				t.Fatalf("waited as connection %d in a row to die young, want %d", n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no wait before the connection after connection %d", accepted)
		}
		if got := h.accepted.Load(); got != accepted {
			t.Fatalf("%d connections accepted before the wait was over, want %d", got, accepted)
		}
	}
	// live takes the connection the server kept, once the socket read its
	// hello, and lets a minute pass on the test's clock.
	live := func() *websocket.Conn {
		t.Helper()
		var ws *websocket.Conn
		select {
		case ws = <-h.kept:
		case <-time.After(10 * time.Second):
			t.Fatal("the kept connection was not opened")
		}
		waitFor(t, "the kept connection's hello", s.connected.Load)
		clock.Add(int64(time.Minute))
		return ws
	}
	for n := range 3 {
		wait(n, int64(n+1))
		proceed <- struct{}{}
	}
	// The fourth lives a minute, then is lost: the fifth opens at once,
	// and dies young as the first in a row.
	ws := live()
	_ = ws.Close()
	wait(0, 5)
	proceed <- struct{}{}
	// The sixth lives a minute, then Slack disables Socket Mode.
	ws = live()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"type":"disconnect","reason":"link_disabled"}`)); err != nil {
		t.Fatal(err)
	}
	wait(1, 6)
	_ = ws.Close()
}
