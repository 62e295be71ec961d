package slackapp_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
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
