package slackapp_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// lastSubmission returns the id of the last view submission envelope sent.
func (e *env) lastSubmission() string {
	e.t.Helper()
	var id string
	for _, env := range e.slack.Envelopes() {
		if env.InteractionType == "view_submission" {
			id = env.ID
		}
	}
	if id == "" {
		e.t.Fatal("no view submission was sent")
	}
	return id
}

// submitEdit has user submit args in the Edit form of the card at ts and
// returns the form's ack.
func (e *env) submitEdit(user, ts, args string) string {
	e.t.Helper()
	_, err := e.slack.Click(user, channel, ts, slackapp.ActionEdit, "")
	must(e.t, err)
	view := e.modal(user, slackapp.CallbackEdit)
	ack, err := e.slack.SubmitView(user, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: args}}, "")
	must(e.t, err)
	return string(ack)
}

// An Edit submission on a call that needs two approvals, delivered again
// after its first delivery recorded the edit, is the submitter's own: the
// form closes with no error, and the edit is counted once.
func TestRedeliveredEditOfATwoPersonCallClosesTheForm(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Deployed the edited version.")
			const edited = `{"service":"api","version":"1.0.1"}`
			if ack := e.submitEdit(other, card, edited); strings.Contains(ack, "errors") {
				t.Fatalf("the edit was refused: %s", ack)
			}
			e.waitCount(ts, "1 of 2 approvals: <@"+other+"> · the arguments were edited")
			id := e.lastSubmission()
			must(t, e.slack.Redeliver(id))
			ack, err := e.slack.WaitAck(id, 10*time.Second)
			must(t, err)
			if strings.Contains(string(ack), "errors") {
				t.Errorf("the redelivered edit, recorded by its first delivery, was answered with an error: %s", ack)
			}
			_, err = e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed the edited version.")
			if args := e.deployArgs(); len(args) != 1 || args[0] != edited {
				t.Errorf("deploy ran with %q, want once with the edited %s", args, edited)
			}
		})
	}
}

// An edit by one of the card's approvers into arguments under a rule that
// only others may approve is refused in words naming that rule and its
// approvers, not the card's approvers, the submitter among them.
func TestEditIntoAnotherRulesApproversSaysWhoMayApprove(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = `
policy:
  default: ask
  rules:
    - id: billing
      tool: deploy
      when: 'args.service == "billing"'
      verdict: ask
      approvers: [UOTHER0001]
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UOTHER0001]
`
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	ack := e.submitEdit(approver, card.TS, `{"service":"billing","version":"3"}`)
	if !strings.Contains(ack, `"response_action":"errors"`) {
		t.Fatalf("the edit into another rule's approvers was not refused: %s", ack)
	}
	if strings.Contains(ack, "@"+approver) {
		t.Errorf("the refusal names the submitter among those who may approve the edited call: %s", ack)
	}
	if !strings.Contains(ack, "billing") || !strings.Contains(ack, "which only @"+other+" may approve") {
		t.Errorf("the refusal does not say that the edited arguments need rule billing's approver %s: %s", other, ack)
	}
	if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 {
		t.Errorf("a refused edit changed the card")
	}
}

// An edit whose arguments are the card's own (the same canonical JSON,
// typed with a \u escape and other spacing) is an approval: the model is
// not told that a person changed the arguments, and the card does not
// say they were edited.
func TestEditToTheSameArgumentsIsAnApproval(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	if ack := e.submitEdit(approver, card.TS, `{ "version": "3", "service": "\u0061pi" }`); strings.Contains(ack, "errors") {
		t.Fatalf("refused: %s", ack)
	}
	e.answer(ts, "Deployed.")
	if got := e.deployArgs(); len(got) != 1 || got[0] != `{"service":"api","version":"3"}` {
		t.Fatalf("deploy ran with %q", got)
	}
	results := toolResults(e.request(2))
	if len(results) != 1 || strings.Contains(results[0].Content, "edited the arguments") {
		t.Errorf("the model is told a person changed arguments that are the card's own: %+v", results)
	}
	updated := e.waitThread(ts, "with the approved card", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "Approved by <@"+approver+">")
	})
	if strings.Contains(blocksText(updated), "Edited by") {
		t.Errorf("the card says the arguments were edited, though they are the card's own: %s", blocksText(updated))
	}
}

