package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Slack answers 429 with Retry-After: the card and the answer still arrive,
// once each.
func TestRateLimitedPostsAreRetried(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed despite the rate limits."))
	e.slack.RateLimit("chat.postMessage", 1, 1)
	ts := e.slack.Mention(channel, requester, "deploy api 9")
	card := e.card(ts, "deploy")
	limited := 0
	for _, c := range e.slack.Calls("chat.postMessage") {
		if c.Status == 429 {
			limited++
		}
	}
	if limited != 1 {
		t.Errorf("%d chat.postMessage calls were rate limited, want 1", limited)
	}
	if cards := e.cards(channel, ts); len(cards) != 1 {
		t.Errorf("%d cards in the thread, want 1", len(cards))
	}

	e.slack.RateLimit("chat.startStream", 1, 1)
	e.slack.RateLimit("chat.update", 1, 1)
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed despite the rate limits.")
	// Cards are updated in the background: the answer may come first.
	e.waitThread(ts, "with the approved card", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Approved by <@"+approver+">")
	})
	for _, method := range []string{"chat.startStream", "chat.update"} {
		var statuses []int
		for _, c := range e.slack.Calls(method) {
			statuses = append(statuses, c.Status)
		}
		if len(statuses) < 2 || statuses[0] != 429 {
			t.Errorf("%s answered %v, want a 429 and then a retry", method, statuses)
		}
	}
	answers := 0
	for _, m := range e.slack.Thread(channel, ts) {
		if strings.Contains(m.Text+blocksText(m), "Deployed despite the rate limits.") {
			answers++
		}
	}
	if answers != 1 {
		t.Errorf("the answer is in the thread %d times, want 1", answers)
	}
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}

