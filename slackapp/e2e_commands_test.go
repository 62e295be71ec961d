package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// slash runs /approvals text as user in the general channel and returns
// the answer's text.
func (e *env) slash(user, text string) string {
	e.t.Helper()
	ack, err := e.slack.Slash(user, channel, "/approvals", text)
	must(e.t, err)
	var reply struct {
		Text string `json:"text"`
	}
	must(e.t, json.Unmarshal(ack, &reply))
	return reply.Text
}

// viewText is a view as JSON with <, > and & unescaped.
func viewText(v fakeslack.View) string {
	return blocksText(fakeslack.Message{Blocks: v.JSON})
}

// wantIn fails the test unless text contains every one of want.
func wantIn(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, text)
		}
	}
}

// /approvals: help, pending, policy list|test|add, audit and rules
// list|revoke, with changes reserved to admins.
func TestApprovalsCommand(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.cfg.AdminUsers = []string{other}
	e.start()

	wantIn(t, "help", e.slash(requester, "help"), "/approvals pending", "policy test", "rules revoke")
	wantIn(t, "an unknown command", e.slash(requester, "frobnicate"), "I don't know that command")
	wantIn(t, "pending with nothing pending", e.slash(requester, "pending"), "Nothing is waiting")

	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"11"}`)), fakeopenai.Text("Deployed api 11."))
	ts := e.slack.Mention(channel, requester, "deploy api 11")
	card := e.card(ts, "deploy")
	wantIn(t, "pending", e.slash(stranger, "pending"), "1 call(s) waiting", "`deploy` requested by <@"+requester+">", "rule `deploys`")

	wantIn(t, "policy list", e.slash(stranger, "policy list"), "`reads`", "`no-drop`", "`deploys`")
	test := e.slash(stranger, `policy test deploy {"service":"a","version":"1"}`)
	wantIn(t, "policy test", test, "*ask* by rule `deploys`", "Deploys need review.", "Nothing was run.")
	wantIn(t, "policy test of a denied tool", e.slash(stranger, `policy test drop_db {}`), "*deny* by rule `no-drop`")
	wantIn(t, "policy test with bad arguments", e.slash(stranger, `policy test deploy {"service":"a"}`), "refused before the policy")
	// Judged with the schema's defaults, as the model's calls are.
	must(t, e.reg.Register(agent.Tool{Name: "scale", Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{}, nil },
		Schema: json.RawMessage(`{"type":"object","properties":{"d":{"type":"string"},"namespace":{"type":"string","default":"production"}}}`)}))
	wantIn(t, "policy test with defaults", e.slash(stranger, `policy test scale {"d":"api"}`), "`{\"d\":\"api\",\"namespace\":\"production\"}`")
	wantIn(t, "policy test with long arguments", e.slash(stranger, `policy test deploy {"service":"`+strings.Repeat("a", 30000)+`","version":"1"}`), "…", "*ask* by rule `deploys`", "Nothing was run.")
	// Characters that grow when escaped (as Slack sends < in a command).
	wantIn(t, "policy test with long escaped arguments", e.slash(stranger, `policy test deploy {"service":"`+strings.Repeat("&lt;", 2000)+`","version":"1"}`), "…", "*ask* by rule `deploys`", "Nothing was run.")

	// Always allow here makes a standing rule, listed and revocable by admins.
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answer(ts, "Deployed api 11.")
	rules := e.slash(stranger, "rules list")
	m := regexp.MustCompile("• `([^`]+)`: `deploy` allowed, by <@" + approver + ">").FindStringSubmatch(rules)
	if m == nil {
		t.Fatalf("rules list does not show the standing rule:\n%s", rules)
	}
	wantIn(t, "rules revoke by someone who is neither its creator nor an admin", e.slash(stranger, "rules revoke "+m[1]), "or an admin can revoke it", "Nothing changed")
	wantIn(t, "rules revoke by an admin", e.slash(other, "rules revoke "+m[1]), "Revoked standing rule `"+m[1]+"`")
	wantIn(t, "rules list after the revoke", e.slash(stranger, "rules list"), "No standing rules")

	wantIn(t, "audit by a non-admin", e.slash(stranger, "audit"), "Only admins can read the audit log")
	audit := e.audit(other, "`execute`")
	wantIn(t, "audit", audit, "`decide` · by <@"+approver+"> · tool `deploy`", "`execute` · by <@"+approver+"> · tool `deploy`")

	// Policy changes are for admins. The file is a floor: an added allow
	// rule changes nothing where a file rule is stricter, and says so; an
	// added deny tightens.
	wantIn(t, "policy add by a non-admin", e.slash(requester, "policy add tool=deploy verdict=allow"), "Only admins", "Nothing changed")
	if list := e.slash(stranger, "policy list"); strings.Count(list, "\n") != 4 {
		t.Errorf("a refused policy add changed the rules:\n%s", list)
	}
	wantIn(t, "policy add by an admin", e.slash(other, "policy add tool=deploy verdict=allow id=deploy-ok"),
		"Added runtime rule `deploy-ok`", "no effect where the stricter file rule `deploys` (ask) applies")
	wantIn(t, "policy test after the add", e.slash(stranger, `policy test deploy {"service":"a","version":"1"}`), "*ask* by rule `deploys`")
	wantIn(t, "policy add of a glob", e.slash(other, "policy add tool=* verdict=allow id=open"),
		"the stricter file rule `no-drop` (deny), `deploys` (ask) wins where both match",
		"where no file rule matches a call, this rule decides it instead of the file's default (ask)")
	wantIn(t, "policy test of the denied tool", e.slash(stranger, `policy test drop_db {}`), "*deny* by rule `no-drop`")
	wantIn(t, "policy list with runtime rules", e.slash(stranger, "policy list"),
		"the stricter of the two wins", "`open` [runtime] `tool=* verdict=allow`", "`deploys` [file]")
	wantIn(t, "policy remove of a file rule", e.slash(other, "policy remove no-drop"), "is in the policy file", "Nothing changed")
	wantIn(t, "policy add of a deny", e.slash(other, "policy add tool=deploy verdict=deny id=freeze reason=frozen"), "Added runtime rule `freeze`")
	wantIn(t, "policy test after the deny", e.slash(stranger, `policy test deploy {"service":"a","version":"1"}`), "*deny* by rule `freeze`")
	e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"api","version":"12"}`)), fakeopenai.Text("The deploy is frozen."))
	ts2 := e.slack.Mention(channel, requester, "deploy api 12")
	e.answer(ts2, "The deploy is frozen.")
	if cards := e.cards(channel, ts2); len(cards) != 0 {
		t.Errorf("a deploy asked although an admin denied it:\n%s", dumpThread(cards))
	}
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	wantIn(t, "policy remove by an admin", e.slash(other, "policy remove deploy-ok"), "Removed rule `deploy-ok`")
	wantIn(t, "audit after the policy change", e.slash(other, "audit 50"), "deploy-ok")
	// A newer runtime rule comes first: one looser than an older runtime
	// rule it may overlap says so when it is added.
	wantIn(t, "policy add of an ask over the freeze", e.slash(other, "policy add tool=* verdict=ask id=review-all"),
		"Added runtime rule `review-all`", "stricter older runtime rule `freeze` (deny) both match, this one decides", "/approvals policy remove review-all")
	if got := e.slash(other, "policy add tool=read_* verdict=deny id=no-reads"); strings.Contains(got, "Careful") {
		t.Errorf("a stricter rule was said to loosen older ones: %s", got)
	}
	// A rule no tool of the bot is named like (a typo) says so; one that
	// matches a tool does not.
	wantIn(t, "policy add of a typo", e.slash(other, "policy add tool=deplyo verdict=deny id=typo"),
		"Added runtime rule `typo`", "none of the", "is named like `deplyo`")
	if got := e.slash(other, "policy add tool=dep* verdict=deny id=deny-deploys"); strings.Contains(got, "is named like") {
		t.Errorf("a rule matching a tool was said to match none: %s", got)
	}
	// A newer ask over an older ask that needs more (two people, four
	// eyes, named approvers) decides in its place: it says what it drops.
	wantIn(t, "policy add of a two-person ask", e.slash(other, "policy add tool=restart verdict=ask approvers=UAPPROVER1,UOTHER0001 four_eyes=true min_approvals=2 id=two-person"), "Added runtime rule `two-person`")
	wantIn(t, "policy add of a plain ask over it", e.slash(other, "policy add tool=restart verdict=ask ttl=30m id=shorter-wait"),
		"*Careful:*", "`two-person` (ask, with four eyes, 2 approvals, its approvers)", "/approvals policy remove shorter-wait")
	if got := e.slash(other, "policy add tool=restart verdict=ask approvers=UAPPROVER1 four_eyes=true min_approvals=3 id=stricter"); strings.Contains(got, "Careful") {
		t.Errorf("an ask needing as much as the older ones was said to loosen them: %s", got)
	}
	// A runtime ask's approvers give way to a file ask's that names
	// some: it says so.
	wantIn(t, "policy add of approvers over the file's", e.slash(other, "policy add tool=deploy verdict=ask approvers=USTRANGER1 id=oncall"),
		"Note: where the file rule `deploys` asks too, its approvers decide the call, not this rule's")
	if got := e.slash(other, "policy add tool=restart verdict=ask approvers=UAPPROVER1 id=restarts"); strings.Contains(got, "its approvers decide") {
		t.Errorf("a rule no file ask with approvers matches was said to give way to one: %s", got)
	}
}

// App Home lists the pending call in the approver's inbox; Approve there
// decides it.
func TestAppHomeApprove(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"13"}`)), fakeopenai.Text("Deployed from the Home tab."))
	ts := e.slack.Mention(channel, requester, "deploy api 13")
	card := e.card(ts, "deploy")

	e.slack.OpenHome(approver)
	var home fakeslack.View
	waitUntil(t, "the approver's Home tab is published", func() bool {
		var ok bool
		home, ok = e.slack.HomeView(approver)
		return ok
	})
	wantIn(t, "the Home tab", viewText(home), "Waiting for your decision* (1)", "deploy", `"action_id":"approve"`, "<@"+requester+">")
	// The requester sees the call among their own requests, not to decide.
	e.slack.OpenHome(requester)
	waitUntil(t, "the requester's Home tab is published", func() bool {
		_, ok := e.slack.HomeView(requester)
		return ok
	})
	mine, _ := e.slack.HomeView(requester)
	wantIn(t, "the requester's Home tab", viewText(mine), "Waiting for your decision* (0)", "Your requests waiting for approval* (1)")

	_, err := e.slack.ClickInView(approver, home.ID, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed from the Home tab.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	updated, _ := e.slack.Message(channel, card.TS)
	wantIn(t, "the card in the thread", blocksText(updated), "Approved by <@"+approver+">")
}

