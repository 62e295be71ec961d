package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/tools"
)

// Exit statuses of `bot policy test`, one per verdict; errors exit 1.
const (
	exitAllow = 0
	exitAsk   = 3
	exitDeny  = 4
)

// statusError ends the program with an exit status; whatever there was to
// say was already printed, so main prints nothing more.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// verdictStatus is the exit status of `bot policy test` for a verdict.
func verdictStatus(a approvals.Action) error {
	switch a {
	case approvals.Allow:
		return nil
	case approvals.Deny:
		return &statusError{code: exitDeny}
	default:
		return &statusError{code: exitAsk}
	}
}

const policyUsage = `Usage:
  bot policy check [-config FILE]
      Load the policy of the config file, compile every rule and condition,
      check mcp_servers and builtin_tools as the bot does at start (offline;
      a ${VAR} that is not set or empty stands for a placeholder; a built-in
      tool's timeout may not be longer than TOOL_TIMEOUT, or its default 2m
      when not set here), and print every problem (rule position and line)
      or the rules in evaluation order, with a note: line for each rule
      that never applies, or whose calls expire before their approvers are
      reminded (by APPROVAL_TTL and REMINDER_AFTER as set here, or else
      their defaults 72h and 1h).
      Exit 0 when the file is sound, 1 otherwise.
  bot policy test [-config FILE] TOOL 'JSON' [-user U] [-channel C]
      Print the verdict a call would get, the rule that produced it and the
      approvers. JSON the bot would refuse before the policy (a key given
      twice, say) is an error. Exit 0 allow, 3 ask, 4 deny, 1 error.
  bot policy test [-config FILE] -cases CASES.yaml
      Run table tests; print ok or FAIL per case and a summary. Exit 0 when
      every case passes, 1 otherwise.

FILE defaults to $CONFIG_FILE. Nothing is run and no Slack token, model or
store is needed: only the policy file counts (rules added with /approvals
policy add live in the bot's store). MCP tool annotations are not known
offline: a call no rule matches is judged as if its tool had none (ask),
unless a case gives its annotations.

Cases file:
  cases:
    - name: reads are allowed          # optional; default: tool and args
      tool: files__read_file
      args: {path: /srv/scratch/a.txt} # a mapping, or a JSON string
      user: U024BE7LH                  # optional
      channel: C0123456789             # optional
      annotations: {read_only: true}   # optional: read_only, destructive
      verdict: allow                   # expected: allow, ask or deny
      rule: read-files                 # optional expected rule id
      fail_closed: true                # optional: the verdict is expected
                                       # to fail closed (a condition that
                                       # could not be evaluated); else
                                       # such a verdict fails the case
  A mapping's numbers reach the policy as written, as the model's do;
  YAML-only forms (0x1F, 1_000, +5, .inf) are refused.
`

// runPolicy runs `bot policy ...` (args after "policy"). It returns nil for
// success and an allow verdict, a *statusError after printing a verdict or
// problems, and any other error (exit 1) for bad usage or input.
func runPolicy(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("policy: want a command, check or test (see bot policy -h)")
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		_, err := fmt.Fprint(stdout, policyUsage)
		return err
	case "check":
		return policyCheck(ctx, args[1:], stdout)
	case "test":
		return policyTest(ctx, args[1:], stdout)
	}
	return fmt.Errorf("policy: unknown command %q: want check or test (see bot policy -h)", args[0])
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments, which it returns in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// newPolicyFlags returns a flag set for a policy command with -config.
func newPolicyFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet("bot policy "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // flagError prints it for -h; errors say what is wrong
	config := fs.String("config", os.Getenv("CONFIG_FILE"), "config file with the policy: section")
	return fs, config
}

// flagError is a command-line error, or nil after -h printed the usage.
func flagError(fs *flag.FlagSet, stdout io.Writer, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		_, werr := fmt.Fprint(stdout, policyUsage)
		return werr
	}
	return fmt.Errorf("%s: %w", fs.Name(), err)
}

