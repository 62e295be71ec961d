package fakeslack

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// Block Kit limits the fake enforces, as documented by Slack.
const (
	maxMessageBlocks  = 50
	maxViewBlocks     = 100
	maxMessageText    = 40000
	maxStreamText     = 12000
	maxSectionText    = 3000
	maxSectionFields  = 10
	maxFieldText      = 2000
	maxHeaderText     = 150
	maxActionElements = 25
	maxContextElems   = 10
	maxButtonText     = 75
	maxButtonValue    = 2000
	maxURL            = 3000
	maxID             = 255
	maxInputLabel     = 2000
	maxOptions        = 100
	maxOptionText     = 75
	maxMarkdownBlock  = 12000
	maxViewTitle      = 24
	maxPrivateMeta    = 3000
	maxTextObject     = 3000
	maxPlaceholder    = 150
	maxInputLength    = 3000
	maxConfirmTitle   = 100
	maxConfirmText    = 300
	maxConfirmButton  = 30
)

// Limits Slack enforces without documenting them in the Block Kit
// reference.
const (
	// DefaultMaxBlocksText is the most characters, summed over every text
	// object of its blocks, that a message may carry before Slack refuses
	// it with msg_blocks_too_long, whatever the 40,000 characters allowed
	// in its text field. Slack has been seen to refuse messages from about
	// 11,300 to 13,300 characters of block text, less with more blocks:
	// the block containers count too.
	DefaultMaxBlocksText = 12000
	// maxViewBytes is the size of a view's JSON above which views.open,
	// views.push, views.update and views.publish answer view_too_large
	// (250 kB), as does a response_action carrying a view.
	maxViewBytes = 250000
)

type jsonObject = map[string]any

// textKind says which text objects a field accepts.
type textKind int

const (
	anyText   textKind = iota // plain_text or mrkdwn
	plainText                 // plain_text only
)

// validator collects Slack-style messages naming what is wrong in blocks
// or a view.
type validator struct {
	errs []string
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, fmt.Sprintf(format, args...)+" [json-pointer:"+path+"]")
}

// text checks a required text object at path: its type, that it has from 1
// to max characters and, for plain_text only fields, that it is not mrkdwn.
func (v *validator) text(x any, path string, kind textKind, max int) {
	obj, ok := x.(jsonObject)
	if !ok {
		v.add(path, "missing required field: text object")
		return
	}
	typ, _ := obj["type"].(string)
	switch {
	case typ == "plain_text":
	case typ == "mrkdwn" && kind == anyText:
	case typ == "mrkdwn":
		v.add(path+"/type", "must be plain_text")
	default:
		v.add(path+"/type", "must be one of plain_text, mrkdwn")
	}
	t, _ := obj["text"].(string)
	if t == "" {
		v.add(path+"/text", "must be more than 0 characters")
	}
	if n := runes(t); n > min(max, maxTextObject) {
		v.add(path+"/text", "must be less than %d characters", min(max, maxTextObject)+1)
	}
}

// optionalText checks a text object at path if there is one.
func (v *validator) optionalText(x any, path string, kind textKind, max int) {
	if x != nil {
		v.text(x, path, kind, max)
	}
}

// validateBlocks checks a blocks array against Slack's limits and returns
// Slack-style messages naming what is wrong; none when the blocks are valid.
func validateBlocks(raw json.RawMessage, maxBlocks int) []string {
	var blocks []jsonObject
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return []string{"invalid blocks format: " + err.Error()}
	}
	v := &validator{}
	v.blocks(blocks, maxBlocks)
	return v.errs
}

