package slackapp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

var testSchema = json.RawMessage(`{
	"type": "object",
	"properties": {
		"path": {"type": "string", "description": "File to delete. <!here> must not ping"},
		"recursive": {"type": "boolean"},
		"mode": {"type": ["string", "null"], "enum": ["soft", "hard"]}
	},
	"required": ["path"]
}`)

func TestGoldenModals(t *testing.T) {
	const callID = "3f9a0c1d2e4b5a6c.0"
	tests := map[string]slack.ModalViewRequest{
		"modal_reject":        RejectModal(callID),
		"modal_edit":          EditModal(callID, "files__delete_path", testArgs, testSchema),
		"modal_edit_noschema": EditModal(callID, "files__delete_path", testArgs, nil),
		"modal_respond":       RespondModal(callID, "Which **region**? <!channel>"),
		"modal_args":          ArgsModal("files__delete_path", hostileArgs),
	}
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, name, m)
			checkLimits(t, name, m, maxViewBlocks)
		})
	}
}

func TestModalIdentity(t *testing.T) {
	const callID = "abc.1"
	tests := []struct {
		name       string
		modal      slack.ModalViewRequest
		callback   string
		metadata   string
		submit     bool
		inputBlock string
	}{
		{"reject", RejectModal(callID), CallbackReject, callID, true, BlockRejectReason},
		{"edit", EditModal(callID, "t", testArgs, nil), CallbackEdit, callID, true, BlockEditArgs},
		{"respond", RespondModal(callID, "q?"), CallbackRespond, callID, true, BlockAnswer},
		{"args", ArgsModal("t", testArgs), CallbackViewArgs, "", false, ""},
	}
	for _, tt := range tests {
		m := tt.modal
		if m.Type != slack.VTModal || m.CallbackID != tt.callback || m.PrivateMetadata != tt.metadata {
			t.Errorf("%s: type %q, callback %q, metadata %q; want modal, %q, %q", tt.name, m.Type, m.CallbackID, m.PrivateMetadata, tt.callback, tt.metadata)
		}
		if (m.Submit != nil) != tt.submit {
			t.Errorf("%s: has submit button %v, want %v", tt.name, m.Submit != nil, tt.submit)
		}
		var inputs []string
		for _, b := range m.Blocks.BlockSet {
			if in, ok := b.(*slack.InputBlock); ok {
				inputs = append(inputs, in.BlockID)
				if in.Optional {
					t.Errorf("%s: input %s is optional, want required", tt.name, in.BlockID)
				}
				el, ok := in.Element.(*slack.PlainTextInputBlockElement)
				if !ok || !el.Multiline {
					t.Errorf("%s: input %s is not a multi-line plain-text input", tt.name, in.BlockID)
				}
			}
		}
		want := []string{}
		if tt.inputBlock != "" {
			want = []string{tt.inputBlock}
		}
		if strings.Join(inputs, ",") != strings.Join(want, ",") {
			t.Errorf("%s: input blocks %v, want %v", tt.name, inputs, want)
		}
	}
}

func TestEditModalPrefill(t *testing.T) {
	m := EditModal("c", "t", json.RawMessage(`{"path":"<!here> & co","n":1}`), nil)
	var el *slack.PlainTextInputBlockElement
	for _, b := range m.Blocks.BlockSet {
		if in, ok := b.(*slack.InputBlock); ok {
			el = in.Element.(*slack.PlainTextInputBlockElement)
		}
	}
	if el == nil {
		t.Fatal("no input")
	}
	// Plain-text inputs are not mrkdwn: the JSON is prefilled exactly as
	// it is, so that submitting it unchanged gives the same arguments.
	want := "{\n  \"path\": \"<!here> & co\",\n  \"n\": 1\n}"
	if el.InitialValue != want {
		t.Errorf("initial value = %q, want %q", el.InitialValue, want)
	}
	if el.ActionID != ActionEditArgs || el.MaxLength != maxInputValue {
		t.Errorf("input action %q, max length %d; want %q, %d", el.ActionID, el.MaxLength, ActionEditArgs, maxInputValue)
	}
}

