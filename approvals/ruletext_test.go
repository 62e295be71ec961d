package approvals

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		name string
		text string
		want Rule
	}{
		{"minimal", "tool=files__* verdict=allow", Rule{Tool: "files__*", Verdict: Allow}},
		{"full",
			`tool=files__delete_* verdict=ask when='args.path.startsWith("/tmp")' approvers=U1,S2 four_eyes=true ttl=2h reason="Deleting needs \"review\""`,
			Rule{Tool: "files__delete_*", Verdict: Ask, When: `args.path.startsWith("/tmp")`, Approvers: []string{"U1", "S2"}, FourEyes: true, TTL: 2 * time.Hour, Reason: `Deleting needs "review"`}},
		{"id and any order", "reason=no verdict=DENY id=no-shell tool=shell__run", Rule{ID: "no-shell", Tool: "shell__run", Verdict: Deny, Reason: "no"}},
		{"extra spaces", "  tool=a   verdict=ask  ", Rule{Tool: "a", Verdict: Ask}},
		{"smart quotes", `tool=a verdict=ask when=‘args.p == “x”’ reason=“it’s risky”`, Rule{Tool: "a", Verdict: Ask, When: `args.p == "x"`, Reason: "it's risky"}},
		{"slack escapes", `tool=a verdict=ask when='args.n &lt; 3 &amp;&amp; args.n &gt; 1'`, Rule{Tool: "a", Verdict: Ask, When: "args.n < 3 && args.n > 1"}},
		{"slack mentions", `tool=a verdict=ask approvers=<@U1ABC|ana>,<!subteam^S2DEF|@ops>,W3`, Rule{Tool: "a", Verdict: Ask, Approvers: []string{"U1ABC", "S2DEF", "W3"}}},
		{"quoted list with spaces", `tool=a verdict=ask approvers="U1, U2"`, Rule{Tool: "a", Verdict: Ask, Approvers: []string{"U1", "U2"}}},
		{"quotes mid value", `tool=a verdict=ask reason=a' 'b`, Rule{Tool: "a", Verdict: Ask, Reason: "a b"}},
		{"four_eyes false", "tool=a verdict=ask four_eyes=false", Rule{Tool: "a", Verdict: Ask}},
		{"min_approvals", "tool=a verdict=ask approvers=U1,U2 min_approvals=2", Rule{Tool: "a", Verdict: Ask, Approvers: []string{"U1", "U2"}, MinApprovals: 2}},
		{"min_approvals with a group", "tool=a verdict=ask approvers=S1 min_approvals=3", Rule{Tool: "a", Verdict: Ask, Approvers: []string{"S1"}, MinApprovals: 3}},
		{"min_approvals anyone", "tool=a verdict=ask min_approvals=2", Rule{Tool: "a", Verdict: Ask, MinApprovals: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRule(tt.text)
			if err != nil {
				t.Fatalf("ParseRule(%q): %v", tt.text, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseRule(%q):\ngot  %#v\nwant %#v", tt.text, got, tt.want)
			}
		})
	}
}

