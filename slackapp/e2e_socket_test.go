package slackapp_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// When Slack asks for a new connection, the bot opens it before it drops
// the old one, and still reads what the old one delivers: a mention sent
// on the old connection after the disconnect message is answered from its
// first delivery, and later ones over the new connection.
func TestSocketRefreshKeepsEveryEnvelope(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0], fakeslack.WithDisconnectGrace(time.Minute))
	e.start()
	e.model.Reply(fakeopenai.Text("Answered across the refresh."))
	e.slack.Disconnect("refresh_requested")
	ts := e.slack.Mention(channel, requester, "hello")
	e.answer(ts, "Answered across the refresh.")
	// Two open at once: the new one opened while Slack kept the old.
	must(t, e.slack.WaitConnections(2, 2, 10*time.Second))
	envs := e.slack.EnvelopesByTS(ts)
	if len(envs) != 2 {
		t.Fatalf("the mention came as %d envelopes, want 2", len(envs))
	}
	for _, env := range envs {
		if _, err := e.slack.WaitAck(env.ID, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		got, _ := e.slack.Envelope(env.ID)
		if got.Deliveries != 1 || got.RetryAttempt != 0 {
			t.Errorf("envelope %s (%s) was delivered %d times (retry %d), want once", env.ID, env.EventType, got.Deliveries, got.RetryAttempt)
		}
	}

	e.model.Reply(fakeopenai.Text("Answered after the refresh."))
	e.answer(e.slack.Mention(channel, requester, "again"), "Answered after the refresh.")
}

// A connection on which nothing arrives for SocketSilence, not even a
// ping, is taken for dead and replaced; the new one serves.
func TestSocketSilentConnectionIsReplaced(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0], fakeslack.WithPingInterval(20*time.Millisecond))
	e.cfg.SocketSilence = 500 * time.Millisecond
	e.start()
	e.slack.Silence()
	// The bot closes the silent connection and opens another.
	must(t, e.slack.WaitConnections(1, 2, 10*time.Second))
	e.model.Reply(fakeopenai.Text("Still here."))
	e.answer(e.slack.Mention(channel, requester, "hello"), "Still here.")
	if n := e.slack.ConnectionsOpened(); n != 2 {
		t.Errorf("the bot opened %d connections, want 2 (one replacement of the silent one)", n)
	}
}

// An app token Slack refuses for good ends Run with the error, at start or
// on a reconnect, without retrying.
func TestSocketFatalAuthEndsRun(t *testing.T) {
	waitDone := func(t *testing.T, b *bot) error {
		t.Helper()
		select {
		case err := <-b.done:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("Run did not end")
			return nil
		}
	}
	t.Run("invalid app token", func(t *testing.T) {
		e := newEnv(t, storeKinds(t)[0])
		e.cfg.AppToken = "xapp-not-the-right-one"
		b := e.launch(e.open())
		defer b.st.Close()
		err := waitDone(t, b)
		if err == nil || !strings.Contains(err.Error(), "invalid_auth") {
			t.Errorf("Run returned %v, want an invalid_auth error", err)
		}
		if n := len(e.slack.Calls("apps.connections.open")); n != 1 {
			t.Errorf("apps.connections.open was called %d times, want 1", n)
		}
		if b.app.Connected() {
			t.Error("the app says it is connected")
		}
	})
	for _, tt := range []struct{ code, hint string }{
		{"missing_scope", "needs the connections:write scope"},
		{"not_allowed_token_type", "this is not an app-level token"},
	} {
		t.Run(tt.code, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.slack.ErrorNext("apps.connections.open", tt.code)
			b := e.launch(e.open())
			defer b.st.Close()
			err := waitDone(t, b)
			tr, ok := errors.AsType[*slackapp.TokenRefusedError](err)
			if !ok || !tr.App || !strings.Contains(err.Error(), tt.code) || !strings.Contains(tr.Hint, tt.hint) {
				t.Errorf("Run returned %v, want the app token refused for %s, with a hint saying %q", err, tt.code, tt.hint)
			}
			if n := len(e.slack.Calls("apps.connections.open")); n != 1 {
				t.Errorf("apps.connections.open was called %d times, want 1", n)
			}
		})
	}
	t.Run("revoked while running", func(t *testing.T) {
		e := newEnv(t, storeKinds(t)[0])
		b := e.start()
		e.bot = nil // stopped here, not by the clean-up
		defer b.st.Close()
		defer b.cancel()
		e.slack.RevokeAppToken()
		e.slack.Drop()
		err := waitDone(t, b)
		if err == nil || !strings.Contains(err.Error(), "token_revoked") {
			t.Errorf("Run returned %v, want a token_revoked error", err)
		}
		if n := len(e.slack.Calls("apps.connections.open")); n != 2 {
			t.Errorf("apps.connections.open was called %d times, want 2 (the start and one reconnect)", n)
		}
	})
}