func TestEditModalLongArgs(t *testing.T) {
	// Pretty JSON is over the limit, compact JSON is under it.
	items := make([]int, 700)
	args, _ := json.Marshal(map[string]any{"items": items})
	m := EditModal("c", "t", args, nil)
	found := false
	for _, b := range m.Blocks.BlockSet {
		if in, ok := b.(*slack.InputBlock); ok {
			v := in.Element.(*slack.PlainTextInputBlockElement).InitialValue
			found = true
			if v != string(args) {
				t.Errorf("long arguments prefilled as %d characters, want the compact JSON (%d)", len(v), len(args))
			}
		}
	}
	if !found {
		t.Error("arguments that fit compact have no input")
	}

	// Too long even compact: no input, no submit, and a note.
	m = EditModal("c", "t", hugeArgs(), nil)
	for _, b := range m.Blocks.BlockSet {
		if _, ok := b.(*slack.InputBlock); ok {
			t.Error("arguments over 3000 characters have an input")
		}
	}
	if m.Submit != nil {
		t.Error("arguments over 3000 characters have a submit button")
	}
	if !strings.Contains(string(render(t, m)), "cannot be edited here") {
		t.Error("arguments over 3000 characters: no explanation")
	}
	checkLimits(t, "edit huge", m, maxViewBlocks)
}

func TestSchemaSummary(t *testing.T) {
	got, n := schemaSummary(testSchema)
	if n != 0 {
		t.Errorf("schemaSummary counts %d hidden characters, want none", n)
	}
	want := "• `path` (`string`, required) — `File to delete. &lt;!here&gt; must not ping`\n" +
		"• `mode` (`string|null`, one of `\"soft\"`, `\"hard\"`)\n" +
		"• `recursive` (`boolean`)"
	if got != want {
		t.Errorf("schemaSummary = %q, want %q", got, want)
	}
	// A tool's schema cannot format the form's own words: its values and
	// descriptions are code.
	hostile, _ := schemaSummary(json.RawMessage(`{"required":["path"],"properties":{` +
		`"path":{"type":"string","enum":["~/tmp","/srv"],"description":"x~"},` +
		`"mode":{"type":"string","description":"a` + "```" + `"},"zone":{"type":"string","description":"` + "```" + `b *c*"}}}`))
	if want := "• `path` (`string`, one of `\"~/tmp\"`, `\"/srv\"`, required) — `x~`"; !strings.HasPrefix(hostile, want) {
		t.Errorf("schemaSummary of a hostile schema = %q, want it to start %q", hostile, want)
	}
	if strings.Contains(hostile, "```") {
		t.Errorf("schemaSummary of a hostile schema = %q: three backticks open a code block", hostile)
	}
	for _, s := range []string{"", "null", "not json", `{"type":"string"}`} {
		if got, _ := schemaSummary(json.RawMessage(s)); got != "" {
			t.Errorf("schemaSummary(%q) = %q, want empty", s, got)
		}
	}
}

// The characters of a schema that cannot be seen (a right-to-left
// override that turns "txt.exe" around) are written out, and its allowed
// values are shown as the tool spells them: "<none>", not "\u003cnone\u003e".
func TestSchemaSummaryWritesOutHiddenCharacters(t *testing.T) {
	schema := json.RawMessage(`{"required":["target"],"properties":{"target":{"type":"string","enum":["<none>","a\u200Bb"],"description":"file to keep: \u202Etxt.exe\u202C (never deleted)"}}}`)
	got, n := schemaSummary(schema)
	want := "• `target` (`string`, one of `\"&lt;none&gt;\"`, `\"a⟦U+200B⟧b\"`, required) — `file to keep: ⟦U+202E⟧txt.exe⟦U+202C⟧ (never deleted)`"
	if got != want || n != 3 {
		t.Errorf("schemaSummary = %q, %d hidden; want %q, 3", got, n, want)
	}
	m := EditModal("C1.0~fp", "rm_file", json.RawMessage(`{"target":"a"}`), schema)
	if text := string(render(t, m)); !strings.Contains(text, "3 hidden character(s)* in the tool's description of its parameters") {
		t.Errorf("the edit form does not warn of the schema's hidden characters:\n%s", text)
	}
}

