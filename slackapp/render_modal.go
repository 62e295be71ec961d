package slackapp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/slack-go/slack"
)

// maxReasonLength bounds the reason typed into RejectModal and the answer
// typed into RespondModal.
const maxReasonLength = 2000

// modal returns a modal view request with the common fields set.
func modal(callbackID, title, callID string, blocks []slack.Block) slack.ModalViewRequest {
	return slack.ModalViewRequest{
		Type:            slack.VTModal,
		CallbackID:      callbackID,
		Title:           plain(title, maxModalTitle),
		Close:           plain("Cancel", maxModalTitle),
		Blocks:          slack.Blocks{BlockSet: blocks},
		PrivateMetadata: callID,
	}
}

// textInput returns a required multi-line plain-text input block.
func textInput(blockID, actionID, label, placeholder, initial string, maxLen int) *slack.InputBlock {
	el := slack.NewPlainTextInputBlockElement(plain(placeholder, 150), actionID).
		WithMultiline(true).
		WithMaxLength(maxLen)
	if initial != "" {
		el = el.WithInitialValue(initial)
	}
	return slack.NewInputBlock(blockID, plain(label, 2000), nil, el)
}

// RejectModal is the modal opened by ActionReject: a required reason that
// the model will read verbatim, with the reviewer's name. Its
// PrivateMetadata is callID; read the reason with ReadRejectReason.
func RejectModal(callID string) slack.ModalViewRequest {
	m := modal(CallbackReject, "Reject with reason", callID, []slack.Block{
		section("The tool will not run. The assistant reads your reason word for word, with your name, and can try another way."),
		textInput(BlockRejectReason, ActionRejectReason, "Reason",
			"e.g. Use the staging bucket instead", "", maxReasonLength),
	})
	m.Submit = plain("Reject", maxModalTitle)
	return m
}

// EditModal is the modal opened by ActionEdit: the call's arguments as
// pretty-printed JSON in a plain-text input, and a short summary of the
// tool's JSON Schema when schema describes an object's properties. Its
// PrivateMetadata is callID; read the edited text with ReadEditedArgs.
//
// The handler validates the submission (JSON, then the schema, then the
// policy) and reports problems inline with
// slack.NewErrorsViewSubmissionResponse keyed by BlockEditArgs.
//
// A plain-text input holds at most 3000 characters. Arguments that do not
// fit even as compact JSON cannot be edited here: the modal then explains
// so and has no input and no Submit button.
func EditModal(callID, tool string, args json.RawMessage, schema json.RawMessage) slack.ModalViewRequest {
	blocks := []slack.Block{
		section("Edit the arguments of " + inlineCode(tool) + ". They are checked against the tool's schema and judged by the policy again before anything runs; the assistant is told that a person changed them."),
	}
	if summary, n := schemaSummary(schema); summary != "" {
		head := "*Parameters*\n"
		if strings.Contains(summary, "⟦") {
			head = hiddenWarning(n, "the tool's description of its parameters") + "\n" + head
		}
		blocks = append(blocks, section(head+summary))
	}

	initial := prettyJSON(args)
	if textLen(initial) > maxInputValue {
		var buf bytes.Buffer
		if json.Compact(&buf, args) == nil {
			initial = buf.String()
		}
	}
	if textLen(initial) > maxInputValue {
		blocks = append(blocks, section(fmt.Sprintf(
			":warning: These arguments are %d characters long, more than a Slack text field can hold (%d), so they cannot be edited here. Approve, deny or reject the call instead.",
			textLen(initial), maxInputValue)))
		m := modal(CallbackEdit, "Edit arguments", callID, blocks)
		m.Close = plain("Close", maxModalTitle)
		return m
	}

	// The field holds the arguments as they are, so that they are sent
	// back unchanged; the characters in them that cannot be seen are
	// written out above it.
	if shown, n := revealHidden(initial); shown != initial {
		head := hiddenWarning(n, "the arguments") + " The field below holds them as they are; they are:\n"
		text, _ := codeBlock(codeBody(shown), maxSectionText-textLen(head))
		blocks = append(blocks, section(head+text))
	}
	blocks = append(blocks, textInput(BlockEditArgs, ActionEditArgs, "Arguments (JSON)", "{}", initial, maxInputValue))
	m := modal(CallbackEdit, "Edit arguments", callID, blocks)
	m.Submit = plain("Run with these", maxModalTitle)
	return m
}