func (v *validator) blocks(blocks []jsonObject, maxBlocks int) {
	if len(blocks) > maxBlocks {
		v.add("/blocks", "no more than %d items allowed", maxBlocks)
	}
	blockIDs := map[string]bool{}
	for i, b := range blocks {
		p := fmt.Sprintf("/blocks/%d", i)
		if id, _ := b["block_id"].(string); id != "" {
			if len(id) > maxID {
				v.add(p+"/block_id", "must be less than %d characters", maxID+1)
			}
			if blockIDs[id] {
				v.add(p+"/block_id", "duplicate block_id %q", id)
			}
			blockIDs[id] = true
		}
		typ, _ := b["type"].(string)
		switch typ {
		case "section":
			v.optionalText(b["text"], p+"/text", anyText, maxSectionText)
			fields, _ := b["fields"].([]any)
			if len(fields) > maxSectionFields {
				v.add(p+"/fields", "no more than %d items allowed", maxSectionFields)
			}
			for j, f := range fields {
				v.text(f, fmt.Sprintf("%s/fields/%d", p, j), anyText, maxFieldText)
			}
			if b["text"] == nil && len(fields) == 0 {
				v.add(p, "must provide text or fields")
			}
			if acc, ok := b["accessory"].(jsonObject); ok {
				v.element(acc, p+"/accessory")
			}
		case "header":
			v.text(b["text"], p+"/text", plainText, maxHeaderText)
		case "actions":
			elems, _ := b["elements"].([]any)
			if len(elems) > maxActionElements {
				v.add(p+"/elements", "no more than %d items allowed", maxActionElements)
			}
			actionIDs := map[string]bool{}
			for j, e := range elems {
				el, _ := e.(jsonObject)
				if id, _ := el["action_id"].(string); id != "" {
					if actionIDs[id] {
						v.add(fmt.Sprintf("%s/elements/%d/action_id", p, j), "duplicate action_id %q", id)
					}
					actionIDs[id] = true
				}
				v.element(el, fmt.Sprintf("%s/elements/%d", p, j))
			}
		case "context":
			elems, _ := b["elements"].([]any)
			if len(elems) > maxContextElems {
				v.add(p+"/elements", "no more than %d items allowed", maxContextElems)
			}
			for j, e := range elems {
				if el, _ := e.(jsonObject); el["type"] != "image" {
					v.text(e, fmt.Sprintf("%s/elements/%d", p, j), anyText, maxTextObject)
				}
			}
		case "input":
			v.text(b["label"], p+"/label", plainText, maxInputLabel)
			v.optionalText(b["hint"], p+"/hint", plainText, maxInputLabel)
			if el, ok := b["element"].(jsonObject); ok {
				v.element(el, p+"/element")
			} else {
				v.add(p+"/element", "missing required field: element")
			}
		case "markdown":
			if t, _ := b["text"].(string); runes(t) > maxMarkdownBlock {
				v.add(p+"/text", "must be less than %d characters", maxMarkdownBlock+1)
			} else if t == "" {
				v.add(p+"/text", "must be more than 0 characters")
			}
		case "divider", "image", "rich_text", "file", "video", "table", "context_actions":
		case "":
			v.add(p+"/type", "missing required field: type")
		default:
			v.add(p+"/type", "unsupported type: %s", typ)
		}
	}
}

func (v *validator) element(el jsonObject, p string) {
	if id, _ := el["action_id"].(string); len(id) > maxID {
		v.add(p+"/action_id", "must be less than %d characters", maxID+1)
	}
	if c, ok := el["confirm"]; ok {
		v.confirm(c, p+"/confirm")
	}
	v.optionalText(el["placeholder"], p+"/placeholder", plainText, maxPlaceholder)
	switch el["type"] {
	case "button":
		v.text(el["text"], p+"/text", plainText, maxButtonText)
		if val, _ := el["value"].(string); runes(val) > maxButtonValue {
			v.add(p+"/value", "must be less than %d characters", maxButtonValue+1)
		}
		if u, _ := el["url"].(string); runes(u) > maxURL {
			v.add(p+"/url", "must be less than %d characters", maxURL+1)
		}
	case "static_select", "multi_static_select", "radio_buttons", "checkboxes", "overflow":
		opts, _ := el["options"].([]any)
		if len(opts) > maxOptions {
			v.add(p+"/options", "no more than %d items allowed", maxOptions)
		}
		for j, o := range opts {
			opt, _ := o.(jsonObject)
			kind := plainText
			if el["type"] == "radio_buttons" || el["type"] == "checkboxes" {
				kind = anyText
			}
			v.text(opt["text"], fmt.Sprintf("%s/options/%d/text", p, j), kind, maxOptionText)
		}
	case "plain_text_input":
		limit := maxInputLength
		if n, ok := el["max_length"].(float64); ok {
			if n < 1 || n > maxInputLength {
				v.add(p+"/max_length", "must be between 1 and %d", maxInputLength)
			} else {
				limit = int(n)
			}
		}
		if n, ok := el["min_length"].(float64); ok && (n < 0 || n > maxInputLength) {
			v.add(p+"/min_length", "must be between 0 and %d", maxInputLength)
		}
		if val, _ := el["initial_value"].(string); runes(val) > limit {
			v.add(p+"/initial_value", "must be less than %d characters", limit+1)
		}
	}
}

