package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// A standing rule whose record does not decode hides none of the others:
// `rules list` lists them, `rules revoke` revokes one (after which it no
// longer relaxes calls), and an admin revokes the unreadable one by its id.
func TestRulesRevokeBesideAnUnreadableStandingRule(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	e.cfg.AdminUsers = []string{other}
	e.start()

	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"11"}`)), fakeopenai.Text("Deployed api 11."))
	ts := e.slack.Mention(channel, requester, "deploy api 11")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answer(ts, "Deployed api 11.")
	_, err = e.bot.st.PutRecord(t.Context(), store.Record{Kind: approvals.KindStandingRule, ID: "sr-unreadable", Data: json.RawMessage(`"not a rule"`)}, -1)
	must(t, err)

	rules := e.slash(stranger, "rules list")
	m := regexp.MustCompile("• `([^`]+)`: `deploy` allowed, by <@" + approver + ">").FindStringSubmatch(rules)
	if m == nil {
		t.Fatalf("rules list beside an unreadable record does not show the standing rule:\n%s", rules)
	}
	const args = `policy test deploy {"service":"api","version":"12"}`
	wantIn(t, "policy test under the standing rule", e.slash(stranger, args), "*allow* by rule `standing:"+m[1]+"`")
	wantIn(t, "rules revoke by its creator", e.slash(approver, "rules revoke "+m[1]), "Revoked standing rule `"+m[1]+"`")
	wantIn(t, "policy test after the revoke", e.slash(stranger, args), "*ask* by rule `deploys`")
	wantIn(t, "rules list after the revoke", e.slash(stranger, "rules list"), "No standing rules")

	wantIn(t, "rules revoke of the unreadable record by a non-admin", e.slash(stranger, "rules revoke sr-unreadable"), "There is no standing rule `sr-unreadable`", "Nothing changed")
	wantIn(t, "rules revoke of the unreadable record by an admin", e.slash(other, "rules revoke sr-unreadable"), "Revoked standing rule `sr-unreadable`")
	recs, err := e.bot.st.Records(t.Context(), approvals.KindStandingRule)
	must(t, err)
	if len(recs) != 0 {
		t.Errorf("standing rule records after both revokes: %d, want none", len(recs))
	}
	wantIn(t, "rules revoke of an id no record has, by an admin", e.slash(other, "rules revoke sr-none"), "There is no standing rule `sr-none`", "Nothing changed")
}

// failingPolicyAudit fails the audit entries of policy changes, after the
// change itself was made.
type failingPolicyAudit struct {
	fullStore
}

func (s failingPolicyAudit) Audit(ctx context.Context, e store.AuditEntry) error {
	switch e.Action {
	case approvals.AuditPolicyAdd, approvals.AuditPolicyRemove, approvals.AuditStandingRevoke:
		return errors.New("audit log unavailable")
	}
	return s.fullStore.Audit(ctx, e)
}

// A policy change whose audit entry could not be written was made all the
// same: the answer says so, with its usual notes, and warns that the audit
// log misses it, so that the admin does not make it again.
func TestPolicyChangeWhoseAuditFailsIsReportedMade(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	open := e.open
	e.open = func() fullStore { return failingPolicyAudit{open()} }
	e.start()

	added := e.slash(other, "policy add tool=deploy verdict=allow id=deploy-ok")
	wantIn(t, "policy add whose audit failed", added, "Added runtime rule `deploy-ok`", "no effect where the stricter file rule `deploys` (ask) applies", "audit log", "audit log unavailable")
	if strings.Contains(added, "couldn't add") {
		t.Errorf("policy add whose audit failed says the rule was not added:\n%s", added)
	}
	if list := e.slash(stranger, "policy list"); strings.Count(list, "`deploy-ok`") != 1 {
		t.Errorf("policy list after the add does not show the rule once:\n%s", list)
	}
	removed := e.slash(other, "policy remove deploy-ok")
	wantIn(t, "policy remove whose audit failed", removed, "Removed rule `deploy-ok`", "audit log", "audit log unavailable")
	if strings.Contains(removed, "couldn't remove") {
		t.Errorf("policy remove whose audit failed says the rule was not removed:\n%s", removed)
	}
	if list := e.slash(stranger, "policy list"); strings.Contains(list, "`deploy-ok`") {
		t.Errorf("policy list after the remove still shows the rule:\n%s", list)
	}

	data, err := json.Marshal(approvals.StandingRule{Tool: "deploy", Channel: channel, CreatedBy: other, CreatedAt: time.Now()})
	must(t, err)
	_, err = e.bot.st.PutRecord(t.Context(), store.Record{Kind: approvals.KindStandingRule, ID: "sr-audit", Data: data}, -1)
	must(t, err)
	revoked := e.slash(other, "rules revoke sr-audit")
	wantIn(t, "rules revoke whose audit failed", revoked, "Revoked standing rule `sr-audit`", "audit log", "audit log unavailable")
	if strings.Contains(revoked, "couldn't revoke") {
		t.Errorf("rules revoke whose audit failed says the rule was not revoked:\n%s", revoked)
	}
}

// `/approvals policy test` refuses the arguments the bot refuses before the
// policy, beyond the tool's schema: keys that differ only by case or by
// normalisation, keys mixing scripts, arguments nested too deep.
func TestPolicyTestRefusesArgumentsTheBotRefuses(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	for _, args := range []string{
		`{"table":"a","Table":"b"}`,
		`{"caf\u00e9":1,"cafe\u0301":2}`,
		`{"t\u0430ble":"a"}`,
		`{"a":` + strings.Repeat("[", 70) + strings.Repeat("]", 70) + `}`,
	} {
		got := e.slash(stranger, "policy test drop_db "+args)
		wantIn(t, "policy test drop_db "+args, got, "refused before the policy")
		if strings.Contains(got, "*deny*") {
			t.Errorf("policy test drop_db %s shows a verdict for arguments the bot refuses:\n%s", args, got)
		}
	}
	wantIn(t, "policy test with sound arguments", e.slash(stranger, `policy test drop_db {"table":"a"}`), "*deny* by rule `no-drop`")
}
