package slackapp_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// A rule whose approvers cannot decide as things stand (an empty or
// unknown user group, one holding only the requester under four eyes, a
// deactivated, bot or unknown user) leaves a card that would wait unseen
// until it expires: the thread is told, naming each and why. Where one
// named approver can decide, nothing is said.
func TestThreadIsToldNoOneCanDecide(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		want       []string // in the notice; none: no notice
	}{
		{"empty group", "approvers: [SEMPTY0001]", []string{"<!subteam^SEMPTY0001> has no members"}},
		{"unknown group", "approvers: [SUNKNOWN01]", []string{"<!subteam^SUNKNOWN01> is not a user group Slack knows"}},
		{"group of the requester under four eyes", "approvers: [SSELF00001]\n      four_eyes: true", []string{"<!subteam^SSELF00001> holds no one but who asked for the call"}},
		{"deactivated, bot and unknown users", "approvers: [UGONE00001, UROBOT0001, UNOBODY001]",
			[]string{"<@UGONE00001> is deactivated", "<@UROBOT0001> is a bot", "<@UNOBODY001> is not a user Slack knows"}},
		{"too few for the count", "approvers: [UAPPROVER1, UGONE00001]\n      min_approvals: 2", []string{"<@UGONE00001> is deactivated"}},
		{"one who can", "approvers: [UGONE00001, SEMPTY0001, UAPPROVER1]", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      " + c.rule + "\n"
			e.slack.AddUserGroup("SEMPTY0001")
			e.slack.AddUserGroup("SSELF00001", requester)
			e.slack.AddUser(fakeslack.User{ID: "UGONE00001", Name: "left", Deleted: true})
			e.slack.AddUser(fakeslack.User{ID: "UROBOT0001", Name: "ci", IsBot: true})
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
			ts := e.slack.Mention(channel, requester, "deploy api 7")
			card := e.card(ts, "deploy")
			if c.want == nil {
				// The notice would come before the resume the click
				// queues behind the turn that paused.
				_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
				must(t, err)
				e.answer(ts, "Deployed api 7.")
				for _, m := range e.slack.Thread(channel, ts) {
					if strings.Contains(m.Text, "No one can") {
						t.Errorf("told no one can decide, though %s can: %q", approver, m.Text)
					}
				}
				return
			}
			m := e.waitThread(ts, "the notice that no one can decide", func(m fakeslack.Message) bool { return strings.Contains(m.Text, "No one can approve") })
			for _, w := range c.want {
				if !strings.Contains(m.Text, w) {
					t.Errorf("notice %q does not say %q", m.Text, w)
				}
			}
			if !strings.Contains(m.Text, "`rule-1`") {
				t.Errorf("notice %q does not name the rule", m.Text)
			}
		})
	}
}

// At start, each approver a policy rule names who cannot decide anything
// (a deactivated user, an empty user group) is logged as an error, once
// per rule; an approver who can is not. A rule added with /approvals
// policy add that names one says so in its answer.
func TestApproversWhoCannotDecideAreNamed(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.policy = "policy:\n  rules:\n" +
		"    - {id: first, tool: deploy, verdict: ask, approvers: [UAPPROVER1, UGONE00001, SEMPTY0001]}\n" +
		"    - {id: second, tool: drop_db, verdict: ask, approvers: [UGONE00001]}\n"
	e.slack.AddUserGroup("SEMPTY0001")
	e.slack.AddUser(fakeslack.User{ID: "UGONE00001", Name: "left", Deleted: true})
	logs := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.start()
	last := `rule=second approver=UGONE00001 why="is deactivated"`
	waitUntil(t, "the last rule's approvers checked", func() bool { return strings.Contains(logs.String(), last) })
	for _, want := range []string{`rule=first approver=UGONE00001 why="is deactivated"`, `rule=first approver=SEMPTY0001 why="has no members"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %s:\n%s", want, logs)
		}
	}
	if strings.Contains(logs.String(), "approver=UAPPROVER1") {
		t.Errorf("an approver who can decide was logged:\n%s", logs)
	}
	wantIn(t, "policy add naming one who cannot decide", e.slash(other, "policy add tool=deploy verdict=ask id=late approvers=UAPPROVER1,UGONE00001"),
		"Added runtime rule `late`", "<@UGONE00001> is deactivated")
	if got := e.slash(other, "policy add tool=deploy verdict=ask id=fine approvers=UAPPROVER1"); strings.Contains(got, "cannot") || strings.Contains(got, "deactivated") {
		t.Errorf("policy add naming one who can decide said: %s", got)
	}
}
