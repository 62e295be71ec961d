package slackapp_test

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// reminders counts the reminders the bot posted in the thread (the last
// one says "Last reminder:").
func (e *env) reminders(thread string) int {
	n := 0
	for _, m := range e.slack.Thread(channel, thread) {
		if m.BotID != "" && strings.Contains(strings.ToLower(m.Text+blocksText(m)), "reminder:") {
			n++
		}
	}
	return n
}

// An edit that moves a call under a rule with a shorter ttl brings its
// last reminder forward with its deadline, and the expiry timer (no sweep
// here) follows the reminder: it is sent while the call still waits,
// before the pass at the new deadline expires it.
func TestEditBringsTheLastReminderForward(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  rules:
    - {id: v2, tool: deploy, when: 'args.version == "2"', verdict: ask, approvers: [UAPPROVER1, UOTHER0001], min_approvals: 2, ttl: 4s}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1, UOTHER0001], ttl: 1h}
`
			e.reminderAfter = 300 * time.Millisecond
			e.cfg.SweepInterval = time.Hour // only the expiry timer can send it
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy").TS
			// The first reminder is sent; the timer then sleeps towards
			// the second, when a quarter of the hour is left.
			waitUntil(t, "the first reminder", func() bool { return e.reminders(ts) == 1 })

			_, err := e.slack.Click(other, channel, card, slackapp.ActionEdit, "")
			must(t, err)
			view := e.modal(other, slackapp.CallbackEdit)
			_, err = e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"2"}`}}, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+other+"> · the arguments were edited")

			// The edited call expires 4 s after the edit, and its second
			// reminder comes when a quarter of its time from the pause to
			// that deadline is left, a second or so before it. A reminder
			// is posted only while its call is pending.
			waitUntil(t, "the second reminder", func() bool { return e.reminders(ts) == 2 })
			e.waitThread(ts, "with the expired card", func(m fakeslack.Message) bool {
				return m.TS == card && strings.Contains(blocksText(m), "Expired")
			})
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times", n)
			}
		})
	}
}
