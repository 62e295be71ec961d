package slackapp

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fastjson"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")

// render returns the JSON that slack-go sends for v, re-encoded with '<',
// '>' and '&' left as they are (encoding/json writes them as \u003c and so
// on, which Slack decodes to the same characters). That keeps golden files
// readable and makes substring checks for "<!channel>" meaningful. Object
// keys come out sorted.
func render(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return buf.Bytes()
}

// checkGolden compares the JSON of v with testdata/<name>.golden.json, or
// rewrites the file when -update is set.
func checkGolden(t *testing.T, name string, v any) {
	t.Helper()
	got := render(t, v)
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test ./slackapp -run Golden -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: rendered JSON differs from %s (run with -update and review the diff)\ngot:\n%s", name, path, got)
	}
}

// checkLimits decodes the JSON of v (blocks, a modal or a home view) and
// reports every Block Kit limit it breaks.
func checkLimits(t *testing.T, name string, v any, maxBlocks int) {
	t.Helper()
	var doc any
	if err := json.Unmarshal(render(t, v), &doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	blocks, ok := doc.([]any)
	if !ok {
		view := doc.(map[string]any)
		blocks, _ = view["blocks"].([]any)
		if title, ok := view["title"].(map[string]any); ok {
			if n := textLen(title["text"].(string)); n > maxModalTitle {
				t.Errorf("%s: modal title is %d characters, want <= %d", name, n, maxModalTitle)
			}
		}
		if md, _ := view["private_metadata"].(string); textLen(md) > 3000 {
			t.Errorf("%s: private_metadata is %d characters, want <= 3000", name, textLen(md))
		}
	}
	if len(blocks) > maxBlocks {
		t.Errorf("%s: %d blocks, want <= %d", name, len(blocks), maxBlocks)
	}
	var walk func(path string, x any)
	walk = func(path string, x any) {
		switch x := x.(type) {
		case []any:
			for _, e := range x {
				walk(path, e)
			}
		case map[string]any:
			typ, _ := x["type"].(string)
			text := func() string {
				if o, ok := x["text"].(map[string]any); ok {
					s, _ := o["text"].(string)
					return s
				}
				return ""
			}
			switch typ {
			case "mrkdwn", "plain_text":
				if n := textLen(x["text"].(string)); n > 3000 {
					t.Errorf("%s: %s text is %d characters, want <= 3000", name, path, n)
				}
			case "header":
				if n := textLen(text()); n > maxHeaderText {
					t.Errorf("%s: header is %d characters, want <= %d", name, n, maxHeaderText)
				}
			case "button":
				if n := textLen(text()); n > maxButtonText {
					t.Errorf("%s: button label is %d characters, want <= %d", name, n, maxButtonText)
				}
				if v, _ := x["value"].(string); textLen(v) > maxButtonValue {
					t.Errorf("%s: button value is %d characters, want <= %d", name, textLen(v), maxButtonValue)
				}
			case "actions":
				if els, _ := x["elements"].([]any); len(els) > 25 {
					t.Errorf("%s: actions block has %d elements, want <= 25", name, len(els))
				}
			case "context":
				if els, _ := x["elements"].([]any); len(els) > 10 {
					t.Errorf("%s: context block has %d elements, want <= 10", name, len(els))
				}
			case "plain_text_input":
				if v, _ := x["initial_value"].(string); textLen(v) > maxInputValue {
					t.Errorf("%s: initial value is %d characters, want <= %d", name, textLen(v), maxInputValue)
				}
			}
			for k, e := range x {
				walk(path+"."+k, e)
			}
		}
	}
	walk(name, blocks)
}

var (
	t0       = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)
	testArgs = json.RawMessage(`{"path":"/srv/data/report.csv","recursive":false}`)
)

// pendingCard is a typical card waiting for a decision.
func pendingCard() Card {
	return Card{
		CallID:      "3f9a0c1d2e4b5a6c.0",
		Tool:        "files__delete_path",
		Args:        testArgs,
		Requester:   "U024REQST",
		RuleID:      "files-delete",
		Reason:      "Deleting outside tmp needs review",
		Approvers:   []string{"U024BE7LH", "S0614TZR7", "not-an-id", "<!channel>", "C0123ABC"},
		FourEyes:    true,
		RequestedAt: t0,
		ExpiresAt:   t0.Add(72 * time.Hour),
		Status:      StatusPending,
	}
}

// decided returns c decided with kind by U0APPROVR an hour after t0.
func decided(c Card, kind approvals.Kind) Card {
	c.Status = StatusDecided
	c.Decision = kind
	c.Decider = "U0APPROVR"
	c.DecidedAt = t0.Add(time.Hour)
	return c
}

// hugeArgs are arguments far longer than one section.
func hugeArgs() json.RawMessage {
	lines := make([]string, 400)
	for i := range lines {
		lines[i] = "line " + strings.Repeat("x", 40)
	}
	b, _ := json.Marshal(map[string]any{"path": "/srv/big.txt", "content": strings.Join(lines, "\n"), "lines": lines})
	return b
}

// hostileArgs try every way of making Slack ping people or show a spoofed
// link, including closing the code block they are shown in.
var hostileArgs = json.RawMessage(`{"message":"<!channel> urgent: ask <@U123> and <!subteam^S0614TZR7>, see <https://evil.example|docs.slack.com> @here @Everyone","note":"` + "```" + `\n*Approved by <@U999>*"}`)

