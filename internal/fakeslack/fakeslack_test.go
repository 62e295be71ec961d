package fakeslack_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

const wait = 5 * time.Second

// bot is a slack-go Socket Mode client connected to the fake.
type bot struct {
	api    *slack.Client
	sm     *socketmode.Client
	events chan socketmode.Event
}

// ackFunc decides the ack for a request: ok false means no ack at all.
type ackFunc func(socketmode.Event) (payload any, ok bool)

func ackAll(socketmode.Event) (any, bool) { return nil, true }

// startBot runs a real socketmode client against s until the test ends.
func startBot(t *testing.T, s *fakeslack.Server, ack ackFunc, opts ...socketmode.Option) *bot {
	t.Helper()
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()), slack.OptionAppLevelToken(s.AppToken()))
	sm := socketmode.New(api, opts...)
	b := &bot{api: api, sm: sm, events: make(chan socketmode.Event, 256)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = sm.RunContext(ctx) })
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case evt := <-sm.Events:
				if evt.Request != nil && evt.Request.EnvelopeID != "" {
					if payload, ok := ack(evt); ok {
						_ = sm.Ack(*evt.Request, payload)
					}
				}
				select {
				case b.events <- evt:
				default:
				}
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return b
}

// next returns the next event of type typ.
func (b *bot) next(t *testing.T, typ socketmode.EventType) socketmode.Event {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case evt := <-b.events:
			if evt.Type == typ {
				return evt
			}
		case <-timeout:
			t.Fatalf("no %s event within %v", typ, wait)
		}
	}
}

func innerEvent(t *testing.T, evt socketmode.Event) (eventID string, inner any) {
	t.Helper()
	ev, ok := evt.Data.(slackevents.EventsAPIEvent)
	if !ok {
		t.Fatalf("event data is %T, want slackevents.EventsAPIEvent", evt.Data)
	}
	return ev.Data.(*slackevents.EventsAPICallbackEvent).EventID, ev.InnerEvent.Data
}

func newServer(t *testing.T, opts ...fakeslack.Option) *fakeslack.Server {
	s := fakeslack.New(t, opts...)
	s.AddUser(fakeslack.User{ID: "U1ALICE", Name: "alice"})
	s.AddUser(fakeslack.User{ID: "U2BOSS", Name: "boss", IsAdmin: true})
	s.AddChannel(fakeslack.Channel{ID: "C1OPS", Name: "ops", Members: []string{"U1ALICE", s.BotUserID()}})
	return s
}

func TestMentionArrivesTwiceAndIsAcked(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, ackAll)
	b.next(t, socketmode.EventTypeHello)

	ts := s.Mention("C1OPS", "U1ALICE", "deploy please")

	var mention *slackevents.AppMentionEvent
	var message *slackevents.MessageEvent
	ids := map[string]bool{}
	for range 2 {
		id, inner := innerEvent(t, b.next(t, socketmode.EventTypeEventsAPI))
		ids[id] = true
		switch ev := inner.(type) {
		case *slackevents.AppMentionEvent:
			mention = ev
		case *slackevents.MessageEvent:
			message = ev
		default:
			t.Fatalf("got inner event %T", inner)
		}
	}
	if mention == nil || message == nil {
		t.Fatalf("got app_mention %v and message %v, want both", mention, message)
	}
	if mention.TimeStamp != ts || message.TimeStamp != ts {
		t.Errorf("got ts %q and %q, want %q for both", mention.TimeStamp, message.TimeStamp, ts)
	}
	if len(ids) != 2 {
		t.Errorf("got event ids %v, want two different ones", ids)
	}
	if want := "<@" + s.BotUserID() + ">"; !strings.Contains(mention.Text, want) {
		t.Errorf("mention text %q does not contain %q", mention.Text, want)
	}
	if message.ChannelType != "channel" {
		t.Errorf("got channel_type %q, want channel", message.ChannelType)
	}
	for _, env := range s.EnvelopesByTS(ts) {
		if _, err := s.WaitAck(env.ID, wait); err != nil {
			t.Fatal(err)
		}
		if d, ok := s.AckLatency(env.ID); !ok || d <= 0 || d > wait {
			t.Errorf("ack latency of %s: got %v, %v", env.ID, d, ok)
		}
	}
}