// Under a two-person rule, an edit that leaves the arguments as they are
// is the editor's approval of them: it keeps the approval counted before,
// and with it the call is decided and runs.
func TestEditToTheSameArgumentsKeepsTheCount(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e, ts, card := startTwoPerson(t, kind, "Deployed.")
			_, err := e.slack.Click(approver, channel, card, slackapp.ActionApprove, "")
			must(t, err)
			e.waitCount(ts, "1 of 2 approvals: <@"+approver+">")
			if ack := e.submitEdit(other, card, `{"version":"1", "service":"api"}`); strings.Contains(ack, "errors") {
				t.Fatalf("refused: %s", ack)
			}
			e.answer(ts, "Deployed.")
			if args := e.deployArgs(); len(args) != 1 || args[0] != `{"service":"api","version":"1"}` {
				t.Errorf("deploy ran with %q, want once with the card's arguments", args)
			}
			m := e.waitIn(channel, ts, "the decided card with both approvals", func(m fakeslack.Message) bool {
				return m.TS == card && !isCard(m) && strings.Contains(blocksText(m), "2 of 2 approvals: <@"+approver+">, <@"+other+">")
			})
			if text := blocksText(m); strings.Contains(text, "edited") || strings.Contains(text, "Edited by") {
				t.Errorf("the card says the arguments were edited, though they are the card's own: %s", text)
			}
		})
	}
}

// A reason that is only white space (Slack's required input lets it
// through), or only characters no one can see, is refused in words for a
// person, without the call's id or an error chain, and the form stays
// open.
func TestBlankRejectReasonIsRefusedInPlainWords(t *testing.T) {
	for _, blank := range []string{"  \n ", "\u200b\u3164"} {
		t.Run(fmt.Sprintf("%q", blank), func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)))
			ts := e.slack.Mention(channel, requester, "deploy api 3")
			card := e.card(ts, "deploy")
			callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionApprove), "~")
			ack := string(e.reject(approver, channel, card.TS, blank))
			if !strings.Contains(ack, `"response_action":"errors"`) || !strings.Contains(ack, "reason") {
				t.Fatalf("a blank reason was not refused in words: %s", ack)
			}
			if strings.Contains(ack, callID) || strings.Contains(ack, "invalid decision") || strings.Contains(ack, "decide ") {
				t.Errorf("the form's error shows the bot's internal error chain: %s", ack)
			}
			if open := e.slack.OpenModals(approver); len(open) == 0 {
				t.Error("the form closed although the reason was refused")
			}
		})
	}
}

// A reply to a question that is only white space, or only characters no
// one can see (a zero-width space, a Hangul filler, a braille blank), is
// refused in words for a person, without the call's id or an error chain.
func TestBlankReplyIsRefusedInPlainWords(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)))
	ts := e.slack.Mention(channel, requester, "deploy somewhere")
	card := e.waitThread(ts, "with a question card", func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
	})
	callID, _, _ := strings.Cut(buttonValue(t, card, slackapp.ActionRespond), "~")
	_, err := e.slack.Click(requester, channel, card.TS, slackapp.ActionRespond, "")
	must(t, err)
	view := e.modal(requester, slackapp.CallbackRespond)
	for _, blank := range []string{" \t\n", "\u200b", " \u3164 ", "\u2800\u200b\n"} {
		raw, err := e.slack.SubmitView(requester, view.ID, map[string]map[string]string{slackapp.BlockAnswer: {slackapp.ActionAnswer: blank}}, "")
		must(t, err)
		ack := string(raw)
		if !strings.Contains(ack, `"response_action":"errors"`) || !strings.Contains(ack, "answer") {
			t.Fatalf("the blank answer %q was not refused in words: %s", blank, ack)
		}
		if strings.Contains(ack, callID) || strings.Contains(ack, "invalid decision") || strings.Contains(ack, "decide ") {
			t.Errorf("the form's error shows the bot's internal error chain: %s", ack)
		}
	}
}

