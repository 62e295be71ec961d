package slackapp

import (
	"encoding/json"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/toolgate/toolgate/approvals"
)

func TestEscape(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"", ""},
		{"plain text", "plain text"},
		{"a & b", "a &amp; b"},
		{"&amp;", "&amp;amp;"},
		{"<!channel>", "&lt;!channel&gt;"},
		{"<!here|here>", "&lt;!here|here&gt;"},
		{"<@U123>", "&lt;@U123&gt;"},
		{"<!subteam^S1>", "&lt;!subteam^S1&gt;"},
		{"<#C123|general>", "&lt;#C123|general&gt;"},
		{"<https://evil|x>", "&lt;https://evil|x&gt;"},
		{"hey @here and @channel", "hey @\u2060here and @\u2060channel"},
		{"@EVERYONE @Here", "@\u2060EVERYONE @\u2060Here"},
		{"mail me@herecorp.com", "mail me@\u2060herecorp.com"},
		{"@hero", "@hero"},
		{"*bold* `code`", "*bold* `code`"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
	}
	for _, tt := range tests {
		if got := Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// dangerous matches what untrusted text must never produce in mrkdwn: a
// control sequence or a bare broadcast keyword.
var dangerous = regexp.MustCompile(`(?i)<[!@#]|<http|<mailto|@(here|channel|everyone)`)

// randomText builds text from fragments chosen to collide with Slack and
// Markdown syntax.
func randomText(r *rand.Rand, n int) string {
	frags := []string{
		"<", ">", "&", "!", "@", "#", "^", "|", ":", "/", "*", "_", "~", "`", "```", "~~~",
		"[", "]", "(", ")", "\n", " ", "-", "# ", "> ", "\\",
		"here", "channel", "everyone", "HERE", "http", "https://", "mailto:", "U123", "S1", "C9",
		"<!channel>", "<@U123>", "<https://evil|x>", "[x](https://evil)", "&lt;", "&amp;",
		"\u2060", "\uE000", "\uE001", "\uE002", "0", "1", "é", "😀", "\xff",
	}
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(frags[r.IntN(len(frags))])
	}
	return b.String()
}

// checkInert reports output of Escape or MarkdownToMrkdwn that could ping
// someone or link anywhere.
func checkInert(t *testing.T, fn, in, out string) {
	t.Helper()
	if m := dangerous.FindString(out); m != "" {
		t.Fatalf("%s(%q) = %q contains %q", fn, in, out, m)
	}
	if strings.Contains(out, "<") {
		t.Fatalf("%s(%q) = %q contains '<'", fn, in, out)
	}
	if !utf8.ValidString(out) {
		t.Fatalf("%s(%q) = %q is not valid UTF-8", fn, in, out)
	}
}

func TestUntrustedTextIsInert(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		in := randomText(r, 1+r.IntN(60))
		checkInert(t, "Escape", in, Escape(in))
		checkInert(t, "MarkdownToMrkdwn", in, MarkdownToMrkdwn(in))
		checkInert(t, "codeBody", in, codeBody(in))
		checkInert(t, "inlineCode", in, inlineCode(in))
		checkInert(t, "quote", in, quote(in, 100))
	}
}

func FuzzEscape(f *testing.F) {
	for _, s := range []string{"<!channel>", "@here", "a&b", "<@U1|x>", "\xff@HeRe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkInert(t, "Escape", in, Escape(in))
	})
}

func FuzzMarkdownToMrkdwn(f *testing.F) {
	for _, s := range []string{
		"**bold** [x](https://evil) <https://a>",
		"```\n<!here>\n",
		"# <@U1>\n- @channel",
		"`<!channel>` and ``a`b``",
		"[<!here>](<https://x>)",
		// An at-sign outside a link meeting a keyword inside it.
		"[@](@)here",
		"@[here](here)",
		"@[channel](https://x)",
		"# @[everyone](everyone)",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		checkInert(t, "MarkdownToMrkdwn", in, MarkdownToMrkdwn(in))
	})
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in      string
		max     int
		want    string
		wantCut bool
	}{
		{"short", 10, "short", false},
		{"exactly10!", 10, "exactly10!", false},
		{"abcdefghijk", 5, "abcd…", true},
		{"ab&amp;cd", 6, "ab…", true},    // never half an entity
		{"ab&lt;cd", 7, "ab&lt;…", true}, // a whole entity is kept
		{"éééééé", 4, "ééé…", true},      // runes, not bytes
		{"😀😀😀", 4, "😀…", true},           // astral runes count twice
		{"&amp;&amp;", 3, "…", true},
		{"ab⟦U+202E⟧cd", 6, "ab…", true},            // never half a written-out character
		{"ab⟦U+E0041⟧cd", 12, "ab⟦U+E0041⟧…", true}, // a whole one is kept
		{"ab⟦note cd", 6, "ab⟦no…", true},           // a bracket alone is text
	}
	for _, tt := range tests {
		got, cut := truncate(tt.in, tt.max)
		if got != tt.want || cut != tt.wantCut {
			t.Errorf("truncate(%q, %d) = %q, %v; want %q, %v", tt.in, tt.max, got, cut, tt.want, tt.wantCut)
		}
		if textLen(got) > tt.max {
			t.Errorf("truncate(%q, %d) = %q is %d characters long", tt.in, tt.max, got, textLen(got))
		}
	}
}

