package slackapp

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/approvals"
)

// sectionButton returns the action id of the button beside the section
// whose text starts with prefix ("" if none, or no such section).
func sectionButton(blocks []slack.Block, prefix string) (text, action string) {
	for _, b := range blocks {
		s, ok := b.(*slack.SectionBlock)
		if !ok || s.Text == nil || !strings.HasPrefix(s.Text.Text, prefix) {
			continue
		}
		if s.Accessory != nil && s.Accessory.ButtonElement != nil {
			return s.Text.Text, s.Accessory.ButtonElement.ActionID
		}
		return s.Text.Text, ""
	}
	return "", ""
}

// A call decided with edited arguments too long for a section shows them
// cut, with View full arguments beside them (which opens the edited
// arguments); the model's arguments, cut too, have a button of their own
// that opens them, not the edited ones.
func TestEditedArgumentsCutCanBeViewed(t *testing.T) {
	c := decided(pendingCard(), approvals.Edit)
	c.Args = json.RawMessage(`{"path":"/tmp/a"}`)
	c.EditedArgs = hugeArgs()
	c.Outcome = "ran"
	blocks := CardBlocks(c)
	edited, action := sectionButton(blocks, "*Edited arguments*")
	if !strings.HasSuffix(edited, ellipsis+"\n```") {
		t.Fatalf("edited arguments not cut: %q", edited)
	}
	if action != ActionViewArgs {
		t.Errorf("the edited arguments that ran are shown cut, with button %q beside them, want %s", action, ActionViewArgs)
	}
	if _, action := sectionButton(blocks, "*Arguments*"); action != "" {
		t.Errorf("the model's arguments, shown whole, have a %s button", action)
	}

	c.Args = hugeArgs()
	blocks = CardBlocks(c)
	if _, action := sectionButton(blocks, "*Arguments*"); action != ActionViewModelArgs {
		t.Errorf("the model's arguments, cut on a card decided with an edit, have button %q, want %s (the edited ones have %s)", action, ActionViewModelArgs, ActionViewArgs)
	}
	if ids := actionIDs(blocks); !slices.Contains(ids, ActionViewArgs) || !slices.Contains(ids, ActionViewModelArgs) {
		t.Errorf("buttons %v, want both views", ids)
	}

	// Pending, or decided otherwise: the one button as before.
	p := pendingCard()
	p.Args = hugeArgs()
	if _, action := sectionButton(CardBlocks(p), "*Arguments*"); action != ActionViewArgs {
		t.Errorf("a pending card's cut arguments have button %q, want %s", action, ActionViewArgs)
	}
}

// Always allow for these exact arguments says so on the card, which the
// whole channel reads: a call of the tool with other arguments still asks.
func TestExactAllowCardSaysTheseArgumentsOnly(t *testing.T) {
	c := decided(pendingCard(), approvals.Remember)
	if got := statusText(c); !strings.Contains(got, "and allowed in this channel from now on") {
		t.Errorf("an Always allow says %q", got)
	}
	c.ExactAllow = true
	if got := statusText(c); !strings.Contains(got, "and these exact arguments allowed in this channel from now on") {
		t.Errorf("an Always allow of these exact arguments says %q", got)
	}
	c.CopyOf = "C0OTHER001"
	if got := statusText(c); !strings.Contains(got, "and these exact arguments allowed in <#C0OTHER001> from now on") {
		t.Errorf("a copy's Always allow of these exact arguments says %q", got)
	}
}
