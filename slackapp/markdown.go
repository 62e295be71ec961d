package slackapp

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/slack-go/slack"
)

// Placeholders used while converting one line: the private-use characters
// U+E000..U+E002 are removed from the input first, so they cannot be forged.
const (
	phOpen  = "\uE000" // starts a protected span: phOpen index phClose
	phClose = "\uE001"
	phBold  = "\uE002" // a bold marker, written as '*' at the end
)

var (
	privateUse = strings.NewReplacer(phOpen, "\uFFFD", phClose, "\uFFFD", phBold, "\uFFFD")
	// headingEmphasis drops emphasis marks in a heading, shown bold whole.
	headingEmphasis = strings.NewReplacer("**", "", "__", "")

	mdHeading  = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	mdRule     = regexp.MustCompile(`^ {0,3}(?:(?:-[ \t]*){3,}|(?:\*[ \t]*){3,}|(?:_[ \t]*){3,})$`)
	mdBullet   = regexp.MustCompile(`^([ \t]*)[-*+][ \t]+(.*)$`)
	mdTask     = regexp.MustCompile(`^\[([ xX])\][ \t]+`)
	mdQuote    = regexp.MustCompile(`^ {0,3}>[ \t]?(.*)$`)
	mdFence    = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})(.*)$")
	mdLink     = regexp.MustCompile(`(!?)\[([^\[\]]*)\]\(\s*<?([^()\s<>]+)>?(?:\s+"[^"]*")?\s*\)`)
	mdAutolink = regexp.MustCompile(`<((?:https?://|mailto:)[^<>\s]+)>`)
	bareURL    = regexp.MustCompile(`(?:https?://|mailto:)[^\s<>()\[\]` + "`" + `\x{E000}-\x{E002}]+`)
	mdBold     = regexp.MustCompile(`\*\*(\S(?:.*?\S)?)\*\*|__(\S(?:.*?\S)?)__`)
	mdItalic   = regexp.MustCompile(`\*(\S(?:[^*]*?\S)?)\*`)
	mdStrike   = regexp.MustCompile(`~~(\S(?:.*?\S)?)~~`)
	phRef      = regexp.MustCompile(phOpen + `([0-9]+)` + phClose)
)

// MarkdownToMrkdwn converts the Markdown a model usually writes into Slack
// mrkdwn, treating the input as untrusted:
//
//   - **bold** and __bold__ become *bold*; *italic* becomes _italic_;
//     ~~strike~~ becomes ~strike~;
//   - "# Heading" lines become bold lines;
//   - "-", "*" and "+" list items become "•" items (task boxes become ☐/☑),
//     numbered lists and "> quotes" are kept;
//   - `code spans` and fenced code blocks keep their content verbatim
//     (escaped, not reformatted); an unclosed fence is closed;
//   - links never become Slack links, because their labels are untrusted:
//     [label](url) is written "label (url)", or just "url" when the label is
//     the URL itself; <url> autolinks lose their brackets;
//   - invisible characters that could reorder or hide text, such as the
//     right-to-left override U+202E, are written out as "⟦U+202E⟧" (see
//     revealInProse), code included;
//   - everything else is escaped as by Escape.
//
// The result never contains '<', so no mention, broadcast, channel link or
// labelled link can come out of it, and bare @here/@channel/@everyone are
// neutralized.
func MarkdownToMrkdwn(md string) string {
	md = revealInProse(strings.ToValidUTF8(md, "\uFFFD"))
	md = privateUse.Replace(md)
	md = strings.ReplaceAll(md, "\r\n", "\n")
	md = strings.ReplaceAll(md, "\r", "\n")

	lines := strings.Split(md, "\n")
	out := make([]string, 0, len(lines))
	fence := "" // the opening fence while inside a fenced block
	for _, line := range lines {
		if fence != "" {
			if isClosingFence(line, fence) {
				out = append(out, "```")
				fence = ""
				continue
			}
			out = append(out, codeBody(line))
			continue
		}
		if f := opensFence(line); f != "" {
			fence = f
			out = append(out, "```")
			continue
		}
		out = append(out, convertLine(line))
	}
	if fence != "" {
		out = append(out, "```")
	}
	return strings.Join(out, "\n")
}

