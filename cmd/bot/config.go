package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/telemetry"
)

// defaultOpenAIBaseURL is OpenAI's own endpoint, the default of
// OPENAI_BASE_URL.
const defaultOpenAIBaseURL = "https://api.openai.com/v1"

// minPollInterval is the shortest SWEEP_INTERVAL and TAKEOVER_INTERVAL:
// each is the period of a ticker on every replica that queries the store,
// and a nanosecond, say, would have every replica query it in a tight
// loop. It is under the shortest the tests set through the environment
// (TAKEOVER_INTERVAL=200ms in the crash tests).
const minPollInterval = 100 * time.Millisecond

// config is the bot's whole configuration, read from the environment with
// envconfig. Each field names its variable exactly (there is no prefix);
// `bot --help` prints them all from these tags.
type config struct {
	SlackAppToken     string        `envconfig:"SLACK_APP_TOKEN" desc:"app-level token (xapp-…) with connections:write, for Socket Mode; required"`
	SlackBotToken     string        `envconfig:"SLACK_BOT_TOKEN" desc:"bot token (xoxb-…); required"`
	SlackAPIURL       string        `envconfig:"SLACK_API_URL" desc:"Slack Web API base URL; empty means Slack's (tests and the playground point it at a fake)"`
	OpenAIAPIKey      string        `envconfig:"OPENAI_API_KEY" desc:"API key of the model endpoint; required for OpenAI, optional for local servers"`
	OpenAIBaseURL     string        `envconfig:"OPENAI_BASE_URL" default:"https://api.openai.com/v1" desc:"any OpenAI-compatible Chat Completions endpoint (OpenAI, Azure, Ollama, vLLM, LiteLLM)"`
	OpenAIModel       string        `envconfig:"OPENAI_MODEL" default:"gpt-4o-mini" desc:"model name (the deployment name on Azure)"`
	RedisURL          string        `envconfig:"REDIS_URL" desc:"redis://, rediss://, redis+cluster:// or redis+sentinel:// URL; empty: the embedded store in DATA_DIR"`
	RedisPrefix       string        `envconfig:"REDIS_PREFIX" default:"toolgate" desc:"prefix of every Redis key, so several bots can share one database; no { or }"`
	RedisWaitReplicas int           `envconfig:"REDIS_WAIT_REPLICAS" default:"0" desc:"replicas each Redis write must reach (WAIT) before the bot counts it done, so that a failover loses no decision or message; 0: off (replication is asynchronous); not on redis+cluster://"`
	RedisWaitTimeout  time.Duration `envconfig:"REDIS_WAIT_TIMEOUT" default:"1s" desc:"how long a Redis write waits for REDIS_WAIT_REPLICAS replicas before it fails"`
	DataDir           string        `envconfig:"DATA_DIR" default:"./data" desc:"directory of the embedded store's file (toolgate.db) when REDIS_URL is empty"`
	ConfigFile        string        `envconfig:"CONFIG_FILE" desc:"YAML file with mcp_servers, builtin_tools and policy; empty: no tools, every call asks"`
	AdminUsers        []string      `envconfig:"ADMIN_USERS" desc:"comma-separated Slack user ids who may change the policy (workspace admins and owners always may)"`
	ApprovalTTL       time.Duration `envconfig:"APPROVAL_TTL" default:"72h" desc:"how long a pending approval waits when its rule sets no ttl"`
	ReminderAfter     time.Duration `envconfig:"REMINDER_AFTER" default:"1h" desc:"how long a pending approval waits before its approvers are reminded (again when a quarter of its TTL is left); 0 turns reminders off"`
	RememberTTL       time.Duration `envconfig:"REMEMBER_TTL" default:"720h" desc:"how long an \"Always allow here\" rule lasts; 0 keeps it until revoked"`
	AuditRetention    time.Duration `envconfig:"AUDIT_RETENTION" default:"2160h" desc:"how long audit entries are kept (2160h is 90 days), at most AUDIT_MAX_ENTRIES of them; each entry is also logged as msg=audit"`
	AuditMaxEntries   int           `envconfig:"AUDIT_MAX_ENTRIES" default:"10000" desc:"how many audit entries are kept at most (each tool call makes two or more); the oldest beyond are deleted even within AUDIT_RETENTION"`
	HTTPAddr          string        `envconfig:"HTTP_ADDR" default:":8080" desc:"listen address of /healthz, /readyz and /metrics"`
	ApprovalsChannel  string        `envconfig:"APPROVALS_CHANNEL" desc:"channel id for cards whose approvers cannot see the conversation (those not in it get a DM); empty: DM each approver"`
	LogLevel          string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	LogFormat         string        `envconfig:"LOG_FORMAT" default:"json" desc:"json, or text for humans"`
	MaxSteps          int           `envconfig:"MAX_STEPS" default:"10" desc:"model calls allowed in one turn"`
	MaxCallsPerStep   int           `envconfig:"MAX_CALLS_PER_STEP" default:"32" desc:"tool calls judged in one model step; the model is told the rest were not performed"`
	MaxToolResult     int           `envconfig:"MAX_TOOL_RESULT_BYTES" default:"16384" desc:"bytes of a tool's result the model is given, whatever the tool's own limit; the rest is cut with a note"`
	MaxTurns          int           `envconfig:"MAX_TURNS" default:"1000" desc:"turns running at once; more wait in arrival order and their thread is told"`
	SweepInterval     time.Duration `envconfig:"SWEEP_INTERVAL" default:"30s" desc:"how often decided runs whose resume was lost in a crash are resumed; at least 100ms"`
	SystemPrompt      string        `envconfig:"SYSTEM_PROMPT" desc:"system prompt of every model request; empty: the built-in one"`
	OpenAIAPIVersion  string        `envconfig:"OPENAI_API_VERSION" desc:"Azure OpenAI API version (such as 2024-10-21); set, or an OPENAI_BASE_URL host ending in .openai.azure.com, means Azure (OPENAI_BASE_URL is then the resource endpoint)"`
	ModelTimeout      time.Duration `envconfig:"MODEL_TIMEOUT" default:"2m" desc:"bound on one model request, streaming included"`
	ModelRetries      int           `envconfig:"MODEL_RETRIES" default:"3" desc:"retries of a model request that failed with 429, 5xx, a reset or a time-out before any output; 0: none"`
	ModelMaxTokens    int           `envconfig:"MODEL_MAX_TOKENS" default:"0" desc:"tokens the model may generate per answer; 0 leaves it to the server"`
	ModelMaxTools     int           `envconfig:"MODEL_MAX_TOOLS" default:"128" desc:"tools the model may be offered, built-in and MCP together; more refuse the start (128 is OpenAI's limit: raise it for a server that accepts more); 0: no limit"`
	ContextBudget     int           `envconfig:"CONTEXT_BUDGET" default:"64000" desc:"estimated tokens of each model request (system prompt, tool schemas and history); older tool output and messages are dropped first"`
	ToolTimeout       time.Duration `envconfig:"TOOL_TIMEOUT" default:"2m" desc:"bound on one tool execution; a built-in tool's timeout may not be longer"`
	ShutdownGrace     time.Duration `envconfig:"SHUTDOWN_GRACE" default:"30s" desc:"how long in-flight work may take to finish after SIGTERM (keep the orchestrator's grace period longer)"`
	RunRetention      time.Duration `envconfig:"RUN_RETENTION" default:"168h" desc:"how long a finished or expired run and its calls are kept in the store (at least 1h); also how long past its deadline a run is kept whose calls the bot could not expire, or resume once decided, for being stopped"`
	OTELEndpoint      string        `envconfig:"OTEL_EXPORTER_OTLP_ENDPOINT" desc:"OTLP/HTTP collector for traces (such as http://otel-collector:4318); empty: no tracing. The other standard OTEL_* variables apply"`
	OTELCapture       bool          `envconfig:"OTEL_CAPTURE_CONTENT" default:"false" desc:"put tool arguments and output and model messages in spans; off, spans carry none"`
	LeaseTTL          time.Duration `envconfig:"LEASE_TTL" default:"10s" desc:"lease on a conversation while a turn or resume runs, renewed every third of it; a dead replica's work is taken over once it lapses"`
	TakeoverInterval  time.Duration `envconfig:"TAKEOVER_INTERVAL" default:"5s" desc:"how often each replica looks for conversations whose turn died with its replica and takes them over; at least 100ms"`
	Pprof             bool          `envconfig:"PPROF" default:"false" desc:"serve Go's profiler under /debug/pprof/ on HTTP_ADDR; keep HTTP_ADDR private when on"`
}

