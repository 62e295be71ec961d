package tools

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the tools part of the bot's configuration file: the MCP servers
// to connect and the built-in tools to offer.
type Config struct {
	// Servers are the MCP servers, in file order.
	Servers []ServerConfig
	// Builtins says which built-in tools are enabled and how.
	Builtins BuiltinConfig

	// secrets are the values ParseConfig expanded that may be secret; see
	// Secrets.
	secrets []string
	// credentials are those of secrets that stand for credentials (the
	// values of headers, env and a url's parts), not for where a program
	// is or runs (command arguments, dir): they are also redacted from the
	// tools' output (see redactedTool), which names paths.
	credentials []string
}

// Secrets returns the values of the configuration that may be secret, for a
// caller to redact from its logs and error messages. They are the values
// [ParseConfig] got from ${VAR} references, for each value that has one:
//
//   - an MCP server's command arguments (the program included), dir,
//     header values and env values, and run_command's env values, each
//     whole as expanded;
//   - the user information, the path and the query of an MCP server's url,
//     each whole as expanded, when that part of the url as written has a
//     reference (the scheme and host are not secrets);
//   - the value of every variable referenced in them, as is and, for the
//     url, escaped as in a URL path and in a query.
//
// Values written in the file without a reference are not returned, nor is
// anything of a Config not made by ParseConfig. The result is sorted and
// has no duplicates or empty strings.
func (c Config) Secrets() []string {
	return slices.Clone(c.secrets)
}

// ServerConfig is one entry of mcp_servers. Exactly one of Command (a stdio
// server) and URL (a streamable HTTP server) is set.
type ServerConfig struct {
	// Name prefixes the server's tools: the model sees <Name>__<tool>.
	Name string
	// Command is the argv of a stdio server.
	Command []string
	// Env is added to the stdio server's environment (see [Manager]).
	Env map[string]string
	// Dir is the stdio server's working directory.
	Dir string
	// URL is the endpoint of a streamable HTTP server.
	URL string
	// Headers are sent with every request to an HTTP server's endpoint
	// (its scheme, host and port), not to a host it redirects to.
	Headers map[string]string
	// MaxOutputBytes caps the text of a tool result given to the model;
	// longer results are truncated with a note. Zero means
	// DefaultMCPMaxOutputBytes.
	MaxOutputBytes int64
	// Preview maps a tool of the server to a read-only tool of the same
	// server that takes the same arguments and returns, as text, what the
	// call would do. It runs when a call pauses for approval, and its
	// answer is shown on the card. The server's tools are refused (the
	// server reported down) while a preview tool is missing or not
	// annotated readOnlyHint.
	Preview map[string]string
}

// BuiltinConfig enables built-in tools one by one; a nil field means the
// tool is off.
type BuiltinConfig struct {
	AskHuman    *AskHumanConfig
	HTTPRequest *HTTPConfig
	RunCommand  *CommandConfig
	Workspace   *WorkspaceConfig
}

// Names returns the names of the built-in tools b enables, as Builtins
// registers them.
func (b BuiltinConfig) Names() []string {
	var out []string
	if b.AskHuman != nil {
		out = append(out, "ask_human")
	}
	if b.HTTPRequest != nil {
		out = append(out, "http_get", "http_request")
	}
	if b.RunCommand != nil {
		out = append(out, "run_command")
	}
	if b.Workspace != nil {
		out = append(out, "workspace_list", "workspace_read", "workspace_write", "workspace_delete")
	}
	return out
}

// Schemas returns the argument schemas of the built-in tools b enables,
// by name, as Builtins registers them: known without making the tools
// (which would open their directories), for offline checks.
func (b BuiltinConfig) Schemas() map[string]json.RawMessage {
	all := map[string]json.RawMessage{
		"run_command":      schemaRunCommand,
		"http_get":         schemaHttpGet,
		"http_request":     schemaHttpRequest,
		"ask_human":        schemaAskHuman,
		"workspace_list":   schemaWorkspaceList,
		"workspace_read":   schemaWorkspaceRead,
		"workspace_write":  schemaWorkspaceWrite,
		"workspace_delete": schemaWorkspaceDelete,
	}
	out := map[string]json.RawMessage{}
	for _, name := range b.Names() {
		out[name] = all[name]
	}
	return out
}

