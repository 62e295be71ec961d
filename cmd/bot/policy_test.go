package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/tools"
)

const testPolicy = `mcp_servers:
  - name: files
    command: ["./files-mcp"]
    env: {TOKEN: "${UNSET_IN_CI}"}
policy:
  default: deny
  rules:
    - id: read-files
      tool: "files__read_*"
      verdict: allow
    - tool: "files__delete_*"
      when: '!args.path.startsWith("/srv/scratch/tmp/")'
      verdict: ask
      approvers: ["U024BE7LH", "S0614TZR7"]
      four_eyes: true
      reason: Deleting outside tmp needs review
    - id: no-prod
      tool: "deploy"
      when: 'channel == "C0PROD"'
      verdict: deny
      reason: no deploys from the prod channel
    - tool: "deploy"
      verdict: ask
`

const badPolicy = `policy:
  rules:
    - tool: "a"
      verdict: allow
    - tool: "b"
      when: 'args.x +'
      verdict: ask
    - tool: "c"
      verdict: perhaps
`

// writeFile writes content to name in a temporary directory.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicyCommands(t *testing.T) {
	good := writeFile(t, "config.yaml", testPolicy)
	bad := writeFile(t, "bad.yaml", badPolicy)
	passing := writeFile(t, "cases.yaml", `cases:
  - name: reads are allowed
    tool: files__read_file
    args: {path: /etc/passwd}
    verdict: allow
    rule: read-files
  - tool: files__delete_file
    args: '{"path": "/srv/data/x"}'
    user: U1
    verdict: ask
    rule: rule-2
  - name: tmp deletes fall through
    tool: files__delete_file
    args: {path: /srv/scratch/tmp/x}
    annotations: {destructive: false}
    verdict: deny
    rule: default
  - name: prod deploy
    tool: deploy
    channel: C0PROD
    verdict: deny
`)
	failing := writeFile(t, "failing.yaml", `cases:
  - name: deploy allowed
    tool: deploy
    verdict: allow
  - name: unknown tool
    tool: other
    verdict: ask
  - name: read by the wrong rule
    tool: files__read_x
    verdict: allow
    rule: rule-9
`)
	badCases := writeFile(t, "badcases.yaml", "cases:\n  - tool: deploy\n    verdict: maybe\n")
	unknownKey := writeFile(t, "unknown.yaml", "cases:\n  - tool: deploy\n    verdit: allow\n")
	twoCaseDocs := writeFile(t, "two-docs.yaml", "cases:\n  - {tool: deploy, args: {}, verdict: ask}\n---\ncases:\n  - {tool: deploy, args: {}, verdict: allow}\n")
	twoConfigDocs := writeFile(t, "two-config-docs.yaml", "builtin_tools: {}\n---\npolicy: {default: deny}\n")
	misspelt := writeFile(t, "misspelt.yaml", "polcy:\n  default: deny\n")
	toolsTwice := writeFile(t, "tools-twice.yaml", "builtin_tools: {ask_human: {}}\nbuiltin_tools: {workspace: {root: /tmp/w}}\n")
	badTools := writeFile(t, "badtools.yaml", "mcp_servers:\n  - name: x\n    url: https://${MCP_HOST_UNSET_IN_CI}:${MCP_PORT_UNSET_IN_CI}/mcp\n    bogus: 1\nbuiltin_tools:\n  workspace: {root: /srv}\npolicy:\n  default: ask\n")
	badYAML := writeFile(t, "badyaml.yaml", "policy:\n  rules: [\n")
	longTimeout := writeFile(t, "longtimeout.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: "+t.TempDir()+", timeout: 10m}\n")
	// A workspace root that holds the config file, DATA_DIR, or the
	// default ./data.
	reachDir := t.TempDir()
	reachConfig := filepath.Join(reachDir, "reach.yaml")
	if err := os.WriteFile(reachConfig, []byte("builtin_tools:\n  workspace: {root: "+reachDir+"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wsDir := t.TempDir()
	reachData := writeFile(t, "reach-data.yaml", "builtin_tools:\n  workspace: {root: "+wsDir+"}\n")
	reachDefault := writeFile(t, "reach-default.yaml", "builtin_tools:\n  workspace: {root: .}\n")
	goodTools := writeFile(t, "goodtools.yaml", "mcp_servers:\n  - name: x\n    url: https://${MCP_HOST_UNSET_IN_CI}:${MCP_PORT_UNSET_IN_CI}/mcp\n    headers: {Authorization: \"Bearer ${MCP_TOKEN_UNSET_IN_CI}\"}\n  - name: y\n    url: ${MCP_URL_UNSET_IN_CI}\n  - name: z\n    url: ${MCP_BASE_UNSET_IN_CI}/mcp\n  - name: w\n    url: ${MCP_SCHEME_UNSET_IN_CI}://mcp.internal/mcp\npolicy:\n  default: ask\n")

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		code    int
		want    []string // substrings of stdout
		wantErr string   // substring of the error, for exit status 1 with a message
		once    string   // a substring stdout has exactly once
	}{
		{
			name: "check sound",
			args: []string{"check", "-config", good},
			want: []string{
				"  1  id=read-files tool=files__read_* verdict=allow\n",
				"  2  id=rule-2 tool=files__delete_* verdict=ask when='!args.path.startsWith(\"/srv/scratch/tmp/\")' approvers=U024BE7LH,S0614TZR7 four_eyes=true reason='Deleting outside tmp needs review'\n",
				"  3  id=no-prod",
				"  4  id=rule-4 tool=deploy verdict=ask\n",
				"then the default: deny",
				"ok\t" + good + ": 4 rules\n",
			},
		},
		{
			name: "check from CONFIG_FILE",
			args: []string{"check"},
			env:  map[string]string{"CONFIG_FILE": good},
			want: []string{"ok\t" + good + ": 4 rules\n"},
		},
		{
			name: "check every problem",
			args: []string{"check", "-config", bad},
			code: 1,
			want: []string{
				bad + ": policy rule 2 (line 5, id rule-2): when (line 6): ERROR: <input>:1:9: Syntax error",
				bad + ": policy rule 3 (line 8, id rule-3): verdict (line 9): unknown verdict \"perhaps\"",
				"FAIL\t" + bad + ": 2 problems\n",
			},
		},
		{
			name: "check the tools the bot would refuse",
			args: []string{"check", "-config", badTools},
			code: 1,
			want: []string{badTools + `: parse config: line 4: unknown key "bogus" in mcp server`, "FAIL\t" + badTools + ": 1 problem\n"},
		},
		{
			name: "check tools whose secrets are not set here",
			args: []string{"check", "-config", goodTools},
			want: []string{"ok\t" + goodTools + ": 0 rules\n"},
		},
		{
			name: "check yaml that does not parse",
			args: []string{"check", "-config", badYAML},
			code: 1,
			want: []string{badYAML + ": parse config: yaml: line ", "FAIL\t" + badYAML + ": 1 problem\n"},
			once: "parse config",
		},
		{
			name: "check a tool timeout past the default TOOL_TIMEOUT",
			args: []string{"check", "-config", longTimeout},
			code: 1,
			want: []string{longTimeout + ": TOOL_TIMEOUT is not set here, so its default 2m counts; set it as the bot has it: builtin_tools.run_command.timeout (10m0s) is longer than TOOL_TIMEOUT (2m0s)", "FAIL\t" + longTimeout + ": 1 problem\n"},
		},
		{
			name: "check a tool timeout past TOOL_TIMEOUT",
			args: []string{"check", "-config", longTimeout},
			env:  map[string]string{"TOOL_TIMEOUT": "5m"},
			code: 1,
			want: []string{longTimeout + ": builtin_tools.run_command.timeout (10m0s) is longer than TOOL_TIMEOUT (5m0s)"},
		},
		{
			name: "check a tool timeout within TOOL_TIMEOUT",
			args: []string{"check", "-config", longTimeout},
			env:  map[string]string{"TOOL_TIMEOUT": "15m"},
			want: []string{"ok\t" + longTimeout + ": 0 rules\n"},
		},
		{
			name: "check a workspace that holds the config file",
			args: []string{"check", "-config", reachConfig},
			code: 1,
			want: []string{reachConfig + ": builtin_tools.workspace.root " + reachDir + " holds CONFIG_FILE " + reachConfig + ": ", "FAIL\t" + reachConfig + ": 1 problem\n"},
		},
		{
			name: "check a workspace that holds DATA_DIR",
			args: []string{"check", "-config", reachData},
			env:  map[string]string{"DATA_DIR": filepath.Join(wsDir, "data")},
			code: 1,
			want: []string{reachData + ": builtin_tools.workspace.root " + wsDir + " holds DATA_DIR " + filepath.Join(wsDir, "data") + ": "},
		},
		{
			name: "check a workspace that holds DATA_DIR, with Redis",
			args: []string{"check", "-config", reachData},
			env:  map[string]string{"DATA_DIR": filepath.Join(wsDir, "data"), "REDIS_URL": "redis://127.0.0.1:6379/0"},
			want: []string{"ok\t" + reachData + ": 0 rules\n"},
		},
		{
			name: "check a workspace that holds the default DATA_DIR",
			args: []string{"check", "-config", reachDefault},
			code: 1,
			want: []string{reachDefault + ": DATA_DIR is not set here, so its default ./data counts; set it as the bot has it: builtin_tools.workspace.root "},
		},
		{
			name: "check tools whose secrets are empty here",
			args: []string{"check", "-config", goodTools},
			env:  map[string]string{"MCP_TOKEN_UNSET_IN_CI": "", "MCP_URL_UNSET_IN_CI": ""},
			want: []string{"ok\t" + goodTools + ": 0 rules\n"},
		},
		{
			name: "check a misspelt section",
			args: []string{"check", "-config", misspelt},
			code: 1,
			want: []string{misspelt + ": unknown section \"polcy\" (line 1): a config file has only mcp_servers, builtin_tools, policy\n", "FAIL\t" + misspelt + ": 1 problem\n"},
		},
		{
			name: "check a section given twice",
			args: []string{"check", "-config", toolsTwice},
			code: 1,
			want: []string{toolsTwice + ": builtin_tools (line 2): given twice (first on line 1)\n", "FAIL\t" + toolsTwice + ": 1 problem\n"},
		},
		{name: "test a misspelt section", args: []string{"test", "-config", misspelt, "a", "{}"}, code: 1, wantErr: `unknown section "polcy"`},
		{name: "check no file", args: []string{"check"}, code: 1, wantErr: "no config file: give -config FILE or set CONFIG_FILE"},
		{name: "check missing file", args: []string{"check", "-config", filepath.Join(t.TempDir(), "none.yaml")}, code: 1, wantErr: "read config file"},
		{name: "check extra argument", args: []string{"check", "-config", good, "x"}, code: 1, wantErr: `unexpected argument "x"`},
		{
			name: "test allow",
			args: []string{"test", "-config", good, "files__read_file", `{"path": "/a"}`},
			want: []string{"verdict:   allow\n", "rule:      read-files\n"},
		},
		{
			name: "test ask with approvers, flags after the arguments",
			args: []string{"test", "-config", good, "files__delete_file", `{"path": "/srv/data"}`, "-user", "U1", "-channel", "C1"},
			code: 3,
			want: []string{"verdict:   ask\n", "rule:      rule-2\n", "reason:    Deleting outside tmp needs review\n", "approvers: U024BE7LH, S0614TZR7 (four eyes: not the requester)\n"},
		},
		{
			name: "test deny by channel",
			args: []string{"test", "-channel", "C0PROD", "-config", good, "deploy", `{}`},
			code: 4,
			want: []string{"verdict:   deny\n", "rule:      no-prod\n", "reason:    no deploys from the prod channel\n"},
		},
		{
			name: "test falls through to annotations",
			args: []string{"test", "-config", good, "other__tool", `{}`},
			code: 3,
			want: []string{"verdict:   ask\n", "rule:      annotations\n", "approvers: anyone in the channel\n", "not known offline"},
		},
		{
			name: "test fail-closed condition",
			args: []string{"test", "-config", good, "files__delete_file", `{"other": 1}`},
			code: 3,
			want: []string{"verdict:   ask\n", "rule:      rule-2\n", "could not be evaluated", "problem:   no such key"},
		},
		{name: "test bad json", args: []string{"test", "-config", good, "deploy", `{"a":`}, code: 1, wantErr: "arguments: want a JSON object"},
		{name: "test json not an object", args: []string{"test", "-config", good, "deploy", `[1]`}, code: 1, wantErr: "arguments: want a JSON object"},
		{name: "test a key given twice", args: []string{"test", "-config", good, "deploy", `{"env": "dev", "env": "prod"}`}, code: 1, wantErr: `arguments: want a JSON object such as '{"path": "/tmp/a"}', as the bot takes it: key "env" given twice`},
		{name: "test keys that differ only by case", args: []string{"test", "-config", good, "deploy", `{"env": "dev", "Env": "prod"}`}, code: 1, wantErr: `keys "env" and "Env" differ only by case`},
		{
			name: "test a number the policy cannot see exactly",
			args: []string{"test", "-config", good, "files__delete_file", `{"path": "/srv/data/x", "size": 1e400}`},
			code: 3,
			want: []string{"verdict:   ask\n", "rule:      rule-2\n", "could not be evaluated", "problem:   the number 1e400 is out of the range the policy can judge"},
		},
		{name: "test missing json", args: []string{"test", "-config", good, "deploy"}, code: 1, wantErr: "want TOOL 'JSON'"},
		{name: "test bad policy", args: []string{"test", "-config", bad, "a", "{}"}, code: 1, wantErr: "run bot policy check for every problem"},
		{name: "test unknown flag", args: []string{"test", "-config", good, "-usr", "U1", "a", "{}"}, code: 1, wantErr: "flag provided but not defined: -usr"},
		{
			name: "cases pass",
			args: []string{"test", "-config", good, "-cases", passing},
			want: []string{
				"ok  \treads are allowed: allow by rule read-files\n",
				"ok  \tfiles__delete_file {\"path\": \"/srv/data/x\"}: ask by rule rule-2\n",
				"ok  \ttmp deletes fall through: deny by rule default\n",
				"ok  \tprod deploy: deny by rule no-prod\n",
				"ok  \t" + passing + ": 4 cases passed\n",
			},
		},
		{
			name: "cases fail",
			args: []string{"test", "-config", good, "-cases", failing},
			code: 1,
			want: []string{
				"FAIL\tdeploy allowed: got ask by rule rule-4, want allow\n",
				"ok  \tunknown tool: ask by rule annotations (no rule matched; MCP annotations are not known offline: give the case annotations)\n",
				"FAIL\tread by the wrong rule: got allow by rule read-files, want allow by rule rule-9\n",
				"FAIL\t" + failing + ": 2 of 3 cases failed\n",
			},
		},
		{name: "cases bad verdict", args: []string{"test", "-config", good, "-cases", badCases}, code: 1, wantErr: `case 1: verdict "maybe"`},
		{name: "cases in two documents", args: []string{"test", "-config", good, "-cases", twoCaseDocs}, code: 1, wantErr: "more than one YAML document (document 2 starts on line 3)"},
		{name: "check a config of two documents", args: []string{"check", "-config", twoConfigDocs}, code: 1, want: []string{"more than one YAML document", "FAIL\t" + twoConfigDocs + ": 1 problem\n"}},
		{name: "cases unknown key", args: []string{"test", "-config", good, "-cases", unknownKey}, code: 1, wantErr: `line 3: unknown key "verdit" in a case (want name, tool, args, user, channel, annotations, verdict, rule, fail_closed)`},
		{name: "cases and a call", args: []string{"test", "-config", good, "-cases", passing, "deploy", "{}"}, code: 1, wantErr: "not both"},
		{name: "no command", args: nil, code: 1, wantErr: "want a command"},
		{name: "unknown command", args: []string{"lint"}, code: 1, wantErr: `unknown command "lint"`},
		{name: "help", args: []string{"-h"}, want: []string{"bot policy check [-config FILE]", "Exit 0 allow, 3 ask, 4 deny, 1 error"}},
		{name: "help of a command", args: []string{"test", "-h"}, want: []string{"Cases file:"}, once: "Usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Only the policy file counts: no Slack token, model or store.
			setEnv(t, tt.env)
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), append([]string{"policy"}, tt.args...), &stdout, &stderr)
			if code := exitCode(err); code != tt.code {
				t.Errorf("exit status %d (err %v), want %d\nstdout:\n%s", code, err, tt.code, stdout.String())
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tt.wantErr)
				}
			} else if err != nil && tt.code == 0 {
				t.Errorf("error %v, want none", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout does not contain %q:\n%s", w, stdout.String())
				}
			}
			if tt.once != "" && strings.Count(stdout.String(), tt.once) != 1 {
				t.Errorf("stdout has %q %d times, want once:\n%s", tt.once, strings.Count(stdout.String(), tt.once), stdout.String())
			}
			if tt.wantErr != "" && strings.Contains(stdout.String(), "Usage:") {
				t.Errorf("an error printed the usage:\n%s", stdout.String())
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr: %q, want nothing", stderr.String())
			}
		})
	}
}

