package slackapp

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// Every surface the package renders, ordinary and pushed to its limits,
// is one Slack takes, by the fake Slack's rules: text objects that are
// not empty, plain_text where Slack wants it, confirmation dialogs,
// inputs, a message's total of block text, a view's size.
func TestSurfacesPassSlacksRules(t *testing.T) {
	messages := map[string][]slack.Block{}
	for name, c := range goldenCards() {
		messages[name] = CardBlocks(c)
		messages[name+" sealed"] = CardBlocks(Seal(c))
	}
	long := strings.Repeat("<!channel> & ", 1000)
	x := pendingCard()
	x.Tool = strings.Repeat("t", 64)
	x.Reason, x.RuleID = strings.Repeat("review ", 40), strings.Repeat("r", 64)
	x.Approvers, x.Requesters = ids(300), ids(300)
	x.Args = json.RawMessage(`"` + strings.Repeat("&", 10000) + `"`)
	x.Preview = long
	x.MinApprovals, x.Approvals, x.FourEyes = 300, ids(200), false
	messages["extreme pending"] = CardBlocks(x)
	x.CopyOf = "C0123ABC"
	messages["extreme copy"] = CardBlocks(x)
	e := decided(x, approvals.Edit)
	e.EditedArgs, e.Outcome, e.OutputSummary = x.Args, "ran", long
	messages["extreme edited"] = CardBlocks(e)
	r := decided(x, approvals.Reject)
	r.RejectReason = long
	messages["extreme rejected"] = CardBlocks(r)
	h := pendingCard()
	h.Human, h.Question = true, long
	messages["extreme question"] = CardBlocks(h)
	messages["explanation"] = ExplanationBlocks("deploy", "U1ABC", long)
	messages["empty explanation"] = ExplanationBlocks("deploy", "U1ABC", "#")
	for i, m := range AnswerMessages(longAnswer(100000)) {
		messages["answer "+string(rune('a'+i))] = m
	}
	for name, blocks := range messages {
		if problems := fakeslack.MessageProblems(mustJSON(blocks)); len(problems) > 0 {
			t.Errorf("%s: Slack would refuse it: %v", name, problems)
		}
	}

	views := map[string]any{
		"reject":        RejectModal("c1"),
		"edit":          EditModal("c1", "deploy", testArgs, json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"where"}}}`)),
		"edit too long": EditModal("c1", "deploy", hugeArgs(), nil),
		"respond":       RespondModal("c1", "Which region?"),
		"respond long":  RespondModal("c1", strings.Repeat(long, 40)),
		"args":          ArgsModal("deploy", testArgs),
		"args huge":     ArgsModal("deploy", json.RawMessage(`"`+strings.Repeat("<&>\\n", 100000)+`"`)),
		"preview":       PreviewModal("deploy", strings.Repeat("<&> line\n", 8000)),
	}
	for name, v := range views {
		if problems := fakeslack.ViewProblems(mustJSON(v), "modal"); len(problems) > 0 {
			t.Errorf("%s modal: Slack would refuse it: %v", name, problems)
		}
	}
	inbox := make([]Card, 20)
	for i := range inbox {
		inbox[i] = x
	}
	for name, home := range map[string]slack.HomeTabViewRequest{
		"home":         HomeView([]Card{pendingCard()}, []Card{pendingCard()}),
		"home empty":   HomeView(nil, nil),
		"home extreme": HomeView(inbox, append(inbox, inbox...)),
	} {
		if problems := fakeslack.ViewProblems(mustJSON(home), "home"); len(problems) > 0 {
			t.Errorf("%s: Slack would refuse it: %v", name, problems)
		}
	}
}
