package slackapp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// twoPersonPolicy makes deploys need two of the three named approvers;
// the requester is not one of them.
const twoPersonPolicy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      reason: Deploys need two people.
      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]
      four_eyes: true
      min_approvals: 2
`

// startTwoPerson starts a bot under twoPersonPolicy with one deploy asked
// for in a new thread, and returns the thread and the card's ts.
func startTwoPerson(t *testing.T, kind storeKind, after string) (*env, string, string) {
	e := newEnv(t, kind)
	e.policy = twoPersonPolicy
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text(after))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	return e, ts, e.card(ts, "deploy").TS
}

// waitCount waits until the card in thread says text (its approvals count)
// and still has its Approve button.
func (e *env) waitCount(thread, text string) {
	e.t.Helper()
	waitUntil(e.t, "the card to say "+text, func() bool {
		for _, m := range e.cards(channel, thread) {
			if strings.Contains(blocksText(m), text) {
				return true
			}
		}
		return false
	})
}

func TestTwoApprovalsNeeded(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Deployed api 1.")
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+approver+">")
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times after one of two approvals, want 0", n)
			}
			// The second approver's App Home shows the count too.
			e.slack.OpenHome(other)
			waitUntil(t, "the Home tab shows the count", func() bool {
				home, ok := e.slack.HomeView(other)
				return ok && strings.Contains(viewText(home), "1 of 2 approvals: <@"+approver+">")
			})
			// The same person again counts once, and is told so privately.
			_, err = e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.ephemeral(approver, "already approved")
			e.restart() // the count is stored with the call
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times after the same approver clicked twice, want 0", n)
			}
			_, err = e.slack.Click(other, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 1.")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times after two approvals, want 1", n)
			}
			e.waitIn(channel, ts, "the decided card with both approvals", func(m fakeslack.Message) bool {
				text := blocksText(m)
				return strings.Contains(text, "2 of 2 approvals: <@"+approver+">, <@"+other+">") && !isCard(m)
			})
		})
	}
}

func TestTwoApproversClickAtOnce(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Deployed api 1.")
			// Both approvers press Approve on the same version of the card,
			// and each click is delivered twice.
			_, err := e.slack.ClickMany([]string{approver, other, approver, other}, channel, card, slackapp.ActionApprove)
			must(t, err)
			e.answer(ts, "Deployed api 1.")
			e.waitIn(channel, ts, "the decided card", func(m fakeslack.Message) bool {
				return strings.Contains(blocksText(m), "2 of 2 approvals") && !isCard(m)
			})
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times after two approvers clicked at once, want 1", n)
			}
		})
	}
}

func TestDenyAfterOneApproval(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Understood, not deploying.")
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals")
			_, err = e.slack.Click(other, channel, card, slackapp.ActionDeny, "")
			must(t, err)
			e.answer(ts, "Understood, not deploying.")
			e.answer(ts, "Denied by <@"+other+">")
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times after a Deny, want 0", n)
			}
		})
	}
}

func TestEditRestartsTheCount(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Deployed the edited version.")
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+approver+">")
			// Another approver edits: the approval above was of other
			// arguments, so the count starts again with the editor.
			_, err = e.slack.Click(other, channel, card, slackapp.ActionEdit, "")
			must(t, err)
			view := e.modal(other, slackapp.CallbackEdit)
			const edited = `{"service":"api","version":"1.0.1"}`
			_, err = e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: edited}}, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+other+"> · the arguments were edited")
			if text := blocksText(e.card(ts, "deploy")); !strings.Contains(text, "1.0.1") {
				t.Errorf("the live card does not show the edited arguments: %s", text)
			}
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times after an edit restarted the count, want 0", n)
			}
			_, err = e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed the edited version.")
			if args := e.deployArgs(); len(args) != 1 || args[0] != edited {
				t.Errorf("deploy ran with %q, want once with the edited %s", args, edited)
			}
		})
	}
}

// An edit that moves a call under a rule with a shorter ttl brings its
// deadline forward, and the expiry timer (no sweep here) follows it: the
// card says it expired close to the new deadline, not the card's first.
func TestEditIntoAShorterTTLExpiresOnTime(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  rules:
    - {id: v2, tool: deploy, when: 'args.version == "2"', verdict: ask, approvers: [UAPPROVER1, UOTHER0001], min_approvals: 2, ttl: 2s}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1, UOTHER0001], ttl: 1h}
`
			e.cfg.SweepInterval = time.Hour // only the expiry timer can expire it
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy").TS
			_, err := e.slack.Click(other, channel, card, slackapp.ActionEdit, "")
			must(t, err)
			view := e.modal(other, slackapp.CallbackEdit)
			_, err = e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"2"}`}}, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+other+"> · the arguments were edited")
			callID, _, _ := strings.Cut(buttonValue(t, e.card(ts, "deploy"), slackapp.ActionApprove), "~")
			c, err := e.bot.st.GetCall(t.Context(), callID)
			must(t, err)
			if left := time.Until(c.ExpiresAt); left > 2*time.Second {
				t.Fatalf("the edited call expires in %v, want at most the v2 rule's 2s", left)
			}
			e.waitThread(ts, "with the expired card", func(m fakeslack.Message) bool {
				return m.TS == card && strings.Contains(blocksText(m), "Expired")
			})
			if late := time.Since(c.ExpiresAt); late > 3*time.Second {
				t.Errorf("the card said it expired %v after the edited deadline", late)
			}
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times", n)
			}
		})
	}
}

// countHeldStore holds the answer of the first approval (ApproveBegin, or
// ApproveAudited), after its write, until release is closed; then it
// reports the first GetCall.
type countHeldStore struct {
	fullStore
	held             atomic.Bool
	written, release chan struct{}
	read             chan struct{}
	readOnce         sync.Once
}

func (s *countHeldStore) ApproveAudited(ctx context.Context, callID, fp string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, ok, err := s.fullStore.ApproveAudited(ctx, callID, fp, ap, drop, edit, need, d, fx)
	s.hold()
	return c, ok, err
}

func (s *countHeldStore) ApproveBegin(ctx context.Context, callID, fp string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, ok, rs, err := s.fullStore.ApproveBegin(ctx, callID, fp, ap, drop, edit, need, d, fx, r)
	s.hold()
	return c, ok, rs, err
}

// hold holds the first approval's answer until release is closed.
func (s *countHeldStore) hold() {
	if s.held.CompareAndSwap(false, true) {
		close(s.written)
		<-s.release
	}
}

func (s *countHeldStore) GetCall(ctx context.Context, callID string) (store.Call, error) {
	select {
	case <-s.release:
		s.readOnce.Do(func() { close(s.read) })
	default:
	}
	return s.fullStore.GetCall(ctx, callID)
}

// An approval counted whose card update comes after the call was denied
// (the two clicks' reports can come in any order) does not bring the
// card's buttons back: the denied card stays as it is.
func TestCountReportedAfterDenialLeavesCardDenied(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			held := &countHeldStore{written: make(chan struct{}), release: make(chan struct{}), read: make(chan struct{})}
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			open := e.open
			e.open = func() fullStore { held.fullStore = open(); return held }
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Understood, not deploying."))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy").TS
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			<-held.written // 1 of 2 is stored; its report waits
			_, err = e.slack.Click(other, channel, card, slackapp.ActionDeny, "")
			must(t, err)
			waitUntil(t, "the card to show the denial", func() bool { return len(e.cards(channel, ts)) == 0 })
			close(held.release) // the count is reported now, after the denial
			// The denial's resume waits behind the approval's click, which
			// holds the conversation's queue until it is done.
			e.answer(ts, "Understood, not deploying.")
			// Its update reads the call, or renders the count.
			waitUntil(t, "the count's update", func() bool {
				select {
				case <-held.read:
					return true
				default:
					return len(e.cards(channel, ts)) > 0
				}
			})
			e.stop() // and is done once the bot has stopped
			if n := len(e.cards(channel, ts)); n != 0 {
				t.Errorf("the denied call's card has its buttons back:\n%s", dumpThread(e.slack.Thread(channel, ts)))
			}
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times, want 0", n)
			}
		})
	}
}

// A call that needs two approvals is decided once: its time to decision
// is observed once, not once per approval.
func TestTimeToDecisionOncePerCall(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = twoPersonPolicy
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = slackapp.NewMetrics(reg)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed api 1."))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy").TS
	_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
	must(t, err)
	e.waitCount(ts, "1 of 2 approvals")
	_, err = e.slack.Click(other, channel, card, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 1.")
	families, err := reg.Gather()
	must(t, err)
	var n uint64
	for _, f := range families {
		if f.GetName() == "toolgate_time_to_decision_seconds" {
			n = f.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	if n != 1 {
		t.Errorf("toolgate_time_to_decision_seconds observed %d times for one call, want 1", n)
	}
}

// Three replicas on one Redis, envelopes spread over their connections,
// each call needing two approvals: both approvers click at once (a fifth
// of the first approvals sent twice), on whichever replicas get the
// clicks; each approval is counted once and every call runs exactly once,
// every thread answered.
func TestReplicasCountEachApprovalOnce(t *testing.T) {
	const conversations = 40
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = twoPersonPolicy
			e.replicas(3)
			channels := make([]string, conversations)
			threads := make([]string, conversations)
			for i := range conversations {
				channels[i] = fmt.Sprintf("CTWO%04d", i)
				e.slack.AddChannel(fakeslack.Channel{ID: channels[i], Name: fmt.Sprintf("two%d", i), Members: []string{requester, approver, other, e.slack.BotUserID()}})
				threads[i] = e.slack.Mention(channels[i], requester, fmt.Sprintf("deploy svc%d %d", i, i))
			}
			for i := range conversations {
				card := e.cardIn(channels[i], threads[i], "deploy")
				clickers := []string{approver, other}
				if i%5 == 0 {
					clickers = append(clickers, approver)
				}
				_, err := e.slack.ClickMany(clickers, channels[i], card.TS, slackapp.ActionApprove)
				must(t, err)
			}
			for i, ts := range threads {
				e.answerIn(channels[i], ts, "Deployed: deployed")
			}
			e.deployedOnceEach(conversations)
		})
	}
}
