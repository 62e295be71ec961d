package slackapp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// The Home tab is live: an approver who opened it once sees a call they may
// decide appear, and leave after a decision in the thread, without
// opening the tab again; the requester's tab follows too.
func TestHomeRepublishedOnChanges(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			e.start()
			if home := e.home(approver); strings.Contains(string(home.JSON), "deploy") {
				t.Fatalf("the approver's Home tab shows a deploy before any: %s", home.JSON)
			}
			opened := len(e.slack.Calls("views.publish"))

			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed api 8."))
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")
			waitUntil(t, "the approver's Home tab shows the new call", func() bool {
				home, ok := e.slack.HomeView(approver)
				return ok && strings.Contains(string(home.JSON), "`deploy`") && strings.Contains(string(home.JSON), "Waiting since")
			})
			waitUntil(t, "the requester's Home tab lists the request", func() bool {
				home, ok := e.slack.HomeView(requester)
				return ok && strings.Contains(string(home.JSON), "`deploy`")
			})

			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 8.")
			waitUntil(t, "the approver's Home tab no longer shows the decided call", func() bool {
				home, ok := e.slack.HomeView(approver)
				return ok && !strings.Contains(string(home.JSON), "`deploy`") && strings.Contains(string(home.JSON), "Nothing is waiting for you")
			})
			if n := len(e.slack.Calls("views.publish")); n <= opened {
				t.Errorf("views.publish was called %d times in all, %d before the call appeared; want republishing", n, opened)
			}
		})
	}
}

// With more pending calls than the Home reads, the Home and /approvals
// pending read the oldest ones, a user's own newer request still shows on
// their tab, and /approvals pending says that more may be waiting.
func TestHomeAndPendingPastTheScanLimit(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			st := e.open()
			create := st.(interface {
				CreateRun(context.Context, store.Run, []store.Call) error
			}).CreateRun
			old := time.Now().Add(-time.Hour)
			for i := range 501 {
				who, at := other, old.Add(time.Duration(i)*time.Millisecond)
				if i == 500 {
					who, at = requester, time.Now()
				}
				r := store.Run{ID: store.NewRunID(), Conversation: fmt.Sprintf("%s:1.%d", channel, i), Requester: who, Channel: channel, CreatedAt: at}
				c := store.Call{ID: store.CallID(r.ID, 0), Tool: "deploy", Args: json.RawMessage(`{}`), Fingerprint: "fp",
					Approvers: []string{approver}, ExpiresAt: time.Now().Add(time.Hour)}
				must(t, create(t.Context(), r, []store.Call{c}))
			}
			must(t, st.Close())
			e.start()

			wantIn(t, "the requester's Home tab", viewText(e.home(requester)), "Your requests waiting for approval* (1)")
			wantIn(t, "/approvals pending", e.slash(approver, "pending"), "Only the oldest 500 pending calls")
		})
	}
}

// Changes that come together are one round: three calls paused at once,
// each asking the same approver, republish the approver's tab once.
func TestHomeRepublishedOncePerRound(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.HomeRefreshDelay = 300 * time.Millisecond
	e.start()
	e.home(approver)
	publishes := func() int {
		n := 0
		for _, c := range e.slack.Calls("views.publish") {
			if c.Param("user_id") == approver {
				n++
			}
		}
		return n
	}
	opened := publishes()
	e.model.Reply(fakeopenai.ToolCalls(
		tc("c1", "deploy", `{"service":"api","version":"1"}`),
		tc("c2", "deploy", `{"service":"web","version":"2"}`),
		tc("c3", "deploy", `{"service":"db","version":"3"}`),
	))
	ts := e.slack.Mention(channel, requester, "deploy all three")
	e.card(ts, "deploy")
	waitUntil(t, "the approver's Home tab shows the three calls", func() bool {
		home, ok := e.slack.HomeView(approver)
		return ok && strings.Count(string(home.JSON), "`deploy`") >= 3
	})
	e.stop() // the round's work is done by then
	if n := publishes() - opened; n != 1 {
		t.Errorf("the approver's tab was published %d times for one round, want once", n)
	}
}