// AskHumanConfig enables ask_human. It has no settings.
type AskHumanConfig struct{}

// HTTPConfig configures http_get and http_request.
type HTTPConfig struct {
	// AllowedHosts are host names ("api.github.com") or suffix globs
	// ("*.internal.example", which matches any subdomain but not the bare
	// domain), optionally with a port. Without a port only the scheme's
	// default port matches (80 for http, 443 for https); "host:8080" allows
	// port 8080 only and "host:*" any port. Matching is case-insensitive.
	AllowedHosts []string
	// MaxResponseBytes caps the response body given to the model; longer
	// bodies are truncated with a note.
	MaxResponseBytes int64
	// Timeout bounds a whole request, redirects and body included.
	Timeout time.Duration
	// ReadOnly registers only http_get (GET and HEAD).
	ReadOnly bool
}

// CommandConfig configures run_command.
type CommandConfig struct {
	// Allow lists the executables that may run: absolute paths, or bare
	// names looked up in PATH.
	Allow []string
	// Dir is the working directory; a call may pick a directory inside it.
	Dir string
	// Env is added to the minimal environment commands run with.
	Env map[string]string
	// Timeout bounds a run; the whole process group is killed after it.
	Timeout time.Duration
	// MaxOutputBytes caps the combined stdout and stderr kept.
	MaxOutputBytes int64
	// AllowOverlap lets Dir and the workspace root overlap (one inside the
	// other). Without it [ParseConfig] refuses such a configuration: a file
	// the model writes there, such as .git/config or a Makefile, could make
	// an allowed program run arbitrary code.
	AllowOverlap bool
}

// WorkspaceConfig configures the workspace_* tools.
type WorkspaceConfig struct {
	// Root is the directory the tools may touch; it is created (mode 0750)
	// if it does not exist. A relative root is resolved against the
	// working directory when the configuration is loaded.
	Root string
	// MaxFileBytes caps what workspace_read returns and what
	// workspace_write accepts.
	MaxFileBytes int64
}

// CheckTimeouts refuses a built-in tool whose timeout (its default when
// left out) is longer than limit, the bound the bot puts on every tool
// call, which limitName names (such as TOOL_TIMEOUT): the call would be
// cut at limit while the tool tells the model it has longer.
func (b BuiltinConfig) CheckTimeouts(limit time.Duration, limitName string) error {
	type timeout struct {
		tool     string
		d, deflt time.Duration
	}
	var ts []timeout
	if b.HTTPRequest != nil {
		ts = append(ts, timeout{"http_request", b.HTTPRequest.Timeout, DefaultHTTPTimeout})
	}
	if b.RunCommand != nil {
		ts = append(ts, timeout{"run_command", b.RunCommand.Timeout, DefaultCommandTimeout})
	}
	for _, t := range ts {
		d := orDefault(t.d, t.deflt)
		if d <= limit {
			continue
		}
		what := d.String()
		if d == t.deflt {
			what += ", also its default"
		}
		return fmt.Errorf("builtin_tools.%s.timeout (%s) is longer than %s (%s), which bounds every tool call, so a call would be cut before it: set the timeout to %s or less, or raise %s", t.tool, what, limitName, limit, limit, limitName)
	}
	return nil
}

// Defaults for settings left out of the configuration file.
const (
	DefaultHTTPMaxResponseBytes  = 64 << 10
	DefaultHTTPTimeout           = 10 * time.Second
	DefaultCommandTimeout        = 30 * time.Second
	DefaultCommandMaxOutputBytes = 64 << 10
	DefaultWorkspaceMaxFileBytes = 1 << 20
	DefaultMCPMaxOutputBytes     = 64 << 10
)