// maxSchemaProperties bounds the parameters listed by schemaSummary.
const maxSchemaProperties = 20

// schemaSummary lists an object schema's properties as "• `name` (type,
// required) — description", escaped and cut to fit a section, with the
// characters in them that cannot be seen written out (see revealHidden),
// and how many. It returns "" for anything else.
func schemaSummary(schema json.RawMessage) (string, int) {
	var s struct {
		Properties map[string]struct {
			Type        any    `json:"type"`
			Description string `json:"description"`
			Enum        []any  `json:"enum"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if len(bytes.TrimSpace(schema)) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return "", 0
	}
	hiddenChars := 0
	// code is the tool's text t as code, its hidden characters written
	// out.
	code := func(t string) string {
		shown, n := revealHidden(t)
		hiddenChars += n
		return inlineCode(shown)
	}
	required := make(map[string]bool, len(s.Required))
	for _, r := range s.Required {
		required[r] = true
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	// Required parameters first, then by name.
	sort.Slice(names, func(i, j int) bool {
		if required[names[i]] != required[names[j]] {
			return required[names[i]]
		}
		return names[i] < names[j]
	})

	var lines []string
	for i, name := range names {
		if i == maxSchemaProperties {
			lines = append(lines, fmt.Sprintf("… and %d more", len(names)-i))
			break
		}
		// What the tool's schema says (types, values, description) is
		// the tool's text, shown as code: as mrkdwn its * _ ~ and
		// backticks could format the form's own words.
		p := s.Properties[name]
		var attrs []string
		switch t := p.Type.(type) {
		case string:
			attrs = append(attrs, code(t))
		case []any:
			var ts []string
			for _, x := range t {
				ts = append(ts, fmt.Sprint(x))
			}
			attrs = append(attrs, code(strings.Join(ts, "|")))
		}
		if len(p.Enum) > 0 {
			var vs []string
			for _, v := range p.Enum {
				// As JSON spells it, < > & and all.
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				_ = enc.Encode(v)
				vs = append(vs, code(strings.TrimSuffix(b.String(), "\n")))
			}
			attrs = append(attrs, "one of "+strings.Join(vs, ", "))
		}
		if required[name] {
			attrs = append(attrs, "required")
		}
		line := "• " + code(name)
		if len(attrs) > 0 {
			line += " (" + strings.Join(attrs, ", ") + ")"
		}
		if d := oneLine(p.Description); d != "" {
			d, _ = truncate(d, 120)
			line += " — " + code(d)
		}
		lines = append(lines, line)
	}
	// Room for the heading, and for the warning of hidden characters.
	out, _ := truncate(strings.Join(lines, "\n"), maxSectionText-len("*Parameters*\n")-len(hiddenWarning(hiddenChars, "the tool's description of its parameters"))-1)
	return out, hiddenChars
}

// RespondModal is the modal opened by ActionRespond on an ask_human card:
// the model's question (converted and escaped) and a required answer. Its
// PrivateMetadata is callID; read the answer with ReadAnswer.
func RespondModal(callID, question string) slack.ModalViewRequest {
	blocks, _ := questionBlocks(question)
	blocks = append(blocks, textInput(BlockAnswer, ActionAnswer, "Your answer",
		"The assistant reads this as the answer to its question", "", maxReasonLength))
	m := modal(CallbackRespond, "Reply", callID, blocks)
	m.Submit = plain("Send", maxModalTitle)
	return m
}

// questionBlocks returns the blocks of RespondModal that show question,
// and whether they show it whole: as many as fit beside the answer's
// input, within the blocks and the bytes of a view (see maxViewBytes), the
// last of them a note of the parts left out if it does not.
func questionBlocks(question string) ([]slack.Block, bool) {
	blocks := []slack.Block{section("*Question*")}
	shown, n := revealHidden(question)
	if shown != question {
		blocks = append(blocks, section(hiddenWarning(n, "the question")))
	}
	// The question in full, leaving room for the input and a note.
	chunks := splitQuoted(MarkdownToMrkdwn(shown), maxSectionText)
	if len(chunks) == 0 {
		return nil, true
	}
	size := len(mustJSON(blocks))
	for i, c := range chunks {
		size += sectionJSON + jsonLen(c)
		if len(blocks) == maxViewBlocks-2 && i < len(chunks)-1 || size > maxViewBytes {
			return append(blocks, contextBlock(fmt.Sprintf("… %d more parts of the question not shown.", len(chunks)-i))), false
		}
		blocks = append(blocks, section(c))
	}
	return blocks, true
}

// ArgsModal is the modal opened by ActionViewArgs: a tool call's full
// arguments, pretty-printed and escaped, over as many code-block sections
// as they need within the 100-block limit of a modal and the bytes Slack
// takes in one (see maxViewBytes). Arguments longer than that end with a
// note saying how much was left out. It has nothing to submit; its
// callback id is CallbackViewArgs.
func ArgsModal(tool string, args json.RawMessage) slack.ModalViewRequest {
	blocks, _ := argsBlocks(tool, args)
	return argsModal("Arguments", blocks)
}

// EditedArgsModal is ArgsModal for a call decided with edited arguments:
// those, which the decision ran (the model's are on the card).
func EditedArgsModal(tool string, args json.RawMessage) slack.ModalViewRequest {
	blocks, _ := argsBlocksTitled("Edited arguments of "+inlineCode(tool)+", as decided (the model's are on the card)", args)
	return argsModal("Edited arguments", blocks)
}

// argsModal is the read-only modal of arguments with blocks.
func argsModal(title string, blocks []slack.Block) slack.ModalViewRequest {
	m := modal(CallbackViewArgs, title, "", blocks)
	m.Close = plain("Close", maxModalTitle)
	return m
}

// ArgsShownInFull reports whether ArgsModal shows args whole, with nothing
// left out, and, for a tool answered by a person (human), whether the
// reply form (RespondModal) shows its question whole. Arguments it cannot
// show in full (240 kB once pretty-printed, escaped and encoded as JSON:
// about 230,000 characters of ASCII text, fewer with many line breaks,
// quotes or <, > and &, which take several bytes each, about 80,000 CJK
// characters; a question of about 145,000 ASCII characters, fewer in many
// short paragraphs) cannot be read by anyone asked to approve or answer
// them, so the agent asks no one (see agent.Config.ShownInFull).
func ArgsShownInFull(args json.RawMessage, human bool) bool {
	if _, whole := argsBlocks("", args); !whole {
		return false
	}
	if !human {
		return true
	}
	var q struct {
		Question string `json:"question"`
	}
	_ = json.Unmarshal(args, &q)
	_, whole := questionBlocks(q.Question)
	return whole
}

// argsBlocks returns the blocks of ArgsModal, and whether they show args
// whole.
func argsBlocks(tool string, args json.RawMessage) ([]slack.Block, bool) {
	return argsBlocksTitled("Arguments of "+inlineCode(tool), args)
}

// argsBlocksTitled is argsBlocks under a title of its own (mrkdwn).
func argsBlocksTitled(title string, args json.RawMessage) ([]slack.Block, bool) {
	blocks := []slack.Block{section(title)}
	pretty := prettyJSON(args)
	if pretty == "" {
		blocks = append(blocks, section("_(no arguments)_"))
	}
	return codeSectionsOf(blocks, pretty, "the arguments")
}

// PreviewModal is the read-only modal of "View full preview": the whole
// effect preview of a call (as stored, up to the agent's cap), escaped,
// with hidden characters written out.
func PreviewModal(tool, preview string) slack.ModalViewRequest {
	blocks := []slack.Block{section("What the call to " + inlineCode(tool) + " would do")}
	m := modal(CallbackViewPreview, "Preview", "", codeSections(blocks, preview, "the preview"))
	m.Close = plain("Close", maxModalTitle)
	return m
}

// codeSections appends text to blocks as code sections within the limits
// of a modal, with hidden characters written out and a warning about them.
func codeSections(blocks []slack.Block, text, where string) []slack.Block {
	blocks, _ = codeSectionsOf(blocks, text, where)
	return blocks
}

// codeSectionsOf is codeSections, and whether the sections hold all of
// text (else the last block says how much was left out). What it appends
// is at most maxViewBytes of JSON; the blocks before it are the caller's
// few lines, which, like the note, fit in the rest of a view.
func codeSectionsOf(blocks []slack.Block, text, where string) ([]slack.Block, bool) {
	const wrap = len("```\n\n```")
	shown, hiddenChars := revealHidden(text)
	size := 0
	if shown != text {
		warning := hiddenWarning(hiddenChars, where)
		blocks = append(blocks, section(warning))
		size += sectionJSON + jsonLen(warning)
	}
	chunks := splitLines(codeBody(shown), maxSectionText-wrap)
	for i, c := range chunks {
		code := "```\n" + c + "\n```"
		if c != "" {
			size += sectionJSON + jsonLen(code)
		}
		if len(blocks) == maxViewBlocks-1 && i < len(chunks)-1 || size > maxViewBytes {
			rest := 0
			for _, r := range chunks[i:] {
				rest += textLen(r)
			}
			return append(blocks, contextBlock(fmt.Sprintf("… %d more characters not shown.", rest))), false
		}
		if c == "" {
			continue
		}
		blocks = append(blocks, section(code))
	}
	return blocks, true
}

// sectionJSON is the JSON a mrkdwn section adds to a view besides its
// text (see jsonLen), the comma before it included.
var sectionJSON = len(mustJSON(section(""))) - jsonLen("") + 1

// jsonLen is the length of s encoded as a JSON string by encoding/json, as
// slack-go sends views: its quotes, two bytes for a quote, a backslash or
// a line break or tab, six ("\u003c") for '<', '>', '&', other control
// characters, U+2028, U+2029 and invalid UTF-8, and the bytes of any
// other character.
func jsonLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
			n += 6
		} else {
			n += size
		}
		i += size
	}
	return n
}

// inputValue returns the value submitted in a view for blockID/actionID, or
// "" when there is none.
func inputValue(view slack.View, blockID, actionID string) string {
	if view.State == nil {
		return ""
	}
	return view.State.Values[blockID][actionID].Value
}

// ReadCallID returns the call id a submitted modal is about (its
// PrivateMetadata).
func ReadCallID(view slack.View) string {
	return view.PrivateMetadata
}

// ReadRejectReason returns the reason submitted in RejectModal, trimmed of
// surrounding white space; "" when there is none to see (see visibleText).
func ReadRejectReason(view slack.View) string {
	return visibleText(inputValue(view, BlockRejectReason, ActionRejectReason))
}

// visibleText is s trimmed of surrounding white space, or "" when nothing
// in it can be seen: white space and hidden characters alone (a
// zero-width space, a Hangul filler, a braille blank) look blank, and are
// refused as a blank reason or answer is.
func visibleText(s string) string {
	if strings.TrimFunc(s, func(r rune) bool { return unicode.IsSpace(r) || hidden(r) }) == "" {
		return ""
	}
	return strings.TrimSpace(s)
}

// ReadEditedArgs returns the arguments text submitted in EditModal, trimmed
// of surrounding white space and not validated; "" when there is none.
func ReadEditedArgs(view slack.View) string {
	return strings.TrimSpace(inputValue(view, BlockEditArgs, ActionEditArgs))
}

// ReadAnswer returns the answer submitted in RespondModal, trimmed of
// surrounding white space; "" when there is none to see (see visibleText).
func ReadAnswer(view slack.View) string {
	return visibleText(inputValue(view, BlockAnswer, ActionAnswer))
}
