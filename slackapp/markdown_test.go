package slackapp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slack-go/slack"
)

func TestMarkdownToMrkdwn(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"plain", "hello world", "hello world"},
		{"bold stars", "a **bold** word", "a *bold* word"},
		{"bold underscores", "a __bold__ word", "a *bold* word"},
		{"italic star", "an *italic* word", "an _italic_ word"},
		{"italic underscore", "an _italic_ word", "an _italic_ word"},
		{"bold and italic", "**b** and *i*", "*b* and _i_"},
		{"strike", "~~gone~~", "~gone~"},
		{"arithmetic stars", "2 * 3 * 4", "2 * 3 * 4"},
		{"snake_case", "use read_file_now", "use read_file_now"},
		{"heading", "# Title", "*Title*"},
		{"heading keeps code spans as written", "## Shall I run `rm -rf /srv/__data__` on **prod**?", "*Shall I run `rm -rf /srv/__data__` on prod?*"},
		{"heading level 3 with closing hashes", "### Sub **x** ###", "*Sub x*"},
		{"heading needs a space", "#hashtag", "#hashtag"},
		{"bullets", "- one\n* two\n+ three", "• one\n• two\n• three"},
		{"nested bullet", "- one\n  - inner", "• one\n  • inner"},
		{"task list", "- [ ] todo\n- [x] done", "☐ todo\n☑ done"},
		{"numbered list", "1. one\n2. **two**", "1. one\n2. *two*"},
		{"quote", "> quoted *text*", ">quoted _text_"},
		{"rule", "a\n---\nb", "a\n──────────\nb"},
		{"link", "see [the docs](https://example.com/docs)", "see the docs (https://example.com/docs)"},
		{"link label equals url", "[https://a.example](https://a.example)", "https://a.example"},
		{"spoofed link", "[https://bank.example](https://evil.example)", "https://bank.example (https://evil.example)"},
		{"image", "![diagram](https://x.example/a.png)", "diagram (https://x.example/a.png)"},
		{"autolink", "<https://example.com/a_b_c>", "https://example.com/a_b_c"},
		{"bare url keeps underscores", "go to https://x.example/a_b_c/*d*.", "go to https://x.example/a_b_c/*d*."},
		{"url next to a link", "https://a.example[x](https://b.example)", "https://a.examplex (https://b.example)"},
		{"slack link syntax", "<https://evil|click me>", "&lt;https://evil|click me&gt;"},
		{"mentions", "ping <!channel> <@U123> <!subteam^S1> <#C1>", "ping &lt;!channel&gt; &lt;@U123&gt; &lt;!subteam^S1&gt; &lt;#C1&gt;"},
		{"bare broadcast", "hey @here", "hey @\u2060here"},
		{"ampersand", "R&D", "R&amp;D"},
		{"code span verbatim", "run `a **b** <!here>`", "run `a **b** &lt;!here&gt;`"},
		{"double backtick span", "``a`b``", "`aˋb`"},
		{"lone backtick", "it`s", "it`s"},
		{"fenced block", "```go\nx := **y** <@U1>\n```", "```\nx := **y** &lt;@U1&gt;\n```"},
		{"tilde fence", "~~~\n# not a heading\n~~~", "```\n# not a heading\n```"},
		{"unclosed fence", "```\ncode", "```\ncode\n```"},
		{"backticks inside fence", "````\n```python\n````", "```\n`\u2060`\u2060`python\n```"},
		{"private use stripped", "a\uE0000\uE001b", "a\uFFFD0\uFFFDb"},
		{"crlf", "a\r\nb", "a\nb"},
		{"bidi override written out", "here: \u202e https://evil.io/moc.elgoog//:sptth", "here: ⟦U+202E⟧ https://evil.io/moc.elgoog//:sptth"},
		{"bidi isolate in a link label", "[\u2067evil\u2069](https://evil.io)", "⟦U+2067⟧evil⟦U+2069⟧ (https://evil.io)"},
		{"hidden characters in code written out", "`rm \u200b-rf`\n```\nx\u202ey\n```", "`rm ⟦U+200B⟧-rf`\n```\nx⟦U+202E⟧y\n```"},
		{"joiners and marks of natural text kept", "👩\u200d💻 می\u200cخواهم שלום\u200f ❤\ufe0f", "👩\u200d💻 می\u200cخواهم שלום\u200f ❤\ufe0f"},
	}
	for _, tt := range tests {
		if got := MarkdownToMrkdwn(tt.in); got != tt.want {
			t.Errorf("%s: MarkdownToMrkdwn(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// longAnswer builds an answer of about n characters with paragraphs, lists,
// long lines and fenced code blocks, some longer than a section.
func longAnswer(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		switch i % 5 {
		case 0:
			fmt.Fprintf(&b, "## Part %d\n\nSome **bold** prose with <!channel> and @here in it, paragraph %d.\n\n", i, i)
		case 1:
			b.WriteString("```go\n")
			for j := 0; j < 120; j++ {
				fmt.Fprintf(&b, "fmt.Println(%d, \"<@U123> & more\") // line %d\n", j, j)
			}
			b.WriteString("```\n\n")
		case 2:
			for j := 0; j < 10; j++ {
				fmt.Fprintf(&b, "- item %d with a [link](https://example.com/%d)\n", j, j)
			}
			b.WriteString("\n")
		case 3:
			b.WriteString(strings.Repeat("word&word ", 450) + "\n\n")
		case 4:
			b.WriteString("```\n" + strings.Repeat("y", 4000) + "\n```\n\n")
		}
	}
	return b.String()
}

// sectionTexts returns the text of every section in msgs.
func sectionTexts(t *testing.T, msgs [][]slack.Block) []string {
	t.Helper()
	var out []string
	for _, m := range msgs {
		for _, b := range m {
			s, ok := b.(*slack.SectionBlock)
			if !ok {
				t.Fatalf("answer block is %T, want a section", b)
			}
			out = append(out, s.Text.Text)
		}
	}
	return out
}

func TestAnswerMessagesWithinLimits(t *testing.T) {
	for _, n := range []int{20000, 300000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			in := longAnswer(n)
			msgs := AnswerMessages(in)
			if len(msgs) == 0 {
				t.Fatal("no messages")
			}
			for i, m := range msgs {
				total := 0
				for _, b := range m {
					total += textLen(b.(*slack.SectionBlock).Text.Text)
				}
				if len(m) > maxMessageBlocks || total > maxMessageText {
					t.Errorf("message %d: %d blocks, %d characters; want <= %d, <= %d", i, len(m), total, maxMessageBlocks, maxMessageText)
				}
				checkLimits(t, fmt.Sprintf("message %d", i), m, maxMessageBlocks)
			}
			texts := sectionTexts(t, msgs)
			for i, s := range texts {
				if textLen(s) > maxSectionText {
					t.Errorf("section %d is %d characters, want <= %d", i, textLen(s), maxSectionText)
				}
				fences := 0
				for _, line := range strings.Split(s, "\n") {
					if line == "```" {
						fences++
					}
				}
				if fences%2 != 0 {
					t.Errorf("section %d has %d fence lines, want an even number:\n%s", i, fences, s)
				}
				if strings.Contains(s, "``") && strings.Count(s, "```") != fences {
					t.Errorf("section %d has ``` outside fence lines:\n%s", i, s)
				}
				checkInert(t, "AnswerMessages", "", s)
			}

			// Nothing is lost: the answer's words all come through, in
			// order, once fences added by splitting are removed.
			joined := strings.Join(texts, "\n")
			want := MarkdownToMrkdwn(in)
			if got, want := words(joined), words(want); got != want {
				t.Errorf("split answer lost or reordered text: %d characters of words, want %d", len(got), len(want))
			}
		})
	}
}