func TestDMAndOwnPostsEcho(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, ackAll)
	b.next(t, socketmode.EventTypeHello)

	s.DM("U1ALICE", "hello")
	_, inner := innerEvent(t, b.next(t, socketmode.EventTypeEventsAPI))
	dm := inner.(*slackevents.MessageEvent)
	if dm.ChannelType != "im" || dm.Channel != s.DMChannel("U1ALICE") {
		t.Errorf("got DM in %s (%s), want %s (im)", dm.Channel, dm.ChannelType, s.DMChannel("U1ALICE"))
	}

	_, ts, err := b.api.PostMessage("C1OPS", slack.MsgOptionText("on it", false))
	if err != nil {
		t.Fatal(err)
	}
	_, inner = innerEvent(t, b.next(t, socketmode.EventTypeEventsAPI))
	echo := inner.(*slackevents.MessageEvent)
	if echo.BotID != s.BotID() || echo.TimeStamp != ts || echo.SubType != "" {
		t.Errorf("echo: got bot_id %q ts %q subtype %q, want %q %q and no subtype", echo.BotID, echo.TimeStamp, echo.SubType, s.BotID(), ts)
	}
	if m, ok := s.Message("C1OPS", ts); !ok || m.Text != "on it" {
		t.Errorf("stored message: got %+v, %v", m, ok)
	}
}