// confirm checks a confirmation dialog object: a title, a text, and the
// labels of its two buttons, all plain_text.
func (v *validator) confirm(x any, p string) {
	c, ok := x.(jsonObject)
	if !ok {
		v.add(p, "must be an object")
		return
	}
	v.text(c["title"], p+"/title", plainText, maxConfirmTitle)
	v.text(c["text"], p+"/text", plainText, maxConfirmText)
	v.text(c["confirm"], p+"/confirm", plainText, maxConfirmButton)
	v.text(c["deny"], p+"/deny", plainText, maxConfirmButton)
}

// validateView checks a modal or Home tab view against Slack's limits.
func validateView(obj jsonObject, wantType string) []string {
	v := &validator{}
	typ, _ := obj["type"].(string)
	if wantType != "" && typ != wantType {
		v.errs = append(v.errs, fmt.Sprintf("view type must be %s [json-pointer:/view/type]", wantType))
	}
	var blocks []jsonObject
	if raw, err := json.Marshal(obj["blocks"]); err == nil && string(raw) != "null" {
		if err := json.Unmarshal(raw, &blocks); err != nil {
			v.errs = append(v.errs, "invalid blocks format: "+err.Error())
		}
	}
	if typ == "modal" {
		v.text(obj["title"], "/view/title", plainText, maxViewTitle)
		v.optionalText(obj["submit"], "/view/submit", plainText, maxViewTitle)
		v.optionalText(obj["close"], "/view/close", plainText, maxViewTitle)
		if obj["submit"] == nil {
			for _, b := range blocks {
				if b["type"] == "input" {
					v.errs = append(v.errs, "must provide submit when an input block is present [json-pointer:/view/submit]")
					break
				}
			}
		}
	}
	if pm, _ := obj["private_metadata"].(string); runes(pm) > maxPrivateMeta {
		v.errs = append(v.errs, fmt.Sprintf("must be less than %d characters [json-pointer:/view/private_metadata]", maxPrivateMeta+1))
	}
	if id, _ := obj["callback_id"].(string); len(id) > maxID {
		v.errs = append(v.errs, fmt.Sprintf("must be less than %d characters [json-pointer:/view/callback_id]", maxID+1))
	}
	if blocks != nil {
		v.blocks(blocks, maxViewBlocks)
	}
	return v.errs
}

// blocksText counts the characters of every text object in blocks (and of
// markdown blocks), the total Slack bounds with msg_blocks_too_long.
func blocksText(raw json.RawMessage) int {
	var blocks any
	if json.Unmarshal(raw, &blocks) != nil {
		return 0
	}
	n := 0
	var walk func(x any)
	walk = func(x any) {
		switch x := x.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case jsonObject:
			switch x["type"] {
			case "plain_text", "mrkdwn", "markdown":
				if t, ok := x["text"].(string); ok {
					n += runes(t)
				}
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(blocks)
	return n
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// MessageProblems returns what Slack would refuse in the blocks of a
// message, given as the JSON a client sends: the rules of Block Kit, and
// more than DefaultMaxBlocksText characters of text in all. It returns
// none when Slack would take them. Tests of an app's rendering can check
// its output without posting it.
func MessageProblems(blocks json.RawMessage) []string {
	msgs := validateBlocks(blocks, maxMessageBlocks)
	if n := blocksText(blocks); n > DefaultMaxBlocksText {
		msgs = append(msgs, fmt.Sprintf("msg_blocks_too_long: the blocks hold %d characters of text, more than %d", n, DefaultMaxBlocksText))
	}
	return msgs
}

// ViewProblems returns what Slack would refuse in a view of type typ
// ("modal" or "home"), given as the JSON a client sends; none when Slack
// would take it.
func ViewProblems(view json.RawMessage, typ string) []string {
	if _, aerr := checkView(view, typ); aerr != nil {
		return append([]string{aerr.code}, aerr.messages...)
	}
	return nil
}
