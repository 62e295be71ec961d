package approvals

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// BenchmarkEvaluateRecords judges a call by records read with it, as the
// agent does at every pause, decision and resume: 20 admin rules and 20
// standing rules, unchanged from one evaluation to the next.
func BenchmarkEvaluateRecords(b *testing.B) {
	p := mustParse(b, engineConfig)
	e := NewEngine(p, newMemStore())
	now := time.Now()
	recs := map[string][]store.Record{}
	for i := range 20 {
		ar := adminRule{Rule: Rule{ID: fmt.Sprintf("r%d", i), Tool: fmt.Sprintf("svc%d__*", i), When: `args.env == "prod"`, Verdict: Ask, Approvers: []string{"U1"}}, AddedBy: "U1", AddedAt: now.Add(time.Duration(i) * time.Second)}
		data, _ := json.Marshal(ar)
		recs[KindPolicyRule] = append(recs[KindPolicyRule], store.Record{Kind: KindPolicyRule, ID: ar.Rule.ID, Data: data})
		sr := StandingRule{ID: fmt.Sprintf("s%d", i), Tool: fmt.Sprintf("svc%d__deploy", i), Channel: "C1", When: `args.env == "staging"`, CreatedBy: "U1", CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
		data, _ = json.Marshal(sr)
		recs[KindStandingRule] = append(recs[KindStandingRule], store.Record{Kind: KindStandingRule, ID: sr.ID, Data: data})
	}
	in := Input{Tool: "svc3__deploy", Args: json.RawMessage(`{"env":"prod"}`), User: "U2", Channel: "C1"}
	b.ReportAllocs()
	for b.Loop() {
		v, err := e.EvaluateRecords(context.Background(), in, recs)
		if err != nil || v.Action != Ask || v.RuleID != "r3" {
			b.Fatalf("EvaluateRecords = %s %s, %v", v.Action, v.RuleID, err)
		}
	}
}

// The state compiled from records is judged by again only while they are
// the same and none of its standing rules has expired: a record changed in
// place, one added or removed, or a standing rule's expiry, is judged by
// anew.
func TestEvaluateRecordsJudgesChangesAnew(t *testing.T) {
	ctx := context.Background()
	e, _, c := newTestEngine(t)
	now := c.now()
	rule := func(verdict Action) store.Record {
		data, _ := json.Marshal(adminRule{Rule: Rule{ID: "r1", Tool: "svc__deploy", Verdict: verdict}, AddedBy: "U1", AddedAt: now})
		return store.Record{Kind: KindPolicyRule, ID: "r1", Data: data}
	}
	standing := func(expires time.Time) store.Record {
		data, _ := json.Marshal(StandingRule{ID: "s1", Tool: "files__delete", Channel: "C1", CreatedBy: "U1", CreatedAt: now, ExpiresAt: expires})
		return store.Record{Kind: KindStandingRule, ID: "s1", Data: data}
	}
	deploy := Input{Tool: "svc__deploy", Args: json.RawMessage(`{}`), User: "U2", Channel: "C1"}
	del := Input{Tool: "files__delete", Args: json.RawMessage(`{"path":"/tmp/a"}`), User: "U2", Channel: "C1"}
	judge := func(in Input, recs map[string][]store.Record) Action {
		t.Helper()
		v, err := e.EvaluateRecords(ctx, in, recs)
		if err != nil {
			t.Fatalf("EvaluateRecords: %v", err)
		}
		return v.Action
	}
	denying := map[string][]store.Record{KindPolicyRule: {rule(Deny)}}
	if got := judge(deploy, denying); got != Deny {
		t.Fatalf("deploy under a denying rule: %s", got)
	}
	// The same rule, its data changed in place under the same id.
	if got := judge(deploy, map[string][]store.Record{KindPolicyRule: {rule(Ask)}}); got != Ask {
		t.Errorf("deploy once the rule asks: %s, want ask", got)
	}
	// The caller's record changed in place after it was judged by.
	recs := map[string][]store.Record{KindPolicyRule: {rule(Deny)}}
	if got := judge(deploy, recs); got != Deny {
		t.Fatalf("deploy under a denying rule: %s", got)
	}
	data := recs[KindPolicyRule][0].Data
	ask := rule(Ask).Data // a byte shorter: "ask" for "deny"
	copy(data, ask)
	data[len(ask)] = ' '
	if got := judge(deploy, recs); got != Ask {
		t.Errorf("deploy once the caller's record asks: %s, want ask (record %s)", got, data)
	}
	// Removed.
	fresh, _, _ := newTestEngine(t)
	want, err := fresh.EvaluateRecords(ctx, deploy, map[string][]store.Record{})
	if err != nil || want.Action == Deny {
		t.Fatalf("deploy with no admin rule, on a new engine: %s, %v", want.Action, err)
	}
	if got := judge(deploy, map[string][]store.Record{}); got != want.Action {
		t.Errorf("deploy once the admin rule is removed: %s, want the file's %s", got, want.Action)
	}
	// A standing rule applies until it expires, with the same records.
	withStanding := map[string][]store.Record{KindStandingRule: {standing(now.Add(time.Minute))}}
	if got := judge(del, withStanding); got != Allow {
		t.Fatalf("delete under a standing rule: %s, want allow", got)
	}
	c.advance(time.Minute)
	if got := judge(del, withStanding); got != Ask {
		t.Errorf("delete once the standing rule expired: %s, want ask", got)
	}
}
