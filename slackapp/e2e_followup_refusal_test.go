package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Someone in the conversation who may not decide a call edited into a rule
// that names no approvers is told who may: the card's approvers who are in
// the conversation, as the agent checks on every decision, not the card's
// approvers as if being named were enough.
func TestRefusalOfAnEditIntoAnOpenRuleSaysWhoMayDecide(t *testing.T) {
	const private = "CPRIVATE96"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: payroll
      tool: deploy
      when: 'args.service == "payroll"'
      verdict: ask
      min_approvals: 2
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001, USTRANGER1]
`
	// The other approver is the one outside the channel.
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
	e.start()
	card := e.pausedThenEdited(private)

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