// readPolicyFile reads the config file for a policy command.
func readPolicyFile(path string) ([]byte, error) {
	if path == "" {
		return nil, errors.New("no config file: give -config FILE or set CONFIG_FILE")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config file: %w", err)
	}
	return data, nil
}

// offlineEngine is the effective policy of the file alone: the engine reads
// its stored rules from an empty source.
func offlineEngine(p *approvals.Policy) *approvals.Engine {
	return approvals.NewEngine(p, noRecords{})
}

// noRecords is a record source with no records, for judging the policy
// file offline; nothing can be stored in it.
type noRecords struct{}

var _ approvals.RecordStore = noRecords{}

func (noRecords) PutRecord(context.Context, store.Record, int64) (store.Record, error) {
	return store.Record{}, errors.New("the offline policy check stores nothing")
}

func (noRecords) Records(context.Context, string) ([]store.Record, error) { return nil, nil }

func (noRecords) DeleteRecord(context.Context, string, string) error { return store.ErrNotFound }

// policyCheck runs `bot policy check`.
func policyCheck(ctx context.Context, args []string, stdout io.Writer) error {
	fs, config := newPolicyFlags("check")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(fs, stdout, err)
	}
	if len(pos) > 0 {
		return fmt.Errorf("policy check: unexpected argument %q", pos[0])
	}
	data, err := readPolicyFile(*config)
	if err != nil {
		return err
	}
	var p *approvals.Policy
	var problems []error
	var tc tools.Config
	var defaults approvals.Defaults
	var notSet map[string]string
	if err := yaml.Unmarshal(data, new(yaml.Node)); err != nil {
		// YAML that does not parse is one problem, which each section's
		// parser would report again.
		problems = []error{fmt.Errorf("parse config: %w", err)}
	} else if err := botsetup.CheckSections(data); err != nil {
		// So is a file whose top level is wrong (a section misspelt or
		// given twice, a merge key, several documents): the sections'
		// parsers would report it again, or read what it does not say.
		// A top level that is no mapping (a list) is one problem too.
		problems = []error{err}
	} else {
		p, problems = approvals.CheckConfig(data)
		var err error
		if tc, err = tools.CheckConfig(data); err != nil {
			// The bot would refuse to start with it; the ${VAR}s it names
			// need not be set here.
			problems = append([]error{err}, problems...)
		} else if err := checkToolTimeouts(tc.Builtins); err != nil {
			problems = append([]error{err}, problems...)
		} else if err := checkToolReachHere(tc.Builtins, *config); err != nil {
			problems = append([]error{err}, problems...)
		}
		if defaults, notSet, err = approvalDefaults(); err != nil {
			problems = append([]error{err}, problems...)
		}
	}
	if len(problems) > 0 {
		for _, e := range problems {
			fmt.Fprintf(stdout, "%s: %s\n", *config, botsetup.OneLine(e.Error()))
		}
		fmt.Fprintf(stdout, "FAIL\t%s: %d %s\n", *config, len(problems), plural(len(problems), "problem", "problems"))
		return &statusError{code: 1}
	}
	rules, err := offlineEngine(p).Rules(ctx)
	if err != nil {
		return fmt.Errorf("list rules: %w", err)
	}
	fmt.Fprintf(stdout, "Rules in evaluation order (the first match wins):\n")
	for i, r := range rules {
		fmt.Fprintf(stdout, "%3d  %s\n", i+1, r.String())
	}
	fmt.Fprintf(stdout, "Then: the tool's annotations (read-only: allow; destructive or none: ask), then the default: %s\n", p.Default())
	notes := append(p.Unreached(), unmatched(p, tc)...)
	for _, u := range botsetup.UnknownArgs(p.Rules(), tc.Builtins.Schemas(), tc.Servers, nil) {
		notes = append(notes, botsetup.UnknownArgText(u))
	}
	for _, n := range p.Unreminded(defaults) {
		// A note that holds because of a default says so: the bot may
		// have the setting otherwise.
		for _, name := range []string{"APPROVAL_TTL", "REMINDER_AFTER"} {
			if value, ok := notSet[name]; ok && strings.Contains(n, "("+name+")") {
				n += fmt.Sprintf("; %s is not set here, so its default %s counts: set it as the bot has it", name, value)
			}
		}
		notes = append(notes, n)
	}
	for _, n := range notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	fmt.Fprintf(stdout, "ok\t%s: %d %s\n", *config, len(rules), plural(len(rules), "rule", "rules"))
	return nil
}

