package main

import "testing"

// What a person types reaches the model, and the card, as typed: the
// playground escapes &, < and > as Slack does, and the bot decodes them.
func TestTypedTextReachesTheCardAsTyped(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "write a && b > <c> to notes.md", want: []string{
			"card #1:", "== Approval: workspace_write ==", `"a && b > <c>\n"`,
		}, notWant: []string{"&amp;", "&gt;", "&lt;"}},
	})
}
