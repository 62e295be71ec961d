package slackapp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// A reply of 20 KB or more is refused before it is written, as Slack would
// drop it; a smaller one waits for a connection to be written on.
func TestAckRefusesRepliesSlackDrops(t *testing.T) {
	s := newSocket(nil, slog.Default(), false, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no connection: a reply that may be sent waits for ctx
	env := &envelope{ID: "e1"}
	overhead := len(`{"envelope_id":"e1","payload":{"text":""}}`)
	for _, c := range []struct {
		size    int
		refused bool
	}{
		{maxAckSize - overhead - 1, false},
		{maxAckSize - overhead, true},
		{3 * maxAckSize, true},
	} {
		err := s.ack(ctx, env, map[string]string{"text": strings.Repeat("x", c.size)})
		refused := err != nil && strings.Contains(err.Error(), "Slack drops replies")
		if refused != c.refused {
			t.Errorf("reply with %d bytes of text: got %v, want refused %v", c.size, err, c.refused)
		}
		if !c.refused && !errors.Is(err, context.Canceled) {
			t.Errorf("reply with %d bytes of text: got %v, want it to wait for a connection", c.size, err)
		}
	}
}
