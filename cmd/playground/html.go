package main

import (
	"encoding/json"
	"fmt"
	"html"
	"html/template"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Rendering Slack messages as HTML for the web page: Block Kit JSON, Slack
// mrkdwn and the Markdown of streamed answers. Everything the bot sent is
// written through htmlBuilder.text or .attr, which escape it: markup comes
// only from the constant strings of this file, so no text from the bot (or
// the model) can become HTML, and links are made only for http, https and
// mailto addresses.

// renderer renders for one page: it knows the names of users and channels
// and the time zone dates are shown in.
type renderer struct {
	user    func(id string) (name string, ok bool)
	channel func(id string) (name string, ok bool)
	loc     *time.Location
	// now is the clock of relative dates ({ago}); nil: time.Now.
	now func() time.Time
}

// htmlBuilder accumulates HTML. raw takes markup written in this file,
// never data; text and attr escape data.
type htmlBuilder struct{ strings.Builder }

func (b *htmlBuilder) raw(markup string) { b.WriteString(markup) }

// text writes s as text.
func (b *htmlBuilder) text(s string) { b.WriteString(html.EscapeString(s)) }

// attr writes ` name="value"` with value escaped.
func (b *htmlBuilder) attr(name, value string) {
	b.WriteString(" " + name + `="` + html.EscapeString(value) + `"`)
}

// html returns what was built; it is safe because of how it was built.
func (b *htmlBuilder) html() template.HTML { return template.HTML(b.String()) }

// Block Kit, as far as the page reads it.
type (
	textObject struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		Verbatim bool   `json:"verbatim"`
	}
	option struct {
		Text  textObject `json:"text"`
		Value string     `json:"value"`
	}
	confirmDialog struct {
		Title   *textObject `json:"title"`
		Text    *textObject `json:"text"`
		Confirm *textObject `json:"confirm"`
		Deny    *textObject `json:"deny"`
		Style   string      `json:"style"`
	}
	element struct {
		Type          string         `json:"type"`
		ActionID      string         `json:"action_id"`
		Value         string         `json:"value"`
		Style         string         `json:"style"`
		URL           string         `json:"url"`
		Text          *textObject    `json:"text"`
		Confirm       *confirmDialog `json:"confirm"`
		Placeholder   *textObject    `json:"placeholder"`
		InitialValue  string         `json:"initial_value"`
		Multiline     bool           `json:"multiline"`
		Options       []option       `json:"options"`
		InitialOption *option        `json:"initial_option"`
		ImageURL      string         `json:"image_url"`
		AltText       string         `json:"alt_text"`
	}
	block struct {
		Type      string            `json:"type"`
		BlockID   string            `json:"block_id"`
		Text      json.RawMessage   `json:"text"` // an object, or a string in markdown blocks
		Fields    []textObject      `json:"fields"`
		Accessory *element          `json:"accessory"`
		Elements  []json.RawMessage `json:"elements"`
		Label     *textObject       `json:"label"`
		Element   *element          `json:"element"`
		Hint      *textObject       `json:"hint"`
		Optional  bool              `json:"optional"`
		AltText   string            `json:"alt_text"`
	}
	view struct {
		ID     string      `json:"id"`
		Type   string      `json:"type"`
		Title  *textObject `json:"title"`
		Submit *textObject `json:"submit"`
		Close  *textObject `json:"close"`
		Blocks []block     `json:"blocks"`
	}
)

// message renders a message: its blocks, or its text when it has none.
// Text of streamed messages is Markdown; other text is mrkdwn.
func (r renderer) message(blocks json.RawMessage, text string, markdown bool) template.HTML {
	var b htmlBuilder
	var list []block
	if len(blocks) > 0 && json.Unmarshal(blocks, &list) == nil && len(list) > 0 {
		r.blocks(&b, list, nil)
		return b.html()
	}
	if markdown {
		r.markdown(&b, text)
	} else {
		b.raw(`<div class="mrkdwn">`)
		r.mrkdwn(&b, text)
		b.raw(`</div>`)
	}
	return b.html()
}