func TestCodeBodyKeepsFenceClosed(t *testing.T) {
	got := codeBody("a ``` b ```` c")
	if strings.Contains(got, "``") {
		t.Errorf("codeBody left adjacent backticks: %q", got)
	}
	if strings.ReplaceAll(got, wordJoiner, "") != "a ``` b ```` c" {
		t.Errorf("codeBody changed more than the backtick runs: %q", got)
	}
}

func TestInlineCode(t *testing.T) {
	tests := []struct{ in, want string }{
		{"files__read", "`files__read`"},
		{"a`b", "`aˋb`"},
		{"<!here>", "`&lt;!here&gt;`"},
		{"two\nlines", "`two lines`"},
		{"", "` `"},
	}
	for _, tt := range tests {
		if got := inlineCode(tt.in); got != tt.want {
			t.Errorf("inlineCode(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRevealHidden(t *testing.T) {
	tests := []struct {
		in, want string
		n        int
	}{
		{"plain /etc/passwd", "plain /etc/passwd", 0},
		{"\u200b/etc/passwd", "⟦U+200B⟧/etc/passwd", 1},
		{"reports/\u202evsc.exe", "reports/⟦U+202E⟧vsc.exe", 1},
		{"a\u2066b\u2069c\ufeff", "a⟦U+2066⟧b⟦U+2069⟧c⟦U+FEFF⟧", 3},
		{"tag\U000E0041", "tag⟦U+E0041⟧", 1},
		{"émoji ok ✓", "émoji ok ✓", 0},
		{"tab\tand\nlines\r", "tab\tand\nlines\r", 0},
		{"const { timeout,\u3164} = q", "const { timeout,⟦U+3164⟧} = q", 1},
		{"\u115f\u1160\uffa0\u2800", "⟦U+115F⟧⟦U+1160⟧⟦U+FFA0⟧⟦U+2800⟧", 4},
		{"a\u034fb\ufe0fc\U000E0100", "a⟦U+034F⟧b⟦U+FE0F⟧c⟦U+E0100⟧", 3},
		{"\u17b4\u180b\u2028\u2029", "⟦U+17B4⟧⟦U+180B⟧⟦U+2028⟧⟦U+2029⟧", 4},
		{"del\u007f csi\u009b", "del⟦U+007F⟧ csi⟦U+009B⟧", 2},
		// The notation written by the text itself is not the bot's.
		{"/srv/a⟦U+200B⟧.txt", "/srv/a⟦U+27E6⟧U+200B⟧.txt", 0},
		{"\u200b⟦", "⟦U+200B⟧⟦U+27E6⟧", 1},
	}
	for _, tt := range tests {
		got, n := revealHidden(tt.in)
		if got != tt.want || n != tt.n {
			t.Errorf("revealHidden(%q) = %q, %d; want %q, %d", tt.in, got, n, tt.want, tt.n)
		}
	}
}

// Natural-language text keeps the invisible characters it needs (joiners,
// the emoji and text variation selectors, direction marks), and has the
// others written out: the bidirectional embeddings, overrides and
// isolates first of all.
func TestRevealInProse(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain words", "plain words"},
		{"👩\u200d💻 and می\u200cخواهم", "👩\u200d💻 and می\u200cخواهم"},
		{"❤\ufe0f ☺\ufe0e", "❤\ufe0f ☺\ufe0e"},
		{"שלום\u200f! a\u200eb \u0627\u061c1", "שלום\u200f! a\u200eb \u0627\u061c1"},
		{"a\u202ab\u202bc\u202cd\u202de\u202ef", "a⟦U+202A⟧b⟦U+202B⟧c⟦U+202C⟧d⟦U+202D⟧e⟦U+202E⟧f"},
		{"a\u2066b\u2067c\u2068d\u2069", "a⟦U+2066⟧b⟦U+2067⟧c⟦U+2068⟧d⟦U+2069⟧"},
		{"no\u200b way\ufeff\u2060", "no⟦U+200B⟧ way⟦U+FEFF⟧⟦U+2060⟧"},
		{"tag\U000E0041\U000E007F", "tag⟦U+E0041⟧⟦U+E007F⟧"},
		{"a\ufe00b\U000E0100", "a⟦U+FE00⟧b⟦U+E0100⟧"},
		{"tab\tand\nlines", "tab\tand\nlines"},
		// A direction mark that touches no letter of its direction
		// reorders what it surrounds: "10.0.0.1 → 192.168.1.1" between two
		// right-to-left marks shows as "192.168.1.1 → 10.0.0.1".
		{"copies \u200f10.0.0.1 → 192.168.1.1\u200f now", "copies ⟦U+200F⟧10.0.0.1 → 192.168.1.1⟦U+200F⟧ now"},
		{"Refund \u061c$5 - $5000\u061c today", "Refund ⟦U+061C⟧$5 - $5000⟦U+061C⟧ today"},
		{"\u200fports 22, 8080", "⟦U+200F⟧ports 22, 8080"},
		{"\u200e\u200e10 → 20", "⟦U+200E⟧⟦U+200E⟧10 → 20"},
		{"שלום\u200f\u200f 1, 2", "שלום\u200f⟦U+200F⟧ 1, 2"},
		{"a\u200f b", "a⟦U+200F⟧ b"},
		{"\u200eשלום", "⟦U+200E⟧שלום"},
		{"\u200fשלום", "\u200fשלום"},
	}
	for _, tt := range tests {
		if got := revealInProse(tt.in); got != tt.want {
			t.Errorf("revealInProse(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// A person's words quoted on a card have their bidirectional controls
// written out, and keep the joiners natural text needs.
func TestQuoteRevealsBidiControls(t *testing.T) {
	got := quote("no\u200b \u202ewon kcab ti gnillor\n👩\u200d💻", 2000)
	if want := ">no⟦U+200B⟧ ⟦U+202E⟧won kcab ti gnillor\n>👩\u200d💻"; got != want {
		t.Errorf("quote = %q, want %q", got, want)
	}
}

// A quote whose words open a code block they do not close (or that the
// cut leaves open) closes it, within the bound: the text after the quote
// is not shown as code.
func TestQuoteClosesTheCodeBlockItOpens(t *testing.T) {
	for _, tt := range []struct {
		in  string
		max int
	}{
		{"run ```rm -rf /tmp/x", 2000},
		{"```\nrm -rf /tmp/x\n```", 2000},
		{"see ```" + strings.Repeat("x", 100) + "```", 50},
		{"``````` odd", 2000},
	} {
		got := quote(tt.in, tt.max)
		if n := strings.Count(got, "```"); n%2 != 0 || len([]rune(got)) > tt.max {
			t.Errorf("quote(%q, %d) = %q: %d fences, %d characters; want them paired, within the bound", tt.in, tt.max, got, n, len([]rune(got)))
		}
	}
	if got := quote("```\nrm\n```", 2000); got != ">```\n>rm\n>```" {
		t.Errorf("a closed block: %q, want it as written", got)
	}
}

// Two arguments, one holding a hidden character and the other its
// notation, read differently on a card.
func TestArgsSectionTellsAWrittenOutCharacterFromItsNotation(t *testing.T) {
	real, _, err1 := approvals.Fingerprint(json.RawMessage(`{"path":"/srv/a\u200b.txt","note":"⟦U+200B⟧"}`))
	fake, _, err2 := approvals.Fingerprint(json.RawMessage(`{"path":"/srv/a⟦U+200B⟧.txt","note":"\u200b"}`))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	a, _ := argsSection("*Arguments*", real)
	b, _ := argsSection("*Arguments*", fake)
	if a == b {
		t.Errorf("the arguments %s and %s read alike on a card:\n%s", real, fake, a)
	}
	// A ⟦ alone, written out, is explained.
	only, _ := argsSection("*Arguments*", json.RawMessage(`{"path":"/srv/report⟦2024⟧.csv"}`))
	if !strings.Contains(only, "report⟦U+27E6⟧2024⟧.csv") || !strings.Contains(only, "is shown as ⟦U+27E6⟧") {
		t.Errorf("arguments with a ⟦ alone:\n%s\nwant it written out, and a line saying why", only)
	}
}