// Approvers who cannot see a private channel get a copy of the card, as a
// DM or in the approvals channel; a decision on a copy updates every copy.
func TestCardCopiesForBlindApprovers(t *testing.T) {
	const private = "CPRIVATE01"
	const approvalsChannel = "CAPPROVALS"
	for _, where := range []string{"dm", "approvals channel"} {
		t.Run(where, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
			if where != "dm" {
				e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: []string{approver, other, e.slack.BotUserID()}})
				e.cfg.ApprovalsChannel = approvalsChannel
			}
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("Deployed vault 14."))
			ts := e.slack.Mention(private, requester, "deploy vault 14")
			card := e.cardIn(private, ts, "deploy")

			copyIn := func(ch string) fakeslack.Message {
				t.Helper()
				m, err := e.slack.WaitMessage(ch, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
				if err != nil {
					t.Fatalf("no copy of the card in %s: %v", ch, err)
				}
				return m
			}
			var copies []fakeslack.Message
			if where == "dm" {
				for _, u := range []string{approver, other} {
					copies = append(copies, copyIn(e.slack.DMChannel(u)))
				}
				if n := len(e.slack.Messages(approvalsChannel)); n != 0 {
					t.Errorf("%d messages in the approvals channel, which is not configured", n)
				}
			} else {
				copies = append(copies, copyIn(approvalsChannel))
			}
			if buttonValue(t, copies[0], slackapp.ActionApprove) != buttonValue(t, card, slackapp.ActionApprove) {
				t.Error("the copy's buttons act on another call than the thread's card")
			}

			_, err := e.slack.Click(approver, copies[0].Channel, copies[0].TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answerIn(private, ts, "Deployed vault 14.")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
			for _, c := range append(copies, card) {
				waitUntil(t, "the copy in "+c.Channel+" is updated", func() bool {
					m, _ := e.slack.Message(c.Channel, c.TS)
					return !isCard(m) && strings.Contains(blocksText(m), "Approved by <@"+approver+">")
				})
			}
			if where != "dm" {
				e.stop() // every copy that would be posted is posted by then
				if n := len(e.slack.Messages(approvalsChannel)); n != 1 {
					t.Errorf("%d messages in the approvals channel, want one copy", n)
				}
				for _, u := range []string{approver, other} {
					if msgs := e.slack.Messages(e.slack.DMChannel(u)); len(msgs) != 0 {
						t.Errorf("%s got a DM although an approvals channel is set: %q", u, msgs[0].Text)
					}
				}
			}
		})
	}
}