// blocks renders blocks; errs are a modal's inline errors by block_id.
func (r renderer) blocks(b *htmlBuilder, list []block, errs map[string]string) {
	for _, bl := range list {
		switch bl.Type {
		case "header":
			var t textObject
			_ = json.Unmarshal(bl.Text, &t)
			b.raw(`<div class="bk-header">`)
			b.text(t.Text)
			b.raw(`</div>`)
		case "section":
			b.raw(`<div class="bk-section"><div class="bk-section-body">`)
			var t textObject
			if json.Unmarshal(bl.Text, &t) == nil && t.Text != "" {
				b.raw(`<div class="bk-text">`)
				r.textObject(b, t)
				b.raw(`</div>`)
			}
			if len(bl.Fields) > 0 {
				b.raw(`<div class="bk-fields">`)
				for _, f := range bl.Fields {
					b.raw(`<div class="bk-field">`)
					r.textObject(b, f)
					b.raw(`</div>`)
				}
				b.raw(`</div>`)
			}
			b.raw(`</div>`)
			if bl.Accessory != nil {
				b.raw(`<div class="bk-accessory">`)
				r.element(b, *bl.Accessory, bl.BlockID)
				b.raw(`</div>`)
			}
			b.raw(`</div>`)
		case "context":
			b.raw(`<div class="bk-context">`)
			for _, raw := range bl.Elements {
				var el element
				_ = json.Unmarshal(raw, &el)
				if el.Type == "image" {
					b.raw(`<span class="bk-image-alt">`)
					b.text("[" + el.AltText + "]")
					b.raw(`</span>`)
					continue
				}
				var t textObject
				_ = json.Unmarshal(raw, &t)
				b.raw(`<span class="bk-context-item">`)
				r.textObject(b, t)
				b.raw(`</span>`)
			}
			b.raw(`</div>`)
		case "divider":
			b.raw(`<hr class="bk-divider">`)
		case "actions":
			b.raw(`<div class="bk-actions">`)
			for _, raw := range bl.Elements {
				var el element
				_ = json.Unmarshal(raw, &el)
				r.element(b, el, bl.BlockID)
			}
			b.raw(`</div>`)
		case "markdown":
			var s string
			_ = json.Unmarshal(bl.Text, &s)
			r.markdown(b, s)
		case "input":
			r.input(b, bl, errs[bl.BlockID])
		case "image":
			b.raw(`<div class="bk-image-alt">`)
			b.text("[image: " + bl.AltText + "]")
			b.raw(`</div>`)
		default:
			b.raw(`<div class="bk-unknown">`)
			b.text("(a " + bl.Type + " block the playground does not show)")
			b.raw(`</div>`)
		}
	}
}

// textObject renders plain_text as text and mrkdwn as mrkdwn.
func (r renderer) textObject(b *htmlBuilder, t textObject) {
	if t.Type == "mrkdwn" {
		r.mrkdwn(b, t.Text)
		return
	}
	b.text(t.Text)
}