// A case is no test of a rule whose condition could not be evaluated (a
// typo in an argument's name): its verdict, failed closed, fails the case
// unless the case expects that (fail_closed: true), and the line says why,
// whether the case passes or fails.
func TestCasesFailClosedVerdictsAreNoPass(t *testing.T) {
	config := writeFile(t, "config.yaml", `policy:
  default: allow
  rules:
    - id: prod-deploys
      tool: deploy
      when: args.enviroment == "prod"
      verdict: ask
    - id: tmp-writes
      tool: write
      when: args.pth.startsWith("/tmp/")
      verdict: allow
`)
	cases := writeFile(t, "cases.yaml", `cases:
  - name: prod deploys ask
    tool: deploy
    args: {environment: prod}
    verdict: ask
    rule: prod-deploys
  - name: tmp writes allowed
    tool: write
    args: {path: /tmp/x}
    verdict: allow
  - name: a typo fails closed
    tool: deploy
    args: {environment: prod}
    verdict: ask
    fail_closed: true
  - name: a sound condition is no failure
    tool: write
    args: {pth: /tmp/x}
    verdict: allow
    fail_closed: true
`)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"policy", "test", "-config", config, "-cases", cases}, &stdout, &stderr)
	if code := exitCode(err); code != 1 {
		t.Errorf("exit code %d (%v), want 1\nstdout:\n%s", code, err, stdout.String())
	}
	for _, w := range []string{
		"FAIL\tprod deploys ask: got ask by rule prod-deploys, failed closed, want ask by rule prod-deploys (rule prod-deploys could not be evaluated",
		"no such key: enviroment",
		"FAIL\ttmp writes allowed: got ask by rule tmp-writes, failed closed, want allow (rule tmp-writes could not be evaluated",
		"ok  \ta typo fails closed: ask by rule prod-deploys (rule prod-deploys could not be evaluated",
		"FAIL\ta sound condition is no failure: got allow by rule tmp-writes, not failed closed, want allow\n",
		"FAIL\t" + cases + ": 3 of 4 cases failed\n",
	} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("stdout does not contain %q:\n%s", w, stdout.String())
		}
	}
}