// unmatched returns a note for each rule of p whose tool no tool of c can
// be, as the bot judges it at start with none of its MCP servers listed
// (see botsetup.UnmatchedRules): one named server__… for a server that is
// not in mcp_servers, or a built-in tool's name (no "__") that
// builtin_tools does not enable. (A glob the tools of a server may match
// is not judged: they are listed only once it runs.)
func unmatched(p *approvals.Policy, c tools.Config) []string {
	var out []string
	for _, u := range botsetup.UnmatchedRules(p.Rules(), c.Servers, nil, c.Builtins.Names()) {
		out = append(out, fmt.Sprintf("rule %s (tool %s) matches no tool: %s", u.Rule.ID, u.Rule.Tool, u.Why))
	}
	return out
}

// checkToolTimeouts refuses, as the bot does at start, a built-in tool's
// timeout longer than TOOL_TIMEOUT: the one set here, or else its default.
func checkToolTimeouts(b tools.BuiltinConfig) error {
	raw, set := settingHere("TOOL_TIMEOUT", "ToolTimeout")
	limit, err := time.ParseDuration(raw)
	if err != nil || limit <= 0 {
		return fmt.Errorf("TOOL_TIMEOUT: %q is not a positive duration", raw)
	}
	if err := b.CheckTimeouts(limit, "TOOL_TIMEOUT"); err != nil {
		if !set {
			return fmt.Errorf("TOOL_TIMEOUT is not set here, so its default %s counts; set it as the bot has it: %w", raw, err)
		}
		return err
	}
	return nil
}

// settingHere is the value the bot's setting name would have here: the
// environment's, set but empty included (the bot refuses an empty
// duration), with set, or else its default (the tag of config's field).
func settingHere(name, field string) (raw string, set bool) {
	if raw, ok := os.LookupEnv(name); ok {
		return raw, true
	}
	return defaultOf(field), false
}

// defaultOf is the default of config's field, as its tag gives it.
func defaultOf(field string) string {
	f, _ := reflect.TypeFor[config]().FieldByName(field)
	return f.Tag.Get("default")
}

// approvalDefaults returns what the bot gives an ask whose rule sets no
// ttl or remind_after: APPROVAL_TTL and REMINDER_AFTER as set here, or
// else their defaults, which notSet maps to their names. A value the bot
// would refuse to start with is an error, as it is there.
func approvalDefaults() (d approvals.Defaults, notSet map[string]string, err error) {
	notSet = map[string]string{}
	setting := func(name, field string) string {
		raw, set := settingHere(name, field)
		if !set {
			notSet[name] = raw
		}
		return raw
	}
	raw := setting("APPROVAL_TTL", "ApprovalTTL")
	if d.TTL, err = time.ParseDuration(raw); err != nil || d.TTL <= 0 || d.TTL > approvals.MaxTTL {
		return d, nil, fmt.Errorf("APPROVAL_TTL: %q is not a positive duration of at most 672h", raw)
	}
	raw = setting("REMINDER_AFTER", "ReminderAfter")
	if d.RemindAfter, err = time.ParseDuration(raw); err != nil || d.RemindAfter < 0 {
		return d, nil, fmt.Errorf("REMINDER_AFTER: %q is not a duration of zero or more (0 turns reminders off)", raw)
	}
	return d, notSet, nil
}

