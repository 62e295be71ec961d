package slackapp_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// With every handler busy, a slash command and a modal submission are
// answered "busy" at once and change nothing; once a handler is free they
// work again.
func TestBusyHandlers(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxHandlers = 1
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"16"}`)), fakeopenai.Text("Understood, not deploying."))
	ts := e.slack.Mention(channel, requester, "deploy api 16")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackReject)

	// The only handler waits out a rate limit while it publishes a Home tab.
	// (The handler that opened the modal may still hold the slot for a
	// moment, and a Home tab opened while busy is dropped: open it again
	// until one is being published.)
	e.slack.RateLimit("views.publish", 1, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		e.slack.OpenHome(stranger)
		if _, err := e.slack.WaitCall("views.publish", func(c fakeslack.Call) bool { return c.Status == 429 }, time.Second); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no Home tab was published")
		}
	}

	start := time.Now()
	wantIn(t, "a slash command while busy", e.slash(stranger, "help"), "I'm busy, try again in a moment")
	ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "Not today."},
	}, "")
	must(t, err)
	var resp struct {
		Errors map[string]string `json:"errors"`
	}
	must(t, json.Unmarshal(ack, &resp))
	if !strings.Contains(resp.Errors[slackapp.BlockRejectReason], "I'm busy") {
		t.Errorf("a submission while busy was acked with %s, want a busy error on the reason", ack)
	}
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("the busy answers took %v; they must not wait for a handler", d)
	}
	if m, _ := e.slack.Message(channel, card.TS); !isCard(m) {
		t.Errorf("a submission answered busy changed the card: %s", m.Blocks)
	}

	waitUntil(t, "the Home tab is published", func() bool {
		_, ok := e.slack.HomeView(stranger)
		return ok
	})
	waitUntil(t, "a handler is free again", func() bool {
		return strings.Contains(e.slash(stranger, "help"), "manages tool-call approvals")
	})
}
