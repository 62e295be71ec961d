package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
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