// A message in a thread paused on a question is told that it does not
// answer it, and how to: with Reply on the question's card.
func TestThreadReplyToAQuestionIsToldHowToAnswer(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)))
	ts := e.slack.Mention(channel, requester, "deploy somewhere")
	e.waitThread(ts, "with a question card", func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
	})
	e.slack.ThreadReply(channel, ts, requester, "eu-west-1")
	note := e.answer(ts, "waiting for an answer to the question of `ask_human`")
	if !strings.Contains(note.Text, "*Reply*") || strings.Contains(note.Text, "approval") {
		t.Errorf("the thread was told %q, want how to answer the question", note.Text)
	}
}

// An Edit submission refused because its submitter's own Approve decided
// the call first (from another copy, another device), delivered again by
// Slack (its first ack missed), is not taken for its first delivery: the
// submitter is told the call was decided, not left to believe their
// arguments ran.
func TestRedeliveredEditAfterOwnApproveIsRefused(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(approver, slackapp.CallbackEdit)
	_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed.")
	first, err := e.slack.SubmitView(approver, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"2"}`}}, "")
	must(t, err)
	if !strings.Contains(string(first), "errors") {
		t.Fatalf("the edit of a call already approved was taken: %s", first)
	}
	id := e.lastSubmission()
	must(t, e.slack.Redeliver(id))
	ack, err := e.slack.WaitAck(id, 10*time.Second)
	must(t, err)
	if !strings.Contains(string(ack), "errors") {
		t.Errorf("the redelivered edit closes the form with no error, though deploy ran with %q, not the edit: %s", e.deployArgs(), ack)
	}
}

// An Edit submission that changed nothing (the card's arguments, spaced
// otherwise) is its submitter's Approve: delivered again after its first
// delivery approved the call, it closes the form.
func TestRedeliveredEditThatChangedNothingClosesTheForm(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	if ack := e.submitEdit(approver, card.TS, `{ "version": "1", "service": "api" }`); strings.Contains(ack, "errors") {
		t.Fatalf("the edit that changed nothing was refused: %s", ack)
	}
	e.answer(ts, "Deployed.")
	id := e.lastSubmission()
	must(t, e.slack.Redeliver(id))
	ack, err := e.slack.WaitAck(id, 10*time.Second)
	must(t, err)
	if strings.Contains(string(ack), "errors") {
		t.Errorf("the redelivered edit, which approved the call, was answered with an error: %s", ack)
	}
}

// Edited JSON that does not parse is refused saying where, naming the
// character as typed; JSON whose quotes Slack made typographic (a phone,
// smart punctuation) is told so, not read as straight quotes.
func TestEditThatIsNotJSONIsExplained(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	for _, tt := range []struct{ args, want string }{
		{`{“service”: “api”, “version”: “2”}`, "its quotes are typographic"},
		{"{\"service\": \"api\",\n  \"version\": «2»}", `Not valid JSON at line 2, column 14: unexpected character '«' (U+00AB)`},
		{`{"service": "api",, "version": "2"}`, "Not valid JSON at line 1, column 19: invalid character ','"},
	} {
		ack := e.submitEdit(approver, card.TS, tt.args)
		if !strings.Contains(ack, tt.want) || strings.Contains(ack, "'â'") || strings.Contains(ack, "'Â'") {
			t.Errorf("the edit %s was answered %s, want it to say %q", tt.args, ack, tt.want)
		}
	}
	if args := e.deployArgs(); len(args) != 0 {
		t.Errorf("deploy ran with %q after edits that are not JSON", args)
	}
}
