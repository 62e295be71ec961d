package approvals

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// Rule IDs of verdicts that no policy rule produced.
const (
	// RuleAnnotations marks a verdict taken from the tool's hints because no
	// rule matched.
	RuleAnnotations = "annotations"
	// RuleDefault marks a verdict taken from the policy default because no
	// rule matched and the hints said nothing decisive.
	RuleDefault = "default"
	// RuleUnavailable marks the fail-closed verdict given when the stored
	// policy changes or standing rules could not be read.
	RuleUnavailable = "unavailable"
	// StandingPrefix starts the RuleID of a verdict relaxed by a standing
	// rule: "standing:" + the standing rule's id.
	StandingPrefix = "standing:"
)

// costLimit bounds the work a single condition may do when evaluated; a
// condition exceeding it fails closed like any other evaluation error.
const costLimit = 100_000

// sizeHintEntries is the size the cost estimate assumes for every list, map
// and string of the arguments. A condition whose estimated cost with that
// size exceeds costLimit is refused when it is compiled: it would fail
// closed on any realistic call. Larger arguments are still bounded by
// costLimit when the condition runs.
const sizeHintEntries = 20

// sizeHint is the cel cost estimator behind sizeHintEntries.
type sizeHint struct{}

func (sizeHint) EstimateSize(checker.AstNode) *checker.SizeEstimate {
	return &checker.SizeEstimate{Min: 0, Max: sizeHintEntries}
}

func (sizeHint) EstimateCallCost(string, string, *checker.AstNode, []checker.AstNode) *checker.CallEstimate {
	return nil
}

// Rule is one policy rule. A rule matches a call when Tool matches the tool
// name and When, if set, evaluates to true.
type Rule struct {
	// ID names the rule in verdicts, audit entries and slash commands.
	ID string `json:"id"`
	// Tool is a glob on the tool name in path.Match syntax: `*` matches any
	// run of characters (tool names have no `/`), `?` one character, and
	// `[...]` a class. Tool names are 1-64 letters, digits, `_` and `-`,
	// so a glob that no such name matches is refused.
	Tool string `json:"tool"`
	// When is an optional CEL expression of type bool over `args` (the
	// call's arguments, a map), `user` and `channel` (Slack ids, strings).
	// The CEL standard library and the string extensions are available;
	// nothing that depends on the clock or randomness is.
	When string `json:"when,omitempty"`
	// Verdict is what a matching call gets.
	Verdict Action `json:"verdict"`
	// Reason is shown on the approval card, or given to the model verbatim
	// when the verdict is deny.
	Reason string `json:"reason,omitempty"`
	// Approvers are the Slack user ids (U…, W…) and user-group ids (S…)
	// who may decide an asked call; empty means anyone in the channel.
	Approvers []string `json:"approvers,omitempty"`
	// FourEyes forbids the requester from deciding their own call.
	FourEyes bool `json:"four_eyes,omitempty"`
	// TTL is how long an asked call waits for a decision; zero means the
	// bot's default.
	TTL time.Duration `json:"ttl,omitempty"`
	// MinApprovals is how many distinct approvers must approve the same
	// arguments before an asked call runs; zero means one. One Deny or
	// Reject still ends the call at once.
	MinApprovals int `json:"min_approvals,omitempty"`
	// RemindAfter is how long an asked call waits before its approvers
	// are reminded; zero means the bot's default.
	RemindAfter time.Duration `json:"remind_after,omitempty"`
}

// approverRE is the shape of Slack user (U, W) and user-group (S) ids.
var approverRE = regexp.MustCompile(`^[UWS][A-Z0-9]+$`)

// errEmptyWhen refuses a when given with nothing in it: a blank left for
// later would make the rule match every call.
var errEmptyWhen = errors.New("empty: give a condition, or leave when out for the rule to match every call of its tools")