// The fake's pings keep a client alive past its own ping timeout: over
// pings spanning three of the client's timeouts it does not reconnect.
func TestPingsKeepConnectionAlive(t *testing.T) {
	const interval, clientTimeout = 50 * time.Millisecond, 400 * time.Millisecond
	s := newServer(t, fakeslack.WithPingInterval(interval))
	startBot(t, s, ackAll, socketmode.OptionPingInterval(clientTimeout))
	if err := s.WaitConnected(1, wait); err != nil {
		t.Fatal(err)
	}
	want := int(3 * clientTimeout / interval)
	deadline := time.Now().Add(20 * time.Second)
	for s.PingsSent() < want {
		if time.Now().After(deadline) {
			t.Fatalf("got %d pings at a %v interval after 20 s, want at least %d", s.PingsSent(), interval, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := s.ConnectionsOpened(); got != 1 {
		t.Errorf("got %d connections opened over %d pings, want 1 (the client should not time out)", got, want)
	}
}

func TestDisconnectRedeliversUnacked(t *testing.T) {
	s := newServer(t)
	// Ack only redeliveries, so the first delivery is still pending when
	// the connection goes away.
	b := startBot(t, s, func(evt socketmode.Event) (any, bool) {
		return nil, evt.Request.RetryAttempt > 0
	})
	b.next(t, socketmode.EventTypeHello)

	s.DM("U1ALICE", "are you there?")
	first := b.next(t, socketmode.EventTypeEventsAPI)
	if first.Request.RetryAttempt != 0 {
		t.Fatalf("got retry_attempt %d on first delivery", first.Request.RetryAttempt)
	}
	s.Disconnect("refresh_requested")

	again := b.next(t, socketmode.EventTypeEventsAPI)
	if again.Request.EnvelopeID != first.Request.EnvelopeID {
		t.Errorf("got envelope %s, want redelivery of %s", again.Request.EnvelopeID, first.Request.EnvelopeID)
	}
	if again.Request.RetryAttempt < 1 || again.Request.RetryReason != "timeout" {
		t.Errorf("got retry_attempt %d reason %q, want > 0 and timeout", again.Request.RetryAttempt, again.Request.RetryReason)
	}
	if _, err := s.WaitAck(first.Request.EnvelopeID, wait); err != nil {
		t.Fatal(err)
	}
	if got := s.ConnectionsOpened(); got < 2 {
		t.Errorf("got %d connections opened, want a reconnect", got)
	}
}

func TestRedeliver(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, ackAll)
	b.next(t, socketmode.EventTypeHello)
	id := s.OpenHome("U1ALICE")
	b.next(t, socketmode.EventTypeEventsAPI)
	if _, err := s.WaitAck(id, wait); err != nil {
		t.Fatal(err)
	}
	if err := s.Redeliver(id); err != nil {
		t.Fatal(err)
	}
	evt := b.next(t, socketmode.EventTypeEventsAPI)
	if evt.Request.EnvelopeID != id || evt.Request.RetryAttempt != 1 {
		t.Errorf("got envelope %s attempt %d, want %s attempt 1", evt.Request.EnvelopeID, evt.Request.RetryAttempt, id)
	}
}

// With WithEventRetry, an event not acked in time is delivered again, at
// most three times (as Slack), and not once it is acked.
func TestEventRetryRedeliversUnackedEvents(t *testing.T) {
	const maxEventRetries = 3
	s := newServer(t, fakeslack.WithEventRetry(10*time.Millisecond))
	// Ack the last retry only.
	b := startBot(t, s, func(evt socketmode.Event) (any, bool) {
		return nil, evt.Request.RetryAttempt == maxEventRetries
	})
	b.next(t, socketmode.EventTypeHello)
	s.DM("U1ALICE", "are you there?")
	for attempt := range maxEventRetries + 1 {
		evt := b.next(t, socketmode.EventTypeEventsAPI)
		if evt.Request.RetryAttempt != attempt {
			t.Fatalf("got retry_attempt %d, want %d", evt.Request.RetryAttempt, attempt)
		}
		if attempt > 0 && evt.Request.RetryReason != "timeout" {
			t.Errorf("got retry_reason %q, want timeout", evt.Request.RetryReason)
		}
	}
	id := s.Envelopes()[0].ID
	if _, err := s.WaitAck(id, wait); err != nil {
		t.Fatal(err)
	}
	// Past the retries and acked: a later event is the next to arrive.
	s.DM("U1ALICE", "hello again")
	if evt := b.next(t, socketmode.EventTypeEventsAPI); evt.Request.EnvelopeID == id {
		t.Errorf("the acked event was delivered again (retry_attempt %d)", evt.Request.RetryAttempt)
	}
}

func TestRoundRobinOverConnections(t *testing.T) {
	s := newServer(t)
	var counts [2]atomic.Int32
	for i := range counts {
		startBot(t, s, func(evt socketmode.Event) (any, bool) {
			counts[i].Add(1)
			return nil, true
		})
	}
	if err := s.WaitConnected(2, wait); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 4 {
		s.DM("U1ALICE", "hi")
	}
	for _, e := range s.Envelopes() {
		ids = append(ids, e.ID)
	}
	for _, id := range ids {
		if _, err := s.WaitAck(id, wait); err != nil {
			t.Fatal(err)
		}
	}
	if counts[0].Load() != 2 || counts[1].Load() != 2 {
		t.Errorf("got %d and %d envelopes per connection, want 2 and 2", counts[0].Load(), counts[1].Load())
	}
}

func TestAuth(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	got, err := api.AuthTest()
	if err != nil {
		t.Fatal(err)
	}
	if got.UserID != s.BotUserID() || got.BotID != s.BotID() || got.TeamID != s.TeamID() {
		t.Errorf("auth.test: got %+v", got)
	}
	bad := slack.New("xoxb-wrong", slack.OptionAPIURL(s.APIURL()), slack.OptionAppLevelToken("xapp-wrong"))
	if _, err := bad.AuthTest(); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("auth.test with a wrong token: got %v, want invalid_auth", err)
	}
	if _, _, err := bad.StartSocketModeContext(context.Background()); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("apps.connections.open with a wrong token: got %v, want invalid_auth", err)
	}
}

