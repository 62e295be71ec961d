package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

const testConfig = `
mcp_servers:
  - name: files
    command: ["./files-mcp", "--root", "/srv/scratch"]
policy:
  default: deny
  rules:
    - tool: "files__read_*"
      verdict: allow
    - id: delete-outside-tmp
      tool: "files__delete_*"
      when: '!args.path.startsWith("/srv/scratch/tmp/")'
      verdict: ask
      approvers: ["U024BE7LH", "S0614TZR7"]
      four_eyes: true
      ttl: 72h
      reason: Deleting outside tmp needs review
    - tool: "files__delete_*"
      verdict: allow
    - tool: "shell__run"
      when: 'args.count > 5'
      verdict: deny
      reason: too many
    - tool: "shell__run"
      when: 'user == "U1ADMIN" && channel == "C1OPS"'
      verdict: allow
    - tool: "ratio"
      when: 'args.r >= 1.5'
      verdict: allow
`

func mustParse(t testing.TB, cfg string) *Policy {
	t.Helper()
	p, err := ParseConfig([]byte(cfg))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	return p
}

func TestPolicyEvaluate(t *testing.T) {
	p := mustParse(t, testConfig)
	f := false
	tests := []struct {
		name       string
		in         Input
		wantAction Action
		wantRule   string
	}{
		{"glob star matches underscore", Input{Tool: "files__read_file", Args: json.RawMessage(`{}`)}, Allow, "rule-1"},
		{"glob needs the prefix", Input{Tool: "xfiles__read_file"}, Ask, RuleAnnotations},
		{"condition true", Input{Tool: "files__delete_file", Args: json.RawMessage(`{"path":"/etc/passwd"}`)}, Ask, "delete-outside-tmp"},
		{"condition false falls through", Input{Tool: "files__delete_file", Args: json.RawMessage(`{"path":"/srv/scratch/tmp/x"}`)}, Allow, "rule-3"},
		{"integer above", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": 6}`)}, Deny, "rule-4"},
		{"integer at bound", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": 5}`)}, Ask, RuleAnnotations},
		{"float above int bound", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": 5.5}`)}, Deny, "rule-4"},
		{"user and channel", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": 1}`), User: "U1ADMIN", Channel: "C1OPS"}, Allow, "rule-5"},
		{"other user", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": 1}`), User: "U2", Channel: "C1OPS"}, Ask, RuleAnnotations},
		{"float compared with float", Input{Tool: "ratio", Args: json.RawMessage(`{"r": 2}`)}, Allow, "rule-6"},
		{"read-only hint", Input{Tool: "other", Hints: Hints{ReadOnly: true}}, Allow, RuleAnnotations},
		{"no hint", Input{Tool: "other"}, Ask, RuleAnnotations},
		{"destructive hint", Input{Tool: "other", Hints: Hints{Destructive: new(true)}}, Ask, RuleAnnotations},
		{"not destructive: default", Input{Tool: "other", Hints: Hints{Destructive: &f}}, Deny, RuleDefault},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Evaluate(tt.in)
			if got.Action != tt.wantAction || got.RuleID != tt.wantRule {
				t.Errorf("Evaluate(%s %s) = %s by %q (%s), want %s by %q", tt.in.Tool, tt.in.Args, got.Action, got.RuleID, got.Reason, tt.wantAction, tt.wantRule)
			}
		})
	}
}

func TestPolicyEvaluateCopiesRuleFields(t *testing.T) {
	p := mustParse(t, testConfig)
	got := p.Evaluate(Input{Tool: "files__delete_file", Args: json.RawMessage(`{"path":"/etc"}`)})
	if len(got.RuleDigest) != 16 {
		t.Errorf("got rule digest %q, want 16 hex characters", got.RuleDigest)
	}
	got.RuleDigest = ""
	want := Verdict{
		Action:    Ask,
		RuleID:    "delete-outside-tmp",
		Reason:    "Deleting outside tmp needs review",
		Approvers: []string{"U024BE7LH", "S0614TZR7"},
		FourEyes:  true,
		TTL:       72 * time.Hour,
	}
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) {
		t.Errorf("got %s, want %s", gj, wj)
	}
	got.Approvers[0] = "UCHANGED"
	if again := p.Evaluate(Input{Tool: "files__delete_file", Args: json.RawMessage(`{"path":"/etc"}`)}); again.Approvers[0] != "U024BE7LH" {
		t.Errorf("changing a verdict's approvers changed the policy: got %q, want U024BE7LH", again.Approvers[0])
	}
}

func TestPolicyEvaluateFailsClosed(t *testing.T) {
	p, err := NewPolicy(Allow, []Rule{
		{ID: "tmp-only", Tool: "files__delete", When: `args.path.startsWith("/tmp/")`, Verdict: Allow},
		{ID: "no-big", Tool: "shell__run", When: `args.count > 5`, Verdict: Deny, Reason: "too big"},
		{ID: "four", Tool: "deploy", When: `args.env == "prod"`, Verdict: Ask, Approvers: []string{"U1"}, FourEyes: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		in         Input
		wantAction Action
		wantRule   string
		wantReason string
	}{
		{"missing key", Input{Tool: "files__delete", Args: json.RawMessage(`{}`)}, Ask, "tmp-only", "no such key"},
		{"wrong type", Input{Tool: "files__delete", Args: json.RawMessage(`{"path": 3}`)}, Ask, "tmp-only", "could not be evaluated"},
		{"arguments not an object", Input{Tool: "files__delete", Args: json.RawMessage(`[1]`)}, Ask, "tmp-only", "could not be evaluated"},
		{"invalid json", Input{Tool: "files__delete", Args: json.RawMessage(`{`)}, Ask, "tmp-only", "parse arguments"},
		{"deny rule stays deny", Input{Tool: "shell__run", Args: json.RawMessage(`{"count": "many"}`)}, Deny, "no-big", "its verdict is deny"},
		{"keeps approvers", Input{Tool: "deploy", Args: json.RawMessage(`{}`)}, Ask, "four", "rule four"},
		{"no args is an empty map", Input{Tool: "files__delete"}, Ask, "tmp-only", "no such key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Evaluate(tt.in)
			if got.Action != tt.wantAction || got.RuleID != tt.wantRule || !strings.Contains(got.Why(), tt.wantReason) {
				t.Errorf("Evaluate(%s %s) = %s by %q (%q), want %s by %q with reason containing %q",
					tt.in.Tool, tt.in.Args, got.Action, got.RuleID, got.Why(), tt.wantAction, tt.wantRule, tt.wantReason)
			}
			// The evaluation's error may quote the arguments: it is the
			// Problem, never the rule's words shown on a card.
			if got.FailClosed && (got.Problem == "" || strings.Contains(got.Reason, got.Problem)) {
				t.Errorf("Evaluate(%s %s): reason %q, problem %q; want the error in Problem only", tt.in.Tool, tt.in.Args, got.Reason, got.Problem)
			}
		})
	}
	v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{}`)})
	if !v.FourEyes || len(v.Approvers) != 1 {
		t.Errorf("fail-closed verdict of a four-eyes rule: got four_eyes=%v approvers=%v, want true [U1]", v.FourEyes, v.Approvers)
	}
}

// ==, != and in between values of different kinds fail the condition, so
// that it fails closed, where CEL would answer false: a deny on
// args.force == true still holds for "true", and an allow on
// args.namespace != "prod" does not let ["prod"] through. Numbers compare
// across kinds, and anything with null.
func TestConditionsCompareLikeWithLike(t *testing.T) {
	p, err := NewPolicy(Allow, []Rule{
		{ID: "no-force", Tool: "k8s__apply", When: `args.force == true`, Verdict: Deny, Reason: "no force"},
		{ID: "not-prod", Tool: "k8s__delete", When: `args.namespace != "prod"`, Verdict: Allow},
		{ID: "k8s-delete", Tool: "k8s__delete", Verdict: Ask},
		{ID: "envs", Tool: "deploy", When: `args.env in ["dev", "staging"]`, Verdict: Allow},
		{ID: "replicas", Tool: "scale", When: `args.n == 3 || args.n in [1, 2]`, Verdict: Allow},
		{ID: "unset", Tool: "tag", When: `args.label == null`, Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tool, args string
		want       Action
		failed     bool
	}{
		{"k8s__apply", `{"force":true}`, Deny, false},
		{"k8s__apply", `{"force":false}`, Ask, false}, // by its annotations: none
		{"k8s__apply", `{"force":"true"}`, Deny, true},
		{"k8s__apply", `{"force":1}`, Deny, true},
		{"k8s__delete", `{"namespace":"dev"}`, Allow, false},
		{"k8s__delete", `{"namespace":"prod"}`, Ask, false},
		{"k8s__delete", `{"namespace":["prod"]}`, Ask, true},
		{"deploy", `{"env":"dev"}`, Allow, false},
		{"deploy", `{"env":["dev"]}`, Ask, true},
		{"scale", `{"n":3.0}`, Allow, false},
		{"scale", `{"n":2}`, Allow, false},
		{"scale", `{"n":"3"}`, Ask, true},
		{"tag", `{"label":null}`, Allow, false},
		{"tag", `{"label":"x"}`, Ask, false},
	} {
		got := p.Evaluate(Input{Tool: tt.tool, Args: json.RawMessage(tt.args)})
		if got.Action != tt.want || got.FailClosed != tt.failed {
			t.Errorf("Evaluate(%s %s) = %s (failed closed %v, %q), want %s (failed closed %v)", tt.tool, tt.args, got.Action, got.FailClosed, got.Problem, tt.want, tt.failed)
		}
	}
}

// Regex literals are compiled with the rule; a pattern that comes from the
// arguments is compiled when the condition runs, and fails closed.
func TestRegexConditions(t *testing.T) {
	p, err := NewPolicy(Allow, []Rule{
		{ID: "srv", Tool: "files__delete", When: `args.path.matches("^/srv/[a-z]+$")`, Verdict: Deny},
		{ID: "grep", Tool: "grep", When: `matches(args.text, args.pattern)`, Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in         Input
		wantAction Action
		wantRule   string
	}{
		{Input{Tool: "files__delete", Args: json.RawMessage(`{"path":"/srv/data"}`)}, Deny, "srv"},
		{Input{Tool: "files__delete", Args: json.RawMessage(`{"path":"/srv/Data"}`)}, Ask, RuleAnnotations},
		{Input{Tool: "grep", Args: json.RawMessage(`{"text":"abc","pattern":"b+"}`)}, Allow, "grep"},
		{Input{Tool: "grep", Args: json.RawMessage(`{"text":"abc","pattern":"[a-"}`)}, Ask, "grep"},
	}
	for _, tt := range tests {
		got := p.Evaluate(tt.in)
		if got.Action != tt.wantAction || got.RuleID != tt.wantRule {
			t.Errorf("Evaluate(%s %s) = %s by %q (%s), want %s by %q", tt.in.Tool, tt.in.Args, got.Action, got.RuleID, got.Why(), tt.wantAction, tt.wantRule)
		}
	}
}

// A rule that cannot be evaluated does not hide a later rule that denies.
func TestPolicyEvaluateErrorDoesNotHideDeny(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "dev-ok", Tool: "deploy", When: `args.env == "dev"`, Verdict: Allow},
		{ID: "staging-asks", Tool: "deploy", When: `args.cluster == "staging"`, Verdict: Ask},
		{ID: "no-prod", Tool: "deploy", When: `args.cluster == "prod"`, Verdict: Deny, Reason: "never prod"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args       string
		wantAction Action
		wantRule   string
	}{
		{`{"cluster":"prod"}`, Deny, "no-prod"},             // dev-ok errors (no env); the deny below still wins
		{`{"cluster":"staging"}`, Ask, "dev-ok"},            // fail-closed ask of the first error stands
		{`{"cluster":"other"}`, Ask, "dev-ok"},              // nothing stricter below
		{`{"env":"dev","cluster":"prod"}`, Allow, "dev-ok"}, // no error: first match wins
	}
	for _, tt := range tests {
		got := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(tt.args)})
		if got.Action != tt.wantAction || got.RuleID != tt.wantRule {
			t.Errorf("Evaluate(%s) = %s by %q, want %s by %q", tt.args, got.Action, got.RuleID, tt.wantAction, tt.wantRule)
		}
	}
}

// A rule whose condition cannot be evaluated might have matched or not:
// its fail-closed verdict is tightened by the rule that would decide
// otherwise, so leaving a key out never weakens who must approve.
func TestPolicyEvaluateErrorKeepsLaterApprovers(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "dev-free", Tool: "deploy", When: `args.env == "dev"`, Verdict: Allow},
		{ID: "odd", Tool: "deploy", When: `args.replicas % 2 == 1`, Verdict: Ask, Approvers: []string{"UODD"}, TTL: time.Hour},
		{ID: "sre", Tool: "deploy", Verdict: Ask, Approvers: []string{"USRE", "USRE2"}, FourEyes: true, MinApprovals: 2, TTL: 2 * time.Hour},
		{ID: "db-free", Tool: "db", When: `args.table == "scratch"`, Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name          string
		in            Input
		wantRule      string
		wantApprovers []string
		wantFourEyes  bool
		wantMin       int
		wantTTL       time.Duration
	}{
		{"a later ask's approvers and four eyes", Input{Tool: "deploy", Args: json.RawMessage(`{"replicas":2}`)}, "dev-free", []string{"USRE", "USRE2"}, true, 2, 2 * time.Hour},
		{"no error: the first match", Input{Tool: "deploy", Args: json.RawMessage(`{"env":"prod","replicas":3}`)}, "odd", []string{"UODD"}, false, 0, time.Hour},
		{"nothing stricter below", Input{Tool: "db", Args: json.RawMessage(`{}`)}, "db-free", nil, false, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := p.Evaluate(tt.in)
			if got.Action != Ask || got.RuleID != tt.wantRule || !slices.Equal(got.Approvers, tt.wantApprovers) ||
				got.FourEyes != tt.wantFourEyes || got.MinApprovals != tt.wantMin || got.TTL != tt.wantTTL {
				t.Errorf("Evaluate(%s) = %s by %q, approvers %v, four eyes %v, min %d, ttl %s; want ask by %q, approvers %v, four eyes %v, min %d, ttl %s",
					tt.in.Args, got.Action, got.RuleID, got.Approvers, got.FourEyes, got.MinApprovals, got.TTL,
					tt.wantRule, tt.wantApprovers, tt.wantFourEyes, tt.wantMin, tt.wantTTL)
			}
		})
	}
}

// A failed rule and the rule that would decide otherwise that name other
// approvers leave no one who may decide the call either way: it is denied,
// naming the rule to make evaluable.
func TestPolicyEvaluateErrorBetweenOtherApproversDenies(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "dev", Tool: "deploy", When: `args.env == "dev"`, Verdict: Ask, Approvers: []string{"UDEV"}},
		{ID: "odd", Tool: "deploy", When: `args.replicas % 2 == 1`, Verdict: Ask, Approvers: []string{"UODD"}},
		{ID: "prod", Tool: "deploy", Verdict: Ask, Approvers: []string{"USRE"}, FourEyes: true},
		{ID: "same", Tool: "db", When: `args.table == "scratch"`, Verdict: Ask, Approvers: []string{"UDBA", "UDBA"}},
		{ID: "db", Tool: "db", Verdict: Ask, Approvers: []string{"UDBA"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range []string{`{"service":"api","replicas":2}`, `{}`, `{"env":"dev","replicas":9007199254740993}`} {
		got := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(args)})
		if got.Action != Deny || !got.FailClosed || got.RuleID != "dev" || !strings.Contains(got.Reason, "no approver could decide") || !strings.Contains(got.Problem, "no such key") && !strings.Contains(got.Problem, "exact") {
			t.Errorf("Evaluate(%s) = %s by %q (%q), want a fail-closed deny by dev naming the conflict", args, got.Action, got.RuleID, got.Why())
		}
	}
	// The same approvers: nothing to choose between.
	if got := p.Evaluate(Input{Tool: "db", Args: json.RawMessage(`{}`)}); got.Action != Ask || !slices.Equal(got.Approvers, []string{"UDBA", "UDBA"}) {
		t.Errorf("Evaluate(db) = %s by %q approvers %v, want the ask of the failed rule", got.Action, got.RuleID, got.Approvers)
	}
}

// A failed rule and the rule that would decide otherwise are combined so
// that an approver of the result may decide either way: the approvers both
// name, and both rules' counts and four eyes; when that leaves too few to
// meet them, the call is denied.
func TestPolicyEvaluateErrorCombinesTheTwoRules(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "narrow", Tool: "deploy", When: `args.env == "dev"`, Verdict: Ask, Approvers: []string{"U1"}},
		{ID: "broad", Tool: "deploy", Verdict: Ask, Approvers: []string{"U1", "U2"}},
		{ID: "two", Tool: "migrate", When: `args.env == "prod"`, Verdict: Ask, MinApprovals: 2},
		{ID: "one", Tool: "migrate", Verdict: Ask, Approvers: []string{"U1"}},
		{ID: "eyes", Tool: "restart", When: `args.env == "prod"`, Verdict: Ask, FourEyes: true},
		{ID: "self", Tool: "restart", Verdict: Ask, Approvers: []string{"UREQ"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{}`)}); got.Action != Ask || !slices.Equal(got.Approvers, []string{"U1"}) {
		t.Errorf("overlapping approvers: got %s by %q approvers %v, want an ask of U1, whom both name", got.Action, got.RuleID, got.Approvers)
	}
	if got := p.Evaluate(Input{Tool: "migrate", Args: json.RawMessage(`{}`)}); got.Action != Deny || !strings.Contains(got.Reason, "no approver could decide") {
		t.Errorf("two approvals of one named approver: got %s by %q approvers %v min %d, want a deny", got.Action, got.RuleID, got.Approvers, got.MinApprovals)
	}
	if got := p.Evaluate(Input{Tool: "restart", User: "UREQ", Args: json.RawMessage(`{}`)}); got.Action != Deny {
		t.Errorf("four eyes over the requester alone: got %s by %q approvers %v, want a deny", got.Action, got.RuleID, got.Approvers)
	}
	if got := p.Evaluate(Input{Tool: "restart", User: "UOTHER", Args: json.RawMessage(`{}`)}); got.Action != Ask || !got.FourEyes || !slices.Equal(got.Approvers, []string{"UREQ"}) {
		t.Errorf("four eyes over another's call: got %s by %q approvers %v four eyes %v, want an ask of UREQ with four eyes", got.Action, got.RuleID, got.Approvers, got.FourEyes)
	}
}