// MaxServerNameLen is the longest server name allowed, leaving room for the
// tool name after "<server>__" within OpenAI's 64 characters.
const MaxServerNameLen = 32

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// ParseConfig reads the mcp_servers and builtin_tools sections of the whole
// configuration file; other top-level keys are ignored. ${VAR} in a
// server's command, env, dir, url and headers is replaced by the
// environment variable VAR, which must be set and not empty; a "${" that
// does not start such a reference is an error. Unknown keys, keys given
// twice, a top-level merge key and bad values are errors naming the YAML
// line. Defaults fill settings left out.
func ParseConfig(data []byte) (Config, error) {
	return parseConfig(data, os.LookupEnv)
}

// CheckConfig checks the mcp_servers and builtin_tools sections of a
// configuration file as ParseConfig does, offline and without the
// environment its ${VAR}s name: a variable that is unset or empty stands
// for "1" (which fits a host, a port, a path or a token), so a CI job
// without the bot's secrets finds every other mistake the bot would refuse
// to start with. Nothing is connected to or opened. The Config it returns
// holds the placeholders: it is for further checks, not for loading tools.
func CheckConfig(data []byte) (Config, error) {
	return parseConfig(data, func(name string) (string, bool) {
		if v := os.Getenv(name); v != "" {
			return v, true
		}
		return unsetPlaceholder, true
	})
}

// unsetPlaceholder is what CheckConfig puts for a ${VAR} that is not set;
// such a variable that begins a url stands for placeholderURL's scheme and
// host.
const (
	unsetPlaceholder = "1"
	placeholderURL   = "https://placeholder.invalid/"
)

// parsing is the state of one parse: the expanded values that may be
// secret, and where ${VAR}s are looked up.
type parsing struct {
	secrets     []string
	credentials []string
	lookup      func(string) (string, bool)
}

func parseConfig(data []byte, lookup func(string) (string, bool)) (Config, error) {
	p := &parsing{lookup: lookup}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	var cfg Config
	if len(doc.Content) == 0 {
		return cfg, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return Config{}, fmt.Errorf("parse config: line %d: the file must be a mapping", root.Line)
	}
	if err := UniqueKeys(root, ""); err != nil {
		return Config{}, fmt.Errorf("parse config: %w", err)
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		key, val := root.Content[i], root.Content[i+1]
		if key.Tag == "!!merge" {
			// Sections merged from an anchor would be read by the policy's
			// parser and not by this one.
			return Config{}, fmt.Errorf("parse config: %w", TopLevelMergeError(key.Line))
		}
		var err error
		switch key.Value {
		case "mcp_servers":
			cfg.Servers, err = p.servers(val)
		case "builtin_tools":
			cfg.Builtins, err = p.builtins(val)
		}
		if err != nil {
			return Config{}, fmt.Errorf("parse config: %w", err)
		}
	}
	cfg.credentials = slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(p.credentials))), func(v string) bool { return v == "" })
	cfg.secrets = p.secrets
	if len(cfg.secrets) > 0 {
		slices.Sort(cfg.secrets)
		cfg.secrets = slices.Compact(cfg.secrets)
		if cfg.secrets[0] == "" {
			cfg.secrets = cfg.secrets[1:]
		}
	}
	return cfg, nil
}

// refSecrets appends to secrets what Config.Secrets says of raw, a value
// as written: if it has a ${VAR} reference, raw expanded and the value of
// each variable it references.
func (p *parsing) refSecrets(raw string) {
	refs := envRef.FindAllStringSubmatch(raw, -1)
	if len(refs) == 0 {
		return
	}
	v, _ := p.expand(raw)
	p.secrets = append(p.secrets, v)
	for _, r := range refs {
		v, _ := p.lookup(r[1])
		p.secrets = append(p.secrets, v)
	}
}

// credentialRefs is refSecrets of raw, a credential's value: what it
// appends to the secrets it appends to the credentials too.
func (p *parsing) credentialRefs(raw string) {
	n := len(p.secrets)
	p.refSecrets(raw)
	p.credentials = append(p.credentials, p.secrets[n:]...)
}

