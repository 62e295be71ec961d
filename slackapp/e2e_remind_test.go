package slackapp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// claimCounter counts the looks for due reminders the replicas make.
type claimCounter struct {
	fullStore
	looks atomic.Int64
}

func (c *claimCounter) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	c.looks.Add(1)
	return c.fullStore.DueReminders(ctx, now, limit)
}

// WatchLease keeps the wrapped store's lease announcements.
func (c *claimCounter) WatchLease(ctx context.Context, key string) (store.LeaseWatch, error) {
	return c.fullStore.(agent.LeaseWatcher).WatchLease(ctx, key)
}

// Two replicas on one Redis both sweep for due reminders; the approvers
// get the reminder once, in the thread, mentioning them.
func TestReminderSentOnceByTwoReplicas(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.reminderAfter = 300 * time.Millisecond
			e.cfg.SweepInterval = 20 * time.Millisecond // both replicas look often
			st := &claimCounter{fullStore: e.open()}
			bots := []*bot{e.run(st), e.run(st)}
			t.Cleanup(func() {
				for _, b := range bots {
					b.cancel()
					if err := <-b.done; err != nil {
						t.Errorf("replica stopped with %v", err)
					}
				}
			})
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed api 1."))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy")
			reminder := e.answer(ts, "Reminder:")
			text := reminder.Text + blocksText(reminder)
			for _, who := range []string{approver, other} {
				if !strings.Contains(text, "<@"+who+">") {
					t.Errorf("reminder %q does not mention %s", text, who)
				}
			}
			// Both replicas go on looking for due reminders before the
			// call is decided; none of those passes may send another.
			seen := st.looks.Load()
			waitUntil(t, "more looks for due reminders", func() bool { return st.looks.Load() >= seen+6 })
			_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 1.")
			n := 0
			for _, m := range e.slack.Thread(channel, ts) {
				if m.BotID != "" && strings.Contains(m.Text+blocksText(m), "Reminder:") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d reminders in the thread, want 1:\n%s", n, dumpThread(e.slack.Thread(channel, ts)))
			}
		})
	}
}

// Approvers who cannot see a private conversation get their reminder by
// DM, as they got the card.
func TestReminderReachesBlindApproversByDM(t *testing.T) {
	const private = "CPRIVATE01"
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.reminderAfter = 200 * time.Millisecond
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
			ts := e.slack.Mention(private, requester, "deploy vault 14")
			e.cardIn(private, ts, "deploy")
			e.answerIn(private, ts, "Reminder:")
			for _, u := range []string{approver, other} {
				m, err := e.slack.WaitMessage(e.slack.DMChannel(u), func(m fakeslack.Message) bool {
					return strings.Contains(m.Text+blocksText(m), "Reminder:")
				}, 10*time.Second)
				if err != nil {
					t.Fatalf("%s got no reminder by DM: %v", u, err)
				}
				if !strings.Contains(m.Text+blocksText(m), "<@"+u+">") {
					t.Errorf("the DM reminder to %s does not name them: %q", u, m.Text)
				}
			}
		})
	}
}

// A reminder waiting on a slow Slack holds up no expiry: the call's card
// still says it expired while the reminder's post is held.
func TestSlowReminderDoesNotHoldUpExpiry(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = ttlPolicy // expires after 1 s
	e.reminderAfter = 200 * time.Millisecond
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("It expired."))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	arrived, release := e.slack.HoldNext("chat.postMessage")
	defer release()
	<-arrived // the reminder's post, held
	// The post would give up after 10 s; the card expires 1 s after it
	// was posted.
	_, err := e.slack.WaitMessage(channel, func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Expired")
	}, 8*time.Second)
	if err != nil {
		t.Fatalf("the card did not say it expired while a reminder was held: %v", err)
	}
	release()
	e.answer(ts, "Reminder:")
}

// A reminder is not sent to the approvers' DMs once the call is decided:
// each post checks that the call is still pending.
func TestReminderStopsOnceTheCallIsDecided(t *testing.T) {
	const private = "CPRIVATE01"
	e := newEnv(t, storeKinds(t)[0])
	// Long enough for the card's copies to be out first, even on a
	// loaded machine: the reminder is the post after them.
	e.reminderAfter = 2 * time.Second
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
	ts := e.slack.Mention(private, requester, "deploy vault 14")
	e.cardIn(private, ts, "deploy")
	copyMsg, err := e.slack.WaitMessage(e.slack.DMChannel(approver), func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)
	// Every copy is out, so the next post is the reminder's.
	_, err = e.slack.WaitMessage(e.slack.DMChannel(other), func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)
	arrived, release := e.slack.HoldNext("chat.postMessage")
	defer release()
	select {
	case <-arrived: // the reminder in the thread, held
	case <-time.After(15 * time.Second):
		t.Fatal("no reminder came after the card's copies (posted before the hold was set?)")
	}
	_, err = e.slack.Click(approver, copyMsg.Channel, copyMsg.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.waitIn(private, ts, "with the card approved", func(m fakeslack.Message) bool {
		return strings.Contains(blocksText(m), "Approved by")
	})
	release() // the reminder goes on to the approvers' DMs
	e.answerIn(private, ts, "Deployed vault 14.")
	e.stop() // the reminder's work is done by then
	for _, u := range []string{approver, other} {
		for _, m := range e.slack.Messages(e.slack.DMChannel(u)) {
			if strings.Contains(m.Text+blocksText(m), "Reminder:") {
				t.Errorf("%s got a reminder by DM after the call was decided: %q", u, m.Text)
			}
		}
	}
}
