package slackapp_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// A message with a file attached (a log, a screenshot) names the file to
// the model, as the thread's earlier messages do ("[file: …]"), which
// cannot read it; a file sent alone is not an "(empty message)".
func TestAttachedFileIsNamedToTheModel(t *testing.T) {
	for _, text := range []string{"what's wrong in this?", ""} {
		t.Run(fmt.Sprintf("text %q", text), func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			bot := e.slack.BotUserID()
			ts := fmt.Sprintf("%d.000100", time.Now().Unix())
			ev := map[string]any{"type": "app_mention", "channel": channel, "user": requester, "ts": ts, "event_ts": ts, "team": e.slack.TeamID(),
				"text": strings.TrimSpace("<@" + bot + "> " + text), "files": []map[string]any{{"id": "F1", "name": "api-errors.log", "title": "api-errors.log"}}}
			payload, err := json.Marshal(map[string]any{"type": "event_callback", "team_id": e.slack.TeamID(), "api_app_id": e.slack.AppID(),
				"event_id": "EvFILE1", "event_time": time.Now().Unix(), "event": ev})
			must(t, err)
			e.model.Reply(fakeopenai.Text("ok"))
			if _, err := e.slack.WaitAck(e.slack.Deliver("events_api", payload), 15*time.Second); err != nil {
				t.Fatal(err)
			}
			req := e.request(1)
			last := req.Messages[len(req.Messages)-1]
			want := strings.TrimSpace(text + "\n[file: api-errors.log]")
			if last.Role != "user" || last.Content != want {
				t.Errorf("the model was given %q, want %q", last.Content, want)
			}
		})
	}
}