// A copy of a card that is still being posted when a decision's update
// gives up waiting for it (cardWait) is updated once it is out: no copy
// keeps the buttons of a decided call. The step has two calls and only
// the first is decided (denied, its card's last update), so nothing else
// updates its card afterwards.
func TestLateCardCopyIsUpdated(t *testing.T) {
	const private = "CPRIVATE01"
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.start()
	// Posted in this order: the two cards in the thread, then the first
	// call's copies (to each approver), then the second's. The first
	// call's second copy is held.
	var releases []func()
	for range 4 {
		_, release := e.slack.HoldNext("chat.postMessage")
		releases = append(releases, release)
	}
	for _, release := range releases[:3] {
		release()
	}
	t.Cleanup(releases[3])
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`), tc("c2", "deploy", `{"service":"vault","version":"15"}`)))
	ts := e.slack.Mention(private, requester, "deploy vault 14 and 15")
	var card fakeslack.Message // the first call's, posted first
	waitUntil(t, "both cards are in the thread", func() bool {
		var cards []fakeslack.Message
		for _, m := range e.slack.Thread(private, ts) {
			if isCard(m) {
				cards = append(cards, m)
			}
		}
		if len(cards) == 2 {
			card = cards[0]
		}
		return len(cards) == 2
	})
	token := buttonValue(t, card, slackapp.ActionApprove)
	copyOf := func(m fakeslack.Message) bool {
		return isCard(m) && buttonValue(t, m, slackapp.ActionApprove) == token
	}
	var first fakeslack.Message
	waitUntil(t, "the first copy is out", func() bool {
		for _, u := range []string{approver, other} {
			for _, m := range e.slack.Messages(e.slack.DMChannel(u)) {
				if copyOf(m) {
					first = m
					return true
				}
			}
		}
		return false
	})
	clicker, late := approver, e.slack.DMChannel(other)
	if first.Channel != e.slack.DMChannel(approver) {
		clicker, late = other, e.slack.DMChannel(approver)
	}
	_, err := e.slack.Click(clicker, first.Channel, first.TS, slackapp.ActionDeny, "")
	must(t, err)
	waitUntil(t, "the thread's card is updated, the second copy still held", func() bool {
		m, _ := e.slack.Message(private, card.TS)
		return strings.Contains(blocksText(m), "Denied by")
	})
	releases[3]()
	waitUntil(t, "the late copy is updated", func() bool {
		for _, m := range e.slack.Messages(late) {
			if !isCard(m) && strings.Contains(blocksText(m), "Denied by") {
				return true
			}
		}
		return false
	})
	for _, m := range e.slack.Messages(late) {
		if copyOf(m) {
			t.Errorf("a copy of the denied call keeps its buttons: %s", m.TS)
		}
	}
}

// rejectInPrivate has asker ask for a deploy in the private channel ch,
// and the approver reject it with a reason meant for the channel only,
// which it returns once the thread is answered.
func (e *env) rejectInPrivate(ch, asker string) string {
	e.t.Helper()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"payroll","version":"1"}`)), fakeopenai.Text("No deploy."))
	ts := e.slack.Mention(ch, asker, "deploy payroll 1")
	card := e.cardIn(ch, ts, "deploy")
	_, err := e.slack.Click(approver, ch, card.TS, slackapp.ActionReject, "")
	must(e.t, err)
	view := e.modal(approver, slackapp.CallbackReject)
	const reason = "PRIVATE: the layoffs list is not final"
	_, err = e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: reason},
	}, "")
	must(e.t, err)
	e.answerIn(ch, ts, "No deploy.")
	return reason
}

