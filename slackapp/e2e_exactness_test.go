package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// reencoded reports whether rendered blocks show arguments re-encoded with
// HTML escapes: a `\u003c` written into the text itself arrives in the
// blocks' JSON as `\\u003c`.
func reencoded(blocks []byte) bool {
	return strings.Contains(string(blocks), `\\u00`)
}

// The bytes shown are the bytes run: '<', '>' and '&' in arguments survive
// the store and a restart, on the card after a decision, in App Home and in
// what the tool receives.
func TestArgumentBytesSurviveARestart(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			const args = `{"service":"a<b","version":"1 && 2>1"}`
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")
			e.restart()

			e.slack.OpenHome(approver)
			var home fakeslack.View
			waitUntil(t, "the approver's Home tab is published", func() bool {
				var ok bool
				home, ok = e.slack.HomeView(approver)
				return ok
			})
			if reencoded(home.JSON) || !strings.Contains(viewText(home), "1 &amp;&amp; 2&gt;1") {
				t.Errorf("App Home does not show the arguments as written: %s", home.JSON)
			}

			e.model.Reply(fakeopenai.Text("deployed after the restart"))
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "deployed after the restart")
			if got := e.deployArgs(); len(got) != 1 || got[0] != args {
				t.Errorf("deploy ran with %q, want exactly %q", got, args)
			}
			updated, _ := e.slack.Message(channel, card.TS)
			if reencoded(updated.Blocks) || !strings.Contains(blocksText(updated), "a&lt;b") {
				t.Errorf("the decided card does not show the arguments as written: %s", updated.Blocks)
			}
		})
	}
}
