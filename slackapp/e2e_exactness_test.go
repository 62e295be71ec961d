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

// Hidden characters in arguments are written out on the card with a
// warning; the tool gets the exact characters approved.
func TestHiddenCharactersShownOnTheCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	const args = "{\"service\":\"reports/\u202evsc.exe\",\"version\":\"\u200b1\"}"
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	text := blocksText(card)
	for _, want := range []string{"reports/⟦U+202E⟧vsc.exe", "⟦U+200B⟧1", "2 hidden character(s)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the card does not show %q: %s", want, text)
		}
	}
	if strings.ContainsAny(text, "\u202e\u200b") {
		t.Errorf("the card carries the hidden characters themselves: %q", text)
	}
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed.")
	if got := e.deployArgs(); len(got) != 1 || got[0] != args {
		t.Errorf("deploy ran with %q, want exactly %q", got, args)
	}
}

// Keys that differ only by Unicode normalisation, or that mix look-alike
// scripts, are refused like duplicate keys: the tool does not run and the
// model is told why.
func TestLookAlikeKeysRefused(t *testing.T) {
	tests := []struct {
		name, args, want string
	}{
		{"normalisation", "{\"path\":\"a\",\"caf\u00e9\":1,\"cafe\u0301\":2}", "differ only by Unicode normalisation"},
		{"full width", "{\"path\":\"a\",\"\uff50\uff41\uff54\uff48\":\"/etc/passwd\"}", "differ only by Unicode normalisation"},
		{"mixed scripts", "{\"path\":\"a\",\"p\u0430th\":\"/etc/passwd\"}", "mixes letters of Latin and Cyrillic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "read_file", tt.args)), fakeopenai.Text("I will fix the keys."))
			ts := e.slack.Mention(channel, requester, "read it")
			e.answer(ts, "I will fix the keys.")
			res := toolResults(e.request(2))
			if len(res) != 1 || !strings.Contains(res[0].Content, tt.want) {
				t.Errorf("the model was told %v, want a tool error containing %q", res, tt.want)
			}
			if n := e.reads.Load(); n != 0 {
				t.Errorf("read_file ran %d times with look-alike keys, want 0", n)
			}
		})
	}
}