func TestRateLimitAndFailures(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	s.RateLimit("chat.postMessage", 1, 7)
	_, _, err := api.PostMessage("C1OPS", slack.MsgOptionText("x", false))
	var rl *slack.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("got %v, want RateLimitedError after 7s", err)
	}
	if _, _, err := api.PostMessage("C1OPS", slack.MsgOptionText("x", false)); err != nil {
		t.Fatalf("second call: %v", err)
	}
	s.FailNext("users.info", http.StatusServiceUnavailable)
	_, err = api.GetUserInfo("U1ALICE")
	var sc slack.StatusCodeError
	if !errors.As(err, &sc) || sc.Code != http.StatusServiceUnavailable {
		t.Errorf("got %v, want status 503", err)
	}
	calls := s.Calls("chat.postMessage")
	if len(calls) != 2 || calls[0].Status != http.StatusTooManyRequests || !calls[1].OK() {
		t.Errorf("got calls %+v", calls)
	}
}

func TestUnknownMethod(t *testing.T) {
	s := newServer(t)
	resp, err := http.PostForm(s.APIURL()+"files.upload", url.Values{"token": {s.BotToken()}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body.OK || body.Error != "unknown_method" {
		t.Errorf("got %+v, want unknown_method", body)
	}
	if got := s.UnknownMethods(); len(got) != 1 || got[0] != "files.upload" {
		t.Errorf("got unknown methods %v", got)
	}
}

func TestBlockKitLimits(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	section := func(n int) slack.Block {
		return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, strings.Repeat("a", n), false, false), nil, nil)
	}
	many := make([]slack.Block, 51)
	for i := range many {
		many[i] = section(1)
	}
	button := slack.NewActionBlock("b", slack.NewButtonBlockElement("approve", strings.Repeat("v", 2001),
		slack.NewTextBlockObject(slack.PlainTextType, "Approve", false, false)))
	tests := []struct {
		name string
		opts []slack.MsgOption
		want string
	}{
		{"51 blocks", []slack.MsgOption{slack.MsgOptionBlocks(many...)}, "invalid_blocks"},
		{"3001-char section", []slack.MsgOption{slack.MsgOptionBlocks(section(3001))}, "invalid_blocks"},
		{"3000-char section", []slack.MsgOption{slack.MsgOptionBlocks(section(3000))}, ""},
		{"2001-char button value", []slack.MsgOption{slack.MsgOptionBlocks(button)}, "invalid_blocks"},
		{"40001-char text", []slack.MsgOption{slack.MsgOptionText(strings.Repeat("x", 40001), false)}, "msg_too_long"},
		{"no text", nil, "no_text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := api.PostMessage("C1OPS", tt.opts...)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("postMessage with %s: got error %q, want %q", tt.name, got, tt.want)
			}
		})
	}

	blocks := make([]slack.Block, 101)
	for i := range blocks {
		blocks[i] = section(1)
	}
	home := slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: slack.Blocks{BlockSet: blocks}}
	if _, err := api.PublishView("U1ALICE", home, ""); err == nil || err.Error() != "invalid_arguments" {
		t.Errorf("views.publish with 101 blocks: got %v, want invalid_arguments", err)
	}
	home.Blocks.BlockSet = blocks[:100]
	if _, err := api.PublishView("U1ALICE", home, ""); err != nil {
		t.Errorf("views.publish with 100 blocks: %v", err)
	}
}

// clock is a settable clock for WithClock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func modal(title string) slack.ModalViewRequest {
	return slack.ModalViewRequest{
		Type:       slack.VTModal,
		Title:      slack.NewTextBlockObject(slack.PlainTextType, title, false, false),
		Submit:     slack.NewTextBlockObject(slack.PlainTextType, "Send", false, false),
		CallbackID: "reject_reason",
		Blocks: slack.Blocks{BlockSet: []slack.Block{
			slack.NewInputBlock("reason", slack.NewTextBlockObject(slack.PlainTextType, "Reason", false, false), nil,
				slack.NewPlainTextInputBlockElement(nil, "text")),
		}},
	}
}