// A deny the policy gives as written, with no condition failing (four
// eyes leaves the only approver, the requester, unable to approve), is a
// judgement like any other: its case needs no fail_closed.
func TestCaseOfAnUndecidableDenyNeedsNoFailClosed(t *testing.T) {
	config := writeFile(t, "config.yaml", "policy:\n  default: allow\n  rules:\n    - id: prod-deploys\n      tool: deploy\n      verdict: ask\n      approvers: [U1]\n      four_eyes: true\n")
	cases := writeFile(t, "cases.yaml", "cases:\n  - name: the only approver cannot approve their own deploy\n    tool: deploy\n    args: {}\n    user: U1\n    channel: C1\n    verdict: deny\n    rule: prod-deploys\n")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"policy", "test", "-config", config, "-cases", cases}, &stdout, &stderr)
	if code := exitCode(err); code != 0 {
		t.Errorf("exit code %d (%v), want 0\nstdout:\n%s", code, err, stdout.String())
	}
}

// Mapping-form args reach the policy with their numbers as written, as the
// model's JSON does: 5.0000000000000001 is not 5, and an integer past what
// a float holds is not rounded into one, so conditions on them fail closed.
func TestCasesKeepNumbersAsWritten(t *testing.T) {
	config := writeFile(t, "config.yaml", `policy:
  default: ask
  rules:
    - id: five
      tool: count
      when: args.n == 5
      verdict: allow
    - id: positive
      tool: size
      when: args.n > 0
      verdict: allow
`)
	cases := writeFile(t, "cases.yaml", `cases:
  - name: five
    tool: count
    args: {n: 5}
    verdict: allow
    rule: five
  - name: nearly five
    tool: count
    args: {n: 5.0000000000000001}
    verdict: ask
    rule: five
    fail_closed: true
  - name: big integer
    tool: size
    args: {n: 12345678901234567890123}
    verdict: ask
    rule: positive
    fail_closed: true
`)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"policy", "test", "-config", config, "-cases", cases}, &stdout, &stderr)
	if err != nil {
		t.Errorf("error %v, want none\nstdout:\n%s", err, stdout.String())
	}
	for _, w := range []string{
		"ok  \tfive: allow by rule five\n",
		"ok  \tnearly five: ask by rule five (rule five could not be evaluated",
		"ok  \tbig integer: ask by rule positive (rule positive could not be evaluated",
		"ok  \t" + cases + ": 3 cases passed\n",
	} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("stdout does not contain %q:\n%s", w, stdout.String())
		}
	}
}

