package slackapp

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/bidi"
)

// wordJoiner is the invisible character Escape places after the at-sign of a
// bare broadcast keyword ("@here" becomes "@\u2060here"). The text looks the
// same to a reader, but Slack no longer sees the keyword, so it cannot notify
// a channel even when a message is posted with link_names or verbatim=false.
const wordJoiner = "\u2060"

// broadcastKeyword matches the at-sign forms of Slack's broadcast mentions.
// Slack matches them case-insensitively, and so does this pattern.
var broadcastKeyword = regexp.MustCompile(`(?i)@(channel|here|everyone)`)

// Escape makes untrusted text (model-authored text, tool arguments, tool
// output, anything not written by this package) safe to place in a mrkdwn
// text object. The result displays as the literal input:
//
//   - "&", "<" and ">" become "&amp;", "&lt;" and "&gt;", so control
//     sequences such as "<!channel>", "<!here>", "<@U123>",
//     "<!subteam^S1>", "<#C1>" and "<https://evil|label>" render as inert
//     text instead of pinging people or producing a link whose label hides
//     its target;
//   - a bare "@channel", "@here" or "@everyone" (any case) gets a word joiner
//     (U+2060, invisible) after its at-sign, so it cannot notify anyone;
//   - invalid UTF-8 is replaced by U+FFFD.
//
// The output of Escape never contains '<' or '>'. Escape does not remove
// mrkdwn formatting characters (*, _, ~, `); use MarkdownToMrkdwn for text
// that should keep its formatting, or a code block for verbatim data.
func Escape(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(len(s) + len(s)/8)
	for _, r := range s {
		switch r {
		case '&':
			b.WriteString("&amp;")
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		default:
			b.WriteRune(r)
		}
	}
	return broadcastKeyword.ReplaceAllString(b.String(), "@"+wordJoiner+"$1")
}

