package botsetup

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/approvals"
)

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.yaml", "x-notes: {owner: platform}\nbuiltin_tools:\n  workspace: {root: "+filepath.Join(dir, "ws")+"}\npolicy:\n  rules:\n    - tool: workspace_read\n      verdict: allow\n")
	f, err := LoadFile("CONFIG_FILE", good)
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if f.Tools.Builtins.Workspace == nil || f.Tools.Builtins.Workspace.Root != filepath.Join(dir, "ws") {
		t.Errorf("workspace = %+v, want root %s", f.Tools.Builtins.Workspace, filepath.Join(dir, "ws"))
	}
	if v := f.Policy.Evaluate(approvals.Input{Tool: "workspace_read", Args: []byte(`{}`), User: "U1", Channel: "C1"}); v.Action != approvals.Allow {
		t.Errorf("workspace_read: %s, want the file's allow", v.Action)
	}
	// A trailing "---" starts no second document.
	if _, err := LoadFile("CONFIG_FILE", writeFile(t, dir, "trailing.yaml", "policy: {default: deny}\n---\n")); err != nil {
		t.Errorf("a file ending with ---: %v", err)
	}
	if data, _ := os.ReadFile(good); string(f.Data) != string(data) {
		t.Errorf("Data = %q, want the file's text", f.Data)
	}

	// No file: no tools, and every call asks.
	f, err = LoadFile("CONFIG_FILE", "")
	if err != nil {
		t.Fatalf("LoadFile(\"\"): %v", err)
	}
	if f.Data != nil || f.Tools.Builtins.Workspace != nil || len(f.Tools.Servers) != 0 {
		t.Errorf("no file: %+v, want no tools and no data", f)
	}
	if v := f.Policy.Evaluate(approvals.Input{Tool: "anything", Args: []byte(`{}`), User: "U1", Channel: "C1"}); v.Action != approvals.Ask {
		t.Errorf("no file: %s, want ask", v.Action)
	}
}

func TestLoadFileErrors(t *testing.T) {
	dir := t.TempDir()
	badYAML := writeFile(t, dir, "yaml.yaml", "policy: [\n")
	badCEL := writeFile(t, dir, "cel.yaml", "policy:\n  rules:\n    - tool: x\n      verdict: ask\n      when: 'args.x =='\n")
	badTools := writeFile(t, dir, "tools.yaml", "builtin_tools:\n  workspace:\n    root: "+dir+"\n    max_file_bytes: -1\n")
	misspelt := writeFile(t, dir, "misspelt.yaml", "builtin_tools: {}\npolcy:\n  default: deny\n")
	joined := writeFile(t, dir, "joined.yaml", "builtin_tools: {}\n---\npolicy:\n  default: deny\n")
	emptyFirst := writeFile(t, dir, "empty-first.yaml", "---\n---\npolicy:\n  default: deny\n")
	badSecond := writeFile(t, dir, "bad-second.yaml", "policy: {}\n---\npolicy: [\n")
	toolsTwice := writeFile(t, dir, "tools-twice.yaml", "builtin_tools: {ask_human: {}}\nbuiltin_tools: {workspace: {root: /tmp/w}}\n")
	policyTwice := writeFile(t, dir, "policy-twice.yaml", "policy: {default: deny}\nmcp_servers:\npolicy: {default: allow}\n")
	builtinTwice := writeFile(t, dir, "builtin-twice.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: /srv}\n  run_command: {allow: [cat], dir: /srv}\n")
	list := writeFile(t, dir, "list.yaml", "- policy: {default: deny}\n")
	scalar := writeFile(t, dir, "scalar.yaml", "policy\n")
	merged := writeFile(t, dir, "merged.yaml", "x-common: &common\n  builtin_tools: {ask_human: {}}\n  policy: {default: allow}\n<<: *common\n")
	tests := []struct {
		name, setting, path string
		want                []string
	}{
		{"missing", "CONFIG_FILE", filepath.Join(dir, "nope.yaml"), []string{"CONFIG_FILE: ", "nope.yaml"}},
		{"directory", "-config", dir, []string{"-config: " + dir + " is a directory, not a file"}},
		{"yaml syntax", "CONFIG_FILE", badYAML, []string{"config file " + badYAML + ": ", "line 1"}},
		{"cel syntax", "CONFIG_FILE", badCEL, []string{"config file " + badCEL + ": ", "rule 1", "line 5", "Syntax error"}},
		{"bad builtin tool", "CONFIG_FILE", badTools, []string{"config file " + badTools + ": ", "line 3", "max_file_bytes"}},
		{"misspelt section", "CONFIG_FILE", misspelt, []string{"config file " + misspelt + ": ", `unknown section "polcy" (line 2)`, "policy"}},
		{"two documents", "CONFIG_FILE", joined, []string{"config file " + joined + ": ", "more than one YAML document (document 2 starts on line 2)"}},
		{"an empty document first", "CONFIG_FILE", emptyFirst, []string{"more than one YAML document"}},
		{"a second document that does not parse", "CONFIG_FILE", badSecond, []string{"after the first YAML document", "line 3"}},
		{"a section twice", "CONFIG_FILE", toolsTwice, []string{"config file " + toolsTwice + ": builtin_tools (line 2): given twice (first on line 1)"}},
		{"the policy twice", "CONFIG_FILE", policyTwice, []string{"policy (line 3): given twice (first on line 1)"}},
		{"a built-in tool twice", "CONFIG_FILE", builtinTwice, []string{"builtin_tools.run_command (line 3): given twice (first on line 2)"}},
		{"a top-level merge key", "CONFIG_FILE", merged, []string{`merge key "<<" at the top level (line 4)`}},
		{"a list", "CONFIG_FILE", list, []string{"config file " + list + ": line 1: the file must be a mapping of its sections (mcp_servers, builtin_tools, policy), not a list"}},
		{"a single value", "CONFIG_FILE", scalar, []string{"config file " + scalar + ": line 1: the file must be a mapping of its sections (mcp_servers, builtin_tools, policy), not a single value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadFile(tt.setting, tt.path)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %T %v, want a *ConfigError", err, err)
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error %q is not on one line", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}
}

func TestOneLine(t *testing.T) {
	in := "rule 1: when: ERROR: <input>:1:8: Syntax error\n | args.x ==\n | .......^\nsecond line\n"
	if got, want := OneLine(in), "rule 1: when: ERROR: <input>:1:8: Syntax error; second line"; got != want {
		t.Errorf("OneLine = %q, want %q", got, want)
	}
	if got := OneLine("plain"); got != "plain" {
		t.Errorf("OneLine(plain) = %q", got)
	}
}
