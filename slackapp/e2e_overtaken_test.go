package slackapp_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Of two replicas on one Redis, the one that counted the first of two
// approvals is slow to update the card ("1 of 2 approvals", buttons and
// all: Slack holds its chat.update) while the other counts the second,
// runs the deploy and renders the final card. The count's update lands
// last, over the final card; the replica that sent it reads the call once
// it has, finds it moved on, and renders it as stored: no buttons, the
// deploy's output shown.
func TestCountedUpdateThatLandsLastIsOvertaken(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			e.replicas(2)
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy").TS
			arrived, release := e.slack.HoldNext("chat.update")
			t.Cleanup(release)
			// Envelopes go round-robin over the two connections: the
			// clicks land on different replicas.
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the count's card update never reached Slack")
			}
			_, err = e.slack.Click(other, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed: deployed")
			final := func(m fakeslack.Message) bool {
				text := blocksText(m)
				return m.TS == card && !isCard(m) && strings.Contains(text, "2 of 2 approvals") && strings.Contains(text, "deployed")
			}
			e.waitIn(channel, ts, "the final card", final)
			updates := len(e.slack.Calls("chat.update"))
			release()
			// The count's update, then the card as stored.
			waitUntil(t, "the count's update and the card as stored", func() bool { return len(e.slack.Calls("chat.update")) >= updates+2 })
			e.waitIn(channel, ts, "the final card again", final)
			if n := len(e.cards(channel, ts)); n != 0 {
				t.Errorf("the decided call's card has its buttons back:\n%s", dumpThread(e.slack.Thread(channel, ts)))
			}
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// gatedNotes is a replica's handle on the shared store whose reads of a
// card's locations wait, once armed, until the test opens the gate: a
// slow store read on that replica.
type gatedNotes struct {
	*seenStore
	armed   chan struct{} // closed by the test to arm
	arrived chan struct{}
	gate    chan struct{}
	once    bool
}

func (s *gatedNotes) CallNote(ctx context.Context, callID string) ([]byte, error) {
	select {
	case <-s.armed:
		s.seenStore.mu.Lock()
		first := !s.once
		s.once = true
		s.seenStore.mu.Unlock()
		if first {
			close(s.arrived)
			<-s.gate
		}
	default:
	}
	return s.seenStore.CallNote(ctx, callID)
}

// Two calls in one step, two replicas: c1 is approved on y, whose read of
// where c1's card is is slow; c2 is approved on x, which resumes the step,
// runs both and renders c1's output. y's update ("runs once the other
// calls of this step are decided") lands after it; y then reads the call,
// finds its result, and renders it as stored: the output is back.
func TestDecidedUpdateThatLandsAfterTheOutputIsOvertaken(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			base := e.open()
			e.shared = base
			x := &seenStore{fullStore: base}
			y := &gatedNotes{seenStore: &seenStore{fullStore: base}, armed: make(chan struct{}), arrived: make(chan struct{}), gate: make(chan struct{})}
			var bots []*bot
			t.Cleanup(func() {
				for _, b := range bots {
					b.cancel()
					<-b.done
				}
			})
			defer func() {
				select {
				case <-y.gate:
				default:
					close(y.gate)
				}
			}()
			bots = append(bots, e.run(x))
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`), tc("c2", "deploy", `{"service":"web","version":"2"}`)), fakeopenai.Text("Both deployed."))
			ts := e.slack.Mention(channel, requester, "deploy api 1 and web 2")
			waitUntil(t, "two cards", func() bool { return len(e.cards(channel, ts)) == 2 })
			cs := e.cards(channel, ts)
			for _, c := range cs {
				waitUntil(t, "saved", func() bool { return e.saved(base, c) })
			}
			c1, c2 := cs[0], cs[1]
			if !strings.Contains(blocksText(c1), "api") {
				c1, c2 = c2, c1
			}
			bots = append(bots, e.run(y))
			if err := e.slack.WaitConnected(2, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			close(y.armed)
			e.nextEnvelopeTo(y.seenStore, x)
			_, err := e.slack.Click(approver, channel, c1.TS, slackapp.ActionApprove, "")
			must(t, err)
			<-y.arrived // y decided c1 and is reading where its card is
			e.nextEnvelopeTo(x, y.seenStore)
			_, err = e.slack.Click(approver, channel, c2.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Both deployed.")
			e.waitThread(ts, "with c1's card showing its output", func(m fakeslack.Message) bool {
				return m.TS == c1.TS && strings.Contains(blocksText(m), "deployed {")
			})
			close(y.gate)
			callID, _, _ := strings.Cut(buttonValue(t, c1, slackapp.ActionApprove), "~")
			waitUntil(t, "y's card queue idle", func() bool { return !bots[1].app.Serving("card:" + callID) })
			m, _ := e.slack.Message(channel, c1.TS)
			if text := blocksText(m); !strings.Contains(text, "deployed {") || strings.Contains(text, "runs once") {
				t.Errorf("the card of a call that ran lost its output:\n%s", text)
			}
		})
	}
}

// secretChannel is a private channel: its cards are copied to the
// approvers' DMs.
const secretChannel = "CPRIVATE01"

// threeApproversPolicy asks one of three approvers for a deploy.
const threeApproversPolicy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]
`

// dmCopiesWithButtons returns those of users whose DM copy of a card
// about service still has buttons.
func dmCopiesWithButtons(e *env, service string, users ...string) (live []string) {
	for _, u := range users {
		for _, m := range e.slack.Messages(e.slack.DMChannel(u)) {
			if strings.Contains(blocksText(m), service) && isCard(m) {
				live = append(live, u)
			}
		}
	}
	return live
}

// Two calls in one step; c1 is denied while its copies in the approvers'
// DMs are still being posted, and posting them takes longer than a card
// update may (Slack slow to open the DMs). The update gives up on the
// copies not out yet; once they are, they are rendered as the call is
// stored, the denial, not left with buttons until the step's other call
// is decided.
func TestCopiesPostedAfterTheUpdateGaveUpShowTheDecision(t *testing.T) {
	t.Cleanup(slackapp.SetCardUpdateTimeout(7 * time.Second)) // past cardWait, 5 s
	e := newEnv(t, storeKinds(t)[0])
	e.policy = threeApproversPolicy
	e.slack.AddChannel(fakeslack.Channel{ID: secretChannel, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`), tc("c2", "deploy", `{"service":"web","version":"2"}`)))
	opened1, release1 := e.slack.HoldNext("conversations.open")
	opened2, release2 := e.slack.HoldNext("conversations.open")
	t.Cleanup(release1)
	t.Cleanup(release2)
	ts := e.slack.Mention(secretChannel, requester, "deploy api 1 and web 2")
	waitUntil(t, "two cards", func() bool { return len(e.cards(secretChannel, ts)) == 2 })
	c1 := e.cards(secretChannel, ts)[0]
	if !strings.Contains(blocksText(c1), "api") {
		c1 = e.cards(secretChannel, ts)[1]
	}
	waitUntil(t, "the pause saved", func() bool { return e.saved(e.bot.st, c1) })
	callID, _, _ := strings.Cut(buttonValue(t, c1, slackapp.ActionApprove), "~")
	<-opened1
	_, err := e.slack.Click(other, secretChannel, c1.TS, slackapp.ActionDeny, "")
	must(t, err)
	e.waitIn(secretChannel, ts, "with c1 denied", func(m fakeslack.Message) bool {
		return m.TS == c1.TS && strings.Contains(blocksText(m), "Denied by")
	})
	release1()
	<-opened2 // the copies are slow to go out
	waitUntil(t, "the denial's update to give up on the copies", func() bool { return !e.bot.app.Serving("card:" + callID) })
	release2()
	waitUntil(t, "c2's copies", func() bool {
		n := 0
		for _, u := range []string{approver, stranger} {
			for _, m := range e.slack.Messages(e.slack.DMChannel(u)) {
				if strings.Contains(blocksText(m), "web") {
					n++
				}
			}
		}
		return n == 2
	})
	waitUntil(t, "c1's copies to show the denial", func() bool { return len(dmCopiesWithButtons(e, "api", approver, stranger)) == 0 })
}

// As TestCountedUpdateThatLandsLastIsOvertaken, but the call's resume
// does not run it (its tool's definition changed since the approvals):
// the final card says so, and the count's update lands over it. The
// replica that sent the count reads the call, whose resume saved why it
// did not run, and renders that: the "not run" is back, the buttons gone.
func TestCountThatLandsAfterACallNotRunIsOvertaken(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			e.replicas(2)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Not deployed."))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy").TS
			// The approved arguments no longer fit the tool: its resume
			// does not run it.
			must(t, e.reg.Replace(func(n string) bool { return n == "deploy" }, []agent.Tool{{Name: "deploy",
				Schema: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"},"region":{"type":"string"}},"required":["service","version","region"]}`),
				Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
					t.Error("deploy ran")
					return agent.Result{}, nil
				}}}))
			countLandsAfterNotRun(t, e, ts, card, "Not deployed.")
		})
	}
}