func TestParseRuleErrors(t *testing.T) {
	tests := []struct {
		name, text, want string
	}{
		{"empty", "   ", "empty rule"},
		{"no equals", "tool files__*", `expected key=value, got "tool"`},
		{"empty key", "=x", "expected key=value"},
		{"unknown key", "tool=a verdict=ask approver=U1", `unknown key "approver"`},
		{"key twice", "tool=a tool=b verdict=ask", "tool: given twice"},
		{"missing tool", "verdict=ask", "tool: missing"},
		{"missing verdict", "tool=a", "verdict: missing"},
		{"unknown verdict", "tool=a verdict=maybe", `unknown verdict "maybe"`},
		{"bad glob", "tool=a[ verdict=ask", "bad glob"},
		{"glob no tool name matches", "tool=gh__repos.delete verdict=deny", `tool: "gh__repos.delete" can match no tool`},
		{"cel syntax", "tool=a verdict=ask when='args.x =='", "when: ERROR"},
		{"cel not bool", "tool=a verdict=ask when=args.x", "must be a bool expression"},
		{"regex literal that does not compile", `tool=a verdict=deny when='args.path.matches("[a-")'`, "when: error parsing regexp"},
		{"timestamp literal CEL cannot read", `tool=a verdict=deny when='timestamp(args.at) >= timestamp("2025-12-24")'`, "invalid timestamp argument"},
		{"duration literal CEL cannot read", `tool=a verdict=deny when='duration(args.wait) > duration("2d")'`, "invalid duration argument"},
		{"bad ttl", "tool=a verdict=ask ttl=2days", `ttl: bad duration "2days"`},
		{"zero ttl", "tool=a verdict=ask ttl=0", "ttl: duration 0 is zero"},
		{"ttl past a conversation's life", "tool=a verdict=ask ttl=1000h", "ttl: duration 1000h is longer than 672h"},
		{"bad four_eyes", "tool=a verdict=ask four_eyes=sure", "four_eyes: want true or false"},
		{"bad approver", "tool=a verdict=ask approvers=ana", `approvers: bad id "ana"`},
		{"bad id", "tool=a verdict=ask id=standing:x", "id: invalid id"},
		{"min_approvals zero", "tool=a verdict=ask min_approvals=0", "min_approvals: want a whole number, 1 or more"},
		{"when empty", "tool=a verdict=allow when=''", "when: empty"},
		{"min_approvals not a number", "tool=a verdict=ask min_approvals=two", "min_approvals: want a whole number"},
		{"min_approvals beyond the named users", "tool=a verdict=ask approvers=U1,U2,U1 min_approvals=3", "names only 2 approver(s), all individual users"},
		{"min_approvals on allow", "tool=a verdict=allow min_approvals=2", "only an ask waits for approvals"},
		{"unterminated single", "tool=a verdict=ask when='args.x", "when: unterminated ' quote"},
		{"unterminated double", `tool=a verdict=ask reason="oops`, `reason: unterminated " quote`},
		{"zero-width space in a condition", "tool=deploy verdict=deny when='args.service == \"pay\u200broll\"'", "invisible character (U+200B, at character 52)"},
		{"bidirectional control", "tool=deploy verdict=deny reason=\"\u202Efrozen\"", "invisible character (U+202E"},
		{"approvers empty", "tool=a verdict=ask approvers=", "approvers: empty"},
		{"approvers quoted empty", `tool=a verdict=ask approvers="" min_approvals=2`, "approvers: empty"},
		{"approvers only commas", "tool=a verdict=ask approvers=,", "approvers: empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRule(tt.text)
			if err == nil {
				t.Fatalf("ParseRule(%q) = %+v, want an error containing %q", tt.text, r, tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseRule(%q): got error %q, want it to contain %q", tt.text, err, tt.want)
			}
		})
	}
}

func TestRuleStringRoundTrip(t *testing.T) {
	rules := []Rule{
		{Tool: "a", Verdict: Allow},
		{ID: "x1", Tool: "files__delete_*", Verdict: Ask, When: `args.path.startsWith("/tmp")`, Approvers: []string{"U1", "S2"}, FourEyes: true, TTL: 90 * time.Minute, Reason: "needs review"},
		{Tool: "b", Verdict: Deny, Reason: `it's "bad" \ really`},
		{Tool: "c", Verdict: Ask, When: `args.s == 'x' && args.t == "y"`},
		{Tool: "d", Verdict: Ask, TTL: 72 * time.Hour},
		{Tool: "e", Verdict: Ask, Approvers: []string{"S1"}, MinApprovals: 2},
		{Tool: "f", Verdict: Ask, RemindAfter: 30 * time.Minute},
	}
	for _, r := range rules {
		s := r.String()
		got, err := ParseRule(s)
		if err != nil {
			t.Errorf("ParseRule(%q) of %+v: %v", s, r, err)
			continue
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("ParseRule(%q):\ngot  %#v\nwant %#v", s, got, r)
		}
	}
	if got, want := rules[4].String(), "tool=d verdict=ask ttl=72h"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
