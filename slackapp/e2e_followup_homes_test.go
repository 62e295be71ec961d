package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
)

// homeLists reports whether user's Home tab, as last published, lists a
// call of tool.
func (e *env) homeLists(user, tool string) bool {
	home, ok := e.slack.HomeView(user)
	return ok && strings.Contains(string(home.JSON), "`"+tool+"`")
}

// homeHasButtons reports whether user's Home tab, as last published,
// has an Approve button.
func (e *env) homeHasButtons(user string) bool {
	home, ok := e.slack.HomeView(user)
	return ok && strings.Contains(string(home.JSON), `"action_id":"`+slackapp.ActionApprove+`"`)
}

// homePublishes counts the views.publish calls made for user.
func (e *env) homePublishes(user string) int {
	n := 0
	for _, c := range e.slack.Calls("views.publish") {
		if c.Param("user_id") == user {
			n++
		}
	}
	return n
}

// Two replicas: a Home tab published on one as its user opens it, slowly,
// from a reading made before a decision taken on the other, does not end
// up over the tab the other's refresh round published after that
// decision: the approver's tab ends without the decided call's buttons.
func TestHomeTabOfAnOlderReadingDoesNotWinAcrossReplicas(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			e.replicas(2)
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")
			// The round of the pause is over once it has published the
			// tabs of everyone concerned, the other approver's last.
			for _, u := range []string{requester, approver, other} {
				waitUntil(t, u+"'s Home tab lists the call", func() bool { return e.homeLists(u, "deploy") })
			}

			arrived, release := e.slack.HoldNext("views.publish")
			defer release()
			// Envelopes go to the replicas' connections in turn: the
			// opening to one replica, the click right after it to the
			// other.
			e.slack.OpenHome(approver)
			<-arrived // the approver's tab, read with the call pending, held

			_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed: ")
			waitUntil(t, "the other replica's round publishes the approver's tab without the call", func() bool {
				return !e.homeLists(approver, "deploy")
			})

			held := e.homePublishes(approver)
			release()
			waitUntil(t, "the held tab is sent", func() bool { return e.homePublishes(approver) > held })
			waitUntil(t, "the approver's tab shows no buttons of the decided call", func() bool {
				return !e.homeHasButtons(approver)
			})
		})
	}
}

// A Home tab published after its user revoked a standing rule there, from
// a reading made before a decision, does not end up over the tab a refresh
// round published after that decision: the tab a revocation publishes
// takes its turn with the rounds, and the approver's tab ends without the
// decided call's buttons.
func TestHomeAfterARevocationDoesNotOverwriteANewerTab(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			// The approver's standing rule, for another channel, is there
			// before the bot starts: the pause below is the only change.
			st := e.open()
			_, err := approvals.NewEngine(nil, st).Remember(t.Context(), approver, approvals.StandingRule{Tool: "deploy", Channel: "CELSEWHERE"})
			must(t, err)
			must(t, st.Close())
			e.start()

			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed api 1."))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy")
			waitUntil(t, "the approver's tab lists the call and the standing rule", func() bool {
				home, _ := e.slack.HomeView(approver)
				return e.homeHasButtons(approver) && strings.Contains(viewText(home), "Your standing rules* (1)")
			})
			waitUntil(t, "the round of the pause publishes the other approver's tab", func() bool { return e.homeLists(other, "deploy") })
			// A tab opened while a round publishes it is published once
			// the round is out: then the round is over.
			e.home(other)

			arrived, release := e.slack.HoldNext("views.publish")
			defer release()
			home, _ := e.slack.HomeView(approver)
			_, err = e.slack.ClickInView(approver, home.ID, slackapp.ActionRevokeRule, "")
			must(t, err)
			<-arrived // the approver's tab, read with the call pending, held

			_, err = e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 1.")
			// The round of the decision publishes the tabs in the order
			// of the people concerned: the requester's, the approvers'.
			waitUntil(t, "the round publishes the other approver's tab without the call", func() bool {
				return !e.homeLists(other, "deploy")
			})

			held := e.homePublishes(approver)
			release()
			waitUntil(t, "the held tab is sent", func() bool { return e.homePublishes(approver) > held })
			waitUntil(t, "the approver's tab shows no buttons of the decided call, nor the revoked rule", func() bool {
				home, _ := e.slack.HomeView(approver)
				return !e.homeHasButtons(approver) && strings.Contains(viewText(home), "Your standing rules* (0)")
			})
		})
	}
}
