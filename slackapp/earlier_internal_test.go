package slackapp

import (
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

// An app's alert with a headline as its text keeps its attachments'
// details; an attachment's fallback stands in only for one with nothing
// else, and a message with only blocks is left out.
func TestEarlierLineOfAnAlert(t *testing.T) {
	a := &App{botUserID: "UBOT", botID: "BBOT"}
	for _, tt := range []struct {
		name string
		m    slack.Message
		want string
	}{
		{"text and attachment", slack.Message{Msg: slack.Msg{BotID: "BALERT", Username: "alertmanager", Text: "[FIRING:1] HighErrorRate",
			Attachments: []slack.Attachment{{Title: "HighErrorRate", Text: "5xx rate 12% on checkout-api", Fallback: "[FIRING:1] HighErrorRate 5xx"}}}},
			"app \"alertmanager\": [FIRING:1] HighErrorRate\n\tHighErrorRate\n\t5xx rate 12% on checkout-api"},
		{"fallback alone", slack.Message{Msg: slack.Msg{BotID: "BALERT", Attachments: []slack.Attachment{{Fallback: "disk full &amp; rising"}}}},
			"app \"BALERT\": disk full & rising"},
		{"the bot's own", slack.Message{Msg: slack.Msg{User: "UBOT", BotID: "BBOT", Text: "Deployed api 2."}}, "you: Deployed api 2."},
		{"blocks alone", slack.Message{Msg: slack.Msg{User: "U1"}}, ""},
	} {
		if got := a.earlierLine(tt.m); got != tt.want {
			t.Errorf("%s: earlierLine = %q, want %q", tt.name, got, tt.want)
		}
	}
	long := a.earlierLine(slack.Message{Msg: slack.Msg{User: "U1", Text: strings.Repeat("é", earlierMessageBytes)}})
	if !strings.HasSuffix(long, "…") || len(long) > earlierMessageBytes+len("<@U1>: …") {
		t.Errorf("a long message is %d bytes, want it cut to %d with an ellipsis", len(long), earlierMessageBytes)
	}
}
