package slackapp_test

import (
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// A turn waiting for its conversation's lease, which another replica
// holds, gives its turn slot back while it waits: with MAX_TURNS=1,
// conversation Y is answered while X's turn waits, and X's turn runs once
// the lease is free.
func TestLeaseWaitElsewhereHoldsNoTurnSlot(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Text("answered: " + req.Messages[len(req.Messages)-1].Content)
	})
	b := e.start()
	tsX := e.slack.Mention(channel, requester, "first in X")
	e.answer(tsX, "answered: first in X")

	// Another replica works on X now: it holds X's lease.
	lease := store.TurnLease(slackapp.ConversationKey(e.slack.TeamID(), channel, tsX))
	ok, err := b.st.AcquireLease(t.Context(), lease, "other-replica#1", time.Minute)
	must(t, err)
	if !ok {
		t.Fatal("could not take X's lease for the other replica")
	}
	again := e.slack.ThreadReply(channel, tsX, requester, "<@"+e.slack.BotUserID()+"> second in X")
	for _, env := range e.slack.EnvelopesByTS(again) {
		if _, err := e.slack.WaitAck(env.ID, 15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// X's second turn took the only slot before its ack; it waits for the
	// other replica's lease.
	tsY := e.slack.Mention(channel, requester, "hello from Y")
	e.answer(tsY, "answered: hello from Y")
	if strings.Contains(dumpThread(e.slack.Thread(channel, tsY)), "yours is queued") {
		t.Error("Y was told it is queued while the only slot waited for another replica's lease")
	}
	must(t, b.st.ReleaseLease(t.Context(), lease, "other-replica#1"))
	e.answer(tsX, "second in X") // the second turn, once the lease is free
}