// The audit log shows an admin only what they may see of calls: entries of
// conversations they are in or calls they decided, never a private
// conversation's reasons or where it is; policy changes are for every
// admin.
func TestAuditShowsAdminsOnlyConversationsTheySee(t *testing.T) {
	const private = "CPRIVATE07"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.cfg.AdminUsers = []string{other, approver, stranger}
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	e.start()
	reason := e.rejectInPrivate(private, requester)
	wantIn(t, "policy add", e.slash(stranger, "policy add tool=deploy verdict=deny id=freeze reason=frozen"), "Added runtime rule `freeze`")

	// The approver is in the conversation and decided the call: all of it.
	wantIn(t, "the audit of an admin in the conversation", e.audit(approver, "PRIVATE"), "<#"+private+">", reason, "freeze")
	// The requester's mention was answered, not decided, by the other
	// admin; they see the policy change and no more.
	audit := e.slash(other, "audit")
	wantIn(t, "the audit of an admin outside the conversation", audit, "freeze", "about conversations you are not part of", "are left out")
	if strings.Contains(audit, private) || strings.Contains(audit, "PRIVATE") || strings.Contains(audit, "`decide`") {
		t.Errorf("an admin outside the private conversation reads its entries:\n%s", audit)
	}
}

// An admin who only asked for a call, in a private conversation they have
// left since, does not read the entries of others about it: asking is not
// deciding, and the reviewer's reason stays in the conversation.
func TestAuditShowsARequesterWhoLeftNoDecisionsOfOthers(t *testing.T) {
	const private = "CPRIVATE77"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.cfg.AdminUsers = []string{stranger}
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{stranger, approver, e.slack.BotUserID()}})
	e.start()
	e.rejectInPrivate(private, stranger)
	e.slack.Leave(private, stranger)
	e.restart() // a process that has not seen the stranger in the channel

	audit := e.slash(stranger, "audit")
	if strings.Contains(audit, "layoffs") || strings.Contains(audit, "`decide`") || strings.Contains(audit, "<@"+approver+">") {
		t.Errorf("an admin who only asked for the call reads the decision of another on it:\n%s", audit)
	}
	wantIn(t, "the audit of the admin who asked", audit, "`request` · by <@"+stranger+">", "are left out")
}

// A call the model names with an id it also gave a call in another
// conversation (ids are only the model's own within one) does not show an
// admin who made one of them the other's entries.
func TestAuditKeepsCallsOfTheSameIdApart(t *testing.T) {
	const private = "CPRIVATE09"
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "drop_db", `{"name":"scratch"}`)), fakeopenai.Text("Not dropped."))
	ts := e.slack.Mention(channel, other, "drop scratch")
	e.answerIn(channel, ts, "Not dropped.")
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "drop_db", `{"name":"PRIVATE-payroll"}`)), fakeopenai.Text("Not dropped either."))
	ts = e.slack.Mention(private, requester, "drop payroll")
	e.answerIn(private, ts, "Not dropped either.")

	// The private call's entry is written with its turn, after its
	// answer shows: read once it is.
	audit := e.audit(other, "about conversations you are not part of")
	wantIn(t, "the audit of the admin who made the public call", audit, "<#"+channel+">")
	if strings.Contains(audit, private) {
		t.Errorf("an admin outside the private conversation reads its entries through a call id of their own:\n%s", audit)
	}
}

