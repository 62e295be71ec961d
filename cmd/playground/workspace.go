package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

// The fake workspace: five people, #ops (the bot and everyone but dave)
// and #approvals, where the bot posts cards for approvers who cannot see
// the conversation.
const (
	userYou       = "U0YOU00001"
	userAlice     = "U0ALICE001"
	userBob       = "U0BOB00001"
	userCarol     = "U0CAROL001"
	userDave      = "U0DAVE0001"
	channelOps    = "C0OPS00001"
	channelApprov = "C0APPROVAL"
)

// person is a member of the fake workspace the playground can act as.
type person struct {
	id, name, role string
	// inOps and inApprovals say whether they are in #ops and #approvals.
	inOps, inApprovals bool
}

var people = []person{
	{userYou, "you", "requester: asks the bot to do things", true, false},
	{userAlice, "alice", "approver: on call, approves deletes", true, true},
	{userBob, "bob", "bystander: in #ops and named by no rule, so decides only what anyone in the channel may", true, false},
	{userCarol, "carol", "admin: may change the policy", true, true},
	{userDave, "dave", "outsider: not in #ops", false, false},
}

// personByName finds a person by handle, with or without a leading @.
func personByName(name string) (person, bool) {
	name = strings.TrimPrefix(name, "@")
	for _, p := range people {
		if p.name == name {
			return p, true
		}
	}
	return person{}, false
}

// personByID finds a person by user id.
func personByID(id string) (person, bool) {
	for _, p := range people {
		if p.id == id {
			return p, true
		}
	}
	return person{}, false
}

// cannotPost says that p cannot post in the channel named name ("#ops"),
// not being a member: the page and the terminal refuse alike, where the
// fake Slack would add the poster to the channel.
func cannotPost(p person, name string) string {
	return p.name + " is not in " + name + ", so cannot post here"
}

// nameOf returns the handle of a user id, or the id itself.
func nameOf(id string) string {
	if id == fakeslack.DefaultBotUserID {
		return "toolgate"
	}
	if p, ok := personByID(id); ok {
		return p.name
	}
	return id
}

// demoConfig is the playground's config file, in the format of the bot's
// CONFIG_FILE; %[1]s is the workspace root and %[2]s the directory
// run_command runs in. /policy prints it.
const demoConfig = `builtin_tools:
  ask_human: {}
  workspace: {root: %[1]q}
  run_command:
    allow: [ls, df, uptime, date, wc, rm]
    dir: %[2]q
    timeout: 10s

policy:
  default: ask
  rules:
    - id: reads
      tool: "workspace_[lr]*"     # workspace_list and workspace_read
      when: '!has(args.path) || !args.path.matches("(?i)^secrets")'
      verdict: allow
    - id: secrets                 # in any case: on macOS and Windows, Secrets/ is secrets/
      tool: "workspace_*"
      when: 'has(args.path) && args.path.matches("(?i)^secrets")'
      verdict: deny
      reason: secrets/ is off limits from chat; ask the security team.
    - id: deletes
      tool: workspace_delete
      verdict: ask
      approvers: [U0ALICE001]
      four_eyes: true
      reason: Deleting files needs a second person
    - id: tmp-writes
      tool: workspace_write
      when: 'args.path.startsWith("tmp/")'
      verdict: allow
    - id: writes
      tool: workspace_write
      verdict: ask
      reason: Changing files needs a review
    - id: no-rm
      tool: run_command
      when: 'args.argv[0] == "rm"'
      verdict: deny
      reason: Use workspace_delete, which asks for an approval.
    - id: harmless-commands      # flags only: a path, or a flag's file, could read anything
      tool: run_command
      when: 'args.argv[0] in ["ls", "df", "uptime"] && args.argv.filter(a, !a.startsWith("-")).size() == 1 || args.argv == ["date"]'
      verdict: allow
`

// seedWorkspace writes the demo files under root and the demo config file
// (for root and the command directory cmdDir) at configPath.
func seedWorkspace(root, cmdDir, configPath string) error {
	files := map[string]string{
		"scratch.csv":           "id,value\n1,42\n2,17\n",
		"report.csv":            "week,incidents\n48,3\n49,1\n",
		"notes.md":              "# On-call notes\n\n- api was restarted on Monday\n- worker is flaky\n",
		"secrets/api-token.txt": "not-a-real-token\n",
		"tmp/.keep":             "",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			return fmt.Errorf("seed workspace: %w", err)
		}
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			return fmt.Errorf("seed workspace: %w", err)
		}
	}
	if err := os.MkdirAll(cmdDir, 0o750); err != nil {
		return fmt.Errorf("seed workspace: %w", err)
	}
	if err := os.WriteFile(configPath, fmt.Appendf(nil, demoConfig, root, cmdDir), 0o600); err != nil {
		return fmt.Errorf("seed workspace: %w", err)
	}
	return nil
}
