package slackapp

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// slackRefusedBlocksText is the smallest total of block text Slack was seen
// to refuse in one message (msg_blocks_too_long); its text field takes
// 40,000 characters, but its blocks far fewer.
const slackRefusedBlocksText = 11341

// slackMaxViewBytes is the largest view Slack takes (view_too_large past
// 250 kB).
const slackMaxViewBytes = 250000

// textObjects returns the text of every text object in the JSON of v.
func textObjects(t *testing.T, v any) []string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			if typ := x["type"]; typ == "mrkdwn" || typ == "plain_text" {
				s, _ := x["text"].(string)
				out = append(out, s)
			}
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(doc)
	return out
}

// blocksTextLen is the characters of every text object in blocks, the
// total Slack bounds in one message.
func blocksTextLen(t *testing.T, blocks []slack.Block) int {
	t.Helper()
	n := 0
	for _, s := range textObjects(t, blocks) {
		n += textLen(s)
	}
	return n
}

// A long answer is split into messages Slack takes: each one's blocks hold
// well under the text Slack refuses, however the answer is made.
func TestAnswerMessagesStayClearOfBlocksTooLong(t *testing.T) {
	answers := map[string]string{
		"mixed":     longAnswer(100000),
		"entities":  strings.Repeat("<a & b> ", 20000),
		"wide":      strings.Repeat("漢字😀 ", 20000),
		"one line":  strings.Repeat("x", 50000),
		"paragraph": strings.Repeat("short paragraph\n\n", 5000),
	}
	for name, answer := range answers {
		msgs := AnswerMessages(answer)
		if len(msgs) < 2 {
			t.Fatalf("%s: %d messages, want the answer split", name, len(msgs))
		}
		for i, m := range msgs {
			if n := blocksTextLen(t, m); n >= slackRefusedBlocksText {
				t.Errorf("%s: message %d of %d holds %d characters of block text; Slack has refused %d", name, i, len(msgs), n, slackRefusedBlocksText)
			}
		}
	}
}

