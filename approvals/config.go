package approvals

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ParseConfig reads the `policy:` section of the bot's YAML config file and
// compiles it. Other top-level keys (mcp_servers, ...) are ignored. The
// section looks like this:
//
//	policy:
//	  default: ask            # allow, ask or deny; ask when absent
//	  rules:
//	    - id: read-files      # optional; "rule-N" (1-based position) when absent
//	      tool: "files__read_*"
//	      verdict: allow
//	    - tool: "files__delete_*"
//	      when: '!args.path.startsWith("/srv/scratch/tmp/")'
//	      verdict: ask
//	      approvers: ["U024BE7LH", "S0614TZR7"]
//	      four_eyes: true
//	      ttl: 72h
//	      reason: Deleting outside tmp needs review
//
// A missing or empty section gives a policy with no rules and the default
// ask. Errors name the rule by its 1-based position and YAML line, and the
// field at fault: unknown keys, a missing tool, a bad glob or one no tool
// name can match, an unknown verdict, a condition that does not compile or
// is not a bool, a bad ttl or approver id, a min_approvals that is not a
// whole number in decimal digits, a duplicate id. A key given with nothing
// in it (when, approvers, four_eyes, ttl, remind_after or min_approvals
// left blank or null, or approvers: []) is refused too, where leaving the
// key out says what it would silently mean.
func ParseConfig(data []byte) (*Policy, error) {
	var doc struct {
		Policy yaml.Node `yaml:"policy"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	def, rules, err := parsePolicySection(&doc.Policy)
	if err != nil {
		return nil, err
	}
	p, err := newPolicyAt(def, rules)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// lineRule is a rule with the YAML line it starts on.
type lineRule struct {
	Rule
	line   int
	fields map[string]int // key -> line of its value
}

func parsePolicySection(n *yaml.Node) (Action, []lineRule, error) {
	n = deref(n)
	if n.Kind == 0 || isNull(n) {
		return Ask, nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return "", nil, fmt.Errorf("policy (line %d): want a mapping with default and rules", n.Line)
	}
	def := Ask
	var rules []lineRule
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if line, ok := seen[k.Value]; ok {
			// yaml.v3 takes the last of two keys; a reader takes the first.
			return "", nil, fmt.Errorf("policy.%s (line %d): given twice (first on line %d)", k.Value, k.Line, line)
		}
		seen[k.Value] = k.Line
		switch k.Value {
		case "default":
			if isNull(v) {
				continue
			}
			def = Action(v.Value)
			if v.Kind != yaml.ScalarNode || !def.Valid() {
				return "", nil, fmt.Errorf("policy.default (line %d): unknown verdict %q: want allow, ask or deny", v.Line, v.Value)
			}
		case "rules":
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.SequenceNode {
				return "", nil, fmt.Errorf("policy.rules (line %d): want a list of rules", v.Line)
			}
			for j, rn := range v.Content {
				r, err := parseRuleNode(deref(rn))
				if err != nil {
					return "", nil, &ruleError{index: j, line: rn.Line, err: err}
				}
				rules = append(rules, r)
			}
		default:
			return "", nil, fmt.Errorf("policy (line %d): unknown key %q: want default or rules", k.Line, k.Value)
		}
	}
	return def, rules, nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// deref is the node an alias (*name) stands for, n itself otherwise.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// ruleFields returns the key/value pairs of a rule mapping with YAML merge
// keys ("<<: *common", or a list of them) expanded, those of the merged
// mappings too: a key written in the rule wins over a merged one, and of
// merged mappings the first wins.
func ruleFields(n *yaml.Node) ([]*yaml.Node, error) {
	return mergedFields(n, map[*yaml.Node]bool{})
}

// mergedFields is ruleFields for the mapping n. expanding marks each
// mapping whose expansion has started: true while it runs, false once
// done. A mapping merged into itself is refused; one merged again once
// done adds nothing, as its keys came earlier and the first wins. So each
// mapping is expanded once, however often it is merged.
func mergedFields(n *yaml.Node, expanding map[*yaml.Node]bool) ([]*yaml.Node, error) {
	expanding[n] = true
	defer func() { expanding[n] = false }()
	var own, merged []*yaml.Node
	ownLine := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], deref(n.Content[i+1])
		if k.Value != "<<" || k.Tag != "!!merge" {
			// A key given twice in one mapping, merged or not, is
			// refused: readers of YAML disagree on which copy counts.
			if first, dup := ownLine[k.Value]; dup {
				return nil, &fieldError{field: k.Value, line: k.Line, err: fmt.Errorf("given twice (first on line %d)", first)}
			}
			ownLine[k.Value] = k.Line
			own = append(own, k, v)
			continue
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = sources[:0]
			for _, s := range v.Content {
				sources = append(sources, deref(s))
			}
		}
		for _, s := range sources {
			if s.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("<< (line %d): want a mapping (an anchor's) to merge", k.Line)
			}
			busy, seen := expanding[s]
			if busy {
				return nil, fmt.Errorf("<< (line %d): the mapping merged (line %d) merges itself", k.Line, s.Line)
			}
			if seen {
				continue
			}
			fields, err := mergedFields(s, expanding)
			if err != nil {
				return nil, err
			}
			merged = append(merged, fields...)
		}
	}
	out := own
	have := map[string]bool{}
	for i := 0; i < len(own); i += 2 {
		have[own[i].Value] = true
	}
	for i := 0; i+1 < len(merged); i += 2 {
		if k := merged[i].Value; !have[k] {
			have[k] = true
			out = append(out, merged[i], merged[i+1])
		}
	}
	return out, nil
}

// parseRuleNode decodes one rule mapping, field by field, refusing unknown
// keys.
func parseRuleNode(n *yaml.Node) (lineRule, error) {
	lr := lineRule{line: n.Line, fields: make(map[string]int)}
	r := &lr.Rule
	if n.Kind != yaml.MappingNode {
		return lr, errors.New("want a mapping with tool, verdict and optional when, reason, approvers, four_eyes, ttl, min_approvals, remind_after, id")
	}
	fields, err := ruleFields(n)
	if err != nil {
		return lr, err
	}
	for i := 0; i+1 < len(fields); i += 2 {
		k, v := fields[i], fields[i+1]
		lr.fields[k.Value] = v.Line
		var err error
		switch k.Value {
		case "id":
			err = visibleScalar(v, &r.ID)
		case "tool":
			err = visibleScalar(v, &r.Tool)
		case "when":
			if err = visibleScalar(v, &r.When); err == nil && strings.TrimSpace(r.When) == "" {
				err = errEmptyWhen
			}
		case "verdict":
			var s string
			err = scalar(v, &s)
			r.Verdict = Action(s)
		case "reason":
			err = visibleScalar(v, &r.Reason)
		case "approvers":
			switch {
			case isNull(v), v.Kind == yaml.SequenceNode && len(v.Content) == 0:
				// As with when, and approvers= in ParseRule: a blank
				// left by a template would open the rule to anyone in
				// the channel.
				err = errEmptyApprovers
			case v.Kind != yaml.SequenceNode:
				err = errors.New("want a list of Slack user or user-group ids")
			default:
				err = approversField(v, &r.Approvers)
			}
		case "four_eyes":
			if isNull(v) {
				err = errEmptyFourEyes
			} else {
				err = v.Decode(&r.FourEyes)
			}
		case "ttl":
			r.TTL, err = durationField(v)
		case "remind_after":
			r.RemindAfter, err = durationField(v)
		case "min_approvals":
			r.MinApprovals, err = countField(v)
		default:
			return lr, fmt.Errorf("unknown key %q (line %d): want id, tool, when, verdict, reason, approvers, four_eyes, ttl, min_approvals or remind_after", k.Value, k.Line)
		}
		if err != nil {
			return lr, &fieldError{field: k.Value, line: v.Line, err: cleanYAMLError(err)}
		}
	}
	return lr, nil
}

// visibleScalar is scalar for text a reader must see whole: one holding
// an invisible character is refused, as ParseRule refuses it (a condition
// that reads as args.service == "payroll" would never match payroll).
func visibleScalar(n *yaml.Node, s *string) error {
	if err := scalar(n, s); err != nil {
		return err
	}
	if r, at, ok := hiddenRune(*s); ok {
		return fmt.Errorf("holds an invisible character (U+%04X, at character %d); type it again, or write it as \\u%04x inside a CEL string if it is meant", r, at, r)
	}
	return nil
}

// scalar decodes a scalar node into s; null leaves s empty.
func scalar(n *yaml.Node, s *string) error {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a single value")
	}
	*s = n.Value
	return nil
}

// errEmptyDuration refuses a ttl or remind_after given as an empty string:
// like zero (see parseTTL), it would silently mean the bot's default,
// which leaving the key out says.
var errEmptyDuration = errors.New(`empty: give a duration such as 72h, or leave the key out for the bot's default`)

// errEmptyApprovers refuses approvers given with nothing in them (null, or
// an empty list): a blank left by a template would open the rule to anyone
// who can see the conversation, which leaving the key out says.
var errEmptyApprovers = errors.New("empty: name Slack user or user-group ids, or leave approvers out for anyone who can see the conversation")

// approversField decodes a rule's approvers, a list that is not empty.
// yaml.v3 drops a null item, so a blank item ("- " with nothing after it,
// as a template may leave) would shrink the list, to nothing at worst,
// which opens the rule to anyone in the channel: it is refused.
func approversField(n *yaml.Node, out *[]string) error {
	for i, item := range n.Content {
		if isNull(deref(item)) {
			return fmt.Errorf("item %d (line %d) is empty: name a Slack user or user-group id, or leave approvers out for anyone who can see the conversation", i+1, item.Line)
		}
	}
	if err := n.Decode(out); err != nil {
		return err
	}
	if len(*out) != len(n.Content) {
		return fmt.Errorf("%d items read of %d: want a list of Slack user or user-group ids", len(*out), len(n.Content))
	}
	return nil
}

// errEmptyFourEyes refuses four_eyes given with nothing in it, which would
// silently mean false.
var errEmptyFourEyes = errors.New("empty: give true or false, or leave four_eyes out for false")

// durationField decodes a rule's ttl or remind_after. Null is refused, as
// an empty string is: leaving the key out says the bot's default.
func durationField(n *yaml.Node) (time.Duration, error) {
	if isNull(n) {
		return 0, errEmptyDuration
	}
	var s string
	if err := scalar(n, &s); err != nil {
		return 0, err
	}
	if s == "" {
		return 0, errEmptyDuration
	}
	return parseTTL(s)
}

// countField decodes a rule's min_approvals: a plain decimal whole number,
// 1 or more, as ParseRule takes it. yaml.v3 would truncate 2.9 or 1.5
// into an int (weakening a two-person rule) and read 0x2, 0o2 or 1_0.
func countField(n *yaml.Node) (int, error) {
	if isNull(n) {
		return 0, errors.New("empty: give a whole number, 1 or more, or leave min_approvals out for 1")
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || !isDecimal(n.Value) {
		var what string
		switch {
		case n.Kind == yaml.SequenceNode:
			what = "a list"
		case n.Kind == yaml.MappingNode:
			what = "a mapping"
		case n.ShortTag() == "!!str":
			what = "the string " + strconv.Quote(n.Value)
		default:
			what = n.Value
		}
		return 0, fmt.Errorf("want a whole number in decimal digits, 1 or more, got %s", what)
	}
	c, err := strconv.Atoi(n.Value)
	if err != nil {
		return 0, fmt.Errorf("want a whole number, 1 or more, got %q", n.Value)
	}
	if c < 1 {
		return 0, fmt.Errorf("%d: want 1 or more", c)
	}
	return c, nil
}

// isDecimal reports whether s is a whole number in plain decimal digits,
// with no sign and no leading zero (YAML 1.1 reads 010 as octal).
func isDecimal(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// cleanYAMLError drops the "yaml: unmarshal errors:" preamble, since the
// caller already names the line.
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := strings.TrimSpace(te.Errors[0])
		if strings.HasPrefix(msg, "line ") {
			if _, rest, ok := strings.Cut(msg, ": "); ok {
				msg = rest
			}
		}
		return errors.New(msg)
	}
	return err
}

// newPolicyAt is NewPolicy for rules read from YAML: errors carry the line.
func newPolicyAt(def Action, rules []lineRule) (*Policy, error) {
	plain := make([]Rule, len(rules))
	for i, r := range rules {
		plain[i] = r.Rule
	}
	p, err := NewPolicy(def, plain)
	if err == nil {
		return p, nil
	}
	var re *ruleError
	if errors.As(err, &re) && re.index < len(rules) {
		lr := rules[re.index]
		re.line = lr.line
		var fe *fieldError
		if errors.As(re.err, &fe) && fe.line == 0 {
			fe.line = lr.fields[fe.field]
		}
	}
	return nil, err
}

// MaxTTL is the longest a call may wait for its approvers: a conversation
// is kept for 30 days after its last turn, and a call approved once its
// conversation is gone runs nothing (there is no turn to resume), so the
// call's wait ends two days before, which leaves its resume the time to
// run even after a crash.
const MaxTTL = 28 * 24 * time.Hour

// parseTTL parses a rule's ttl or remind_after, a positive Go duration
// such as 72h, at most MaxTTL. Zero is refused: it would silently mean
// the bot's default, which leaving the key out says.
func parseTTL(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 72h or 30m): %w", s, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", s)
	}
	if d == 0 {
		return 0, fmt.Errorf("duration %s is zero: leave the key out for the bot's default", s)
	}
	if d > MaxTTL {
		return 0, fmt.Errorf("duration %s is longer than 672h (28 days: a conversation is kept 30 days after its last turn)", s)
	}
	return d, nil
}
