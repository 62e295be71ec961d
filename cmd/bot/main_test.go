package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/slackapp"
)

// Tokens of the configuration tests. None may appear in any output.
const (
	testAppToken = "xapp-1-A0TEST-secret-app-token"
	testBotToken = "xoxb-1-secret-bot-token"
	testAPIKey   = "sk-test-secret-api-key"
)

// specVariables are the variables SPEC section 5 and the operations docs
// promise; --help must list every one.
var specVariables = []string{
	"SLACK_APP_TOKEN", "SLACK_BOT_TOKEN", "SLACK_API_URL",
	"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL",
	"REDIS_URL", "DATA_DIR", "CONFIG_FILE", "ADMIN_USERS", "APPROVAL_TTL",
	"HTTP_ADDR", "APPROVALS_CHANNEL",
	"LOG_LEVEL", "LOG_FORMAT", "MAX_STEPS", "MAX_TURNS", "SWEEP_INTERVAL", "SYSTEM_PROMPT",
}

// setEnv makes the bot's environment exactly vars: every variable of config
// not in vars is unset for the test (so a REDIS_URL exported by CI does not
// leak in), and restored afterwards.
func setEnv(t *testing.T, vars map[string]string) {
	t.Helper()
	for _, k := range configKeys(t) {
		t.Setenv(k, "") // registers the restore
		if err := os.Unsetenv(k); err != nil {
			t.Fatal(err)
		}
	}
	for k, v := range vars {
		t.Setenv(k, v)
	}
}

