package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Turning Slack messages into terminal text: Block Kit blocks become lines,
// mrkdwn markup is reduced to what reads well in a terminal, and mentions
// show the handles of the playground's people.

// blocksText renders a message's blocks as lines of text. Buttons are
// listed as "[Label]" on one line. It returns fallback when there are no
// blocks, or none it knows how to show.
func blocksText(raw json.RawMessage, fallback string) string {
	var blocks []map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &blocks) != nil || len(blocks) == 0 {
		return strings.TrimRight(mrkdwnText(fallback), " \n")
	}
	var lines []string
	add := func(s string) {
		if s = strings.TrimRight(s, " \n"); s != "" {
			lines = append(lines, s)
		}
	}
	for _, b := range blocks {
		switch b["type"] {
		case "header":
			add("== " + textOf(b["text"]) + " ==")
		case "section":
			add(textOf(b["text"]))
			if fields, ok := b["fields"].([]any); ok {
				for _, f := range fields {
					add(textOf(f))
				}
			}
			if acc, ok := b["accessory"].(map[string]any); ok {
				add(elementText(acc))
			}
		case "context":
			var parts []string
			for _, el := range list(b["elements"]) {
				if t := textOf(el); t != "" {
					parts = append(parts, t)
				}
			}
			add(strings.Join(parts, " · "))
		case "actions":
			var parts []string
			for _, el := range list(b["elements"]) {
				if el, ok := el.(map[string]any); ok {
					if t := elementText(el); t != "" {
						parts = append(parts, t)
					}
				}
			}
			add(strings.Join(parts, " "))
		case "markdown":
			add(mrkdwnText(str(b["text"])))
		case "rich_text":
			add(richText(b["elements"]))
		case "divider":
			add("-----")
		case "image":
			add("[image: " + str(b["alt_text"]) + "]")
		}
	}
	if len(lines) == 0 {
		return strings.TrimRight(mrkdwnText(fallback), " \n")
	}
	return strings.Join(lines, "\n")
}

// elementText renders an interactive element: a button as "[Label]".
func elementText(el map[string]any) string {
	label := textOf(el["text"])
	if label == "" {
		label = textOf(el["placeholder"])
	}
	if label == "" {
		return ""
	}
	return "[" + label + "]"
}

// textOf returns the text of a text object ({"type": "mrkdwn", "text": …}),
// or of a plain string.
func textOf(v any) string {
	switch t := v.(type) {
	case string:
		return mrkdwnText(t)
	case map[string]any:
		s := str(t["text"])
		if t["type"] == "mrkdwn" {
			return mrkdwnText(s)
		}
		return s
	}
	return ""
}

// richText flattens rich_text elements to text.
func richText(v any) string {
	var b strings.Builder
	var walk func(v any)
	walk = func(v any) {
		switch t := v.(type) {
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			switch t["type"] {
			case "text", "link":
				b.WriteString(str(t["text"]))
			case "user":
				b.WriteString("@" + nameOf(str(t["user_id"])))
			case "emoji":
				b.WriteString(":" + str(t["name"]) + ":")
			}
			walk(t["elements"])
			if t["type"] == "rich_text_section" || t["type"] == "rich_text_preformatted" {
				b.WriteString("\n")
			}
		}
	}
	walk(v)
	return strings.TrimSpace(b.String())
}

func list(v any) []any {
	l, _ := v.([]any)
	return l
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

var (
	// userRef is a user or group mention: <@U123>, <@U123|name>, <!subteam^S123|@team>.
	userRef = regexp.MustCompile(`<@([UW][A-Z0-9]+)(?:\|[^>]*)?>`)
	// groupRef is a user-group mention.
	groupRef = regexp.MustCompile(`<!subteam\^([A-Z0-9]+)(?:\|([^>]*))?>`)
	// dateRef is a date formatted by the client: <!date^1700000000^{date}|fallback>.
	dateRef = regexp.MustCompile(`<!date\^[0-9]+\^[^|>]*\|([^>]*)>`)
	// linkRef is a link, with or without a label: <https://…|label>.
	linkRef = regexp.MustCompile(`<((?:https?|mailto):[^|>]*)(?:\|([^>]*))?>`)
	// special is <!here>, <!channel> and the like.
	special = regexp.MustCompile(`<!([a-z]+)>`)
)

// mrkdwnText turns Slack mrkdwn into plain terminal text: mentions become
// @handles, dates their fallback text, links their label (or address), and
// the HTML escapes of &, < and > are undone last, so escaped text never
// turns into markup.
func mrkdwnText(s string) string {
	s = userRef.ReplaceAllStringFunc(s, func(m string) string {
		return "@" + nameOf(userRef.FindStringSubmatch(m)[1])
	})
	s = groupRef.ReplaceAllStringFunc(s, func(m string) string {
		sm := groupRef.FindStringSubmatch(m)
		if sm[2] != "" {
			return sm[2]
		}
		return "@" + sm[1]
	})
	s = dateRef.ReplaceAllString(s, "$1")
	s = linkRef.ReplaceAllStringFunc(s, func(m string) string {
		sm := linkRef.FindStringSubmatch(m)
		if sm[2] != "" {
			return sm[2]
		}
		return sm[1]
	})
	s = special.ReplaceAllString(s, "@$1")
	s = terminalMarkup(s)
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}

// bold is mrkdwn's *bold*.
var bold = regexp.MustCompile(`\*([^*\n]+)\*`)

// terminalMarkup drops the mrkdwn markup that only clutters a terminal:
// code fences (their lines are indented instead) and bold stars outside
// code; emoji codes become characters.
func terminalMarkup(s string) string {
	var out []string
	code := false
	for line := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(line) == "```" {
			code = !code
			continue
		}
		if code {
			out = append(out, "  "+line)
			continue
		}
		out = append(out, emojiCodes.Replace(bold.ReplaceAllString(line, "$1")))
	}
	return strings.Join(out, "\n")
}

// terminalSafe replaces control characters (C0 but newline and tab, DEL
// and C1) with U+FFFD, and so do bytes that are not UTF-8. Text from the
// bot, the model and tools is printed to a terminal, where an escape
// sequence in it would act instead of showing: hide the text after it,
// move the cursor over earlier lines, or set the clipboard (OSC 52).
func terminalSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\t' {
			return r
		}
		if r < 0x20 || r >= 0x7f && r <= 0x9f {
			return utf8.RuneError
		}
		return r
	}, s)
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}