// urlRefSecrets appends the secrets of a url as written: its user
// information, path and query when they have references. They are
// credentials too.
func (p *parsing) urlRefSecrets(raw string) {
	n := len(p.secrets)
	defer func() { p.credentials = append(p.credentials, p.secrets[n:]...) }()
	rest := raw
	if _, after, ok := strings.Cut(rest, "://"); ok {
		rest = after
	}
	authority, tail := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, tail = rest[:i], rest[i:]
	}
	tail, _, _ = strings.Cut(tail, "#")
	path, query, _ := strings.Cut(tail, "?")
	var parts []string
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		parts = append(parts, authority[:i])
	}
	parts = append(parts, path, query)
	for _, part := range parts {
		p.refSecrets(part)
		for _, r := range envRef.FindAllStringSubmatch(part, -1) {
			v, _ := p.lookup(r[1])
			p.secrets = append(p.secrets, url.PathEscape(v), url.QueryEscape(v))
		}
	}
}

func (p *parsing) servers(n *yaml.Node) ([]ServerConfig, error) {
	if isNull(n) {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: mcp_servers must be a list", n.Line)
	}
	seen := map[string]int{}
	var out []ServerConfig
	for _, item := range n.Content {
		if err := checkKeys(item, "mcp server", "name", "command", "env", "dir", "url", "headers", "max_output_bytes", "preview"); err != nil {
			return nil, err
		}
		var raw struct {
			Name           string            `yaml:"name"`
			Command        []string          `yaml:"command"`
			Env            map[string]string `yaml:"env"`
			Dir            string            `yaml:"dir"`
			URL            string            `yaml:"url"`
			Headers        map[string]string `yaml:"headers"`
			MaxOutputBytes int64             `yaml:"max_output_bytes"`
			Preview        map[string]string `yaml:"preview"`
		}
		if err := item.Decode(&raw); err != nil {
			return nil, fmt.Errorf("mcp server: %w", decodeError(err))
		}
		s, err := p.newServerConfig(raw.Name, raw.Command, raw.Env, raw.Dir, raw.URL, raw.Headers)
		if err != nil {
			return nil, fmt.Errorf("line %d: mcp server %q: %w", item.Line, raw.Name, err)
		}
		if raw.MaxOutputBytes < 0 {
			return nil, fmt.Errorf("line %d: mcp server %q: max_output_bytes must be positive, got %d", item.Line, raw.Name, raw.MaxOutputBytes)
		}
		s.MaxOutputBytes = orDefault(raw.MaxOutputBytes, DefaultMCPMaxOutputBytes)
		for tool, preview := range raw.Preview {
			switch {
			case tool == "" || preview == "":
				return nil, fmt.Errorf("line %d: mcp server %q: preview: tool names must not be empty", item.Line, raw.Name)
			case tool == preview:
				return nil, fmt.Errorf("line %d: mcp server %q: preview: %q cannot preview itself", item.Line, raw.Name, tool)
			}
		}
		s.Preview = raw.Preview
		if line, ok := seen[s.Name]; ok {
			return nil, fmt.Errorf("line %d: mcp server %q: name already used on line %d", item.Line, s.Name, line)
		}
		seen[s.Name] = item.Line
		for _, v := range raw.Command {
			p.refSecrets(v)
		}
		p.refSecrets(raw.Dir)
		for _, v := range raw.Env {
			p.credentialRefs(v)
		}
		for _, v := range raw.Headers {
			p.credentialRefs(v)
		}
		p.urlRefSecrets(raw.URL)
		out = append(out, s)
	}
	return out, nil
}

