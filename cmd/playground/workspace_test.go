package main

import (
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/approvals"
)

// secrets/ is denied in any letter case: on a case-insensitive file
// system (macOS, Windows) Secrets/api-token.txt is the same file.
func TestDemoPolicyDeniesSecretsInAnyCase(t *testing.T) {
	p, err := approvals.ParseConfig(fmt.Appendf(nil, demoConfig, "/tmp/ws", "/tmp/commands"))
	if err != nil {
		t.Fatalf("the demo config: %v", err)
	}
	for _, tc := range []struct {
		tool, args string
		want       approvals.Action
		rule       string
	}{
		{"workspace_read", `{"path":"secrets/api-token.txt"}`, approvals.Deny, "secrets"},
		{"workspace_read", `{"path":"Secrets/api-token.txt"}`, approvals.Deny, "secrets"},
		{"workspace_read", `{"path":"SECRETS/x"}`, approvals.Deny, "secrets"},
		{"workspace_read", `{"path":"ſecrets/x"}`, approvals.Deny, "secrets"}, // ſ folds to s
		{"workspace_list", `{"path":"SeCrEtS"}`, approvals.Deny, "secrets"},
		{"workspace_write", `{"path":"Secrets/api-token.txt","content":"x"}`, approvals.Deny, "secrets"},
		{"workspace_write", `{"path":"SECRETS/x","content":"x"}`, approvals.Deny, "secrets"},
		{"workspace_delete", `{"path":"Secrets/api-token.txt"}`, approvals.Deny, "secrets"},
		// The rest of the workspace is as before.
		{"workspace_read", `{"path":"notes.md"}`, approvals.Allow, "reads"},
		{"workspace_read", `{"path":"tmp/secrets.txt"}`, approvals.Allow, "reads"},
		{"workspace_list", `{}`, approvals.Allow, "reads"},
		{"workspace_write", `{"path":"tmp/a.txt","content":"x"}`, approvals.Allow, "tmp-writes"},
		{"workspace_write", `{"path":"notes.md","content":"x"}`, approvals.Ask, "writes"},
	} {
		v := p.Evaluate(approvals.Input{Tool: tc.tool, Args: []byte(tc.args), User: userYou, Channel: channelOps})
		if v.Action != tc.want || v.RuleID != tc.rule {
			t.Errorf("%s %s: got %s by %q, want %s by %q", tc.tool, tc.args, v.Action, v.RuleID, tc.want, tc.rule)
		}
	}
}