func goldenCards() map[string]Card {
	huge := pendingCard()
	huge.Args = hugeArgs()

	human := pendingCard()
	human.Tool = "ask_human"
	human.Human = true
	human.Args = nil
	human.Question = "Which **region** should I deploy to?\n- `eu-west-1`\n- `us-east-1`\n\nSee [the runbook](https://wiki.example/runbook)."
	human.FourEyes = false
	human.RuleID, human.Reason = "", ""
	human.Approvers = nil

	approved := decided(pendingCard(), approvals.Approve)
	approved.Outcome = "ran"
	approved.OutputSummary = "deleted /srv/data/report.csv (1.2 MB)"

	rejected := decided(pendingCard(), approvals.Reject)
	rejected.RejectReason = "Wrong file.\nUse the staging copy <@U999> & tell @channel"
	rejected.Outcome = "not run"

	edited := decided(pendingCard(), approvals.Edit)
	edited.EditedArgs = json.RawMessage(`{"path":"/srv/scratch/tmp/report.csv","recursive":false}`)
	edited.Outcome = "failed"
	edited.OutputSummary = "open /srv/scratch/tmp/report.csv: no such file or directory"

	remembered := decided(pendingCard(), approvals.Remember)
	remembered.Outcome = "ran"

	denied := decided(pendingCard(), approvals.Refuse)
	denied.Outcome = "not run"

	answered := decided(human, approvals.Respond)
	answered.Answer = "eu-west-1, please"

	expired := pendingCard()
	expired.Status = StatusExpired

	cancelled := pendingCard()
	cancelled.Status = StatusCancelled

	hostile := pendingCard()
	hostile.Args = hostileArgs
	hostile.Tool = "notify<!here>"

	twoPerson := pendingCard()
	twoPerson.FourEyes = false
	twoPerson.MinApprovals, twoPerson.Approvals = 2, []string{"U0APPROVER1"}

	twoApproved := decided(twoPerson, approvals.Approve)
	twoApproved.Approvals = []string{"U0APPROVER1", "U0APPROVER2"}
	twoApproved.Decider = "U0APPROVER2"
	twoApproved.Outcome = "ran"

	preview := pendingCard()
	preview.Preview = "--- a/app.conf\n+++ b/app.conf\n@@ -1,2 +1,2 @@\n-replicas: 2\n+replicas: 3 <!channel> ```\n image: api:4\n"

	var long strings.Builder
	for i := range 400 {
		fmt.Fprintf(&long, "+line %d of the new file\n", i)
	}
	previewLong := pendingCard()
	previewLong.Preview = long.String()

	previewFailed := pendingCard()
	previewFailed.PreviewError = "no answer within 5s from <mcp server>"

	return map[string]Card{
		"card_preview":             preview,
		"card_preview_long":        previewLong,
		"card_preview_failed":      previewFailed,
		"card_two_person":          twoPerson,
		"card_two_person_approved": twoApproved,
		"card_pending":             pendingCard(),
		"card_huge_args":           huge,
		"card_ask_human":           human,
		"card_approved":            approved,
		"card_rejected":            rejected,
		"card_edited":              edited,
		"card_remember":            remembered,
		"card_denied":              denied,
		"card_answered":            answered,
		"card_expired":             expired,
		"card_cancelled":           cancelled,
		"card_hostile":             hostile,
	}
}

// A card whose ask no standing rule may relax (several requesters'
// rules combined, or a failed condition), or whose arguments are an
// edit, offers no Always allow: the decision would refuse it.
func TestCardOffersNoStandingRuleTheDecisionRefuses(t *testing.T) {
	base := goldenCards()["card_pending"]
	base.FourEyes = false
	if ids := actionIDs(CardBlocks(base)); !slices.Contains(ids, ActionRemember) {
		t.Fatalf("pending card actions %v, want Always allow offered", ids)
	}
	combined, edited := base, base
	combined.NoAlwaysAllow = true
	edited.ArgsEdited = true
	for name, c := range map[string]Card{"combined": combined, "edited": edited} {
		ids := actionIDs(CardBlocks(c))
		if !slices.Contains(ids, ActionApprove) {
			t.Errorf("%s card actions %v, want Approve kept", name, ids)
		}
		for _, no := range []string{ActionRemember, ActionRememberExact} {
			if slices.Contains(ids, no) {
				t.Errorf("%s card actions %v include %s, want none", name, ids, no)
			}
		}
	}
}

// TestTwoPersonCardOffersNoStandingRule checks that a call needing two
// approvers keeps its decision buttons but offers no "Always allow": a
// standing rule would let one person skip the second approval.
func TestTwoPersonCardOffersNoStandingRule(t *testing.T) {
	c := goldenCards()["card_two_person"]
	ids := actionIDs(CardBlocks(c))
	for _, want := range []string{ActionApprove, ActionDeny, ActionReject, ActionEdit} {
		if !slices.Contains(ids, want) {
			t.Errorf("two-person card actions %v, want %s kept until the count is met", ids, want)
		}
	}
	for _, no := range []string{ActionRemember, ActionRememberExact} {
		if slices.Contains(ids, no) {
			t.Errorf("two-person card actions %v include %s, want none", ids, no)
		}
	}
	if got := approvalsText(c); !strings.Contains(got, "1 of 2 approvals: <@U0APPROVER1>") {
		t.Errorf("approvalsText = %q, want it to say 1 of 2 approvals: <@U0APPROVER1>", got)
	}
}

