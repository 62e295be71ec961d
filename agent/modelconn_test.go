package agent_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// TestModelReusesConnections checks that the connections of calls made at
// once are kept for the next calls: a second round of as many concurrent
// calls dials nothing new.
func TestModelReusesConnections(t *testing.T) {
	const n = 8
	var (
		dials   atomic.Int64
		mu      sync.Mutex
		arrived int
		round   = make(chan struct{})
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every call of a round waits for the others, so the round
		// holds n connections at once.
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
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			dials.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m"})
	callRound := func() {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := m.Complete(context.Background(), userMessage("hi"), nil); err != nil {
					t.Errorf("Complete: %v", err)
				}
			})
		}
		wg.Wait()
	}
	callRound()
	if got := dials.Load(); got != n {
		t.Fatalf("first round: %d connections, want %d", got, n)
	}
	callRound()
	if got := dials.Load(); got != n {
		t.Fatalf("second round dialled %d new connections, want 0", got-n)
	}
}
