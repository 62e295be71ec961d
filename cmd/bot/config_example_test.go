package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/tools"
)

// TestConfigExample checks that config.example.yaml is accepted by both
// parsers of the config file and says what its comments claim.
func TestConfigExample(t *testing.T) {
	data, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	policy, err := approvals.ParseConfig(data)
	if err != nil {
		t.Fatalf("approvals.ParseConfig: %v", err)
	}
	tc, err := tools.ParseConfig(data)
	if err != nil {
		t.Fatalf("tools.ParseConfig: %v", err)
	}
	if tc.Builtins.AskHuman == nil {
		t.Error("ask_human is not enabled")
	}
	wd, _ := os.Getwd()
	if tc.Builtins.Workspace == nil || tc.Builtins.Workspace.Root != filepath.Join(wd, "workspace") {
		t.Errorf("workspace = %+v, want root ./workspace resolved against the working directory (/workspace in the Docker image)", tc.Builtins.Workspace)
	}

	// The commented tool examples work as they are once uncommented.
	var uncommented []string
	for _, l := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(l, "  # "); ok && (strings.HasPrefix(rest, "  ") || strings.HasPrefix(rest, "http_request:") || strings.HasPrefix(rest, "run_command:")) {
			l = "  " + rest
		}
		uncommented = append(uncommented, l)
	}
	t.Run("uncommented in the image", func(t *testing.T) {
		t.Chdir("/") // the Docker image's working directory
		full, err := tools.ParseConfig([]byte(strings.Join(uncommented, "\n")))
		if err != nil {
			t.Fatalf("the commented tool examples, uncommented: %v", err)
		}
		if full.Builtins.RunCommand == nil || full.Builtins.HTTPRequest == nil {
			t.Errorf("the uncommented examples enable run_command %v and http_request %v, want both", full.Builtins.RunCommand != nil, full.Builtins.HTTPRequest != nil)
		}
	})

	tests := []struct {
		tool, args string
		want       approvals.Action
	}{
		{"workspace_list", `{}`, approvals.Allow},
		{"workspace_read", `{"path": "notes/todo.md"}`, approvals.Allow},
		{"workspace_read", `{"path": ".env"}`, approvals.Deny},
		{"workspace_read", `{"path": "app/.env.local"}`, approvals.Deny},
		{"workspace_delete", `{"path": "notes/todo.md"}`, approvals.Ask},
		{"workspace_write", `{"path": "notes/todo.md", "content": "x"}`, approvals.Ask},
		{"github__create_issue", `{}`, approvals.Ask},
	}
	for _, tt := range tests {
		v := policy.Evaluate(approvals.Input{Tool: tt.tool, Args: json.RawMessage(tt.args), User: "UREQUEST1", Channel: "COPS00001"})
		if v.Action != tt.want {
			t.Errorf("Evaluate(%s %s) = %s (rule %s), want %s", tt.tool, tt.args, v.Action, v.RuleID, tt.want)
		}
	}
}

// TestReadmeCasesExample runs the cases file the README shows under
// "Checking the policy in CI" against config.example.yaml, whose cases
// they are, as a user who copies it would.
func TestReadmeCasesExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```yaml\ncases:\n")
	if !ok {
		t.Fatal("README shows no cases file")
	}
	block, _, _ = strings.Cut(block, "```")
	cases := writeFile(t, "cases.yaml", "cases:\n"+block)
	var stdout, stderr bytes.Buffer
	err = run(t.Context(), []string{"policy", "test", "-config", "../../config.example.yaml", "-cases", cases}, &stdout, &stderr)
	if err != nil || !strings.Contains(stdout.String(), "3 cases passed") {
		t.Errorf("README's cases with config.example.yaml: %v\n%s%s", err, stdout.String(), stderr.String())
	}
}

// bot policy test judges ask_human as the bot does: a question takes no
// approval count, so in a DM under a two-person rule it is asked; a case
// says the same.
func TestPolicyTestOfAQuestion(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "policy:\n  default: ask\n  rules:\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      min_approvals: 2\n")
	var stdout, stderr bytes.Buffer
	_ = run(t.Context(), []string{"policy", "test", "-config", cfg, "-user", "U024BE7LH", "-channel", "D0123456789", "ask_human", `{"question":"Which region?"}`}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "verdict:   ask") {
		t.Errorf("bot policy test of ask_human in a DM under a two-person rule:\n%s%s", stdout.String(), stderr.String())
	}
	cases := writeFile(t, "cases.yaml", "cases:\n  - tool: ask_human\n    args: {question: \"Which region\"}\n    user: U024BE7LH\n    channel: D0123456789\n    verdict: ask\n")
	stdout.Reset()
	if err := run(t.Context(), []string{"policy", "test", "-config", cfg, "-cases", cases}, &stdout, &stderr); err != nil {
		t.Errorf("a case of ask_human in a DM under a two-person rule: %v\n%s", err, stdout.String())
	}
}