// element renders an interactive element. Buttons carry their action_id,
// value and block_id for the page's script, and their confirm dialog, if
// any, as a hidden element next to them.
func (r renderer) element(b *htmlBuilder, el element, blockID string) {
	switch el.Type {
	case "button":
		label := ""
		if el.Text != nil {
			label = el.Text.Text
		}
		if el.URL != "" {
			if safeURL(el.URL) {
				b.raw(`<a class="bk-btn" target="_blank" rel="noopener noreferrer"`)
				b.attr("href", el.URL)
				b.raw(`>`)
				b.text(label)
				b.raw(`</a>`)
			} else {
				b.raw(`<span class="bk-btn bk-disabled">`)
				b.text(label)
				b.raw(`</span>`)
			}
			return
		}
		b.raw(`<span class="bk-btn-wrap"><button type="button" class="bk-btn`)
		switch el.Style {
		case "primary":
			b.raw(` bk-primary`)
		case "danger":
			b.raw(` bk-danger`)
		}
		b.raw(`"`)
		b.attr("data-action-id", el.ActionID)
		b.attr("data-value", el.Value)
		b.attr("data-block-id", blockID)
		b.raw(`>`)
		b.text(label)
		b.raw(`</button>`)
		if c := el.Confirm; c != nil {
			b.raw(`<div class="bk-confirm" hidden><div class="bk-confirm-box">`)
			b.raw(`<div class="bk-confirm-title">`)
			if c.Title != nil {
				b.text(c.Title.Text)
			}
			b.raw(`</div><div class="bk-confirm-text">`)
			if c.Text != nil {
				r.textObject(b, *c.Text)
			}
			b.raw(`</div><div class="bk-confirm-buttons"><button type="button" class="bk-btn bk-confirm-no">`)
			b.text(labelOr(c.Deny, "Cancel"))
			b.raw(`</button><button type="button" class="bk-btn bk-confirm-yes`)
			if c.Style == "danger" {
				b.raw(` bk-danger`)
			} else {
				b.raw(` bk-primary`)
			}
			b.raw(`">`)
			b.text(labelOr(c.Confirm, "Confirm"))
			b.raw(`</button></div></div></div>`)
		}
		b.raw(`</span>`)
	case "image":
		b.raw(`<span class="bk-image-alt">`)
		b.text("[" + el.AltText + "]")
		b.raw(`</span>`)
	default:
		b.raw(`<span class="bk-unknown">`)
		b.text("(" + el.Type + ")")
		b.raw(`</span>`)
	}
}

func labelOr(t *textObject, def string) string {
	if t == nil || t.Text == "" {
		return def
	}
	return t.Text
}

// input renders an input block of a modal with its inline error.
func (r renderer) input(b *htmlBuilder, bl block, errMsg string) {
	b.raw(`<div class="bk-input`)
	if errMsg != "" {
		b.raw(` bk-has-error`)
	}
	b.raw(`"`)
	b.attr("data-block-id", bl.BlockID)
	b.raw(`><label class="bk-label">`)
	if bl.Label != nil {
		b.text(bl.Label.Text)
	}
	if bl.Optional {
		b.raw(` <span class="bk-optional">(optional)</span>`)
	}
	b.raw(`</label>`)
	if el := bl.Element; el != nil {
		placeholder := ""
		if el.Placeholder != nil {
			placeholder = el.Placeholder.Text
		}
		switch el.Type {
		case "plain_text_input":
			if el.Multiline {
				b.raw(`<textarea class="bk-field-input" rows="6"`)
				b.attr("data-action-id", el.ActionID)
				b.attr("placeholder", placeholder)
				b.raw(`>`)
				b.text(el.InitialValue)
				b.raw(`</textarea>`)
			} else {
				b.raw(`<input type="text" class="bk-field-input"`)
				b.attr("data-action-id", el.ActionID)
				b.attr("placeholder", placeholder)
				b.attr("value", el.InitialValue)
				b.raw(`>`)
			}
		case "static_select", "radio_buttons":
			b.raw(`<select class="bk-field-input"`)
			b.attr("data-action-id", el.ActionID)
			b.raw(`>`)
			for _, o := range el.Options {
				b.raw(`<option`)
				b.attr("value", o.Value)
				if el.InitialOption != nil && el.InitialOption.Value == o.Value {
					b.raw(` selected`)
				}
				b.raw(`>`)
				b.text(o.Text.Text)
				b.raw(`</option>`)
			}
			b.raw(`</select>`)
		default:
			b.raw(`<div class="bk-unknown">`)
			b.text("(a " + el.Type + " input the playground does not show)")
			b.raw(`</div>`)
		}
	}
	if errMsg != "" {
		b.raw(`<div class="bk-error">`)
		b.text(errMsg)
		b.raw(`</div>`)
	}
	if bl.Hint != nil {
		b.raw(`<div class="bk-hint">`)
		b.text(bl.Hint.Text)
		b.raw(`</div>`)
	}
	b.raw(`</div>`)
}