func TestGoldenCards(t *testing.T) {
	for name, c := range goldenCards() {
		t.Run(name, func(t *testing.T) {
			blocks := CardBlocks(c)
			checkGolden(t, name, blocks)
			checkLimits(t, name, blocks, maxMessageBlocks)
		})
	}
}

// actionIDs returns the action ids of the buttons in blocks, in order.
func actionIDs(blocks []slack.Block) []string {
	var ids []string
	for _, b := range blocks {
		switch b := b.(type) {
		case *slack.ActionBlock:
			for _, e := range b.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok {
					ids = append(ids, btn.ActionID)
				}
			}
		case *slack.SectionBlock:
			if b.Accessory != nil && b.Accessory.ButtonElement != nil {
				ids = append(ids, b.Accessory.ButtonElement.ActionID)
			}
		}
	}
	return ids
}

// buttonValues returns the values of the buttons in blocks.
func buttonValues(blocks []slack.Block) []string {
	var vs []string
	for _, b := range blocks {
		switch b := b.(type) {
		case *slack.ActionBlock:
			for _, e := range b.Elements.ElementSet {
				if btn, ok := e.(*slack.ButtonBlockElement); ok {
					vs = append(vs, btn.Value)
				}
			}
		case *slack.SectionBlock:
			if b.Accessory != nil && b.Accessory.ButtonElement != nil {
				vs = append(vs, b.Accessory.ButtonElement.Value)
			}
		}
	}
	return vs
}

func TestCardButtons(t *testing.T) {
	cards := goldenCards()
	open := cards["card_pending"]
	open.FourEyes = false
	cards["card_open"] = open
	tests := []struct {
		card string
		want []string
	}{
		// Four-eyes cards: no "Always allow here", which could never apply.
		{"card_pending", []string{ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionWhy, ActionCancel}},
		{"card_huge_args", []string{ActionViewArgs, ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionWhy, ActionCancel}},
		{"card_open", []string{ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionRemember, ActionRememberExact, ActionWhy, ActionCancel}},
		{"card_ask_human", []string{ActionRespond, ActionDeny, ActionReject, ActionWhy, ActionCancel}},
		{"card_approved", nil},
		{"card_rejected", nil},
		{"card_edited", nil},
		{"card_answered", nil},
		{"card_expired", nil},
		{"card_cancelled", nil},
	}
	for _, tt := range tests {
		c := cards[tt.card]
		blocks := CardBlocks(c)
		if got := actionIDs(blocks); strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: buttons %v, want %v", tt.card, got, tt.want)
		}
		for _, v := range buttonValues(blocks) {
			if v != c.CallID {
				t.Errorf("%s: button value %q, want only the call id %q", tt.card, v, c.CallID)
			}
		}
	}
}

func TestCardDecidedKeepsViewArgs(t *testing.T) {
	c := decided(goldenCards()["card_huge_args"], approvals.Approve)
	got := actionIDs(CardBlocks(c))
	if len(got) != 1 || got[0] != ActionViewArgs {
		t.Errorf("decided card with long arguments: buttons %v, want only %s", got, ActionViewArgs)
	}
}

func TestCardContent(t *testing.T) {
	cards := goldenCards()
	tests := []struct {
		card    string
		want    []string
		notWant []string
	}{
		{"card_pending", []string{
			"Requested by <@U024REQST>",
			"`files-delete` — Deleting outside tmp needs review",
			"*Approvers:* <@U024BE7LH>, <!subteam^S0614TZR7>",
			"Four-eyes",
			"<!date^1741341600^{date_short_pretty} at {time}|2025-03-07 10:00 UTC>",
			`\"path\": \"/srv/data/report.csv\"`,
		}, []string{"not-an-id", "C0123ABC", "<!channel>"}},
		{"card_approved", []string{
			"Approved by <@U0APPROVR> at <!date^1741086000^",
			"*Outcome:* ran",
			"deleted /srv/data/report.csv",
		}, []string{"*Approvers:*", "Four-eyes"}},
		{"card_rejected", []string{
			"Rejected by <@U0APPROVR>",
			">Wrong file.\\n>Use the staging copy &lt;@U999&gt; &amp; tell @\u2060channel",
		}, []string{"<@U999>"}},
		{"card_edited", []string{"Edited by <@U0APPROVR>", "*Edited arguments*", "/srv/scratch/tmp/report.csv", "*Outcome:* failed"}, nil},
		{"card_remember", []string{"allowed in this channel from now on"}, nil},
		{"card_denied", []string{"Denied by <@U0APPROVR>"}, nil},
		{"card_answered", []string{"Answered by <@U0APPROVR>", ">eu-west-1, please"}, nil},
		{"card_expired", []string{"Expired after 3 days without a decision"}, nil},
		{"card_cancelled", []string{"Cancelled by the requester"}, nil},
		{"card_ask_human", []string{
			"*Question*\\n>Which *region* should I deploy to?",
			"• `eu-west-1`",
			"the runbook (https://wiki.example/runbook)",
		}, []string{"<https://wiki.example"}},
	}
	for _, tt := range tests {
		got := string(render(t, CardBlocks(cards[tt.card])))
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: rendered card does not contain %q:\n%s", tt.card, w, got)
			}
		}
		for _, w := range tt.notWant {
			if strings.Contains(got, w) {
				t.Errorf("%s: rendered card contains %q, want it absent:\n%s", tt.card, w, got)
			}
		}
	}
}