// With no rule matching but one whose condition failed, a default that
// denies denies: had the rule not matched, the default would decide.
func TestPolicyEvaluateErrorUnderADenyDefault(t *testing.T) {
	p, err := NewPolicy(Deny, []Rule{{ID: "tmp-only", Tool: "files__delete", When: `args.path.startsWith("/tmp/")`, Verdict: Allow}})
	if err != nil {
		t.Fatal(err)
	}
	no := false
	in := Input{Tool: "files__delete", Args: json.RawMessage(`{}`), Hints: Hints{Destructive: &no}}
	got := p.Evaluate(in)
	if got.Action != Deny || !got.FailClosed || !strings.Contains(got.Reason, "tmp-only could not be evaluated") || !strings.Contains(got.Reason, "default is deny") {
		t.Errorf("Evaluate = %s (fail closed %v, %q), want a fail-closed deny naming the rule and the default", got.Action, got.FailClosed, got.Reason)
	}
	in.Args = json.RawMessage(`{"path":"/tmp/x"}`)
	if got := p.Evaluate(in); got.Action != Allow {
		t.Errorf("Evaluate(/tmp/x) = %s, want allow", got.Action)
	}
}

// The same arguments always get the same verdict, even from conditions
// that depend on the order a JSON object's keys are visited in, or whose
// cost does: objects are visited in sorted key order, nested ones and
// those in lists too.
func TestPolicyEvaluateVisitsKeysInOrder(t *testing.T) {
	big := strings.Repeat("x", 60000)
	long := map[string]any{"ok": "x"}
	for i := range 8 {
		long[fmt.Sprintf("k%d", i)] = big
	}
	longArgs, _ := json.Marshal(long)
	for _, tc := range []struct {
		when string
		args string
		want Action
	}{
		{`args.map(k, k)[0] == "a"`, `{"c":1,"a":2,"b":3}`, Allow},
		{`args.opts.map(k, k)[0] == "a"`, `{"opts":{"c":1,"a":2,"b":3}}`, Allow},
		{`args.items[0].map(k, k)[0] == "a"`, `{"items":[{"c":1,"a":2,"b":3}]}`, Allow},
		{`args.exists(k, k == "k0" || args[k].split("").size() > 1000000)`, string(longArgs), Allow},
		// CEL's map operations are as they were.
		{`!optional.ofNonZeroValue(args.e).hasValue() && optional.ofNonZeroValue(args.f).hasValue()`, `{"e":{},"f":{"a":1}}`, Allow},
		{`args.o == {"b": 2, "a": 1} && "a" in args.o && has(args.o.b) && size(args.o) == 2 && args.l[0].x == 1`, `{"o":{"a":1,"b":2},"l":[{"x":1}]}`, Allow},
		{`args.?o.?z.orValue(3) == 3 && args.o.filter(k, k != "a") == ["b"] && args.o.all(k, args.o[k] > 0)`, `{"o":{"a":1,"b":2}}`, Allow},
	} {
		p, err := NewPolicy(Ask, []Rule{{ID: "r", Tool: "t", When: tc.when, Verdict: Allow}})
		if err != nil {
			t.Fatalf("%s: %v", tc.when, err)
		}
		seen := map[Action]int{}
		for range 50 {
			seen[p.Evaluate(Input{Tool: "t", Args: json.RawMessage(tc.args)}).Action]++
		}
		if len(seen) != 1 || seen[tc.want] != 50 {
			t.Errorf("when %s over %.40s...: verdicts %v, want %s every time", tc.when, tc.args, seen, tc.want)
		}
	}
}

