package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// Someone who left a private channel, whose Home tab listed a call of
// it, does not keep it there with its buttons once it is decided: their
// tab is published again as they leave (a call's change refreshes only
// the tabs of who may see it then).
func TestHomeOfWhoLeftTheChannelDropsItsCall(t *testing.T) {
	const private = "CPRIVATE77"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.cfg.HomeRefreshDelay = 20 * time.Millisecond
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, stranger, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"16"}`)), fakeopenai.Text("Deployed vault 16."))
	ts := e.slack.Mention(private, requester, "deploy vault 16")
	card := e.cardIn(private, ts, "deploy")
	waitUntil(t, "the pause's round published the member's tab", func() bool { return e.homeLists(stranger, "deploy") })
	if home := viewText(e.home(stranger)); !strings.Contains(home, "Waiting for your decision* (1)") {
		t.Fatalf("the member does not have the call in their inbox:\n%s", home)
	}
	e.slack.Leave(private, stranger)
	e.waitEventAcked("member_left_channel")

	_, err := e.slack.Click(other, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed vault 16.")
	waitUntil(t, "the requester's tab no longer lists the call", func() bool {
		v, ok := e.slack.HomeView(requester)
		return ok && strings.Contains(viewText(v), "Your requests waiting for approval* (0)")
	})
	e.stop() // every round is out by then
	if e.homeHasButtons(stranger) {
		t.Errorf("the Home tab of who left the channel still lists the decided call with its buttons (inbox count 1: %v)",
			strings.Contains(viewText(must1(e.slack.HomeView(stranger))), "Waiting for your decision* (1)"))
	}
}

// must1 is the view of HomeView.
func must1(v fakeslack.View, _ bool) fakeslack.View { return v }

// pendingFails is a store whose listing of pending calls fails while fail
// is set (a Redis blip), counting the listings it failed.
type pendingFails struct {
	fullStore
	fail   *atomic.Bool
	failed *atomic.Int32
}

func (s pendingFails) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	if s.fail.Load() {
		s.failed.Add(1)
		return nil, errors.New("connection reset by peer")
	}
	return s.fullStore.Pending(ctx, f)
}

// A Home round that cannot read the pending calls (a store failure)
// publishes nothing, rather than tabs that say nothing is waiting: a later
// round publishes them.
func TestHomeRoundThatCannotReadLeavesTheTabs(t *testing.T) {
	var fail atomic.Bool
	var failed atomic.Int32
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.HomeRefreshDelay = 20 * time.Millisecond
	open := e.open
	e.open = func() fullStore { return pendingFails{open(), &fail, &failed} }
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	e.card(ts, "deploy")
	waitUntil(t, "the approver's tab lists the call", func() bool { return e.homeHasButtons(approver) })

	fail.Store(true)
	e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"web","version":"2"}`)))
	ts2 := e.slack.Mention(channel, requester, "deploy web 2")
	e.waitIn(channel, ts2, "the second card", isCard)
	waitUntil(t, "a round fails to read the pending calls", func() bool { return failed.Load() > 0 })
	if v, _ := e.slack.HomeView(approver); !e.homeHasButtons(approver) {
		t.Errorf("with two calls waiting for them, the approver's tab says nothing is: %q", firstLines(viewText(v)))
	}
	fail.Store(false)
	waitUntil(t, "the approver's tab lists both calls once the store answers", func() bool {
		v, _ := e.slack.HomeView(approver)
		return strings.Contains(viewText(v), "Waiting for your decision* (2)")
	})
}

// firstLines is the start of a Home tab's inbox, for a failure message.
func firstLines(s string) string {
	i := strings.Index(s, "Waiting for your decision")
	if i < 0 {
		return s
	}
	return s[i : i+min(len(s)-i, 120)]
}