// usageFormat is the envconfig.Usagef template of --help: one row per
// variable, aligned by a tabwriter.
const usageFormat = `VARIABLE	DEFAULT	MEANING
{{range .}}{{usage_key .}}	{{with usage_default .}}{{.}}{{else}}-{{end}}	{{usage_description .}}
{{end}}`

// printUsage writes the --help text to w.
func printUsage(w io.Writer) error {
	fmt.Fprint(w, `Usage: bot
       bot policy check|test ...   (offline policy checks, see bot policy -h)

Toolgate is a Slack bot (Socket Mode) that runs an LLM agent. Every tool call
the model makes is judged by a policy; risky calls wait for a human to approve
them on a Block Kit card.

The bot itself takes no arguments: it is configured by these environment
variables.

`)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if err := envconfig.Usagef("", &config{}, tw, usageFormat); err != nil {
		return fmt.Errorf("print usage: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("print usage: %w", err)
	}
	_, err := fmt.Fprint(w, `
HTTP endpoints on HTTP_ADDR: /healthz (the process runs), /readyz (Socket Mode
connected and the store reachable; MCP servers are reported but do not count),
/metrics (Prometheus).
`)
	return err
}

// configError is a problem with the configuration: a missing or malformed
// variable, an unreachable REDIS_URL or a config file that does not parse.
// The process exits with status 2 on it.
type configError = botsetup.ConfigError

// configErrorf returns a *configError with a formatted message.
func configErrorf(format string, args ...any) error {
	return &configError{Err: fmt.Errorf(format, args...)}
}

// loadConfig reads the configuration from the process environment and checks
// it. Every error is a *configError naming the variable at fault; it never
// contains a token.
func loadConfig() (config, error) {
	var c config
	if err := envconfig.Process("", &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return config{}, configErrorf("%s: %q is not %s", pe.KeyName, pe.Value, describeType(pe.TypeName))
		}
		return config{}, &configError{Err: err}
	}
	for i, u := range c.AdminUsers {
		c.AdminUsers[i] = strings.TrimSpace(u)
	}
	if err := c.validate(); err != nil {
		return config{}, &configError{Err: err}
	}
	if err := c.validateOps(); err != nil {
		return config{}, &configError{Err: err}
	}
	return c, nil
}