// modal renders a modal view with its inline errors (from a
// response_action "errors" ack) by block_id.
func (r renderer) modal(raw json.RawMessage, errs map[string]string) template.HTML {
	var v view
	var b htmlBuilder
	if err := json.Unmarshal(raw, &v); err != nil {
		b.text("unreadable view: " + err.Error())
		return b.html()
	}
	b.raw(`<div class="modal"`)
	b.attr("data-view-id", v.ID)
	b.raw(`><div class="modal-head"><span class="modal-title">`)
	b.text(labelOr(v.Title, ""))
	b.raw(`</span><button type="button" class="modal-x" title="Close">×</button></div><div class="modal-body">`)
	r.blocks(&b, v.Blocks, errs)
	// The page says here why a submission failed: the rest of the page
	// is under the modal's overlay.
	b.raw(`</div><div class="modal-foot"><div class="modal-error" role="alert" hidden></div><button type="button" class="bk-btn modal-close">`)
	b.text(labelOr(v.Close, "Cancel"))
	b.raw(`</button>`)
	if v.Submit != nil {
		b.raw(`<button type="button" class="bk-btn bk-primary modal-submit">`)
		b.text(v.Submit.Text)
		b.raw(`</button>`)
	}
	b.raw(`</div></div>`)
	return b.html()
}

// view renders the blocks of a Home tab.
func (r renderer) view(raw json.RawMessage) template.HTML {
	var v view
	var b htmlBuilder
	if err := json.Unmarshal(raw, &v); err != nil {
		b.text("unreadable view: " + err.Error())
		return b.html()
	}
	b.raw(`<div class="home-view"`)
	b.attr("data-view-id", v.ID)
	b.raw(`>`)
	r.blocks(&b, v.Blocks, nil)
	b.raw(`</div>`)
	return b.html()
}

// unescapeSlack undoes the three escapes Slack text uses: &amp;, &lt; and
// &gt;. Other entities stay as written, as in Slack.
var unescapeSlack = strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&")

// mrkdwn renders Slack mrkdwn: ``` code blocks, > quotes, and within lines
// *bold*, _italic_, ~strike~, `code`, <links>, <@mentions>, <!date^…>.
func (r renderer) mrkdwn(b *htmlBuilder, s string) {
	lines := strings.Split(s, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "```") {
			// A code block runs to the next line that ends with ```.
			var code []string
			first := strings.TrimPrefix(line, "```")
			if rest, ok := strings.CutSuffix(first, "```"); ok && first != "" {
				b.raw(`<pre class="code">`)
				b.text(unescapeSlack.Replace(rest))
				b.raw(`</pre>`)
				continue
			}
			if first != "" {
				code = append(code, first)
			}
			j := i + 1
			closed := false
			for ; j < len(lines); j++ {
				if l, ok := strings.CutSuffix(lines[j], "```"); ok {
					if l != "" {
						code = append(code, l)
					}
					closed = true
					break
				}
				code = append(code, lines[j])
			}
			if closed {
				b.raw(`<pre class="code">`)
				b.text(unescapeSlack.Replace(strings.Join(code, "\n")))
				b.raw(`</pre>`)
				i = j
				continue
			}
		}
		if q, ok := quoted(line); ok {
			b.raw(`<blockquote>`)
			r.inline(b, q)
			for i+1 < len(lines) {
				q, ok := quoted(lines[i+1])
				if !ok {
					break
				}
				i++
				b.raw(`<br>`)
				r.inline(b, q)
			}
			b.raw(`</blockquote>`)
			continue
		}
		r.inline(b, line)
		if i < len(lines)-1 {
			b.raw(`<br>`)
		}
	}
}

