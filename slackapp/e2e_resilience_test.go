package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// panickyAudit is a store whose audit log panics.
type panickyAudit struct{ fullStore }

func (panickyAudit) AuditLog(context.Context, int) ([]store.AuditEntry, error) {
	panic("audit log exploded")
}

// A command whose handler panics is still answered, once, with an error,
// and the bot goes on answering commands.
func TestCommandHandlerPanicIsAnswered(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	open := e.open
	e.open = func() fullStore { return panickyAudit{open()} }
	e.cfg.AdminUsers = []string{requester}
	e.start()
	wantIn(t, "/approvals audit with a panicking store", e.slash(requester, "audit"), "Something went wrong")
	wantIn(t, "/approvals help after a panic", e.slash(requester, "help"), "manages tool-call approvals")
}

// Rejecting in a modal is acked while the card's chat.update has not been
// answered (the fake holds it); the card is updated afterwards.
func TestSubmissionAckDoesNotWaitForCardUpdate(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Understood, not deploying."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackReject)
	arrived, release := e.slack.HoldNext("chat.update")
	defer release()
	ack, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "Not today."},
	}, "")
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Errorf("the submission was acked with %s, want a plain ack", ack)
	}
	// The ack came with the update still held: it did not wait for it.
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the card was never updated")
	}
	release()
	waitUntil(t, "the card shows the rejection", func() bool {
		m, _ := e.slack.Message(channel, card.TS)
		return !isCard(m) && strings.Contains(blocksText(m), "Not today.")
	})
	e.answer(ts, "Understood, not deploying.")
}

// cardWritesFail is a store that cannot write where cards are: every
// write fails, or with once only the first one of each card.
type cardWritesFail struct {
	fullStore
	once   bool
	failed *sync.Map // calls whose card's write failed
}

func (f cardWritesFail) PutCallNote(ctx context.Context, callID string, note []byte) error {
	if _, seen := f.failed.LoadOrStore(callID, true); !seen || !f.once {
		return errors.New("store blip")
	}
	return f.fullStore.PutCallNote(ctx, callID, note)
}

// Where a card is survives failed writes: the process that posted it
// remembers, and a write that failed once is made again, so a process
// started afterwards still updates the card.
func TestCardUpdatedWhenLocationWritesFail(t *testing.T) {
	for _, c := range []struct {
		name    string
		once    bool
		restart bool
	}{
		{name: "every write fails, same process", once: false},
		{name: "a write fails once, then a restart", once: true, restart: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			open := e.open
			failed := &sync.Map{}
			e.open = func() fullStore { return cardWritesFail{fullStore: open(), once: c.once, failed: failed} }
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed api 9."))
			ts := e.slack.Mention(channel, requester, "deploy api 9")
			card := e.card(ts, "deploy")
			if c.restart {
				e.restart()
			}
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			_, err = e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 9.")
			waitUntil(t, "the card shows the call ran", func() bool {
				m, _ := e.slack.Message(channel, card.TS)
				return !isCard(m) && strings.Contains(blocksText(m), "api")
			})
		})
	}
}

// A call whose approvers are a user group is in the Home inbox of the
// group's members, and of nobody else.
func TestHomeListsUserGroupApprovals(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [SOPS00001]
`
	e.slack.AddUserGroup("SOPS00001", approver)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 5")
	e.card(ts, "deploy")
	home := func(user string) fakeslack.View {
		e.slack.OpenHome(user)
		var v fakeslack.View
		waitUntil(t, "the Home tab of "+user+" is published", func() bool {
			var ok bool
			v, ok = e.slack.HomeView(user)
			return ok
		})
		return v
	}
	if v := home(approver); !strings.Contains(string(v.JSON), `"action_id":"approve"`) {
		t.Errorf("the Home inbox of a member of the approving group lacks the call: %s", v.JSON)
	}
	if v := home(stranger); strings.Contains(string(v.JSON), `"action_id":"approve"`) {
		t.Errorf("the Home inbox of someone outside the approving group lists the call: %s", v.JSON)
	}
}

// A refusal under a modal input is plain text: no mention or date token
// shows raw.
func TestModalRefusalIsPlainText(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"4"}`)), fakeopenai.Text("Not deploying."))
	ts := e.slack.Mention(channel, requester, "deploy api 4")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	first := e.modal(approver, slackapp.CallbackReject)
	_, err = e.slack.Click(other, channel, card.TS, slackapp.ActionReject, "")
	must(t, err)
	second := e.modal(other, slackapp.CallbackReject)
	_, err = e.slack.SubmitView(approver, first.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "No."},
	}, "")
	must(t, err)
	ack, err := e.slack.SubmitView(other, second.ID, map[string]map[string]string{
		slackapp.BlockRejectReason: {slackapp.ActionRejectReason: "Also no."},
	}, "")
	must(t, err)
	var resp struct {
		Errors map[string]string `json:"errors"`
	}
	must(t, json.Unmarshal(ack, &resp))
	text := resp.Errors[slackapp.BlockRejectReason]
	if !strings.Contains(text, "already") || !strings.Contains(text, "@"+approver) {
		t.Errorf("the second rejection was answered %q, want the call already rejected by @%s", text, approver)
	}
	if strings.ContainsAny(text, "<>") {
		t.Errorf("the modal error shows mrkdwn tokens: %q", text)
	}
}
