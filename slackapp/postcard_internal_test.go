package slackapp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// A card Slack refuses leaves the thread a note that the call can be
// decided elsewhere; a card whose post fails because its turn was stopped
// (its lease lost, or cut by a shutdown) leaves none: that turn saves no
// pause, so there is nothing to decide elsewhere.
func TestCardOfAStoppedTurnLeavesNoNote(t *testing.T) {
	fs := fakeslack.New(t)
	fs.AddChannel(fakeslack.Channel{ID: "C1", Name: "general", Members: []string{"U1", "U2", fs.BotUserID()}})
	a, err := New(Config{BotToken: fs.BotToken(), AppToken: fs.AppToken(), APIURL: fs.APIURL()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := agent.PendingCall{Call: agent.Call{
		ID: "r1.0", RunID: "r1", Tool: "deploy", Args: json.RawMessage(`{"service":"api"}`), Fingerprint: "fp",
		Requester: "U1", Channel: "C1", Approvers: []string{"U2"}, CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
	}}
	notes := func(thread string) int {
		n := 0
		for _, m := range fs.Thread("C1", thread) {
			if strings.Contains(m.Text, "couldn't post its approval card") {
				n++
			}
		}
		return n
	}

	refused := fs.Mention("C1", "U1", "deploy api")
	fs.FailNext("chat.postMessage", 400)
	a.postCard(t.Context(), "C1", refused, pc)
	if n := notes(refused); n != 1 {
		t.Errorf("a card Slack refused left %d notes, want 1:\n%s", n, dumpMessages(fs.Thread("C1", refused)))
	}

	stopped := fs.Mention("C1", "U1", "deploy api")
	ctx, stop := context.WithCancelCause(t.Context())
	stop(agent.ErrLeaseLost)
	a.postCard(ctx, "C1", stopped, pc)
	if got := fs.Thread("C1", stopped); len(got) != 1 {
		t.Errorf("the thread of a stopped turn has %d messages, want only the mention:\n%s", len(got), dumpMessages(got))
	}
}

func dumpMessages(ms []fakeslack.Message) string {
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("  " + m.User + m.BotID + ": " + m.Text + "\n")
	}
	return b.String()
}