func (p *parsing) newServerConfig(name string, command []string, env map[string]string, dir, url string, headers map[string]string) (ServerConfig, error) {
	if err := checkServerName(name); err != nil {
		return ServerConfig{}, err
	}
	s := ServerConfig{Name: name}
	var err error
	if s.Command, err = p.expandAll(command); err != nil {
		return ServerConfig{}, fmt.Errorf("command: %w", err)
	}
	if loc := envRef.FindStringSubmatchIndex(url); loc != nil && loc[0] == 0 {
		// A url that begins with a variable unset, checked offline: the
		// variable stands for the placeholder's scheme and host (or for
		// the scheme alone, before "://").
		if name := url[loc[2]:loc[3]]; os.Getenv(name) == "" {
			if v, _ := p.lookup(name); v == unsetPlaceholder {
				switch rest := url[loc[1]:]; {
				case rest == "":
					url = placeholderURL
				case strings.HasPrefix(rest, "://"):
					url = "https" + rest
				default:
					url = strings.TrimSuffix(placeholderURL, "/") + rest
				}
			}
		}
	}
	if s.URL, err = p.expand(url); err != nil {
		return ServerConfig{}, fmt.Errorf("url: %w", err)
	}
	if s.Dir, err = p.expand(dir); err != nil {
		return ServerConfig{}, fmt.Errorf("dir: %w", err)
	}
	if s.Env, err = p.expandMap(env); err != nil {
		return ServerConfig{}, fmt.Errorf("env: %w", err)
	}
	if s.Headers, err = p.expandMap(headers); err != nil {
		return ServerConfig{}, fmt.Errorf("headers: %w", err)
	}
	if err := checkHeaders(s.Headers); err != nil {
		return ServerConfig{}, fmt.Errorf("headers: %w", err)
	}
	switch {
	case len(s.Command) == 0 && s.URL == "":
		return ServerConfig{}, errors.New("set either command (a stdio server) or url (an HTTP server)")
	case len(s.Command) > 0 && s.URL != "":
		return ServerConfig{}, errors.New("set only one of command and url")
	case len(s.Command) > 0:
		if s.Command[0] == "" {
			return ServerConfig{}, errors.New("command: the program name is empty")
		}
		if len(s.Headers) > 0 {
			return ServerConfig{}, errors.New("headers only apply to url servers")
		}
	default:
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") {
			return ServerConfig{}, fmt.Errorf("url %q: must start with http:// or https:// (in lower case)", safeURL(s.URL))
		}
		if len(s.Env) > 0 || s.Dir != "" {
			return ServerConfig{}, errors.New("env and dir only apply to command servers")
		}
	}
	return s, nil
}

// checkServerName makes sure "<name>__<tool>" is a valid OpenAI function
// name and that no server's prefix is a prefix of another's.
func checkServerName(name string) error {
	switch {
	case name == "":
		return errors.New("name is required")
	case len(name) > MaxServerNameLen:
		return fmt.Errorf("name is longer than %d characters", MaxServerNameLen)
	case !serverNameRE.MatchString(name):
		return errors.New("name must start with a letter or digit and use only A-Z a-z 0-9 _ -")
	case strings.Contains(name, "__") || strings.HasSuffix(name, "_"):
		return errors.New(`name must not contain "__" or end with "_" (tools are named <server>__<tool>)`)
	}
	return nil
}

func (p *parsing) builtins(n *yaml.Node) (BuiltinConfig, error) {
	var b BuiltinConfig
	if isNull(n) {
		return b, nil
	}
	if err := checkKeys(n, "builtin_tools", "ask_human", "http_request", "run_command", "workspace"); err != nil {
		return b, err
	}
	if err := UniqueKeys(n, "builtin_tools"); err != nil {
		return b, err
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, val := n.Content[i], n.Content[i+1]
		var err error
		switch key.Value {
		case "ask_human":
			b.AskHuman, err = parseAskHuman(val)
		case "http_request":
			b.HTTPRequest, err = parseHTTP(val)
		case "run_command":
			b.RunCommand, err = p.command(val)
		case "workspace":
			b.Workspace, err = parseWorkspace(val)
		}
		if err != nil {
			return b, fmt.Errorf("builtin_tools.%s: %w", key.Value, err)
		}
	}
	if c, w := b.RunCommand, b.Workspace; c != nil && w != nil && !c.AllowOverlap && overlap(c.Dir, w.Root) {
		return b, fmt.Errorf("builtin_tools: run_command.dir %s and workspace.root %s overlap: "+
			"a file written with workspace_write (such as .git/config or a Makefile) could make an allowed program run arbitrary code; "+
			"use separate directories, or set allow_overlap: true in run_command to accept the risk", c.Dir, w.Root)
	}
	return b, nil
}

