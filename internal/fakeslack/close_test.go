package fakeslack_test

import (
	"context"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

func TestCloseWithLiveConnection(t *testing.T) {
	s := fakeslack.Start()
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()), slack.OptionAppLevelToken(s.AppToken()))
	sm := socketmode.New(api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = sm.RunContext(ctx) }()
	go func() {
		for {
			select {
			case <-sm.Events:
			case <-ctx.Done():
				return
			}
		}
	}()
	if err := s.WaitConnected(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a live connection")
	}
	s.Close()
}