// describeType names what a value of an envconfig field type must be.
func describeType(typ string) string {
	switch typ {
	case "time.Duration":
		return `a duration (such as "72h" or "90m")`
	case "int":
		return "a whole number"
	default:
		return "a valid " + typ
	}
}

// validate checks what envconfig cannot: required values, token shapes,
// ranges and enumerations. Token values are never quoted in the errors.
func (c *config) validate() error {
	for _, v := range []struct{ name, value string }{
		{"SLACK_APP_TOKEN", c.SlackAppToken}, {"SLACK_BOT_TOKEN", c.SlackBotToken}, {"OPENAI_API_KEY", c.OpenAIAPIKey}, {"OPENAI_MODEL", c.OpenAIModel},
	} {
		if strings.TrimSpace(v.value) != v.value {
			// A secret written to a file with its line's end, say.
			return fmt.Errorf("%s has spaces or a line break at its start or end: remove them", v.name)
		}
	}
	switch {
	case c.SlackAppToken == "":
		return errors.New("SLACK_APP_TOKEN is required (xapp-…, an app-level token with connections:write)")
	case !strings.HasPrefix(c.SlackAppToken, "xapp-"):
		return errors.New("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
	case placeholderToken(c.SlackAppToken, "xapp-"):
		return errors.New("SLACK_APP_TOKEN is still the placeholder of .env.example: paste the app-level token from the app's Basic Information page, App-Level Tokens (xapp-1-…)")
	case c.SlackBotToken == "":
		return errors.New("SLACK_BOT_TOKEN is required (xoxb-…)")
	case !strings.HasPrefix(c.SlackBotToken, "xoxb-"):
		return errors.New("SLACK_BOT_TOKEN must be a bot token starting with xoxb-")
	case placeholderToken(c.SlackBotToken, "xoxb-"):
		return errors.New("SLACK_BOT_TOKEN is still the placeholder of .env.example: paste the Bot User OAuth Token from the app's OAuth & Permissions page (xoxb-…)")
	}
	if c.SlackAPIURL != "" {
		if err := checkHTTPURL(c.SlackAPIURL); err != nil {
			return fmt.Errorf("SLACK_API_URL: %w", err)
		}
	}
	if err := checkHTTPURL(c.OpenAIBaseURL); err != nil {
		return fmt.Errorf("OPENAI_BASE_URL: %w", err)
	}
	if c.OpenAIAPIKey == "" && strings.TrimRight(c.OpenAIBaseURL, "/") == defaultOpenAIBaseURL {
		return errors.New("OPENAI_API_KEY is required for " + defaultOpenAIBaseURL + " (set OPENAI_BASE_URL for a server that needs no key)")
	}
	if c.OpenAIModel == "" {
		return errors.New("OPENAI_MODEL must not be empty")
	}
	if c.RedisPrefix == "" || strings.ContainsAny(c.RedisPrefix, "{}") {
		return fmt.Errorf("REDIS_PREFIX: %q must be non-empty and contain no { or }", c.RedisPrefix)
	}
	if c.RedisURL == "" && c.DataDir == "" {
		return errors.New("DATA_DIR must not be empty when REDIS_URL is not set")
	}
	if c.RedisWaitReplicas < 0 {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %d is negative; 0 turns the wait for replicas off", c.RedisWaitReplicas)
	}
	if c.RedisWaitReplicas > 0 && c.RedisWaitTimeout < time.Millisecond {
		return fmt.Errorf("REDIS_WAIT_TIMEOUT: %s is under 1ms; a write waits that long for REDIS_WAIT_REPLICAS replicas, in whole milliseconds (1s, say)", c.RedisWaitTimeout)
	}
	if c.RedisWaitReplicas > 0 && strings.Contains(c.RedisURL, "+cluster://") {
		return errors.New("REDIS_WAIT_REPLICAS is not supported with Redis Cluster (redis+cluster://): go-redis sends a WAIT, which has no key, to any node, where it does not count the write; unset it, or use one primary with replicas, or Sentinel")
	}
	// A trailing comma, or a doubled one, names no one.
	c.AdminUsers = slices.DeleteFunc(c.AdminUsers, func(u string) bool { return strings.TrimSpace(u) == "" })
	for _, u := range c.AdminUsers {
		if !isUserID(u) {
			return fmt.Errorf("ADMIN_USERS: %q is not a Slack user id (U… or W…)", u)
		}
	}
	if c.ApprovalsChannel != "" && !isChannelID(c.ApprovalsChannel) {
		return fmt.Errorf("APPROVALS_CHANNEL: %q is not a channel id (C… or G…; it is shown at the bottom of the channel's details, not its #name)", c.ApprovalsChannel)
	}
	if c.ReminderAfter < 0 {
		return fmt.Errorf("REMINDER_AFTER: %s is negative; 0 turns reminders off", c.ReminderAfter)
	}
	if c.RememberTTL < 0 {
		return fmt.Errorf("REMEMBER_TTL: %s is negative", c.RememberTTL)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("LEASE_TTL: %s is under 1s", c.LeaseTTL)
	}
	if c.TakeoverInterval <= 0 {
		return fmt.Errorf("TAKEOVER_INTERVAL: %s is not positive", c.TakeoverInterval)
	}
	if c.TakeoverInterval < minPollInterval {
		return fmt.Errorf("TAKEOVER_INTERVAL: %s is under %s: every replica would query the store in a tight loop", c.TakeoverInterval, minPollInterval)
	}
	if c.AuditRetention <= 0 {
		return fmt.Errorf("AUDIT_RETENTION: %s is not positive", c.AuditRetention)
	}
	if c.AuditMaxEntries < 1 {
		return fmt.Errorf("AUDIT_MAX_ENTRIES: %d is not positive", c.AuditMaxEntries)
	}
	if c.ApprovalTTL <= 0 {
		return fmt.Errorf("APPROVAL_TTL: %s is not positive", c.ApprovalTTL)
	}
	if c.ApprovalTTL > approvals.MaxTTL {
		return fmt.Errorf("APPROVAL_TTL: %s is longer than 672h (28 days: a conversation is kept 30 days after its last turn)", c.ApprovalTTL)
	}
	if c.HTTPAddr == "" {
		return errors.New("HTTP_ADDR must not be empty")
	}
	if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return fmt.Errorf("HTTP_ADDR: %q is not host:port (such as :8080 or 127.0.0.1:8080)", c.HTTPAddr)
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("HTTP_ADDR: %q has no port number from 0 to 65535", c.HTTPAddr)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return fmt.Errorf("LOG_LEVEL: %w", err)
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		return fmt.Errorf("LOG_FORMAT: %q is not json or text", c.LogFormat)
	}
	if c.MaxSteps < 1 {
		return fmt.Errorf("MAX_STEPS: %d is not at least 1", c.MaxSteps)
	}
	if c.MaxCallsPerStep < 1 {
		return fmt.Errorf("MAX_CALLS_PER_STEP: %d is not at least 1", c.MaxCallsPerStep)
	}
	if c.MaxToolResult < 1024 {
		return fmt.Errorf("MAX_TOOL_RESULT_BYTES: %d is less than 1024", c.MaxToolResult)
	}
	if c.MaxTurns < 1 {
		return fmt.Errorf("MAX_TURNS: %d is not at least 1", c.MaxTurns)
	}
	if c.SweepInterval <= 0 {
		return fmt.Errorf("SWEEP_INTERVAL: %v is not positive", c.SweepInterval)
	}
	if c.SweepInterval < minPollInterval {
		return fmt.Errorf("SWEEP_INTERVAL: %s is under %s: every replica would query the store in a tight loop", c.SweepInterval, minPollInterval)
	}
	return telemetry.CheckEnv(os.Getenv)
}