func TestCaseArgs(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string // the args value
		want    string // canonical arguments
		shown   string // the name of the case; empty: not checked
		wantErr string
	}{
		{name: "number past float precision", yaml: "{n: 5.0000000000000001}", want: `{"n":5.0000000000000001}`},
		{name: "integer past uint64", yaml: "{n: 12345678901234567890123}", want: `{"n":12345678901234567890123}`},
		{name: "numbers as written", yaml: "{a: 1.0, b: -0, c: 1e3, d: -2.5E-3}", want: `{"a":1.0,"b":-0,"c":1e3,"d":-2.5E-3}`},
		{name: "keys in order for the name", yaml: "{z: 1, a: 2}", want: `{"a":2,"z":1}`, shown: `{"z":1,"a":2}`},
		{
			name: "scalars by their tags",
			yaml: "{s: '5', t: 2024-01-02, b: true, f: False, z: ~, e: , l: [1, x, null], m: {k: <a&b>}}",
			want: `{"b":true,"e":null,"f":false,"l":[1,"x",null],"m":{"k":"<a&b>"},"s":"5","t":"2024-01-02","z":null}`,
		},
		{name: "explicit tags", yaml: "{i: !!int 7, s: !!str 7, f: !!float '2.5'}", want: `{"f":2.5,"i":7,"s":"7"}`},
		{name: "anchors and aliases", yaml: "{a: &x {k: 1}, b: *x, c: [*x]}", want: `{"a":{"k":1},"b":{"k":1},"c":[{"k":1}]}`},
		{name: "merge keys", yaml: "{a: &x {k: 1, j: 2}, b: &y {k: 3, h: 4}, c: {<<: [*x, *y], j: 5}}", want: `{"a":{"j":2,"k":1},"b":{"h":4,"k":3},"c":{"h":4,"j":5,"k":1}}`},
		{name: "json string", yaml: `'{"n": 5.0000000000000001}'`, want: `{"n":5.0000000000000001}`},
		{name: "none", yaml: "", want: `{}`},
		{name: "hex", yaml: "{n: 0x1F}", wantErr: "line 1: 0x1F is a YAML number but not a JSON one"},
		{name: "underscores", yaml: "{n: 1_000}", wantErr: "1_000 is a YAML number"},
		{name: "plus sign", yaml: "{n: +5}", wantErr: "+5 is a YAML number"},
		{name: "leading zero", yaml: "{n: 010}", wantErr: "010 is a YAML number"},
		{name: "bare fraction", yaml: "{n: .5}", wantErr: ".5 is a YAML number"},
		{name: "infinity", yaml: "{n: [1, .inf]}", wantErr: ".inf is a YAML number"},
		{name: "not a number", yaml: "{n: .nan}", wantErr: ".nan is a YAML number"},
		{name: "integer key", yaml: "{1: a}", wantErr: "line 1: key 1 is not a string (!!int)"},
		{name: "null key", yaml: "{a: {~: b}}", wantErr: "key ~ is not a string (!!null)"},
		{name: "binary", yaml: "{b: !!binary aGk=}", wantErr: "a !!binary value has no JSON form"},
		{name: "key twice", yaml: "{a: 1, a: 2}", wantErr: `mapping key "a" already defined`},
		{name: "not an object", yaml: "[1]", wantErr: "want a mapping or a JSON object string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc struct {
				Args yaml.Node `yaml:"args"`
			}
			if err := yaml.Unmarshal([]byte("args: "+tt.yaml+"\n"), &doc); err != nil {
				t.Fatal(err)
			}
			args, shown, err := caseArgs(&doc.Args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("caseArgs(%s): got %s, error %v, want an error containing %q", tt.yaml, args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("caseArgs(%s): %v", tt.yaml, err)
			}
			if string(args) != tt.want {
				t.Errorf("caseArgs(%s) = %s, want %s", tt.yaml, args, tt.want)
			}
			if tt.shown != "" && shown != tt.shown {
				t.Errorf("caseArgs(%s) names the case %s, want %s", tt.yaml, shown, tt.shown)
			}
		})
	}
}