func TestPolicyEvaluateDeterministic(t *testing.T) {
	p := mustParse(t, testConfig)
	in := Input{Tool: "files__delete_file", Args: json.RawMessage(`{"path":"/etc"}`)}
	first := p.Evaluate(in)
	for i := range 50 {
		if got := p.Evaluate(in); got.Action != first.Action || got.RuleID != first.RuleID || got.Reason != first.Reason {
			t.Fatalf("evaluation %d: got %+v, want %+v", i, got, first)
		}
	}
}

func TestParseConfigEmpty(t *testing.T) {
	for _, cfg := range []string{"", "mcp_servers: []\n", "policy:\n", "policy: {}\n", "policy:\n  rules: []\n"} {
		p, err := ParseConfig([]byte(cfg))
		if err != nil {
			t.Errorf("ParseConfig(%q): %v", cfg, err)
			continue
		}
		if p.Default() != Ask || len(p.Rules()) != 0 {
			t.Errorf("ParseConfig(%q): got default %s and %d rules, want ask and none", cfg, p.Default(), len(p.Rules()))
		}
	}
}

func TestParseConfigFields(t *testing.T) {
	p := mustParse(t, testConfig)
	rules := p.Rules()
	if len(rules) != 6 {
		t.Fatalf("got %d rules, want 6", len(rules))
	}
	if p.Default() != Deny {
		t.Errorf("got default %s, want deny", p.Default())
	}
	ids := make([]string, len(rules))
	for i, r := range rules {
		ids[i] = r.ID
	}
	if got, want := strings.Join(ids, ","), "rule-1,delete-outside-tmp,rule-3,rule-4,rule-5,rule-6"; got != want {
		t.Errorf("got ids %s, want %s", got, want)
	}
	r := rules[1]
	if r.TTL != 72*time.Hour || !r.FourEyes || len(r.Approvers) != 2 || r.Reason != "Deleting outside tmp needs review" {
		t.Errorf("got rule %+v, want ttl 72h, four eyes, 2 approvers and the reason", r)
	}
}

