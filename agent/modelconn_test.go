package agent_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/conntest"
)

// TestModelReusesConnections checks that the connections of model calls
// made at once are kept for the next calls: later rounds of as many
// concurrent calls dial nothing new, with more calls at once than net/http
// keeps connections by default (100 in all).
func TestModelReusesConnections(t *testing.T) {
	const n = 128
	srv := conntest.Start(t, n, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	})
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL + "/v1", APIKey: "k", Model: "m"})
	first, later := srv.Rounds(t, n, 2, func() error {
		_, err := m.Complete(context.Background(), userMessage("hi"), nil)
		return err
	})
	if first != n || later != 0 {
		t.Fatalf("connections: %d in the first round, %d new later; want %d and 0", first, later, n)
	}
}