// The admins and owners of the bot's workspace may change the policy
// without being listed in ADMIN_USERS; an admin of another organisation met
// in a shared channel, or a deactivated admin, may not.
func TestWorkspaceAdminsOnlyOfThisWorkspace(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddUser(fakeslack.User{ID: "UWSADMIN1", Name: "ws-admin", IsAdmin: true})
	e.slack.AddUser(fakeslack.User{ID: "UEXTADMIN", Name: "partner-admin", IsAdmin: true, TeamID: "T0PARTNER1"})
	e.slack.AddUser(fakeslack.User{ID: "UGONEOWNR", Name: "former-owner", IsOwner: true, Deleted: true})
	e.start()
	wantIn(t, "a workspace admin", e.slash("UWSADMIN1", "policy add tool=deploy verdict=deny id=freeze reason=frozen"), "Added runtime rule `freeze`")
	for _, user := range []string{"UEXTADMIN", "UGONEOWNR"} {
		wantIn(t, user, e.slash(user, "policy add tool=deploy verdict=deny id=freeze2 reason=frozen"), "Only admins can change the policy")
		wantIn(t, user+" reading the audit log", e.slash(user, "audit"), "Only admins can read the audit log")
	}
}

// A standing rule made in a private conversation, and its revocation,
// are audited with its channel: an admin outside the conversation does
// not learn from the audit log where it is.
func TestAuditShowsStandingRulesOnlyWhereTheirChannelIsSeen(t *testing.T) {
	const private = "CPRIVATE08"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.cfg.AdminUsers = []string{other, approver}
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"payroll","version":"1"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(private, requester, "deploy payroll 1")
	card := e.cardIn(private, ts, "deploy")
	_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed.")
	audit := e.audit(approver, "`standing_add`")
	id := regexp.MustCompile(`id=(sr-[0-9a-f]+)`).FindStringSubmatch(audit)
	if id == nil {
		t.Fatalf("no standing rule id in the audit log:\n%s", audit)
	}
	wantIn(t, "revoke", e.slash(approver, "rules revoke "+id[1]), id[1])
	wantIn(t, "the audit of an admin in the conversation", e.audit(approver, "`standing_revoke`"), "`standing_add`", "<#"+private+">")

	audit = e.slash(other, "audit")
	if strings.Contains(audit, private) || strings.Contains(audit, "standing_") {
		t.Errorf("an admin outside the private conversation reads where its standing rule is:\n%s", audit)
	}
}

