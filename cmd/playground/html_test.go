package main

import (
	"context"
	"encoding/json"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

var update = flag.Bool("update", false, "rewrite the renderer's testdata/*.golden.html files")

// testRenderer knows two people and one channel and shows dates in UTC.
func testRenderer() renderer {
	users := map[string]string{"U024REQST": "requester", "U024BE7LH": "alice", "U0ALICE001": "alice"}
	return renderer{
		user:    func(id string) (string, bool) { n, ok := users[id]; return n, ok },
		channel: func(id string) (string, bool) { return map[string]string{"C0OPS00001": "ops"}[id], id == "C0OPS00001" },
		loc:     time.UTC,
		now:     func() time.Time { return time.Unix(1700000000, 0).Add(90 * time.Minute) },
	}
}

// TestRenderGolden renders whole messages and views the bot sends (the
// Slack app's own golden JSON) and compares them with
// testdata/NAME.golden.html; -update rewrites those files.
func TestRenderGolden(t *testing.T) {
	r := testRenderer()
	for _, tc := range []struct {
		name   string
		render func(raw []byte) string
	}{
		{"card_pending", func(raw []byte) string { return string(r.message(raw, "", false)) }},
		{"card_approved", func(raw []byte) string { return string(r.message(raw, "", false)) }},
		{"card_hostile", func(raw []byte) string { return string(r.message(raw, "", false)) }},
		{"home", func(raw []byte) string { return string(r.view(raw)) }},
		{"modal_edit", func(raw []byte) string {
			return string(r.modal(raw, map[string]string{"edit_args": "invalid JSON: unexpected end of input <at> line 1"}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tc.name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			// Lines per element, so that a diff is readable.
			got := strings.ReplaceAll(tc.render(raw), "><", ">\n<") + "\n"
			golden := filepath.Join("testdata", tc.name+".golden.html")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s: rendering differs from %s:\n%s", tc.name, golden, got)
			}
			for _, bad := range []string{"<script", "javascript:", " onerror", " onclick"} {
				if strings.Contains(strings.ToLower(got), bad) {
					t.Errorf("%s: the HTML has %q", tc.name, bad)
				}
			}
		})
	}
}

func TestMrkdwn(t *testing.T) {
	r := testRenderer()
	for _, tc := range []struct{ in, want string }{
		// Hostile text: nothing becomes markup.
		{`<script>alert(1)</script>`, `&lt;script&gt;alert(1)&lt;/script&gt;`},
		{`&lt;script&gt;alert(1)&lt;/script&gt;`, `&lt;script&gt;alert(1)&lt;/script&gt;`},
		{`<img src=x onerror=alert(1)>`, `&lt;img src=x onerror=alert(1)&gt;`},
		{`"quotes" & 'apostrophes'`, `&#34;quotes&#34; &amp; &#39;apostrophes&#39;`},
		{`&amp;lt;b&amp;gt;`, `&amp;lt;b&amp;gt;`},
		// Broadcasts the bot escaped stay text; real ones are shown as
		// Slack shows them, so a bot that lets one through is caught.
		{`&lt;!channel&gt; hi`, `&lt;!channel&gt; hi`},
		{`<!channel> hi`, `<span class="mention broadcast">@channel</span> hi`},
		{`<!here|here>`, `<span class="mention broadcast">@here</span>`},
		// Links: only http, https and mailto; labels and addresses are text.
		{`<javascript:alert(1)|click me>`, `&lt;javascript:alert(1)|click me&gt;`},
		{`<JavaScript:alert(1)>`, `&lt;JavaScript:alert(1)&gt;`},
		{`<data:text/html,<b>x</b>|x>`, `&lt;data:text/html,&lt;b&gt;x&lt;/b&gt;|x&gt;`},
		{`<https://example.com/?a=1&amp;b="2"|docs <b>>`, `<a target="_blank" rel="noopener noreferrer" href="https://example.com/?a=1&amp;b=&#34;2&#34;">docs &lt;b</a>&gt;`},
		{`<https://example.com>`, `<a target="_blank" rel="noopener noreferrer" href="https://example.com">https://example.com</a>`},
		{`<mailto:ops@example.com|mail us>`, `<a target="_blank" rel="noopener noreferrer" href="mailto:ops@example.com">mail us</a>`},
		// Mentions: names for known people, ids for the rest.
		{`<@U0ALICE001> and <@U0NOBODY9>`, `<span class="mention">@alice</span> and <span class="mention">@U0NOBODY9</span>`},
		{`<@U0NOBODY9|<script>>`, `<span class="mention">@U0NOBODY9</span>&gt;`},
		{`<#C0OPS00001> <#C0OTHER01|other>`, `<span class="mention">#ops</span> <span class="mention">#other</span>`},
		{`<!subteam^S0614TZR7|@oncall> <!subteam^S1>`, `<span class="mention">@oncall</span> <span class="mention">@S1</span>`},
		// Dates, in the page's time zone.
		{`<!date^1700000000^{date_num} {time}|fallback>`, `<time datetime="2023-11-14T22:13:20Z">2023-11-14 22:13</time>`},
		{`<!date^1700000000^{date_short_pretty} at {time_secs}|x>`, `<time datetime="2023-11-14T22:13:20Z">Nov 14, 2023 at 22:13:20</time>`},
		{`<!date^soon^{date}|the fallback>`, `the fallback`},
		{`Waiting since <!date^1700000000^{ago}|2023-11-14 22:13 UTC>`, `Waiting since <time datetime="2023-11-14T22:13:20Z">1 hour ago</time>`},
		// Styles.
		{`*bold* _italic_ ~strike~ ` + "`code <b>`", `<b>bold</b> <i>italic</i> <s>strike</s> <code>code &lt;b&gt;</code>`},
		{`*bold with _italic_ inside*`, `<b>bold with <i>italic</i> inside</b>`},
		{`2*3*4 snake_case_name a * b`, `2*3*4 snake_case_name a * b`},
		{"`*not bold*`", `<code>*not bold*</code>`},
		// Markers that never close stay text, however many there are.
		{"*a _b ~c `d <e *f _g", "*a _b ~c `d &lt;e *f _g"},
		{"_x *y _z* _w_", `<i>x <b>y _z</b> _w</i>`},
		{"<a <b> `c `d` *e *f*", `&lt;a &lt;b&gt; <code>c </code>d` + "`" + ` <b>e *f</b>`},
		{":eyes: :white_check_mark:", "👀 ✅"},
		// Blocks of lines.
		{"one\ntwo", `one<br>two`},
		{"&gt; quoted <@U0ALICE001>\n&gt; more\nafter", `<blockquote>quoted <span class="mention">@alice</span><br>more</blockquote>after`},
		// The bot writes quotes with a bare ">", which Slack shows as one.
		{">not now\n> really\nafter", `<blockquote>not now<br>really</blockquote>after`},
		{"```\n{&quot;a&quot;: 1 &lt; 2}\n<script>\n```", `<pre class="code">{&amp;quot;a&amp;quot;: 1 &lt; 2}` + "\n" + `&lt;script&gt;</pre>`},
		{"```inline *code*```", `<pre class="code">inline *code*</pre>`},
		{"```\nnever closed", "```<br>never closed"},
	} {
		var b htmlBuilder
		r.mrkdwn(&b, tc.in)
		if got := b.String(); got != tc.want {
			t.Errorf("mrkdwn %q:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	r := testRenderer()
	for _, tc := range []struct{ in, want string }{
		{`**bold** *it* ~~gone~~ ` + "`x<y`", `<div class="markdown"><div class="md-p"><b>bold</b> <i>it</i> <s>gone</s> <code>x&lt;y</code></div></div>`},
		{`[docs](https://example.com) [bad](javascript:alert(1))`, `<div class="markdown"><div class="md-p"><a target="_blank" rel="noopener noreferrer" href="https://example.com">docs</a> [bad](javascript:alert(1))</div></div>`},
		// Streamed text comes escaped, as the bot sends it.
		{`&lt;script&gt;alert(1)&lt;/script&gt; <img src=x onerror=alert(1)>`, `<div class="markdown"><div class="md-p">&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt;</div></div>`},
		{"# Title\n- one\n- two\n\n> quote", `<div class="markdown"><div class="md-h md-h1">Title</div><ul><li>one</li><li>two</li></ul><div class="md-gap"></div><blockquote>quote</blockquote></div>`},
		{"```\n<b>code</b>\n```", `<div class="markdown"><pre class="code">&lt;b&gt;code&lt;/b&gt;</pre></div>`},
	} {
		var b htmlBuilder
		r.markdown(&b, tc.in)
		if got := b.String(); got != tc.want {
			t.Errorf("markdown %q:\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

func TestBlocksHostile(t *testing.T) {
	r := testRenderer()
	blocks, _ := json.Marshal([]any{
		map[string]any{"type": "header", "text": map[string]any{"type": "plain_text", "text": "<script>alert(1)</script>"}},
		map[string]any{"type": "section", "text": map[string]any{"type": "plain_text", "text": "<b>plain</b> *not bold*"},
			"fields": []any{map[string]any{"type": "mrkdwn", "text": "*ok* <javascript:x|y>"}}},
		map[string]any{"type": "actions", "block_id": `b"><script>`, "elements": []any{
			map[string]any{"type": "button", "action_id": `a" onclick="x`, "value": `v'><img>`, "style": `danger" onclick="x`,
				"text": map[string]any{"type": "plain_text", "text": "<i>Go</i>"},
				"confirm": map[string]any{"title": map[string]any{"type": "plain_text", "text": "<u>Sure?</u>"}, "text": map[string]any{"type": "mrkdwn", "text": "<!everyone>"},
					"confirm": map[string]any{"type": "plain_text", "text": "Yes"}, "deny": map[string]any{"type": "plain_text", "text": "No"}}},
			map[string]any{"type": "button", "action_id": "link", "url": "javascript:alert(1)", "text": map[string]any{"type": "plain_text", "text": "link"}},
		}},
		map[string]any{"type": "markdown", "text": "**md** <script>"},
		map[string]any{"type": "video", "title": "<script>"},
	})
	got := string(r.message(blocks, "", false))
	want := `<div class="bk-header">&lt;script&gt;alert(1)&lt;/script&gt;</div>` +
		`<div class="bk-section"><div class="bk-section-body"><div class="bk-text">&lt;b&gt;plain&lt;/b&gt; *not bold*</div>` +
		`<div class="bk-fields"><div class="bk-field"><b>ok</b> &lt;javascript:x|y&gt;</div></div></div></div>` +
		`<div class="bk-actions"><span class="bk-btn-wrap"><button type="button" class="bk-btn" data-action-id="a&#34; onclick=&#34;x" data-value="v&#39;&gt;&lt;img&gt;" data-block-id="b&#34;&gt;&lt;script&gt;">&lt;i&gt;Go&lt;/i&gt;</button>` +
		`<div class="bk-confirm" hidden><div class="bk-confirm-box"><div class="bk-confirm-title">&lt;u&gt;Sure?&lt;/u&gt;</div><div class="bk-confirm-text"><span class="mention broadcast">@everyone</span></div>` +
		`<div class="bk-confirm-buttons"><button type="button" class="bk-btn bk-confirm-no">No</button><button type="button" class="bk-btn bk-confirm-yes bk-primary">Yes</button></div></div></div></span>` +
		`<span class="bk-btn bk-disabled">link</span></div>` +
		`<div class="markdown"><div class="md-p"><b>md</b> &lt;script&gt;</div></div>` +
		`<div class="bk-unknown">(a video block the playground does not show)</div>`
	if got != want {
		t.Errorf("hostile blocks:\n got %s\nwant %s", got, want)
	}
	// Without blocks, the text is shown.
	if got := string(r.message(nil, "<@U0ALICE001> &lt;b&gt;", false)); got != `<div class="mrkdwn"><span class="mention">@alice</span> &lt;b&gt;</div>` {
		t.Errorf("text only: got %s", got)
	}
	if got := string(r.message([]byte(`not json`), "fallback", false)); got != `<div class="mrkdwn">fallback</div>` {
		t.Errorf("unreadable blocks: got %s", got)
	}
}

// Rendering a line of many markers that never close takes linear time:
// each close is searched for once per marker, not once per opening.
func BenchmarkMrkdwnUnclosedMarkers(b *testing.B) {
	r := testRenderer()
	line := strings.Repeat("*a _b ~c `d <e ", 2500) // 37,500 characters
	for b.Loop() {
		var h htmlBuilder
		r.mrkdwn(&h, line)
	}
}

// An underscore inside a word opens and closes no emphasis (CommonMark,
// as Slack and GitHub read it): file and tool names show as written, and
// words set in underscores are still italic.
func TestMarkdownUnderscoreInsideAWord(t *testing.T) {
	r := testRenderer()
	for _, tc := range []struct{ in, want string }{
		{"I deleted old_report_2024.csv and my_notes_v2.md", `I deleted old_report_2024.csv and my_notes_v2.md`},
		{"workspace_write: wrote 3 bytes to tmp/a_b.txt", `workspace_write: wrote 3 bytes to tmp/a_b.txt`},
		{"an _italic_ word, (_this_ too), _a_b_", `an <i>italic</i> word, (<i>this</i> too), <i>a_b</i>`},
		{"_née_ and x_été_y", `<i>née</i> and x_été_y`},
		{"snake_case_ ends", `snake_case_ ends`},
	} {
		var b htmlBuilder
		r.markdown(&b, tc.in)
		want := `<div class="markdown"><div class="md-p">` + tc.want + `</div></div>`
		if got := b.String(); got != want {
			t.Errorf("markdown %q:\n got %s\nwant %s", tc.in, got, want)
		}
	}
}

// A heading is 1 to 6 "#" and a space (or nothing else on the line):
// "#ops" and "#1" are text.
func TestMarkdownHeadingNeedsASpace(t *testing.T) {
	r := testRenderer()
	for _, tc := range []struct{ in, want string }{
		{"#ops is where the card went", `<div class="md-p">#ops is where the card went</div>`},
		{"#1 priority", `<div class="md-p">#1 priority</div>`},
		{"####### seven", `<div class="md-p">####### seven</div>`},
		{"## Two", `<div class="md-h md-h2">Two</div>`},
		{"###### Six", `<div class="md-h md-h3">Six</div>`},
	} {
		var b htmlBuilder
		r.markdown(&b, tc.in)
		want := `<div class="markdown">` + tc.want + `</div>`
		if got := b.String(); got != want {
			t.Errorf("markdown %q:\n got %s\nwant %s", tc.in, got, want)
		}
	}
}

// The terminal session leaves the audit lines out of its log (they say
// what the session already shows), and names their level when -v keeps
// them.
func TestSessionLogLeavesOutAudit(t *testing.T) {
	var out strings.Builder
	h := slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: store.NameAuditLevel})
	quiet := slog.New(withoutAudit{h}).With("k", "v")
	store.AuditEntry{Actor: "U1", Action: "decide"}.Log(context.Background(), quiet)
	quiet.Warn("kept")
	if got := out.String(); strings.Contains(got, "audit") || !strings.Contains(got, "kept") {
		t.Errorf("quiet log:\n%s", got)
	}
	out.Reset()
	store.AuditEntry{Actor: "U1", Action: "decide"}.Log(context.Background(), slog.New(h))
	if got := out.String(); !strings.Contains(got, "level=AUDIT msg=audit") {
		t.Errorf("verbose log:\n%s", got)
	}
}

// A streamed answer is rendered again at each append, so a line of many
// "[" (none of which opens a link) must take linear time: each "]", and
// each ")" after a "](", is searched for once, not once per "[".
func TestMarkdownManyBrackets(t *testing.T) {
	r := testRenderer()
	render := func(s string) string {
		var b htmlBuilder
		r.markdown(&b, s)
		return b.String()
	}
	para := func(html string) string { return `<div class="markdown"><div class="md-p">` + html + `</div></div>` }
	// 50,000 took about 15 minutes under -race when each "[" searched the
	// rest of the line; linear, it takes milliseconds. The bound is only
	// there so that a quadratic renderer fails instead of hanging.
	line := strings.Repeat("[", 50000)
	done := make(chan string, 1)
	go func() { done <- render(line) }()
	select {
	case got := <-done:
		if got != para(line) {
			t.Errorf("50,000 [: got %.200s…", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("rendering a line of 50,000 [ took over 10 s")
	}

	for _, tc := range []struct{ name, in, want string }{
		{"20,000 [", strings.Repeat("[", 20000), para(strings.Repeat("[", 20000))},
		// The first "[" opens the link; the others are its label.
		{"a link after them", strings.Repeat("[", 19999) + "a](https://x.example)",
			para(`<a target="_blank" rel="noopener noreferrer" href="https://x.example">` + strings.Repeat("[", 19998) + `a</a>`)},
		{"20,000 [](", strings.Repeat("[](", 20000), para(strings.Repeat("[](", 20000))},
		{"links among them", "[[x] [a](https://a.example) [b](https://b.example) [",
			para(`[[x] <a target="_blank" rel="noopener noreferrer" href="https://a.example">a</a> <a target="_blank" rel="noopener noreferrer" href="https://b.example">b</a> [`)},
	} {
		if got := render(tc.in); got != tc.want {
			t.Errorf("%s: got %.300s…, want %.300s…", tc.name, got, tc.want)
		}
	}
}

// mdLinks finds the links the pattern it stands for finds, at every "["
// of every short line over the bytes that matter to it, and looks at each
// byte of a line at most twice in all.
func TestMDLinksMatchThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^\[([^\]]*)\]\(([^)\s]*)\)`)
	const alphabet = "[]() \ta"
	var lines []string
	var gen func(prefix string)
	gen = func(prefix string) {
		lines = append(lines, prefix)
		if len(prefix) == 6 {
			return
		}
		for i := range len(alphabet) {
			gen(prefix + alphabet[i:i+1])
		}
	}
	gen("")
	for _, s := range lines {
		links := newMDLinks(s)
		for i := range len(s) {
			if s[i] != '[' {
				continue
			}
			label, url, n, ok := links.at(i)
			m := pattern.FindStringSubmatch(s[i:])
			if ok != (m != nil) || ok && (label != m[1] || url != m[2] || n != len(m[0])) {
				t.Fatalf("%q at %d: got %q %q %d %v, want %q", s, i, label, url, n, ok, m)
			}
		}
	}

	for _, s := range []string{
		strings.Repeat("[", 50000),
		strings.Repeat("[", 50000) + "]",
		strings.Repeat("[", 50000) + "](" + strings.Repeat("a", 50000),
		strings.Repeat("[](", 20000),
		strings.Repeat("[a](b ", 10000),
	} {
		links := newMDLinks(s)
		looked := 0
		for _, c := range []*scan{&links.close, &links.end} {
			is := c.is
			c.is = func(b byte) bool { looked++; return is(b) }
		}
		for i := range len(s) {
			if s[i] == '[' {
				links.at(i)
			}
		}
		if looked > 2*len(s) {
			t.Errorf("%.20q… (%d bytes): looked at %d bytes", s, len(s), looked)
		}
	}
}
