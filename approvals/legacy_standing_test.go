package approvals

import (
	"context"
	"testing"
)

// A standing rule made under the annotations' ask before their asks had
// digests (RuleID "annotations", RuleDigest ""), stored by an earlier
// version, relaxes the ask of a tool that says nothing of itself, and no
// longer once the tool says it is destructive.
func TestLegacyAnnotationsStandingRuleEndsWhenTheToolSaysItIsDestructive(t *testing.T) {
	p, err := ParseConfig([]byte("policy:\n  default: ask\n"))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	ctx := context.Background()
	// As an earlier version saved it: no digest.
	if _, err := e.Remember(ctx, "UAPPROVER1", StandingRule{Tool: "restart", Channel: "C1", RuleID: RuleAnnotations}); err != nil {
		t.Fatal(err)
	}
	in := call("restart", `{}`, "C1")
	if v := evalEngine(t, e, in); v.Action != Allow {
		t.Fatalf("the tool that says nothing: %s (%s), want allow by the legacy standing rule", v.Action, v.RuleID)
	}
	yes := true
	in.Hints = Hints{Destructive: &yes}
	if v := evalEngine(t, e, in); v.Action != Ask {
		t.Errorf("once the tool says it is destructive, a standing rule made under the annotations by an earlier version still gives %s (%s: %s); want it asked", v.Action, v.RuleID, v.Reason)
	}
}