// The Socket Mode connection goes away while a click is in flight: the bot
// reconnects, and the click, delivered again with retry_attempt > 0, runs
// the call once.
func TestConnectionLostDuringClick(t *testing.T) {
	losses := []struct {
		name string
		lose func(s *fakeslack.Server)
	}{
		{"disconnect", func(s *fakeslack.Server) { s.Disconnect("refresh_requested") }},
		{"drop", func(s *fakeslack.Server) { s.Drop() }},
	}
	for _, kind := range storeKinds(t) {
		for _, loss := range losses {
			t.Run(kind.name+"/"+loss.name, func(t *testing.T) {
				e := newEnv(t, kind)
				e.start()
				e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"10"}`)), fakeopenai.Text("Deployed exactly once."))
				ts := e.slack.Mention(channel, requester, "deploy api 10")
				card := e.card(ts, "deploy")

				opened := e.slack.ConnectionsOpened()
				id, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
				must(t, err)
				loss.lose(e.slack)
				waitUntil(t, "the bot reconnects", func() bool {
					return e.slack.ConnectionsOpened() > opened && e.slack.Connections() == 1
				})
				// Whether or not the first delivery was acked in time, Slack
				// may deliver the click again.
				must(t, e.slack.Redeliver(id))
				_, err = e.slack.WaitAck(id, 10*time.Second)
				must(t, err)
				if env, _ := e.slack.Envelope(id); env.RetryAttempt == 0 || env.Deliveries < 2 {
					t.Errorf("the click was delivered %d times, last with retry_attempt %d; want a redelivery", env.Deliveries, env.RetryAttempt)
				}

				e.answer(ts, "Deployed exactly once.")

				// The new connection serves new work.
				e.model.Reply(fakeopenai.Text("Still here."))
				ts2 := e.slack.Mention(channel, requester, "are you there?")
				e.answer(ts2, "Still here.")

				e.stop() // every delivery's work is done by then
				if n := e.deploy.Load(); n != 1 {
					t.Errorf("deploy ran %d times, want 1", n)
				}
				if n := len(e.model.Requests()); n != 3 {
					t.Errorf("the model was asked %d times, want 3 (two for the deploy's thread, one for the new one)", n)
				}
			})
		}
	}
}

// A click Slack delivers again after its first delivery was decided (its
// ack was missed) is a duplicate: the clicker is not told their own
// decision was made already, and it is not counted as a refused decision.
func TestRedeliveredDecidedClickIsADuplicate(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			reg := prometheus.NewRegistry()
			e.cfg.Metrics = slackapp.NewMetrics(reg)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"10"}`)), fakeopenai.Text("Deployed once."))
			ts := e.slack.Mention(channel, requester, "deploy api 10")
			card := e.card(ts, "deploy")
			id, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed once.")
			// The mention comes as two events, one of them a duplicate,
			// counted before its ack.
			for _, env := range e.slack.EnvelopesByTS(ts) {
				_, err := e.slack.WaitAck(env.ID, 10*time.Second)
				must(t, err)
			}
			before := plainCounter(t, reg, "toolgate_duplicate_events_total")
			must(t, e.slack.Redeliver(id))
			_, err = e.slack.WaitAck(id, 10*time.Second)
			must(t, err)
			e.stop() // every click's work is done by then

			for _, m := range e.slack.Ephemerals(approver) {
				t.Errorf("the approver was told %q about their own click delivered again", m.Text)
			}
			if n := counter(t, reg, "toolgate_decisions_total", "already_decided"); n != 0 {
				t.Errorf("%v decisions refused as already decided, want none", n)
			}
			if n := plainCounter(t, reg, "toolgate_duplicate_events_total") - before; n != 1 {
				t.Errorf("%v duplicate events counted for the click delivered again, want 1", n)
			}
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// Echoes of the bot's own posts, other bots' messages and redelivered
// envelopes never start a turn.
func TestDuplicatesStartNoTurn(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(fakeopenai.Text("Hello once."))
			ts := e.slack.Mention(channel, requester, "hello")
			e.answer(ts, "Hello once.")

			e.slack.PostAsBot(channel, "B0OTHERBOT", "<@"+e.slack.BotUserID()+"> deploy everything")
			mention := e.slack.EnvelopesByTS(ts)
			if len(mention) != 2 {
				t.Fatalf("the mention came as %d envelopes, want 2", len(mention))
			}
			for _, env := range mention {
				must(t, e.slack.Redeliver(env.ID))
			}
			for _, env := range e.slack.Envelopes() {
				_, err := e.slack.WaitAck(env.ID, 10*time.Second)
				must(t, err)
			}
			// The bot's own answer came back to it as a message event.
			echoed := false
			for _, env := range e.slack.Envelopes() {
				if env.EventType == "message" && strings.Contains(string(env.Payload), `"bot_id":"`+e.slack.BotID()+`"`) {
					echoed = true
				}
			}
			if !echoed {
				t.Error("no echo of the bot's own post was delivered; the test proves nothing")
			}
			// A later message is answered, so the envelopes before it were
			// handled.
			e.model.Reply(fakeopenai.Text("Second thread."))
			e.answer(e.slack.Mention(channel, requester, "again"), "Second thread.")
			e.stop() // every envelope's work is done by then

			if n := len(e.model.Requests()); n != 2 {
				t.Errorf("the model was asked %d times, want 2 (one per mention)", n)
			}
			answers := 0
			for _, m := range e.slack.Thread(channel, ts) {
				if m.BotID != "" {
					answers++
				}
			}
			if answers != 1 {
				t.Errorf("the bot posted %d messages in the first thread, want 1:\n%s", answers, dumpThread(e.slack.Thread(channel, ts)))
			}
		})
	}
}

// A card that Slack refuses to post leaves the thread a note naming the
// call and who may decide it, and where: the call is pending, and their
// Home tab lists it.
func TestCardNotPostedLeavesANote(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.HomeRefreshDelay = 20 * time.Millisecond
	e.start()
	e.home(approver)
	e.slack.FailNext("chat.postMessage", 400)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 8")
	note := e.answer(ts, "couldn't post its approval card")
	for _, want := range []string{"`deploy`", "<@" + approver + ">", "App Home"} {
		if !strings.Contains(note.Text, want) {
			t.Errorf("the note %q does not contain %q", note.Text, want)
		}
	}
	waitUntil(t, "the approver's Home tab lists the call", func() bool {
		home, ok := e.slack.HomeView(approver)
		return ok && strings.Contains(string(home.JSON), "`deploy`") && strings.Contains(string(home.JSON), "Waiting since")
	})
	for _, m := range e.slack.Thread(channel, ts) {
		if isCard(m) {
			t.Errorf("a card is in the thread although its post was refused: %s", m.Text)
		}
	}
}