// checkToolReachHere refuses, as the bot does at start, a workspace root
// or run_command dir that holds the config file checked or, unless
// REDIS_URL is set, DATA_DIR: the one set here, or else its default.
func checkToolReachHere(b tools.BuiltinConfig, configFile string) error {
	if os.Getenv("REDIS_URL") == "" {
		dataDir, set := os.Getenv("DATA_DIR"), true
		if dataDir == "" {
			dataDir, set = defaultOf("DataDir"), false
		}
		if err := b.CheckReach("DATA_DIR", dataDir); err != nil {
			if !set {
				return fmt.Errorf("DATA_DIR is not set here, so its default %s counts; set it as the bot has it: %w", dataDir, err)
			}
			return err
		}
	}
	return b.CheckReach("CONFIG_FILE", configFile)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// policyTest runs `bot policy test`.
func policyTest(ctx context.Context, args []string, stdout io.Writer) error {
	fs, config := newPolicyFlags("test")
	user := fs.String("user", "", "Slack user id of the requester")
	channel := fs.String("channel", "", "Slack channel id of the conversation")
	cases := fs.String("cases", "", "YAML file of test cases")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return flagError(fs, stdout, err)
	}
	switch {
	case *cases != "" && len(pos) > 0:
		return errors.New("policy test: give either -cases FILE or TOOL 'JSON', not both")
	case *cases == "" && len(pos) != 2:
		return errors.New("policy test: want TOOL 'JSON' (or -cases FILE)")
	case *cases == "" && strings.TrimSpace(pos[0]) == "":
		return errors.New("policy test: TOOL is empty: give the name of the tool the call is for, such as workspace_delete")
	}
	if err := checkCaller("-user", *user, "-channel", *channel); err != nil {
		return fmt.Errorf("policy test: %w", err)
	}
	data, err := readPolicyFile(*config)
	if err != nil {
		return err
	}
	if err := botsetup.CheckSections(data); err != nil {
		return fmt.Errorf("config file %s: %w", *config, err)
	}
	p, err := approvals.ParseConfig(data)
	if err != nil {
		return fmt.Errorf("config file %s: %s (run bot policy check for every problem)", *config, botsetup.OneLine(err.Error()))
	}
	engine := offlineEngine(p)
	if *cases != "" {
		return runCases(ctx, engine, *cases, stdout)
	}
	argsJSON, err := objectJSON(pos[1])
	if err != nil {
		return fmt.Errorf("policy test: arguments: %w", err)
	}
	v, err := engine.Test(ctx, approvals.Input{Tool: pos[0], Args: argsJSON, User: *user, Channel: *channel, Question: pos[0] == tools.AskHumanTool})
	if err != nil {
		return fmt.Errorf("policy test: %w", err)
	}
	printVerdict(stdout, v)
	return verdictStatus(v.Action)
}

// checkCaller refuses a requester or channel that is not a Slack id: the
// policy sees ids, so a name such as "bob" or "#ops" never matches a
// condition on them, and the verdict printed would not be the bot's. A
// channel may be a DM's (D…) too: the bot judges calls there. userName
// and channelName say where each came from, for the error.
func checkCaller(userName, user, channelName, channel string) error {
	if user != "" && !isUserID(user) {
		return fmt.Errorf("%s: %q is not a Slack user id (U… or W…: the member ID in the person's Slack profile, not their name)", userName, user)
	}
	if channel != "" && !isSlackID(channel, "CGD") {
		return fmt.Errorf("%s: %q is not a Slack channel id (C…, G…, or D… for a DM; it is shown at the bottom of the channel's details, not its #name)", channelName, channel)
	}
	return nil
}

// objectJSON checks arguments as the bot does before the policy judges a
// call (but for the tool's schema, which is not known offline), and
// returns them in the canonical form the policy is given.
func objectJSON(s string) (json.RawMessage, error) {
	canonical, err := agent.CheckArgs(json.RawMessage(s))
	if err != nil {
		return nil, fmt.Errorf("want a JSON object such as '{\"path\": \"/tmp/a\"}', as the bot takes it: %w", err)
	}
	return canonical, nil
}

// annotationsNote says what an offline verdict from the annotations means.
const annotationsNote = "no rule matched, so the tool's MCP annotations decide; they are not known offline: this is the verdict for a tool without annotations (a read-only tool would be allowed)"

