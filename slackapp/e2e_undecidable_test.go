package slackapp_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// A rule whose approvers cannot decide as things stand (an empty or
// unknown user group, one holding only the requester under four eyes, a
// deactivated, bot or unknown user) leaves a card that would wait unseen
// until it expires: the thread is told, naming each and why. Where enough
// named approvers can decide, nothing is said; where some can but fewer
// than the count, the thread is told how many.
func TestThreadIsToldNoOneCanDecide(t *testing.T) {
	for _, c := range []struct {
		name, rule string
		want       []string // in the notice; none: no notice
	}{
		{"empty group", "approvers: [SEMPTY0001]", []string{"No one can approve", "<!subteam^SEMPTY0001> has no members"}},
		{"unknown group", "approvers: [SUNKNOWN01]", []string{"No one can approve", "<!subteam^SUNKNOWN01> is not a user group Slack lists"}},
		{"group of the requester under four eyes", "approvers: [SSELF00001]\n      four_eyes: true", []string{"No one can approve", "<!subteam^SSELF00001> holds no one but who asked for the call"}},
		{"deactivated, bot and unknown users", "approvers: [UGONE00001, UROBOT0001, UNOBODY001]",
			[]string{"No one can approve", "<@UGONE00001> is deactivated", "<@UROBOT0001> is a bot", "<@UNOBODY001> is not a user Slack knows"}},
		{"too few for the count", "approvers: [UAPPROVER1, UGONE00001]\n      min_approvals: 2", []string{"Only 1 of the 2 approvals", "<@UGONE00001> is deactivated"}},
		{"one who can", "approvers: [UGONE00001, SEMPTY0001, UAPPROVER1]", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      " + c.rule + "\n"
			e.slack.AddUserGroup("SEMPTY0001")
			e.slack.AddUserGroup("SSELF00001", requester)
			e.slack.AddUser(fakeslack.User{ID: "UGONE00001", Name: "left", Deleted: true})
			e.slack.AddUser(fakeslack.User{ID: "UROBOT0001", Name: "ci", IsBot: true})
			logs := e.debugLogs()
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
			ts := e.slack.Mention(channel, requester, "deploy api 7")
			e.card(ts, "deploy")
			waitForUndecidableCheck(t, logs)
			notice := undecidableNotice(e, channel, ts)
			if c.want == nil {
				if notice != "" {
					t.Errorf("told %q, though %s can decide", notice, approver)
				}
				return
			}
			for _, w := range append(c.want, "`rule-1`") {
				if !strings.Contains(notice, w) {
					t.Errorf("notice %q does not say %q", notice, w)
				}
			}
		})
	}
}

// debugLogs has the bot log at debug level into the buffer returned.
func (e *env) debugLogs() *syncBuffer {
	logs := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return logs
}

// waitForUndecidableCheck waits until the bot has checked whether a paused
// call's approvers can decide it, and told the thread if not.
func waitForUndecidableCheck(t *testing.T, logs *syncBuffer) {
	t.Helper()
	waitUntil(t, "the paused call's approvers checked", func() bool {
		return strings.Contains(logs.String(), "checked whether a paused call's approvers can decide it")
	})
}

// undecidableNotice is the thread's notice that the approvers cannot
// decide its call ("" if none).
func undecidableNotice(e *env, ch, ts string) string {
	for _, m := range e.slack.Thread(ch, ts) {
		if strings.Contains(m.Text, "as things stand") {
			return m.Text
		}
	}
	return ""
}

// A look-up of an approver that Slack answers with an error other than
// "no such user" (a passing one, a missing scope, a user it will not show)
// cannot tell whether they can decide: the thread is told nothing.
func TestApproverSlackCannotTellOfIsNoUnknownUser(t *testing.T) {
	for _, code := range []string{"internal_error", "user_not_visible", "missing_scope"} {
		t.Run(code, func(t *testing.T) {
			const private = "CPRIVATE77"
			e, logs := startWithOneApprover(t, private)
			e.slack.ErrorNext("users.info", code)
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
			ts := e.slack.Mention(private, requester, "deploy api 7")
			e.cardIn(private, ts, "deploy")
			waitForUndecidableCheck(t, logs)
			if len(e.slack.Calls("users.info")) != 2 {
				t.Fatalf("the pause's check did not look the approver up")
			}
			if notice := undecidableNotice(e, private, ts); notice != "" {
				t.Errorf("Slack's %s was told as an approver who cannot decide: %q", code, notice)
			}
		})
	}
}

// startWithOneApprover starts a bot whose rule for deploy names approver,
// logging at debug level, with a private channel of the requester and the
// approver, once the check of the policy's approvers at start has looked
// the approver up.
func startWithOneApprover(t *testing.T, private string) (*env, *syncBuffer) {
	t.Helper()
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [" + approver + "]\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	logs := e.debugLogs()
	e.start()
	waitUntil(t, "the approvers checked at start", func() bool { return len(e.slack.Calls("users.info")) == 1 })
	return e, logs
}