func TestArgsModalHuge(t *testing.T) {
	big := strings.Repeat("<!channel> abc\n", 40000) // ~720k characters escaped
	args, _ := json.Marshal(map[string]string{"content": big})
	m := ArgsModal("t", args)
	checkLimits(t, "args huge", m, maxViewBlocks)
	// The modal is filled up to the blocks or the bytes Slack takes in a
	// view, whichever comes first.
	if n, size := len(m.Blocks.BlockSet), len(mustJSON(m)); n != maxViewBlocks && (size < maxViewBytes-10000 || size > 250000) {
		t.Errorf("huge arguments: %d blocks and %d bytes, want all %d blocks used or just under %d bytes", n, size, maxViewBlocks, maxViewBytes)
	}
	out := string(render(t, m))
	if !strings.Contains(out, "more characters not shown") {
		t.Error("huge arguments: no note about the characters left out")
	}
	if strings.Contains(out, "<!channel>") {
		t.Error("huge arguments: <!channel> came through")
	}
	if ArgsShownInFull(args, false) {
		t.Error("ArgsShownInFull of arguments the modal cuts = true")
	}

	// Arguments that fit are shown whole, over several sections.
	args = hugeArgs()
	if !ArgsShownInFull(args, false) {
		t.Error("ArgsShownInFull of arguments the modal shows whole = false")
	}
	m = ArgsModal("t", args)
	checkLimits(t, "args long", m, maxViewBlocks)
	var shown strings.Builder
	for _, b := range m.Blocks.BlockSet[1:] {
		s := b.(*slack.SectionBlock).Text.Text
		shown.WriteString(strings.TrimSuffix(strings.TrimPrefix(s, "```\n"), "\n```") + "\n")
	}
	if got, want := words(shown.String()), words(codeBody(prettyJSON(args))); got != want {
		t.Errorf("long arguments not shown whole: %d characters, want %d", len(got), len(want))
	}
}

// submitted returns a view as Slack sends it on submission, with value in
// blockID/actionID.
func submitted(callID, blockID, actionID, value string) slack.View {
	return slack.View{
		PrivateMetadata: callID,
		State: &slack.ViewState{Values: map[string]map[string]slack.BlockAction{
			blockID: {actionID: {Value: value}},
		}},
	}
}

