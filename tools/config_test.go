package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseConfig(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_TOKEN", "tok")
	t.Setenv("TOOLGATE_TEST_ROOT", "/srv/files")
	data := `
mcp_servers:
  - name: files
    command: ["./files-mcp", "--root", "${TOOLGATE_TEST_ROOT}"]
    env: {LOG: "debug-${TOOLGATE_TEST_TOKEN}"}
    dir: /srv
  - name: github
    url: https://mcp.example.com/mcp
    headers: {Authorization: "Bearer ${TOOLGATE_TEST_TOKEN}", X-Literal: "$HOME and $"}
builtin_tools:
  ask_human: {}
  http_request: {allowed_hosts: ["api.github.com", "*.internal.example"], max_response_bytes: 65536, timeout: 10s}
  run_command: {allow: ["kubectl", "/usr/bin/systemctl"], dir: /srv, timeout: 30s, max_output_bytes: 4096}
  workspace: {root: /var/scratch}
policy:
  default: ask
  rules:
    - tool: "files__read_*"
      verdict: allow
`
	got, err := ParseConfig([]byte(data))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	want := Config{
		Servers: []ServerConfig{
			{Name: "files", Command: []string{"./files-mcp", "--root", "/srv/files"}, Env: map[string]string{"LOG": "debug-tok"}, Dir: "/srv", MaxOutputBytes: DefaultMCPMaxOutputBytes},
			{Name: "github", URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer tok", "X-Literal": "$HOME and $"}, MaxOutputBytes: DefaultMCPMaxOutputBytes},
		},
		Builtins: BuiltinConfig{
			AskHuman:    &AskHumanConfig{},
			HTTPRequest: &HTTPConfig{AllowedHosts: []string{"api.github.com", "*.internal.example"}, MaxResponseBytes: 65536, Timeout: 10 * time.Second},
			RunCommand:  &CommandConfig{Allow: []string{"kubectl", "/usr/bin/systemctl"}, Dir: "/srv", Timeout: 30 * time.Second, MaxOutputBytes: 4096},
			Workspace:   &WorkspaceConfig{Root: "/var/scratch", MaxFileBytes: DefaultWorkspaceMaxFileBytes},
		},
		secrets: []string{"/srv/files", "Bearer tok", "debug-tok", "tok"},
		// The command's argument is a path, not a credential.
		credentials: []string{"Bearer tok", "debug-tok", "tok"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseConfig:\ngot  %+v\nwant %+v", got, want)
	}
}

func TestParseConfigDefaults(t *testing.T) {
	got, err := ParseConfig([]byte(`
builtin_tools:
  ask_human:
  http_request: {allowed_hosts: [example.com]}
  run_command: {allow: [ls], dir: /tmp}
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	b := got.Builtins
	if b.AskHuman == nil {
		t.Errorf("ask_human with no value: got disabled, want enabled")
	}
	if h := b.HTTPRequest; h.Timeout != DefaultHTTPTimeout || h.MaxResponseBytes != DefaultHTTPMaxResponseBytes {
		t.Errorf("http_request defaults: got %+v, want timeout %s and %d bytes", h, DefaultHTTPTimeout, DefaultHTTPMaxResponseBytes)
	}
	if c := b.RunCommand; c.Timeout != DefaultCommandTimeout || c.MaxOutputBytes != DefaultCommandMaxOutputBytes {
		t.Errorf("run_command defaults: got %+v, want timeout %s and %d bytes", c, DefaultCommandTimeout, DefaultCommandMaxOutputBytes)
	}
	if b.Workspace != nil {
		t.Errorf("workspace: got %+v, want disabled", b.Workspace)
	}
}

func TestParseConfigEmpty(t *testing.T) {
	for _, data := range []string{"", "policy: {default: ask}\n", "mcp_servers:\nbuiltin_tools:\n"} {
		got, err := ParseConfig([]byte(data))
		if err != nil || !reflect.DeepEqual(got, Config{}) {
			t.Errorf("ParseConfig(%q): got %+v, %v; want an empty config", data, got, err)
		}
	}
}

func TestParseConfigErrors(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_SET", "x")
	t.Setenv("TOOLGATE_TEST_EMPTY", "")
	for _, tc := range []struct {
		name, data string
		want       string // substrings of the error, separated by |
	}{
		{"not yaml", "mcp_servers: [", "parse config"},
		{"servers not a list", "mcp_servers: {a: 1}", "line 1|mcp_servers must be a list"},
		{"unknown server key", "mcp_servers:\n  - name: a\n    command: [x]\n    cmd: [y]\n", `line 4|unknown key "cmd"`},
		{"no name", "mcp_servers:\n  - command: [x]\n", "line 2|name is required"},
		{"bad name chars", "mcp_servers:\n  - name: my.server\n    command: [x]\n", `"my.server"|A-Z a-z 0-9 _ -`},
		{"double underscore", "mcp_servers:\n  - name: a__b\n    command: [x]\n", `must not contain "__"`},
		{"trailing underscore", "mcp_servers:\n  - name: a_\n    command: [x]\n", `end with "_"`},
		{"long name", "mcp_servers:\n  - name: " + strings.Repeat("a", 33) + "\n    command: [x]\n", "longer than 32"},
		{"duplicate", "mcp_servers:\n  - name: a\n    command: [x]\n  - name: a\n    url: http://h/\n", `line 4|"a"|already used on line 2`},
		{"neither", "mcp_servers:\n  - name: a\n", "either command"},
		{"both", "mcp_servers:\n  - name: a\n    command: [x]\n    url: http://h/\n", "only one of command and url"},
		{"empty program", "mcp_servers:\n  - name: a\n    command: [\"\"]\n", "program name is empty"},
		{"bad url", "mcp_servers:\n  - name: a\n    url: ftp://h/\n", "http:// or https://"},
		{"headers on stdio", "mcp_servers:\n  - name: a\n    command: [x]\n    headers: {A: b}\n", "headers only apply to url"},
		{"env on http", "mcp_servers:\n  - name: a\n    url: http://h/\n    env: {A: b}\n", "env and dir only apply to command"},
		{"unset variable", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {Authorization: \"Bearer ${TOOLGATE_TEST_UNSET}\"}\n", "headers: Authorization: environment variable TOOLGATE_TEST_UNSET is not set"},
		{"empty variable", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {Authorization: \"Bearer ${TOOLGATE_TEST_EMPTY}\"}\n", "headers: Authorization: environment variable TOOLGATE_TEST_EMPTY is empty"},
		{"unset and empty variables", "mcp_servers:\n  - name: a\n    command: [\"x${TOOLGATE_TEST_UNSET}${TOOLGATE_TEST_EMPTY}\"]\n", "command: environment variable TOOLGATE_TEST_UNSET is not set; environment variable TOOLGATE_TEST_EMPTY is empty"},
		{"command wrong type", "mcp_servers:\n  - name: a\n    command: x\n", "line 3|cannot unmarshal"},
		{"unknown builtin", "builtin_tools:\n  shell: {}\n", `line 2|unknown key "shell"`},
		{"ask_human settings", "builtin_tools:\n  ask_human: {timeout: 1s}\n", `line 2|unknown key "timeout" in ask_human`},
		{"http no hosts", "builtin_tools:\n  http_request: {timeout: 1s}\n", "builtin_tools.http_request|line 2|allowed_hosts must list"},
		{"http url host", "builtin_tools:\n  http_request: {allowed_hosts: [\"https://x.com\"]}\n", "want a host name"},
		{"http unicode host", "builtin_tools:\n  http_request: {allowed_hosts: [\"*.b\u00fccher.example\"]}\n", "xn--"},
		{"http inner wildcard", "builtin_tools:\n  http_request: {allowed_hosts: [\"a.*.com\"]}\n", "leading"},
		{"http bad port", "builtin_tools:\n  http_request: {allowed_hosts: [\"a.com:99999\"]}\n", "invalid port"},
		{"http bad port glob", "builtin_tools:\n  http_request: {allowed_hosts: [\"a.com:8*\"]}\n", "invalid port"},
		{"http bad timeout", "builtin_tools:\n  http_request: {allowed_hosts: [a.com], timeout: soon}\n", "line 2|cannot unmarshal"},
		{"http negative size", "builtin_tools:\n  http_request: {allowed_hosts: [a.com], max_response_bytes: -1}\n", "max_response_bytes must be positive"},
		{"http unknown key", "builtin_tools:\n  http_request:\n    allowed_hosts: [a.com]\n    hosts: [b.com]\n", `line 4|unknown key "hosts"`},
		{"command no allow", "builtin_tools:\n  run_command: {dir: /tmp}\n", "allow must list"},
		{"command relative allow", "builtin_tools:\n  run_command: {allow: [./x], dir: /tmp}\n", "absolute path or a bare name"},
		{"command unclean allow", "builtin_tools:\n  run_command: {allow: [/usr/bin/../bin/rm], dir: /tmp}\n", "not a clean path"},
		{"command no dir", "builtin_tools:\n  run_command: {allow: [ls]}\n", "dir is required"},
		{"command relative dir", "builtin_tools:\n  run_command: {allow: [ls], dir: srv}\n", "must be an absolute path"},
		{"command env unset", "builtin_tools:\n  run_command: {allow: [ls], dir: /tmp, env: {A: \"${TOOLGATE_TEST_UNSET}\"}}\n", "TOOLGATE_TEST_UNSET is not set"},
		{"workspace no root", "builtin_tools:\n  workspace: {max_file_bytes: 10}\n", "root is required"},
		{"workspace not a mapping", "builtin_tools:\n  workspace: /srv\n", "line 2|workspace must be a mapping"},
		{"mcp negative output cap", "mcp_servers:\n  - name: a\n    command: [x]\n    max_output_bytes: -1\n", "line 2|max_output_bytes must be positive"},
		{"mcp preview of itself", "mcp_servers:\n  - name: a\n    command: [x]\n    preview: {t: t}\n", "line 2|cannot preview itself"},
		{"mcp preview empty", "mcp_servers:\n  - name: a\n    command: [x]\n    preview: {t: \"\"}\n", "line 2|must not be empty"},
		{"workspace in command dir", "builtin_tools:\n  run_command: {allow: [git], dir: /srv}\n  workspace: {root: /srv/scratch}\n", "run_command.dir /srv and workspace.root /srv/scratch overlap|.git/config|allow_overlap: true"},
		{"command dir in workspace", "builtin_tools:\n  workspace: {root: /srv}\n  run_command: {allow: [git], dir: /srv/repo/}\n", "overlap"},
		{"same directory", "builtin_tools:\n  workspace: {root: /srv/}\n  run_command: {allow: [git], dir: /srv}\n", "overlap"},
		{"section twice", "builtin_tools: {ask_human: {}}\nbuiltin_tools: {workspace: {root: /tmp/w}}\n", "builtin_tools (line 2): given twice (first on line 1)"},
		{"servers twice", "mcp_servers:\n  - {name: a, command: [x]}\nmcp_servers:\n  - {name: b, command: [y]}\n", "mcp_servers (line 3): given twice (first on line 1)"},
		{"builtin twice", "builtin_tools:\n  run_command: {allow: [ls], dir: /tmp}\n  run_command: {allow: [cat], dir: /srv}\n", "builtin_tools.run_command (line 3): given twice (first on line 2)"},
		{"top-level merge key", "x-tools: &tools {builtin_tools: {ask_human: {}}}\n<<: *tools\n", `merge key "<<" at the top level (line 2)`},
		{"shell default", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {Authorization: \"Bearer ${GITHUB_TOKEN:-}\"}\n", `line 2|mcp server "a": headers: Authorization: "${GITHUB_TOKEN:-}" is not a ${NAME} reference`},
		{"empty reference", "mcp_servers:\n  - name: a\n    command: [x, \"${}\"]\n", `command: "${}" is not a ${NAME} reference`},
		{"unclosed reference", "mcp_servers:\n  - name: a\n    command: [x]\n    env: {TOKEN: \"${TOOLGATE_TEST_SET\"}\n", `env: TOKEN: "${TOOLGATE_TEST_SET" is not a ${NAME} reference`},
		{"reference in a reference", "mcp_servers:\n  - name: a\n    url: \"http://h/${${TOOLGATE_TEST_SET}}\"\n", `url: "${${TOOLGATE_TEST_SET}" is not a ${NAME} reference`},
		{"command env bad reference", "builtin_tools:\n  run_command: {allow: [ls], dir: /tmp, env: {A: \"${1A}\"}}\n", `env: A: "${1A}" is not a ${NAME} reference`},
		{"headers differing in case", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {X-Env: staging, x-env: production}\n", `headers: headers "X-Env" and "x-env" are the same header`},
		{"header with a line break", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {X-Key: \"abc\\n\"}\n", "headers: X-Key: the value has a line break"},
		{"header with a control character", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {X-Key: \"a\\x00b\"}\n", "headers: X-Key: the value has a control character"},
		{"header name not a token", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {\"X Key\": b}\n", `headers: "X Key" is not a valid header name`},
		{"host header", "mcp_servers:\n  - name: a\n    url: http://h/\n    headers: {Host: b}\n", "Host header cannot be set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.data))
			if err == nil {
				t.Fatalf("ParseConfig(%q): got nil error, want one containing %q", tc.data, tc.want)
			}
			for _, want := range strings.Split(tc.want, "|") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("ParseConfig(%q): got error %q, want it to contain %q", tc.data, err, want)
				}
			}
		})
	}
}

func TestCheckTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     BuiltinConfig
		limit time.Duration
		want  string // a substring of the error; empty: none
	}{
		{"no tools", BuiltinConfig{}, time.Second, ""},
		{"within", BuiltinConfig{RunCommand: &CommandConfig{Timeout: 2 * time.Minute}, HTTPRequest: &HTTPConfig{Timeout: time.Minute}}, 2 * time.Minute, ""},
		{"run_command past", BuiltinConfig{RunCommand: &CommandConfig{Timeout: 10 * time.Minute}}, 2 * time.Minute,
			"builtin_tools.run_command.timeout (10m0s) is longer than TOOL_TIMEOUT (2m0s), which bounds every tool call, so a call would be cut before it: set the timeout to 2m0s or less, or raise TOOL_TIMEOUT"},
		{"http_request past", BuiltinConfig{HTTPRequest: &HTTPConfig{Timeout: 3 * time.Minute}}, 2 * time.Minute, "builtin_tools.http_request.timeout (3m0s)"},
		{"default past", BuiltinConfig{HTTPRequest: &HTTPConfig{}}, 5 * time.Second, "builtin_tools.http_request.timeout (10s, also its default)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.CheckTimeouts(tc.limit, "TOOL_TIMEOUT")
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("CheckTimeouts(%s): got %v, want no error", tc.limit, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckTimeouts(%s): got %v, want an error containing %q", tc.limit, err, tc.want)
			}
		})
	}
}

func TestParseConfigOverlapAllowed(t *testing.T) {
	for _, data := range []string{
		"builtin_tools:\n  run_command: {allow: [git], dir: /srv, allow_overlap: true}\n  workspace: {root: /srv/scratch}\n",
		"builtin_tools:\n  run_command: {allow: [git], dir: /srv/a}\n  workspace: {root: /srv/ab}\n",
	} {
		cfg, err := ParseConfig([]byte(data))
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", data, err)
			continue
		}
		if cfg.Builtins.RunCommand == nil || cfg.Builtins.Workspace == nil {
			t.Errorf("ParseConfig(%q): got %+v, want both tools", data, cfg.Builtins)
		}
	}
}

func TestConfigSecrets(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_TOKEN", "tok-1234")
	t.Setenv("TOOLGATE_TEST_KEY", "key/5678")
	t.Setenv("TOOLGATE_TEST_PASS", "pass-9012")
	t.Setenv("TOOLGATE_TEST_HOST", "mcp.example.com")
	t.Setenv("TOOLGATE_TEST_DIR", "/srv/files")
	cfg, err := ParseConfig([]byte(`
mcp_servers:
  - name: files
    command: ["./files-mcp", "--root", "${TOOLGATE_TEST_DIR}"]
    env: {API_KEY: "${TOOLGATE_TEST_TOKEN}", LOG_LEVEL: debug}
  - name: github
    url: https://u:${TOOLGATE_TEST_PASS}@${TOOLGATE_TEST_HOST}/mcp/${TOOLGATE_TEST_KEY}?x=1
    headers: {Authorization: "Bearer ${TOOLGATE_TEST_TOKEN}", Accept: application/json}
  - name: plain
    url: https://${TOOLGATE_TEST_HOST}/mcp?key=${TOOLGATE_TEST_KEY}
builtin_tools:
  run_command: {allow: [ls], dir: /tmp, env: {TOKEN: "${TOOLGATE_TEST_PASS}"}}
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	want := []string{
		"/mcp/key/5678", "/srv/files", "Bearer tok-1234", "key%2F5678", "key/5678", "key=key/5678",
		"pass-9012", "tok-1234", "u:pass-9012",
	}
	got := cfg.Secrets()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Secrets() = %q, want it to have %q", got, w)
		}
	}
	for _, notWant := range []string{"debug", "application/json", "mcp.example.com", "./files-mcp", "--root", "/mcp", "x=1", ""} {
		if slices.Contains(got, notWant) {
			t.Errorf("Secrets() = %q, want no %q", got, notWant)
		}
	}
	if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
		t.Errorf("Secrets() = %q, want sorted without duplicates", got)
	}
	if got := (Config{Servers: cfg.Servers}).Secrets(); len(got) != 0 {
		t.Errorf("Secrets() of a Config not from ParseConfig = %q, want none", got)
	}
}

func TestParseConfigMCPOutputCap(t *testing.T) {
	cfg, err := ParseConfig([]byte("mcp_servers:\n  - name: a\n    command: [x]\n    max_output_bytes: 100\n  - name: b\n    command: [x]\n"))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if a, b := cfg.Servers[0].MaxOutputBytes, cfg.Servers[1].MaxOutputBytes; a != 100 || b != DefaultMCPMaxOutputBytes {
		t.Errorf("max_output_bytes: got %d and %d, want 100 and the default %d", a, b, DefaultMCPMaxOutputBytes)
	}
}

func TestParseConfigRelativeWorkspaceRoot(t *testing.T) {
	cfg, err := ParseConfig([]byte("builtin_tools:\n  workspace: {root: scratch}\n"))
	if err != nil {
		t.Fatal(err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg.Builtins.Workspace.Root, filepath.Join(wd, "scratch"); got != want {
		t.Errorf("got root %q, want %q (relative to the working directory)", got, want)
	}
}

// A url that fails validation is quoted without its path and query, where
// a ${VAR} may have put a key.
func TestConfigErrorHidesTheURLsSecrets(t *testing.T) {
	t.Setenv("MCP_URL", "HTTPS://mcp.example/sse?api_key=sk-live-123456")
	_, err := ParseConfig([]byte("mcp_servers:\n  - name: x\n    url: \"${MCP_URL}\"\n"))
	if err == nil || !strings.Contains(err.Error(), "must start with http://") {
		t.Fatalf("got %v, want the url refused", err)
	}
	if strings.Contains(err.Error(), "sk-live") {
		t.Errorf("the error quotes the key: %v", err)
	}
}

// A workspace root created at start is compared with the command
// directory where it will be: through a symlink in its existing part.
func TestOverlapThroughASymlinkToARootNotYetMade(t *testing.T) {
	base := t.TempDir()
	srv := filepath.Join(base, "srv")
	if err := os.Mkdir(srv, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(srv, filepath.Join(base, "data")); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf("builtin_tools:\n  run_command: {allow: [git], dir: %s}\n  workspace: {root: %s}\n", srv, filepath.Join(base, "data", "ws"))
	if _, err := ParseConfig([]byte(cfg)); err == nil || !strings.Contains(err.Error(), "overlap") {
		t.Errorf("ParseConfig: %v, want the overlap refused", err)
	}
	real, err := filepath.EvalSymlinks(srv)
	if err != nil {
		t.Fatal(err)
	}
	if got := resolveExisting(filepath.Join(base, "data", "ws", "x")); got != filepath.Join(real, "ws", "x") {
		t.Errorf("resolveExisting = %s, want %s", got, filepath.Join(real, "ws", "x"))
	}
}

// A secret read from a file often ends with a line break, which would fail
// every request: the header is refused at load, named, its value unquoted.
func TestHeaderValueWithALineBreak(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_FILE_TOKEN", "tok-from-file-5678\n")
	_, err := ParseConfig([]byte("mcp_servers:\n  - name: gh\n    url: https://h/mcp\n    headers: {Authorization: \"Bearer ${TOOLGATE_TEST_FILE_TOKEN}\"}\n"))
	if err == nil || !strings.Contains(err.Error(), `mcp server "gh": headers: Authorization: the value has a line break`) {
		t.Fatalf("ParseConfig: %v, want the header refused by name", err)
	}
	if strings.Contains(err.Error(), "tok-from-file") {
		t.Errorf("the error quotes the value: %v", err)
	}
}

// A "$" that does not start "${" is text, as it always was, and so is
// what a reference leaves around it.
func TestParseConfigKeepsDollarText(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_TOKEN", "tok")
	cfg, err := ParseConfig([]byte("mcp_servers:\n  - name: a\n    command: [x, \"$HOME and $ and $$ and $5 and {x}\", \"$${TOOLGATE_TEST_TOKEN}}\"]\n"))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if got, want := cfg.Servers[0].Command, []string{"x", "$HOME and $ and $$ and $5 and {x}", "$tok}"}; !slices.Equal(got, want) {
		t.Errorf("command = %q, want %q", got, want)
	}
}

// The bot's own files (its store's directory, its config file) must lie
// outside the directories the tools reach: as written, with symlinks
// resolved, and for a relative path from the working directory.
func TestCheckReach(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	configFile := filepath.Join(base, "etc", "config.yaml")
	for _, d := range []string{data, filepath.Dir(configFile), filepath.Join(base, "ws")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(configFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(base, link); err != nil {
		t.Fatal(err)
	}
	ws := func(root string) BuiltinConfig { return BuiltinConfig{Workspace: &WorkspaceConfig{Root: root}} }
	cmd := func(dir string) BuiltinConfig { return BuiltinConfig{RunCommand: &CommandConfig{Dir: dir}} }
	for _, tc := range []struct {
		name, setting, path string
		b                   BuiltinConfig
		want                string // substrings of the error, separated by |; empty: none
	}{
		{"root holds the store", "DATA_DIR", data, ws(base), "builtin_tools.workspace.root " + base + " holds DATA_DIR " + data + ":|the model could read or change it"},
		{"root is the store", "DATA_DIR", data, ws(data + "/"), "builtin_tools.workspace.root|holds DATA_DIR"},
		{"root holds the config file", "CONFIG_FILE", configFile, ws(base), "builtin_tools.workspace.root " + base + " holds CONFIG_FILE " + configFile},
		{"command dir holds the config file", "CONFIG_FILE", configFile, cmd(filepath.Dir(configFile)), "builtin_tools.run_command.dir|holds CONFIG_FILE"},
		{"root through a symlink", "DATA_DIR", data, ws(link), "builtin_tools.workspace.root " + link + " holds DATA_DIR"},
		{"store through a symlink", "DATA_DIR", filepath.Join(link, "data"), ws(filepath.Join(base, "data", "..")), "holds DATA_DIR"},
		{"root beside the store", "DATA_DIR", data, ws(filepath.Join(base, "ws")), ""},
		{"root inside the store's directory", "DATA_DIR", data, ws(filepath.Join(data, "ws")), ""},
		{"root of a similar name", "DATA_DIR", data, ws(data + "-ws"), ""},
		{"command dir beside the config file", "CONFIG_FILE", configFile, cmd(filepath.Join(base, "ws")), ""},
		{"no tools", "DATA_DIR", data, BuiltinConfig{AskHuman: &AskHumanConfig{}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.b.CheckReach(tc.setting, tc.path)
			if tc.want == "" {
				if err != nil {
					t.Errorf("CheckReach(%s %s): %v, want no error", tc.setting, tc.path, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckReach(%s %s): no error, want %q", tc.setting, tc.path, tc.want)
			}
			for _, w := range strings.Split(tc.want, "|") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("CheckReach(%s %s): %q, want it to contain %q", tc.setting, tc.path, err, w)
				}
			}
		})
	}

	// DATA_DIR's default, ./data, under a workspace root of "."
	t.Chdir(base)
	cfg, err := ParseConfig([]byte("builtin_tools:\n  workspace: {root: .}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Builtins.CheckReach("DATA_DIR", "./data"); err == nil || !strings.Contains(err.Error(), "holds DATA_DIR ./data") {
		t.Errorf("CheckReach(DATA_DIR ./data) under root .: %v, want it refused", err)
	}
}