// styles are mrkdwn's inline styles by marker.
var styles = map[byte][2]string{
	'*': {`<b>`, `</b>`},
	'_': {`<i>`, `</i>`},
	'~': {`<s>`, `</s>`},
}

// inline renders one line of mrkdwn.
func (r renderer) inline(b *htmlBuilder, s string) {
	var plain strings.Builder
	flush := func() {
		b.text(emojiCodes.Replace(unescapeSlack.Replace(plain.String())))
		plain.Reset()
	}
	// unclosed[c] is set once a search for the close of c found none past
	// some position, so none past a later one either: each search is then
	// made once, not once per opening marker (a line of many unclosed
	// markers would take quadratic time).
	var unclosed [256]bool
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case unclosed[c]:
		case c == '`':
			end := strings.IndexByte(s[i+1:], '`')
			if end > 0 {
				flush()
				b.raw(`<code>`)
				b.text(unescapeSlack.Replace(s[i+1 : i+1+end]))
				b.raw(`</code>`)
				i += end + 2
				continue
			}
			unclosed[c] = end < 0
		case c == '<':
			end := strings.IndexByte(s[i+1:], '>')
			if end > 0 {
				flush()
				r.special(b, s[i+1:i+1+end])
				i += end + 2
				continue
			}
			unclosed[c] = end < 0
		case styles[c] != [2]string{} && styleOpens(s, i):
			if end, ok := styleEnd(s, i); ok {
				flush()
				tags := styles[c]
				b.raw(tags[0])
				r.inline(b, s[i+1:end])
				b.raw(tags[1])
				i = end + 1
				continue
			}
			unclosed[c] = true
		}
		plain.WriteByte(c)
		i++
	}
	flush()
}

// styleOpens reports whether the style marker at s[i] may open a style: at
// a word start, followed by a non-space other than itself.
func styleOpens(s string, i int) bool {
	if i > 0 {
		prev, _ := utf8.DecodeLastRuneInString(s[:i])
		if isWordRune(prev) {
			return false
		}
	}
	return i+1 < len(s) && s[i+1] != ' ' && s[i+1] != s[i]
}

