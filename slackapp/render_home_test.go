package slackapp

import (
	"fmt"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
)

func homeCards() (inbox, mine []Card) {
	a := pendingCard()
	h := goldenCards()["card_ask_human"]
	h.CallID = "77aa00bb11cc22dd.1"
	big := goldenCards()["card_huge_args"]
	big.CallID = "77aa00bb11cc22dd.2"
	done := decided(pendingCard(), approvals.Approve)

	m := pendingCard()
	m.CallID = "0123456789abcdef.0"
	m.Tool = "github__merge_pr"
	m.Args = []byte(`{"repo":"toolgate/toolgate","number":42}`)
	return []Card{a, h, big, done}, []Card{m, done}
}

func TestGoldenHome(t *testing.T) {
	inbox, mine := homeCards()
	tests := map[string]slack.HomeTabViewRequest{
		"home":       HomeView(inbox, mine),
		"home_empty": HomeView(nil, nil),
	}
	for name, v := range tests {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, name, v)
			checkLimits(t, name, v, maxViewBlocks)
		})
	}
}

func TestHomeButtons(t *testing.T) {
	inbox, mine := homeCards()
	v := HomeView(inbox, mine)
	if v.Type != slack.VTHomeTab {
		t.Errorf("view type %q, want %q", v.Type, slack.VTHomeTab)
	}
	got := strings.Join(actionIDs(v.Blocks.BlockSet), ",")
	want := strings.Join([]string{
		ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionWhy, // pending four-eyes card
		ActionRespond, ActionDeny, ActionReject, ActionWhy, // ask_human
		ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionWhy, ActionViewArgs, // long arguments, four eyes
		ActionCancel, // own request
	}, ",")
	if got != want {
		t.Errorf("home buttons:\n got %s\nwant %s", got, want)
	}
	values := buttonValues(v.Blocks.BlockSet)
	wantValues := []string{inbox[0].CallID, inbox[1].CallID, inbox[2].CallID, mine[0].CallID}
	for _, val := range values {
		ok := false
		for _, w := range wantValues {
			ok = ok || val == w
		}
		if !ok {
			t.Errorf("home button value %q is not a call id", val)
		}
	}
	out := string(render(t, v))
	if strings.Contains(out, "(4)") || !strings.Contains(out, "*Waiting for your decision* (3)") {
		t.Errorf("home counts the decided card as waiting:\n%s", out)
	}
}

func TestHomeEmpty(t *testing.T) {
	out := string(render(t, HomeView(nil, nil)))
	for _, want := range []string{"Nothing is waiting for you", "None of your requests is waiting"} {
		if !strings.Contains(out, want) {
			t.Errorf("empty home does not say %q", want)
		}
	}
}

func TestHomeTruncated(t *testing.T) {
	var inbox, mine []Card
	for i := 0; i < 30; i++ {
		c := pendingCard()
		c.CallID = fmt.Sprintf("in.%d", i)
		c.Args = hugeArgs()
		inbox = append(inbox, c)
	}
	for i := 0; i < 45; i++ {
		c := pendingCard()
		c.CallID = fmt.Sprintf("mine.%d", i)
		mine = append(mine, c)
	}
	v := HomeView(inbox, mine)
	checkLimits(t, "home full", v, maxViewBlocks)
	out := string(render(t, v))
	for _, want := range []string{
		fmt.Sprintf("…and %d more waiting for you", 30-maxHomeInbox),
		fmt.Sprintf("…and %d more.", 45-maxHomeMine),
		"*Waiting for your decision* (30)",
		"*Your requests waiting for approval* (45)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("full home does not say %q", want)
		}
	}
}

// The question of one's own waiting request is converted as on its card:
// its Markdown is not read as mrkdwn, and it cannot ping.
func TestHomeMineQuestionConverted(t *testing.T) {
	c := Card{CallID: "c1~fp", Tool: "ask_human", Human: true, Question: "Is **this** ```fine``` ~~ok~~ <!here>", Status: StatusPending}
	text := mineEntry(c).(*slack.SectionBlock).Text.Text
	if !strings.Contains(text, "Is *this* `fine` ~ok~ &lt;!here&gt;") {
		t.Errorf("mine entry = %q, want the question converted as on its card", text)
	}
}