// validEnv is a configuration that passes validation, with tokens that the
// tests look for in the output.
func validEnv(t *testing.T) map[string]string {
	return map[string]string{
		"SLACK_APP_TOKEN": testAppToken,
		"SLACK_BOT_TOKEN": testBotToken,
		"OPENAI_API_KEY":  testAPIKey,
		"DATA_DIR":        t.TempDir(),
		"HTTP_ADDR":       "127.0.0.1:0",
		// Nothing here may reach the real Slack or OpenAI: a start that
		// gets past the configuration fails on a closed local port.
		"SLACK_API_URL":   "http://127.0.0.1:1/api/",
		"OPENAI_BASE_URL": "http://127.0.0.1:1/v1",
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func assertNoSecrets(t *testing.T, where, s string, secrets ...string) {
	t.Helper()
	for _, secret := range append([]string{testAppToken, testBotToken, testAPIKey}, secrets...) {
		if strings.Contains(s, secret) {
			t.Errorf("%s contains the secret %q:\n%s", where, secret, s)
		}
	}
}

func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "-help"} {
		t.Run(arg, func(t *testing.T) {
			setEnv(t, nil)
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), []string{arg}, &stdout, &stderr)
			if err != nil {
				t.Fatalf("run %s: %v", arg, err)
			}
			if code := exitCode(err); code != 0 {
				t.Errorf("exit code %d, want 0", code)
			}
			out := stdout.String()
			for _, v := range specVariables {
				if !strings.Contains(out, v) {
					t.Errorf("--help does not list %s:\n%s", v, out)
				}
			}
			for _, def := range []string{"https://api.openai.com/v1", "gpt-4o-mini", "./data", "72h", ":8080", "json"} {
				if !strings.Contains(out, def) {
					t.Errorf("--help does not show the default %q:\n%s", def, out)
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("--help wrote to stderr: %q", stderr.String())
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	badCEL := writeFile("bad-cel.yaml", `policy:
  default: ask
  rules:
    - tool: "files__delete_*"
      when: 'args.path.startsWith('
      verdict: ask
`)
	badTools := writeFile("bad-tools.yaml", `builtin_tools:
  ask_human: {}
  workspace:
    root: /srv/scratch
    max_file_bytes: -1
`)
	badYAML := writeFile("bad-yaml.yaml", "policy: [\n")
	longTimeout := writeFile("long-timeout.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: /tmp, timeout: 10m}\n")
	missingDir := writeFile("missing-dir.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: "+filepath.Join(dir, "nowhere")+"}\n")
	// The store and the config file within the tools' reach.
	wsHoldsData := writeFile("ws-holds-data.yaml", "builtin_tools:\n  workspace: {root: "+filepath.Join(dir, "ws")+"}\n")
	cmdHoldsConfig := writeFile("cmd-holds-config.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: "+dir+"}\n")

	tests := []struct {
		name string
		set  map[string]string
		// unset removes variables from the valid environment.
		unset []string
		args  []string
		// want are parts of the error message; notWant must not be one.
		want    []string
		notWant string
	}{
		{name: "missing bot token", unset: []string{"SLACK_BOT_TOKEN"}, want: []string{"SLACK_BOT_TOKEN is required", "xoxb-"}},
		{name: "missing app token", unset: []string{"SLACK_APP_TOKEN"}, want: []string{"SLACK_APP_TOKEN is required", "xapp-"}},
		{name: "bot token of the wrong kind", set: map[string]string{"SLACK_BOT_TOKEN": "xoxp-user-secret-token"}, want: []string{"SLACK_BOT_TOKEN", "xoxb-"}},
		{name: "app token of the wrong kind", set: map[string]string{"SLACK_APP_TOKEN": testBotToken}, want: []string{"SLACK_APP_TOKEN", "xapp-"}},
		{name: "placeholder app token", set: map[string]string{"SLACK_APP_TOKEN": "xapp-"}, want: []string{"SLACK_APP_TOKEN is still the placeholder", "App-Level Tokens (xapp-1-…)"}},
		{name: "placeholder bot token", set: map[string]string{"SLACK_BOT_TOKEN": "xoxb-"}, want: []string{"SLACK_BOT_TOKEN is still the placeholder", "OAuth & Permissions page (xoxb-…)"}},
		{name: "stand-in bot token", set: map[string]string{"SLACK_BOT_TOKEN": "xoxb-…"}, want: []string{"SLACK_BOT_TOKEN is still the placeholder"}},
		{name: "bot token with a line break", set: map[string]string{"SLACK_BOT_TOKEN": testBotToken + "\n"}, want: []string{"SLACK_BOT_TOKEN has spaces or a line break at its start or end"}, notWant: testBotToken},
		{name: "app token with a space", set: map[string]string{"SLACK_APP_TOKEN": " xapp-1-A0-1-abc"}, want: []string{"SLACK_APP_TOKEN has spaces or a line break"}},
		{name: "model key with a line break", set: map[string]string{"OPENAI_API_KEY": "sk-abc\n"}, want: []string{"OPENAI_API_KEY has spaces or a line break"}, notWant: "sk-abc"},
		{name: "blank model", set: map[string]string{"OPENAI_MODEL": " "}, want: []string{"OPENAI_MODEL has spaces"}},
		{name: "malformed approval ttl", set: map[string]string{"APPROVAL_TTL": "3x"}, want: []string{`APPROVAL_TTL: "3x" is not a duration`}},
		{name: "negative approval ttl", set: map[string]string{"APPROVAL_TTL": "-1h"}, want: []string{"APPROVAL_TTL", "not positive"}},
		{name: "approval ttl past a conversation's life", set: map[string]string{"APPROVAL_TTL": "673h"}, want: []string{"APPROVAL_TTL: 673h0m0s is longer than 672h"}},
		{name: "malformed max turns", set: map[string]string{"MAX_TURNS": "many"}, want: []string{`MAX_TURNS: "many" is not a whole number`}},
		{name: "zero max turns", set: map[string]string{"MAX_TURNS": "0"}, want: []string{"MAX_TURNS: 0 is not at least 1"}},
		{name: "zero sweep interval", set: map[string]string{"SWEEP_INTERVAL": "0s"}, want: []string{"SWEEP_INTERVAL", "not positive"}},
		{name: "sweep interval that spins", set: map[string]string{"SWEEP_INTERVAL": "1ms"}, want: []string{"SWEEP_INTERVAL: 1ms is under 100ms"}},
		{name: "takeover interval that spins", set: map[string]string{"TAKEOVER_INTERVAL": "1ms"}, want: []string{"TAKEOVER_INTERVAL: 1ms is under 100ms"}},
		{name: "takeover interval of a nanosecond", set: map[string]string{"TAKEOVER_INTERVAL": "1ns"}, want: []string{"TAKEOVER_INTERVAL: 1ns is under 100ms"}},
		{name: "zero max steps", set: map[string]string{"MAX_STEPS": "0"}, want: []string{"MAX_STEPS"}},
		{name: "zero calls per step", set: map[string]string{"MAX_CALLS_PER_STEP": "0"}, want: []string{"MAX_CALLS_PER_STEP: 0 is not at least 1"}},
		{name: "tiny tool results", set: map[string]string{"MAX_TOOL_RESULT_BYTES": "100"}, want: []string{"MAX_TOOL_RESULT_BYTES: 100 is less than 1024"}},
		{name: "negative redis wait replicas", set: map[string]string{"REDIS_WAIT_REPLICAS": "-1"}, want: []string{"REDIS_WAIT_REPLICAS: -1 is negative"}},
		{name: "malformed redis wait replicas", set: map[string]string{"REDIS_WAIT_REPLICAS": "one"}, want: []string{`REDIS_WAIT_REPLICAS: "one" is not a whole number`}},
		{name: "zero redis wait timeout", set: map[string]string{"REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT": "0s"}, want: []string{"REDIS_WAIT_TIMEOUT: 0s is under 1ms"}},
		{name: "sub-millisecond redis wait timeout", set: map[string]string{"REDIS_WAIT_REPLICAS": "1", "REDIS_WAIT_TIMEOUT": "500us"}, want: []string{"REDIS_WAIT_TIMEOUT: 500µs is under 1ms"}},
		{name: "malformed redis wait timeout", set: map[string]string{"REDIS_WAIT_TIMEOUT": "soon"}, want: []string{`REDIS_WAIT_TIMEOUT: "soon" is not a duration`}},
		{name: "redis wait on a cluster", set: map[string]string{"REDIS_WAIT_REPLICAS": "1", "REDIS_URL": "redis+cluster://127.0.0.1:1"}, want: []string{"REDIS_WAIT_REPLICAS is not supported with Redis Cluster"}},
		{name: "redis prefix with a hash tag", set: map[string]string{"REDIS_PREFIX": "bot{1}"}, want: []string{`REDIS_PREFIX: "bot{1}"`, "no { or }"}},
		{name: "unknown log format", set: map[string]string{"LOG_FORMAT": "xml"}, want: []string{`LOG_FORMAT: "xml" is not json or text`}},
		{name: "unknown log level", set: map[string]string{"LOG_LEVEL": "loud"}, want: []string{`LOG_LEVEL: "loud"`}},
		{name: "log level with an offset", set: map[string]string{"LOG_LEVEL": "info+2"}, want: []string{`LOG_LEVEL: "info+2" is not debug, info, warn or error`}},
		{name: "bad admin id", set: map[string]string{"ADMIN_USERS": "U0ADMIN1, bob"}, want: []string{`ADMIN_USERS: "bob" is not a Slack user id`}},
		{name: "approvals channel by name", set: map[string]string{"APPROVALS_CHANNEL": "#approvals"}, want: []string{`APPROVALS_CHANNEL: "#approvals" is not a channel id`}},
		{name: "openai without key", unset: []string{"OPENAI_API_KEY", "OPENAI_BASE_URL"}, want: []string{"OPENAI_API_KEY is required"}},
		{name: "bad model url", set: map[string]string{"OPENAI_BASE_URL": "localhost:11434"}, want: []string{"OPENAI_BASE_URL", "not an http or https URL"}},
		{name: "bad model url with a password", set: map[string]string{"OPENAI_BASE_URL": "htps://u:BasicPw99@llm.local/v1"}, want: []string{"OPENAI_BASE_URL", "not an http or https URL"}, notWant: "BasicPw99"},
		{name: "otlp endpoint with a bad escape", set: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:S3cretOtelPw%zz@collector:4318"}, want: []string{"OTEL_EXPORTER_OTLP_ENDPOINT is not an absolute http or https URL"}, notWant: "S3cretOtelPw"},
		{name: "otlp headers with a bad escape", set: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization=Bearer%zzTOKENVALUE"}, want: []string{"OTEL_EXPORTER_OTLP_HEADERS: the value of entry 1 is not percent-encoded"}, notWant: "TOKENVALUE"},
		{name: "http addr without a port", set: map[string]string{"HTTP_ADDR": "nonsense"}, want: []string{`HTTP_ADDR: "nonsense" is not host:port`}},
		{name: "http addr with a port out of range", set: map[string]string{"HTTP_ADDR": ":99999"}, want: []string{`HTTP_ADDR: ":99999" has no port number`}},
		{name: "data dir that is a file", set: map[string]string{"DATA_DIR": badCEL}, want: []string{"DATA_DIR: ", "not a directory"}},
		{name: "missing config file", set: map[string]string{"CONFIG_FILE": filepath.Join(dir, "nope.yaml")}, want: []string{"CONFIG_FILE", "nope.yaml"}},
		{name: "cel syntax error", set: map[string]string{"CONFIG_FILE": badCEL}, want: []string{badCEL, "rule 1", "line 5", "Syntax error"}},
		{name: "bad builtin tool", set: map[string]string{"CONFIG_FILE": badTools}, want: []string{badTools, "line 4", "max_file_bytes"}},
		{name: "yaml syntax error", set: map[string]string{"CONFIG_FILE": badYAML}, want: []string{badYAML, "line 1"}},
		{name: "tool timeout past TOOL_TIMEOUT", set: map[string]string{"CONFIG_FILE": longTimeout, "TOOL_TIMEOUT": "2m"},
			want: []string{longTimeout, "builtin_tools.run_command.timeout (10m0s) is longer than TOOL_TIMEOUT (2m0s)"}},
		{name: "argument", args: []string{"serve"}, want: []string{`unexpected argument "serve"`, "--help"}},
		{name: "tool that cannot be set up", set: map[string]string{"CONFIG_FILE": missingDir}, want: []string{"CONFIG_FILE: load tools: run_command", "nowhere"}},
		{name: "unknown flag", args: []string{"--port=1"}, want: []string{"-port"}},
		{name: "workspace holding the store", set: map[string]string{"CONFIG_FILE": wsHoldsData, "DATA_DIR": filepath.Join(dir, "ws", "data")},
			want: []string{wsHoldsData, "builtin_tools.workspace.root " + filepath.Join(dir, "ws") + " holds DATA_DIR " + filepath.Join(dir, "ws", "data")}},
		{name: "command dir holding the config file", set: map[string]string{"CONFIG_FILE": cmdHoldsConfig},
			want: []string{"builtin_tools.run_command.dir " + dir + " holds CONFIG_FILE " + cmdHoldsConfig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := validEnv(t)
			for _, k := range tt.unset {
				delete(env, k)
			}
			for k, v := range tt.set {
				env[k] = v
			}
			setEnv(t, env)
			var stdout, stderr bytes.Buffer
			err := run(t.Context(), tt.args, &stdout, &stderr)
			if err == nil {
				t.Fatal("run succeeded, want a configuration error")
			}
			if code := exitCode(err); code != 2 {
				t.Errorf("exit code %d, want 2 (error %v)", code, err)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			if tt.notWant != "" && strings.Contains(msg+stderr.String(), tt.notWant) {
				t.Errorf("error %q shows %q", msg, tt.notWant)
			}
			assertNoSecrets(t, "error", msg, "xoxp-user-secret-token")
			assertNoSecrets(t, "stdout", stdout.String())
			assertNoSecrets(t, "stderr", stderr.String())
		})
	}
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		err  error
		want int
	}{
		{nil, 0},
		{configErrorf("X is required"), 2},
		{errors.Join(errors.New("context"), &configError{Err: errors.New("wrapped")}), 2},
		{errors.New("slack auth.test: invalid_auth"), 1},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("exitCode(%v) = %d, want %d", tt.err, got, tt.want)
		}
	}
}

// A token Slack refuses for good is a configuration error (exit status 2)
// naming its setting, with what to do about it: the hint Slack's answer
// calls for, or else to paste the token again.
func TestTokenAdvice(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want []string
	}{
		{&slackapp.TokenRefusedError{Err: errors.New("invalid_auth")}, []string{"SLACK_BOT_TOKEN: ", "invalid_auth", "paste the token again"}},
		{&slackapp.TokenRefusedError{App: true, Err: errors.New("missing_scope"), Hint: "the app-level token needs the connections:write scope"}, []string{"SLACK_APP_TOKEN: ", "missing_scope", "needs the connections:write scope"}},
	} {
		err := tokenAdvice(tt.err)
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("tokenAdvice(%v) = %v, want it to say %q", tt.err, err, w)
			}
		}
		if exitCode(err) != 2 {
			t.Errorf("tokenAdvice(%v) exits with %d, want 2", tt.err, exitCode(err))
		}
	}
	if plain := errors.New("other"); tokenAdvice(plain) != plain {
		t.Error("tokenAdvice changed an error that is no refused token")
	}
}

func TestRunFailsOnUnreachableRedis(t *testing.T) {
	env := validEnv(t)
	env["REDIS_URL"] = "redis://default:hunter2-redis-password@127.0.0.1:1/0?dial_timeout=200ms&max_retries=0"
	setEnv(t, env)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), nil, &stdout, &stderr)
	if err == nil {
		t.Fatal("run succeeded with an unreachable Redis")
	}
	if code := exitCode(err); code != 2 {
		t.Errorf("exit code %d, want 2 (error %v)", code, err)
	}
	if !strings.HasPrefix(err.Error(), "REDIS_URL: ") || !strings.Contains(err.Error(), "connect to redis at redis://default:xxxxx@127.0.0.1:1") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error %q is not one line naming REDIS_URL and the Redis URL without its password", err)
	}
	assertNoSecrets(t, "error", err.Error(), "hunter2-redis-password")
	assertNoSecrets(t, "stderr", stderr.String(), "hunter2-redis-password")
}