// styleEnd finds the closing marker of a style opened at s[i] (see
// styleOpens): after a non-space, at a word end. Whether a marker closes
// does not depend on i, so none past i means none past any later opening.
func styleEnd(s string, i int) (int, bool) {
	m := s[i]
	for j := i + 2; j < len(s); j++ {
		if s[j] != m || s[j-1] == ' ' {
			continue
		}
		if j+1 < len(s) {
			next, _ := utf8.DecodeRuneInString(s[j+1:])
			if isWordRune(next) {
				continue
			}
		}
		return j, true
	}
	return 0, false
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// dateToken is a {token} of a <!date^…> format.
var dateToken = regexp.MustCompile(`\{[a-z_]+\}`)

// special renders the inside of <…>: a mention, a broadcast, a date or a
// link. Anything else is shown as written.
func (r renderer) special(b *htmlBuilder, in string) {
	body, label, _ := strings.Cut(in, "|")
	label = unescapeSlack.Replace(label)
	switch {
	case strings.HasPrefix(body, "@"):
		id := body[1:]
		name, ok := r.user(id)
		if !ok {
			name = id
		}
		b.raw(`<span class="mention">@`)
		b.text(name)
		b.raw(`</span>`)
	case strings.HasPrefix(body, "#"):
		id := body[1:]
		name, ok := r.channel(id)
		if !ok {
			name = cmpOr(label, id)
		}
		b.raw(`<span class="mention">#`)
		b.text(name)
		b.raw(`</span>`)
	case strings.HasPrefix(body, "!subteam^"):
		b.raw(`<span class="mention">`)
		b.text(cmpOr(label, "@"+strings.TrimPrefix(body, "!subteam^")))
		b.raw(`</span>`)
	case strings.HasPrefix(body, "!date^"):
		parts := strings.SplitN(body, "^", 4)
		if len(parts) < 3 {
			b.text(label)
			return
		}
		sec, err := strconv.ParseInt(parts[1], 10, 64)
		if err != nil {
			b.text(label)
			return
		}
		t := time.Unix(sec, 0).In(r.loc)
		text := dateToken.ReplaceAllStringFunc(unescapeSlack.Replace(parts[2]), func(tok string) string {
			return r.formatDateToken(tok, t)
		})
		b.raw(`<time`)
		b.attr("datetime", t.Format(time.RFC3339))
		b.raw(`>`)
		b.text(text)
		b.raw(`</time>`)
	case body == "!here" || body == "!channel" || body == "!everyone":
		b.raw(`<span class="mention broadcast">@`)
		b.text(body[1:])
		b.raw(`</span>`)
	case strings.HasPrefix(body, "!"):
		b.text(cmpOr(label, "<"+unescapeSlack.Replace(in)+">"))
	default:
		url := unescapeSlack.Replace(body)
		if !safeURL(url) {
			b.text("<" + unescapeSlack.Replace(in) + ">")
			return
		}
		b.raw(`<a target="_blank" rel="noopener noreferrer"`)
		b.attr("href", url)
		b.raw(`>`)
		b.text(cmpOr(label, url))
		b.raw(`</a>`)
	}
}

// formatDateToken renders one token of a <!date^…> format.
func (r *renderer) formatDateToken(tok string, t time.Time) string {
	switch tok {
	case "{ago}":
		now := time.Now
		if r.now != nil {
			now = r.now
		}
		return ago(now().Sub(t))
	case "{date_num}":
		return t.Format("2006-01-02")
	case "{date}", "{date_pretty}":
		return t.Format("January 2, 2006")
	case "{date_short}", "{date_short_pretty}":
		return t.Format("Jan 2, 2006")
	case "{date_long}", "{date_long_pretty}":
		return t.Format("Monday, January 2, 2006")
	case "{time}":
		return t.Format("15:04")
	case "{time_secs}":
		return t.Format("15:04:05")
	}
	return tok
}

// quoted returns a quoted line's text: Slack shows a line that starts with
// ">", written as is or escaped as "&gt;", as a quote.
func quoted(line string) (string, bool) {
	q, ok := strings.CutPrefix(line, "&gt;")
	if !ok {
		q, ok = strings.CutPrefix(line, ">")
	}
	return strings.TrimPrefix(q, " "), ok
}

// ago says how long ago something was, as Slack's {ago} does.
func ago(d time.Duration) string {
	unit := func(n int64, one string) string {
		if n == 1 {
			return "1 " + one + " ago"
		}
		return fmt.Sprintf("%d %ss ago", n, one)
	}
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 24*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}

// safeURL reports whether u may become a link: http, https or mailto.
func safeURL(u string) bool {
	l := strings.ToLower(u)
	return strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "mailto:")
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// emojiCodes are the emoji codes the bot uses, as characters.
var emojiCodes = strings.NewReplacer(
	":white_check_mark:", "✅", ":no_entry:", "⛔", ":no_entry_sign:", "🚫", ":x:", "❌",
	":hourglass_flowing_sand:", "⏳", ":hourglass:", "⌛", ":eyes:", "👀", ":pencil2:", "✏️",
	":speech_balloon:", "💬", ":warning:", "⚠️", ":lock:", "🔒", ":information_source:", "ℹ️",
	":stopwatch:", "⏱️", ":question:", "❓", ":bell:", "🔔", ":memo:", "📝", ":thinking_face:", "🤔",
)

// markdown renders the Markdown of markdown blocks and streamed answers:
// ``` code blocks, # headings, - lists, > quotes, and within lines
// **bold**, *italic*, ~~strike~~, `code` and [label](url) links. The
// three Slack escapes are undone first, as Slack does for this text.
func (r renderer) markdown(b *htmlBuilder, s string) {
	b.raw(`<div class="markdown">`)
	lines := strings.Split(unescapeSlack.Replace(s), "\n")
	inList := false
	endList := func() {
		if inList {
			b.raw(`</ul>`)
			inList = false
		}
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			endList()
			var code []string
			j := i + 1
			for ; j < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[j]), "```"); j++ {
				code = append(code, lines[j])
			}
			b.raw(`<pre class="code">`)
			b.text(strings.Join(code, "\n"))
			b.raw(`</pre>`)
			i = j
		case mdHeading(trimmed) > 0:
			endList()
			level := mdHeading(trimmed)
			b.raw(fmt.Sprintf(`<div class="md-h md-h%d">`, min(level, 3)))
			r.mdInline(b, strings.TrimSpace(trimmed[level:]))
			b.raw(`</div>`)
		case strings.HasPrefix(trimmed, "- ") || strings.HasPrefix(trimmed, "* ") || strings.HasPrefix(trimmed, "• "):
			if !inList {
				b.raw(`<ul>`)
				inList = true
			}
			_, item, _ := strings.Cut(trimmed, " ")
			b.raw(`<li>`)
			r.mdInline(b, item)
			b.raw(`</li>`)
		case strings.HasPrefix(trimmed, ">"):
			endList()
			b.raw(`<blockquote>`)
			r.mdInline(b, strings.TrimSpace(trimmed[1:]))
			b.raw(`</blockquote>`)
		case trimmed == "":
			endList()
			if i > 0 && i < len(lines)-1 {
				b.raw(`<div class="md-gap"></div>`)
			}
		default:
			endList()
			b.raw(`<div class="md-p">`)
			r.mdInline(b, line)
			b.raw(`</div>`)
		}
	}
	endList()
	b.raw(`</div>`)
}