func TestTriggerIDSingleUseAndExpiry(t *testing.T) {
	clk := &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	s := newServer(t, fakeslack.WithClock(clk.Now))
	b := startBot(t, s, ackAll)
	b.next(t, socketmode.EventTypeHello)

	approve := slack.NewActionBlock("decide", slack.NewButtonBlockElement("reject", "call-1",
		slack.NewTextBlockObject(slack.PlainTextType, "Reject", false, false)))
	_, ts, err := b.api.PostMessage("C1OPS", slack.MsgOptionBlocks(approve))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Click("U1ALICE", "C1OPS", ts, "reject", ""); err != nil {
		t.Fatal(err)
	}
	evt := b.next(t, socketmode.EventTypeInteractive)
	cb := evt.Data.(slack.InteractionCallback)
	if cb.Type != slack.InteractionTypeBlockActions || cb.TriggerID == "" || cb.User.ID != "U1ALICE" ||
		cb.Channel.ID != "C1OPS" || cb.Container.MessageTs != ts || cb.Message.Timestamp != ts {
		t.Fatalf("block_actions payload: got %+v", cb)
	}
	if act := cb.ActionCallback.BlockActions; len(act) != 1 || act[0].ActionID != "reject" || act[0].Value != "call-1" || act[0].BlockID != "decide" {
		t.Fatalf("got actions %+v", act)
	}

	v, err := b.api.OpenView(cb.TriggerID, modal("Reject"))
	if err != nil {
		t.Fatalf("first views.open: %v", err)
	}
	if _, err := b.api.OpenView(cb.TriggerID, modal("Reject")); err == nil || err.Error() != "exchanged_trigger_id" {
		t.Errorf("second views.open: got %v, want exchanged_trigger_id", err)
	}
	late := s.IssueTrigger("U1ALICE")
	clk.Advance(3100 * time.Millisecond)
	if _, err := b.api.OpenView(late, modal("Reject")); err == nil || err.Error() != "expired_trigger_id" {
		t.Errorf("views.open after 3.1 s: got %v, want expired_trigger_id", err)
	}
	if got := s.OpenModals("U1ALICE"); len(got) != 1 || got[0].ID != v.ID {
		t.Errorf("got open modals %+v, want %s", got, v.ID)
	}
}

func TestSubmitViewAndSlash(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, func(evt socketmode.Event) (any, bool) {
		switch data := evt.Data.(type) {
		case slack.InteractionCallback:
			if data.Type == slack.InteractionTypeViewSubmission {
				reason := data.View.State.Values["reason"]["text"].Value
				if reason == "" {
					return slack.NewErrorsViewSubmissionResponse(map[string]string{"reason": "required"}), true
				}
			}
		case slack.SlashCommand:
			return map[string]string{"text": "pending: none (" + data.Text + ")"}, true
		}
		return nil, true
	})
	b.next(t, socketmode.EventTypeHello)

	trigger := s.IssueTrigger("U1ALICE")
	v, err := b.api.OpenView(trigger, modal("Reject"))
	if err != nil {
		t.Fatal(err)
	}
	ack, err := s.SubmitView("U1ALICE", "reject_reason", map[string]map[string]string{"reason": {"text": ""}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ack), `"response_action":"errors"`) {
		t.Errorf("got ack %s, want response_action errors", ack)
	}
	if got := s.OpenModals("U1ALICE"); len(got) != 1 {
		t.Errorf("after errors: got %d open modals, want 1", len(got))
	}
	if _, err := s.SubmitView("U1ALICE", v.ID, map[string]map[string]string{"reason": {"text": "too risky"}}, ""); err != nil {
		t.Fatal(err)
	}
	if got := s.OpenModals("U1ALICE"); len(got) != 0 {
		t.Errorf("after a plain ack: got %d open modals, want 0", len(got))
	}

	ack, err = s.Slash("U1ALICE", "C1OPS", "/approvals", "pending")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ack), "pending: none") {
		t.Errorf("got slash ack %s", ack)
	}
	if eph := s.Ephemerals("U1ALICE"); len(eph) != 1 || !strings.Contains(eph[0].Text, "pending") {
		t.Errorf("got ephemerals %+v", eph)
	}
}

