package slackapp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// listedGate lets the first look for due reminders that lists a call read
// its listing, then holds it until released.
type listedGate struct {
	fullStore
	listed, open chan struct{}
	once, rel    sync.Once
}

func (g *listedGate) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	cs, err := g.fullStore.DueReminders(ctx, now, limit)
	if len(cs) > 0 {
		first := false
		g.once.Do(func() { first = true; close(g.listed) })
		if first {
			select {
			case <-g.open:
			case <-ctx.Done():
			}
		}
	}
	return cs, err
}

func (g *listedGate) release() { g.rel.Do(func() { close(g.open) }) }

// An approval counted after the reminder pass read the call, but before
// the reminder went out, is seen by the reminder: the approver whose
// approval is counted is not mentioned, and the count is as it stands.
func TestReminderAfterACountedApprovalLeavesTheApproverOut(t *testing.T) {
	for _, kind := range storeKinds(t)[:1] {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  default: ask
  rules:
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1, UOTHER0001], min_approvals: 2}
`
			e.reminderAfter = 200 * time.Millisecond
			gate := &listedGate{listed: make(chan struct{}), open: make(chan struct{})}
			open := e.open
			e.open = func() fullStore {
				gate.fullStore = open()
				return gate
			}
			t.Cleanup(gate.release)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
			ts := e.slack.Mention(channel, requester, "deploy vault 14")
			card := e.card(ts, "deploy")
			<-gate.listed // the pass has read the call, no approval counted
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals")
			gate.release()
			reminder := e.answer(ts, "Reminder:")
			text := reminder.Text + blocksText(reminder)
			if strings.Contains(text, "<@"+approver+">") || !strings.Contains(text, "1 of 2 approvals") {
				t.Errorf("the reminder mentions %s, whose approval was counted before it was sent, or an old count: %q", approver, text)
			}
		})
	}
}