// countLandsAfterNotRun has approver's approval counted on card, in
// thread ts, its update held, and other's make it final; the call does
// not run, and the model answers answer. Once the final card says the
// call did not run, the count's update is let through: the card must end
// saying so again, its buttons gone.
func countLandsAfterNotRun(t *testing.T, e *env, ts, card, answer string) {
	t.Helper()
	arrived, release := e.slack.HoldNext("chat.update")
	t.Cleanup(release)
	_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
	must(t, err)
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the count's card update never reached Slack")
	}
	_, err = e.slack.Click(other, channel, card, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, answer)
	notRun := func(m fakeslack.Message) bool {
		return m.TS == card && !isCard(m) && strings.Contains(blocksText(m), "not run")
	}
	e.waitIn(channel, ts, "the final card saying it did not run", notRun)
	updates := len(e.slack.Calls("chat.update"))
	release()
	waitUntil(t, "the count's update and the card as stored", func() bool { return len(e.slack.Calls("chat.update")) >= updates+2 })
	e.waitIn(channel, ts, "the final card again", notRun)
	if n := len(e.cards(channel, ts)); n != 0 {
		t.Errorf("the card of the call not run has its buttons back:\n%s", dumpThread(e.slack.Thread(channel, ts)))
	}
}

// deployCards waits for the cards of the deploys of api and web in thread
// ts, and for their pause to be saved, and returns their ts.
func deployCards(t *testing.T, e *env, ts string) (api, web string) {
	t.Helper()
	waitUntil(t, "the two cards", func() bool {
		for _, m := range e.cards(channel, ts) {
			switch {
			case strings.Contains(blocksText(m), "web"):
				web = m.TS
			case strings.Contains(blocksText(m), "api"):
				api = m.TS
			}
		}
		return api != "" && web != ""
	})
	e.card(ts, "deploy") // the pause saved
	return api, web
}

