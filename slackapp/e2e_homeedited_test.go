package slackapp_test

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// An approver outside a private channel has a call in their Home inbox. An
// edit moves it into a rule open to the conversation only, so it is no
// longer theirs to decide or see; then it is decided and runs. Their tab,
// never reopened, is published again without it.
func TestHomeOfAnApproverAnEditTookOutIsRefreshed(t *testing.T) {
	const private = "CPRIVATE97"
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
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, stranger, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed payroll."))
	ts := e.slack.Mention(private, requester, "deploy api 1")
	card := e.cardIn(private, ts, "deploy")
	if home := viewText(e.home(other)); !strings.Contains(home, "Waiting for your decision* (1)") {
		t.Fatalf("the approver outside the channel does not have the call in their inbox:\n%s", home)
	}

	_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	_, err = e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"payroll","version":"SECRET-42"}`},
	}, "")
	must(t, err)
	waitUntil(t, "the card shows the edit", func() bool {
		m, _ := e.slack.Message(private, card.TS)
		return strings.Contains(blocksText(m), "SECRET-42")
	})
	_, err = e.slack.Click(stranger, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed payroll.")
	waitUntil(t, "the requester's tab no longer lists the call", func() bool {
		v, ok := e.slack.HomeView(requester)
		return ok && strings.Contains(viewText(v), "Your requests waiting for approval* (0)")
	})
	waitUntil(t, "the tab of the approver the edit took out no longer lists the call", func() bool {
		v, _ := e.slack.HomeView(other)
		return strings.Contains(viewText(v), "Waiting for your decision* (0)")
	})
}