// TestCardHostileArgs checks, beyond the golden file, that model-chosen
// arguments cannot ping anyone, link anywhere or break out of their code
// block.
func TestCardHostileArgs(t *testing.T) {
	c := goldenCards()["card_hostile"]
	got := string(render(t, CardBlocks(c)))
	for _, bad := range []string{"<!channel>", "<!here>", "<@U123>", "<@U999>", "<!subteam^S0614TZR7>, see", "<https://evil", "@here", "@Everyone"} {
		if strings.Contains(got, bad) {
			t.Errorf("hostile card contains %q as mrkdwn:\n%s", bad, got)
		}
	}
	for _, shown := range []string{"&lt;!channel&gt;", "&lt;@U123&gt;", "&lt;https://evil.example|docs.slack.com&gt;", "@\u2060here"} {
		if !strings.Contains(got, shown) {
			t.Errorf("hostile card does not show %q as text:\n%s", shown, got)
		}
	}
	// The arguments section holds exactly one code block: the ``` inside
	// the arguments does not close it.
	for _, b := range CardBlocks(c) {
		s, ok := b.(*slack.SectionBlock)
		if !ok || s.Text == nil || !strings.HasPrefix(s.Text.Text, "*Arguments*") {
			continue
		}
		if n := strings.Count(s.Text.Text, "```"); n != 2 {
			t.Errorf("arguments section has %d ``` fences, want 2:\n%s", n, s.Text.Text)
		}
	}
}

func TestCardHugeArgsTruncated(t *testing.T) {
	c := pendingCard()
	c.Args = hugeArgs()
	var args *slack.SectionBlock
	for _, b := range CardBlocks(c) {
		if s, ok := b.(*slack.SectionBlock); ok && strings.HasPrefix(s.Text.Text, "*Arguments*") {
			args = s
		}
	}
	if args == nil {
		t.Fatal("no arguments section")
	}
	if n := textLen(args.Text.Text); n > maxSectionText || n < maxSectionText-10 {
		t.Errorf("arguments section is %d characters, want just under %d", n, maxSectionText)
	}
	if !strings.HasSuffix(args.Text.Text, ellipsis+"\n```") {
		t.Errorf("truncated arguments do not end with an ellipsis and a closing fence: %q", args.Text.Text[len(args.Text.Text)-20:])
	}
	if args.Accessory == nil || args.Accessory.ButtonElement == nil || args.Accessory.ButtonElement.ActionID != ActionViewArgs {
		t.Errorf("truncated arguments have no %s button", ActionViewArgs)
	}
}

func TestCardLimitsExtreme(t *testing.T) {
	long := strings.Repeat("<!channel> & ", 1000)
	c := pendingCard()
	c.Tool = strings.Repeat("t", 500)
	c.Reason = long
	c.RuleID = long
	c.Approvers = make([]string, 300)
	for i := range c.Approvers {
		c.Approvers[i] = "U0123456789"
	}
	c.Args = json.RawMessage(`"` + strings.Repeat("&", 10000) + `"`)
	checkLimits(t, "extreme pending", CardBlocks(c), maxMessageBlocks)

	c = decided(c, approvals.Edit)
	c.EditedArgs = c.Args
	c.RejectReason = long
	c.Outcome = long
	c.OutputSummary = long
	checkLimits(t, "extreme edited", CardBlocks(c), maxMessageBlocks)
	c.Decision = approvals.Reject
	checkLimits(t, "extreme rejected", CardBlocks(c), maxMessageBlocks)

	h := pendingCard()
	h.Human = true
	h.Question = long
	checkLimits(t, "extreme question", CardBlocks(h), maxMessageBlocks)
	if s := string(render(t, CardBlocks(h))); strings.Contains(s, "<!channel>") {
		t.Errorf("extreme question contains <!channel>")
	}
}