func TestStreaming(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	parent := s.Mention("C1OPS", "U1ALICE", "explain")
	if _, _, err := api.StartStream("C1OPS", slack.MsgOptionTS(parent)); err == nil {
		t.Fatal("startStream in a channel without recipients: got no error")
	}
	ch, ts, err := api.StartStream("C1OPS", slack.MsgOptionTS(parent),
		slack.MsgOptionRecipientUserID("U1ALICE"), slack.MsgOptionRecipientTeamID(s.TeamID()),
		slack.MsgOptionMarkdownText("Hello"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.AppendStream(ch, ts, slack.MsgOptionMarkdownText(", world")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.StopStream(ch, ts, slack.MsgOptionMarkdownText(".")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.AppendStream(ch, ts, slack.MsgOptionMarkdownText("more")); err == nil {
		t.Error("appendStream after stopStream: got no error")
	}
	m, ok := s.Message(ch, ts)
	if !ok || m.Text != "Hello, world." || m.Streaming || m.ThreadTS != parent {
		t.Errorf("got streamed message %+v", m)
	}
}

func TestDirectoryAndUpdates(t *testing.T) {
	s := newServer(t)
	s.AddChannel(fakeslack.Channel{ID: "C2SECRET", Name: "secret", Private: true, Members: []string{"U2BOSS"}})
	s.AddUserGroup("S1OPS", "U1ALICE", "U2BOSS")
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))

	u, err := api.GetUserInfo("U2BOSS")
	if err != nil || !u.IsAdmin {
		t.Errorf("users.info: got %+v, %v", u, err)
	}
	if _, err := api.GetConversationInfo(&slack.GetConversationInfoInput{ChannelID: "C2SECRET"}); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("conversations.info on a private channel without the bot: got %v", err)
	}
	members, _, err := api.GetUsersInConversation(&slack.GetUsersInConversationParameters{ChannelID: "C1OPS"})
	if err != nil || len(members) != 2 {
		t.Errorf("conversations.members: got %v, %v", members, err)
	}
	group, err := api.GetUserGroupMembers("S1OPS")
	if err != nil || len(group) != 2 {
		t.Errorf("usergroups.users.list: got %v, %v", group, err)
	}
	dm, _, _, err := api.OpenConversation(&slack.OpenConversationParameters{Users: []string{"U2BOSS"}})
	if err != nil || dm.ID != s.DMChannel("U2BOSS") {
		t.Errorf("conversations.open: got %+v, %v", dm, err)
	}

	parent := s.Mention("C1OPS", "U1ALICE", "hi")
	if err := api.SetAssistantThreadsStatus(slack.AssistantThreadsSetStatusParameters{ChannelID: "C1OPS", ThreadTS: parent, Status: "is thinking..."}); err != nil {
		t.Fatal(err)
	}
	if got := s.ThreadStatus("C1OPS", parent); got != "is thinking..." {
		t.Errorf("got status %q", got)
	}
	_, ts, err := api.PostMessage("C1OPS", slack.MsgOptionText("first", false), slack.MsgOptionTS(parent))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.ThreadStatus("C1OPS", parent); got != "" {
		t.Errorf("status after a reply: got %q, want it cleared", got)
	}
	if _, _, _, err := api.UpdateMessage("C1OPS", ts, slack.MsgOptionText("second", false)); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := api.UpdateMessage("C1OPS", parent, slack.MsgOptionText("hijack", false)); err == nil || err.Error() != "cant_update_message" {
		t.Errorf("updating a user's message: got %v", err)
	}
	thread := s.Thread("C1OPS", parent)
	if len(thread) != 2 || thread[1].Text != "second" || thread[1].Updates != 1 {
		t.Errorf("got thread %+v", thread)
	}
	msgs, _, _, err := api.GetConversationReplies(&slack.GetConversationRepliesParameters{ChannelID: "C1OPS", Timestamp: parent})
	if err != nil || len(msgs) != 2 {
		t.Errorf("conversations.replies: got %d messages, %v", len(msgs), err)
	}
	link, err := api.GetPermalink(&slack.PermalinkParameters{Channel: "C1OPS", Ts: ts})
	if err != nil || !strings.Contains(link, "thread_ts="+parent) {
		t.Errorf("chat.getPermalink: got %q, %v", link, err)
	}
	if _, err := s.WaitCall("chat.update", func(c fakeslack.Call) bool { return c.Param("text") == "second" }, wait); err != nil {
		t.Error(err)
	}
}