// policy test takes the tool and its JSON arguments apart at any space (a
// line break, a tab), and reads JSON whose quotes Slack's clients made
// typographic as policy add reads a rule; valid JSON is taken as typed.
func TestPolicyTestReadsArgumentsAsTyped(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	for _, tt := range []struct {
		name, text, shown string
	}{
		{"a line break", "policy test deploy\n{\"service\":\"a\",\"version\":\"1\"}", `{"service":"a","version":"1"}`},
		{"a tab", "policy test deploy\t{\"service\":\"a\",\"version\":\"1\"}", `{"service":"a","version":"1"}`},
		{"typographic quotes", "policy test deploy {“service”:“a”,“version”:“1”}", `{"service":"a","version":"1"}`},
		{"typographic quotes in valid JSON", `policy test deploy {"service":"‘a’ “b”","version":"1"}`, `{"service":"‘a’ “b”","version":"1"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantIn(t, fmt.Sprintf("%q", tt.text), e.slash(stranger, tt.text), "`deploy` `"+tt.shown+"` → *ask* by rule `deploys`", "Nothing was run.")
		})
	}
}

// slashPages follows the pages of user's answer to first, a subcommand of
// /approvals, by the command each names for the next, and returns them.
func slashPages(t *testing.T, e *env, user, first string) []string {
	t.Helper()
	var out []string
	next := regexp.MustCompile("`/approvals ([^`]+)` shows the next page")
	for cmd := first; cmd != ""; {
		page := e.slash(user, cmd)
		if n := utf8.RuneCountInString(page); n > 3900 {
			t.Errorf("%s: the answer is %d characters long", cmd, n)
		}
		out = append(out, page)
		cmd = ""
		if m := next.FindStringSubmatch(page); m != nil {
			cmd = m[1]
		}
		if len(out) > 20 {
			t.Fatalf("%s: more than 20 pages", first)
		}
	}
	return out
}

// The calls waiting in a channel, with names as long as MCP tools and
// rule ids have, are listed a page at a time, each whole: together the
// pages list every call once.
func TestPendingCallsArePaged(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	tool := "github__create_or_update_repository_deployment_environment"
	rule := "production-deployments-need-a-second-sre-approval-rule"
	must(t, e.reg.Register(agent.Tool{Name: tool, Schema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{Content: "ok"}, nil }}))
	e.policy = "policy:\n  default: ask\n  rules:\n    - id: " + rule + "\n      tool: " + tool + "\n      verdict: ask\n      approvers: [UAPPROVER1]\n"
	e.start()
	const n = 24
	var calls []fakeopenai.ToolCall
	for i := range n {
		calls = append(calls, tc(fmt.Sprintf("c%d", i), tool, fmt.Sprintf(`{"n":%d}`, i)))
	}
	e.model.Reply(fakeopenai.ToolCalls(calls...), fakeopenai.Text("done"))
	e.slack.Mention(channel, requester, "do it")
	// The cards are posted before the pause is saved.
	waitUntil(t, "the pause saved", func() bool {
		return strings.Contains(e.slash(requester, "pending"), fmt.Sprintf("%d call(s) waiting", n))
	})
	list := slashPages(t, e, requester, "pending")
	if len(list) < 2 {
		t.Fatalf("%d calls with long names on one page:\n%s", n, list[0])
	}
	wantIn(t, "the first page", list[0], fmt.Sprintf("%d call(s) waiting", n), "Page 1 of", "more not shown")
	whole := "• `" + tool + "` requested by <@" + requester + ">, rule `" + rule + "`, expires <!date^"
	if got := strings.Count(strings.Join(list, "\n"), whole); got != n {
		t.Errorf("the pages list %d calls whole, want %d", got, n)
	}
	wantIn(t, "a page past the last", e.slash(requester, fmt.Sprintf("pending %d", len(list)+1)), "There is no page")
}

// A policy list or an audit too long for one answer is shown a page at a
// time, each page of whole entries within Slack's bounds and saying how
// many are left and the command that shows the next page; together the
// pages show every entry once.
func TestLongListsArePaged(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	const rules = 60
	for i := range rules {
		got := e.slash(other, fmt.Sprintf(`policy add tool=svc%02d__deploy_* verdict=ask id=rule%02d when='args.env == "prod"' approvers=UAPPROVER reason="Production deploys of service %02d need review"`, i, i, i))
		wantIn(t, "policy add", got, "Added runtime rule")
	}
	pages := func(t *testing.T, first string) []string { return slashPages(t, e, other, first) }

	t.Run("policy list", func(t *testing.T) {
		list := pages(t, "policy list")
		if len(list) < 2 {
			t.Fatalf("policy list of %d rules is on one page:\n%s", rules, list[0])
		}
		wantIn(t, "the first page of policy list", list[0], "Page 1 of", "more not shown")
		all := strings.Join(list, "\n")
		for i := range rules {
			whole := fmt.Sprintf("`rule%02d` [runtime] `tool=svc%02d__deploy_* verdict=ask when='args.env == \"prod\"' approvers=UAPPROVER reason='Production deploys of service %02d need review'`", i, i, i)
			if n := strings.Count(all, whole); n != 1 {
				t.Errorf("policy list shows rule%02d whole %d times, want once", i, n)
			}
		}
		wantIn(t, "a page past the last", e.slash(other, fmt.Sprintf("policy list %d", len(list)+1)), "There is no page")
		wantIn(t, "a page that is no number", e.slash(other, "policy list two"), "is not a page number")
	})
	t.Run("audit", func(t *testing.T) {
		audit := pages(t, "audit 100")
		if len(audit) < 2 {
			t.Fatalf("audit 100 of %d entries is on one page:\n%s", rules, audit[0])
		}
		added := regexp.MustCompile("^• .* · `policy_add` · .* · tool `(svc[0-9]+)__deploy_\\*` · outcome `ok` · `.*`$")
		shown := map[string]int{}
		for _, page := range audit {
			for _, line := range strings.Split(page, "\n") {
				if m := added.FindStringSubmatch(line); m != nil {
					shown[m[1]]++
				}
			}
		}
		for i := range rules {
			if svc := fmt.Sprintf("svc%02d", i); shown[svc] != 1 {
				t.Errorf("audit 100 shows the whole entry of the rule for %s %d times, want once", svc, shown[svc])
			}
		}
		wantIn(t, "a page past the last", e.slash(other, fmt.Sprintf("audit 100 %d", len(audit)+1)), "There is no page")
		wantIn(t, "a page that is no number", e.slash(other, "audit 100 0"), "is not a page number")
	})
	t.Run("rules list", func(t *testing.T) {
		const standing = 40
		engine := approvals.NewEngine(nil, e.bot.st)
		ids := make([]string, standing)
		for i := range standing {
			r, err := engine.Remember(t.Context(), requester, approvals.StandingRule{
				Tool: fmt.Sprintf("svc%02d__deploy", i), Channel: channel, When: `args.env == "staging" && args.version.startsWith("1.")`,
				ExpiresAt: time.Now().Add(time.Hour),
			})
			must(t, err)
			ids[i] = r.ID
		}
		list := pages(t, "rules list")
		if len(list) < 2 {
			t.Fatalf("rules list of %d rules is on one page:\n%s", standing, list[0])
		}
		all := strings.Join(list, "\n")
		for i, id := range ids {
			if n := strings.Count(all, "`"+id+"`"); n != 1 {
				t.Errorf("rules list shows the rule of svc%02d %d times, want once", i, n)
			}
		}
		wantIn(t, "a page past the last", e.slash(other, fmt.Sprintf("rules list %d", len(list)+1)), "There is no page")
		wantIn(t, "a page that is no number", e.slash(other, "rules list two"), "is not a page number")
	})
}

// At start the bot says, as an error, when it is not a member of
// APPROVALS_CHANNEL, where it could post no card; a channel it is in, or
// none, says nothing.
func TestApprovalsChannelMembershipIsChecked(t *testing.T) {
	for _, tt := range []struct {
		name     string
		members  []string
		archived bool
		want     string
	}{
		{"not a member", []string{approver}, false, "not a member of APPROVALS_CHANNEL"},
		{"a member", []string{approver, "bot"}, false, ""},
		{"archived", []string{approver, "bot"}, true, "APPROVALS_CHANNEL is archived"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			members := tt.members
			if slices.Contains(members, "bot") {
				members = append(slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == "bot" }), e.slack.BotUserID())
			}
			e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: members, Archived: tt.archived})
			e.cfg.ApprovalsChannel = approvalsChannel
			logs := &syncBuffer{}
			e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			e.start()
			waitUntil(t, "the bot is connected", func() bool { return strings.Contains(logs.String(), "connected to slack") })
			e.stop()
			for _, said := range []string{"not a member of APPROVALS_CHANNEL", "APPROVALS_CHANNEL is archived"} {
				if got := strings.Contains(logs.String(), said); got != (said == tt.want) {
					t.Errorf("logged %q: %v, want %v; logs:\n%s", said, got, said == tt.want, logs)
				}
			}
		})
	}
}