// A SLACK_API_URL that answers no Slack JSON (a gateway's sign-in page)
// is named in the exit error without the gateway's credentials, in its
// user info or its query.
func TestRunAgainstAPageKeepsSlackAPIURLsSecrets(t *testing.T) {
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>Sign in</body></html>")
	}))
	defer page.Close()
	for _, tt := range []struct{ user, shown string }{
		{"gw:SlackGatewayPw99@", "gw:xxxxx@"},
		{"SlackGatewayTok77@", "xxxxx@"}, // a token as the user name, with no password
	} {
		env := validEnv(t)
		env["SLACK_API_URL"] = strings.Replace(page.URL, "http://", "http://"+tt.user, 1) + "/api/?key=SlackGatewayKey42"
		setEnv(t, env)
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), nil, &stdout, &stderr)
		if err == nil || !strings.Contains(err.Error(), "SLACK_API_URL http://"+tt.shown+"127.0.0.1") {
			t.Fatalf("run against a web page: %v; want an error naming SLACK_API_URL without its credentials", err)
		}
		for _, secret := range []string{"SlackGatewayPw99", "SlackGatewayTok77", "SlackGatewayKey42"} {
			assertNoSecrets(t, "error", err.Error(), secret)
			assertNoSecrets(t, "stderr", stderr.String(), secret)
		}
	}
}