// maxShownInFull returns the longest repetition of unit (up to max
// times) that ArgsShownInFull accepts as arguments {"content": ...}, and
// the arguments.
func maxShownInFull(t *testing.T, unit string, max int, human bool) (int, json.RawMessage) {
	t.Helper()
	args := func(n int) json.RawMessage {
		key := "content"
		if human {
			key = "question"
		}
		b, err := json.Marshal(map[string]string{key: strings.Repeat(unit, n)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	lo, hi := 0, max
	if ArgsShownInFull(args(hi), human) {
		return hi, args(hi)
	}
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if ArgsShownInFull(args(mid), human) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, args(lo)
}

// Arguments counted as shown in full open in a modal Slack takes: its JSON,
// as slack-go sends it (with '<', '>' and '&' escaped as \u003c and so
// on), is within 250 kB whatever the characters; longer ones are not
// counted as shown in full, and their modal, cut with a note, is within it
// too. So for a question and its reply form, and for a preview.
func TestModalsFitInAView(t *testing.T) {
	units := map[string]string{
		"ascii":     "abcdefghij",
		"lines":     "line\n",
		"entities":  "<&>",
		"cjk":       "漢字かな",
		"astral":    "😀",
		"quotes":    `"\`,
		"separator": "\u2028x",
	}
	for name, unit := range units {
		t.Run(name, func(t *testing.T) {
			n, args := maxShownInFull(t, unit, 400000/len(unit), false)
			if n == 0 {
				t.Fatalf("no arguments of %q are shown in full", unit)
			}
			m := ArgsModal("deploy", args)
			if size := len(mustJSON(m)); size > slackMaxViewBytes {
				t.Errorf("arguments of %d × %q are shown in full in a modal of %d bytes, more than Slack takes (%d)", n, unit, size, slackMaxViewBytes)
			}
			if strings.Contains(string(mustJSON(m)), "not shown") {
				t.Errorf("arguments of %d × %q are counted as shown in full, but the modal leaves some out", n, unit)
			}
			more, _ := json.Marshal(map[string]string{"content": strings.Repeat(unit, n+n/10+10)})
			if ArgsShownInFull(more, false) {
				t.Fatalf("longer arguments are shown in full too")
			}
			cut := ArgsModal("deploy", more)
			checkLimits(t, "args "+name, cut, maxViewBlocks)
			if raw := mustJSON(cut); len(raw) > slackMaxViewBytes || !strings.Contains(string(raw), "more characters not shown") {
				t.Errorf("arguments not shown in full: a modal of %d bytes (want <= %d) with a note of what is left out", len(raw), slackMaxViewBytes)
			}

			q, qargs := maxShownInFull(t, unit, 400000/len(unit), true)
			var question struct{ Question string }
			if err := json.Unmarshal(qargs, &question); err != nil {
				t.Fatal(err)
			}
			if size := len(mustJSON(RespondModal("c1", question.Question))); q > 0 && size > slackMaxViewBytes {
				t.Errorf("a question of %d × %q is shown in full in a reply form of %d bytes, more than Slack takes", q, unit, size)
			}
			long := RespondModal("c1", strings.Repeat(unit, 400000/len(unit)))
			checkLimits(t, "reply "+name, long, maxViewBlocks)
			if size := len(mustJSON(long)); size > slackMaxViewBytes {
				t.Errorf("the reply form of a long question is %d bytes, more than Slack takes", size)
			}

			preview := PreviewModal("deploy", strings.Repeat(unit, (64<<10)/len(unit)))
			checkLimits(t, "preview "+name, preview, maxViewBlocks)
			if size := len(mustJSON(preview)); size > slackMaxViewBytes {
				t.Errorf("the preview modal is %d bytes, more than Slack takes", size)
			}
		})
	}
}

// An explanation whose text renders to nothing ("#", an empty heading)
// still has text in every text object: Slack refuses an empty one.
func TestExplanationOfNothingHasText(t *testing.T) {
	for _, text := range []string{"#", "##", "# \n\n##", "", "   "} {
		blocks := ExplanationBlocks("deploy", "U1ABC", text)
		for _, s := range textObjects(t, blocks) {
			if s == "" {
				t.Errorf("the explanation of %q has an empty text object: %s", text, mustJSON(blocks))
			}
		}
	}
}

// tokensClosed reports whether every '<' in s opens a control token that
// a '>' closes before the next '<'.
func tokensClosed(s string) bool {
	open := false
	for _, r := range s {
		switch r {
		case '<':
			if open {
				return false
			}
			open = true
		case '>':
			if !open {
				return false
			}
			open = false
		}
	}
	return !open
}

// Text cut short never ends inside a Slack control token (a mention, a
// date, a channel): half a token shows as raw markup, and swallows the
// text after it.
func TestCutsKeepControlTokensWhole(t *testing.T) {
	at := time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	var b strings.Builder
	for i := range 60 {
		fmt.Fprintf(&b, "%s asked <@U0%08d> and <!subteam^S0%07d> in <#C0%07d|ops> at %s; &lt;x&gt; ", Escape("<ok?>"), i, i, i, slackDate(at))
	}
	s := b.String()
	for n := 1; n < textLen(s); n += 7 {
		got, _ := truncate(s, n)
		if !tokensClosed(got) {
			t.Fatalf("truncate(…, %d) ends inside a control token: %q", n, got[max(0, len(got)-80):])
		}
		if got := clip(s, n); !tokensClosed(got) {
			t.Fatalf("clip(…, %d) ends inside a control token", n)
		}
	}
	for _, n := range []int{100, 333, 1000, 3000} {
		for i, piece := range splitMrkdwn(s, n) {
			if !tokensClosed(piece) || textLen(piece) > n {
				t.Errorf("splitMrkdwn(…, %d) piece %d is %d characters or ends inside a control token", n, i, textLen(piece))
			}
		}
	}
}

// ids returns n well-formed user ids.
func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("U0%08d", i)
	}
	return out
}

// A card names every approver (or requester) it can in its request
// section, and says how many more there are instead of cutting the list:
// no mention is cut in half, none vanishes without a count.
func TestCardSaysHowManyMoreApprovers(t *testing.T) {
	c := pendingCard()
	c.Approvers = ids(200)
	c.Requesters = ids(200)
	blocks := CardBlocks(c)
	checkLimits(t, "200 approvers", blocks, maxMessageBlocks)
	request := blocks[1].(*slack.SectionBlock).Text.Text
	if !tokensClosed(request) {
		t.Errorf("the request section ends inside a mention: %q", request[len(request)-80:])
	}
	lines := strings.Split(request, "\n")
	var approversLine, requestersLine string
	for _, l := range lines {
		if strings.HasPrefix(l, "*Approvers:*") {
			approversLine = l
		}
		if strings.HasPrefix(l, "Requested by") {
			requestersLine = l
		}
	}
	for what, line := range map[string]string{"approvers": approversLine, "requesters": requestersLine} {
		shown := strings.Count(line, "<@")
		if shown == 0 || !strings.Contains(line, fmt.Sprintf("+%d more", 200-shown)) {
			t.Errorf("the card names %d of 200 %s and does not say how many more: %q", shown, what, line)
		}
	}
	if !strings.Contains(request, "Four-eyes") {
		t.Errorf("the request section lost its last line: %q", request[len(request)-200:])
	}

	two := pendingCard()
	two.FourEyes = false
	two.MinApprovals, two.Approvals = 300, ids(200)
	count := ""
	for _, text := range textObjects(t, CardBlocks(two)) {
		if strings.HasPrefix(text, ":busts_in_silhouette: 200 of 300 approvals") {
			count = text
		}
	}
	if shown := strings.Count(count, "<@"); shown == 0 || !strings.Contains(count, fmt.Sprintf("+%d more", 200-shown)) || !tokensClosed(count) {
		t.Errorf("the count of 200 approvals names %d and does not say how many more: %q", shown, count)
	}
}

// The cards the bot posts and updates are messages Slack takes: their
// block text stays under what Slack refuses, with long lists, arguments,
// a preview and an output.
func TestCardsStayClearOfBlocksTooLong(t *testing.T) {
	c := pendingCard()
	c.Approvers, c.Requesters = ids(300), ids(300)
	c.Reason = strings.Repeat("needs review ", 30)
	c.Args = hugeArgs()
	c.Preview = strings.Repeat("+ a line of the new file\n", 400)
	c.MinApprovals, c.Approvals = 300, ids(200)
	c.FourEyes = false
	cards := map[string]Card{"pending": c}
	e := decided(c, approvals.Edit)
	e.EditedArgs = hugeArgs()
	e.Outcome = "ran"
	e.OutputSummary = strings.Repeat("output line\n", 500)
	cards["edited"] = e
	r := decided(c, approvals.Reject)
	r.RejectReason = strings.Repeat("no, ", 1000)
	cards["rejected"] = r
	// A rule's long reason, quoted again by the outcome of a call the
	// policy denies at its resume, with both sets of arguments long.
	long := pendingCard()
	long.FourEyes = false
	long.Reason = strings.Repeat("Deploys to production need a second look. ", 70)
	long.Args = hugeArgs()
	n := decided(long, approvals.Edit)
	n.EditedArgs = hugeArgs()
	n.Outcome = "not run: policy now denies: " + long.Reason
	cards["edited, not run"] = n
	// The same with a reason of entities (`&`, `<`, `>`), each written as
	// five characters once escaped.
	hidden, _ := json.Marshal(map[string]any{"content": strings.Repeat("a\u200b<&>", 5000)})
	amp := c
	amp.Reason = strings.Repeat("&", 600)
	amp.Args = hidden
	na := decided(amp, approvals.Edit)
	na.EditedArgs = hidden
	na.Outcome = "not run: policy now denies: " + amp.Reason
	na.OutputSummary = strings.Repeat("a\u200b<&>", 5000)
	cards["edited, not run, a reason of entities"] = na
	for name, card := range cards {
		for _, copy := range []bool{false, true} {
			if copy {
				card = Seal(card)
				card.CopyOf = "C0123ABC"
			}
			if n := blocksTextLen(t, CardBlocks(card)); n >= slackRefusedBlocksText {
				t.Errorf("%s card (sealed %v) holds %d characters of block text; Slack has refused %d", name, copy, n, slackRefusedBlocksText)
			}
			raw, _ := json.Marshal(CardBlocks(card))
			if p := fakeslack.MessageProblems(raw); len(p) > 0 {
				t.Errorf("%s card (sealed %v) is refused: %v", name, copy, p)
			}
		}
	}
}

// Raw text cut before it is escaped keeps its '<' that opens no token: the
// cut does not fall back to it.
func TestCutKeepsTextAfterAPlainAngleBracket(t *testing.T) {
	s := "if a < b then " + strings.Repeat("x", 500)
	if got := clip(s, 300); textLen(got) != 300 {
		t.Errorf("clip of raw text with a '<' is %d characters, want 300: %q", textLen(got), got)
	}
}