// A ttl or remind_after left null is refused, as an empty string is (and
// a blank when or approvers): leaving the key out says the bot's default.
func TestParseConfigNullDurations(t *testing.T) {
	for _, cfg := range []string{
		"policy:\n  rules:\n    - {tool: deploy, verdict: ask, ttl: }\n",
		"policy:\n  rules:\n    - {tool: deploy, verdict: ask, remind_after: ~}\n",
	} {
		if _, err := ParseConfig([]byte(cfg)); err == nil || !strings.Contains(err.Error(), "empty: give a duration") {
			t.Errorf("ParseConfig(%q): got %v, want the duration refused as empty", cfg, err)
		}
	}
}

func TestMinApprovalsInTheVerdict(t *testing.T) {
	p := mustParse(t, "policy:\n  rules:\n    - {tool: deploy, verdict: ask, approvers: [U1, U2], min_approvals: 2}\n")
	if got := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{}`)}); got.MinApprovals != 2 {
		t.Errorf("verdict %+v, want MinApprovals 2", got)
	}
}

func TestParseConfigErrors(t *testing.T) {
	rule := func(body string) string {
		return "policy:\n  rules:\n    - tool: ok\n      verdict: allow\n" + body
	}
	tests := []struct {
		name string
		cfg  string
		want []string // substrings of the error
	}{
		{"cel syntax error", rule("    - tool: x\n      verdict: ask\n      when: 'args.path ==='\n"),
			[]string{"policy rule 2", "line 5", "when (line 7)", "Syntax error"}},
		{"non-bool when", rule("    - tool: x\n      verdict: ask\n      when: 'args.path'\n"),
			[]string{"policy rule 2", "when", "must be a bool expression"}},
		{"int when", rule("    - tool: x\n      verdict: ask\n      when: '1 + 2'\n"),
			[]string{"policy rule 2", "must be a bool expression, got int"}},
		{"regex literal that does not compile", rule("    - tool: x\n      verdict: ask\n      when: 'args.path.matches(\"[a-\")'\n"),
			[]string{"policy rule 2", "line 5", "when (line 7)", "missing closing ]"}},
		{"regex literal in matches()", rule("    - tool: x\n      verdict: deny\n      when: 'args.ok || matches(args.path, \"a(b\")'\n"),
			[]string{"policy rule 2", "when (line 7)", "missing closing )"}},
		{"timestamp literal CEL cannot read", rule("    - tool: x\n      verdict: deny\n      when: 'timestamp(args.at) >= timestamp(\"2025-12-24\")'\n"),
			[]string{"policy rule 2", "when (line 7)", "invalid timestamp argument"}},
		{"duration literal CEL cannot read", rule("    - tool: x\n      verdict: deny\n      when: 'duration(args.wait) > duration(\"2d\")'\n"),
			[]string{"policy rule 2", "when (line 7)", "invalid duration argument"}},
		{"invisible character in a condition", rule("    - tool: x\n      verdict: deny\n      when: 'args.service == \"pay\u200broll\"'\n"),
			[]string{"policy rule 2", "when (line 7)", "invisible character (U+200B"}},
		{"invisible character in a tool", rule("    - tool: \"x\u202e\"\n      verdict: deny\n"),
			[]string{"policy rule 2", "tool (line 5)", "invisible character (U+202E"}},
		{"invisible character in a reason", rule("    - tool: x\n      verdict: deny\n      reason: \"never\u2060\"\n"),
			[]string{"policy rule 2", "reason (line 7)", "invisible character (U+2060"}},
		{"key twice in a merged mapping", "x-base: &base\n  verdict: ask\n  four_eyes: false\n  four_eyes: true\npolicy:\n  rules:\n    - <<: *base\n      tool: x\n",
			[]string{"policy rule 1", "four_eyes (line 4): given twice (first on line 3)"}},
		{"unknown variable", rule("    - tool: x\n      verdict: ask\n      when: 'now > 3'\n"),
			[]string{"policy rule 2", "undeclared reference"}},
		{"unknown verdict", rule("    - tool: x\n      verdict: maybe\n"),
			[]string{"policy rule 2", "line 5", "verdict", `unknown verdict "maybe"`}},
		{"missing verdict", rule("    - tool: x\n"),
			[]string{"policy rule 2", "verdict: missing"}},
		{"duplicate id", "policy:\n  rules:\n    - {id: a, tool: x, verdict: allow}\n    - {id: a, tool: y, verdict: deny}\n",
			[]string{"policy rule 2", "line 4", `duplicate id "a" (also rule 1)`}},
		{"explicit id clashes with generated", "policy:\n  rules:\n    - {tool: x, verdict: allow}\n    - {id: rule-1, tool: y, verdict: deny}\n",
			[]string{"policy rule 2", `duplicate id "rule-1"`}},
		{"unknown rule key", rule("    - tool: x\n      verdict: ask\n      approver: [U1]\n"),
			[]string{"policy rule 2", `unknown key "approver"`, "line 7"}},
		{"unknown policy key", "policy:\n  defaults: ask\n", []string{`unknown key "defaults"`, "line 2"}},
		{"default twice", "policy:\n  default: deny\n  rules: []\n  default: allow\n", []string{"policy.default (line 4): given twice (first on line 2)"}},
		{"rules twice", "policy:\n  rules: [{tool: '*', verdict: deny}]\n  rules: [{tool: x, verdict: allow}]\n", []string{"policy.rules (line 3): given twice"}},
		{"missing tool", rule("    - verdict: ask\n"), []string{"policy rule 2", "tool: missing"}},
		{"bad glob", rule("    - tool: 'files__[a'\n      verdict: ask\n"), []string{"policy rule 2", "tool", "bad glob"}},
		{"tool glob with a dot", rule("    - tool: 'gh__repos.delete'\n      verdict: deny\n"),
			[]string{"policy rule 2", "tool (line 5)", `'.'`, "tool names hold only letters, digits, _ and -", `write "gh__repos_delete"`}},
		{"tool glob longer than a tool name", rule("    - tool: '" + strings.Repeat("a", 65) + "'\n      verdict: deny\n"),
			[]string{"policy rule 2", "tool (line 5)", "65 characters or more", "at most 64"}},
		{"bad ttl", rule("    - tool: x\n      verdict: ask\n      ttl: 3 days\n"), []string{"policy rule 2", "ttl (line 7)", `bad duration "3 days"`}},
		{"ttl past a conversation's life", rule("    - tool: x\n      verdict: ask\n      ttl: 800h\n"), []string{"policy rule 2", "ttl (line 7)", "800h is longer than 672h"}},
		{"negative ttl", rule("    - tool: x\n      verdict: ask\n      ttl: -1h\n"), []string{"ttl", "negative"}},
		{"zero ttl", rule("    - tool: x\n      verdict: ask\n      ttl: 0s\n"), []string{"ttl (line 7)", "0s is zero: leave the key out"}},
		{"zero remind_after", rule("    - tool: x\n      verdict: ask\n      remind_after: 0m\n"), []string{"remind_after (line 7)", "is zero"}},
		{"bad approver", rule("    - tool: x\n      verdict: ask\n      approvers: [ana]\n"), []string{"policy rule 2", "approvers", `bad id "ana"`}},
		{"approvers not a list", rule("    - tool: x\n      verdict: ask\n      approvers: U1\n"), []string{"approvers", "want a list"}},
		{"four_eyes not bool", rule("    - tool: x\n      verdict: ask\n      four_eyes: maybe\n"), []string{"policy rule 2", "four_eyes (line 7)"}},
		{"approvers on an allow", rule("    - tool: x\n      verdict: allow\n      approvers: [U1]\n"), []string{"policy rule 2", "approvers (line 7)", "verdict is allow", "would be ignored"}},
		{"four_eyes on a deny", rule("    - tool: x\n      verdict: deny\n      four_eyes: true\n"), []string{"policy rule 2", "four_eyes", "verdict is deny"}},
		{"ttl on an allow", rule("    - tool: x\n      verdict: allow\n      ttl: 1h\n"), []string{"policy rule 2", "ttl", "verdict is allow"}},
		{"remind_after on a deny", rule("    - tool: x\n      verdict: deny\n      remind_after: 1h\n"), []string{"policy rule 2", "remind_after", "verdict is deny"}},
		{"min_approvals on an allow", rule("    - tool: x\n      verdict: allow\n      min_approvals: 1\n"), []string{"policy rule 2", "min_approvals (line 7)", "1 on a rule whose verdict is allow", "would be ignored"}},
		{"min_approvals on a deny", rule("    - tool: x\n      verdict: deny\n      min_approvals: 2\n"), []string{"policy rule 2", "min_approvals (line 7)", "verdict is deny"}},
		{"empty ttl", rule("    - tool: x\n      verdict: ask\n      ttl: \"\"\n"), []string{"policy rule 2", "ttl (line 7)", "empty: give a duration such as 72h, or leave the key out"}},
		{"empty remind_after", rule("    - tool: x\n      verdict: ask\n      remind_after: ''\n"), []string{"policy rule 2", "remind_after (line 7)", "empty"}},
		{"min_approvals zero", rule("    - tool: x\n      verdict: ask\n      min_approvals: 0\n"), []string{"policy rule 2", "min_approvals (line 7)", "want 1 or more"}},
		{"min_approvals beyond approvers", rule("    - tool: x\n      verdict: ask\n      approvers: [U1, U2]\n      min_approvals: 3\n"), []string{"policy rule 2", "min_approvals", "names only 2 approver(s)"}},
		{"bad default", "policy:\n  default: perhaps\n", []string{"policy.default", `unknown verdict "perhaps"`}},
		{"rule not a mapping", "policy:\n  rules:\n    - files__*\n", []string{"policy rule 1", "line 3", "want a mapping"}},
		{"reserved id", "policy:\n  rules:\n    - {id: default, tool: x, verdict: allow}\n", []string{"policy rule 1", "reserved"}},
		{"id with space", "policy:\n  rules:\n    - {id: 'a b', tool: x, verdict: allow}\n", []string{"policy rule 1", "invalid id"}},
		{"key twice", rule("    - tool: x\n      tool: y\n      verdict: ask\n"), []string{"policy rule 2", "given twice"}},
		{"when left empty", rule("    - tool: x\n      when:\n      verdict: allow\n"), []string{"policy rule 2", "when (line 6)", "empty"}},
		{"when blank", rule("    - tool: x\n      when: '  '\n      verdict: allow\n"), []string{"policy rule 2", "when (line 6)", "empty"}},
		{"bad yaml", "policy: [\n", []string{"parse config"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tt.cfg))
			if err == nil {
				t.Fatalf("ParseConfig(%q): got no error, want one containing %q", tt.cfg, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseConfig(%q): got error %q, want it to contain %q", tt.cfg, err, w)
				}
			}
		})
	}
}

func TestNewPolicyErrors(t *testing.T) {
	tests := []struct {
		name    string
		def     Action
		rules   []Rule
		wantErr string
	}{
		{"bad default", "maybe", nil, `default: unknown verdict "maybe"`},
		{"cel error names position and id", Ask, []Rule{{Tool: "a", Verdict: Allow}, {ID: "x", Tool: "b", Verdict: Ask, When: "args."}}, "policy rule 2 (id x): when:"},
		{"negative ttl", Ask, []Rule{{Tool: "a", Verdict: Allow, TTL: -time.Second}}, "policy rule 1 (id rule-1): ttl: negative"},
		{"min_approvals on an allow", Ask, []Rule{{Tool: "a", Verdict: Allow, MinApprovals: 1}}, "policy rule 1 (id rule-1): min_approvals: 1 on a rule whose verdict is allow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewPolicy(tt.def, tt.rules)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("NewPolicy: got error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestToolGlobsThatMatchNoTool(t *testing.T) {
	tests := []struct {
		glob string
		want string // a substring of the error; empty: accepted
	}{
		{"files__read_*", ""},
		{"gh__repos_delete", ""},
		{"*", ""},
		{"files__[.a]*", ""}, // a class may name other characters as long as it names one of a tool's
		{`files\_read`, ""},
		{strings.Repeat("a", 64), ""},
		{strings.Repeat("a", 64) + "*", ""},
		{strings.Repeat("?", 65), "65 characters or more"},
		{strings.Repeat("a", 40) + "*" + strings.Repeat("b", 25), "65 characters or more"},
		{"gh__repos.delete", `has '.', but tool names hold only letters, digits, _ and -`},
		{`gh__repos\.delete`, `write "gh__repos_delete"`},
		{"gh__repos/delete*", `write "gh__repos_delete*"`},
		{"files__read file", `' '`},
		{"files__é*", `'é'`},
		{"a.b c", `'.' and ' '`},
		{"[ab].x", `write "[ab]_x"`},
		{"db_[!r]*", `[!...] is not a negation here: write [^...]`},
		{"db_[^r]*", ""},
	}
	for _, tt := range tests {
		t.Run(tt.glob, func(t *testing.T) {
			_, err := NewPolicy(Ask, []Rule{{Tool: tt.glob, Verdict: Deny}})
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("NewPolicy with tool %q: got error %v, want none", tt.glob, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("NewPolicy with tool %q: got error %v, want one containing %q", tt.glob, err, tt.want)
			}
		})
	}
}

func TestArgsValue(t *testing.T) {
	tests := []struct {
		in   string
		want string // %T:%v of args.n
	}{
		{`{"n": 5}`, "int64:5"},
		{`{"n": -5}`, "int64:-5"},
		{`{"n": 5.0}`, "float64:5"},
		{`{"n": 1e3}`, "float64:1000"},
		{`{"n": 0.1}`, "float64:0.1"},
		{`{"n": 9007199254740992}`, "int64:9007199254740992"},
		{`{"n": 9007199254740992.0}`, "float64:9.007199254740992e+15"},
		{`{"n": [1, 2.5]}`, "[]interface {}:[1 2.5]"},
	}
	for _, tt := range tests {
		v, err := argsValue(json.RawMessage(tt.in))
		if err != nil {
			t.Errorf("argsValue(%s): %v", tt.in, err)
			continue
		}
		n := v.(map[string]any)["n"]
		if got := typeAndValue(n); got != tt.want {
			t.Errorf("argsValue(%s): got n = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func typeAndValue(v any) string { return fmt.Sprintf("%T:%v", v, v) }

// Numbers the policy cannot see exactly are not judged by a rounded value:
// conditions fail closed, and the reason names the literal.
func TestInexactNumbersFailClosed(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "big", Tool: "scale", When: "args.n > 5", Verdict: Ask, Reason: "more than 5 replicas"},
		{ID: "small", Tool: "scale", Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, lit := range []string{"5.0000000000000001", "9007199254740993", "-9007199254740993", "99999999999999999999", "100000000000000000000", "1e20", "-1e20", "9007199254740994.0", "1e400", "[1, 5.0000000000000001]"} {
		args := `{"n": ` + lit + `}`
		if strings.HasPrefix(lit, "[") {
			args = `{"n": 6, "list": ` + lit + `}`
		}
		v := p.Evaluate(Input{Tool: "scale", Args: json.RawMessage(args)})
		if v.Action != Ask || !v.FailClosed || v.RuleID != "big" {
			t.Errorf("Evaluate(%s) = %s by %q (fail closed %v), want a fail-closed ask by big", args, v.Action, v.RuleID, v.FailClosed)
		}
		want := strings.Trim(strings.TrimPrefix(lit, "[1, "), "]")
		if !strings.Contains(v.Problem, want) || strings.Contains(v.Reason, want) {
			t.Errorf("Evaluate(%s): reason %q, problem %q; want the problem, not the reason, to name the literal %s", args, v.Reason, v.Problem, want)
		}
	}
	for _, args := range []string{`{"n": 5}`, `{"n": 5.0}`, `{"n": 0.5}`, `{"n": 9007199254740992}`} {
		v := p.Evaluate(Input{Tool: "scale", Args: json.RawMessage(args)})
		if v.FailClosed {
			t.Errorf("Evaluate(%s): failed closed (%s), want an exact judgement", args, v.Reason)
		}
	}
}

// A condition whose estimated cost exceeds the evaluation limit could never
// be evaluated: it is refused at load, when added and when remembered, with
// the reason.
func TestTooCostlyConditionsRefused(t *testing.T) {
	nested := func(depth int) string {
		expr := "x1 == x1"
		for i := depth; i >= 1; i-- {
			expr = fmt.Sprintf("args.items.all(x%d, %s)", i, expr)
		}
		return strings.Replace(expr, "x1 == x1", fmt.Sprintf("x%d == x%d", depth, depth), 1)
	}
	costly, cheap := nested(7), nested(2)
	const want = "exceeds the evaluation limit"
	if _, err := NewPolicy(Ask, []Rule{{Tool: "t", When: costly, Verdict: Ask}}); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "policy rule 1") {
		t.Errorf("NewPolicy with seven nested all(): got %v, want an error naming the rule and containing %q", err, want)
	}
	p, err := NewPolicy(Ask, []Rule{{Tool: "t", When: cheap, Verdict: Ask}})
	if err != nil {
		t.Fatalf("NewPolicy with two nested all(): %v", err)
	}
	if v := p.Evaluate(Input{Tool: "t", Args: json.RawMessage(`{"items":[1,2,3]}`)}); v.FailClosed {
		t.Errorf("two nested all() failed closed: %s", v.Reason)
	}
	e := NewEngine(p, newMemStore())
	ctx := context.Background()
	if _, err := e.AddRule(ctx, "U1", Rule{Tool: "t", When: costly, Verdict: Deny}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("AddRule with seven nested all(): got %v, want an error containing %q", err, want)
	}
	if _, err := e.Remember(ctx, "U1", StandingRule{Tool: "t", Channel: "C1", When: costly}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Remember with seven nested all(): got %v, want an error containing %q", err, want)
	}
	if rules, _ := e.Rules(ctx); len(rules) != 1 {
		t.Errorf("a refused rule was stored: %d rules, want 1", len(rules))
	}
}

// string.format is charged by the text it builds: a format of the
// arguments' long strings in a map over their lists ends at the cost limit
// (failing closed) instead of building text without bound, and the same
// condition over short arguments is judged as written.
func TestFormatIsChargedByWhatItBuilds(t *testing.T) {
	format := `"` + strings.Repeat("%s", 10) + `".format([` + strings.TrimSuffix(strings.Repeat("args.s,", 10), ",") + `])`
	p, err := NewPolicy(Ask, []Rule{{ID: "big", Tool: "deploy", When: "args.l.map(x, " + format + ").size() == 0", Verdict: Deny}})
	if err != nil {
		t.Fatal(err)
	}
	long, _ := json.Marshal(map[string]any{"s": strings.Repeat("a", 10_000), "l": make([]int, 200)})
	if v := p.Evaluate(Input{Tool: "deploy", Args: long}); !v.FailClosed || v.Action != Deny || v.RuleID != "big" {
		t.Errorf("200 formats of 100 KB each: %s by %s, fail closed %v (%s); want the deny failed closed at the cost limit", v.Action, v.RuleID, v.FailClosed, v.Reason)
	}
	short, _ := json.Marshal(map[string]any{"s": "a", "l": make([]int, 200)})
	if v := p.Evaluate(Input{Tool: "deploy", Args: short}); v.FailClosed || v.RuleID == "big" {
		t.Errorf("200 formats of 10 bytes each: %s by %s, fail closed %v (%s); want the condition judged (false)", v.Action, v.RuleID, v.FailClosed, v.Reason)
	}
}

// YAML anchors work in the policy section: an alias for a value, a rule or
// the whole section, and merge keys in a rule (its own keys win).
func TestParseConfigAnchors(t *testing.T) {
	for _, tt := range []struct{ name, cfg, want string }{
		{"approvers", "x-sre: &sre [U1SRE, U2SRE]\npolicy:\n  rules:\n    - {tool: deploy, verdict: ask, approvers: *sre}\n",
			"id=rule-1 tool=deploy verdict=ask approvers=U1SRE,U2SRE"},
		{"the section", "x-base: &base {default: deny, rules: [{tool: a, verdict: allow}]}\npolicy: *base\n", "id=rule-1 tool=a verdict=allow"},
		{"a merge", "x-common: &common {verdict: ask, approvers: [U1SRE], ttl: 2h}\npolicy:\n  rules:\n    - <<: *common\n      tool: deploy\n      ttl: 1h\n",
			"id=rule-1 tool=deploy verdict=ask approvers=U1SRE ttl=1h"},
		{"a rule", "x-r: &r {tool: deploy, verdict: deny}\npolicy:\n  rules:\n    - *r\n", "id=rule-1 tool=deploy verdict=deny"},
		{"nested merges", "x-base: &base {verdict: ask, ttl: 2h, reason: base}\nx-common: &common {<<: *base, approvers: [U1SRE], ttl: 1h}\npolicy:\n  rules:\n    - <<: [*common, *base]\n      tool: deploy\n",
			"id=rule-1 tool=deploy verdict=ask approvers=U1SRE ttl=1h reason=base"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseConfig([]byte(tt.cfg))
			if err != nil {
				t.Fatal(err)
			}
			if rs := p.Rules(); len(rs) != 1 || rs[0].String() != tt.want {
				t.Errorf("rules %v, want [%s]", rs, tt.want)
			}
		})
	}
	if _, err := ParseConfig([]byte("x-l: &l [a]\npolicy:\n  rules:\n    - <<: *l\n      tool: x\n      verdict: ask\n")); err == nil || !strings.Contains(err.Error(), "want a mapping") {
		t.Errorf("a merge of a list: %v, want an error", err)
	}
	if _, err := ParseConfig([]byte("x-a: &a {tool: x, <<: *a}\npolicy:\n  rules:\n    - <<: *a\n      verdict: ask\n")); err == nil || !strings.Contains(err.Error(), "merges itself") {
		t.Errorf("a mapping that merges itself: %v, want an error", err)
	}
}

// ArgsRead names the arguments a condition reads by name, however it
// reads them, and nothing else: not a key computed at run time, not a
// field of a value that is no argument.
func TestArgsRead(t *testing.T) {
	for _, tt := range []struct {
		when string
		want []string
	}{
		{`has(args.pth) && args.pth.startsWith(".env")`, []string{"pth"}},
		{`args.env == "prod" || args.?region.orValue("") == "eu" || args["dry-run"] == true`, []string{"dry-run", "env", "region"}},
		{`args[?"count"].orValue(0) > 5 && args.items.exists(i, i.name == "x")`, []string{"count", "items"}},
		{`args[user] == "x" && channel == "C1"`, nil},
		{`"pth" in args && args.dir == "/"`, []string{"dir", "pth"}},
		{`args.targets.exists(args, args.region == "eu")`, nil},
		{`not valid CEL (`, nil},
		{``, nil},
	} {
		if got := ArgsRead(tt.when); !slices.Equal(got, tt.want) {
			t.Errorf("ArgsRead(%q) = %q, want %q", tt.when, got, tt.want)
		}
	}
}