// The audit log writes out hidden characters in what the model's server
// chose (a call's id) and what a person wrote (a reason), as the cards do:
// U+202E reversed the rest of the entry's line as Slack shows it.
func TestAuditWritesOutHiddenCharacters(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("call_1\u202e", "read_file", `{"path":"README.md"}`)), fakeopenai.Text("Read it."))
	ts := e.slack.Mention(channel, requester, "read the readme")
	e.answer(ts, "Read it.")
	audit := e.audit(other, "call `call_1")
	if strings.Contains(audit, "\u202e") || !strings.Contains(audit, "call_1⟦U+202E⟧") {
		t.Errorf("the audit log does not write out U+202E as ⟦U+202E⟧:\n%q", audit)
	}
}

// Placeholders in the command's help and usage answers are written as
// entities: a raw <glob> is a link to Slack, which shows "glob" alone.
func TestCommandAnswersHoldNoRawAngleBrackets(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	raw := regexp.MustCompile(`<[^@!#][^>]*>`)
	for _, cmd := range []string{"help", "policy remove", "rules revoke", "policy test"} {
		text := e.slash(other, cmd)
		if m := raw.FindString(text); m != "" {
			t.Errorf("/approvals %s answers %q, which Slack reads as a link:\n%s", cmd, m, text)
		}
		if !strings.Contains(text, "&lt;") {
			t.Errorf("/approvals %s: no placeholder written as an entity:\n%s", cmd, text)
		}
	}
}

// A rule added whose calls expire before their first reminder says so:
// its approvers would never be reminded.
func TestPolicyAddNotesARuleThatNeverReminds(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	wantIn(t, "policy add of an ask that expires first", e.slash(other, "policy add tool=deploy verdict=ask id=quiet ttl=30m remind_after=1h"),
		"Added runtime rule `quiet`", "never reminds its approvers: its calls expire after 30m (its ttl)")
	if got := e.slash(other, "policy add tool=deploy verdict=ask id=loud ttl=2h remind_after=1h"); strings.Contains(got, "never reminds") {
		t.Errorf("policy add of an ask reminded before it expires said: %s", got)
	}
}

// Revoking one of two standing rules for a tool in a channel (two
// approvers' Always allow at the same moment, or rules for other
// arguments) does not say the tool asks again: the other still allows it,
// and is named; revoking the last says it asks again.
func TestRevokeNamesTheRulesThatStillAllow(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	engine := approvals.NewEngine(nil, e.bot.st)
	var ids []string
	for _, maker := range []string{approver, other} {
		r, err := engine.Remember(t.Context(), maker, approvals.StandingRule{Tool: "deploy", Channel: channel, RuleID: "deploys"})
		must(t, err)
		ids = append(ids, r.ID)
	}
	first := e.slash(approver, "rules revoke "+ids[0])
	wantIn(t, "the first revoke", first, "Revoked standing rule `"+ids[0]+"`", "may still be allowed by standing rule `"+ids[1]+"`")
	if strings.Contains(first, "asks again.") {
		t.Errorf("the first revoke says the tool asks again: %s", first)
	}
	wantIn(t, "the last revoke", e.slash(other, "rules revoke "+ids[1]), "Revoked standing rule `"+ids[1]+"`: `deploy` in <#"+channel+"> asks again.")
}

// lostRuleAnswers makes puts and deletes of policy rules, then loses
// their answers, as a Redis reply that misses the command's deadline does;
// with blind set, reading the rules fails once one is lost.
type lostRuleAnswers struct {
	fullStore
	blind bool
	lost  atomic.Bool
}

func (s *lostRuleAnswers) PutRecord(ctx context.Context, r store.Record, v int64) (store.Record, error) {
	out, err := s.fullStore.PutRecord(ctx, r, v)
	if err == nil && r.Kind == approvals.KindPolicyRule {
		s.lost.Store(s.blind)
		return store.Record{}, fmt.Errorf("put record %s/%s: %w", r.Kind, r.ID, context.DeadlineExceeded)
	}
	return out, err
}