// ruleIDRE is the shape of a rule id: no spaces, so it can be typed in a
// slash command.
var ruleIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// validateID checks an explicit rule id.
func validateID(id string) error {
	if !ruleIDRE.MatchString(id) {
		return fmt.Errorf("invalid id %q: use letters, digits, '_', '.', ':' and '-', starting with a letter or digit", id)
	}
	switch {
	case id == RuleAnnotations, id == RuleDefault, id == RuleUnavailable:
		return fmt.Errorf("invalid id %q: reserved", id)
	case strings.HasPrefix(id, StandingPrefix):
		return fmt.Errorf("invalid id %q: the prefix %q is reserved for standing rules", id, StandingPrefix)
	}
	return nil
}

// fieldError is a problem with one field of a rule.
type fieldError struct {
	field string
	err   error
	line  int // YAML line of the value, when known
}

func (e *fieldError) Error() string {
	if e.line > 0 {
		return fmt.Sprintf("%s (line %d): %v", e.field, e.line, e.err)
	}
	return e.field + ": " + e.err.Error()
}
func (e *fieldError) Unwrap() error { return e.err }

// validateFields checks every field of r except When, which needs a CEL
// environment, and the id, which callers check against their own rules.
func validateFields(r Rule) error {
	if r.Tool == "" {
		return &fieldError{field: "tool", err: errors.New("missing: every rule names a tool or a glob such as \"files__*\"")}
	}
	if _, err := path.Match(r.Tool, ""); err != nil {
		return &fieldError{field: "tool", err: fmt.Errorf("bad glob %q: %w", r.Tool, err)}
	}
	if err := checkToolGlob(r.Tool); err != nil {
		return &fieldError{field: "tool", err: err}
	}
	if r.Verdict == "" {
		return &fieldError{field: "verdict", err: errors.New("missing: want allow, ask or deny")}
	}
	if !r.Verdict.Valid() {
		return &fieldError{field: "verdict", err: fmt.Errorf("unknown verdict %q: want allow, ask or deny", r.Verdict)}
	}
	for _, a := range r.Approvers {
		if !approverRE.MatchString(a) {
			return &fieldError{field: "approvers", err: fmt.Errorf("bad id %q: want a Slack user id (U…, W…) or user-group id (S…)", a)}
		}
	}
	if r.TTL < 0 {
		return &fieldError{field: "ttl", err: fmt.Errorf("negative duration %s", r.TTL)}
	}
	if r.RemindAfter < 0 {
		return &fieldError{field: "remind_after", err: fmt.Errorf("negative duration %s", r.RemindAfter)}
	}
	if r.Verdict != Ask {
		for _, f := range []struct {
			name string
			set  bool
		}{{"approvers", len(r.Approvers) > 0}, {"four_eyes", r.FourEyes}, {"ttl", r.TTL != 0}, {"remind_after", r.RemindAfter != 0}} {
			if f.set {
				return &fieldError{field: f.name, err: fmt.Errorf("set on a rule whose verdict is %s: only an ask waits for approvers, so it would be ignored; leave it out, or make the verdict ask", r.Verdict)}
			}
		}
	}
	return validateMinApprovals(r)
}

// maxToolName is the longest a tool name may be (OpenAI's limit); an MCP
// tool's longer name is cut to it.
const maxToolName = 64

