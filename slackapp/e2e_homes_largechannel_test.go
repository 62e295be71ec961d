package slackapp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// The Home tab is live in a channel of more than 100 members too: an
// approver who opened their tab sees a call open to anyone in the channel
// leave it once decided, without opening the tab again. The tabs of the
// members who never opened theirs are not published.
func TestHomeRepublishedInALargeChannel(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			const big = "CBIGCHAN01"
			e := newEnv(t, kind)
			e.policy = "policy:\n  default: ask\n"
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			members := []string{requester, approver, other, stranger, e.slack.BotUserID()}
			var quiet []string
			for i := range 120 {
				u := fmt.Sprintf("UMEMBER%03d", i)
				e.slack.AddUser(fakeslack.User{ID: u, Name: strings.ToLower(u)})
				members = append(members, u)
				quiet = append(quiet, u)
			}
			e.slack.AddChannel(fakeslack.Channel{ID: big, Name: "ops", Members: members})
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed api 8."))
			ts := e.slack.Mention(big, requester, "deploy api 8")
			card := e.cardIn(big, ts, "deploy")
			wantIn(t, "the approver's Home tab", viewText(e.home(approver)), "`deploy`")

			_, err := e.slack.Click(other, big, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answerIn(big, ts, "Deployed api 8.")
			waitUntil(t, "the approver's Home tab no longer lists the decided call", func() bool {
				home, ok := e.slack.HomeView(approver)
				return ok && !strings.Contains(string(home.JSON), "`deploy`") && !e.homeHasButtons(approver)
			})
			e.stop() // the rounds are over by then
			for _, u := range quiet {
				if n := e.homePublishes(u); n != 0 {
					t.Errorf("the Home tab of %s, who never opened it, was published %d times", u, n)
				}
			}
		})
	}
}