func printVerdict(w io.Writer, v approvals.Verdict) {
	fmt.Fprintf(w, "verdict:   %s\n", v.Action)
	fmt.Fprintf(w, "rule:      %s\n", v.RuleID)
	if v.Reason != "" {
		fmt.Fprintf(w, "reason:    %s\n", v.Reason)
	}
	if v.Problem != "" {
		fmt.Fprintf(w, "problem:   %s\n", v.Problem)
	}
	if v.Action == approvals.Ask {
		approvers := "anyone in the channel"
		if len(v.Approvers) > 0 {
			approvers = strings.Join(v.Approvers, ", ")
		}
		if v.FourEyes {
			approvers += " (four eyes: not the requester)"
		}
		if v.MinApprovals > 1 {
			approvers += fmt.Sprintf(" (%d of them must approve)", v.MinApprovals)
		}
		fmt.Fprintf(w, "approvers: %s\n", approvers)
	}
	if v.RuleID == approvals.RuleAnnotations {
		fmt.Fprintf(w, "note:      %s\n", annotationsNote)
	}
}

// policyCase is one case of a -cases file.
type policyCase struct {
	Name        string           `yaml:"name"`
	Tool        string           `yaml:"tool"`
	Args        yaml.Node        `yaml:"args"`
	User        string           `yaml:"user"`
	Channel     string           `yaml:"channel"`
	Annotations *caseAnnotations `yaml:"annotations"`
	Verdict     approvals.Action `yaml:"verdict"`
	Rule        string           `yaml:"rule"`
	// FailClosed says the case expects a verdict a rule gave because its
	// condition could not be evaluated (see runCases).
	FailClosed bool `yaml:"fail_closed"`
}

type caseAnnotations struct {
	ReadOnly    bool  `yaml:"read_only"`
	Destructive *bool `yaml:"destructive"`
}

// casesFile is a -cases file.
type casesFile struct {
	Cases []policyCase `yaml:"cases"`
}

// unknownFieldRE is yaml's message for a key that no field of a Go type
// takes (with KnownFields).
var unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)

// casesError says on one line what is wrong with a cases file that yaml
// does not decode: a key no case knows is named with the keys it may
// have, rather than with the Go type that has no field for it.
func casesError(err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return botsetup.OneLine(err.Error())
	}
	type place struct{ where, keys string }
	places := map[string]place{
		reflect.TypeFor[casesFile]().String():       {"at the top level", yamlKeys[casesFile]()},
		reflect.TypeFor[policyCase]().String():      {"in a case", yamlKeys[policyCase]()},
		reflect.TypeFor[caseAnnotations]().String(): {"in annotations", yamlKeys[caseAnnotations]()},
	}
	msgs := make([]string, len(te.Errors))
	for i, m := range te.Errors {
		msgs[i] = m
		if sub := unknownFieldRE.FindStringSubmatch(m); sub != nil {
			if p, ok := places[sub[3]]; ok {
				msgs[i] = fmt.Sprintf("line %s: unknown key %q %s (want %s)", sub[1], sub[2], p.where, p.keys)
			}
		}
	}
	return strings.Join(msgs, "; ")
}

// yamlKeys lists the yaml keys of a struct type's fields.
func yamlKeys[T any]() string {
	t := reflect.TypeFor[T]()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// readCases reads and checks a -cases file.
func readCases(path string) ([]policyCase, []json.RawMessage, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read cases: %w", err)
	}
	var doc casesFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("cases file %s: %s", path, casesError(err))
	}
	if err := botsetup.OneDocument(data); err != nil {
		return nil, nil, fmt.Errorf("cases file %s: %w", path, err)
	}
	if len(doc.Cases) == 0 {
		return nil, nil, fmt.Errorf("cases file %s: no cases (want a cases: list)", path)
	}
	args := make([]json.RawMessage, len(doc.Cases))
	for i := range doc.Cases {
		c := &doc.Cases[i]
		where := fmt.Sprintf("cases file %s: case %d", path, i+1)
		if strings.TrimSpace(c.Tool) == "" {
			return nil, nil, fmt.Errorf("%s: tool is missing", where)
		}
		if err := checkCaller("user", c.User, "channel", c.Channel); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", where, err)
		}
		if !c.Verdict.Valid() {
			return nil, nil, fmt.Errorf("%s: verdict %q: want allow, ask or deny", where, c.Verdict)
		}
		a, shown, err := caseArgs(&c.Args)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: args: %w", where, err)
		}
		args[i] = a
		if c.Name == "" {
			c.Name = c.Tool + " " + shown
		}
	}
	return doc.Cases, args, nil
}

