package agent_test

import (
	"context"
	"testing"

	"github.com/toolgate/toolgate/approvals"
)

// An admin makes a tool's rule four-eyes after its card was posted: an
// Always allow on the card, judged under the policy as it is at the
// click, is refused (it would save a standing rule that never applies,
// while the card said later calls run without asking), and no standing
// rule is saved.
func TestRememberRefusedWhenFourEyesAddedSinceTheCard(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			if p.FourEyes {
				t.Fatal("the card is four-eyes already")
			}
			r, err := approvals.ParseRule(`tool=restart verdict=ask four_eyes=true reason="two people"`)
			must(t, err)
			if _, err := w.engine.AddRule(ctx, "UADMIN", r); err != nil {
				t.Fatal(err)
			}
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Remember, Decider: "UAPPROVER1"})
			if err == nil {
				t.Error("Always allow on a call whose rule is four-eyes now was accepted")
			}
			if rules, _ := w.engine.StandingRules(ctx, "C1"); len(rules) != 0 {
				t.Errorf("%d standing rule(s) saved: %+v", len(rules), rules)
			}
		})
	}
}
