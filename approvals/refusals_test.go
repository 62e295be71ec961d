package approvals

import (
	"encoding/json"
	"strings"
	"testing"
)

// A key of a rule given with nothing in it is refused, as a blank when is:
// a blank approvers left by a template would open the rule to anyone in
// the channel, a blank four_eyes would drop four eyes, a blank ttl or
// remind_after would take the bot's default. Leaving the key out says so.
func TestParseConfigRefusesBlankKeys(t *testing.T) {
	rule := func(body string) string {
		return "policy:\n  rules:\n    - tool: ok\n      verdict: allow\n    - tool: x\n      verdict: ask\n" + body
	}
	tests := []struct {
		name string
		cfg  string
		want []string // substrings of the error
	}{
		{"approvers null", rule("      approvers:\n"), []string{"policy rule 2", "approvers (line 7)", "empty", "leave approvers out for anyone who can see the conversation"}},
		{"approvers tilde", rule("      approvers: ~\n"), []string{"policy rule 2", "approvers (line 7)", "empty"}},
		{"approvers empty list", rule("      approvers: []\n"), []string{"policy rule 2", "approvers (line 7)", "empty", "leave approvers out"}},
		{"approvers empty block list", rule("      approvers: [ ]\n      four_eyes: true\n"), []string{"approvers (line 7)", "empty"}},
		{"approvers null in a flow rule", "policy:\n  rules:\n    - {tool: x, verdict: ask, approvers: null, min_approvals: 2}\n", []string{"policy rule 1", "approvers (line 3)", "empty"}},
		{"approvers null through an alias", "x-nobody: &nobody\npolicy:\n  rules:\n    - {tool: x, verdict: ask, approvers: *nobody}\n", []string{"policy rule 1", "approvers", "empty"}},
		{"approvers empty through a merge", "x-common: &common {approvers: []}\npolicy:\n  rules:\n    - {<<: *common, tool: x, verdict: ask}\n", []string{"policy rule 1", "approvers", "empty"}},
		{"approvers with a null item", rule("      approvers: [~]\n"), []string{"policy rule 2", "approvers (line 7)", "item 1 (line 7) is empty", "leave approvers out"}},
		{"approvers with a blank block item", rule("      approvers:\n        - U1\n        -\n"), []string{"policy rule 2", "approvers", "item 2 (line 9) is empty"}},
		{"approvers with a null alias item", "x-nobody: &nobody\npolicy:\n  rules:\n    - {tool: x, verdict: ask, approvers: [*nobody]}\n", []string{"policy rule 1", "approvers", "item 1", "empty"}},
		{"four_eyes null", rule("      four_eyes:\n"), []string{"policy rule 2", "four_eyes (line 7)", "empty", "true or false"}},
		{"four_eyes tilde", rule("      four_eyes: ~\n"), []string{"four_eyes (line 7)", "empty"}},
		{"ttl null", rule("      ttl:\n"), []string{"policy rule 2", "ttl (line 7)", "empty", "leave the key out"}},
		{"ttl tilde", rule("      ttl: ~\n"), []string{"ttl (line 7)", "empty"}},
		{"remind_after null", rule("      remind_after: null\n"), []string{"policy rule 2", "remind_after (line 7)", "empty"}},
		{"min_approvals null", rule("      min_approvals:\n"), []string{"policy rule 2", "min_approvals (line 7)", "empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseConfig([]byte(tt.cfg))
			if err == nil {
				t.Fatalf("ParseConfig(%q): got no error (rules %+v), want one containing %q", tt.cfg, p.Rules(), tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ParseConfig(%q): got error %q, want it to contain %q", tt.cfg, err, w)
				}
			}
		})
	}
}

// The keys left out, or given, still parse.
func TestParseConfigKeysGivenOrLeftOut(t *testing.T) {
	p := mustParse(t, "policy:\n  rules:\n    - {tool: a, verdict: ask}\n    - {tool: b, verdict: ask, approvers: [U1, S2], four_eyes: false, ttl: 1h, remind_after: 30m, min_approvals: 2}\n")
	rs := p.Rules()
	if r := rs[0]; len(r.Approvers) != 0 || r.FourEyes || r.TTL != 0 || r.RemindAfter != 0 || r.MinApprovals > 1 {
		t.Errorf("rule with the keys left out: %+v", r)
	}
	if r := rs[1]; len(r.Approvers) != 2 || r.FourEyes || r.TTL.String() != "1h0m0s" || r.RemindAfter.String() != "30m0s" || r.MinApprovals != 2 {
		t.Errorf("rule with the keys given: %+v", r)
	}
}

