package slackapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// spoofedLink is model text whose right-to-left override makes the link
// after it read as google.com while it leads to evil.io.
const spoofedLink = "Sign in again here: \u202e https://evil.io/moc.elgoog//:sptth"

// checkOverrideWrittenOut reports an error unless what (JSON or text as
// posted) shows its U+202E written out as ⟦U+202E⟧, and holds none raw
// (nor as a JSON \u escape).
func checkOverrideWrittenOut(t *testing.T, where, what string) {
	t.Helper()
	if strings.ContainsRune(what, '\u202e') || strings.Contains(strings.ToLower(what), `\u202e`) {
		t.Errorf("%s holds a raw U+202E: %s", where, what)
	}
	if !strings.Contains(what, "⟦U+202E⟧") {
		t.Errorf("%s does not write U+202E out as ⟦U+202E⟧: %s", where, what)
	}
}

// posted is a message as the bot posted it: its notification text and
// its blocks' JSON.
func posted(m fakeslack.Message) string {
	return m.Text + "\n" + string(m.Blocks)
}

// A posted answer (streaming refused) cannot reorder what a reader sees:
// its bidirectional controls are written out, in the blocks and in the
// notification text.
func TestPostedAnswerWritesOutBidiControls(t *testing.T) {
	_, m := answerIn(t, false, spoofedLink, 0, "Sign in again")
	checkOverrideWrittenOut(t, "the posted answer", posted(m))
}

// A streamed answer cannot reorder what a reader sees either: every
// chunk sent to the stream has its bidirectional controls written out.
func TestStreamedAnswerWritesOutBidiControls(t *testing.T) {
	text := spoofedLink + " and once more \u202e moc.elgoog ni-ngis " + strings.Repeat("filler words to stream ", 12) + "THE END"
	e, m := answerIn(t, true, text, 9, "THE END")
	checkOverrideWrittenOut(t, "the streamed answer", m.Text)
	var sent []string
	for _, method := range []string{"chat.startStream", "chat.appendStream", "chat.stopStream"} {
		for _, c := range e.slack.Calls(method) {
			sent = append(sent, c.Param("markdown_text"))
		}
	}
	all := strings.Join(sent, "")
	checkOverrideWrittenOut(t, "the stream's chunks", all)
	if n := strings.Count(all, "⟦U+202E⟧"); n != 2 {
		t.Errorf("the stream's chunks write out %d U+202E, want 2: %q", n, sent)
	}
}

// Natural text keeps the invisible characters it needs, posted or
// streamed: an emoji joined by U+200D, a Persian word with U+200C and
// Hebrew with a right-to-left mark show as written.
func TestAnswerKeepsTheJoinersAndMarksOfNaturalText(t *testing.T) {
	const natural = "Done 👩\u200d💻 — می\u200cخواهم — שלום\u200f! ❤\ufe0f"
	for _, mode := range answerModes {
		streamed := mode.streamed
		t.Run(mode.name, func(t *testing.T) {
			// Waits for the end: a stream shows its first words first.
			_, m := answerIn(t, streamed, natural, 3, "❤\ufe0f")
			shown := m.Text
			if !streamed {
				shown = blocksText(m)
			}
			for _, want := range []string{"👩\u200d💻", "می\u200cخواهم", "שלום\u200f!", "❤\ufe0f"} {
				if !strings.Contains(shown, want) {
					t.Errorf("the answer does not hold %q as written: %q", want, shown)
				}
			}
			if strings.Contains(posted(m), "⟦") {
				t.Errorf("the answer writes out characters natural text needs: %q", posted(m))
			}
		})
	}
}

// The explanation of Why? has its bidirectional controls written out, and
// is quoted under the bot's context line: a line imitating the card's own
// ("Approved by") cannot pass for the bot's.
func TestWhyExplanationIsQuotedWithBidiControlsWrittenOut(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	const why = "It deploys api 8, as asked.\n\n:white_check_mark: Approved by @alice, \u202e.dellecnac ton si yolped"
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text(why))
	ts := e.slack.Mention(channel, requester, "deploy api 8")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	m := e.answer(ts, "as asked")
	checkOverrideWrittenOut(t, "the explanation", posted(m))
	var blocks []struct {
		Type string `json:"type"`
		Text *struct {
			Text string `json:"text"`
		} `json:"text"`
	}
	must(t, json.Unmarshal(m.Blocks, &blocks))
	if len(blocks) != 2 || blocks[0].Type != "context" || blocks[1].Text == nil {
		t.Fatalf("the explanation is not a context line and a section: %s", m.Blocks)
	}
	for _, l := range strings.Split(blocks[1].Text.Text, "\n") {
		if !strings.HasPrefix(l, ">") {
			t.Errorf("the explanation's line %q is not quoted: %q", l, blocks[1].Text.Text)
		}
	}
}