// openFence returns the fence of the fenced code block md ends inside, as
// MarkdownToMrkdwn reads md, or "" when it ends outside any.
func openFence(md string) string {
	fence := ""
	for _, line := range strings.FieldsFunc(md, func(r rune) bool { return r == '\n' || r == '\r' }) {
		switch {
		case fence != "":
			if isClosingFence(line, fence) {
				fence = ""
			}
		default:
			fence = opensFence(line)
		}
	}
	return fence
}

// opensFence returns the fence that line opens a fenced code block with,
// or "" when it opens none.
func opensFence(line string) string {
	if m := mdFence.FindStringSubmatch(line); m != nil && !(m[1][0] == '`' && strings.Contains(m[2], "`")) {
		return m[1]
	}
	return ""
}

// isClosingFence reports whether line closes a block opened with fence: the
// same character, at least as many times, and nothing else.
func isClosingFence(line, fence string) bool {
	t := strings.TrimSpace(line)
	if len(t) < len(fence) || len(line)-len(strings.TrimLeft(line, " ")) > 3 {
		return false
	}
	return strings.Trim(t, fence[:1]) == ""
}

// outsideCode applies f to the parts of s outside its `code spans`, so
// that what a code span shows is left as written.
func outsideCode(s string, f func(string) string) string {
	parts := strings.Split(s, "`")
	for i := range parts {
		// Even parts are outside; with an odd number of backticks, the
		// last, after one that opens no span, is too.
		if i%2 == 0 || (len(parts)%2 == 0 && i == len(parts)-1) {
			parts[i] = f(parts[i])
		}
	}
	return strings.Join(parts, "`")
}

// convertLine converts one line outside code blocks.
func convertLine(line string) string {
	if strings.TrimSpace(line) == "" {
		return ""
	}
	if mdRule.MatchString(line) {
		return "──────────"
	}
	if m := mdHeading.FindStringSubmatch(line); m != nil {
		text := outsideCode(strings.TrimSpace(m[1]), headingEmphasis.Replace)
		if text == "" {
			return ""
		}
		return "*" + inline(text) + "*"
	}
	if m := mdQuote.FindStringSubmatch(line); m != nil {
		return ">" + inline(m[1])
	}
	if m := mdBullet.FindStringSubmatch(line); m != nil {
		item := m[2]
		mark := "•"
		if t := mdTask.FindStringSubmatch(item); t != nil {
			mark = "☐"
			if t[1] != " " {
				mark = "☑"
			}
			item = item[len(t[0]):]
		}
		return m[1] + mark + " " + inline(item)
	}
	return inline(line)
}

// inline converts a line's inline Markdown: code spans verbatim, the rest
// through inlineText.
func inline(s string) string {
	var b strings.Builder
	for s != "" {
		start := strings.IndexByte(s, '`')
		if start < 0 {
			b.WriteString(inlineText(s))
			break
		}
		n := start
		for n < len(s) && s[n] == '`' {
			n++
		}
		ticks := s[start:n]
		end := closingTicks(s[n:], len(ticks))
		if end < 0 {
			// No matching run: the backticks are literal text, broken up
			// so that three of them never pair, in Slack, with a fence
			// line (only a line that is exactly ``` holds three).
			b.WriteString(inlineText(s[:start]))
			b.WriteString(breakBackticks(ticks))
			s = s[n:]
			continue
		}
		b.WriteString(inlineText(s[:start]))
		code := s[n : n+end]
		if len(code) > 2 && code[0] == ' ' && code[len(code)-1] == ' ' {
			code = code[1 : len(code)-1]
		}
		b.WriteString(inlineCode(code))
		s = s[n+end+len(ticks):]
	}
	return b.String()
}

// closingTicks returns the index in s of the first run of exactly n
// backticks, or -1.
func closingTicks(s string, n int) int {
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] == '`' {
			j++
		}
		if j-i == n {
			return i
		}
		i = j
	}
	return -1
}

