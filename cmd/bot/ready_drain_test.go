package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// Once the stop has begun, the bot takes no new work (events are left
// unacked, clicks told "restarting"): /readyz must not report it ready.
func TestNotReadyWhileShuttingDown(t *testing.T) {
	slack := fakeslack.New(t)
	model := fakeopenai.New(t)
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-release
		return fakeopenai.Text("done")
	})
	setEnv(t, map[string]string{
		"SLACK_APP_TOKEN": slack.AppToken(),
		"SLACK_BOT_TOKEN": slack.BotToken(),
		"SLACK_API_URL":   slack.APIURL(),
		"OPENAI_API_KEY":  testAPIKey,
		"OPENAI_BASE_URL": model.URL(),
		"DATA_DIR":        t.TempDir(),
		"HTTP_ADDR":       "127.0.0.1:0",
		"SHUTDOWN_GRACE":  "20s",
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, nil, io.Discard, logs) }()
	base := "http://" + waitLog(t, logs, "starting", errc).HTTPAddr
	if err := slack.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if code, _ := get(t, base+"/readyz"); code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("/readyz not ready 10 s after Socket Mode connected")
		}
	}

	slack.Mention("C0OPS0001", "U0REQ0001", "hello") // a turn in flight
	<-arrived
	cancel() // SIGTERM: the drain begins
	slack.Mention("C0OPS0002", "U0REQ0002", "hello again")
	waitLog(t, logs, "shutting down: leaving an event unacked for Slack to deliver again", nil)

	code, body := get(t, base+"/readyz")
	close(release)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz during the shutdown drain = %d %s, want 503, shutting down: the bot takes no new event", code, body)
	}
	select {
	case <-errc:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return")
	}
}
