package slackapp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// lookupFailStore fails GetCall (the app's look-up of a clicked call)
// while fail is set; everything else works.
type lookupFailStore struct {
	fullStore
	fail *atomic.Bool
}

func (s *lookupFailStore) GetCall(ctx context.Context, id string) (store.Call, error) {
	if s.fail.Load() {
		return store.Call{}, errOutage
	}
	return s.fullStore.GetCall(ctx, id)
}

// A requester who left a private channel no longer cancels the call they
// asked for there, nor when the look-up of the clicked call fails (a store
// error) or the value names no call of the run: that cannot be checked, so
// nothing is cancelled.
func TestCancelByRequesterWhoLeftIsRefusedWhenTheCallCannotBeRead(t *testing.T) {
	for _, forged := range []bool{false, true} {
		t.Run(map[bool]string{false: "lookup fails", true: "forged call index"}[forged], func(t *testing.T) { cancelWhoLeft(t, forged) })
	}
}

func cancelWhoLeft(t *testing.T, forged bool) {
	const private = "CPRIVATE01"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "incident", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	var fail atomic.Bool
	var under fullStore
	open := e.open
	e.open = func() fullStore { under = open(); return &lookupFailStore{fullStore: under, fail: &fail} }
	asked, leave := make(chan struct{}), make(chan struct{})
	var n atomic.Int64
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		if n.Add(1) == 1 {
			close(asked)
			<-leave
			return fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`))
		}
		return fakeopenai.Text("Deployed api 8.")
	})
	e.start()
	ts := e.slack.Mention(private, requester, "deploy api 8")
	<-asked
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "incident", Private: true, Members: []string{other, e.slack.BotUserID()}})
	close(leave)
	card := e.cardIn(private, ts, "deploy")
	callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")

	value := ""
	if forged {
		// The same run, a call index it does not have: a value of the
		// bot's shape ("a button's value is all it takes to ask").
		run, _, _ := strings.Cut(callID, ".")
		_, fp, _ := strings.Cut(buttonValue(t, card, slackapp.ActionCancel), "~")
		value = run + ".9~" + fp
	} else {
		fail.Store(true)
	}
	_, err := e.slack.Click(requester, private, card.TS, slackapp.ActionCancel, value)
	must(t, err)
	told := func() bool {
		if len(e.slack.Ephemerals(requester)) > 0 {
			return true
		}
		return len(e.slack.Messages(e.slack.DMChannel(requester))) > 0
	}
	waitUntil(t, "the Cancel is handled", func() bool {
		c, err := under.GetCall(t.Context(), callID)
		return told() || err == nil && c.Status != store.Pending
	})
	fail.Store(false)
	if c, _ := under.GetCall(t.Context(), callID); c.Status != store.Pending {
		t.Fatalf("a requester who left the private channel cancelled the call (status %s), the clicked call unread", c.Status)
	}
}

// Slackbot (USLACKBOT: reminders, custom responses any member can set up)
// posts with no bot_id. Its message mentioning the bot is not taken in:
// Slackbot would be the requester of a call a person asked for through
// it, out of four eyes' sight.
func TestSlackbotMessageDoesNotStartATurn(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	var accepts atomic.Int64
	open := e.open
	e.open = func() fullStore { return &acceptCounter{fullStore: open(), n: &accepts} }
	e.start()
	ts := e.slack.Mention(channel, "USLACKBOT", "Reminder: deploy api 9.")
	for _, env := range e.slack.EnvelopesByTS(ts) {
		if _, err := e.slack.WaitAck(env.ID, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := accepts.Load(); n != 0 {
		t.Errorf("a Slackbot message was recorded as a person's message (%d records)", n)
	}
}