// As TestCountThatLandsAfterACallNotRunIsOvertaken, for the second call
// of a step, which its resume reaches after the first ran: the
// definition of deploy changed so that the second's approved arguments
// no longer fit it. Its resume saves why it did not run as it marks it,
// and the count's replica renders that.
func TestCountThatLandsAfterALaterCallNotRunIsOvertaken(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			e.replicas(2)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`), tc("c2", "deploy", `{"service":"web","version":"1"}`)), fakeopenai.Text("Deployed api, not web."))
			ts := e.slack.Mention(channel, requester, "deploy api and web")
			api, web := deployCards(t, e, ts)
			// The api card's count is shown before its last approval, so
			// that its update lands before the decision's.
			_, err := e.slack.Click(approver, channel, api, slackapp.ActionApprove, "")
			must(t, err)
			waitUntil(t, "the api card's count", func() bool {
				return slices.ContainsFunc(e.cards(channel, ts), func(m fakeslack.Message) bool { return m.TS == api && strings.Contains(blocksText(m), "1 of 2") })
			})
			_, err = e.slack.Click(other, channel, api, slackapp.ActionApprove, "")
			must(t, err)
			waitUntil(t, "the api card decided", func() bool {
				return !slices.ContainsFunc(e.cards(channel, ts), func(m fakeslack.Message) bool { return m.TS == api })
			})
			var deploys atomic.Int64
			must(t, e.reg.Replace(func(n string) bool { return n == "deploy" }, []agent.Tool{{Name: "deploy",
				Schema: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string","enum":["api"]},"version":{"type":"string"}},"required":["service","version"]}`),
				Handler: func(_ context.Context, args json.RawMessage) (agent.Result, error) {
					if deploys.Add(1); strings.Contains(string(args), "web") {
						t.Error("deploy of web ran")
					}
					return agent.Result{Content: "deployed"}, nil
				}}}))
			countLandsAfterNotRun(t, e, ts, web, "Deployed api, not web.")
			if n := deploys.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once, for api", n)
			}
		})
	}
}

// Of two replicas, the one that counted the first of two approvals of a
// call is slow to update its card while the other counts the second and
// decides it; the step's other call still waits, so nothing runs. The
// count's update lands last, buttons and all: the replica that sent it
// reads the call, decided, and renders that, instead of leaving the
// buttons until the step's resume, hours away perhaps.
func TestCountThatLandsAfterADecisionWhoseStepWaitsIsOvertaken(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			e.replicas(2)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`), tc("c2", "deploy", `{"service":"web","version":"1"}`)))
			ts := e.slack.Mention(channel, requester, "deploy api and web")
			api, web := deployCards(t, e, ts)
			arrived, release := e.slack.HoldNext("chat.update")
			t.Cleanup(release)
			_, err := e.slack.Click(approver, channel, api, slackapp.ActionApprove, "")
			must(t, err)
			select {
			case <-arrived:
			case <-time.After(10 * time.Second):
				t.Fatal("the count's card update never reached Slack")
			}
			updates := len(e.slack.Calls("chat.update"))
			_, err = e.slack.Click(other, channel, api, slackapp.ActionApprove, "")
			must(t, err)
			apiCard := func(m fakeslack.Message) bool { return m.TS == api }
			waitUntil(t, "the decision's update", func() bool {
				return len(e.slack.Calls("chat.update")) > updates && !slices.ContainsFunc(e.cards(channel, ts), apiCard)
			})
			release()
			waitUntil(t, "the count's update, then the card as stored", func() bool {
				return len(e.slack.Calls("chat.update")) >= updates+3 && !slices.ContainsFunc(e.cards(channel, ts), apiCard)
			})
			if !slices.ContainsFunc(e.cards(channel, ts), func(m fakeslack.Message) bool { return m.TS == web }) {
				t.Errorf("the web card lost its buttons, its call still pending:\n%s", dumpThread(e.slack.Thread(channel, ts)))
			}
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times while its step waited", n)
			}
		})
	}
}
