package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/slackapp"
)

// Someone in the conversation who may not decide a call edited into a rule
// that names no approvers is told who may: the card's approvers who are in
// the conversation, as the agent checks on every decision, not the card's
// approvers as if being named were enough.
func TestRefusalOfAnEditIntoAnOpenRuleSaysWhoMayDecide(t *testing.T) {
	const private = "CPRIVATE96"
	e, card := editedIntoAnOpenRule(t, private)

	_, err := e.slack.Click(requester, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	told := e.ephemeral(requester, "not an approver").Text
	for _, want := range []string{"<@" + approver + ">", "<@" + stranger + ">", "in the conversation"} {
		if !strings.Contains(told, want) {
			t.Errorf("the refusal does not say %q: %q", want, told)
		}
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times", n)
	}
}