// caseArgs turns a case's args (a mapping, a JSON string, or nothing) into
// the arguments the policy is given (see objectJSON), and the JSON text
// that names the case. A mapping becomes that JSON text by yamlJSON, its
// numbers kept as written.
func caseArgs(n *yaml.Node) (args json.RawMessage, shown string, err error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case 0:
		shown = "{}"
	case yaml.ScalarNode:
		shown = strings.TrimSpace(n.Value)
	case yaml.MappingNode:
		// Decoding first has yaml refuse what it refuses in any document (a
		// key given twice, an alias that holds itself, aliases that expand
		// without bound) before yamlJSON walks the tree.
		var check any
		if err := n.Decode(&check); err != nil {
			return nil, "", err
		}
		var b bytes.Buffer
		if err := yamlJSON(n, &b); err != nil {
			return nil, "", err
		}
		shown = b.String()
	default:
		return nil, "", fmt.Errorf("line %d: want a mapping or a JSON object string", n.Line)
	}
	args, err = objectJSON(shown)
	return args, shown, err
}

// jsonNumberRE is JSON's number syntax (RFC 8259, section 6).
var jsonNumberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

// yamlJSON writes a YAML value of a case's args as the JSON a model would
// send for it: a mapping as an object (keys in order), a sequence as an
// array, aliases as what they stand for. A number keeps its literal text,
// as the bot keeps the model's: decoding it would round 5.0000000000000001
// to 5 and turn an integer past uint64 into a float, and the case would
// judge another number than the one written. A number in a form YAML reads
// but JSON does not (0x1F, 1_000, +5, 010, .5, .inf) is refused rather
// than converted: no model sends it, and some have no JSON form at all
// (.inf) or read otherwise to a person (yaml takes 010 for 8).
func yamlJSON(n *yaml.Node, b *bytes.Buffer) error {
	switch n.Kind {
	case yaml.AliasNode:
		if n.Alias == nil {
			return fmt.Errorf("line %d: alias *%s stands for nothing", n.Line, n.Value)
		}
		return yamlJSON(n.Alias, b)
	case yaml.MappingNode:
		members, err := yamlMembers(n)
		if err != nil {
			return err
		}
		b.WriteByte('{')
		for i, m := range members {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSONString(b, m.key); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := yamlJSON(m.value, b); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := yamlJSON(e, b); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		switch tag := n.ShortTag(); tag {
		case "!!str", "!!timestamp":
			// yaml decodes a date into any as its text too.
			return writeJSONString(b, n.Value)
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			var v bool
			if err := n.Decode(&v); err != nil {
				return fmt.Errorf("line %d: %w", n.Line, err)
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int", "!!float":
			if !jsonNumberRE.MatchString(n.Value) {
				return fmt.Errorf("line %d: %s is a YAML number but not a JSON one: write it as JSON does (such as 31, -0.5 or 1e6), or quote it for a string", n.Line, n.Value)
			}
			b.WriteString(n.Value)
		default:
			return fmt.Errorf("line %d: a %s value has no JSON form: write a string, number, true, false, null, list or mapping", n.Line, tag)
		}
		return nil
	}
	return fmt.Errorf("line %d: want a JSON value", n.Line)
}

// yamlMember is a key and value of a mapping in a case's args.
type yamlMember struct {
	key   string
	value *yaml.Node
	line  int
}

// yamlMembers returns the members of a mapping in a case's args, with
// merge keys (<<: *common, or a list of them) expanded as yaml decodes
// them: a key written in the mapping wins over a merged one, and of merged
// mappings the first wins. Keys must be strings, as JSON's are.
func yamlMembers(n *yaml.Node) ([]yamlMember, error) {
	var own, merged []yamlMember
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			if v.Kind == yaml.AliasNode && v.Alias != nil {
				v = v.Alias
			}
			sources := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				sources = v.Content
			}
			for _, s := range sources {
				if s.Kind == yaml.AliasNode && s.Alias != nil {
					s = s.Alias
				}
				if s.Kind != yaml.MappingNode {
					return nil, fmt.Errorf("line %d: << wants a mapping (an anchor's) to merge", k.Line)
				}
				ms, err := yamlMembers(s)
				if err != nil {
					return nil, err
				}
				merged = append(merged, ms...)
			}
			continue
		}
		if tag := k.ShortTag(); k.Kind != yaml.ScalarNode || tag != "!!str" && tag != "!!timestamp" {
			return nil, fmt.Errorf("line %d: key %s is not a string (%s), but JSON keys are: quote it", k.Line, k.Value, tag)
		}
		own = append(own, yamlMember{key: k.Value, value: v, line: k.Line})
	}
	seen := make(map[string]int, len(own))
	for _, m := range own {
		if line, ok := seen[m.key]; ok {
			return nil, fmt.Errorf("line %d: key %q given twice (first on line %d)", m.line, m.key, line)
		}
		seen[m.key] = m.line
	}
	out := own
	for _, m := range merged {
		if _, ok := seen[m.key]; !ok {
			seen[m.key] = m.line
			out = append(out, m)
		}
	}
	return out, nil
}