// inlineText converts emphasis and links in text outside code spans and
// escapes it.
func inlineText(s string) string {
	if s == "" {
		return ""
	}
	var saved []string
	protect := func(rendered string) string {
		saved = append(saved, rendered)
		return phOpen + strconv.Itoa(len(saved)-1) + phClose
	}

	s = mdLink.ReplaceAllStringFunc(s, func(m string) string {
		sub := mdLink.FindStringSubmatch(m)
		label, url := strings.TrimSpace(sub[2]), sub[3]
		if label == "" || label == url {
			return protect(Escape(url))
		}
		return protect(Escape(label) + " (" + Escape(url) + ")")
	})
	s = mdAutolink.ReplaceAllStringFunc(s, func(m string) string {
		return protect(Escape(m[1 : len(m)-1]))
	})
	s = bareURL.ReplaceAllStringFunc(s, func(m string) string {
		url := strings.TrimRight(m, ".,;:!?'\"*_~")
		return protect(Escape(url)) + m[len(url):]
	})

	s = Escape(s)
	s = mdBold.ReplaceAllString(s, phBold+"$1$2"+phBold)
	s = mdItalic.ReplaceAllString(s, "_${1}_")
	s = mdStrike.ReplaceAllString(s, "~${1}~")
	s = strings.ReplaceAll(s, phBold, "*")

	s = phRef.ReplaceAllStringFunc(s, func(m string) string {
		i, err := strconv.Atoi(phRef.FindStringSubmatch(m)[1])
		if err != nil || i >= len(saved) {
			return ""
		}
		return saved[i]
	})
	// Each piece was escaped alone: an at-sign outside a link and a word
	// inside it ("@[here](here)") may meet only now.
	return broadcastKeyword.ReplaceAllString(s, "@"+wordJoiner+"$1")
}

// AnswerMessages renders a model's answer as Slack messages: the Markdown is
// converted with MarkdownToMrkdwn and split into section blocks of at most
// 3000 characters, and the sections into messages of at most 50 blocks and
// maxMessageText characters of block text, far fewer than the 40,000 of a
// message's text field, which Slack does not apply to blocks. Sections are
// marked expand, so clients show them whole rather than behind "Show
// more". Splits fall between paragraphs where possible, then between
// lines, and only then inside a line. A code block that has to be split is
// closed at the end of one section and reopened at the start of the next.
// Blank input gives no messages.
func AnswerMessages(text string) [][]slack.Block {
	groups := messageGroups(splitMrkdwn(MarkdownToMrkdwn(text), maxSectionText))
	msgs := make([][]slack.Block, len(groups))
	for i, g := range groups {
		for _, c := range g {
			msgs[i] = append(msgs[i], slack.NewSectionBlock(mrkdwn(c), nil, nil, slack.SectionBlockOptionExpand(true)))
		}
	}
	return msgs
}

// messageGroups groups sections' texts into messages of at most
// maxMessageBlocks sections and maxMessageText characters, in order.
func messageGroups(sections []string) [][]string {
	var groups [][]string
	var cur []string
	size := 0
	for _, c := range sections {
		if len(cur) > 0 && (len(cur) == maxMessageBlocks || size+textLen(c) > maxMessageText) {
			groups = append(groups, cur)
			cur, size = nil, 0
		}
		cur = append(cur, c)
		size += textLen(c)
	}
	if len(cur) > 0 {
		groups = append(groups, cur)
	}
	return groups
}

// fitMrkdwn cuts mrkdwn produced by MarkdownToMrkdwn to at most max
// characters without leaving a code block open, ending it with an ellipsis
// line when it cuts. It reports whether it cut.
func fitMrkdwn(s string, max int) (string, bool) {
	if textLen(s) <= max {
		return s, false
	}
	more := "\n" + ellipsis
	chunks := splitMrkdwn(s, max-textLen(more))
	if len(chunks) == 0 {
		return "", true
	}
	return chunks[0] + more, true
}

// quoteLines marks every line of mrkdwn as a block quote: the model's
// words (a question) set apart from the bot's own lines around them, which
// they could otherwise imitate.
func quoteLines(s string) string {
	return ">" + strings.ReplaceAll(s, "\n", "\n>")
}