func (s *lostRuleAnswers) DeleteRecord(ctx context.Context, kind, id string) error {
	err := s.fullStore.DeleteRecord(ctx, kind, id)
	if err == nil && kind == approvals.KindPolicyRule {
		s.lost.Store(s.blind)
		return fmt.Errorf("delete record %s/%s: %w", kind, id, context.DeadlineExceeded)
	}
	return err
}

func (s *lostRuleAnswers) Records(ctx context.Context, kind string) ([]store.Record, error) {
	if s.lost.Load() && kind == approvals.KindPolicyRule {
		return nil, errors.New("dial tcp: connection refused")
	}
	return s.fullStore.Records(ctx, kind)
}

// A policy change made by the store but whose answer was lost is told
// made (it is in force), and audited; one that cannot be read back is
// told unknown, with where to look, never failed.
func TestPolicyChangesWhoseAnswerIsLost(t *testing.T) {
	for _, blind := range []bool{false, true} {
		t.Run(fmt.Sprintf("blind=%v", blind), func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.cfg.AdminUsers = []string{other}
			st := &lostRuleAnswers{blind: blind}
			open := e.open
			e.open = func() fullStore { st.fullStore = open(); return st }
			e.start()
			added := e.slash(other, "policy add tool=read_* verdict=deny id=no-reads")
			st.lost.Store(false) // the store answers again
			removed := e.slash(other, "policy remove no-reads")
			if blind {
				wantIn(t, "policy add, unconfirmed", added, "I couldn't tell whether rule `no-reads` was added", "`/approvals policy list`", "`id=no-reads`")
				wantIn(t, "policy remove, unconfirmed", removed, "I couldn't tell whether rule `no-reads` was removed")
				return
			}
			wantIn(t, "policy add", added, "Added runtime rule `no-reads`")
			wantIn(t, "policy remove", removed, "Removed rule `no-reads`")
			if strings.Contains(added+removed, "Warning") {
				t.Errorf("a change read back was said unaudited:\n%s\n%s", added, removed)
			}
			wantIn(t, "audit", e.slash(other, "audit 50"), "policy_add", "policy_remove")
		})
	}
}

// A call open to its channel's members waits there. When Slack fails the
// membership look-up, `/approvals pending` says the call could not be
// checked, never that nothing waits.
func TestPendingWhoseLookupFailsSaysSo(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"11"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 11")
	e.card(ts, "deploy")
	waitUntil(t, "the call listed", func() bool { return strings.Contains(e.slash(requester, "pending"), "1 call(s) waiting") })
	e.restart()                                                  // nothing known of the channel's members
	e.slack.ErrorNext("conversations.members", "internal_error") // one failed look-up
	got := e.slash(requester, "pending")
	if strings.Contains(got, "Nothing is waiting") || !strings.Contains(got, "1 more call(s) here could not be checked") {
		t.Errorf("pending while Slack failed the look-up says:\n%s", got)
	}
	wantIn(t, "pending once Slack answers", e.slash(requester, "pending"), "1 call(s) waiting")
}

// A rule too long for a page of `policy list` (a condition listing
// hundreds of services) is shown cut, saying so, and the page still says
// that more rules follow and how to see them.
func TestPolicyListOfALongRuleKeepsTheNextPageHint(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	var svcs []string
	for i := range 300 {
		svcs = append(svcs, fmt.Sprintf("'service-%03d'", i))
	}
	e.policy = "policy:\n  default: ask\n  rules:\n" +
		"    - id: big\n      tool: deploy\n      verdict: ask\n      when: args.service in [" + strings.Join(svcs, ", ") + "]\n" +
		"    - id: no-drop\n      tool: drop_db\n      verdict: deny\n" +
		"    - id: reads\n      tool: read_*\n      verdict: allow\n"
	e.start()
	first := e.slash(stranger, "policy list")
	wantIn(t, "page 1", first, "`big` [file]", "…`", "`/approvals policy list 2` shows the next page")
	wantIn(t, "page 2", e.slash(stranger, "policy list 2"), "`no-drop` [file]", "`reads` [file]")
}

// A workspace admin revoking someone else's standing rule while Slack
// fails users.info is told the admin check failed, not that only the
// rule's maker or an admin may revoke it; the retry revokes it.
func TestRevokeByAnAdminWhoseCheckFails(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.slack.AddUser(fakeslack.User{ID: "UWSADMIN01", Name: "wsadmin", IsAdmin: true})
	e.slack.Join(channel, "UWSADMIN01")
	e.start()
	e.remember(approvals.StandingRule{ID: "r-1", Tool: "deploy", Channel: channel, CreatedBy: requester})
	e.slack.ErrorNext("users.info", "internal_error")
	wantIn(t, "revoke while the check fails", e.slash("UWSADMIN01", "rules revoke r-1"), "I couldn't check whether you are an admin")
	wantIn(t, "the retry", e.slash("UWSADMIN01", "rules revoke r-1"), "Revoked standing rule `r-1`")
}