// writeJSONString writes s as a JSON string, without the HTML escapes, so
// the name of a case stays readable.
func writeJSONString(b *bytes.Buffer, s string) error {
	var e bytes.Buffer
	enc := json.NewEncoder(&e)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return err
	}
	b.Write(bytes.TrimSuffix(e.Bytes(), []byte("\n")))
	return nil
}

// runCases runs the cases of a file against engine, printing a line per
// case and a summary like go test.
func runCases(ctx context.Context, engine *approvals.Engine, path string, stdout io.Writer) error {
	cases, args, err := readCases(path)
	if err != nil {
		return err
	}
	failed := 0
	for i, c := range cases {
		in := approvals.Input{Tool: c.Tool, Args: args[i], User: c.User, Channel: c.Channel, Question: c.Tool == tools.AskHumanTool}
		if c.Annotations != nil {
			in.Hints = approvals.Hints{ReadOnly: c.Annotations.ReadOnly, Destructive: c.Annotations.Destructive}
		}
		v, err := engine.Test(ctx, in)
		if err != nil {
			return fmt.Errorf("case %d: %w", i+1, err)
		}
		got := fmt.Sprintf("%s by rule %s", v.Action, v.RuleID)
		// A verdict forced by a condition that could not be evaluated (it
		// names an argument the call lacks, a typo) is no judgement of
		// the case: it passes only if the case expects it. (A deny the
		// rule gives as written, four eyes leaving no approver, fails
		// closed with no such problem.)
		conditionFailed := v.FailClosed && v.Problem != ""
		ok := v.Action == c.Verdict && (c.Rule == "" || c.Rule == v.RuleID) && conditionFailed == c.FailClosed
		note := ""
		switch {
		case conditionFailed:
			note = " (" + v.Reason + ": " + v.Problem + ")"
			if !c.FailClosed {
				got += ", failed closed"
			}
		case c.FailClosed:
			got += ", not failed closed"
		case v.RuleID == approvals.RuleAnnotations && c.Annotations == nil:
			note = " (no rule matched; MCP annotations are not known offline: give the case annotations)"
		}
		if ok {
			fmt.Fprintf(stdout, "ok  \t%s: %s%s\n", c.Name, got, note)
			continue
		}
		failed++
		want := string(c.Verdict)
		if c.Rule != "" {
			want += " by rule " + c.Rule
		}
		fmt.Fprintf(stdout, "FAIL\t%s: got %s, want %s%s\n", c.Name, got, want, note)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "FAIL\t%s: %d of %d cases failed\n", path, failed, len(cases))
		return &statusError{code: 1}
	}
	fmt.Fprintf(stdout, "ok  \t%s: %d %s passed\n", path, len(cases), plural(len(cases), "case", "cases"))
	return nil
}