// An error in mapping-form args names the case and the line.
func TestCasesRefuseYAMLOnlyNumbers(t *testing.T) {
	config := writeFile(t, "config.yaml", "policy:\n  default: ask\n")
	cases := writeFile(t, "cases.yaml", "cases:\n  - tool: count\n    args: {n: 1}\n    verdict: ask\n  - tool: count\n    args:\n      n: 0x1F\n    verdict: ask\n")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"policy", "test", "-config", config, "-cases", cases}, &stdout, &stderr)
	want := "cases file " + cases + ": case 2: args: line 7: 0x1F is a YAML number but not a JSON one"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want one containing %q", err, want)
	}
}

// A call for no tool, or from a requester or channel given by name rather
// than id, can never be one the bot judges: `bot policy test` refuses it
// (exit 1) instead of printing a verdict no call would get.
func TestPolicyTestRefusesImpossibleCalls(t *testing.T) {
	good := writeFile(t, "config.yaml", testPolicy)
	casesWith := func(field string) string {
		return writeFile(t, "cases.yaml", "cases:\n  - tool: deploy\n    "+field+"\n    verdict: ask\n")
	}
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"empty tool", []string{"", "{}"}, "TOOL is empty"},
		{"blank tool", []string{" ", "{}"}, "TOOL is empty"},
		{"user by name", []string{"-user", "bob", "deploy", "{}"}, `-user: "bob" is not a Slack user id (U… or W…`},
		{"user in lower case", []string{"-user", "u024be7lh", "deploy", "{}"}, `-user: "u024be7lh" is not a Slack user id`},
		{"channel by name", []string{"-channel", "#ops", "deploy", "{}"}, `-channel: "#ops" is not a Slack channel id (C…, G…, or D… for a DM`},
		{"channel a user", []string{"-channel", "U024BE7LH", "deploy", "{}"}, `-channel: "U024BE7LH" is not a Slack channel id`},
		{"case user by name", []string{"-cases", casesWith("user: bob")}, `case 1: user: "bob" is not a Slack user id`},
		{"case channel by name", []string{"-cases", casesWith("channel: '#ops'")}, `case 1: channel: "#ops" is not a Slack channel id`},
		{"case blank tool", []string{"-cases", writeFile(t, "blank.yaml", "cases:\n  - {tool: ' ', verdict: ask}\n")}, "case 1: tool is missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout bytes.Buffer
			err := run(t.Context(), append([]string{"policy", "test", "-config", good}, tc.args...), &stdout, io.Discard)
			if code := exitCode(err); code != 1 || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("exit status %d, error %v; want 1 and an error containing %q\nstdout:\n%s", code, err, tc.wantErr, stdout.String())
			}
			if strings.Contains(stdout.String(), "verdict:") {
				t.Errorf("a verdict was printed:\n%s", stdout.String())
			}
		})
	}
	// Ids the bot sees are taken: a W… user (Enterprise Grid), a private
	// channel's G… and a DM's D….
	for _, args := range [][]string{
		{"-user", "W012A3CDE", "-channel", "G0123ABC", "deploy", "{}"},
		{"-channel", "D0123ABC", "deploy", "{}"},
	} {
		var stdout bytes.Buffer
		err := run(t.Context(), append([]string{"policy", "test", "-config", good}, args...), &stdout, io.Discard)
		if code := exitCode(err); code != 3 {
			t.Errorf("%v: exit status %d (err %v), want 3 (ask)", args, code, err)
		}
	}
}