// min_approvals is a plain decimal whole number: yaml.v3 would truncate
// 2.9 to 2 (and 1.5 to 1, dropping a two-person rule to one person) and
// read 0x2 as 2.
func TestParseConfigMinApprovalsWholeNumber(t *testing.T) {
	rule := func(v string) string {
		return "policy:\n  rules:\n    - tool: x\n      verdict: ask\n      min_approvals: " + v + "\n"
	}
	for _, v := range []string{"2.9", "1.5", "2.0", "0x2", "0o2", "1e0", "+2", "1_0", `"2"`, "'2'", "two", "[2]", "{n: 2}", "true", "99999999999999999999", "-1", "0", "02"} {
		t.Run(v, func(t *testing.T) {
			p, err := ParseConfig([]byte(rule(v)))
			if err == nil {
				t.Fatalf("min_approvals: %s: got no error (min_approvals %d), want one", v, p.Rules()[0].MinApprovals)
			}
			for _, w := range []string{"policy rule 1", "min_approvals (line 5)", "1 or more"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("min_approvals: %s: got error %q, want it to contain %q", v, err, w)
				}
			}
		})
	}
	for v, want := range map[string]int{"1": 1, "2": 2, "10": 10, "!!int 3": 3} {
		p, err := ParseConfig([]byte(rule(v)))
		if err != nil {
			t.Errorf("min_approvals: %s: %v", v, err)
			continue
		}
		if got := p.Rules()[0].MinApprovals; got != want {
			t.Errorf("min_approvals: %s: got %d, want %d", v, got, want)
		}
	}
}

// ==, != and in are strict at every depth: lists of the same length and
// maps with the same keys whose elements differ in kind fail the
// condition, as the values themselves would.
func TestConditionsCompareLikeWithLikeAtDepth(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "not-prod", Tool: "deploy", When: `args.targets != ["prod"]`, Verdict: Allow},
		{ID: "prod-labels", Tool: "label", When: `args.labels == {"env": "prod"}`, Verdict: Deny},
		{ID: "nested", Tool: "nested", When: `args.m == {"a": [{"b": 1}]}`, Verdict: Deny},
		{ID: "pairs", Tool: "pairs", When: `args.p in [["a", "b"], ["c", "d"]]`, Verdict: Allow},
		{ID: "lists", Tool: "lists", When: `args.l == [[1, 2], [3]]`, Verdict: Allow},
		{ID: "literal-first", Tool: "lit", When: `{"a": "x", "b": "y"} == args.m`, Verdict: Deny},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tool, args string
		want       Action
		failed     bool
	}{
		{"deploy", `{"targets":["dev"]}`, Allow, false},
		{"deploy", `{"targets":["prod"]}`, Ask, false},
		{"deploy", `{"targets":[["prod"]]}`, Ask, true},
		{"deploy", `{"targets":[{"name":"prod"}]}`, Ask, true},
		{"deploy", `{"targets":[1]}`, Ask, true},
		{"deploy", `{"targets":[null]}`, Allow, false}, // anything compares with null
		{"deploy", `{"targets":["dev","prod"]}`, Allow, false},
		{"label", `{"labels":{"env":"prod"}}`, Deny, false},
		{"label", `{"labels":{"env":"dev"}}`, Ask, false},
		{"label", `{"labels":{"env":["prod"]}}`, Deny, true},
		{"label", `{"labels":{"env":true}}`, Deny, true},
		{"label", `{"labels":{"team":["prod"]}}`, Ask, false}, // other keys: unequal
		{"nested", `{"m":{"a":[{"b":1}]}}`, Deny, false},
		{"nested", `{"m":{"a":[{"b":1.0}]}}`, Deny, false}, // numbers compare across kinds
		{"nested", `{"m":{"a":[{"b":2}]}}`, Ask, false},
		{"nested", `{"m":{"a":[{"b":"1"}]}}`, Deny, true},
		{"nested", `{"m":{"a":[{"b":[1]}]}}`, Deny, true},
		{"pairs", `{"p":["a","b"]}`, Allow, false},
		{"pairs", `{"p":["a","x"]}`, Ask, false},
		{"pairs", `{"p":["a",["b"]]}`, Ask, true},
		{"pairs", `{"p":[["a"],"b"]}`, Ask, true},
		{"lists", `{"l":[[1,2],[3]]}`, Allow, false},
		{"lists", `{"l":[[1,2],["3"]]}`, Ask, true},
		{"lists", `{"l":[[1,2],3]}`, Ask, true},
		{"lists", `{"l":[[1,2],[3,4]]}`, Ask, false},
		{"lit", `{"m":{"a":"x","b":"y"}}`, Deny, false},
		{"lit", `{"m":{"a":["x"],"b":"y"}}`, Deny, true},
		{"lit", `{"m":{"a":["x"],"c":"y"}}`, Ask, false}, // other keys: unequal
		{"lit", `{"m":{"a":"x"}}`, Ask, false},
	} {
		got := p.Evaluate(Input{Tool: tt.tool, Args: json.RawMessage(tt.args)})
		if got.Action != tt.want || got.FailClosed != tt.failed {
			t.Errorf("Evaluate(%s %s) = %s (failed closed %v, %q), want %s (failed closed %v)", tt.tool, tt.args, got.Action, got.FailClosed, got.Problem, tt.want, tt.failed)
		}
	}
}

