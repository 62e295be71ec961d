package slackapp_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// unauditedStandingRules fails the audit entry of each new standing rule,
// after the rule itself is stored.
type unauditedStandingRules struct{ fullStore }

func (s unauditedStandingRules) Audit(ctx context.Context, e store.AuditEntry) error {
	if e.Action == approvals.AuditStandingAdd {
		return errors.New("audit log unavailable")
	}
	return s.fullStore.Audit(ctx, e)
}

// Always allow here whose standing rule is stored but whose audit entry is
// not keeps the rule: the next call like it runs without asking, and the
// approver is told that the change was made but is not in the audit log,
// not that the rule was not saved.
func TestAlwaysAllowWithoutItsAuditEntryKeepsTheRule(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
			open := e.open
			e.open = func() fullStore { return unauditedStandingRules{open()} }
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed, and remembered."))
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
			must(t, err)
			e.answer(ts, "Deployed, and remembered.")
			wantIn(t, "/approvals rules list", e.slash(stranger, "rules list"), "`deploy` allowed")

			// The rule is in force: the same call in a new thread runs at once.
			e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Deployed again."))
			ts2 := e.slack.Mention(channel, requester, "deploy api 9")
			e.answer(ts2, "Deployed again.")
			if n := len(e.cards(channel, ts2)); n != 0 {
				t.Errorf("the second deploy asked for approval although the standing rule is stored")
			}
			e.stop() // the click's work is done by then
			told := false
			for _, m := range e.slack.Ephemerals(approver) {
				if strings.Contains(m.Text, "couldn't save the rule") || strings.Contains(m.Text, "will still ask") {
					t.Errorf("the approver was told the rule was not saved, though it is in force: %q", m.Text)
				}
				told = told || strings.Contains(m.Text, "the change was made, but the audit log does not record it")
			}
			if !told {
				t.Errorf("the approver was not told that the audit log does not record the rule; told %v", e.slack.Ephemerals(approver))
			}
		})
	}
}