// checkHTTPURL accepts absolute http and https URLs.
func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http or https URL", redact.SafeURL(raw))
	}
	return nil
}

// placeholderToken reports whether tok is its prefix alone, as in
// .env.example, or a stand-in for a token ("xoxb-…", "xapp-...",
// "xoxb-xxxx", "xoxb-<your token>", "xoxb-YOUR_TOKEN", "xoxb-changeme"),
// never a token Slack issued. A Slack token is runs of letters and digits
// between hyphens, the last one random, so a stand-in is told by
// characters no token has or by a word that is a whole run, never by
// letters within a run: a random one spells "your" in about one bot token
// in 44,000.
func placeholderToken(tok, prefix string) bool {
	rest := strings.TrimPrefix(tok, prefix)
	if strings.Trim(rest, ".…xX*-_ ") == "" {
		return true
	}
	if strings.ContainsAny(rest, "…<>") || strings.Contains(rest, "...") {
		return true
	}
	words := strings.FieldsFunc(strings.ToLower(rest), func(r rune) bool { return r == '-' || r == '_' || r == ' ' })
	for _, w := range words {
		if w == "your" || w == "changeme" || w == "replace" {
			return true
		}
	}
	return false
}

// isUserID reports whether s looks like a Slack user id.
func isUserID(s string) bool { return isSlackID(s, "UW") }

func isChannelID(s string) bool { return isSlackID(s, "CG") }

// isSlackID reports whether s is a Slack id starting with one of prefixes:
// that letter, then upper-case letters and digits.
func isSlackID(s, prefixes string) bool {
	if len(s) < 2 || !strings.ContainsRune(prefixes, rune(s[0])) {
		return false
	}
	for _, r := range s[1:] {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// parseLevel reads a log level name: debug, info, warn or error, in any
// case. slog's offsets ("info+2") are refused: they are not documented, and
// a level between the named ones would drop lines without saying which.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
}
