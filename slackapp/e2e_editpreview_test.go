package slackapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// An Edit of a two-person call whose preview of the new arguments is slow
// is recorded with its preview unavailable, in time for the form's answer:
// the form was answered that the state store was slow (it was not).
func TestSlowPreviewOfAnEditDoesNotHoldTheForm(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = twoPersonPolicy
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	tool, _ := e.reg.Lookup("deploy")
	tool.Preview = func(ctx context.Context, args json.RawMessage) (string, error) {
		if strings.Contains(string(args), "999") {
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "would deploy " + string(args), nil
	}
	must(t, e.reg.Replace(func(n string) bool { return n == "deploy" }, []agent.Tool{tool}))
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(other, slackapp.CallbackEdit)
	ack, err := e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"999"}`}}, "")
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Fatalf("an edit whose preview (not the store) is slow is answered with: %s", ack)
	}
	e.waitIn(channel, ts, "the card shows the edit's preview as unavailable", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "999") && strings.Contains(blocksText(m), "no answer within 1.5s")
	})
}

// The sealed copy of a call decided with edited arguments says where they
// are (View full arguments), and that form shows them, not the model's.
func TestSealedCopyOfAnEditedCallShowsTheEditedArguments(t *testing.T) {
	e := approvalsChannelEnv(t)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("shipped"))
	ts := e.slack.Mention(private, requester, "deploy vault 14")
	e.cardIn(private, ts, "deploy")
	cp, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)
	_, err = e.slack.Click(approver, approvalsChannel, cp.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	_, err = e.slack.SubmitView(approver, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"vault","version":"EDITED-15"}`}}, "")
	must(t, err)
	e.answerIn(private, ts, "shipped")
	decided, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool {
		return m.TS == cp.TS && strings.Contains(blocksText(m), "Edited by")
	}, 10*time.Second)
	must(t, err)
	if text := blocksText(decided); strings.Contains(text, "are below") || !strings.Contains(text, "View full arguments* shows the edited arguments") {
		t.Errorf("the sealed copy does not say where the edited arguments are:\n%s", text)
	}
	_, err = e.slack.Click(approver, approvalsChannel, cp.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	if text := viewText(e.modal(approver, slackapp.CallbackViewArgs)); !strings.Contains(text, "EDITED-15") || strings.Contains(text, `"14"`) {
		t.Errorf("View full arguments of a call decided with edited arguments does not show them alone:\n%s", text)
	}
}