// The same for someone taken out of the user group a rule names, and for
// the members of a group disabled, whom Slack lists no more, so that a
// call's change no longer finds their tabs through it.
func TestHomeOfWhoLeftTheGroupDropsItsCall(t *testing.T) {
	for _, tt := range []struct {
		name  string
		leave func(e *env)
		event string
	}{
		{"taken out", func(e *env) { e.slack.AddUserGroup("SDEPLOYERS") }, "subteam_members_changed"},
		{"group disabled", func(e *env) { e.slack.DisableUserGroup("SDEPLOYERS") }, "subteam_updated"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.policy = "policy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      verdict: ask\n      approvers: [UAPPROVER1, SDEPLOYERS]\n"
			e.cfg.HomeRefreshDelay = 20 * time.Millisecond
			e.slack.AddUserGroup("SDEPLOYERS", other)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Deployed api 3."))
			ts := e.slack.Mention(channel, requester, "deploy api 3")
			card := e.card(ts, "deploy")
			waitUntil(t, "the pause's round published the member's tab", func() bool { return e.homeLists(other, "deploy") })
			if home := viewText(e.home(other)); !strings.Contains(home, "Waiting for your decision* (1)") {
				t.Fatalf("the group member does not have the call in their inbox:\n%s", home)
			}
			tt.leave(e)
			e.waitEventAcked(tt.event)

			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 3.")
			waitUntil(t, "the approver's tab no longer lists the call", func() bool {
				v, ok := e.slack.HomeView(approver)
				return ok && strings.Contains(viewText(v), "Waiting for your decision* (0)")
			})
			e.stop()
			if e.homeHasButtons(other) {
				t.Errorf("the Home tab of who left the group still lists the decided call with its buttons")
			}
		})
	}
}

// A user group renamed (Slack's subteam_updated lists its members for any
// change) publishes none of its members' Home tabs: a new call's
// approvers' tabs do not wait behind them.
func TestRenamedGroupPublishesNoHomeTabs(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      verdict: ask\n      approvers: [UAPPROVER1]\n"
	e.cfg.HomeRefreshDelay = 20 * time.Millisecond
	var members []string
	for i := range 50 {
		members = append(members, fmt.Sprintf("UBIG%05d", i))
	}
	e.slack.AddUserGroup("SALLHANDS", members...)
	e.start()
	e.slack.RenameUserGroup("SALLHANDS", "all hands (renamed)")
	e.waitEventAcked("subteam_updated")
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Deployed api 3."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	e.card(ts, "deploy")
	waitUntil(t, "the approver's tab lists the call", func() bool { return e.homeLists(approver, "deploy") })
	e.stop()
	for _, c := range e.slack.Calls("views.publish") {
		if strings.HasPrefix(c.Param("user_id"), "UBIG") {
			t.Fatalf("a rename published the Home tab of the group's member %s", c.Param("user_id"))
		}
	}
}

// Past the 500 oldest pending calls, an approver's newer call is not read
// for their Home tab; the tab must not tell them nothing is waiting.
// With more calls pending than a Home round reads (the oldest 500), an
// approver whose calls are past them is not told that nothing waits for
// them: the tab says what it read.
func TestHomeInboxPastTheCallsReadSaysSo(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	st := e.open()
	create := st.(interface {
		CreateRun(context.Context, store.Run, []store.Call) error
	}).CreateRun
	old := time.Now().Add(-time.Hour)
	for i := range 501 {
		who, at := []string{other}, old.Add(time.Duration(i)*time.Millisecond)
		if i == 500 {
			who, at = []string{approver}, time.Now()
		}
		r := store.Run{ID: store.NewRunID(), Conversation: fmt.Sprintf("%s:1.%d", channel, i), Requester: requester, Channel: channel, CreatedAt: at}
		c := store.Call{ID: store.CallID(r.ID, 0), Tool: "deploy", Args: json.RawMessage(`{}`), Fingerprint: "fp",
			Approvers: who, ExpiresAt: time.Now().Add(time.Hour)}
		must(t, create(t.Context(), r, []store.Call{c}))
	}
	must(t, st.Close())
	e.start()
	if home := viewText(e.home(approver)); strings.Contains(home, "Nothing is waiting for you") {
		t.Errorf("with a call waiting for them past the 500 oldest, the approver's tab says %q", "Nothing is waiting for you")
	}
}