// mdHeading returns the level of the heading line opens (its 1 to 6
// "#"), or 0 if it opens none: the "#" must be followed by a space or end
// the line, so "#ops" and "#1" are text.
func mdHeading(line string) int {
	level := len(line) - len(strings.TrimLeft(line, "#"))
	if level == 0 || level > 6 || (level < len(line) && line[level] != ' ' && line[level] != '\t') {
		return 0
	}
	return level
}

// mdLinks finds the inline Markdown links, [label](url), of one line: a
// "[" opens one when the first "]" after it is followed by "(" and then by
// a ")" before any white space (as the pattern ^\[([^\]]*)\]\(([^)\s]*)\)
// would match). Every "[" before a "]" shares that "]", and every "](" before
// a ")" or white space shares that, so each is searched for once per line,
// not once per "[": a streamed line of many "[" would take quadratic time.
type mdLinks struct {
	s          string
	close, end scan
}

func newMDLinks(s string) *mdLinks {
	return &mdLinks{
		s:     s,
		close: scan{is: func(c byte) bool { return c == ']' }},
		end: scan{is: func(c byte) bool {
			return c == ')' || c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
		}},
	}
}

// at returns the link that opens at s[i], a "[": its label, its URL and
// its length in bytes. Calls must come in increasing order of i.
func (l *mdLinks) at(i int) (label, url string, n int, ok bool) {
	j := l.close.next(l.s, i+1)
	if j < 0 || j+1 >= len(l.s) || l.s[j+1] != '(' {
		return "", "", 0, false
	}
	k := l.end.next(l.s, j+2)
	if k < 0 || l.s[k] != ')' {
		return "", "", 0, false
	}
	return l.s[i+1 : j], l.s[j+2 : k], k + 1 - i, true
}

