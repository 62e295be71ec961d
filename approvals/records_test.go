package approvals

import (
	"context"
	"errors"
	"testing"

	"github.com/toolgate/toolgate/store"
)

// EvaluateRecords judges by the records it is given, as Evaluate judges by
// the same records read from the store, and reads nothing itself.
func TestEvaluateRecordsJudgesByTheGivenRecords(t *testing.T) {
	ctx := context.Background()
	e, ms, _ := newTestEngine(t)
	if _, err := e.AddRule(ctx, "U1ADMIN", Rule{ID: "freeze", Tool: "files__*", Verdict: Deny, Reason: "freeze"}); err != nil {
		t.Fatal(err)
	}
	recs := map[string][]store.Record{}
	for _, k := range e.RecordKinds() {
		rs, err := ms.Records(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		recs[k] = rs
	}
	in := call("files__delete", `{"path":"/tmp/x"}`, "C1")
	want := evalEngine(t, e, in)
	// A record store that fails: the verdict comes from recs alone.
	blind := NewEngine(mustParse(t, engineConfig), failingRecords{})
	got, err := blind.EvaluateRecords(ctx, in, recs)
	if err != nil || got.Action != want.Action || got.RuleID != want.RuleID || want.RuleID != "freeze" {
		t.Errorf("EvaluateRecords = %s by %q, %v; want %s by %q as Evaluate gives", got.Action, got.RuleID, err, want.Action, want.RuleID)
	}
	// No records: the file's rules alone.
	got, err = blind.EvaluateRecords(ctx, in, map[string][]store.Record{})
	if err != nil || got.Action != Ask || got.RuleID != "delete" {
		t.Errorf("EvaluateRecords with no records = %s by %q, %v; want ask by the file's rule delete", got.Action, got.RuleID, err)
	}
}

// failingRecords is a RecordStore that cannot be read.
type failingRecords struct{}

var errUnreadable = errors.New("records unreadable")

func (failingRecords) PutRecord(context.Context, store.Record, int64) (store.Record, error) {
	return store.Record{}, errUnreadable
}
func (failingRecords) Records(context.Context, string) ([]store.Record, error) {
	return nil, errUnreadable
}
func (failingRecords) DeleteRecord(context.Context, string, string) error { return errUnreadable }
