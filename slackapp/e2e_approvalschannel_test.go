package slackapp_test

import (
	"slices"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// With APPROVALS_CHANNEL set, an approver who cannot see the conversation
// and is not in that channel either would never see the copy there: theirs
// comes by DM, and they decide on it. One in the channel gets no DM.
func TestApproverOutsideTheApprovalsChannelGetsACopyByDM(t *testing.T) {
	const private = "CPRIVATE41"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [" + approver + ", " + other + "]\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: []string{approver, e.slack.BotUserID()}})
	e.cfg.ApprovalsChannel = approvalsChannel
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(private, requester, "deploy api 7")
	e.cardIn(private, ts, "deploy")
	waitForCopy(t, e, other)
	waitUntil(t, "the copy in APPROVALS_CHANNEL", func() bool {
		return slices.ContainsFunc(e.slack.Messages(approvalsChannel), isCard)
	})
	if n := len(e.slack.Messages(e.slack.DMChannel(approver))); n != 0 {
		t.Errorf("%s, in APPROVALS_CHANNEL, got %d messages by DM", approver, n)
	}
	dm := e.slack.DMChannel(other)
	i := slices.IndexFunc(e.slack.Messages(dm), isCard)
	_, err := e.slack.Click(other, dm, e.slack.Messages(dm)[i].TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed api 7.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
}