// The bot's own posts, which Slack sends back to it, are acked and dropped
// without being recorded, even where a person's message would be answered
// (a DM mentioning the bot).
func TestSocketOwnEchoesAreAckedNotHandled(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	var accepts atomic.Int64
	open := e.open
	e.open = func() fullStore { return &acceptCounter{fullStore: open(), n: &accepts} }
	e.start()
	dm := e.slack.DMChannel(requester)
	mention := "<@" + e.slack.BotUserID() + "> deploy everything"
	for _, c := range []struct {
		name  string
		event map[string]any
	}{
		{"bot id and user", map[string]any{"user": e.slack.BotUserID(), "bot_id": e.slack.BotID()}},
		{"bot id only", map[string]any{"bot_id": e.slack.BotID()}},
		{"user only", map[string]any{"user": e.slack.BotUserID()}},
	} {
		for _, typ := range []string{"message", "app_mention"} {
			ev := map[string]any{"type": typ, "channel": dm, "channel_type": "im", "text": mention, "ts": "1700000000.000100", "blocks": []any{map[string]any{"type": "section"}}}
			for k, v := range c.event {
				ev[k] = v
			}
			payload, err := json.Marshal(map[string]any{"type": "event_callback", "team_id": e.slack.TeamID(), "event_id": "EvECHO" + typ + c.name, "event": ev})
			must(t, err)
			id := e.slack.Deliver("events_api", payload)
			if _, err := e.slack.WaitAck(id, 10*time.Second); err != nil {
				t.Fatalf("%s %s: %v", typ, c.name, err)
			}
			// A message is recorded before its ack: had the echo been
			// taken for a person's message, it would be recorded by now.
			if n := accepts.Load(); n != 0 {
				t.Errorf("%s %s: %d messages recorded, want none", typ, c.name, n)
			}
		}
	}
	e.model.Reply(fakeopenai.Text("Hello, person."))
	e.answerIn(dm, e.slack.DM(requester, "hi"), "Hello, person.")
	if n := accepts.Load(); n != 1 {
		t.Errorf("%d messages recorded, want 1 (the person's)", n)
	}
}

// Envelopes whose payload does not decode for their type, of unknown
// types, and messages that are not JSON are logged and skipped; envelopes
// are acked, so that Slack does not deliver them again, and the connection
// goes on serving.
func TestSocketMalformedEnvelopesAreSkipped(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.SendFrame([]byte("this is not JSON"))
	e.slack.SendFrame([]byte(`{"type":"events_api","payload":`))
	for _, c := range []struct{ typ, payload string }{
		{"events_api", `{"type":"event_callback","event":{"type":"message","user":["U1"],"text":"hi","channel_type":"im"}}`},
		{"events_api", `"an event"`},
		{"events_api", `{"type":"event_callback","event":{"type":"user_change","user":{"id":"U1"}}}`},
		{"interactive", `[1, 2]`},
		{"interactive", `{"type":"view_submission","view":{"state":"not an object"}}`},
		{"slash_commands", `{"command":["/approvals"]}`},
		{"mystery", `{}`},
	} {
		id := e.slack.Deliver(c.typ, json.RawMessage(c.payload))
		if _, err := e.slack.WaitAck(id, 10*time.Second); err != nil {
			t.Errorf("%s %s: %v", c.typ, c.payload, err)
		}
	}
	e.model.Reply(fakeopenai.Text("Still serving."))
	e.answer(e.slack.Mention(channel, requester, "hello"), "Still serving.")
	if n := e.slack.ConnectionsOpened(); n != 1 {
		t.Errorf("the bot opened %d connections, want 1", n)
	}
}

// A message past the envelope bound is not read into memory: the
// connection ends, and the bot opens another and serves on.
func TestSocketOversizedFrameEndsTheConnection(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.SendFrame(append(append([]byte(`{"envelope_id":"big","type":"events_api","payload":"`), bytes.Repeat([]byte("a"), 17<<20)...), `"}`...))
	waitUntil(t, "a second connection is opened", func() bool { return e.slack.ConnectionsOpened() >= 2 })
	e.model.Reply(fakeopenai.Text("Still serving."))
	e.answer(e.slack.Mention(channel, requester, "hello"), "Still serving.")
}