// fitQuoted is fitMrkdwn for mrkdwn shown as a block quote (quoteLines):
// the quoted text is at most max characters.
func fitQuoted(s string, max int) (string, bool) {
	for n := max; ; n = n * 9 / 10 {
		q, cut := fitMrkdwn(s, n)
		if quoted := quoteLines(q); textLen(quoted) <= max || n < 16 {
			return quoted, cut
		}
	}
}

// splitQuoted is splitMrkdwn for mrkdwn shown as a block quote: each
// chunk, once quoted (quoteLines), is at most max characters. A chunk of
// n characters has at most n+1 lines, each given a '>'.
func splitQuoted(s string, max int) []string {
	chunks := splitMrkdwn(s, (max-1)/2)
	for i, c := range chunks {
		chunks[i] = quoteLines(c)
	}
	return chunks
}

// splitMrkdwn splits mrkdwn produced by MarkdownToMrkdwn (in which a line
// that is exactly ``` opens or closes a code block, and no other line
// contains three backticks) into chunks of at most max characters, each
// with balanced code fences.
func splitMrkdwn(s string, max int) []string {
	var chunks []string
	cur := ""
	add := func(p string) {
		if cur == "" {
			cur = p
			return
		}
		if textLen(cur)+2+textLen(p) <= max {
			cur += "\n\n" + p
			return
		}
		chunks = append(chunks, cur)
		cur = p
	}
	for _, p := range paragraphs(s) {
		if textLen(p) <= max {
			add(p)
			continue
		}
		for _, piece := range splitLines(p, max) {
			add(piece)
		}
	}
	if strings.TrimSpace(cur) != "" {
		chunks = append(chunks, cur)
	}
	return chunks
}

// paragraphs splits s at blank lines outside code blocks, dropping empty
// paragraphs. Blank lines inside a code block stay in its paragraph.
func paragraphs(s string) []string {
	var out, cur []string
	inCode := false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
	}
	for _, line := range strings.Split(s, "\n") {
		if line == "```" {
			inCode = !inCode
		}
		if !inCode && line != "```" && strings.TrimSpace(line) == "" {
			flush()
			continue
		}
		cur = append(cur, line)
	}
	flush()
	return out
}

// splitLines splits one paragraph longer than max into pieces of at most max
// characters at line breaks, cutting lines that are themselves too long. A
// code block open at a cut is closed in the piece before it and reopened in
// the piece after it.
func splitLines(p string, max int) []string {
	const fence = "```"
	var pieces []string
	var cur []string
	curLen := 0
	inCode := false
	// room is what a piece may hold besides the closing fence it may need.
	room := max - textLen("\n"+fence)
	flush := func() {
		if len(cur) == 0 {
			return
		}
		if inCode {
			cur = append(cur, fence)
		}
		pieces = append(pieces, strings.Join(cur, "\n"))
		cur, curLen = nil, 0
		if inCode {
			cur = []string{fence}
			curLen = textLen(fence)
		}
	}
	push := func(line string) {
		n := textLen(line)
		if len(cur) > 0 {
			n++ // the line break before it
		}
		if curLen+n > room {
			flush()
			n = textLen(line)
			if len(cur) > 0 {
				n++
			}
		}
		cur = append(cur, line)
		curLen += n
	}
	for _, line := range strings.Split(p, "\n") {
		if line == fence {
			if inCode && len(cur) == 1 && cur[0] == fence {
				// A block that ends right after being reopened: drop the
				// empty reopening instead of emitting an empty code block.
				cur, curLen = nil, 0
				inCode = false
				continue
			}
			push(line)
			inCode = !inCode
			continue
		}
		// Cut long lines so that each part fits in a piece of its own.
		limit := room - textLen(fence) - 1
		for textLen(line) > limit {
			i := cutIndex(line, limit)
			if i == 0 {
				break
			}
			push(line[:i])
			line = line[i:]
		}
		push(line)
	}
	if inCode {
		cur = append(cur, fence)
		inCode = false
	}
	if len(cur) > 0 {
		pieces = append(pieces, strings.Join(cur, "\n"))
	}
	return pieces
}
