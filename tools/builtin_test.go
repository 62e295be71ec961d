package tools

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

func allBuiltinsConfig(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(`
builtin_tools:
  ask_human: {}
  http_request: {allowed_hosts: [127.0.0.1]}
  run_command: {allow: [echo], dir: %q}
  workspace: {root: %q}
policy:
  default: deny
`, t.TempDir(), t.TempDir())
}

func TestBuiltins(t *testing.T) {
	cfg, err := ParseConfig([]byte(allBuiltinsConfig(t)))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	tools, err := Builtins(cfg)
	if err != nil {
		t.Fatalf("Builtins: %v", err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	want := "ask_human http_get http_request run_command workspace_list workspace_read workspace_write workspace_delete"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("Builtins: got %s, want %s", got, want)
	}

	// The schemas known offline are the tools' own.
	schemas := cfg.Builtins.Schemas()
	for _, tool := range tools {
		if string(schemas[tool.Name]) != string(tool.Schema) {
			t.Errorf("Schemas()[%s] = %s, want the tool's schema %s", tool.Name, schemas[tool.Name], tool.Schema)
		}
	}
	if len(schemas) != len(tools) {
		t.Errorf("Schemas() has %d tools, want %d", len(schemas), len(tools))
	}

	none, err := Builtins(Config{})
	if err != nil || len(none) != 0 {
		t.Errorf("Builtins of an empty config: got %d tools, %v; want none", len(none), err)
	}
}

func TestAskHuman(t *testing.T) {
	tool := AskHuman()
	if !tool.Human || tool.Handler != nil {
		t.Errorf("ask_human: got Human %v, handler set %v; want a human tool without handler", tool.Human, tool.Handler != nil)
	}
	reg := agent.NewRegistry()
	if err := reg.Register(tool); err != nil {
		t.Fatalf("Register: %v", err)
	}
	for _, tc := range []struct {
		args  string
		valid bool
	}{
		{`{"question": "Which cluster?"}`, true},
		{`{}`, false},
		{`{"question": ""}`, false},
		{`{"question": "q", "urgent": true}`, false},
	} {
		if err := reg.Validate("ask_human", json.RawMessage(tc.args)); (err == nil) != tc.valid {
			t.Errorf("Validate(ask_human, %s): got %v, want valid=%v", tc.args, err, tc.valid)
		}
	}
}

// TestPolicyDefaults checks that with no rule matching, the approvals
// policy allows the read-only built-ins and asks for the others.
func TestPolicyDefaults(t *testing.T) {
	data := allBuiltinsConfig(t)
	cfg, err := ParseConfig([]byte(data))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	policy, err := approvals.ParseConfig([]byte(data))
	if err != nil {
		t.Fatalf("approvals.ParseConfig: %v", err)
	}
	reg := agent.NewRegistry()
	m, err := Load(t.Context(), cfg, reg, nil)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	want := map[string]approvals.Action{
		"ask_human":        approvals.Ask,
		"http_get":         approvals.Allow,
		"http_request":     approvals.Ask,
		"run_command":      approvals.Ask,
		"workspace_list":   approvals.Allow,
		"workspace_read":   approvals.Allow,
		"workspace_write":  approvals.Ask,
		"workspace_delete": approvals.Ask,
	}
	tools := reg.List()
	if len(tools) != len(want) {
		t.Errorf("registered %d tools, want %d", len(tools), len(want))
	}
	for _, tool := range tools {
		v := policy.Evaluate(approvals.Input{Tool: tool.Name, Args: json.RawMessage(`{}`), Hints: tool.Annotations})
		if v.Action != want[tool.Name] {
			t.Errorf("verdict for %s (hints %+v): got %s (%s), want %s", tool.Name, tool.Annotations, v.Action, v.Reason, want[tool.Name])
		}
	}
}

func TestLoadErrors(t *testing.T) {
	reg := agent.NewRegistry()
	reg.Register(AskHuman())
	cfg := Config{Builtins: BuiltinConfig{AskHuman: &AskHumanConfig{}}}
	if _, err := Load(t.Context(), cfg, reg, nil); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("Load with ask_human already registered: got %v, want an already registered error", err)
	}
	cfg = Config{Builtins: BuiltinConfig{RunCommand: &CommandConfig{Allow: []string{"ls"}, Dir: filepath.Join(t.TempDir(), "nope")}}}
	if _, err := Load(t.Context(), cfg, agent.NewRegistry(), nil); err == nil || !strings.Contains(err.Error(), "run_command") {
		t.Errorf("Load with a missing run_command dir: got %v, want a run_command error", err)
	}
}

// cutWithin reports whether content, after prefix, says a call timed out
// after a duration in (0, bound]: the time left before the caller's
// deadline when the tool started, which a busy machine shortens by a few
// milliseconds, never the tool's own longer timeout.
func cutWithin(content, prefix string, bound time.Duration) bool {
	rest, ok := strings.CutPrefix(content, prefix+"timed out after ")
	if !ok {
		return false
	}
	end := strings.IndexAny(rest, ";\n")
	if end < 0 {
		end = len(rest)
	}
	d, err := time.ParseDuration(rest[:end])
	return err == nil && d > 0 && d <= bound
}
