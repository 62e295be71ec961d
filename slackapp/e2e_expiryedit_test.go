package slackapp_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// editNoted notes whether its replica recorded an edit.
type editNoted struct {
	*pauseNoted
	edited atomic.Bool
}

func (s *editNoted) ApproveAudited(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, done, err := s.pauseNoted.ApproveAudited(ctx, callID, fingerprint, ap, drop, edit, need, d, fx)
	if err == nil && edit != nil {
		s.edited.Store(true)
	}
	return c, done, err
}

// Of two replicas, the one that records an edit bringing a call's deadline
// forward (a rule with a shorter ttl) stops before that deadline: the
// other learnt of the deadline from the edit's announcement, and expires
// the call close to it, not at its own next sweep.
func TestEditedDeadlineExpiresOnTimeAfterTheEditorStops(t *testing.T) {
	for _, kind := range sharedKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = `
policy:
  rules:
    - {id: v2, tool: deploy, when: 'args.version == "2"', verdict: ask, approvers: [UAPPROVER1, UOTHER0001], min_approvals: 2, ttl: 4s}
    - {id: deploys, tool: deploy, verdict: ask, approvers: [UAPPROVER1, UOTHER0001], ttl: 1h}
`
			e.cfg.SweepInterval = 30 * time.Second // the default
			m := newScriptedModel()
			m.unblock()
			e.model.Handle(m.answer)
			base := e.open()
			e.shared = base
			stores := []*editNoted{
				{pauseNoted: &pauseNoted{seenStore: &seenStore{fullStore: base}}},
				{pauseNoted: &pauseNoted{seenStore: &seenStore{fullStore: base}}},
			}
			stop := e.runReplicas(t, stores[0], stores[1])
			must(t, e.slack.WaitConnected(2, 10*time.Second))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy")
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")

			_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionEdit, "")
			must(t, err)
			view := e.modal(other, slackapp.CallbackEdit)
			_, err = e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"2"}`}}, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+other+"> · the arguments were edited")
			editor := 0
			if stores[1].edited.Load() {
				editor = 1
			}
			if !stores[editor].edited.Load() || stores[1-editor].edited.Load() {
				t.Fatal("could not tell which replica recorded the edit")
			}
			c, err := base.GetCall(t.Context(), callID)
			must(t, err)
			// The replica that recorded the edit stops; the other runs on.
			stop(editor)
			if !time.Now().Before(c.ExpiresAt) {
				t.Fatal("the editing replica stopped only after the new deadline: nothing tested")
			}
			expired := func(m fakeslack.Message) bool {
				return m.TS == card.TS && strings.Contains(blocksText(m), "Expired")
			}
			if _, err := e.slack.WaitMessage(channel, expired, time.Until(c.ExpiresAt.Add(3*time.Second))); err != nil {
				st, _ := base.GetCall(t.Context(), callID)
				t.Errorf("3 s past the edited deadline %s the card does not say it expired (the call is %s): the replica left sleeps towards the old deadline or its next sweep", c.ExpiresAt.Format(time.TimeOnly), st.Status)
			}
		})
	}
}
