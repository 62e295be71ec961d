package slackapp_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// A standing rule made in a DM is listed by `rules list` only in that DM,
// where an admin is not: `rules list all` lists every channel's, for
// admins only, so that an admin can find any rule to revoke; it names the
// channels the admin can see, as the audit log does, and only says of the
// others that the admin is not part of them.
func TestAdminListsEveryChannelsStandingRules(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.cfg.AdminUsers = []string{other}
	e.start()

	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed api 9."))
	dm := e.slack.DMChannel(requester)
	ts := e.slack.DM(requester, "deploy api 9")
	card := e.cardIn(dm, ts, "deploy")
	_, err := e.slack.Click(requester, dm, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answerIn(dm, ts, "Deployed api 9.")

	wantIn(t, "rules list in another channel", e.slash(other, "rules list"), "No standing rules in this channel")
	e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"web","version":"2"}`)), fakeopenai.Text("Deployed web 2."))
	here := e.slack.Mention(channel, requester, "deploy web 2")
	_, err = e.slack.Click(requester, channel, e.card(here, "deploy").TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answer(here, "Deployed web 2.")

	wantIn(t, "rules list all by a non-admin", e.slash(stranger, "rules list all"), "Only admins can list every channel's standing rules")
	all := e.slash(other, "rules list all")
	m := regexp.MustCompile("• `([^`]+)`: `deploy` allowed, by <@" + requester + "> in a conversation you are not part of").FindStringSubmatch(all)
	if m == nil || strings.Contains(all, dm) {
		t.Fatalf("rules list all does not show the DM's standing rule, without naming the DM:\n%s", all)
	}
	wantIn(t, "rules list all", all, "by <@"+requester+"> in <#"+channel+">")
	wantIn(t, "rules list all, a page past the last", e.slash(other, "rules list all 2"), "There is no page 2: the 2 standing rules of every channel fit on 1")
	wantIn(t, "rules list all, a page that is no number", e.slash(other, "rules list all two"), "is not a page number")
	wantIn(t, "rules revoke by an admin", e.slash(other, "rules revoke "+m[1]), "Revoked standing rule `"+m[1]+"`")
	if got := e.slash(other, "rules list all"); strings.Contains(got, m[1]) || !strings.Contains(got, "in <#"+channel+">") {
		t.Errorf("rules list all after the DM's rule was revoked:\n%s", got)
	}
}

// remember saves a standing rule, as Always allow does, in the bot's store.
func (e *env) remember(r approvals.StandingRule) {
	e.t.Helper()
	p, err := approvals.ParseConfig([]byte("policy:\n  default: ask\n"))
	must(e.t, err)
	_, err = approvals.NewEngine(p, e.bot.st).Remember(context.Background(), r.CreatedBy, r)
	must(e.t, err)
}

// Page 2 of `rules list all` names the channel of its rule, which the admin
// is in, and looks up no channel whose rules are all on page 1: with many
// rules, look-ups of other pages would take the time the command has.
func TestRulesListAllLooksUpOnlyThePageShown(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.cfg.AdminUsers = []string{other}
	e.start()
	e.slack.AddChannel(fakeslack.Channel{ID: "CBUSY0001", Name: "busy", Members: []string{requester, e.slack.BotUserID()}})
	base := time.Now().Add(-time.Hour).UTC()
	for i := range 29 { // page 1, whole
		e.remember(approvals.StandingRule{ID: fmt.Sprintf("busy-%02d", i), Tool: "deploy", Channel: "CBUSY0001", CreatedBy: requester, CreatedAt: base.Add(time.Duration(i) * time.Second)})
	}
	e.remember(approvals.StandingRule{ID: "here-1", Tool: "deploy", Channel: channel, CreatedBy: requester, CreatedAt: base.Add(time.Minute)})

	page2 := e.slash(other, "rules list all 2")
	if !strings.Contains(page2, "here-1") || strings.Contains(page2, "busy-") {
		t.Fatalf("page 2 does not hold rule here-1 alone:\n%s", page2)
	}
	wantIn(t, "page 2 of rules list all", page2, "by <@"+requester+"> in <#"+channel+">")
	for _, method := range []string{"conversations.members", "conversations.info"} {
		for _, c := range e.slack.Calls(method) {
			if c.Params.Get("channel") == "CBUSY0001" {
				t.Errorf("%s was asked of CBUSY0001, none of whose rules is on the page", method)
			}
		}
	}
}

// An admin who revokes a rule that `rules list all` listed without naming
// its DM is not told the DM either; its creator is.
func TestRevokeDoesNotNameAConversationTheAdminIsNotIn(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n"
	e.cfg.AdminUsers = []string{other}
	e.start()
	dm := e.slack.DMChannel(requester)
	e.remember(approvals.StandingRule{ID: "dm-1", Tool: "deploy", Channel: dm, CreatedBy: requester})
	e.remember(approvals.StandingRule{ID: "dm-2", Tool: "deploy", Channel: dm, CreatedBy: requester})
	wantIn(t, "rules list all", e.slash(other, "rules list all"), "`dm-1`: `deploy` allowed, by <@"+requester+"> in a conversation you are not part of")
	if got := e.slash(other, "rules revoke dm-1"); strings.Contains(got, dm) || !strings.Contains(got, "Revoked standing rule `dm-1`, but `deploy` in a conversation you are not part of may still be allowed by standing rule `dm-2`") {
		t.Errorf("the admin's revoke says:\n%s\nwant it revoked, without naming the DM", got)
	}
	wantIn(t, "the creator's revoke", e.slash(requester, "rules revoke dm-2"), "Revoked standing rule `dm-2`: `deploy` in <#"+dm+"> asks again")
}