// textLen is the length Slack's limits are checked against. Slack counts
// characters; counting UTF-16 code units is never less than that, so a text
// within textLen limits is within Slack's.
func textLen(s string) int {
	n := 0
	for _, r := range s {
		if r > 0xFFFF {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// ellipsis marks text that was cut short.
const ellipsis = "…"

// truncate shortens already-escaped mrkdwn text to at most max characters
// (as counted by textLen), ending it with an ellipsis when it cuts. It never
// cuts inside a rune, an HTML entity written by Escape, a character written
// out by revealHidden or a control token such as a mention or a date, so
// the result stays inert and shows no half token. It reports whether it
// cut.
func truncate(s string, max int) (string, bool) {
	if textLen(s) <= max {
		return s, false
	}
	if max <= 0 {
		return "", true
	}
	cut := cutIndex(s, max-textLen(ellipsis))
	return s[:cut] + ellipsis, true
}

// cutIndex returns the largest byte index i such that s[:i] is at most max
// characters long, ends on a rune boundary and does not end inside an
// "&...;" entity, a "⟦U+202E⟧" written-out character or a "<...>" control
// token.
func cutIndex(s string, max int) int {
	n, i := 0, 0
	for i < len(s) {
		r, size := utf8.DecodeRuneInString(s[i:])
		w := 1
		if r > 0xFFFF {
			w = 2
		}
		if n+w > max {
			break
		}
		n += w
		i += size
	}
	// Escape writes entities of at most 5 bytes ("&amp;"); back off when
	// the cut falls between an entity's '&' and its ';'.
	if amp := strings.LastIndexByte(s[:i], '&'); amp >= 0 && i-amp < 5 {
		if !strings.Contains(s[amp:i], ";") && entityAt(s[amp:]) {
			i = amp
		}
	}
	// Back off, too, when the cut falls inside a written-out character,
	// which would show as a half notation such as "⟦U+20".
	if open := strings.LastIndex(s[:i], "⟦"); open >= 0 && !strings.Contains(s[open:i], "⟧") && writtenOut.MatchString(s[open:]) {
		i = open
	}
	// Text escaped by Escape holds no '<', so a '<' opens a token this
	// package wrote (a mention, a date, a channel): back off to before one
	// the cut leaves open, which Slack would show as raw markup. (Raw text
	// cut before it is escaped keeps a '<' that opens no token.)
	if lt := strings.LastIndexByte(s[:i], '<'); lt >= 0 && strings.IndexByte(s[lt:i], '>') < 0 && tokenAt(s[lt:]) {
		i = lt
	}
	return i
}

// tokenAt reports whether s starts as a Slack control token does: a
// mention ("<@"), a broadcast, user group or date ("<!"), a channel ("<#")
// or a link.
func tokenAt(s string) bool {
	for _, p := range []string{"<@", "<!", "<#", "<http", "<mailto:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// entityAt reports whether s starts with one of the entities Escape writes.
func entityAt(s string) bool {
	return strings.HasPrefix(s, "&amp;") || strings.HasPrefix(s, "&lt;") || strings.HasPrefix(s, "&gt;")
}

// codeBody escapes untrusted text for use inside a ``` code block: Escape,
// plus a word joiner between consecutive backticks so the text cannot close
// the block early and have the rest rendered as formatted mrkdwn.
func codeBody(s string) string {
	return breakBackticks(Escape(s))
}

// breakBackticks inserts a word joiner between any two adjacent backticks.
func breakBackticks(s string) string {
	if !strings.Contains(s, "``") {
		return s
	}
	var b strings.Builder
	prev := rune(0)
	for _, r := range s {
		if r == '`' && prev == '`' {
			b.WriteString(wordJoiner)
		}
		b.WriteRune(r)
		prev = r
	}
	return b.String()
}

// codeSpanText replaces what cannot be in a code span (see inlineCode).
var codeSpanText = strings.NewReplacer("`", "ˋ", "\r\n", " ", "\n", " ", "\r", " ")

// inlineCode renders untrusted text as a `code span`. Backticks, which
// cannot appear inside a Slack code span, become U+02CB (ˋ), and line
// breaks become spaces.
func inlineCode(s string) string {
	s = codeSpanText.Replace(s)
	if strings.TrimSpace(s) == "" {
		return "` `"
	}
	return "`" + Escape(s) + "`"
}

// codeBlock wraps escaped code text in a ``` block, truncated so that the
// whole block (fences included) is at most max characters. It reports
// whether the body was cut.
func codeBlock(body string, max int) (string, bool) {
	const open, close = "```\n", "\n```"
	if body == "" {
		body = " "
	}
	body, cut := truncate(body, max-textLen(open)-textLen(close))
	return open + body + close, cut
}

// quote renders untrusted natural-language text as a mrkdwn block quote,
// escaped, with the characters that could reorder or hide it written out
// (see revealInProse), and cut to at most max characters.
func quote(s string, max int) string {
	out, _ := quoteCut(s, max)
	return out
}

// quoteCut is quote, and whether the quote was cut short.
func quoteCut(s string, max int) (string, bool) {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\r\n", "\n"))
	if s == "" {
		return "", false
	}
	lines := strings.Split(Escape(revealInProse(s)), "\n")
	for i, l := range lines {
		lines[i] = ">" + l
	}
	out, cut := truncate(strings.Join(lines, "\n"), max)
	if strings.Count(out, "```")%2 == 1 {
		// A code block the words open (or the cut left open) is closed
		// in the quote: else the text after it would show as code.
		out, cut = truncate(strings.Join(lines, "\n"), max-len("```"))
		if strings.Count(out, "```")%2 == 1 {
			out += "```"
		}
	}
	return out, cut
}

// controlSequence matches a mrkdwn control sequence: a mention, a channel,
// a special command such as a date, or a link.
var controlSequence = regexp.MustCompile(`<([^<>]*)>`)

// modalText turns mrkdwn written by this package (a refusal text, say)
// into plain text for a place that shows no mrkdwn, such as an error under
// a modal input: "<@U1>" becomes "@U1" ("@name" with a label),
// "<!subteam^S1>" becomes "@S1", "<#C1|general>" becomes "#general", a
// date token becomes its fallback text, a link "<url|label>" becomes
// "label (url)", and the escapes &lt;, &gt; and &amp; become the characters.
// Text escaped with Escape stays literal: it holds no '<' or '>' before
// the escapes are undone, which happens last.
func modalText(s string) string {
	s = controlSequence.ReplaceAllStringFunc(s, func(m string) string {
		inner := m[1 : len(m)-1]
		body, label, hasLabel := strings.Cut(inner, "|")
		switch {
		case strings.HasPrefix(body, "@"):
			if hasLabel && label != "" {
				return "@" + strings.TrimPrefix(label, "@")
			}
			return body
		case strings.HasPrefix(body, "#"):
			if hasLabel && label != "" {
				return "#" + strings.TrimPrefix(label, "#")
			}
			return body
		case strings.HasPrefix(body, "!subteam^"):
			if hasLabel && label != "" {
				return "@" + strings.TrimPrefix(label, "@")
			}
			return "@" + strings.TrimPrefix(body, "!subteam^")
		case strings.HasPrefix(body, "!date^"):
			if hasLabel {
				return label
			}
			return "a date"
		case strings.HasPrefix(body, "!"):
			// A broadcast such as <!here>: named, never triggered.
			name, _, _ := strings.Cut(strings.TrimPrefix(body, "!"), "^")
			return "@" + name
		case hasLabel && label != "":
			return label + " (" + body + ")"
		default:
			return body
		}
	})
	return unescapeEntities.Replace(s)
}

// unescapeEntities turns the three entities Slack's mrkdwn escapes back
// into their characters.
var unescapeEntities = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// writtenOut matches a character written out by reveal at the start of a
// text.
var writtenOut = regexp.MustCompile(`^⟦U\+[0-9A-F]{4,6}⟧`)

// revealHidden writes out every invisible character of untrusted text as
// its code point between white square brackets ("⟦U+202E⟧"), so that what a
// reader sees is what is there (see hidden). It returns how many it wrote
// out. Apply it before Escape: Escape's own word joiners are not untrusted.
//
// A "⟦" of s is written out too, and not counted, so that every
// "⟦U+200B⟧" shown is one the bot wrote: otherwise the text could write
// one out itself, and two arguments, one holding the character and the
// other its notation, would read alike.
func revealHidden(s string) (string, int) {
	return reveal(s, func(_ string, _ int, r rune) bool { return hidden(r) || r == '⟦' })
}

// revealInProse is revealHidden for untrusted natural-language text (a
// model's answer or explanation, a person's reason or answer): it writes
// out the invisible characters that can reorder or hide such text, and
// keeps those it needs (see hiddenInProse). A "⟦" is left as it is: text
// revealHidden wrote out (a question's) is rendered through this too.
func revealInProse(s string) string {
	shown, _ := reveal(s, hiddenInProse)
	return shown
}

// reveal writes out the characters of s that pick reports (given s, where
// the character starts and the character), as revealHidden describes, and
// returns how many it wrote out, but for a "⟦".
func reveal(s string, pick func(s string, i int, r rune) bool) (string, int) {
	n, changed := 0, false
	var b strings.Builder
	for i, r := range s {
		if !pick(s, i, r) {
			if changed {
				b.WriteRune(r)
			}
			continue
		}
		if !changed {
			b.Grow(len(s) + 16)
			b.WriteString(s[:i])
			changed = true
		}
		if r != '⟦' {
			n++
		}
		fmt.Fprintf(&b, "⟦U+%04X⟧", r)
	}
	if !changed {
		return s, 0
	}
	return b.String(), n
}

// hidden reports whether r is a character a reader would not see, or not
// see for what it is: every character of Unicode's format category (Cf:
// bidirectional controls such as U+202E, which can make
// "reports/⟦U+202E⟧exe.csv" read as another name, zero-width and joining
// characters, the byte-order mark, tag characters), control characters
// other than tab and line breaks (DEL and the C1 controls among them), the
// other default-ignorable code points (variation selectors, which can
// carry bytes after a visible character, the combining grapheme joiner,
// the Khmer and Mongolian inherent vowels and selectors, the unassigned
// ranges Unicode reserves as ignorable), blank letters (the Hangul
// fillers, which are valid in identifiers of JavaScript and other
// languages, and the braille blank) and the line and paragraph separators.
func hidden(r rune) bool {
	switch {
	case r == '\t' || r == '\n' || r == '\r':
		return false
	case unicode.Is(unicode.Cf, r), unicode.Is(unicode.Cc, r), unicode.Is(invisible, r):
		return true
	}
	return false
}

// hiddenInProse is hidden for natural-language text, less the invisible
// characters such text needs, which cannot reverse or hide any of it:
//
//   - the zero-width non-joiner and joiner (U+200C, U+200D), which make
//     emoji sequences (👩‍💻) and shape Persian and Indic words;
//   - the text and emoji variation selectors (U+FE0E, U+FE0F), which pick
//     how a character such as ❤ is drawn;
//   - the left-to-right and right-to-left marks (U+200E, U+200F) and the
//     Arabic letter mark (U+061C), with which Arabic and Hebrew text places
//     its punctuation and numbers, where they touch a letter of their own
//     direction (see inertMark). Each acts as one invisible letter of its
//     direction: elsewhere, a pair of right-to-left marks around text with
//     no letters in it ("10.0.0.1 → 192.168.1.1", "$5 - $5000") shows that
//     text's parts in reverse order, as the embeddings, overrides and
//     isolates (U+202A to U+202E, U+2066 to U+2069) reorder whole runs.
//
// The bidirectional controls, the tag characters and every other hidden
// character are written out still. r is the character at s[i:].
func hiddenInProse(s string, i int, r rune) bool {
	switch r {
	case '\u200c', '\u200d', '\ufe0e', '\ufe0f':
		return false
	case '\u200e', '\u200f', '\u061c':
		return !inertMark(s, i, r)
	}
	return hidden(r)
}

// inertMark reports whether the direction mark at s[i:] touches a letter
// of its direction (left to right for U+200E, right to left for U+200F
// and U+061C): a mark beside such a letter changes the order of nothing,
// as the letter already gives its side that direction.
func inertMark(s string, i int, mark rune) bool {
	rtl := mark != '\u200e'
	before, _ := utf8.DecodeLastRuneInString(s[:i])
	after, _ := utf8.DecodeRuneInString(s[i+utf8.RuneLen(mark):])
	return letterOf(before, rtl) || letterOf(after, rtl)
}

// letterOf reports whether r is a letter written right to left (rtl) or
// left to right (!rtl).
func letterOf(r rune, rtl bool) bool {
	if !unicode.IsLetter(r) {
		return false
	}
	p, _ := bidi.LookupRune(r)
	switch p.Class() {
	case bidi.R, bidi.AL:
		return rtl
	case bidi.L:
		return !rtl
	}
	return false
}

// invisible lists the invisible characters outside the format and control
// categories (see hidden).
var invisible = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x034f, Hi: 0x034f, Stride: 1}, // combining grapheme joiner
		{Lo: 0x115f, Hi: 0x1160, Stride: 1}, // Hangul choseong and jungseong fillers
		{Lo: 0x17b4, Hi: 0x17b5, Stride: 1}, // Khmer inherent vowels
		{Lo: 0x180b, Hi: 0x180f, Stride: 1}, // Mongolian free variation selectors
		{Lo: 0x2028, Hi: 0x2029, Stride: 1}, // line and paragraph separators
		{Lo: 0x2065, Hi: 0x2065, Stride: 1}, // reserved, default-ignorable
		{Lo: 0x2800, Hi: 0x2800, Stride: 1}, // braille pattern blank
		{Lo: 0x3164, Hi: 0x3164, Stride: 1}, // Hangul filler
		{Lo: 0xfe00, Hi: 0xfe0f, Stride: 1}, // variation selectors
		{Lo: 0xffa0, Hi: 0xffa0, Stride: 1}, // halfwidth Hangul filler
		{Lo: 0xfff0, Hi: 0xfff8, Stride: 1}, // reserved, default-ignorable
	},
	R32: []unicode.Range32{
		{Lo: 0x1bca0, Hi: 0x1bca3, Stride: 1}, // shorthand format controls
		{Lo: 0x1d173, Hi: 0x1d17a, Stride: 1}, // musical format controls
		{Lo: 0xe0000, Hi: 0xe0fff, Stride: 1}, // tags, variation selectors supplement, reserved
	},
}

// hiddenWarning is the line shown with untrusted text that had n hidden
// characters written out (none: only a "⟦", see revealHidden); where
// names it ("the arguments", "the question", "the preview", "the
// output").
func hiddenWarning(n int, where string) string {
	if n == 0 {
		// Only a "⟦" was written out (see revealHidden).
		return fmt.Sprintf(":information_source: A ⟦ in %s is shown as ⟦U+27E6⟧, so that the ⟦U+…⟧ notation of hidden characters is only ever the bot's.", where)
	}
	w := fmt.Sprintf(":warning: *%d hidden character(s)* in %s are written out as ⟦U+…⟧: they can make text read differently from what it is", n, where)
	if where == "the arguments" {
		w += " (the tool gets the characters, not the ⟦U+…⟧ notation)"
	}
	return w + "."
}