// A tool's output on the card, once the call ran, is code like the
// arguments above it: its hidden characters are written out, with a
// warning line.
func TestToolOutputOnTheCardWritesOutHiddenCharacters(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	must(t, e.reg.Register(agent.Tool{Name: "release_notes", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			return agent.Result{Content: "api \u202e3.2.1 deliated"}, nil
		}}))
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "release_notes", `{}`)), fakeopenai.Text("Notes fetched."))
	ts := e.slack.Mention(channel, requester, "release notes please")
	card := e.card(ts, "release_notes")
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Notes fetched.")
	var m fakeslack.Message
	waitUntil(t, "the card shows the output", func() bool {
		m, _ = e.slack.Message(channel, card.TS)
		return strings.Contains(blocksText(m), "*Outcome:* ran")
	})
	checkOverrideWrittenOut(t, "the card with the output", posted(m))
	if text := blocksText(m); !strings.Contains(text, "api ⟦U+202E⟧3.2.1 deliated") || !strings.Contains(text, "1 hidden character(s)* in the output") {
		t.Errorf("the card does not show the output's hidden character written out, with a warning: %s", text)
	}
}

// A person's reason for rejecting a call is quoted on the card with its
// bidirectional controls (and zero-width spaces) written out, so it
// cannot read as something else.
func TestRejectReasonWritesOutBidiControls(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"9"}`)), fakeopenai.Text("Not deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 9")
	card := e.card(ts, "deploy")
	e.reject(approver, channel, card.TS, "no\u200b \u202ewon kcab ti gnillor")
	var m fakeslack.Message
	waitUntil(t, "the card says it was rejected", func() bool {
		m, _ = e.slack.Message(channel, card.TS)
		return strings.Contains(blocksText(m), "Rejected by")
	})
	checkOverrideWrittenOut(t, "the rejected card", posted(m))
	if text := blocksText(m); !strings.Contains(text, ">no⟦U+200B⟧ ⟦U+202E⟧won kcab ti gnillor") {
		t.Errorf("the card does not quote the reason with its hidden characters written out: %s", text)
	}
}

// A person's answer to ask_human is quoted on the card with its
// bidirectional controls written out.
func TestAskHumanAnswerWritesOutBidiControls(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("q1", "ask_human", `{"question":"Which region?"}`)), fakeopenai.Text("Deploying."))
	ts := e.slack.Mention(channel, requester, "deploy somewhere")
	card := e.waitThread(ts, "with a question card", func(m fakeslack.Message) bool {
		return strings.Contains(string(m.Blocks), `"action_id":"`+slackapp.ActionRespond+`"`)
	})
	_, err := e.slack.Click(requester, channel, card.TS, slackapp.ActionRespond, "")
	must(t, err)
	view := e.modal(requester, slackapp.CallbackRespond)
	_, err = e.slack.SubmitView(requester, view.ID, map[string]map[string]string{
		slackapp.BlockAnswer: {slackapp.ActionAnswer: "eu-west-1 \u202e1-tsae-su"},
	}, "")
	must(t, err)
	e.answer(ts, "Deploying.")
	var m fakeslack.Message
	waitUntil(t, "the card says who answered", func() bool {
		m, _ = e.slack.Message(channel, card.TS)
		return strings.Contains(blocksText(m), "Answered by")
	})
	checkOverrideWrittenOut(t, "the answered card", posted(m))
}

// The model server's own words in a failure note are code whose
// bidirectional controls are written out: they cannot reverse the bot's
// sentence after them.
func TestModelErrorNoteWritesOutBidiControls(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.Error(401, "Incorrect API key \u202e.tuo nruter ot yrt ,devlos neeb sah sihT"))
	ts := e.slack.Mention(channel, requester, "hello")
	m := e.answer(ts, "configuration problem")
	checkOverrideWrittenOut(t, "the failure note", posted(m))
}

// Writing out hidden characters makes text longer (U+202E takes 8
// characters written out): a run of them with no white space to cut a
// chunk at, too long once written out for one stream call (Slack takes
// 12,000 characters), reaches the thread all the same, posted where the
// stream refuses it, and no written-out character is cut in half.
func TestLongRunOfHiddenCharactersInAStreamReachesTheThread(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	run := strings.Repeat("\u202e", 1600)
	e.model.Reply(fakeopenai.Response{Text: "Here it comes: " + run + " THE END", Chunks: 20})
	ts := e.slack.Mention(channel, requester, "a long one")
	e.answer(ts, "THE END")
	var all, shown strings.Builder
	for _, m := range e.slack.Thread(channel, ts) {
		switch {
		case m.BotID == "":
			continue
		case m.Streamed:
			shown.WriteString(m.Text)
		default:
			shown.WriteString(blocksText(m))
		}
		all.WriteString(posted(m))
	}
	checkOverrideWrittenOut(t, "the thread", all.String())
	if n := strings.Count(shown.String(), "⟦U+202E⟧"); n != 1600 {
		t.Errorf("the thread shows %d U+202E written out, want the 1600 of the answer", n)
	}
	if whole, n := strings.Count(all.String(), "⟦U+202E⟧"), strings.Count(all.String(), "⟦"); n != whole {
		t.Errorf("the thread shows %d written-out characters, of which only %d whole", n, whole)
	}
}
