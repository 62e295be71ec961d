package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
)

// A Home tab published as its user opens it, slowly, does not end up over
// the tab a refresh round published after a decision made meanwhile: the
// approver's tab ends without the decided call's buttons.
func TestOpenedHomeDoesNotOverwriteANewerTab(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed api 8."))
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")
			lists := func(user string) bool {
				home, ok := e.slack.HomeView(user)
				return ok && strings.Contains(string(home.JSON), "`deploy`")
			}
			// The round of the pause is over once it has published the
			// tabs of everyone concerned.
			for _, u := range []string{requester, approver, other} {
				waitUntil(t, u+"'s Home tab lists the call", func() bool { return lists(u) })
			}
			publishes := func(user string) int {
				n := 0
				for _, c := range e.slack.Calls("views.publish") {
					if c.Param("user_id") == user {
						n++
					}
				}
				return n
			}

			arrived, release := e.slack.HoldNext("views.publish")
			defer release()
			e.slack.OpenHome(approver)
			<-arrived // the approver's tab, read with the call pending, held

			_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 8.")
			// The round of the decision publishes the tabs in the order
			// of the people concerned: the requester's, the approvers'.
			waitUntil(t, "the round publishes the other approver's tab without the call", func() bool { return !lists(other) })

			held := publishes(approver)
			release()
			waitUntil(t, "the held tab is published", func() bool { return publishes(approver) > held })
			waitUntil(t, "the approver's tab shows no buttons of the decided call", func() bool {
				home, ok := e.slack.HomeView(approver)
				return ok && !strings.Contains(string(home.JSON), `"action_id":"`+slackapp.ActionApprove+`"`)
			})
		})
	}
}