func TestReadSubmissions(t *testing.T) {
	tests := []struct {
		name string
		got  string
		want string
	}{
		{"reject", ReadRejectReason(submitted("c", BlockRejectReason, ActionRejectReason, "  use staging\n")), "use staging"},
		{"edit", ReadEditedArgs(submitted("c", BlockEditArgs, ActionEditArgs, "\n{\"a\":1}\n")), `{"a":1}`},
		{"answer", ReadAnswer(submitted("c", BlockAnswer, ActionAnswer, "eu-west-1")), "eu-west-1"},
		{"wrong block", ReadAnswer(submitted("c", BlockEditArgs, ActionEditArgs, "x")), ""},
		{"no state", ReadRejectReason(slack.View{}), ""},
		{"call id", ReadCallID(submitted("3f9a.0", BlockAnswer, ActionAnswer, "")), "3f9a.0"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// TestReadSubmissionJSON reads values from a submission payload decoded the
// way slack-go decodes interaction callbacks.
func TestReadSubmissionJSON(t *testing.T) {
	payload := `{"private_metadata":"3f9a.0","callback_id":"reject_modal","state":{"values":{"reject_reason":{"reject_reason_input":{"type":"plain_text_input","value":"Wrong bucket"}}}}}`
	var v slack.View
	if err := json.Unmarshal([]byte(payload), &v); err != nil {
		t.Fatal(err)
	}
	if got := ReadRejectReason(v); got != "Wrong bucket" {
		t.Errorf("ReadRejectReason = %q, want %q", got, "Wrong bucket")
	}
	if v.CallbackID != CallbackReject || ReadCallID(v) != "3f9a.0" {
		t.Errorf("callback %q, call id %q", v.CallbackID, ReadCallID(v))
	}
}

func TestRespondModalLongQuestion(t *testing.T) {
	q := longAnswer(400000)
	m := RespondModal("c", q)
	checkLimits(t, "respond long", m, maxViewBlocks)
	last := m.Blocks.BlockSet[len(m.Blocks.BlockSet)-1]
	if in, ok := last.(*slack.InputBlock); !ok || in.BlockID != BlockAnswer {
		t.Errorf("long question: last block is %T, want the answer input", last)
	}
	if !strings.Contains(string(render(t, m)), "more parts of the question not shown") {
		t.Error("long question: no note about the parts left out")
	}
}

// The Edit form's field holds arguments with invisible characters as they
// are (they are sent back unchanged), with a warning above it that writes
// them out.
func TestEditModalRevealsHiddenCharacters(t *testing.T) {
	m := EditModal("c1", "files__rename", json.RawMessage("{\"path\":\"report\u202etxt.sh\"}"), nil)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if !strings.Contains(got, "hidden character") || !strings.Contains(got, "⟦U+202E⟧") {
		t.Errorf("the Edit form has no warning writing out U+202E: %s", got)
	}
	if !strings.Contains(got, `"initial_value":"{\n  \"path\": \"report`+"\u202e"+`txt.sh\"\n}"`) {
		t.Errorf("the field does not hold the arguments as they are: %s", got)
	}
	if clean, _ := json.Marshal(EditModal("c1", "t", json.RawMessage(`{"path":"a"}`), nil)); strings.Contains(string(clean), "hidden character") {
		t.Error("a warning without hidden characters")
	}
}

// The reply form shows a question of many short lines in full: each
// section, once quoted (a '>' per line), stays within Slack's limit.
func TestRespondModalShowsEveryLineQuoted(t *testing.T) {
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "- o%d\n", i)
	}
	m := RespondModal("c", "Pick one:\n"+b.String())
	got := string(render(t, m))
	var missing []int
	for i := range 1000 {
		if !strings.Contains(got, fmt.Sprintf(">• o%d\\n", i)) && !strings.Contains(got, fmt.Sprintf(">• o%d\"", i)) {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d of 1000 options are not in the reply form, quoted (first %v)", len(missing), missing[0])
	}
}

// A question the reply form cannot show whole (here many short
// paragraphs, each a section of its own, far from the arguments' bound)
// is not shown in full: no one is asked to answer it. One that fits is
// shown to its last word.
func TestQuestionShownInFull(t *testing.T) {
	question := func(paragraphs int) json.RawMessage {
		q := "May I proceed?\n\n" + strings.Repeat(strings.Repeat("y", 760)+"\n\n", paragraphs) + "THE LAST WORD"
		args, err := json.Marshal(map[string]string{"question": q})
		if err != nil {
			t.Fatal(err)
		}
		return args
	}
	long := question(120)
	if !ArgsShownInFull(long, false) {
		t.Fatal("the arguments of the long question are not shown in full; the test proves nothing")
	}
	if ArgsShownInFull(long, true) {
		t.Error("ArgsShownInFull of a question the reply form cuts = true")
	}
	fits := question(90)
	if !ArgsShownInFull(fits, true) {
		t.Fatal("ArgsShownInFull of a question the reply form shows whole = false")
	}
	var q struct{ Question string }
	if err := json.Unmarshal(fits, &q); err != nil {
		t.Fatal(err)
	}
	m := RespondModal("c1", q.Question)
	checkLimits(t, "respond long", m, maxViewBlocks)
	if out := string(render(t, m)); !strings.Contains(out, "THE LAST WORD") || strings.Contains(out, "not shown") {
		t.Error("the reply form does not show the whole question")
	}
	if !ArgsShownInFull(json.RawMessage(`{"question":"ok?"}`), true) || !ArgsShownInFull(json.RawMessage(`{}`), true) {
		t.Error("a short or empty question is not shown in full")
	}
}