// isToolNameChar reports whether c may appear in a tool name.
func isToolNameChar(c rune) bool {
	return c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// checkToolGlob refuses a glob, valid in path.Match syntax, that no tool
// name can match: tool names hold only letters, digits, _ and -, at most
// 64 of them, so a glob with another character outside its wildcards and
// classes, or one that only matches longer names, would never fire. An
// MCP tool's other characters become _ in its name, so the error names
// the glob with them replaced.
func checkToolGlob(glob string) error {
	var bad []rune
	var fixed strings.Builder
	least := 0 // the length of the shortest name the glob matches
	rs := []rune(glob)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			fixed.WriteRune(c)
		case '?':
			fixed.WriteRune(c)
			least++
		case '[':
			// path.Match has checked that the class is closed.
			j := i + 1
			if j < len(rs) && rs[j] == '!' {
				// Shells negate a class so; path.Match takes "!" as
				// itself, which no tool name holds.
				return fmt.Errorf("%q: [!...] is not a negation here: write [^...] for the characters not listed", glob)
			}
			if j < len(rs) && rs[j] == '^' {
				j++
			}
			for ; rs[j] != ']'; j++ {
				if rs[j] == '\\' {
					j++
				}
			}
			fixed.WriteString(string(rs[i : j+1]))
			i = j
			least++
		default:
			lit := string(c)
			if c == '\\' {
				i++ // path.Match has checked that an escape is followed by a character
				c = rs[i]
				lit = string(rs[i-1 : i+1])
			}
			if isToolNameChar(c) {
				fixed.WriteString(lit)
			} else {
				if !slices.Contains(bad, c) {
					bad = append(bad, c)
				}
				fixed.WriteByte('_')
			}
			least++
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%q can match no tool: it has %s, but tool names hold only letters, digits, _ and -; an MCP tool's other characters become _ (server gh's tool repos.delete is gh__repos_delete), so write %q", glob, quoteRunes(bad), fixed.String())
	}
	if least > maxToolName {
		return fmt.Errorf("%q can match no tool: it matches only names of %d characters or more, but tool names have at most %d (an MCP tool's longer name is cut to %d)", glob, least, maxToolName, maxToolName)
	}
	return nil
}