// A config file whose top level is a list, and a cases file with a key no
// case has, are each one problem, said on one line in the file's terms.
func TestPolicyErrorsOnOneLine(t *testing.T) {
	list := writeFile(t, "list.yaml", "- policy: {default: deny}\n")
	good := writeFile(t, "config.yaml", testPolicy)
	misspelt := writeFile(t, "cases.yaml", "cases:\n  - tool: deploy\n    verdict: ask\n    rul: rule-4\n    annotations: {readonly: true}\n")
	topLevel := writeFile(t, "top.yaml", "case:\n  - {tool: deploy, verdict: ask}\n")

	var stdout bytes.Buffer
	err := run(t.Context(), []string{"policy", "check", "-config", list}, &stdout, io.Discard)
	if exitCode(err) != 1 {
		t.Errorf("check a list: exit status %d, want 1", exitCode(err))
	}
	want := list + ": line 1: the file must be a mapping of its sections (mcp_servers, builtin_tools, policy), not a list\nFAIL\t" + list + ": 1 problem\n"
	if stdout.String() != want {
		t.Errorf("check a list printed:\n%s\nwant:\n%s", stdout.String(), want)
	}

	for _, tc := range []struct{ file, want string }{
		{misspelt, `cases file ` + misspelt + `: line 4: unknown key "rul" in a case (want name, tool, args, user, channel, annotations, verdict, rule, fail_closed); line 5: unknown key "readonly" in annotations (want read_only, destructive)`},
		{topLevel, `cases file ` + topLevel + `: line 1: unknown key "case" at the top level (want cases)`},
	} {
		err := run(t.Context(), []string{"policy", "test", "-config", good, "-cases", tc.file}, io.Discard, io.Discard)
		if err == nil || err.Error() != tc.want {
			t.Errorf("cases error:\n%v\nwant:\n%s", err, tc.want)
		}
	}
}

