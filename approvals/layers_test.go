package approvals

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// README, "The policy language": a comparison (==, !=, in) of values of
// different kinds, at any depth, fails closed where CEL would answer
// false. The environment enables CEL's optional types (args.?key), and
// a comparison of optionals compares the values they hold: a list with a
// string there must fail closed too, not answer false.
func TestOptionalComparisonsOfOtherKindsFailClosed(t *testing.T) {
	for _, when := range []string{`args.?env == optional.of("prod")`, `args.?env in [optional.of("prod")]`, `[args.?env] == [optional.of("prod")]`} {
		p, err := NewPolicy(Ask, []Rule{
			{ID: "no-prod", Tool: "deploy", When: when, Verdict: Deny, Reason: "no prod"},
			{ID: "rest", Tool: "deploy", Verdict: Allow},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range []string{`{"env":"prod"}`, `{"env":["prod"]}`, `{"env":{"prod":true}}`} {
			v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(args)})
			if v.Action != Deny {
				t.Errorf("when %s, deploy %s: %s by rule %s (failed closed %v), want deny: the env of another kind than the rule's must fail closed", when, args, v.Action, v.RuleID, v.FailClosed)
			}
		}
		if v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{"env":"dev"}`)}); v.Action != Allow {
			t.Errorf("when %s, deploy to dev: %s by rule %s, want allow", when, v.Action, v.RuleID)
		}
		if v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{}`)}); v.Action != Allow {
			t.Errorf("when %s, deploy with no env: %s by rule %s, want allow", when, v.Action, v.RuleID)
		}
	}
}

// A map literal whose keys are of another kind than JSON's (always
// strings) fails closed, as a comparison of values of other kinds does.
func TestMapKeysOfOtherKindsFailClosed(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "no-one", Tool: "deploy", When: `args.m == {1: "a"}`, Verdict: Deny, Reason: "no"},
		{ID: "rest", Tool: "deploy", Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	if v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{"m":{"1":"a"}}`)}); v.Action != Deny || !v.FailClosed {
		t.Errorf("deploy {\"m\":{\"1\":\"a\"}}: %s by rule %s (failed closed %v), want a deny that failed closed", v.Action, v.RuleID, v.FailClosed)
	}
	if v := p.Evaluate(Input{Tool: "deploy", Args: json.RawMessage(`{"m":"x"}`)}); v.Action != Deny || !v.FailClosed {
		t.Errorf("deploy {\"m\":\"x\"}: %s by rule %s, want a deny that failed closed", v.Action, v.RuleID)
	}
}

// README, "The policy language": when both layers ask, the file rule's
// approvers stay; a runtime rule whose condition fails gets "whatever the
// rule that would decide otherwise requires, so that whoever approves it
// could have approved it either way". Here the file rule names UALICE:
// whether or not the failed runtime rule applies, UALICE decides (her
// copy of the card goes to her by DM). The runtime layer's own
// combination (UBOB, who must see the conversation) must not leave its
// "must see the conversation" on the file's approvers, which denies the
// call in a DM and keeps UALICE from deciding it in a channel she is not in.
func TestFileApproversStayWithoutTheRuntimeAudience(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{{ID: "sec", Tool: "deploy", Verdict: Ask, Approvers: []string{"UALICE"}}})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	e := NewEngine(p, newMemStore(), WithClock(c.now))
	for _, text := range []string{`id=anyone tool=deploy verdict=ask`, `id=prod tool=deploy verdict=ask approvers=UBOB when='args.env == "prod"'`} {
		r, err := ParseRule(text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
			t.Fatal(err)
		}
		c.advance(time.Minute)
	}
	// Each way the failed rule could go, for reference.
	for _, args := range []string{`{"env":"prod"}`, `{"env":"dev"}`} {
		v := evalEngine(t, e, call("deploy", args, "D1"))
		t.Logf("%s in a DM: %s by %s, approvers %v, needs audience %v", args, v.Action, v.RuleID, v.Approvers, v.NeedsAudience)
	}
	for _, ch := range []string{"D1", "C1"} {
		v := evalEngine(t, e, call("deploy", `{}`, ch))
		if v.Action != Ask || strings.Join(v.Approvers, ",") != "UALICE" || v.NeedsAudience {
			t.Errorf("env left out, in %s: %s by %s, approvers %v, needs audience %v (%s), want an ask of UALICE as either way", ch, v.Action, v.RuleID, v.Approvers, v.NeedsAudience, v.Reason)
		}
	}
}

// README: a runtime rule "can tighten any call ... but never relax a
// file rule". The file alone asks UALICE only if she can see the
// conversation (its first rule could not be evaluated, and the rule that
// decides otherwise leaves the call to the conversation's people). A
// runtime ask of anyone in the conversation, which tightens nothing,
// must not lift that: UALICE, outside a private channel, would decide
// (and be shown) a call the file leaves to the channel's members.
func TestRuntimeAskKeepsTheFilesAudience(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{
		{ID: "prod", Tool: "deploy", When: `args.env == "prod"`, Verdict: Ask, Approvers: []string{"UALICE"}},
		{ID: "others", Tool: "deploy", Verdict: Ask},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	before := evalEngine(t, e, call("deploy", `{}`, "G1PRIVATE"))
	if before.Action != Ask || !before.NeedsAudience {
		t.Fatalf("file alone: %s by %v, needs audience %v; want an ask of UALICE in the conversation", before.Action, before.Approvers, before.NeedsAudience)
	}
	r, err := ParseRule(`id=rt tool=deploy verdict=ask reason="runtime review"`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
		t.Fatal(err)
	}
	after := evalEngine(t, e, call("deploy", `{}`, "G1PRIVATE"))
	if after.Action != Ask || !after.NeedsAudience {
		t.Errorf("with the runtime ask: %s by %s, approvers %v, needs audience %v; want UALICE still only if she can see the conversation", after.Action, after.RuleID, after.Approvers, after.NeedsAudience)
	}
}
