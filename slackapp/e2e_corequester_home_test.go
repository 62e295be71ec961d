package slackapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// A call made by a turn that answers the messages of two people is a
// request of both: the card and /approvals pending name both, each finds
// it among their own requests waiting for approval on the Home tab, and
// either may cancel it.
func TestCoRequesterSeesTheirRequestOnHome(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(
				fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)),
				fakeopenai.Text("Deployed api 5."),
				fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"web","version":"6"}`)),
				fakeopenai.Text("Deployed web 6."),
			)
			ts := e.slack.Mention(channel, requester, "deploy api 5")
			card := e.card(ts, "deploy")
			// Two messages come while the first deploy waits: the
			// requester's and the stranger's, both answered by the turn
			// that resumes once it is approved.
			e.slack.ThreadReply(channel, ts, requester, "and web 6 please")
			e.answer(ts, "waiting on approval")
			e.slack.ThreadReply(channel, ts, stranger, "yes, web 6 too")
			waitUntil(t, "the second message is answered with a waiting note", func() bool {
				n := 0
				for _, m := range e.slack.Thread(channel, ts) {
					if m.BotID != "" && strings.Contains(m.Text, "waiting on approval") {
						n++
					}
				}
				return n == 2
			})
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 5.")
			second := e.waitThread(ts, "with a card for the web deploy", func(m fakeslack.Message) bool {
				return isCard(m) && strings.Contains(blocksText(m), "web")
			})
			waitUntil(t, "the web deploy's call is saved", func() bool { return e.saved(e.bot.st, second) })
			wantIn(t, "the second card", blocksText(second), "<@"+requester+">", "<@"+stranger+">")
			wantIn(t, "/approvals pending", e.slash(approver, "pending"), "<@"+requester+">", "<@"+stranger+">")
			for _, u := range []string{requester, stranger} {
				wantIn(t, u+"'s Home tab", viewText(e.home(u)), "Your requests waiting for approval* (1)")
			}

			_, err = e.slack.Click(requester, channel, second.TS, slackapp.ActionCancel, "")
			must(t, err)
			waitUntil(t, "the co-requester's Cancel ends the call", func() bool { return len(e.cards(channel, ts)) == 0 })
		})
	}
}

// With more pending calls than the Home tab reads at once, it looks up a
// user's own requests in the store: a call requested by two people is
// found there for each of them.
func TestCoRequesterSeesTheirRequestOnHomePastTheScanLimit(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			st := e.open()
			create := st.(interface {
				CreateRun(context.Context, store.Run, []store.Call) error
			}).CreateRun
			old := time.Now().Add(-time.Hour)
			for i := range 501 {
				r := store.Run{ID: store.NewRunID(), Conversation: fmt.Sprintf("%s:1.%d", channel, i), Requester: other, Channel: channel, CreatedAt: old.Add(time.Duration(i) * time.Millisecond)}
				c := store.Call{ID: store.CallID(r.ID, 0), Tool: "deploy", Args: json.RawMessage(`{}`), Fingerprint: "fp",
					Approvers: []string{approver}, ExpiresAt: time.Now().Add(time.Hour)}
				if i == 500 {
					// The newest answers the requester's message and the
					// stranger's, the stranger's last.
					r.Requester, r.CreatedAt = stranger, time.Now()
					c.Requesters = []string{requester, stranger}
				}
				must(t, create(t.Context(), r, []store.Call{c}))
			}
			must(t, st.Close())
			e.start()

			for _, u := range []string{requester, stranger} {
				wantIn(t, u+"'s Home tab", viewText(e.home(u)), "Your requests waiting for approval* (1)")
			}
		})
	}
}
