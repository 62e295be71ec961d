package slackapp_test

import (
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// When a person edits a message mentioning the bot, Slack sends its
// app_mention again, with the same ts, a new event_id and an "edited"
// field. The edit of a message the bot no longer remembers (past its
// de-duplication window, or after a restart) is acked and dropped, not
// recorded and answered as a new message; so is a message event carrying
// "edited".
func TestEditOfAnOldMessageIsNotAnsweredAsNew(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	var accepts atomic.Int64
	open := e.open
	e.open = func() fullStore { return &acceptCounter{fullStore: open(), n: &accepts} }
	e.start()
	bot := e.slack.BotUserID()
	dm := e.slack.DMChannel(requester)
	// Written two days ago, and edited now.
	ts := fmt.Sprintf("%d.000100", time.Now().Add(-48*time.Hour).Unix())
	edited := map[string]any{"user": requester, "ts": fmt.Sprintf("%d.000000", time.Now().Unix())}
	for _, c := range []struct {
		name string
		ch   string
		ev   map[string]any
	}{
		{"app_mention", channel, map[string]any{"type": "app_mention", "channel": channel, "text": "<@" + bot + "> deploy api 1 (typo fixed)"}},
		{"message in a DM", dm, map[string]any{"type": "message", "channel": dm, "channel_type": "im", "text": "deploy api 1 (typo fixed)"}},
	} {
		ev := c.ev
		ev["user"], ev["ts"], ev["event_ts"], ev["team"], ev["edited"] = requester, ts, edited["ts"], e.slack.TeamID(), edited
		payload, err := json.Marshal(map[string]any{"type": "event_callback", "team_id": e.slack.TeamID(), "api_app_id": e.slack.AppID(),
			"event_id": "EvEDITED" + c.ch, "event_time": time.Now().Unix(), "event": ev})
		must(t, err)
		id := e.slack.Deliver("events_api", payload)
		if _, err := e.slack.WaitAck(id, 15*time.Second); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		// A message is recorded before its ack: had the edit been taken
		// for a new message, it would be recorded by now.
		if n := accepts.Load(); n != 0 {
			t.Errorf("%s: the edit was recorded as a new message (%d recorded, want none)", c.name, n)
		}
	}
	// A new message after the edits is answered, and alone.
	e.model.Reply(fakeopenai.Text("Hello, person."))
	e.answer(e.slack.Mention(channel, requester, "hi"), "Hello, person.")
	if n := len(e.model.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want once (for the new message)", n)
	}
	for _, ch := range []string{channel, dm} {
		for _, m := range e.slack.Thread(ch, ts) {
			if m.BotID != "" {
				t.Errorf("the bot answered an edit in %s:\n%s", ch, dumpThread(e.slack.Thread(ch, ts)))
				break
			}
		}
	}
}
