package fakeslack_test

import (
	"strings"
	"testing"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

func mrkdwnSection(n int) slack.Block {
	return slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, strings.Repeat("a", n), false, false), nil, nil)
}

func plainText(s string) *slack.TextBlockObject {
	return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
}

// A message whose blocks hold more text in all than Slack takes is refused
// with msg_blocks_too_long, though each section is within its own limit and
// the message's text field could hold far more; a test may lower the
// figure.
func TestMessageBlocksTooLong(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	withButton := func(label string, sections ...int) []slack.Block {
		var blocks []slack.Block
		for _, n := range sections {
			blocks = append(blocks, mrkdwnSection(n))
		}
		return append(blocks, slack.NewActionBlock("", slack.NewButtonBlockElement("ok", "v", plainText(label))))
	}
	// The button's label counts: 12,001 characters in all.
	over := withButton("b", 3000, 3000, 3000, 3000)
	fits := withButton("Approve", 3000, 3000, 3000, 2993)
	if _, _, err := api.PostMessage("C1OPS", slack.MsgOptionBlocks(over...)); err == nil || err.Error() != "msg_blocks_too_long" {
		t.Errorf("postMessage with 12,001 characters of blocks: got %v, want msg_blocks_too_long", err)
	}
	_, ts, err := api.PostMessage("C1OPS", slack.MsgOptionBlocks(fits...))
	if err != nil {
		t.Fatalf("postMessage with 12,000 characters of blocks: %v", err)
	}
	if _, _, _, err := api.UpdateMessage("C1OPS", ts, slack.MsgOptionBlocks(over...)); err == nil || err.Error() != "msg_blocks_too_long" {
		t.Errorf("chat.update with 12,001 characters of blocks: got %v, want msg_blocks_too_long", err)
	}
	if _, err := api.PostEphemeral("C1OPS", "U1ALICE", slack.MsgOptionBlocks(over...)); err == nil || err.Error() != "msg_blocks_too_long" {
		t.Errorf("postEphemeral with 12,001 characters of blocks: got %v, want msg_blocks_too_long", err)
	}

	strict := newServer(t, fakeslack.WithMaxBlocksText(5000))
	api = slack.New(strict.BotToken(), slack.OptionAPIURL(strict.APIURL()))
	if _, _, err := api.PostMessage("C1OPS", slack.MsgOptionBlocks(mrkdwnSection(3000), mrkdwnSection(2001))); err == nil || err.Error() != "msg_blocks_too_long" {
		t.Errorf("postMessage past WithMaxBlocksText: got %v, want msg_blocks_too_long", err)
	}
}

// Text objects, confirmation dialogs and inputs are held to Slack's rules:
// no empty text, plain_text where Slack wants it, each field's length.
func TestBlockKitTextRules(t *testing.T) {
	s := newServer(t)
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	confirm := func(title, text, yes, no string) slack.Block {
		return slack.NewActionBlock("", slack.NewButtonBlockElement("deny", "v", plainText("Deny")).
			WithConfirm(slack.NewConfirmationBlockObject(plainText(title), plainText(text), plainText(yes), plainText(no))))
	}
	tests := []struct {
		name  string
		block slack.Block
		ok    bool
	}{
		{"empty section text", slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, "", false, false), nil, nil), false},
		{"empty context text", slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, "", false, false)), false},
		{"context text of 3001", slack.NewContextBlock("", slack.NewTextBlockObject(slack.MarkdownType, strings.Repeat("c", 3001), false, false)), false},
		{"mrkdwn header", slack.NewHeaderBlock(slack.NewTextBlockObject(slack.MarkdownType, "Title", false, false)), false},
		{"plain header", slack.NewHeaderBlock(plainText("Title")), true},
		{"mrkdwn button", slack.NewActionBlock("", slack.NewButtonBlockElement("b", "v", slack.NewTextBlockObject(slack.MarkdownType, "*Go*", false, false))), false},
		{"confirm within limits", confirm(strings.Repeat("t", 100), strings.Repeat("x", 300), strings.Repeat("y", 30), strings.Repeat("n", 30)), true},
		{"confirm title of 101", confirm(strings.Repeat("t", 101), "x", "y", "n"), false},
		{"confirm text of 301", confirm("t", strings.Repeat("x", 301), "y", "n"), false},
		{"confirm button of 31", confirm("t", "x", strings.Repeat("y", 31), "n"), false},
		{"deny button of 31", confirm("t", "x", "y", strings.Repeat("n", 31)), false},
		{"empty confirm title", confirm("", "x", "y", "n"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := api.PostMessage("C1OPS", slack.MsgOptionBlocks(tt.block))
			switch {
			case tt.ok && err != nil:
				t.Errorf("got %v, want it posted", err)
			case !tt.ok && (err == nil || err.Error() != "invalid_blocks"):
				t.Errorf("got %v, want invalid_blocks", err)
			}
		})
	}
}