// quoteRunes lists characters for an error: '.' and ' '.
func quoteRunes(rs []rune) string {
	q := make([]string, len(rs))
	for i, c := range rs {
		q[i] = strconv.QuoteRune(c)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}

// validateMinApprovals checks a rule's MinApprovals: only an ask may set
// it, and its approvers must be able to reach it: when every approver is a
// named user (no user group), there must be at least that many distinct
// ones.
func validateMinApprovals(r Rule) error {
	n := r.MinApprovals
	if n < 0 {
		return &fieldError{field: "min_approvals", err: fmt.Errorf("%d: want 1 or more", n)}
	}
	// 1 too (zero is the field left out): like the other ask-only fields
	// (see validateFields), any value would do nothing on an allow or deny.
	if n != 0 && r.Verdict != Ask {
		return &fieldError{field: "min_approvals", err: fmt.Errorf("%d on a rule whose verdict is %s: only an ask waits for approvals, so it would be ignored; leave it out, or make the verdict ask", n, r.Verdict)}
	}
	if n <= 1 || len(r.Approvers) == 0 {
		return nil
	}
	users := make(map[string]bool)
	for _, a := range r.Approvers {
		if strings.HasPrefix(a, "S") {
			return nil // a group can hold enough people
		}
		users[a] = true
	}
	if len(users) < n {
		return &fieldError{field: "min_approvals", err: fmt.Errorf("%d, but the rule names only %d approver(s), all individual users: the call could never run; name more approvers, add a user group, or lower min_approvals", n, len(users))}
	}
	return nil
}

// newEnv returns the CEL environment conditions are compiled in.
func newEnv() (*cel.Env, error) {
	env, err := cel.NewEnv(
		cel.Variable("args", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("user", cel.StringType),
		cel.Variable("channel", cel.StringType),
		cel.OptionalTypes(),
		ext.Strings(),
		// A timestamp("2025-12-24") or duration("2d") literal CEL cannot
		// read is refused when the rule is written, as a regex literal
		// that does not compile is: it would otherwise fail on every
		// call, and a deny would deny every call of its tool.
		cel.ASTValidators(cel.ValidateTimestampLiterals(), cel.ValidateDurationLiterals()),
	)
	if err != nil {
		return nil, fmt.Errorf("create cel environment: %w", err)
	}
	// JSON objects iterate in sorted key order: see sortedAdapter.
	env, err = env.Extend(cel.CustomTypeAdapter(sortedAdapter{env.CELTypeAdapter()}))
	if err != nil {
		return nil, fmt.Errorf("create cel environment: %w", err)
	}
	return env, nil
}

// compileWhen compiles a condition; it must be of type bool.
func compileWhen(env *cel.Env, when string) (cel.Program, error) {
	ast, iss := env.Compile(when)
	if err := iss.Err(); err != nil {
		return nil, &fieldError{field: "when", err: errors.New(strings.TrimSpace(err.Error()))}
	}
	if !ast.OutputType().IsExactType(cel.BoolType) {
		return nil, &fieldError{field: "when", err: fmt.Errorf("must be a bool expression, got %s (compare it, e.g. args.force == true)", ast.OutputType())}
	}
	est, err := env.EstimateCost(ast, sizeHint{})
	if err != nil {
		return nil, &fieldError{field: "when", err: fmt.Errorf("estimate its cost: %w", err)}
	}
	if est.Max > costLimit {
		return nil, &fieldError{field: "when", err: fmt.Errorf("its estimated cost (%d) exceeds the evaluation limit (%d) for arguments whose lists, maps and strings have %d entries, so it could never be evaluated: use fewer nested comprehensions (all, exists, map, filter)", est.Max, costLimit, sizeHintEntries)}
	}
	// Regex literals (args.path.matches("^/srv/")) are compiled here, so
	// that one which does not compile is refused now rather than failing
	// closed on every call.
	prg, err := env.Program(ast, cel.CostLimit(costLimit), cel.CostTrackerOptions(interpreter.OverloadCostTracker("string_format", formatCost)), cel.OptimizeRegex(interpreter.MatchesRegexOptimization), strictComparisons())
	if err != nil {
		return nil, &fieldError{field: "when", err: err}
	}
	return prg, nil
}

// formatCost charges string.format by the text it built, as CEL charges a
// concatenation (a tenth per byte), where the strings library charges it
// by its format alone: inside a map over the arguments' lists, formats of
// their long strings could otherwise build gigabytes within costLimit.
func formatCost(_ []ref.Val, result ref.Val) *uint64 {
	n := uint64(1)
	if s, ok := result.(types.String); ok {
		n += uint64(math.Ceil(float64(len(s)) * common.StringTraversalCostFactor))
	}
	return &n
}

// ruleError is a problem with one rule of a policy, naming its 1-based
// position, YAML line and id where known.
type ruleError struct {
	index int // 0-based
	line  int
	id    string
	err   error
}

func (e *ruleError) Error() string {
	var where []string
	if e.line > 0 {
		where = append(where, fmt.Sprintf("line %d", e.line))
	}
	if e.id != "" {
		where = append(where, "id "+e.id)
	}
	s := fmt.Sprintf("policy rule %d", e.index+1)
	if len(where) > 0 {
		s += " (" + strings.Join(where, ", ") + ")"
	}
	return s + ": " + e.err.Error()
}

func (e *ruleError) Unwrap() error { return e.err }

// compiledRule is a rule ready to evaluate. A rule whose condition failed to
// compile (possible only for rules read back from a store) keeps the error
// and fails closed whenever its tool matches.
type compiledRule struct {
	Rule
	prg    cel.Program
	err    error
	digest string
	// defaults are what an ask of a rule that sets no ttl or remind_after
	// gets (see WithDefaults): its verdict says them, so that tightening
	// by another rule's shorter value never lengthens the wait.
	defaults Defaults
}

// Defaults are the bot's ttl and remind_after for asks whose rule sets
// none (APPROVAL_TTL, REMINDER_AFTER; zero: none known, or reminders off).
type Defaults struct {
	TTL, RemindAfter time.Duration
}

func compileRule(env *cel.Env, r Rule) (compiledRule, error) {
	if err := validateFields(r); err != nil {
		return compiledRule{}, err
	}
	c := compiledRule{Rule: r, digest: ruleDigest(r)}
	c.Approvers = slices.Clone(r.Approvers)
	if r.When != "" {
		prg, err := compileWhen(env, r.When)
		if err != nil {
			return compiledRule{}, err
		}
		c.prg = prg
	}
	return c, nil
}

// Policy is an ordered list of compiled rules and a default action. It is
// immutable and safe for concurrent use.
type Policy struct {
	def   Action
	rules []compiledRule
	env   *cel.Env
}

// withDefaults returns p with d as its rules' defaults.
func (p *Policy) withDefaults(d Defaults) *Policy {
	q := *p
	q.rules = slices.Clone(p.rules)
	for i := range q.rules {
		q.rules[i].defaults = d
	}
	return &q
}

// NewPolicy compiles rules in order. An empty def means Ask. Rules without
// an ID get "rule-N", N being their 1-based position. It fails on the first
// invalid rule, naming its position and field.
func NewPolicy(def Action, rules []Rule) (*Policy, error) {
	if def == "" {
		def = Ask
	}
	if !def.Valid() {
		return nil, fmt.Errorf("default: unknown verdict %q: want allow, ask or deny", def)
	}
	env, err := newEnv()
	if err != nil {
		return nil, err
	}
	p := &Policy{def: def, env: env}
	seen := make(map[string]int)
	for i, r := range rules {
		if r.ID == "" {
			r.ID = fmt.Sprintf("rule-%d", i+1)
		} else if err := validateID(r.ID); err != nil {
			return nil, &ruleError{index: i, err: &fieldError{field: "id", err: err}}
		}
		if j, ok := seen[r.ID]; ok {
			return nil, &ruleError{index: i, err: &fieldError{field: "id", err: fmt.Errorf("duplicate id %q (also rule %d)", r.ID, j)}}
		}
		seen[r.ID] = i + 1
		c, err := compileRule(env, r)
		if err != nil {
			return nil, &ruleError{index: i, id: r.ID, err: err}
		}
		p.rules = append(p.rules, c)
	}
	return p, nil
}

// Default returns the action for calls that no rule matches and whose hints
// say nothing decisive.
func (p *Policy) Default() Action {
	if p == nil {
		return Ask
	}
	return p.def
}

// Rules returns the policy's rules in evaluation order, with generated ids
// filled in.
func (p *Policy) Rules() []Rule {
	if p == nil {
		return nil
	}
	out := make([]Rule, len(p.rules))
	for i, c := range p.rules {
		out[i] = c.Rule
		out[i].Approvers = slices.Clone(c.Approvers)
	}
	return out
}

// Evaluate judges one call. The first rule whose tool glob and condition
// match gives the verdict. A condition that cannot be evaluated (a missing
// key, a wrong type) fails closed: the verdict is ask, or deny if the rule
// says deny, with a reason naming the rule and the error. With no matching
// rule, the tool's hints decide: read-only tools are allowed, destructive or
// unannotated ones asked (RuleID "annotations"); a tool that says it is
// neither gets the policy default (RuleID "default"). The same input always
// gets the same verdict. A nil Policy has no rules and the default ask.
func (p *Policy) Evaluate(in Input) Verdict {
	return forEachUser(in, p.evaluate)
}

// evaluate is Evaluate for in as its User alone.
func (p *Policy) evaluate(in Input) Verdict {
	var rules []compiledRule
	def := Ask
	if p != nil {
		rules, def = p.rules, p.def
	}
	v, _, open := evaluate(rules, in, newActivation(in))
	fb := fallback(in.Hints, def)
	switch {
	case v == nil:
		return fb
	case open:
		return tightenByFallback(*v, fb)
	}
	return *v
}

// activation lazily builds the CEL variables of one input, so arguments are
// parsed at most once and only when a condition needs them.
type activation struct {
	in   Input
	vars map[string]any
	err  error
	done bool
}

func newActivation(in Input) *activation { return &activation{in: in} }

func (a *activation) get() (map[string]any, error) {
	if !a.done {
		a.done = true
		args, err := argsValue(a.in.Args)
		if err != nil {
			a.err = err
		} else {
			a.vars = map[string]any{"args": args, "user": a.in.User, "channel": a.in.Channel}
		}
	}
	return a.vars, a.err
}

// evaluate returns the verdict of the first matching rule, or nil if none
// matches. failed reports a fail-closed verdict from an evaluation error;
// open reports that, had each rule whose condition failed not matched, no
// rule would have matched (the caller then tightens the verdict by the one
// for a call no rule matches: see tightenByFallback).
//
// A rule whose condition cannot be evaluated might have matched or not, so
// the verdict is at least as strict as either: its fail-closed ask (or its
// deny), tightened by whatever the rules after it give. A later rule that
// denies wins; a later ask adds its approvers (when the failed rule names
// none), four eyes, approval count and shorter timeouts; a later allow
// adds nothing.
func evaluate(rules []compiledRule, in Input, act *activation) (v *Verdict, failed, open bool) {
	var closed *Verdict
	for i := range rules {
		r := &rules[i]
		if !matchesTool(r.Tool, in.Tool) {
			continue
		}
		ok, err := r.matches(act)
		if err != nil {
			fc := r.failClosed(err)
			in.asked(&fc)
			if fc.Action == Deny {
				return &fc, true, false
			}
			if closed == nil {
				closed = &fc
			} else if !combine(closed, fc, in.User) {
				d := approversConflict(*closed, fc)
				return &d, true, false
			}
			continue
		}
		if !ok {
			continue
		}
		v := r.verdict()
		in.asked(&v)
		if closed == nil || v.Action == Deny {
			return &v, false, false
		}
		if !combine(closed, v, in.User) {
			d := approversConflict(*closed, v)
			return &d, true, false
		}
		return closed, true, false
	}
	return closed, closed != nil, closed != nil
}

// combine tightens closed, the fail-closed ask of a rule that might or
// might not have matched, by w, what would decide otherwise, so that an
// approver of the result may decide the call either way: the approvers are
// those both name (either's when the other names none, who must then
// also be able to see the conversation: NeedsAudience), and four eyes,
// the approval count and the shorter timeouts of both hold. It reports
// false when no one could decide the result: the two name different
// approvers with no one in common (or a user group, whose members are not
// known here), or fewer than the approvals needed once the requester is
// left out under four eyes.
func combine(closed *Verdict, w Verdict, requesters ...string) bool {
	if w.Action != Ask {
		return true
	}
	common := closed.Approvers
	audience := closed.NeedsAudience || w.NeedsAudience || (len(closed.Approvers) == 0) != (len(w.Approvers) == 0)
	switch {
	case len(common) == 0:
		common = w.Approvers
	case len(w.Approvers) > 0 && !sameSet(common, w.Approvers):
		if slices.ContainsFunc(common, IsGroup) || slices.ContainsFunc(w.Approvers, IsGroup) {
			return false
		}
		common = slices.DeleteFunc(slices.Clone(common), func(a string) bool { return !slices.Contains(w.Approvers, a) })
		if len(common) == 0 {
			return false
		}
	}
	tighten(closed, w)
	closed.Approvers = slices.Clone(common)
	closed.NeedsAudience = audience && len(common) > 0
	closed.Problem = joinProblems(closed.Problem, w.Problem)
	return decidable(*closed, requesters...)
}

// decidable reports whether someone could approve an ask v on a call of
// requesters: it names no approvers (anyone who can see the conversation
// may; see decidableIn for a direct message), a user group, or enough
// users besides the requesters under four eyes for the approvals it needs.
func decidable(v Verdict, requesters ...string) bool {
	eligible, known := Eligible(v.Approvers, v.FourEyes, requesters...)
	return !known || len(eligible) >= max(1, v.MinApprovals)
}

// Eligible returns the distinct users among approvers who may approve a
// call of requesters (all but the requesters under four eyes), and false
// when that is not known here: approvers is empty (anyone who can see the
// conversation may) or names a user group.
func Eligible(approvers []string, fourEyes bool, requesters ...string) ([]string, bool) {
	if len(approvers) == 0 || slices.ContainsFunc(approvers, IsGroup) {
		return nil, false
	}
	eligible := slices.Compact(slices.Sorted(slices.Values(approvers)))
	if fourEyes {
		eligible = slices.DeleteFunc(eligible, func(a string) bool { return slices.Contains(requesters, a) })
	}
	return eligible, true
}

// IsGroup reports whether an approver id is a user group's.
func IsGroup(id string) bool { return strings.HasPrefix(id, "S") }

// IsDM reports whether a channel id is a direct message's: a 1:1
// conversation with the bot, which only the person in it can see.
func IsDM(channel string) bool { return strings.HasPrefix(channel, "D") }

// sameSet reports whether a and b name the same approvers.
func sameSet(a, b []string) bool {
	return slices.Equal(slices.Compact(slices.Sorted(slices.Values(a))), slices.Compact(slices.Sorted(slices.Values(b))))
}

// approversConflict is the verdict for a call whose failed rule (closed)
// and the rule that would decide otherwise (w) leave no one who could
// decide it either way (see combine): it is denied, saying why, so that
// the model can send arguments the failed rule can judge.
func approversConflict(closed, w Verdict) Verdict {
	return Verdict{
		Action: Deny, RuleID: closed.RuleID, RuleDigest: closed.RuleDigest, FailClosed: true,
		Reason: fmt.Sprintf("%s, and together with rule %s, which decides when it does not match, no approver could decide the call either way: it cannot be approved until its arguments let rule %s be evaluated",
			strings.TrimSuffix(closed.Reason, ", so the call needs a decision"), w.RuleID, closed.RuleID),
		Problem: joinProblems(closed.Problem, w.Problem),
	}
}

// tighten adds to v, an ask, what an ask w requires beyond it: w's
// approvers when v names none, four eyes, a higher approval count, a
// shorter ttl or remind_after. An allow adds nothing.
func tighten(v *Verdict, w Verdict) {
	if w.Action != Ask {
		return
	}
	if len(v.Approvers) == 0 {
		v.Approvers = slices.Clone(w.Approvers)
	}
	v.FourEyes = v.FourEyes || w.FourEyes
	v.MinApprovals = max(v.MinApprovals, w.MinApprovals)
	if w.TTL > 0 && (v.TTL == 0 || w.TTL < v.TTL) {
		v.TTL = w.TTL
	}
	if w.RemindAfter > 0 && (v.RemindAfter == 0 || w.RemindAfter < v.RemindAfter) {
		v.RemindAfter = w.RemindAfter
	}
}

// tightenByFallback is the verdict for a call whose fail-closed verdict v
// stands only because a condition could not be evaluated, with no rule
// matching otherwise: had the failed rules not matched, fb (the verdict
// for a call no rule matches) would decide, so a default that denies
// denies.
func tightenByFallback(v Verdict, fb Verdict) Verdict {
	if fb.Action != Deny {
		// Asked of anyone in the conversation, had the failed rules not
		// matched: the approvers v names must be in it too.
		v.NeedsAudience = v.NeedsAudience || fb.Action == Ask && len(fb.Approvers) == 0 && len(v.Approvers) > 0
		tighten(&v, fb)
		return v
	}
	fb.FailClosed = true
	fb.Problem = v.Problem
	fb.Reason = fmt.Sprintf("%s; no other rule matches, and the policy default is %s", strings.TrimSuffix(v.Reason, ", so the call needs a decision"), fb.Action)
	return fb
}

// matchesTool reports whether the glob pattern matches tool.
func matchesTool(pattern, tool string) bool {
	ok, _ := path.Match(pattern, tool)
	return ok
}

// matches evaluates the rule's condition; a rule without one matches.
func (r *compiledRule) matches(act *activation) (bool, error) {
	if r.err != nil {
		return false, r.err
	}
	if r.prg == nil {
		return true, nil
	}
	vars, err := act.get()
	if err != nil {
		return false, err
	}
	return evalBool(r.prg, vars)
}

func evalBool(prg cel.Program, vars map[string]any) (bool, error) {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("condition gave %s, not a bool", out.Type())
	}
	return bool(b), nil
}

func (r *compiledRule) verdict() Verdict {
	ttl, remind := r.TTL, r.RemindAfter
	if ttl == 0 {
		ttl = r.defaults.TTL
	}
	if remind == 0 {
		remind = r.defaults.RemindAfter
	}
	return Verdict{
		Action:       r.Verdict,
		RuleID:       r.ID,
		RuleDigest:   r.digest,
		Reason:       r.Reason,
		Approvers:    slices.Clone(r.Approvers),
		FourEyes:     r.FourEyes,
		TTL:          ttl,
		MinApprovals: r.MinApprovals,
		RemindAfter:  remind,
	}
}

// ruleDigest identifies what a rule says, whatever its id: a standing rule
// made under one rule must not carry over to another rule that later gets
// the same id (generated ids follow the rules' positions).
func ruleDigest(r Rule) string {
	r.ID = ""
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

func (r *compiledRule) failClosed(err error) Verdict {
	v := r.verdict()
	if v.Action != Deny {
		v.Action = Ask
	}
	v.FailClosed = true
	v.Problem = err.Error()
	v.Reason = fmt.Sprintf("rule %s could not be evaluated, so the call needs a decision", r.ID)
	if v.Action == Deny {
		v.Reason = fmt.Sprintf("rule %s could not be evaluated; its verdict is deny", r.ID)
	}
	return v
}

// fallback is the verdict for a call no rule matches.
func fallback(h Hints, def Action) Verdict {
	switch {
	case h.ReadOnly:
		return Verdict{Action: Allow, RuleID: RuleAnnotations, Reason: "no rule matched; the tool is read-only"}
	// The digest tells the two asks apart, so that an Always allow given
	// on a tool that said nothing does not carry over to the tool once it
	// says it is destructive.
	case h.Destructive == nil:
		return Verdict{Action: Ask, RuleID: RuleAnnotations, RuleDigest: "unannotated", Reason: "no rule matched; the tool does not say it is non-destructive"}
	case *h.Destructive:
		return Verdict{Action: Ask, RuleID: RuleAnnotations, RuleDigest: "destructive", Reason: "no rule matched; the tool is destructive"}
	}
	return Verdict{Action: def, RuleID: RuleDefault, Reason: "no rule matched; policy default"}
}

// argsValue parses call arguments for CEL: objects become map[string]any,
// integers int64, other numbers float64. Empty arguments are an empty map.
// A number CEL would see other than as written is an error, so conditions
// fail closed instead of judging a rounded value (see exactNumber).
func argsValue(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("parse arguments: %w", err)
	}
	if dec.More() {
		return nil, errors.New("parse arguments: data after the value")
	}
	return celValue(v)
}

func celValue(v any) (any, error) {
	switch v := v.(type) {
	case json.Number:
		return exactNumber(v)
	case map[string]any:
		for k, e := range v {
			c, err := celValue(e)
			if err != nil {
				return nil, err
			}
			v[k] = c
		}
		return v, nil
	case []any:
		for i, e := range v {
			c, err := celValue(e)
			if err != nil {
				return nil, err
			}
			v[i] = c
		}
		return v, nil
	}
	return v, nil
}

// maxExactInt is 2^53: integers up to it in size have the same value as an
// int64 and as a float64, so a condition comparing them with a double
// judges the number written.
const maxExactInt = 1 << 53

// maxExact is maxExactInt as a rational, to compare literals with.
var maxExact = new(big.Rat).SetInt64(maxExactInt)

// exactNumber converts a JSON number for CEL: an integer literal of at most
// 2^53 in size becomes an int64, any other literal of at most 2^53 in size
// a float64 when that float64, written back in shortest form, has the
// literal's exact value. Otherwise (5.0000000000000001, 9007199254740993,
// 1e20 in any form, 1e400) it returns an error naming the literal: the
// policy cannot see that number exactly.
func exactNumber(n json.Number) (any, error) {
	lit := n.String()
	if i, err := n.Int64(); err == nil && i >= -maxExactInt && i <= maxExactInt {
		return i, nil
	}
	f, err := n.Float64()
	want, ok := new(big.Rat).SetString(lit)
	if err != nil || !ok || math.IsInf(f, 0) {
		return nil, fmt.Errorf("the number %s is out of the range the policy can judge", lit)
	}
	// Past 2^53 a float64 holds only some of the integers, so a whole
	// number there is refused however it is written (100000000000000000000
	// or 1e20), as an integer literal is.
	if new(big.Rat).Abs(want).Cmp(maxExact) > 0 {
		return nil, fmt.Errorf("the number %s is too large for the policy to judge exactly", lit)
	}
	got, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
	if got == nil || got.Cmp(want) != 0 {
		return nil, fmt.Errorf("the number %s has more digits than the policy can judge exactly (it would see %s)", lit, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return f, nil
}