// The check of a paused call's approvers runs off its turn: an approval
// clicked while Slack holds the check's look-up is resumed, and its call
// run, before the look-up ends.
func TestApprovedCallDoesNotWaitOnTheApproversCheck(t *testing.T) {
	const private = "CPRIVATE78"
	e, logs := startWithOneApprover(t, private)
	arrived, release := e.slack.HoldNext("users.info")
	defer release()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(private, requester, "deploy api 7")
	card := e.cardIn(private, ts, "deploy")
	<-arrived
	_, err := e.slack.Click(approver, private, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "Deployed api 7.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if strings.Contains(logs.String(), "checked whether a paused call's approvers can decide it") {
		t.Errorf("the call was resumed only once the check of its approvers, whose look-up Slack holds, had ended")
	}
	release()
	waitForUndecidableCheck(t, logs)
}

// The check of the policy's approvers at start ends as the shutdown
// starts: a bot stopped while Slack holds one of its look-ups, with no
// work in flight, does not wait out its grace period for it.
func TestShutdownDoesNotWaitForTheApproversCheck(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [" + approver + "]\n"
	logs := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.cfg.ShutdownGrace = 2 * time.Second
	arrived, release := e.slack.HoldNext("users.info")
	t.Cleanup(release)
	e.start()
	<-arrived
	e.stop()
	if strings.Contains(logs.String(), "shutdown grace period over") {
		t.Errorf("an idle bot's shutdown waited out its grace period for the check of its approvers:\n%s", logs)
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

// One answer settles a question, whatever its rule's count: a question
// one named approver can answer is not told as undecidable.
func TestQuestionOneApproverCanAnswerIsNotUndecidable(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: \"*\"\n      verdict: ask\n      approvers: [UAPPROVER1, UGONE00001]\n      min_approvals: 2\n"
	e.slack.AddUser(fakeslack.User{ID: "UGONE00001", Name: "left", Deleted: true})
	logs := e.debugLogs()
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)), fakeopenai.Text("Thanks."))
	ts := e.slack.Mention(channel, requester, "deploy somewhere")
	e.waitThread(ts, "with a question card", func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
	})
	waitForUndecidableCheck(t, logs)
	if notice := undecidableNotice(e, channel, ts); notice != "" {
		t.Errorf("a question %s can answer was told as undecidable: %q", approver, notice)
	}
}

// The check of a paused call's approvers, off its turn, ends as the
// shutdown starts: a bot stopped while Slack holds its look-up, with no
// work in flight, does not wait out its grace period for it.
func TestShutdownDoesNotWaitForThePauseApproversCheck(t *testing.T) {
	const private = "CPRIVATE79"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [" + approver + "]\n"
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, approver, e.slack.BotUserID()}})
	logs := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.cfg.ShutdownGrace = 2 * time.Second
	e.start()
	waitUntil(t, "the approvers checked at start", func() bool { return len(e.slack.Calls("users.info")) == 1 })
	arrived, release := e.slack.HoldNext("users.info")
	t.Cleanup(release)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)))
	ts := e.slack.Mention(private, requester, "deploy api 7")
	e.cardIn(private, ts, "deploy")
	<-arrived // the pause's check of the approver
	e.stop()
	if strings.Contains(logs.String(), "shutdown grace period over") {
		t.Errorf("an idle bot's shutdown waited out its grace period for the check of a paused call's approvers:\n%s", logs)
	}
}

// A call whose deciders must see its conversation (an ask combined with
// one open to the conversation: a rule whose condition could not be
// evaluated) can be decided only by its named approvers who can: where
// none of them can, the thread is told, naming each and why; where one
// can, nothing is said.
func TestThreadIsToldNoOneInTheConversationCanDecide(t *testing.T) {
	for _, c := range []struct {
		name, approvers string
		members         []string
		want            []string
	}{
		{"approvers outside", approver + ", " + stranger, []string{requester}, []string{"No one can approve", "<@" + approver + "> cannot see this conversation", "<@" + stranger + "> cannot see this conversation"}},
		{"a group outside", "SOUTSIDE1", []string{requester}, []string{"No one can approve", "<!subteam^SOUTSIDE1> holds no one who can see this conversation"}},
		{"an approver inside", approver + ", " + stranger, []string{requester, approver}, nil},
		{"a group with one inside", "SOUTSIDE1", []string{requester, approver}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			const private = "CPRIVSEE02"
			e := newEnv(t, storeKinds(t)[0])
			e.policy = `
policy:
  rules:
    - {id: eu-deploys, tool: deploy, when: 'args.region == "eu"', verdict: ask, approvers: [` + c.approvers + `]}
    - {id: deploys, tool: deploy, verdict: ask}
`
			e.slack.AddUserGroup("SOUTSIDE1", stranger, approver)
			e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: append(c.members, e.slack.BotUserID())})
			logs := e.debugLogs()
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
			ts := e.slack.Mention(private, requester, "deploy api 7")
			e.cardIn(private, ts, "deploy")
			waitForUndecidableCheck(t, logs)
			notice := undecidableNotice(e, private, ts)
			if c.want == nil {
				if notice != "" {
					t.Errorf("told %q, though %s can decide", notice, approver)
				}
				return
			}
			for _, w := range append(c.want, "`eu-deploys`") {
				if !strings.Contains(notice, w) {
					t.Errorf("notice %q does not say %q", notice, w)
				}
			}
		})
	}
}