// A slash command Slack delivers again (its ack was lost in a refreshed
// connection) does not run again: one policy add makes one rule, and the
// repeat is answered as such.
func TestRedeliveredCommandRunsOnce(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	payload, _ := json.Marshal(map[string]any{"team_id": e.slack.TeamID(), "channel_id": channel, "user_id": other, "command": "/approvals", "text": "policy add tool=deploy verdict=allow"})
	id := e.slack.Deliver("slash_commands", payload)
	first, err := e.slack.WaitAck(id, 5*time.Second)
	must(t, err)
	must(t, e.slack.Redeliver(id))
	again, err := e.slack.WaitAck(id, 5*time.Second)
	must(t, err)
	if !strings.Contains(string(first), "Added runtime rule") || !strings.Contains(string(again), "sent this command again") {
		t.Errorf("acks %s then %s; want the rule added, then the repeat answered as such", first, again)
	}
	if list := e.slash(other, "policy list"); strings.Count(list, "[runtime]") != 1 {
		t.Errorf("one policy add, delivered twice, made other than one runtime rule:\n%s", list)
	}
}

// A command that only reads, delivered again (its first answer never
// reached its reader), is answered again.
func TestRedeliveredReadingCommandIsAnsweredAgain(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	payload, _ := json.Marshal(map[string]any{"team_id": e.slack.TeamID(), "channel_id": channel, "user_id": stranger, "command": "/approvals", "text": `policy test deploy {"service":"a","version":"1"}`})
	id := e.slack.Deliver("slash_commands", payload)
	_, err := e.slack.WaitAck(id, 5*time.Second)
	must(t, err)
	must(t, e.slack.Redeliver(id))
	again, err := e.slack.WaitAck(id, 5*time.Second)
	must(t, err)
	if !strings.Contains(string(again), "by rule `deploys`") {
		t.Errorf("the redelivered policy test is answered %s", again)
	}
}

// A command whose answer echoes text that takes much more room encoded
// (control characters, line separators) is acked all the same, within
// Slack's bound on a reply.
func TestCommandWithALargeEncodedAnswerIsAcked(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	for _, text := range []string{
		"policy test " + strings.Repeat("\x01", 3800),
		"rules revoke a" + strings.Repeat("\u2028", 3800) + "b",
	} {
		payload, _ := json.Marshal(map[string]any{"team_id": e.slack.TeamID(), "channel_id": channel, "user_id": stranger, "command": "/approvals", "text": text})
		id := e.slack.Deliver("slash_commands", payload)
		ack, err := e.slack.WaitAck(id, 5*time.Second)
		if err != nil {
			t.Errorf("%q…: %v", text[:14], err)
			continue
		}
		if len(ack) >= 20*1024 || !strings.Contains(string(ack), "ephemeral") {
			t.Errorf("%q…: acked with %d bytes: %.200s", text[:14], len(ack), ack)
		}
	}
}

// A frame with no envelope id is not acted on: Slack never sends one, and
// it could not be acked.
func TestFrameWithNoEnvelopeIDIsSkipped(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	ev := map[string]any{"type": "app_mention", "user": requester, "channel": channel, "text": "<@" + e.slack.BotUserID() + "> no id", "ts": "1700000000.000200"}
	p, _ := json.Marshal(map[string]any{"type": "events_api", "payload": map[string]any{"type": "event_callback", "team_id": e.slack.TeamID(), "event_id": "EvNOID", "event": ev}})
	e.slack.SendFrame(p)
	e.slack.SendFrame([]byte("null"))
	// Read after them on the same connection.
	e.model.Reply(fakeopenai.Text("answered"))
	ts := e.slack.Mention(channel, requester, "with an id")
	e.answer(ts, "answered")
	if reqs := e.model.Requests(); len(reqs) != 1 {
		t.Errorf("the model was asked %d times, want once (the frame with no id skipped)", len(reqs))
	}
}

// A form's submission that does not decode keeps the form open with an
// error: closing it would let its sender believe the decision was sent.
func TestUndecodableSubmissionKeepsTheFormOpen(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	payload := `{"type":"view_submission","team":{"id":"T1"},"user":{"id":"` + approver + `"},"response_urls":{},` +
		`"view":{"callback_id":"` + slackapp.CallbackReject + `","private_metadata":"0123456789abcdef.0~` + strings.Repeat("a", 64) + `",` +
		`"state":{"values":{"reject_reason":{"reject_reason_input":{"type":"plain_text_input","value":"no"}}}}}}`
	id := e.slack.Deliver("interactive", json.RawMessage(payload))
	ack, err := e.slack.WaitAck(id, 5*time.Second)
	must(t, err)
	if !strings.Contains(string(ack), `"errors"`) || !strings.Contains(string(ack), "nothing was recorded") {
		t.Errorf("ack %s; want the form kept open with an error", ack)
	}
}
