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

// A rule naming hundreds of approvers. The notes that mention them so that
// they are notified, the reminder and the answer to a message in the paused
// thread, reach Slack (one message of them would be refused as too long)
// and mention every approver, over as many messages as that takes. Lists
// one person reads, their Home tab and the answer to their refused click,
// name the first approvers and count the rest.
func TestHundredsOfApproversAreAllMentioned(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	ids := make([]string, 900)
	for i := range ids {
		ids[i] = fmt.Sprintf("UMANY%05d", i)
	}
	e.policy = "policy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      verdict: ask\n      approvers: [" + strings.Join(ids, ", ") + "]\n"
	e.reminderAfter = 200 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(channel, requester, "deploy api 7")
	card := e.card(ts, "deploy")

	// notes returns the text of the bot's messages in the thread after the
	// first from, cards left out.
	notes := func(from int) (string, int) {
		msgs := e.slack.Thread(channel, ts)
		var b strings.Builder
		for _, m := range msgs[min(from, len(msgs)):] {
			if m.BotID != "" && !isCard(m) {
				b.WriteString(m.Text + blocksText(m) + "\n")
			}
		}
		return b.String(), len(msgs)
	}
	mentionsAll := func(text string) bool {
		for _, id := range ids {
			if !strings.Contains(text, "<@"+id+">") {
				return false
			}
		}
		return true
	}
	var seen int
	waitUntil(t, "the reminder to mention every approver", func() bool {
		var text string
		text, seen = notes(0)
		return strings.Contains(text, "Reminder:") && mentionsAll(text)
	})

	e.slack.ThreadReply(channel, ts, requester, "is it done yet?")
	waitUntil(t, "the answer to a message in the paused thread to mention every approver", func() bool {
		text, _ := notes(seen)
		return strings.Contains(text, "waiting on approval") && mentionsAll(text)
	})

	const capped = "+880 more"
	home := e.home(requester)
	if js := string(home.JSON); !strings.Contains(js, capped) || strings.Contains(js, ids[899]) {
		t.Errorf("the requester's Home tab should name the first 20 approvers and count the rest (%q):\n%s", capped, js[:min(len(js), 2000)])
	}
	_, err := e.slack.Click(stranger, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	var refusal fakeslack.Ephemeral
	waitUntil(t, "the refusal of the stranger's click", func() bool {
		for _, m := range e.slack.Ephemerals(stranger) {
			if strings.Contains(m.Text, "not an approver") {
				refusal = m
				return true
			}
		}
		return false
	})
	if !strings.Contains(refusal.Text, capped) || strings.Contains(refusal.Text, ids[899]) {
		t.Errorf("the refusal should name the first 20 approvers and count the rest (%q): %s", capped, refusal.Text[:min(len(refusal.Text), 2000)])
	}
}