// `policy check` notes the rules no call can reach: one after a rule with
// no condition that matches every tool it does, one for an MCP server that
// is not configured (a typo), one naming a built-in tool that is not
// enabled; the file is sound all the same.
func TestPolicyCheckNotesRulesThatNeverApply(t *testing.T) {
	root := t.TempDir()
	cfg := writeFile(t, "config.yaml", `mcp_servers:
  - name: github
    url: https://mcp.example/github
builtin_tools:
  workspace:
    root: `+root+`
policy:
  rules:
    - id: all-workspace
      tool: workspace_*
      verdict: allow
    - id: delete-needs-two
      tool: workspace_delete
      verdict: ask
      four_eyes: true
    - id: merges
      tool: gihub__merge_*
      verdict: ask
    - id: write-typo
      tool: worksapce_write
      verdict: ask
    - id: guarded
      tool: workspace_read
      when: 'args.path.startsWith("secrets/")'
      verdict: deny
    - id: gh
      tool: github__merge_*
      verdict: ask
`)
	var stdout bytes.Buffer
	if err := run(t.Context(), []string{"policy", "check", "-config", cfg}, &stdout, io.Discard); err != nil {
		t.Fatalf("check: %v\n%s", err, stdout.String())
	}
	var notes []string
	for line := range strings.Lines(stdout.String()) {
		if strings.HasPrefix(line, "note: ") {
			notes = append(notes, strings.Fields(line)[2])
		}
	}
	if want := []string{"delete-needs-two", "guarded", "merges", "write-typo"}; !slices.Equal(notes, want) {
		t.Errorf("notes on rules %q; want %q:\n%s", notes, want, stdout.String())
	}
}

