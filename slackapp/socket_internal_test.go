package slackapp

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/fakeslack"
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

// With no connection to ack on, an ack waits for one no longer than Slack
// waits for it, counted from when the envelope was read: envelopes read
// from a connection that was then lost do not hold the event loop one
// wait after another. The ack's own context never ends here.
func TestAckWaitsNoLongerThanSlackDoes(t *testing.T) {
	s := newSocket(nil, slog.Default(), false, 0)
	env := &envelope{ID: "e1", received: time.Now().Add(-ackWindow)}
	err := s.ack(context.Background(), env, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ack of an envelope read %s ago with no connection: got %v, want the envelope's window passed", ackWindow, err)
	}
}

// A connection Slack refuses for too many (too_many_websockets) is not
// replaced at once: Run waits a backoff that grows with each refusal in a
// row, and starts again from the first after an ordinary refresh. The
// waits are the test's: each is held until the test lets Run go on.
func TestTooManyWebsocketsBacksOff(t *testing.T) {
	fs := fakeslack.New(t)
	api := slack.New(fs.BotToken(), slack.OptionAppLevelToken(fs.AppToken()), slack.OptionAPIURL(fs.APIURL()))
	s := newSocket(func(ctx context.Context) (string, error) {
		_, url, err := api.StartSocketModeContext(ctx)
		return url, err
	}, slog.New(slog.DiscardHandler), false, 0)
	waits := make(chan int)
	proceed := make(chan struct{})
	s.crowdedWait = func(n int) time.Duration {
		waits <- n
		<-proceed
		return 0
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	if err := fs.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	opened, accepted := fs.ConnectionsOpened(), fs.ConnectionsAccepted()
	// A reconnect is waited out until the new connection is accepted: a
	// Disconnect sent after its URL was handed out but before it connected
	// would reach no connection.
	reconnected := func() bool {
		return fs.ConnectionsOpened() == opened+1 && fs.ConnectionsAccepted() == accepted+1
	}
	for want := range 3 {
		fs.Disconnect("too_many_websockets")
		select {
		case n := <-waits:
			if n != want {
				t.Fatalf("refusal %d waited as refusal %d", want, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("refusal %d: no wait before the next connection", want)
		}
		if got := fs.ConnectionsOpened(); got != opened {
			t.Fatalf("refusal %d: %d connections opened before the wait was over", want, got-opened)
		}
		proceed <- struct{}{}
		waitFor(t, "the next connection", reconnected)
		opened, accepted = opened+1, accepted+1
	}
	// An ordinary refresh starts the count again. It comes as soon as the
	// connection opened, so the connection died young: it is replaced
	// after a short backoff of that kind (the real one), not this wait.
	fs.Disconnect("refresh_requested")
	waitFor(t, "the refreshed connection", reconnected)
	fs.Disconnect("too_many_websockets")
	select {
	case n := <-waits:
		if n != 0 {
			t.Errorf("a refusal after a refresh waited as refusal %d, want the first", n)
		}
		proceed <- struct{}{}
	case <-time.After(10 * time.Second):
		t.Fatal("no wait after a refusal")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come within 10s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
