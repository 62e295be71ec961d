package slackapp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// reminderGate holds every look for due reminders until it is opened, so
// that a test decides what happens to a call before its reminder is sent.
type reminderGate struct {
	fullStore
	open chan struct{}
	once sync.Once
}

func (g *reminderGate) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.fullStore.DueReminders(ctx, time.Now(), limit)
}

func (g *reminderGate) release() { g.once.Do(func() { close(g.open) }) }

// A reminder goes only to people who can still act on the call: not to an
// approver whose approval is counted already, nor, under four eyes, to
// the requester named among the approvers. Neither is mentioned in the
// thread, and neither gets a reminder by DM.
func TestReminderLeavesOutWhoCannotAct(t *testing.T) {
	const private = "CPRIVATE01"
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001, UREQUESTER]
      four_eyes: true
      min_approvals: 2
`
			e.reminderAfter = 200 * time.Millisecond
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
			gate := &reminderGate{open: make(chan struct{})}
			open := e.open
			e.open = func() fullStore {
				gate.fullStore = open()
				return gate
			}
			t.Cleanup(gate.release)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
			ts := e.slack.Mention(private, requester, "deploy vault 14")
			e.cardIn(private, ts, "deploy")

			copyMsg, err := e.slack.WaitMessage(e.slack.DMChannel(approver), func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
			must(t, err)
			_, err = e.slack.Click(approver, copyMsg.Channel, copyMsg.TS, slackapp.ActionApprove, "")
			must(t, err)
			waitUntil(t, "the card to count the approval", func() bool {
				for _, m := range e.cards(private, ts) {
					if strings.Contains(blocksText(m), "1 of 2 approvals") {
						return true
					}
				}
				return false
			})
			gate.release()

			reminder := e.answerIn(private, ts, "Reminder:")
			text := reminder.Text + blocksText(reminder)
			if !strings.Contains(text, "<@"+other+">") {
				t.Errorf("the reminder in the thread does not mention %s, who may still approve: %q", other, text)
			}
			for _, who := range []string{requester, approver} {
				if strings.Contains(text, "<@"+who+">") {
					t.Errorf("the reminder in the thread mentions %s, who cannot approve (any more): %q", who, text)
				}
			}
			// The reminders by DM are posted one after the other, the
			// approver's (in the rule's order) first.
			if _, err := e.slack.WaitMessage(e.slack.DMChannel(other), func(m fakeslack.Message) bool {
				return strings.Contains(m.Text+blocksText(m), "Reminder:")
			}, 10*time.Second); err != nil {
				t.Fatalf("%s, who may still approve, got no reminder by DM: %v", other, err)
			}
			for _, m := range e.slack.Messages(e.slack.DMChannel(approver)) {
				if strings.Contains(m.Text+blocksText(m), "Reminder:") {
					t.Errorf("%s, whose approval is counted, got a reminder by DM: %q", approver, m.Text)
				}
			}
		})
	}
}

// An approver taken out of the rule while the call waits (the policy
// changed, and the bot restarted with it) may no longer approve it: the
// reminder neither mentions them nor sends them a DM about a call in a
// private channel they are not in.
func TestReminderLeavesOutWhoTheRuleNoLongerNames(t *testing.T) {
	const private = "CPRIVATE01"
	e := newEnv(t, storeKinds(t)[0])
	rule := func(approvers string) string {
		return "policy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      verdict: ask\n      approvers: [" + approvers + "]\n"
	}
	e.policy = rule("UOTHER0001, UAPPROVER1")
	e.reminderAfter = 300 * time.Millisecond
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	// The first process sends no reminder; the second holds its passes
	// until the test opens them.
	open := e.open
	e.open = func() fullStore { return noReminders{open()} }
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
	ts := e.slack.Mention(private, requester, "deploy vault 14")
	e.cardIn(private, ts, "deploy")
	e.stop()

	// UOTHER0001 left the team: the policy no longer names them.
	e.policy = rule("UAPPROVER1")
	gate := &reminderGate{open: make(chan struct{}), fullStore: open()}
	t.Cleanup(gate.release)
	e.open = func() fullStore { return gate }
	e.start()
	gate.release()
	reminder := e.answerIn(private, ts, "Reminder:")
	if text := reminder.Text + blocksText(reminder); strings.Contains(text, "<@"+other+">") || !strings.Contains(text, "<@"+approver+">") {
		t.Errorf("the reminder %q; want it to name %s only, whom the rule still names", text, approver)
	}
	if _, err := e.slack.WaitMessage(e.slack.DMChannel(approver), func(m fakeslack.Message) bool {
		return strings.Contains(m.Text+blocksText(m), "Reminder:")
	}, 10*time.Second); err != nil {
		t.Fatalf("the approver got no reminder: %v", err)
	}
	e.stop() // the reminder's posts are done
	for _, m := range e.slack.Messages(e.slack.DMChannel(other)) {
		if strings.Contains(m.Text+blocksText(m), "Reminder:") {
			t.Errorf("%s, whom the rule no longer names, outside the private channel, got a reminder by DM: %q", other, m.Text)
		}
	}
}

// noReminders finds no reminder due.
type noReminders struct{ fullStore }

func (noReminders) DueReminders(context.Context, time.Time, int) ([]store.Call, error) {
	return nil, nil
}

// The reminder's text mentions only the approvers who may still approve:
// not those counted, nor, under four eyes, the requesters.
func TestReminderTextLeavesOutWhoCannotAct(t *testing.T) {
	c := slackapp.Card{
		Tool: "deploy", Requester: "UREQUESTER", Requesters: []string{"UREQUESTER", "UASKER0002"},
		Approvers: []string{"UAPPROVER1", "UOTHER0001", "UREQUESTER", "UASKER0002", "SGROUP0001"},
		FourEyes:  true, MinApprovals: 2, Approvals: []string{"UAPPROVER1"},
	}
	got := slackapp.ReminderText(c, 1)
	for _, want := range []string{"<@UOTHER0001>", "<!subteam^SGROUP0001>", "1 of 2 approvals"} {
		if !strings.Contains(got, want) {
			t.Errorf("ReminderText = %q, want %s in it", got, want)
		}
	}
	for _, not := range []string{"UAPPROVER1", "UREQUESTER", "UASKER0002"} {
		if strings.Contains(got, not) {
			t.Errorf("ReminderText = %q, want no mention of %s", got, not)
		}
	}
	c.FourEyes = false
	if got := slackapp.ReminderText(c, 1); !strings.Contains(got, "<@UREQUESTER>") {
		t.Errorf("ReminderText without four eyes = %q, want the requester named among the approvers mentioned", got)
	}
}