func TestRunFailsOnMalformedRedisURL(t *testing.T) {
	for _, u := range []string{"localhost:6379", "redis://127.0.0.1:6379/notadb", "redis+sentinel://127.0.0.1:26379/0", "http://127.0.0.1:6379"} {
		env := validEnv(t)
		env["REDIS_URL"] = u
		setEnv(t, env)
		var stdout, stderr bytes.Buffer
		err := run(t.Context(), nil, &stdout, &stderr)
		if err == nil {
			t.Fatalf("run succeeded with REDIS_URL=%s", u)
		}
		if code := exitCode(err); code != 2 || !strings.HasPrefix(err.Error(), "REDIS_URL: ") {
			t.Errorf("REDIS_URL=%s: exit code %d, error %q; want 2 and one line naming REDIS_URL", u, code, err)
		}
	}
}

// logLine is a line of the bot's JSON log.
type logLine struct {
	Msg      string `json:"msg"`
	Level    string `json:"level"`
	HTTPAddr string `json:"http_addr"`
	Store    string `json:"store"`
}

// waitLog waits for a JSON log line with msg and returns it. Every line must
// be JSON.
func waitLog(t *testing.T, logs *syncBuffer, msg string, errc <-chan error) logLine {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		sc := bufio.NewScanner(strings.NewReader(logs.String()))
		for sc.Scan() {
			var l logLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Fatalf("log line is not JSON: %q", sc.Text())
			}
			if l.Msg == msg {
				return l
			}
		}
		select {
		case err := <-errc:
			t.Fatalf("run returned before logging %q: %v\nlogs:\n%s", msg, err, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("no %q in the log:\n%s", msg, logs)
	return logLine{}
}

// get fetches url and returns the status and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// TestRun starts the whole bot against the fake Slack and the fake model
// server, checks the HTTP endpoints, has a conversation that runs an allowed
// tool, and stops it.
func TestRun(t *testing.T) {
	redisURL := os.Getenv("REDIS_URL")
	stores := []struct {
		name, redisURL, logMsg string
	}{
		{name: "embedded", logMsg: "using embedded store"},
		{name: "redis", redisURL: redisURL, logMsg: "using redis store"},
	}
	for _, sc := range stores {
		t.Run(sc.name, func(t *testing.T) {
			if sc.name == "redis" && sc.redisURL == "" {
				if os.Getenv("CI") == "true" {
					t.Fatal("REDIS_URL is not set; CI must run the Redis tests")
				}
				t.Skip("REDIS_URL is not set")
			}
			testRun(t, sc.redisURL, sc.logMsg)
		})
	}
}

func testRun(t *testing.T, redisURL, storeLog string) {
	slack := fakeslack.New(t)
	model := fakeopenai.New(t)
	workspace := t.TempDir()
	if err := os.WriteFile(filepath.Join(workspace, "notes.txt"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(`builtin_tools:
  ask_human: {}
  workspace:
    root: `+workspace+`
policy:
  default: ask
  rules:
    - tool: workspace_list
      verdict: allow
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SLACK_APP_TOKEN": slack.AppToken(),
		"SLACK_BOT_TOKEN": slack.BotToken(),
		"SLACK_API_URL":   slack.APIURL(),
		"OPENAI_API_KEY":  testAPIKey,
		"OPENAI_BASE_URL": model.URL(),
		"OPENAI_MODEL":    fakeopenai.DefaultModel,
		"REDIS_URL":       redisURL,
		"DATA_DIR":        t.TempDir(),
		"CONFIG_FILE":     configFile,
		"HTTP_ADDR":       "127.0.0.1:0",
		"ADMIN_USERS":     "U0ADMIN1",
		"LOG_LEVEL":       "debug",
	}
	if redisURL != "" {
		// A prefix of its own: the fake Slack numbers its event ids from
		// 1, which Redis would remember from earlier runs as seen.
		env["REDIS_PREFIX"] = teststore.Prefix(t, redisURL, "toolgate-run")
	}
	setEnv(t, env)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout syncBuffer
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, nil, &stdout, logs) }()

	started := waitLog(t, logs, "starting", errc)
	waitLog(t, logs, storeLog, errc)
	base := "http://" + started.HTTPAddr

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz: %d %q, want 200 ok", code, body)
	}
	if err := slack.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	var ready readiness
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if err := json.Unmarshal([]byte(body), &ready); err != nil {
			t.Fatalf("/readyz body %q: %v", body, err)
		}
		if code == http.StatusOK {
			break
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("/readyz: status %d, want 200 or 503", code)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d after Socket Mode connected: %s", code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !ready.Ready || ready.SocketMode != "connected" || ready.Store != "ok" || ready.MCPServers == nil {
		t.Errorf("/readyz = %+v, want ready, connected, store ok, an empty server list", ready)
	}

	// A mention runs a turn: the model lists the workspace (allowed by the
	// policy, so no card) and then answers.
	if result := callOnce(t, slack, model, logs, "workspace_list", "The workspace has notes.txt."); !strings.Contains(result, "notes.txt") {
		t.Errorf("the model did not get the tool result: %q", result)
	}

	checkMetrics(t, base+"/metrics",
		"toolgate_envelopes_total",
		"toolgate_model_seconds",
		`toolgate_tool_calls_total{verdict="allow"} 1`,
		"go_goroutines",
		"process_start_time_seconds",
	)
	stopRun(t, cancel, errc, logs, slack)
	assertNoSecrets(t, "stdout", stdout.String(), slack.BotToken(), slack.AppToken())
}

// checkMetrics fetches url and checks that it has every one of names.
func checkMetrics(t *testing.T, url string, names ...string) {
	t.Helper()
	_, metrics := get(t, url)
	for _, name := range names {
		if !strings.Contains(metrics, name) {
			t.Errorf("/metrics has no %s", name)
		}
	}
}

// stopRun cancels a running bot and checks that run returns nil promptly,
// having logged no token.
func stopRun(t *testing.T, cancel context.CancelFunc, errc <-chan error, logs *syncBuffer, slack *fakeslack.Server) {
	t.Helper()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("run after cancel: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of the cancel")
	}
	waitLog(t, logs, "stopped", nil)
	assertNoSecrets(t, "the log", logs.String(), slack.BotToken(), slack.AppToken())
}

// A token Slack refuses stops the bot as a bad setting does: exit status
// 2, naming the variable, never quoting the token.
func TestRunBadSlackToken(t *testing.T) {
	for _, bad := range []string{"SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"} {
		t.Run(bad, func(t *testing.T) {
			slack := fakeslack.New(t)
			model := fakeopenai.New(t)
			env := map[string]string{
				"SLACK_APP_TOKEN": slack.AppToken(),
				"SLACK_BOT_TOKEN": slack.BotToken(),
				"SLACK_API_URL":   slack.APIURL(),
				"OPENAI_BASE_URL": model.URL(),
				"DATA_DIR":        t.TempDir(),
				"HTTP_ADDR":       "127.0.0.1:0",
			}
			secret := map[string]string{"SLACK_BOT_TOKEN": "xoxb-revoked-secret-token", "SLACK_APP_TOKEN": "xapp-1-revoked-secret-token"}[bad]
			env[bad] = secret
			setEnv(t, env)
			logs, err := runFails(t, "a bad "+bad)
			if code := exitCode(err); code != 2 {
				t.Errorf("exit code %d, want 2 (error %v)", code, err)
			}
			if !strings.HasPrefix(err.Error(), bad+": ") || !strings.Contains(err.Error(), "invalid_auth") {
				t.Errorf("error %q does not name %s and say invalid_auth", err, bad)
			}
			assertNoSecrets(t, "error", err.Error(), secret)
			assertNoSecrets(t, "the log", logs, secret)
		})
	}
}

// runFails runs the bot, which must stop with an error within 15 s
// (because of what), and returns its log and the error.
func runFails(t *testing.T, what string) (string, error) {
	t.Helper()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(t.Context(), nil, io.Discard, logs) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatalf("run succeeded with %s", what)
		}
		return logs.String(), err
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not stop on %s", what)
	}
	return "", nil
}

// TestRunRedactsToolSecrets runs the bot with a stdio MCP server that
// prints a secret from its configured env on stderr and exits: the logs,
// which quote the server's stderr, must not show it.
func TestRunRedactsToolSecrets(t *testing.T) {
	const secret = "mcp-secret-token-1234"
	slack := fakeslack.New(t)
	model := fakeopenai.New(t)
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(`mcp_servers:
  - name: leaky
    command: ["/bin/sh", "-c", "echo token=$MCP_TOKEN >&2; exit 1"]
    env: {MCP_TOKEN: "${TOOLGATE_TEST_MCP_TOKEN}"}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{
		"SLACK_APP_TOKEN": slack.AppToken(),
		"SLACK_BOT_TOKEN": "xoxb-revoked-secret-token",
		"SLACK_API_URL":   slack.APIURL(),
		"OPENAI_BASE_URL": model.URL(),
		"DATA_DIR":        t.TempDir(),
		"CONFIG_FILE":     configFile,
		"HTTP_ADDR":       "127.0.0.1:0",
	})
	t.Setenv("TOOLGATE_TEST_MCP_TOKEN", secret)
	logs, err := runFails(t, "a bad bot token")
	assertNoSecrets(t, "error", err.Error(), secret)
	if !strings.Contains(logs, "token=[redacted]") {
		t.Errorf("the log does not quote the server's stderr, redacted:\n%s", logs)
	}
	assertNoSecrets(t, "the log", logs, secret)
}

// A trailing or doubled comma in ADMIN_USERS names no one, and is no error.
func TestAdminUsersWithATrailingComma(t *testing.T) {
	env := validEnv(t)
	env["ADMIN_USERS"] = "U0ADMIN1,,W0ADMIN2,"
	setEnv(t, env)
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig with ADMIN_USERS %q: %v", env["ADMIN_USERS"], err)
	}
	if want := []string{"U0ADMIN1", "W0ADMIN2"}; !slices.Equal(c.AdminUsers, want) {
		t.Errorf("AdminUsers = %q, want %q", c.AdminUsers, want)
	}
}

// TestRunHidesASecretOfAServersCommand runs the bot with a stdio MCP
// server whose command carries a secret from ${VAR}, and which prints it on
// stderr and exits: the logs, /readyz and the stand-in tool the model
// calls all quote the server's stderr, and none may show the secret.
func TestRunHidesASecretOfAServersCommand(t *testing.T) {
	const secret = "mcp-command-secret-5678"
	slack := fakeslack.New(t)
	model := fakeopenai.New(t)
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(`mcp_servers:
  - name: leaky
    command: ["/bin/sh", "-c", "printf 'token=%s\n' \"$0\" >&2; exit 1", "${TOOLGATE_TEST_MCP_TOKEN}"]
policy:
  default: ask
  rules:
    - tool: leaky__unavailable
      verdict: allow
`), 0o600); err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{
		"SLACK_APP_TOKEN": slack.AppToken(),
		"SLACK_BOT_TOKEN": slack.BotToken(),
		"SLACK_API_URL":   slack.APIURL(),
		"OPENAI_API_KEY":  testAPIKey,
		"OPENAI_BASE_URL": model.URL(),
		"OPENAI_MODEL":    fakeopenai.DefaultModel,
		"DATA_DIR":        t.TempDir(),
		"CONFIG_FILE":     configFile,
		"HTTP_ADDR":       "127.0.0.1:0",
		"LOG_LEVEL":       "debug",
	})
	t.Setenv("TOOLGATE_TEST_MCP_TOKEN", secret)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, nil, io.Discard, logs) }()
	started := waitLog(t, logs, "starting", errc)

	// The server's first start has failed by now: the bot waits for it.
	_, body := get(t, "http://"+started.HTTPAddr+"/readyz")
	assertNoSecrets(t, "/readyz", body, secret)
	if !strings.Contains(body, "token=[redacted]") {
		t.Errorf("/readyz does not quote the server's stderr, redacted: %s", body)
	}

	if err := slack.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	result := callOnce(t, slack, model, logs, "leaky__unavailable", "The server is down.")
	assertNoSecrets(t, "the tool result", result, secret)
	if !strings.Contains(result, "MCP server leaky is unavailable") || !strings.Contains(result, "token=[redacted]") {
		t.Errorf("the tool result does not quote the server's stderr, redacted: %s", result)
	}

	stopRun(t, cancel, errc, logs, slack)
	assertNoSecrets(t, "the log", logs.String(), secret)
}

// callOnce has the model call tool (with no arguments; the policy allows
// it) on a mention in #general, then answer; it waits for the answer in
// the thread and returns the tool's result as the model got it.
func callOnce(t *testing.T, slack *fakeslack.Server, model *fakeopenai.Server, logs *syncBuffer, tool, answer string) string {
	t.Helper()
	model.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: tool, Arguments: `{}`}),
		fakeopenai.Text(answer),
	)
	ts := slack.Mention("CGENERAL1", "UREQUEST1", "please call "+tool)
	if _, err := slack.WaitMessage("CGENERAL1", func(m fakeslack.Message) bool {
		return m.BotID != "" && m.ThreadTS == ts && strings.Contains(m.Text+string(m.Blocks), answer)
	}, 15*time.Second); err != nil {
		t.Fatalf("no answer in the thread: %v\nlogs:\n%s", err, logs)
	}
	reqs := model.Requests()
	if len(reqs) < 2 {
		t.Fatalf("the model got %d requests, want 2", len(reqs))
	}
	last := reqs[len(reqs)-1]
	return last.Messages[len(last.Messages)-1].Content
}
