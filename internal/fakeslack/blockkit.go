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
	maxMarkdownBlock  = 12000
	maxViewTitle      = 24
	maxPrivateMeta    = 3000
)

type jsonObject = map[string]any

// validateBlocks checks a blocks array against Slack's limits and returns
// Slack-style messages naming what is wrong; none when the blocks are valid.
func validateBlocks(raw json.RawMessage, maxBlocks int) []string {
	var blocks []jsonObject
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return []string{"invalid blocks format: " + err.Error()}
	}
	var errs []string
	add := func(path, format string, args ...any) {
		errs = append(errs, fmt.Sprintf(format, args...)+" [json-pointer:"+path+"]")
	}
	if len(blocks) > maxBlocks {
		add("/blocks", "no more than %d items allowed", maxBlocks)
	}
	blockIDs := map[string]bool{}
	for i, b := range blocks {
		p := fmt.Sprintf("/blocks/%d", i)
		if id, _ := b["block_id"].(string); id != "" {
			if len(id) > maxID {
				add(p+"/block_id", "must be less than %d characters", maxID+1)
			}
			if blockIDs[id] {
				add(p+"/block_id", "duplicate block_id %q", id)
			}
			blockIDs[id] = true
		}
		typ, _ := b["type"].(string)
		switch typ {
		case "section":
			if t := textOf(b["text"]); runes(t) > maxSectionText {
				add(p+"/text/text", "must be less than %d characters", maxSectionText+1)
			}
			fields, _ := b["fields"].([]any)
			if len(fields) > maxSectionFields {
				add(p+"/fields", "no more than %d items allowed", maxSectionFields)
			}
			for j, f := range fields {
				if runes(textOf(f)) > maxFieldText {
					add(fmt.Sprintf("%s/fields/%d/text", p, j), "must be less than %d characters", maxFieldText+1)
				}
			}
			if b["text"] == nil && len(fields) == 0 {
				add(p, "must provide text or fields")
			}
			if acc, ok := b["accessory"].(jsonObject); ok {
				validateElement(acc, p+"/accessory", add)
			}
		case "header":
			if runes(textOf(b["text"])) > maxHeaderText {
				add(p+"/text/text", "must be less than %d characters", maxHeaderText+1)
			}
		case "actions":
			elems, _ := b["elements"].([]any)
			if len(elems) > maxActionElements {
				add(p+"/elements", "no more than %d items allowed", maxActionElements)
			}
			actionIDs := map[string]bool{}
			for j, e := range elems {
				el, _ := e.(jsonObject)
				if id, _ := el["action_id"].(string); id != "" {
					if actionIDs[id] {
						add(fmt.Sprintf("%s/elements/%d/action_id", p, j), "duplicate action_id %q", id)
					}
					actionIDs[id] = true
				}
				validateElement(el, fmt.Sprintf("%s/elements/%d", p, j), add)
			}
		case "context":
			if elems, _ := b["elements"].([]any); len(elems) > maxContextElems {
				add(p+"/elements", "no more than %d items allowed", maxContextElems)
			}
		case "input":
			if runes(textOf(b["label"])) > maxInputLabel {
				add(p+"/label/text", "must be less than %d characters", maxInputLabel+1)
			}
			if el, ok := b["element"].(jsonObject); ok {
				validateElement(el, p+"/element", add)
			} else {
				add(p+"/element", "missing required field: element")
			}
		case "markdown":
			if t, _ := b["text"].(string); runes(t) > maxMarkdownBlock {
				add(p+"/text", "must be less than %d characters", maxMarkdownBlock+1)
			}
		case "divider", "image", "rich_text", "file", "video", "table", "context_actions":
		case "":
			add(p+"/type", "missing required field: type")
		default:
			add(p+"/type", "unsupported type: %s", typ)
		}
	}
	return errs
}

func validateElement(el jsonObject, p string, add func(path, format string, args ...any)) {
	if id, _ := el["action_id"].(string); len(id) > maxID {
		add(p+"/action_id", "must be less than %d characters", maxID+1)
	}
	switch el["type"] {
	case "button":
		if runes(textOf(el["text"])) > maxButtonText {
			add(p+"/text/text", "must be less than %d characters", maxButtonText+1)
		}
		if v, _ := el["value"].(string); runes(v) > maxButtonValue {
			add(p+"/value", "must be less than %d characters", maxButtonValue+1)
		}
		if u, _ := el["url"].(string); runes(u) > maxURL {
			add(p+"/url", "must be less than %d characters", maxURL+1)
		}
	case "static_select", "multi_static_select", "radio_buttons", "checkboxes", "overflow":
		if opts, _ := el["options"].([]any); len(opts) > maxOptions {
			add(p+"/options", "no more than %d items allowed", maxOptions)
		}
	case "plain_text_input":
		if v, _ := el["initial_value"].(string); runes(v) > maxSectionText {
			add(p+"/initial_value", "must be less than %d characters", maxSectionText+1)
		}
	}
}

// validateView checks a modal or Home tab view against Slack's limits.
func validateView(v jsonObject, wantType string) []string {
	var errs []string
	typ, _ := v["type"].(string)
	if wantType != "" && typ != wantType {
		errs = append(errs, fmt.Sprintf("view type must be %s [json-pointer:/view/type]", wantType))
	}
	if typ == "modal" {
		if t := textOf(v["title"]); t == "" || runes(t) > maxViewTitle {
			errs = append(errs, fmt.Sprintf("must be between 1 and %d characters [json-pointer:/view/title/text]", maxViewTitle))
		}
		for _, k := range []string{"submit", "close"} {
			if runes(textOf(v[k])) > maxViewTitle {
				errs = append(errs, fmt.Sprintf("must be less than %d characters [json-pointer:/view/%s/text]", maxViewTitle+1, k))
			}
		}
	}
	if pm, _ := v["private_metadata"].(string); runes(pm) > maxPrivateMeta {
		errs = append(errs, fmt.Sprintf("must be less than %d characters [json-pointer:/view/private_metadata]", maxPrivateMeta+1))
	}
	if id, _ := v["callback_id"].(string); len(id) > maxID {
		errs = append(errs, fmt.Sprintf("must be less than %d characters [json-pointer:/view/callback_id]", maxID+1))
	}
	blocks, err := json.Marshal(v["blocks"])
	if err == nil && string(blocks) != "null" {
		errs = append(errs, validateBlocks(blocks, maxViewBlocks)...)
	}
	return errs
}

// textOf returns the text of a text object ({"type":..., "text":...}).
func textOf(v any) string {
	if obj, ok := v.(jsonObject); ok {
		t, _ := obj["text"].(string)
		return t
	}
	return ""
}

func runes(s string) int { return utf8.RuneCountInString(s) }