// An ask whose calls expire before their first reminder gets a note,
// which says when it holds by a default that is not set here; a bad
// APPROVAL_TTL or REMINDER_AFTER is a problem, as the bot refuses it.
func TestPolicyCheckNotesRulesNeverReminded(t *testing.T) {
	cfg := writeFile(t, "config.yaml", `mcp_servers:
  - name: ops
    url: https://mcp.example/ops
policy:
  rules:
    - id: short
      tool: ops__deploy
      verdict: ask
      ttl: 30m
    - id: late
      tool: ops__restart
      verdict: ask
      remind_after: 100h
    - id: fine
      tool: ops__rollback
      verdict: ask
      ttl: 2h
      remind_after: 90m
    - id: defaults
      tool: ops__scale
      verdict: ask
    - id: allowed
      tool: ops__read
      verdict: allow
`)
	const (
		short = "note: rule short (tool ops__deploy) never reminds its approvers: its calls expire after 30m (its ttl), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl"
		late  = "note: rule late (tool ops__restart) never reminds its approvers: its calls expire after 72h (APPROVAL_TTL), no later than the first reminder would come, after 100h (its remind_after); give it a remind_after shorter than the ttl"
	)
	for _, tt := range []struct {
		name    string
		env     map[string]string
		want    []string // the note lines, or the problem
		problem bool
	}{
		{
			name: "defaults",
			want: []string{
				short + "; REMINDER_AFTER is not set here, so its default 1h counts: set it as the bot has it",
				late + "; APPROVAL_TTL is not set here, so its default 72h counts: set it as the bot has it",
			},
		},
		{
			name: "set here",
			env:  map[string]string{"APPROVAL_TTL": "72h", "REMINDER_AFTER": "1h"},
			want: []string{short, late},
		},
		{
			name: "reminders off",
			env:  map[string]string{"APPROVAL_TTL": "72h", "REMINDER_AFTER": "0"},
			want: []string{late},
		},
		{
			name: "a short APPROVAL_TTL",
			env:  map[string]string{"APPROVAL_TTL": "1h", "REMINDER_AFTER": "1h"},
			want: []string{
				short,
				"note: rule late (tool ops__restart) never reminds its approvers: its calls expire after 1h (APPROVAL_TTL), no later than the first reminder would come, after 100h (its remind_after); give it a remind_after shorter than the ttl",
				"note: rule defaults (tool ops__scale) never reminds its approvers: its calls expire after 1h (APPROVAL_TTL), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl",
			},
		},
		{
			name:    "a bad APPROVAL_TTL",
			env:     map[string]string{"APPROVAL_TTL": "3d"},
			want:    []string{cfg + `: APPROVAL_TTL: "3d" is not a positive duration of at most 672h`},
			problem: true,
		},
		{
			name:    "a negative REMINDER_AFTER",
			env:     map[string]string{"REMINDER_AFTER": "-1h"},
			want:    []string{cfg + `: REMINDER_AFTER: "-1h" is not a duration of zero or more (0 turns reminders off)`},
			problem: true,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			setEnv(t, tt.env)
			var stdout bytes.Buffer
			err := run(t.Context(), []string{"policy", "check", "-config", cfg}, &stdout, io.Discard)
			var got []string
			for line := range strings.Lines(stdout.String()) {
				if strings.HasPrefix(line, "note: ") || strings.HasPrefix(line, cfg+": ") {
					got = append(got, strings.TrimSuffix(line, "\n"))
				}
			}
			if tt.problem != (exitCode(err) == 1) {
				t.Errorf("exit status %d (err %v), want a problem: %v\n%s", exitCode(err), err, tt.problem, stdout.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got\n%s\nwant\n%s\nstdout:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"), stdout.String())
			}
		})
	}
}

// bot policy check judges APPROVAL_TTL, REMINDER_AFTER and TOOL_TIMEOUT
// as the bot does: set but empty, the bot refuses them (an empty duration),
// and so does the check, rather than taking their defaults.
func TestPolicyCheckTakesEmptySettingsAsTheBotDoes(t *testing.T) {
	for _, name := range []string{"APPROVAL_TTL", "REMINDER_AFTER", "TOOL_TIMEOUT"} {
		t.Run(name, func(t *testing.T) {
			env := validEnv(t)
			env[name] = ""
			setEnv(t, env)
			_, cfgErr := loadConfig()
			_, _, defaultsErr := approvalDefaults()
			checkErr := errors.Join(defaultsErr, checkToolTimeouts(tools.BuiltinConfig{}))
			if cfgErr == nil || checkErr == nil {
				t.Errorf("%s set but empty: the bot's configuration says %v, bot policy check says %v; want both refused", name, cfgErr, checkErr)
			}
		})
	}
}

// A rule whose condition reads an argument none of its built-in tools
// takes (a typo: a deny guarded by has(args.pth) never denies) gets a
// note; one reading the tools' own arguments, or a tool of an MCP server
// whose tools are not known offline, gets none.
func TestPolicyCheckNotesArgumentsNoToolTakes(t *testing.T) {
	config := writeFile(t, "config.yaml", `mcp_servers:
  - name: github
    url: https://mcp.example/mcp
builtin_tools:
  workspace: {root: /srv/workspace}
policy:
  default: ask
  rules:
    - id: no-secrets
      tool: "workspace_*"
      when: 'has(args.pth) && args.pth.startsWith(".env")'
      verdict: deny
    - id: read-workspace
      tool: workspace_read
      when: 'args.path.startsWith("notes/")'
      verdict: allow
    - id: github-prs
      tool: github__create_pull_request
      when: 'args.draftt == true'
      verdict: allow
`)
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), []string{"policy", "check", "-config", config}, &stdout, &stderr); err != nil {
		t.Fatalf("policy check: %v\n%s", err, stdout.String())
	}
	want := "note: rule no-secrets reads args.pth, which none of the tools it matches takes (workspace_delete, workspace_list, workspace_read, workspace_write)"
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("stdout does not contain %q:\n%s", want, stdout.String())
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(line, "note:") && (strings.Contains(line, "args.path") || strings.Contains(line, "args.draftt")) {
			t.Errorf("a note on an argument the tools may take: %s", line)
		}
	}
}