// overlap reports whether directory a is b or lies inside it, or the other
// way round, as written or with symlinks resolved.
func overlap(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	if inside(a, b) || inside(b, a) {
		return true
	}
	ra, rb := resolveExisting(a), resolveExisting(b)
	return inside(ra, rb) || inside(rb, ra)
}

// inside reports whether the clean path a is b or lies inside it.
func inside(a, b string) bool {
	rel, err := filepath.Rel(b, a)
	return err == nil && filepath.IsLocal(rel) // "." is local
}

// CheckReach refuses a workspace root or run_command dir that is path or
// holds it: path is a file or directory of the bot's own that no tool may
// read or change, such as the embedded store's directory (every
// conversation) or the config file (the policy), and setting names it
// (DATA_DIR, CONFIG_FILE). A relative path is taken from the working
// directory, as a relative workspace root is; paths are compared clean,
// as written and with the symlinks of their existing part resolved.
func (b BuiltinConfig) CheckReach(setting, path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s: %w", setting, err)
	}
	var dirs []struct{ key, dir string }
	if b.Workspace != nil {
		dirs = append(dirs, struct{ key, dir string }{"workspace.root", b.Workspace.Root})
	}
	if b.RunCommand != nil {
		dirs = append(dirs, struct{ key, dir string }{"run_command.dir", b.RunCommand.Dir})
	}
	for _, d := range dirs {
		dir := filepath.Clean(d.dir)
		if inside(abs, dir) || inside(resolveExisting(abs), resolveExisting(dir)) {
			return fmt.Errorf("builtin_tools.%s %s holds %s %s: the model could read or change it through a tool; "+
				"keep the bot's own files out of the tools' directories", d.key, d.dir, setting, path)
		}
	}
	return nil
}