// words returns s without white space and without fence lines.
func words(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if line == "```" {
			continue
		}
		b.WriteString(strings.Join(strings.Fields(line), ""))
	}
	return b.String()
}

func TestAnswerMessagesSplitsAtParagraphs(t *testing.T) {
	p1 := strings.Repeat("a", 2000)
	p2 := strings.Repeat("b", 2000)
	texts := sectionTexts(t, AnswerMessages(p1+"\n\n"+p2))
	if len(texts) != 2 || texts[0] != p1 || texts[1] != p2 {
		t.Errorf("two 2000-character paragraphs split into %d sections, want one each", len(texts))
	}
}

func TestAnswerMessagesReopensCodeBlock(t *testing.T) {
	var lines []string
	for i := 0; i < 400; i++ {
		lines = append(lines, fmt.Sprintf("line %03d", i))
	}
	texts := sectionTexts(t, AnswerMessages("```\n"+strings.Join(lines, "\n")+"\n```"))
	if len(texts) < 2 {
		t.Fatalf("a 3600-character code block gave %d sections, want several", len(texts))
	}
	for i, s := range texts {
		if !strings.HasPrefix(s, "```\n") || !strings.HasSuffix(s, "\n```") {
			t.Errorf("section %d is not a closed code block: %q … %q", i, s[:10], s[len(s)-10:])
		}
	}
}

func TestAnswerMessagesShort(t *testing.T) {
	msgs := AnswerMessages("Done: **3** files.")
	if len(msgs) != 1 || len(msgs[0]) != 1 {
		t.Fatalf("short answer: %d messages, want 1 with 1 block", len(msgs))
	}
	if got := msgs[0][0].(*slack.SectionBlock).Text.Text; got != "Done: *3* files." {
		t.Errorf("short answer text = %q, want %q", got, "Done: *3* files.")
	}
	if msgs := AnswerMessages(" \n\n "); len(msgs) != 0 {
		t.Errorf("blank answer: %d messages, want none", len(msgs))
	}
}

// Backticks that close no code span stay literal, and three of them never
// stand together outside a fence line: Slack would pair them with the
// next fence, and show the fenced code (kept verbatim) as formatted text.
func TestUnmatchedBackticksOpenNoCodeBlock(t *testing.T) {
	for _, in := range []string{
		"Run this exactly? note: ``` below is verbatim\n```\nrm -rf /srv/*cache* ~/old~ /data\n```",
		"a ```` b\n```\nx *y*\n```",
		"one ``` two ``` three `",
	} {
		out := MarkdownToMrkdwn(in)
		fences := 0
		for _, line := range strings.Split(out, "\n") {
			if line == "```" {
				fences++
			} else if strings.Contains(line, "```") {
				t.Errorf("MarkdownToMrkdwn(%q) has three backticks outside a fence line: %q", in, line)
			}
		}
		if fences%2 != 0 {
			t.Errorf("MarkdownToMrkdwn(%q) = %q: an odd number of fences", in, out)
		}
		if strings.Contains(in, "rm -rf") && !strings.Contains(out, "rm -rf /srv/*cache* ~/old~ /data") {
			t.Errorf("MarkdownToMrkdwn(%q) = %q: the fenced code is not kept verbatim", in, out)
		}
	}
}