// The problem names where at depth the kinds differ.
func TestConditionsCompareAtDepthProblem(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{{ID: "r", Tool: "t", When: `args.labels == {"env": "prod"}`, Verdict: Deny}})
	if err != nil {
		t.Fatal(err)
	}
	got := p.Evaluate(Input{Tool: "t", Args: json.RawMessage(`{"labels":{"env":["prod"]}}`)})
	if !strings.Contains(got.Problem, "list") || !strings.Contains(got.Problem, "string") {
		t.Errorf("problem %q, want it to name a list and a string", got.Problem)
	}
}

// Arguments whose strings are not valid UTF-8, or hold an escape of half a
// surrogate pair, are refused: decoding would turn them into U+FFFD, so
// that different arguments shared a fingerprint and the tool got other
// bytes than the model sent.
func TestFingerprintRefusesInvalidText(t *testing.T) {
	for _, in := range []string{
		`{"name":"\ud800"}`,
		`{"name":"\uD800"}`,
		`{"name":"\udc00"}`,
		`{"name":"a\ud800b"}`,
		`{"name":"\ud800\u0041"}`,
		`{"name":"\ud800\ud800"}`,
		`{"name":"\udc00\ud800"}`,
		`{"name":"\ud83d"}`,
		`{"\ud800":1}`,
		`{"a":["x","\udfff"]}`,
		"{\"name\":\"\xff\"}",
		"{\"name\":\"\xed\xa0\x80\"}", // a surrogate encoded as UTF-8
		"{\"n\xc3\":1}",
	} {
		if c, fp, err := Fingerprint(json.RawMessage(in)); err == nil {
			t.Errorf("Fingerprint(%q) = %s, %s; want an error", in, c, fp)
		} else if !strings.Contains(err.Error(), "invalid UTF-8") && !strings.Contains(err.Error(), "surrogate") {
			t.Errorf("Fingerprint(%q): error %q, want it to say invalid UTF-8 or surrogate", in, err)
		}
	}
	for in, want := range map[string]string{
		`{"name":"\ud83d\ude00"}`:   `{"name":"😀"}`,
		`{"name":"\uD83D\uDE00"}`:   `{"name":"😀"}`,
		`{"name":"\ufffd"}`:         `{"name":"` + "\ufffd" + `"}`,
		`{"name":"\\ud800"}`:        `{"name":"\\ud800"}`, // an escaped backslash, then text
		`{"name":"\\\ud83d\ude00"}`: `{"name":"\\😀"}`,
		`{"name":"é","u":"\u00e9"}`: `{"name":"é","u":"é"}`,
	} {
		got, _, err := Fingerprint(json.RawMessage(in))
		if err != nil || string(got) != want {
			t.Errorf("Fingerprint(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	// What was refused can no longer share a fingerprint with U+FFFD.
	_, fffd, err := Fingerprint(json.RawMessage(`{"name":"\ufffd"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{`{"name":"\ud800"}`, "{\"name\":\"\xff\"}"} {
		if _, fp, err := Fingerprint(json.RawMessage(in)); err == nil && fp == fffd {
			t.Errorf("Fingerprint(%q) shares the fingerprint of U+FFFD", in)
		}
	}
}

// CheckText judges the text as written, for callers that decode arguments
// (filling a schema's defaults) before Fingerprint sees them.
func TestCheckText(t *testing.T) {
	for in, want := range map[string]string{
		`{"a":"\ud800"}`:           "unpaired surrogate escape (\\ud800)",
		`{"a":"\uDBFF\u0041"}`:     "unpaired surrogate escape (\\udbff)",
		`{"a":"\ud800\"}`:          "unpaired surrogate escape",
		`{"a":"\udc00"}`:           "unpaired surrogate escape (\\udc00)",
		"{\"a\":\"\xc3\x28\"}":     "invalid UTF-8",
		`{"a":"\ud83d\ude00"}`:     "",
		`{"a":"\\ud800"}`:          "",
		`{"a":"\\\\\ud83d\ude00"}`: "",
		`{"a":"\u00e9\n\t\""}`:     "",
		`{"a":"\u12"}`:             "", // not JSON: the decoder's to say
		`\`:                        "",
		``:                         "",
	} {
		err := CheckText([]byte(in))
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckText(%q) = %v, want nil", in, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("CheckText(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}