// resolveExisting is p with the symlinks of its longest existing part
// resolved, and the rest (directories to be created) appended: a root
// created at start is compared where it will be.
func resolveExisting(p string) string {
	rest := ""
	for dir := p; ; {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return p
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

func parseAskHuman(n *yaml.Node) (*AskHumanConfig, error) {
	if err := checkKeys(n, "ask_human"); err != nil {
		return nil, err
	}
	return &AskHumanConfig{}, nil
}

func parseHTTP(n *yaml.Node) (*HTTPConfig, error) {
	if err := checkKeys(n, "http_request", "allowed_hosts", "max_response_bytes", "timeout", "read_only"); err != nil {
		return nil, err
	}
	var raw struct {
		AllowedHosts     []string      `yaml:"allowed_hosts"`
		MaxResponseBytes int64         `yaml:"max_response_bytes"`
		Timeout          time.Duration `yaml:"timeout"`
		ReadOnly         bool          `yaml:"read_only"`
	}
	if err := n.Decode(&raw); err != nil {
		return nil, decodeError(err)
	}
	c := &HTTPConfig{
		AllowedHosts:     raw.AllowedHosts,
		MaxResponseBytes: orDefault(raw.MaxResponseBytes, DefaultHTTPMaxResponseBytes),
		Timeout:          orDefault(raw.Timeout, DefaultHTTPTimeout),
		ReadOnly:         raw.ReadOnly,
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	return c, nil
}

func (c *HTTPConfig) validate() error {
	if len(c.AllowedHosts) == 0 {
		return errors.New("allowed_hosts must list at least one host")
	}
	for _, h := range c.AllowedHosts {
		if err := checkHostPattern(h); err != nil {
			return fmt.Errorf("allowed_hosts: %w", err)
		}
	}
	if c.MaxResponseBytes <= 0 {
		return fmt.Errorf("max_response_bytes must be positive, got %d", c.MaxResponseBytes)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %s", c.Timeout)
	}
	return nil
}

func (p *parsing) command(n *yaml.Node) (*CommandConfig, error) {
	if err := checkKeys(n, "run_command", "allow", "dir", "env", "timeout", "max_output_bytes", "allow_overlap"); err != nil {
		return nil, err
	}
	var raw struct {
		Allow          []string          `yaml:"allow"`
		Dir            string            `yaml:"dir"`
		Env            map[string]string `yaml:"env"`
		Timeout        time.Duration     `yaml:"timeout"`
		MaxOutputBytes int64             `yaml:"max_output_bytes"`
		AllowOverlap   bool              `yaml:"allow_overlap"`
	}
	if err := n.Decode(&raw); err != nil {
		return nil, decodeError(err)
	}
	env, err := p.expandMap(raw.Env)
	if err != nil {
		return nil, fmt.Errorf("line %d: env: %w", n.Line, err)
	}
	c := &CommandConfig{
		Allow:          raw.Allow,
		Dir:            raw.Dir,
		Env:            env,
		Timeout:        orDefault(raw.Timeout, DefaultCommandTimeout),
		MaxOutputBytes: orDefault(raw.MaxOutputBytes, DefaultCommandMaxOutputBytes),
		AllowOverlap:   raw.AllowOverlap,
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	for _, v := range raw.Env {
		p.credentialRefs(v)
	}
	return c, nil
}

func (c *CommandConfig) validate() error {
	if len(c.Allow) == 0 {
		return errors.New("allow must list at least one executable")
	}
	for _, a := range c.Allow {
		switch {
		case a == "":
			return errors.New("allow: empty executable name")
		case strings.ContainsRune(a, filepath.Separator) && !filepath.IsAbs(a):
			return fmt.Errorf("allow: %q must be an absolute path or a bare name", a)
		case filepath.IsAbs(a) && filepath.Clean(a) != a:
			return fmt.Errorf("allow: %q is not a clean path", a)
		}
	}
	if c.Dir == "" {
		return errors.New("dir is required")
	}
	if !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("dir %q must be an absolute path", c.Dir)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %s", c.Timeout)
	}
	if c.MaxOutputBytes <= 0 {
		return fmt.Errorf("max_output_bytes must be positive, got %d", c.MaxOutputBytes)
	}
	return nil
}

func parseWorkspace(n *yaml.Node) (*WorkspaceConfig, error) {
	if err := checkKeys(n, "workspace", "root", "max_file_bytes"); err != nil {
		return nil, err
	}
	var raw struct {
		Root         string `yaml:"root"`
		MaxFileBytes int64  `yaml:"max_file_bytes"`
	}
	if err := n.Decode(&raw); err != nil {
		return nil, decodeError(err)
	}
	c := &WorkspaceConfig{Root: raw.Root, MaxFileBytes: orDefault(raw.MaxFileBytes, DefaultWorkspaceMaxFileBytes)}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n.Line, err)
	}
	return c, nil
}

func (c *WorkspaceConfig) validate() error {
	if c.Root == "" {
		return errors.New("root is required")
	}
	if !filepath.IsAbs(c.Root) {
		// Relative to the bot's working directory, fixed at load.
		abs, err := filepath.Abs(c.Root)
		if err != nil {
			return fmt.Errorf("root %q: %w", c.Root, err)
		}
		c.Root = abs
	}
	if c.MaxFileBytes <= 0 {
		return fmt.Errorf("max_file_bytes must be positive, got %d", c.MaxFileBytes)
	}
	return nil
}

// checkKeys fails on a key of mapping n that is not in allowed. A null node
// (a section written as "ask_human:" with nothing after it) has no keys.
func checkKeys(n *yaml.Node, what string, allowed ...string) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s must be a mapping", n.Line, what)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if !slices.Contains(allowed, k.Value) {
			if len(allowed) == 0 {
				return fmt.Errorf("line %d: unknown key %q in %s (it takes no settings)", k.Line, k.Value, what)
			}
			return fmt.Errorf("line %d: unknown key %q in %s (known: %s)", k.Line, k.Value, what, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// decodeError flattens a YAML type error into one line, with a hint for
// durations.
func decodeError(err error) error {
	te, ok := errors.AsType[*yaml.TypeError](err)
	if !ok {
		return err
	}
	msgs := slices.Clone(te.Errors)
	for i, m := range msgs {
		if strings.HasSuffix(m, "into time.Duration") {
			msgs[i] = m + " (want a duration such as 10s or 1m30s)"
		}
	}
	return errors.New(strings.Join(msgs, "; "))
}

// UniqueKeys refuses a key given twice in mapping n, the section named
// section ("" for the top level). yaml.v3 finds such keys only when it
// decodes a mapping into a Go value, and a mapping walked key by key would
// take the last of the two where a reader takes the first.
func UniqueKeys(n *yaml.Node, section string) error {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if line, ok := seen[k.Value]; ok {
			name := k.Value
			if section != "" {
				name = section + "." + k.Value
			}
			return fmt.Errorf("%s (line %d): given twice (first on line %d)", name, k.Line, line)
		}
		seen[k.Value] = k.Line
	}
	return nil
}

// TopLevelMergeError refuses a merge key ("<<: *anchor") at the top level
// of the config file, on line: its sections would be read by the policy's
// parser and not by the tools'.
func TopLevelMergeError(line int) error {
	return fmt.Errorf("merge key \"<<\" at the top level (line %d): write the sections out (only a rule of the policy may use a merge key)", line)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// envRefAt matches a ${VAR} reference at the start of a string.
var envRefAt = regexp.MustCompile(`^` + envRef.String())

// badRef returns the first "${" of s that does not start a ${VAR}
// reference (a shell form such as ${VAR:-x}, ${}, an unclosed ${VAR), with
// what follows up to its "}" and at most maxBadRef bytes; "" when there is
// none. A "$" not followed by "{" is no reference, and stays as written.
func badRef(s string) string {
	const maxBadRef = 40
	for i := 0; ; {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			return ""
		}
		i += j
		if !envRefAt.MatchString(s[i:]) {
			ref := s[i:]
			if end := strings.IndexByte(ref, '}'); end >= 0 {
				ref = ref[:end+1]
			}
			if len(ref) > maxBadRef {
				ref = strings.ToValidUTF8(ref[:maxBadRef], "") + "…"
			}
			return ref
		}
		i += 2
	}
}

// expand replaces every ${VAR} in s with the value of the environment
// variable VAR. A variable that is unset or empty is an error, so that a
// missing secret is found at startup rather than sent as an empty string
// ("Bearer "); so is a "${" that does not start a reference, which would
// otherwise be sent as written.
func (p *parsing) expand(s string) (string, error) {
	if ref := badRef(s); ref != "" {
		return "", fmt.Errorf("%q is not a ${NAME} reference (NAME of letters, digits and _, not starting with a digit; shell forms such as ${NAME:-default} are not supported)", ref)
	}
	var unset, empty []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		v, ok := p.lookup(name)
		switch {
		case !ok:
			unset = append(unset, name)
		case v == "":
			empty = append(empty, name)
		}
		return v
	})
	var problems []string
	if len(unset) > 0 {
		problems = append(problems, fmt.Sprintf("environment variable %s is not set", strings.Join(unset, ", ")))
	}
	if len(empty) > 0 {
		problems = append(problems, fmt.Sprintf("environment variable %s is empty", strings.Join(empty, ", ")))
	}
	if len(problems) > 0 {
		return "", errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

func (p *parsing) expandAll(ss []string) ([]string, error) {
	if ss == nil {
		return nil, nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		v, err := p.expand(s)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (p *parsing) expandMap(m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v, err := p.expand(m[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = v
	}
	return out, nil
}