func TestCardText(t *testing.T) {
	tests := []struct {
		name string
		card Card
		want string
	}{
		{"pending", pendingCard(), "Approval needed for `files__delete_path` from <@U024BE7LH>, <!subteam^S0614TZR7>"},
		{"approved", decided(pendingCard(), approvals.Approve), "`files__delete_path`: :white_check_mark: Approved by <@U0APPROVR> at <!date^1741086000^{date_short_pretty} at {time}|2025-03-04 11:00 UTC>"},
		{"hostile tool", Card{Tool: "<!channel>"}, "Approval needed for `&lt;!channel&gt;`"},
	}
	for _, tt := range tests {
		if got := CardText(tt.card); got != tt.want {
			t.Errorf("CardText(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestMessageTexts(t *testing.T) {
	at := t0.Add(time.Hour)
	tests := []struct {
		name, got, want string
	}{
		{"waiting", WaitingText([]Waiting{{Tool: "files__delete_path", Approvers: []string{"U1ABC", "S1ABC", "bad"}}}, true, false),
			"This thread is waiting on approval of `files__delete_path` by <@U1ABC> or <!subteam^S1ABC>; I'll answer your message after that."},
		{"waiting two tools, anyone", WaitingText([]Waiting{{Tool: "a"}, {Tool: "b<!here>"}, {Tool: "a"}}, true, false),
			"This thread is waiting on approval of `a` and `b&lt;!here&gt;` by anyone in this channel; I'll answer your message after that."},
		{"waiting on different approvers", WaitingText([]Waiting{{Tool: "scale"}, {Tool: "restart", Approvers: []string{"U1ABC"}}, {Tool: "drain"}}, true, false),
			"This thread is waiting on approval of `scale` and `drain` by anyone in this channel and `restart` by <@U1ABC>; I'll answer your message after that."},
		{"waiting again, no one pinged", WaitingText([]Waiting{{Tool: "scale"}, {Tool: "restart", Approvers: []string{"U1ABC", "S1ABC"}}, {Tool: "scale"}}, false, false),
			"This thread is waiting on approval of `scale` and `restart` (the cards above say who may decide); I'll answer your message after that."},
		{"waiting in a DM", WaitingText([]Waiting{{Tool: "scale"}}, true, true),
			"This thread is waiting on approval of `scale` by you; I'll answer your message after that."},
		{"waiting for an answer", WaitingText([]Waiting{{Tool: "ask_human", Human: true}}, true, false),
			"This thread is waiting for an answer to the question of `ask_human` from anyone in this channel (answer with *Reply* on its card: a message in the thread does not answer it); I'll answer your message after that."},
		{"waiting for an approval and an answer", WaitingText([]Waiting{{Tool: "scale", Approvers: []string{"U1ABC"}}, {Tool: "ask_human", Human: true, Approvers: []string{"U1ABC"}}}, false, false),
			"This thread is waiting on approval of `scale` (the cards above say who may decide), and for an answer to the question of `ask_human` (answer with *Reply* on its card: a message in the thread does not answer it); I'll answer your message after that."},
		{"not approver", NotApproverText([]string{"U1ABC", "<!channel>"}),
			"You are not an approver for this call, so nothing changed. It can be decided by <@U1ABC>."},
		{"not approver, no list", NotApproverText(nil), "You are not an approver for this call, so nothing changed."},
		{"not requester", NotRequesterText("U1ABC"), "Only <@U1ABC> can cancel this request. Nothing changed."},
		{"not requester, bad id", NotRequesterText("<!here>"), "Only &lt;!here&gt; can cancel this request. Nothing changed."},
		{"not one of the requesters", NotRequesterText("U1ABC", "U2DEF", "U1ABC"), "Only <@U2DEF>, <@U1ABC> (whoever of them) can cancel this request. Nothing changed."},
		{"already approved", AlreadyDecidedText("U1ABC", approvals.Approve, at),
			"This call was already approved by <@U1ABC> at <!date^1741086000^{date_short_pretty} at {time}|2025-03-04 11:00 UTC>. Nothing changed."},
		{"already rejected, no time", AlreadyDecidedText("U1ABC", approvals.Reject, time.Time{}),
			"This call was already rejected by <@U1ABC>. Nothing changed."},
		{"already expired", AlreadyDecidedText("", approvals.Expire, at), ExpiredText()},
		{"already cancelled", AlreadyDecidedText("U1ABC", approvals.Cancel, at), CancelledText()},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, tt.got, tt.want)
		}
	}
	for _, s := range []string{RequesterCannotApproveText(), ExpiredText(), CancelledText(), ChangedArgsText(), DecisionFailedText()} {
		if s == "" || strings.ContainsAny(s, "<>") {
			t.Errorf("fixed text %q is empty or contains markup", s)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{72 * time.Hour, "3 days"},
		{90 * time.Minute, "1 hour 30 minutes"},
		{25*time.Hour + time.Minute, "1 day 1 hour"},
		{24*time.Hour + time.Minute, "1 day"},
		{45 * time.Second, "45 seconds"},
		{0, "less than a second"},
	}
	for _, tt := range tests {
		if got := humanDuration(tt.d); got != tt.want {
			t.Errorf("humanDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestCardLongQuestionKeepsCodeClosed(t *testing.T) {
	c := pendingCard()
	c.Human = true
	c.Question = "Look at this:\n```\n" + strings.Repeat("<!here> line\n", 400) + "```\nOK?"
	blocks := CardBlocks(c)
	checkLimits(t, "long question", blocks, maxMessageBlocks)
	for _, b := range blocks {
		s, ok := b.(*slack.SectionBlock)
		if !ok || !strings.HasPrefix(s.Text.Text, "*Question*") {
			continue
		}
		if n := strings.Count(s.Text.Text, "```"); n%2 != 0 {
			t.Errorf("cut question has %d fences, want an even number", n)
		}
		if !strings.HasSuffix(s.Text.Text, questionCutNote) {
			t.Errorf("cut question does not end with %q", questionCutNote)
		}
	}
}

// A reminder mentions the approvers who have not approved yet, and never
// lets the tool name ping anyone.
func TestReminderText(t *testing.T) {
	c := goldenCards()["card_two_person"]
	c.Approvers = []string{"U0APPROVER1", "U0APPROVER2"}
	c.Tool = "deploy<!channel>"
	got := ReminderText(c, 1)
	if !strings.Contains(got, "<@U0APPROVER2>") || strings.Contains(got, "<@U0APPROVER1>") {
		t.Errorf("ReminderText = %q, want it to mention U0APPROVER2 only (U0APPROVER1 approved)", got)
	}
	if strings.Contains(got, "<!channel>") || !strings.Contains(got, "1 of 2 approvals") {
		t.Errorf("ReminderText = %q, want the count and no broadcast", got)
	}
	if last := ReminderText(c, 2); !strings.HasPrefix(last, ":bell: Last reminder") {
		t.Errorf("second ReminderText = %q, want it to say Last reminder", last)
	}
	// A question waits for an answer, which one person gives, under a
	// two-person rule too.
	c.Human = true
	q := ReminderText(c, 1)
	if !strings.Contains(q, "still waiting for an answer to its question") || strings.Contains(q, "approval") || strings.Contains(q, "decision") {
		t.Errorf("ReminderText of a question = %q, want it to wait for an answer, with no approvals counted", q)
	}
}

// A call open to anyone who sees its conversation says who that is: in a
// channel its members, in a direct message with the bot its requester
// alone, on the card, in a reminder and in the requester's Home tab.
func TestOpenAudienceOfADirectMessage(t *testing.T) {
	c := goldenCards()["card_pending"]
	c.Approvers, c.FourEyes = nil, false
	for _, tt := range []struct {
		inDM       bool
		want, mine string
	}{
		{false, "anyone in this channel", "waiting on anyone in the channel"},
		{true, "the requester (no one else sees this direct message)", "waiting on you, in your direct message with the bot"},
	} {
		c.InDM = tt.inDM
		card := blocksText(t, CardBlocks(c))
		if !strings.Contains(card, "*Approvers:* "+tt.want) {
			t.Errorf("in a DM %v: the card says\n%s\nwant Approvers: %s", tt.inDM, card, tt.want)
		}
		if got := ReminderText(c, 1); !strings.Contains(got, tt.want) {
			t.Errorf("in a DM %v: ReminderText = %q, want %q", tt.inDM, got, tt.want)
		}
		if got := blocksText(t, HomeView(nil, []Card{c}).Blocks.BlockSet); !strings.Contains(got, tt.mine) {
			t.Errorf("in a DM %v: the requester's Home tab says\n%s\nwant %q", tt.inDM, got, tt.mine)
		}
	}
}

// The explanation of a pending call is marked as one, and the model's text
// can mention no one nor hide a link.
func TestGoldenExplanation(t *testing.T) {
	blocks := ExplanationBlocks("deploy", "UAPPROVER1", "It deploys **api** 5 <!channel> [docs](https://evil.example) <@U123>.")
	checkGolden(t, "explanation", blocks)
	raw, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"<!channel>", "<@U123>", "|docs"} {
		if strings.Contains(string(raw), bad) {
			t.Errorf("the explanation blocks contain %q: %s", bad, raw)
		}
	}
}

// A long preview is cut on the card, with a button to the whole of it; a
// short one has no button; a pending card's preview is gone once decided.
func TestCardPreviewParts(t *testing.T) {
	cards := goldenCards()
	if ids := actionIDs(CardBlocks(cards["card_preview_long"])); !slices.Contains(ids, ActionViewPreview) {
		t.Errorf("a long preview has no %s button: %v", ActionViewPreview, ids)
	}
	if ids := actionIDs(CardBlocks(cards["card_preview"])); slices.Contains(ids, ActionViewPreview) {
		t.Errorf("a short preview has a %s button: %v", ActionViewPreview, ids)
	}
	done := decided(cards["card_preview"], approvals.Approve)
	if raw, _ := json.Marshal(CardBlocks(done)); strings.Contains(string(raw), "Preview") {
		t.Errorf("a decided card still shows the preview: %s", raw)
	}
	m := PreviewModal("workspace_write", cards["card_preview_long"].Preview)
	checkGolden(t, "modal_preview", m)
	raw, _ := json.Marshal(m)
	if !strings.Contains(string(raw), "line 399 of the new file") {
		t.Error("the full-preview modal does not show the end of the preview")
	}
}

// An ask_human question is untrusted text like arguments: its hidden
// characters are written out, with a warning, wherever it is shown.
func TestQuestionRevealsHiddenCharacters(t *testing.T) {
	c := pendingCard()
	c.Human = true
	c.Question = "Reply yes to delete \u202eved-gnigats\u202c?"
	asking := c
	asking.Args = json.RawMessage("{\"path\":\"x\u202ey\"}")
	asking.Human = false
	surfaces := map[string]string{
		"card":        blocksText(t, CardBlocks(c)),
		"home inbox":  blocksText(t, HomeView([]Card{c}, nil).Blocks.BlockSet),
		"home mine":   blocksText(t, HomeView(nil, []Card{c}).Blocks.BlockSet),
		"reply modal": blocksText(t, RespondModal(c.CallID, c.Question).Blocks.BlockSet),
	}
	for name, text := range surfaces {
		if strings.ContainsRune(text, '\u202e') || !strings.Contains(text, "⟦U+202E⟧ved-gnigats⟦U+202C⟧") {
			t.Errorf("%s: the question's hidden characters are not written out: %q", name, text)
		}
		if !strings.Contains(text, "2 hidden character(s)* in the question") {
			t.Errorf("%s: no warning about the question's hidden characters: %q", name, text)
		}
	}
	if text := blocksText(t, HomeView(nil, []Card{asking}).Blocks.BlockSet); strings.ContainsRune(text, '\u202e') || !strings.Contains(text, "hidden character(s)* in the arguments") {
		t.Errorf("home mine: the arguments' hidden characters are not written out: %q", text)
	}
}

// blocksText is the JSON of blocks, decoded back to text: every string a
// reader could see in them.
func blocksText(t *testing.T, blocks []slack.Block) string {
	t.Helper()
	b, err := json.Marshal(blocks)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	// Every string on a line of its own, the first one too: a block's
	// fields come in map order.
	out := strings.Builder{}
	out.WriteString("\n")
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out.WriteString(v + "\n")
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out.String()
}

// A note posted in a thread stays within Block Kit's limits however long
// it is (a waiting note lists every tool the step waits on, a reminder
// every approver), with verbatim text like every other section, over as
// many messages as it takes, none of them holding more block text than
// Slack takes.
func TestNoteMessagesAreWithinLimits(t *testing.T) {
	for _, n := range []int{150, 1500} {
		text := strings.Repeat("`files__a_rather_long_tool_name_from_a_server` ", n)
		msgs := noteMessages(text)
		var got strings.Builder
		sections := 0
		for _, m := range msgs {
			checkLimits(t, "long note", m.blocks, maxMessageBlocks)
			size := 0
			for _, b := range m.blocks {
				s := b.(*slack.SectionBlock)
				if !s.Text.Verbatim {
					t.Errorf("a section of the note is not verbatim")
				}
				got.WriteString(s.Text.Text)
				size += textLen(s.Text.Text)
				sections++
			}
			if size > maxMessageText {
				t.Errorf("a message of the note holds %d characters of block text, more than %d", size, maxMessageText)
			}
			if m.text == "" {
				t.Errorf("a message of the note has no notification text")
			}
		}
		if sections < 2 || strings.Count(got.String(), "files__") != n {
			t.Errorf("the note is %d sections holding %d of the %d tools, want it whole over several", sections, strings.Count(got.String(), "files__"), n)
		}
		if n == 1500 && len(msgs) < 2 {
			t.Errorf("a note of %d tools is %d message(s), want several", n, len(msgs))
		}
	}
}

// A failed Why? names its cause in a few words, never the error's own
// text, which can carry the model endpoint's address and query.
func TestExplainFailedTextKeepsErrorsOut(t *testing.T) {
	inner := errors.New(`Post "https://llm.internal.example:8443/v1/chat/completions?key=SECRET": dial tcp 10.2.3.4:8443: connect: connection refused`)
	for _, err := range []error{
		fmt.Errorf("model: %w", &agent.ModelError{Kind: agent.ErrKindConnection, Message: inner.Error(), Err: inner}),
		fmt.Errorf("load run of call x: %w", inner),
	} {
		got := ExplainFailedText(err)
		if strings.Contains(got, "llm.internal") || strings.Contains(got, "SECRET") || strings.Contains(got, "10.2.3.4") {
			t.Errorf("ExplainFailedText(%v) = %q, quotes the error", err, got)
		}
		if !strings.Contains(got, "still pending") {
			t.Errorf("ExplainFailedText(%v) = %q, want it to say the call is still pending", err, got)
		}
	}
}

// A copy of a card outside the conversation says that "Always allow"
// applies to the conversation's channel, not the copy's; a sealed copy does
// not offer to allow arguments it does not show.
func TestCopiesSayWhereAlwaysAllowApplies(t *testing.T) {
	buttons := func(c Card) string {
		b, err := json.Marshal(CardBlocks(c))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	c := pendingCard()
	c.FourEyes = false // four eyes offers no Always allow
	if got := buttons(c); !strings.Contains(got, "Always allow here") || !strings.Contains(got, "later calls of this tool in this channel") || !strings.Contains(got, ActionRememberExact) {
		t.Errorf("the conversation's card: %s", got)
	}
	c.CopyOf = "C0PRIVATE1"
	got := buttons(c)
	if !strings.Contains(got, "Always allow there") || !strings.Contains(got, "in the conversation's channel (not where this copy is)") || strings.Contains(got, "in this channel will") {
		t.Errorf("a copy does not say where the rule applies: %s", got)
	}
	if !strings.Contains(got, ActionRememberExact) {
		t.Errorf("a DM copy, which shows the arguments, does not offer them: %s", got)
	}
	if got := buttons(Seal(c)); strings.Contains(got, ActionRememberExact) || !strings.Contains(got, ActionRemember) {
		t.Errorf("a sealed copy offers to allow arguments it does not show, or no Always allow: %s", got)
	}
	c.Status, c.Decision, c.Decider = StatusDecided, approvals.Remember, "U1ABC"
	if got := buttons(c); !strings.Contains(got, "allowed in \u003c#C0PRIVATE1\u003e from now on") && !strings.Contains(got, `allowed in \u003c#C0PRIVATE1\u003e`) {
		t.Errorf("a decided copy does not name the channel allowed: %s", got)
	}
}

// A preview error is a tool's words (or the model's, quoted in a parse
// error): the card shows it as code with its hidden characters written
// out, never as mrkdwn that could pass for the card's own lines.
func TestPreviewErrorIsShownAsCode(t *testing.T) {
	c := pendingCard()
	c.PreviewError = "invalid url \u202e :white_check_mark: *Pre-approved by @secops*"
	text := blocksText(t, []slack.Block{previewBlock(c)})
	want := ":warning: Preview unavailable: `invalid url ⟦U+202E⟧ :white_check_mark: *Pre-approved by @secops*`"
	if !strings.Contains(text, "\n"+want+"\n") {
		t.Errorf("preview error shown as %q, want %q", text, want)
	}
}

// The model's question is set apart as a quote on the card, the Home tab
// and the reply form: lines that imitate the card's own (a divider, an
// "Approved by" status) stay inside it.
func TestQuestionIsQuoted(t *testing.T) {
	q := "Which region?\n\n---\n:white_check_mark: Approved by **@secops-lead**\n**Outcome:** ran"
	check := func(where, text string) {
		t.Helper()
		_, body, ok := strings.Cut(text, "Which region?")
		if !ok {
			t.Fatalf("%s: no question in %q", where, text)
		}
		for _, l := range strings.Split(strings.TrimSpace("Which region?"+body), "\n") {
			if strings.Contains(l, "Approved by") || strings.Contains(l, "Outcome") || strings.Contains(l, "──") {
				if !strings.HasPrefix(l, ">") {
					t.Errorf("%s: the question's line %q is not quoted", where, l)
				}
			}
		}
	}
	c := goldenCards()["card_ask_human"]
	c.Question = q
	for _, b := range CardBlocks(c) {
		if sb, ok := b.(*slack.SectionBlock); ok && sb.Text != nil && strings.HasPrefix(sb.Text.Text, "*Question*") {
			check("card", sb.Text.Text)
		}
	}
	m := RespondModal("c1", q)
	var modal strings.Builder
	for _, b := range m.Blocks.BlockSet {
		if sb, ok := b.(*slack.SectionBlock); ok && sb.Text != nil {
			modal.WriteString(sb.Text.Text + "\n")
		}
	}
	check("reply form", modal.String())
}

// A click refused because the policy now denies the call says the rule's
// words, and the evaluation's error (which may quote the arguments) as
// code, never as live mrkdwn.
func TestPolicyDeniedRefusalShowsTheProblemAsCode(t *testing.T) {
	err := &agent.DetailError{Err: approvals.ErrPolicyDenied, Detail: "rule big could not be evaluated; its verdict is deny", Problem: `invalid RFC 3339 timestamp "*Approved by security*"`}
	text, result := refusalText(agent.Call{}, "U1", err)
	want := "The policy now denies this call: rule big could not be evaluated; its verdict is deny (could not evaluate: `invalid RFC 3339 timestamp \"*Approved by security*\"`). Nothing ran."
	if result != "policy_denied" || text != want {
		t.Errorf("refusal = %q (%s), want %q", text, result, want)
	}
}

// A message's body, encoded by fastjson.Marshal, is the JSON value
// encoding/json writes, for every golden card.
func TestMessageBodyEncodesAsEncodingJSON(t *testing.T) {
	for name, c := range goldenCards() {
		for _, cr := range []chatRequest{
			{Channel: "C1", ThreadTS: "1.2", Blocks: CardBlocks(c), Text: "fallback <text> & more", UnfurlLinks: noUnfurl, UnfurlMedia: noUnfurl},
			{Channel: "C1", TS: "1.3", Blocks: CardBlocks(c)},
		} {
			got, err := fastjson.Marshal(cr)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			want, err := json.Marshal(cr)
			if err != nil {
				t.Fatal(err)
			}
			var g, w any
			if err := json.Unmarshal(got, &g); err != nil {
				t.Fatalf("%s: invalid JSON: %v", name, err)
			}
			_ = json.Unmarshal(want, &w)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: body\n%s\nencoding/json\n%s", name, got, want)
			}
		}
	}
}

// An answer too long to show whole on its card (its escapes, & as &amp;,
// and each line's quote mark count too) says it was cut, and that the
// model was given all of it; one shown whole says nothing of the kind.
func TestLongAnswerOnTheCardSaysItWasCut(t *testing.T) {
	c := goldenCards()["card_answered"]
	long := strings.Repeat("R&D item\n", 220) // 1,980 characters, more once escaped
	for _, tt := range []struct {
		answer string
		cut    bool
	}{{"eu-west-1, please", false}, {long, true}} {
		c.Answer = tt.answer
		got := string(render(t, CardBlocks(c)))
		if said := strings.Contains(got, "cut short here; the model was given the whole answer"); said != tt.cut {
			t.Errorf("an answer of %d characters: the card says it was cut: %v, want %v", len(tt.answer), said, tt.cut)
		}
	}
}
