package main

import "testing"

// dave is not in #ops: in the terminal, as on the page, he cannot run
// /approvals there either, and is told so in the page's words; the bot is
// not asked.
func TestOutsiderCannotRunCommands(t *testing.T) {
	dave, _ := personByName("dave")
	refused := cannotPost(dave, "#ops")
	play(t, []step{
		{prompt: "you", command: "write hi to notes.md", want: []string{"card #1:", "Approvers: anyone in this channel"}},
		{prompt: "you", command: "/as dave", want: []string{"you are now dave"}},
		{prompt: "dave", command: "/pending", want: []string{refused}, notWant: []string{"(only dave sees this)", "workspace_write"}, fails: true},
		{prompt: "dave", command: "/approvals rules list", want: []string{refused}, notWant: []string{"(only dave sees this)"}, fails: true},
		{prompt: "dave", command: "/policy", want: []string{"four_eyes: true", refused}, notWant: []string{"(only dave sees this)"}, fails: true},
		{prompt: "dave", command: "/as you", want: []string{"you are now you"}},
		{prompt: "you", command: "/pending", want: []string{"(only you see this)", "workspace_write"}},
	})
}