// A view Slack would not take is refused: too large (view_too_large), an
// input's placeholder, max_length or initial value past their limits, a
// modal with inputs and nothing to submit them with. So is a
// response_action that updates a modal with such a view.
func TestViewRules(t *testing.T) {
	s := newServer(t)
	b := startBot(t, s, func(evt socketmode.Event) (any, bool) {
		if cb, ok := evt.Data.(slack.InteractionCallback); ok && cb.Type == slack.InteractionTypeViewSubmission {
			m := modal("Again")
			m.Submit = nil
			return slack.NewUpdateViewSubmissionResponse(&m), true
		}
		return nil, true
	})
	b.next(t, socketmode.EventTypeHello)

	input := func(el *slack.PlainTextInputBlockElement) slack.ModalViewRequest {
		m := modal("Reject")
		m.Blocks = slack.Blocks{BlockSet: []slack.Block{slack.NewInputBlock("reason", plainText("Reason"), nil, el)}}
		return m
	}
	big := modal("Big")
	for range 90 {
		big.Blocks.BlockSet = append(big.Blocks.BlockSet, slack.NewSectionBlock(
			slack.NewTextBlockObject(slack.MarkdownType, strings.Repeat("<&>", 1000), false, false), nil, nil))
	}
	noSubmit := modal("Reject")
	noSubmit.Submit = nil
	tests := []struct {
		name string
		view slack.ModalViewRequest
		want string
	}{
		{"within limits", input(slack.NewPlainTextInputBlockElement(plainText(strings.Repeat("p", 150)), "text").WithMaxLength(3000).WithInitialValue("x")), ""},
		{"too large", big, "view_too_large"},
		{"placeholder of 151", input(slack.NewPlainTextInputBlockElement(plainText(strings.Repeat("p", 151)), "text")), "invalid_arguments"},
		{"max_length of 3001", input(slack.NewPlainTextInputBlockElement(nil, "text").WithMaxLength(3001)), "invalid_arguments"},
		{"initial value past max_length", input(slack.NewPlainTextInputBlockElement(nil, "text").WithMaxLength(5).WithInitialValue("123456")), "invalid_arguments"},
		{"inputs without submit", noSubmit, "invalid_arguments"},
		{"mrkdwn title", func() slack.ModalViewRequest {
			m := modal("x")
			m.Title = slack.NewTextBlockObject(slack.MarkdownType, "Title", false, false)
			return m
		}(), "invalid_arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.api.OpenView(s.IssueTrigger("U1ALICE"), tt.view)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("views.open: got error %q, want %q", got, tt.want)
			}
		})
	}
	home := slack.HomeTabViewRequest{Type: slack.VTHomeTab, Blocks: big.Blocks}
	if _, err := b.api.PublishView("U1ALICE", home, ""); err == nil || err.Error() != "view_too_large" {
		t.Errorf("views.publish of a view too large: got %v, want view_too_large", err)
	}

	v, err := b.api.OpenView(s.IssueTrigger("U1ALICE"), modal("Reject"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SubmitView("U1ALICE", v.ID, map[string]map[string]string{"reason": {"text": "x"}}, ""); err == nil || !strings.Contains(err.Error(), "invalid_arguments") {
		t.Errorf("a response_action updating the modal with inputs and no submit: got %v, want it refused", err)
	}
	if got := s.OpenModals("U1ALICE"); len(got) != 1 || got[0].ID != v.ID || !strings.Contains(string(got[0].JSON), `"Reject"`) {
		t.Errorf("after a refused response_action: %d open modals, want the one submitted, unchanged", len(got))
	}
}