// scan finds the first byte of a kind at or after a position. It keeps its
// last answer, which is also the answer for any later position up to the
// byte found (or for every later position, if none was): searches from
// increasing positions look at each byte once in all.
type scan struct {
	is       func(byte) bool
	searched bool
	from, at int // the last search started at from and found at (-1: none)
}

func (c *scan) next(s string, from int) int {
	if c.searched && from >= c.from && (c.at < 0 || from <= c.at) {
		return c.at
	}
	c.searched, c.from, c.at = true, from, -1
	for i := from; i < len(s); i++ {
		if c.is(s[i]) {
			c.at = i
			break
		}
	}
	return c.at
}

// mdStyles are Markdown's inline styles, longest marker first.
var mdStyles = []struct{ marker, open, close string }{
	{"**", `<b>`, `</b>`},
	{"~~", `<s>`, `</s>`},
	{"*", `<i>`, `</i>`},
	{"_", `<i>`, `</i>`},
}

// mdInline renders one line of Markdown.
func (r renderer) mdInline(b *htmlBuilder, s string) {
	var plain strings.Builder
	flush := func() {
		b.text(emojiCodes.Replace(plain.String()))
		plain.Reset()
	}
	links := newMDLinks(s)
	var closers []int // see underscoreClosers, made at the first "_" that may open
outer:
	for i := 0; i < len(s); {
		rest := s[i:]
		if rest[0] == '`' {
			if end := strings.IndexByte(rest[1:], '`'); end > 0 {
				flush()
				b.raw(`<code>`)
				b.text(rest[1 : 1+end])
				b.raw(`</code>`)
				i += end + 2
				continue
			}
		}
		if rest[0] == '[' {
			if label, url, n, ok := links.at(i); ok && safeURL(url) {
				flush()
				b.raw(`<a target="_blank" rel="noopener noreferrer"`)
				b.attr("href", url)
				b.raw(`>`)
				b.text(cmpOr(label, url))
				b.raw(`</a>`)
				i += n
				continue
			}
		}
		for _, st := range mdStyles {
			if !strings.HasPrefix(rest, st.marker) || len(rest) <= 2*len(st.marker) || rest[len(st.marker)] == ' ' {
				continue
			}
			var end int
			if st.marker == "_" {
				// An underscore inside a word opens and closes nothing
				// (CommonMark): snake_case and a_b.txt are text.
				if wordBefore(s, i) {
					continue
				}
				if closers == nil {
					closers = underscoreClosers(s)
				}
				end = closers[i+1] - (i + 1)
			} else {
				end = strings.Index(rest[len(st.marker):], st.marker)
			}
			if end <= 0 || rest[len(st.marker)+end-1] == ' ' {
				continue
			}
			flush()
			b.raw(st.open)
			r.mdInline(b, rest[len(st.marker):len(st.marker)+end])
			b.raw(st.close)
			i += 2*len(st.marker) + end
			continue outer
		}
		plain.WriteByte(s[i])
		i++
	}
	flush()
}

// wordBefore reports whether s[i] comes right after a letter or a digit.
func wordBefore(s string, i int) bool {
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return i > 0 && (unicode.IsLetter(r) || unicode.IsDigit(r))
}

// underscoreClosers returns, for each index i of s and len(s), the index
// of the first "_" at or after i that can close an emphasis, one not
// followed by a letter or a digit, or -1: found for all at once, so a
// line of many "_" that close nothing takes linear time.
func underscoreClosers(s string) []int {
	next := make([]int, len(s)+1)
	next[len(s)] = -1
	wordAfter := false
	for i := len(s) - 1; i >= 0; i-- {
		next[i] = next[i+1]
		if s[i] == '_' && !wordAfter {
			next[i] = i
		}
		if utf8.RuneStart(s[i]) {
			r, _ := utf8.DecodeRuneInString(s[i:])
			wordAfter = unicode.IsLetter(r) || unicode.IsDigit(r)
		}
	}
	return next
}
