package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// memStore is an in-memory RecordStore and Auditor following the store
// contract; fail, when set, is returned by every call.
type memStore struct {
	mu      sync.Mutex
	records map[string]store.Record // kind + "/" + id
	audit   []store.AuditEntry
	fail    error
}

func newMemStore() *memStore { return &memStore{records: make(map[string]store.Record)} }

func (m *memStore) PutRecord(_ context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return store.Record{}, m.fail
	}
	key := r.Kind + "/" + r.ID
	old := m.records[key]
	if expectVersion >= 0 && old.Version != expectVersion {
		return store.Record{}, store.ErrConflict
	}
	r.Version = old.Version + 1
	r.UpdatedAt = time.Now()
	m.records[key] = r
	return r, nil
}

func (m *memStore) Records(_ context.Context, kind string) ([]store.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	var out []store.Record
	for _, r := range m.records {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b store.Record) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (m *memStore) DeleteRecord(_ context.Context, kind, id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	key := kind + "/" + id
	if _, ok := m.records[key]; !ok {
		return store.ErrNotFound
	}
	delete(m.records, key)
	return nil
}

func (m *memStore) Audit(_ context.Context, e store.AuditEntry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.audit = append(m.audit, e)
	return nil
}

func (m *memStore) auditActions() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, e := range m.audit {
		out = append(out, e.Actor+":"+e.Action)
	}
	return out
}

func (m *memStore) auditEntries() []store.AuditEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.audit)
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const engineConfig = `
policy:
  default: allow
  rules:
    - id: read
      tool: "files__read_*"
      verdict: allow
    - id: no-etc
      tool: "files__delete"
      when: 'args.path.startsWith("/etc/")'
      verdict: deny
      reason: never delete in /etc
    - id: delete
      tool: "files__delete"
      verdict: ask
    - id: deploy
      tool: "deploy"
      verdict: ask
      four_eyes: true
      approvers: [U1LEAD]
    - id: strict
      tool: "shell__run"
      when: 'args.cmd.startsWith("ls")'
      verdict: allow
`

func newTestEngine(t *testing.T) (*Engine, *memStore, *clock) {
	t.Helper()
	p := mustParse(t, engineConfig)
	ms := newMemStore()
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return NewEngine(p, ms, WithClock(c.now)), ms, c
}

func evalEngine(t *testing.T, e *Engine, in Input) Verdict {
	t.Helper()
	v, err := e.Evaluate(context.Background(), in)
	if err != nil {
		t.Fatalf("Evaluate(%s %s): %v", in.Tool, in.Args, err)
	}
	return v
}

func call(tool, args, channel string) Input {
	return Input{Tool: tool, Args: json.RawMessage(args), User: "U9USER", Channel: channel}
}

func TestEngineFileRulesOnly(t *testing.T) {
	e, _, _ := newTestEngine(t)
	tests := []struct {
		in       Input
		want     Action
		wantRule string
	}{
		{call("files__read_file", `{}`, "C1"), Allow, "read"},
		{call("files__delete", `{"path":"/etc/passwd"}`, "C1"), Deny, "no-etc"},
		{call("files__delete", `{"path":"/tmp/x"}`, "C1"), Ask, "delete"},
		{call("unknown", `{}`, "C1"), Ask, RuleAnnotations},
	}
	for _, tt := range tests {
		got := evalEngine(t, e, tt.in)
		if got.Action != tt.want || got.RuleID != tt.wantRule {
			t.Errorf("Evaluate(%s %s) = %s by %q, want %s by %q", tt.in.Tool, tt.in.Args, got.Action, got.RuleID, tt.want, tt.wantRule)
		}
	}
}

func TestEngineAdminRules(t *testing.T) {
	ctx := context.Background()
	e, ms, c := newTestEngine(t)
	in := call("files__delete", `{"path":"/tmp/x"}`, "C1")

	// An admin rule tightens a file rule's ask.
	first, err := ParseRule(`id=tmp-ok tool=files__delete verdict=ask four_eyes=true when='args.path.startsWith("/tmp/")'`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "U1ADMIN", first); err != nil {
		t.Fatalf("AddRule: %v", err)
	}
	if got := evalEngine(t, e, in); got.Action != Ask || got.RuleID != "tmp-ok" || !got.FourEyes {
		t.Errorf("after adding tmp-ok: got %s by %q (four eyes %v), want a four-eyes ask by tmp-ok", got.Action, got.RuleID, got.FourEyes)
	}

	// A newer admin rule wins over an older one.
	c.advance(time.Minute)
	second, err := e.AddRule(ctx, "U1ADMIN", Rule{Tool: "files__*", Verdict: Deny, Reason: "freeze"})
	if err != nil {
		t.Fatalf("AddRule: %v", err)
	}
	if !strings.HasPrefix(second.ID, "admin-") {
		t.Errorf("generated id: got %q, want prefix admin-", second.ID)
	}
	if got := evalEngine(t, e, in); got.Action != Deny || got.RuleID != second.ID || got.Reason != "freeze" {
		t.Errorf("after adding the freeze: got %s by %q (%q), want deny by %q (freeze)", got.Action, got.RuleID, got.Reason, second.ID)
	}

	views, err := e.Rules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, v := range views {
		order = append(order, string(v.Source)+":"+v.ID)
	}
	want := "admin:" + second.ID + ",admin:tmp-ok,file:read,file:no-etc,file:delete,file:deploy,file:strict"
	if got := strings.Join(order, ","); got != want {
		t.Errorf("Rules() order: got %s, want %s", got, want)
	}
	if views[1].AddedBy != "U1ADMIN" || !views[1].AddedAt.Equal(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("Rules()[1]: got added by %q at %v, want U1ADMIN at 12:00", views[1].AddedBy, views[1].AddedAt)
	}

	// Removing the admin rule brings back the earlier verdict.
	if err := e.RemoveRule(ctx, "U1ADMIN", second.ID); err != nil {
		t.Fatalf("RemoveRule(%s): %v", second.ID, err)
	}
	if got := evalEngine(t, e, in); got.RuleID != "tmp-ok" {
		t.Errorf("after removing the freeze: got rule %q, want tmp-ok", got.RuleID)
	}

	// A file rule cannot be removed at run time.
	if err := e.RemoveRule(ctx, "U1ADMIN", "no-etc"); !errors.Is(err, ErrFileRule) {
		t.Fatalf("RemoveRule(no-etc): got %v, want ErrFileRule", err)
	}
	if got := evalEngine(t, e, call("files__delete", `{"path":"/etc/passwd"}`, "C1")); got.Action != Deny || got.RuleID != "no-etc" {
		t.Errorf("after trying to remove no-etc: got %s by %q, want deny by no-etc", got.Action, got.RuleID)
	}

	wantAudit := "U1ADMIN:policy_add,U1ADMIN:policy_add,U1ADMIN:policy_remove"
	if got := strings.Join(ms.auditActions(), ","); got != wantAudit {
		t.Errorf("audit: got %s, want %s", got, wantAudit)
	}
	if d := ms.audit[0].Detail; !strings.Contains(d, "id=tmp-ok") || !strings.Contains(d, "tool=files__delete") {
		t.Errorf("audit detail of the first add: got %q, want the rule's id and text", d)
	}
	// The removal says what rule went, not only its id.
	if rm := ms.audit[2]; rm.Detail != "id="+second.ID+" "+second.String() || rm.Tool != "files__*" {
		t.Errorf("audit of the removal: detail %q, tool %q; want the id, the rule's text and its tool", rm.Detail, rm.Tool)
	}
}

func TestEngineRuleChangeErrors(t *testing.T) {
	ctx := context.Background()
	e, ms, _ := newTestEngine(t)
	if _, err := e.AddRule(ctx, "U1", Rule{ID: "x", Tool: "a", Verdict: Allow}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		do      func() error
		wantIs  error
		wantMsg string
	}{
		{"add duplicate admin id", func() error {
			_, err := e.AddRule(ctx, "U1", Rule{ID: "x", Tool: "b", Verdict: Deny})
			return err
		}, ErrRuleExists, "add rule x"},
		{"add file rule id", func() error {
			_, err := e.AddRule(ctx, "U1", Rule{ID: "read", Tool: "b", Verdict: Deny})
			return err
		}, ErrRuleExists, "policy file has a rule"},
		{"add invalid cel", func() error {
			_, err := e.AddRule(ctx, "U1", Rule{Tool: "b", Verdict: Deny, When: "args."})
			return err
		}, nil, "when: ERROR"},
		{"add regex literal that does not compile", func() error {
			_, err := e.AddRule(ctx, "U1", Rule{Tool: "b", Verdict: Deny, When: `args.path.matches("[a-")`})
			return err
		}, nil, "when: error parsing regexp"},
		{"add reserved id", func() error {
			_, err := e.AddRule(ctx, "U1", Rule{ID: "annotations", Tool: "b", Verdict: Deny})
			return err
		}, nil, "reserved"},
		{"remove unknown", func() error { return e.RemoveRule(ctx, "U1", "nope") }, ErrUnknownRule, "remove rule nope"},
		{"revoke unknown", func() error { return e.Revoke(ctx, "U1", "nope") }, ErrUnknownRule, "revoke standing rule nope"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.do()
			if err == nil {
				t.Fatalf("got no error, want one containing %q", tt.wantMsg)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("got %v, want it to wrap %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("got %q, want it to contain %q", err, tt.wantMsg)
			}
		})
	}
	// A file rule cannot be removed at run time.
	if err := e.RemoveRule(ctx, "U1", "read"); !errors.Is(err, ErrFileRule) || !strings.Contains(err.Error(), "policy file") {
		t.Errorf("RemoveRule(read): got %v, want ErrFileRule naming the policy file", err)
	}
	if got := len(ms.auditActions()); got != 1 {
		t.Errorf("audit entries: got %d, want 1 (failed changes are not audited)", got)
	}
}

func TestEngineStandingRules(t *testing.T) {
	ctx := context.Background()
	e, ms, c := newTestEngine(t)
	s, err := e.Remember(ctx, "U2BOSS", StandingRule{Tool: "files__delete", Channel: "C1", When: `args.path.startsWith("/tmp/") && args.size < 10`})
	if err != nil {
		t.Fatalf("Remember: %v", err)
	}
	if !strings.HasPrefix(s.ID, "sr-") || s.CreatedBy != "U2BOSS" || !s.CreatedAt.Equal(c.now()) {
		t.Errorf("Remember: got %+v, want a generated sr- id, created by U2BOSS now", s)
	}
	if _, err := e.Remember(ctx, "U2BOSS", StandingRule{ID: "deploy-c1", Tool: "deploy", Channel: "C1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Remember(ctx, "U2BOSS", StandingRule{ID: "all-c1", Tool: "unknown", Channel: "C1", ExpiresAt: c.now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		in       Input
		want     Action
		wantRule string
	}{
		{"relaxes ask in its channel", call("files__delete", `{"path":"/tmp/a","size":1}`, "C1"), Allow, StandingPrefix + s.ID},
		{"not in another channel", call("files__delete", `{"path":"/tmp/a","size":1}`, "C2"), Ask, "delete"},
		{"condition false", call("files__delete", `{"path":"/tmp/a","size":20}`, "C1"), Ask, "delete"},
		{"condition error keeps ask", call("files__delete", `{"path":"/tmp/a"}`, "C1"), Ask, "delete"},
		{"never overrides deny", call("files__delete", `{"path":"/etc/x"}`, "C1"), Deny, "no-etc"},
		{"never relaxes four eyes", call("deploy", `{}`, "C1"), Ask, "deploy"},
		{"relaxes an annotations ask", call("unknown", `{}`, "C1"), Allow, StandingPrefix + "all-c1"},
		{"exact tool name", call("unknown2", `{}`, "C1"), Ask, RuleAnnotations},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := evalEngine(t, e, tt.in)
			if got.Action != tt.want || got.RuleID != tt.wantRule {
				t.Errorf("Evaluate(%s %s in %s) = %s by %q (%s), want %s by %q",
					tt.in.Tool, tt.in.Args, tt.in.Channel, got.Action, got.RuleID, got.Reason, tt.want, tt.wantRule)
			}
		})
	}

	// A fail-closed ask is not relaxed.
	if _, err := e.Remember(ctx, "U2BOSS", StandingRule{Tool: "shell__run", Channel: "C1"}); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, e, call("shell__run", `{"cmd": 1}`, "C1")); got.Action != Ask || got.RuleID != "strict" {
		t.Errorf("fail-closed ask with a standing rule: got %s by %q, want ask by strict", got.Action, got.RuleID)
	}

	list, err := e.StandingRules(ctx, "C1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 4 {
		t.Errorf("StandingRules(C1): got %d rules, want 4", len(list))
	}
	if other, _ := e.StandingRules(ctx, "C2"); len(other) != 0 {
		t.Errorf("StandingRules(C2): got %d rules, want 0", len(other))
	}

	// Expiry.
	c.advance(time.Hour)
	if got := evalEngine(t, e, call("unknown", `{}`, "C1")); got.Action != Ask {
		t.Errorf("after expiry: got %s by %q, want ask", got.Action, got.RuleID)
	}
	if list, _ := e.StandingRules(ctx, ""); len(list) != 3 {
		t.Errorf("StandingRules after expiry: got %d, want 3", len(list))
	}
	// The expired rule was deleted, not kept to be skipped on every check.
	if recs, _ := ms.Records(ctx, KindStandingRule); len(recs) != 3 {
		t.Errorf("standing rule records after expiry: got %d, want 3 (the expired one deleted)", len(recs))
	}

	// Revoke.
	if err := e.Revoke(ctx, "U3", s.ID); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if got := evalEngine(t, e, call("files__delete", `{"path":"/tmp/a","size":1}`, "C1")); got.Action != Ask {
		t.Errorf("after revoke: got %s by %q, want ask", got.Action, got.RuleID)
	}
	want := "U2BOSS:standing_add,U2BOSS:standing_add,U2BOSS:standing_add,U2BOSS:standing_add,system:standing_expire,U3:standing_revoke"
	if got := strings.Join(ms.auditActions(), ","); got != want {
		t.Errorf("audit: got %s, want %s", got, want)
	}
	// Each names the rule's channel, so the audit log shows it only to
	// those who may see that channel.
	for _, a := range ms.auditEntries() {
		if a.Channel == "" {
			t.Errorf("audit entry %s of %s names no channel", a.Action, a.Detail)
		}
	}
}

func TestEngineRememberErrors(t *testing.T) {
	ctx := context.Background()
	e, _, c := newTestEngine(t)
	tests := []struct {
		name string
		s    StandingRule
		want string
	}{
		{"no tool", StandingRule{Channel: "C1"}, "tool: missing"},
		{"no channel", StandingRule{Tool: "a"}, "channel: missing"},
		{"glob tool", StandingRule{Tool: "files__*", Channel: "C1"}, "is a glob"},
		{"bad condition", StandingRule{Tool: "a", Channel: "C1", When: "args.x +"}, "when: ERROR"},
		{"non-bool condition", StandingRule{Tool: "a", Channel: "C1", When: "args.x"}, "must be a bool"},
		{"regex literal that does not compile", StandingRule{Tool: "a", Channel: "C1", When: `args.x.matches("[a-")`}, "when: error parsing regexp"},
		{"expired already", StandingRule{Tool: "a", Channel: "C1", ExpiresAt: c.now()}, "not after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.Remember(ctx, "U1", tt.s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Remember(%+v): got %v, want an error containing %q", tt.s, err, tt.want)
			}
		})
	}
}

func TestRememberedRule(t *testing.T) {
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	d := Decision{Kind: Remember, Decider: "U1", At: at, Conditions: `args.x == 1`, TTL: 24 * time.Hour}
	got := RememberedRule(d, "files__delete", "C1", Verdict{Action: Ask, RuleID: "deletes", RuleDigest: "abc"})
	want := StandingRule{Tool: "files__delete", Channel: "C1", When: `args.x == 1`, CreatedBy: "U1", CreatedAt: at, ExpiresAt: at.Add(24 * time.Hour), RuleID: "deletes", RuleDigest: "abc"}
	if got != want {
		t.Errorf("RememberedRule: got %+v, want %+v", got, want)
	}
	d.TTL = 0
	if got := RememberedRule(d, "t", "C", Verdict{}); !got.ExpiresAt.IsZero() {
		t.Errorf("RememberedRule without TTL: got ExpiresAt %v, want zero", got.ExpiresAt)
	}
}

func TestEngineStoreErrorFailsClosed(t *testing.T) {
	ctx := context.Background()
	e, ms, _ := newTestEngine(t)
	ms.fail = errors.New("connection refused")
	for _, eval := range []func(context.Context, Input) (Verdict, error){e.Evaluate, e.Test} {
		v, err := eval(ctx, call("files__read_file", `{}`, "C1"))
		if !errors.Is(err, ms.fail) {
			t.Errorf("Evaluate with a failing store: got error %v, want it to wrap %v", err, ms.fail)
		}
		if v.Action != Ask || v.RuleID != RuleUnavailable || v.Reason == "" {
			t.Errorf("Evaluate with a failing store: got %+v, want ask by %q with a reason", v, RuleUnavailable)
		}
	}
	if _, err := e.Rules(ctx); !errors.Is(err, ms.fail) {
		t.Errorf("Rules with a failing store: got %v, want it to wrap the store error", err)
	}
}

func TestEngineCorruptRecords(t *testing.T) {
	ctx := context.Background()
	e, ms, _ := newTestEngine(t)
	// An unreadable standing rule is ignored: standing rules only relax.
	if _, err := ms.PutRecord(ctx, store.Record{Kind: KindStandingRule, ID: "bad", Data: json.RawMessage(`"x"`)}, -1); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, e, call("files__delete", `{"path":"/tmp/a"}`, "C1")); got.Action != Ask {
		t.Errorf("with a corrupt standing rule: got %s, want ask", got.Action)
	}
	// A stored admin rule whose condition no longer compiles fails closed on
	// the tools it names and leaves the others alone.
	data, _ := json.Marshal(adminRule{Rule: Rule{Tool: "files__read_*", Verdict: Allow, When: "args."}})
	if _, err := ms.PutRecord(ctx, store.Record{Kind: KindPolicyRule, ID: "broken", Data: data}, -1); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, e, call("files__read_file", `{}`, "C1")); got.Action != Ask || got.RuleID != "broken" {
		t.Errorf("with a broken admin rule: got %s by %q, want ask by broken", got.Action, got.RuleID)
	}
	if got := evalEngine(t, e, call("files__delete", `{"path":"/etc/x"}`, "C1")); got.Action != Deny {
		t.Errorf("other tools with a broken admin rule: got %s, want deny", got.Action)
	}
	// An unreadable admin rule makes the whole policy unavailable.
	if _, err := ms.PutRecord(ctx, store.Record{Kind: KindPolicyRule, ID: "garbage", Data: json.RawMessage(`[`)}, -1); err != nil {
		t.Fatal(err)
	}
	v, err := e.Evaluate(ctx, call("files__read_file", `{}`, "C1"))
	if err == nil || v.Action != Ask || v.RuleID != RuleUnavailable {
		t.Errorf("with an unreadable admin rule: got %+v, %v; want ask by %q and an error", v, err, RuleUnavailable)
	}
}

// A standing rule whose record does not decode is left out of the list,
// and logged, rather than hiding every other one: the good rules stay
// listed, so that they can still be revoked.
func TestStandingRulesSkipAnUnreadableRecord(t *testing.T) {
	ctx := context.Background()
	var logged strings.Builder
	ms := newMemStore()
	e := NewEngine(mustParse(t, engineConfig), ms, WithAuditLog(slog.New(slog.NewTextHandler(&logged, nil))))
	good, err := e.Remember(ctx, "U2BOSS", StandingRule{Tool: "files__delete", Channel: "C1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.PutRecord(ctx, store.Record{Kind: KindStandingRule, ID: "sr-bad", Data: json.RawMessage(`"x"`)}, -1); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []string{"", "C1"} {
		list, err := e.StandingRules(ctx, ch)
		if err != nil || len(list) != 1 || list[0].ID != good.ID {
			t.Errorf("StandingRules(%q) = %v, %v; want [%s]", ch, list, err, good.ID)
		}
	}
	if !strings.Contains(logged.String(), "sr-bad") {
		t.Errorf("the unreadable record was not logged by id: %q", logged.String())
	}
	for _, id := range []string{good.ID, "sr-bad"} {
		if err := e.Revoke(ctx, "UADMIN", id); err != nil {
			t.Errorf("Revoke(%s): %v", id, err)
		}
	}
	if got := evalEngine(t, e, call("files__delete", `{"path":"/tmp/a"}`, "C1")); got.Action != Ask {
		t.Errorf("after the revoke: %s by %q, want ask", got.Action, got.RuleID)
	}
}

func TestEngineReplicasAgree(t *testing.T) {
	ctx := context.Background()
	p := mustParse(t, engineConfig)
	ms := newMemStore()
	a, b := NewEngine(p, ms), NewEngine(p, ms)
	in := call("files__read_file", `{}`, "C1")
	if got := evalEngine(t, b, in); got.Action != Allow {
		t.Fatalf("before the change: got %s, want allow", got.Action)
	}
	if _, err := a.AddRule(ctx, "U1", Rule{ID: "freeze", Tool: "*", Verdict: Deny}); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, b, in); got.Action != Deny || got.RuleID != "freeze" {
		t.Errorf("replica b after a change on a: got %s by %q, want deny by freeze", got.Action, got.RuleID)
	}
	// Replacing a rule (same id, new version) is seen too.
	if err := a.RemoveRule(ctx, "U1", "freeze"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddRule(ctx, "U1", Rule{ID: "freeze", Tool: "*", Verdict: Ask}); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, b, in); got.Action != Ask || got.RuleID != "freeze" {
		t.Errorf("replica b after replacing freeze: got %s by %q, want ask by freeze", got.Action, got.RuleID)
	}
}

func TestEngineConcurrent(t *testing.T) {
	ctx := context.Background()
	e, _, _ := newTestEngine(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := e.Evaluate(ctx, call("files__delete", `{"path":"/tmp/a"}`, "C1")); err != nil {
					t.Error(err)
					return
				}
			}
		})
		if i%2 == 0 {
			wg.Go(func() {
				if _, err := e.AddRule(ctx, "U1", Rule{Tool: "x*", Verdict: Ask}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
}

func TestEngineWithoutAuditor(t *testing.T) {
	ctx := context.Background()
	type plain struct{ RecordStore }
	e := NewEngine(nil, plain{newMemStore()})
	if _, err := e.AddRule(ctx, "U1", Rule{ID: "a", Tool: "t", Verdict: Deny}); err != nil {
		t.Fatalf("AddRule without an audit log: %v", err)
	}
	if got := evalEngine(t, e, call("t", `{}`, "C1")); got.Action != Deny {
		t.Errorf("got %s, want deny", got.Action)
	}
	if got := evalEngine(t, e, call("u", `{}`, "C1")); got.Action != Ask || got.RuleID != RuleAnnotations {
		t.Errorf("nil policy, no hints: got %s by %q, want ask by annotations", got.Action, got.RuleID)
	}
}

// A standing rule made under one rule does not waive another rule's ask.
func TestStandingRuleKeepsToItsRule(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{
		{ID: "staging", Tool: "restart", When: `args.env == "staging"`, Verdict: Ask, Approvers: []string{"UBOB"}},
		{ID: "prod", Tool: "restart", When: `args.env == "prod"`, Verdict: Ask, Approvers: []string{"SLEADS"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	staging, err := e.Evaluate(ctx, Input{Tool: "restart", Channel: "C1", Args: json.RawMessage(`{"env":"staging"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Remember(ctx, "UBOB", RememberedRule(Decision{Kind: Remember, Decider: "UBOB"}, "restart", "C1", staging)); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		env        string
		wantAction Action
	}{{"staging", Allow}, {"prod", Ask}} {
		v, err := e.Evaluate(ctx, Input{Tool: "restart", Channel: "C1", Args: json.RawMessage(`{"env":"` + tt.env + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
		if v.Action != tt.wantAction {
			t.Errorf("env %s: got %s by %s, want %s", tt.env, v.Action, v.RuleID, tt.wantAction)
		}
	}
}

// A standing rule recorded with its rule's id but not its digest (made
// before digests were recorded) relaxes that rule's ask only while it
// names no approvers: the rule may have changed since.
func TestStandingRuleWithoutADigest(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name      string
		approvers []string
		want      Action
	}{
		{"rule names no approvers", nil, Allow},
		{"rule names approvers", []string{"USRE00001"}, Ask},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := NewPolicy(Ask, []Rule{{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: tt.approvers}})
			if err != nil {
				t.Fatal(err)
			}
			e := NewEngine(p, newMemStore())
			if _, err := e.Remember(ctx, "UBOB", StandingRule{Tool: "deploy", Channel: "C1", RuleID: "deploys"}); err != nil {
				t.Fatal(err)
			}
			v, err := e.Evaluate(ctx, Input{Tool: "deploy", Channel: "C1", Args: json.RawMessage(`{}`)})
			if err != nil || v.Action != tt.want {
				t.Errorf("Evaluate = %s by %s, %v; want %s", v.Action, v.RuleID, err, tt.want)
			}
		})
	}
}

// A standing rule does not carry over to another rule that takes its id,
// and one made before rules were recorded waives no named approvers.
func TestStandingRuleNeedsTheSameRule(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	p1, err := NewPolicy(Ask, []Rule{{Tool: "files__write", Verdict: Ask}})
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Tool: "files__write", Channel: "C1", Args: json.RawMessage(`{"path":"/etc/passwd"}`)}
	v, err := NewEngine(p1, st).Evaluate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(p1, st).Remember(ctx, "U1", RememberedRule(Decision{Decider: "U1"}, "files__write", "C1", v)); err != nil {
		t.Fatal(err)
	}
	// The file changes: a stricter rule now has the generated id rule-1.
	p2, err := NewPolicy(Ask, []Rule{
		{Tool: "files__write", When: `args.path.startsWith("/etc/")`, Verdict: Ask, Approvers: []string{"USECURITY1"}},
		{Tool: "files__write", Verdict: Ask},
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := NewEngine(p2, st).Evaluate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Action != Ask || got.RuleID != "rule-1" || len(got.Approvers) != 1 {
		t.Errorf("got %s by %s %v, want the new rule-1 to ask USECURITY1", got.Action, got.RuleID, got.Approvers)
	}
	// A legacy standing rule (no rule recorded) relaxes only asks that name
	// no approvers.
	if _, err := NewEngine(p2, st).Remember(ctx, "U1", StandingRule{Tool: "files__write", Channel: "C1"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := NewEngine(p2, st).Evaluate(ctx, in); got.Action != Ask {
		t.Errorf("a legacy standing rule waived named approvers: got %s by %s", got.Action, got.RuleID)
	}
	other := in
	other.Args = json.RawMessage(`{"path":"/tmp/x"}`)
	if got, _ := NewEngine(p2, st).Evaluate(ctx, other); got.Action != Allow {
		t.Errorf("a legacy standing rule did not relax an ask without approvers: got %s by %s", got.Action, got.RuleID)
	}
}

// When the stored changes cannot be read, the file's denies still hold.
func TestFileDenyHoldsDuringStoreOutage(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{{ID: "no-drop", Tool: "drop_db", Verdict: Deny, Reason: "never"}})
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	st.fail = errors.New("store down")
	v, err := NewEngine(p, st).Evaluate(context.Background(), Input{Tool: "drop_db", Args: json.RawMessage(`{}`)})
	if err == nil || v.Action != Deny || v.RuleID != "no-drop" {
		t.Errorf("got %s by %s, %v; want the file's deny and the error", v.Action, v.RuleID, err)
	}
	v, err = NewEngine(p, st).Evaluate(context.Background(), Input{Tool: "other", Args: json.RawMessage(`{}`)})
	if err == nil || v.Action != Ask || !v.FailClosed {
		t.Errorf("got %s (fail closed %v), %v; want a fail-closed ask and the error", v.Action, v.FailClosed, err)
	}
}

// During the outage the file stays a floor: its default denies what it
// denies, and its asks keep their approvers, four eyes and count.
func TestFileFloorHoldsDuringStoreOutage(t *testing.T) {
	p, err := NewPolicy(Deny, []Rule{{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: []string{"SSRE"}, FourEyes: true, MinApprovals: 2}})
	if err != nil {
		t.Fatal(err)
	}
	st := newMemStore()
	st.fail = errors.New("store down")
	e := NewEngine(p, st)
	no := false
	v, err := e.Evaluate(context.Background(), Input{Tool: "other", Args: json.RawMessage(`{}`), Hints: Hints{Destructive: &no}})
	if err == nil || v.Action != Deny {
		t.Errorf("the default's deny during the outage: got %s by %s, %v; want deny and the error", v.Action, v.RuleID, err)
	}
	v, err = e.Evaluate(context.Background(), Input{Tool: "deploy", Args: json.RawMessage(`{}`)})
	if err == nil || v.Action != Ask || !v.FailClosed || strings.Join(v.Approvers, ",") != "SSRE" || !v.FourEyes || v.MinApprovals != 2 {
		t.Errorf("a file ask during the outage: got %s approvers %v four eyes %v min %d, %v; want a fail-closed ask by SSRE, four eyes, 2", v.Action, v.Approvers, v.FourEyes, v.MinApprovals, err)
	}
}

// Ids of the form rule-<n> are those the file's rules without an id get by
// position: a rule added at runtime may not take one, or a file that grows
// would take it from the rule, which could then never be removed.
func TestRuntimeRuleIDsOfFileRulesAreRefused(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{{Tool: "read_*", Verdict: Allow}})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	for _, id := range []string{"rule-2", "rule-10"} {
		if _, err := e.AddRule(context.Background(), "UADMIN", Rule{ID: id, Tool: "x", Verdict: Deny}); err == nil || !strings.Contains(err.Error(), "rule-<n>") {
			t.Errorf("AddRule(id=%s) = %v, want it refused", id, err)
		}
	}
	if _, err := e.AddRule(context.Background(), "UADMIN", Rule{ID: "rule-two", Tool: "x", Verdict: Deny}); err != nil {
		t.Errorf("AddRule(id=rule-two) = %v, want it added", err)
	}
}

// A file rule whose condition fails is tightened by the runtime rules
// that match, and, when no rule of either layer matches otherwise, by the
// default: who must approve is never fewer than had the rule not matched.
func TestEngineFailedConditionIsTightenedAcrossLayers(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Deny, []Rule{{ID: "dev-free", Tool: "deploy", When: `args.env == "dev"`, Verdict: Allow}})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	r, err := ParseRule(`id=sre tool=deploy when='args.service == "vault"' verdict=ask approvers=USRE four_eyes=true`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
		t.Fatal(err)
	}
	got := evalEngine(t, e, call("deploy", `{"service":"vault"}`, "C1"))
	if got.Action != Ask || !got.FailClosed || strings.Join(got.Approvers, ",") != "USRE" || !got.FourEyes {
		t.Errorf("failed file rule, matching runtime ask: got %s (fail closed %v) approvers %v four eyes %v, want a fail-closed ask by USRE with four eyes",
			got.Action, got.FailClosed, got.Approvers, got.FourEyes)
	}
	no := false
	web := call("deploy", `{"service":"web"}`, "C1")
	web.Hints.Destructive = &no // the default decides what no rule matches
	if got := evalEngine(t, e, web); got.Action != Deny || !got.FailClosed {
		t.Errorf("failed file rule, nothing else matching, default deny: got %s (fail closed %v, %q), want a fail-closed deny", got.Action, got.FailClosed, got.Reason)
	}
	if got := evalEngine(t, e, call("deploy", `{"service":"web","env":"dev"}`, "C1")); got.Action != Allow {
		t.Errorf("no failure: got %s by %q, want allow", got.Action, got.RuleID)
	}
}

// A file ask whose condition failed may not apply at all: the call then
// needs an approver the runtime rule that decides otherwise accepts too,
// so leaving a key out never moves it to other approvers.
func TestEngineOpenFileAskNeedsApproversBothAccept(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{
		{ID: "dev-deploys", Tool: "deploy", When: `args.env == "dev"`, Verdict: Ask, Approvers: []string{"UDEV"}},
		{ID: "db", Tool: "db_migrate", When: `args.db == "main"`, Verdict: Ask, Approvers: []string{"UDBA", "USRE"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	for _, text := range []string{`id=sre tool=deploy verdict=ask approvers=USRE`, `id=sre-db tool=db_migrate verdict=ask approvers=USRE,UOPS`} {
		r, err := ParseRule(text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
			t.Fatal(err)
		}
	}
	if got := evalEngine(t, e, call("deploy", `{"env":"prod"}`, "C1")); got.Action != Ask || strings.Join(got.Approvers, ",") != "USRE" {
		t.Errorf("env=prod: %s by %v, want an ask of USRE", got.Action, got.Approvers)
	}
	if got := evalEngine(t, e, call("deploy", `{"env":"dev"}`, "C1")); got.Action != Ask || strings.Join(got.Approvers, ",") != "UDEV" {
		t.Errorf("env=dev: %s by %v, want an ask of UDEV (the file's approvers stay)", got.Action, got.Approvers)
	}
	// env left out: UDEV if the file rule applies, USRE if not; no one is both.
	if got := evalEngine(t, e, call("deploy", `{}`, "C1")); got.Action != Deny || !got.FailClosed || !strings.Contains(got.Reason, "no approver could decide") {
		t.Errorf("env left out: %s by %v (%q), want a fail-closed deny", got.Action, got.Approvers, got.Reason)
	}
	// db left out: USRE is accepted either way.
	if got := evalEngine(t, e, call("db_migrate", `{}`, "C1")); got.Action != Ask || !got.FailClosed || strings.Join(got.Approvers, ",") != "USRE" {
		t.Errorf("db left out: %s by %v (fail closed %v), want a fail-closed ask of USRE", got.Action, got.Approvers, got.FailClosed)
	}
}

// A file ask and a runtime ask that together need more approvals than
// anyone can give are a deny that says so, not a card no one can approve.
func TestEngineUndecidableCombinationIsDenied(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{
		{ID: "db", Tool: "db_migrate", Verdict: Ask, Approvers: []string{"UDBA"}},
		{ID: "own", Tool: "restart", Verdict: Ask, Approvers: []string{"U9USER"}},
		{ID: "pair", Tool: "deploy", Verdict: Ask, Approvers: []string{"UONE", "UTWO"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	for _, text := range []string{`id=two tool=db_migrate verdict=ask min_approvals=2`, `id=eyes tool=restart verdict=ask four_eyes=true`, `id=two-deploys tool=deploy verdict=ask min_approvals=2`} {
		r, err := ParseRule(text)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{"db_migrate", "restart"} {
		if got := evalEngine(t, e, call(tool, `{}`, "C1")); got.Action != Deny || !strings.Contains(got.Reason, "which no one can give") {
			t.Errorf("%s: %s by %v (min %d, four eyes %v), want a deny saying no one can approve it", tool, got.Action, got.Approvers, got.MinApprovals, got.FourEyes)
		}
	}
	if got := evalEngine(t, e, call("deploy", `{}`, "C1")); got.Action != Ask || got.MinApprovals != 2 || strings.Join(got.Approvers, ",") != "UONE,UTWO" {
		t.Errorf("deploy: %s by %v (min %d), want an ask of two approvals from UONE and UTWO", got.Action, got.Approvers, got.MinApprovals)
	}
}

// The policy file is a floor: runtime rules tighten any call but relax no
// file rule, and standing rules relax only the ask of the rule that asked.
func TestEngineFileIsAFloor(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{
		{ID: "no-drop", Tool: "*drop*", Verdict: Deny, Reason: "never drop"},
		{ID: "deploy", Tool: "deploy", Verdict: Ask, Approvers: []string{"SOPS"}, TTL: time.Hour},
		{ID: "restart", Tool: "restart", Verdict: Ask},
		{ID: "reads", Tool: "read_*", Verdict: Allow},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	add := func(text string) Rule {
		t.Helper()
		r, err := ParseRule(text)
		if err != nil {
			t.Fatal(err)
		}
		added, err := e.AddRule(ctx, "UADMIN", r)
		if err != nil {
			t.Fatalf("AddRule(%s): %v", text, err)
		}
		return added
	}
	add(`id=open tool=* verdict=allow`)
	add(`id=tight tool=deploy verdict=ask approvers=UEVE four_eyes=true ttl=2h`)
	add(`id=reads-ask tool=read_secrets verdict=ask approvers=UBOB`)

	tests := []struct {
		name      string
		in        Input
		want      Action
		wantRule  string
		approvers string
		fourEyes  bool
		ttl       time.Duration
	}{
		{"a runtime allow does not lift a file deny", call("db_drop", `{}`, "C1"), Deny, "no-drop", "", false, 0},
		{"a runtime allow does not lift a file ask", call("restart", `{}`, "C1"), Ask, "restart", "", false, 0},
		{"a runtime ask tightens a file allow", call("read_secrets", `{}`, "C1"), Ask, "reads-ask", "UBOB", false, 0},
		{"a runtime ask keeps the file's approvers and shorter ttl, adds four eyes", call("deploy", `{}`, "C1"), Ask, "tight", "SOPS", true, time.Hour},
		{"a runtime rule decides calls no file rule matches", call("other", `{}`, "C1"), Allow, "open", "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := evalEngine(t, e, tt.in)
			if got.Action != tt.want || got.RuleID != tt.wantRule || strings.Join(got.Approvers, ",") != tt.approvers || got.FourEyes != tt.fourEyes || got.TTL != tt.ttl {
				t.Errorf("Evaluate(%s) = %s by %q approvers %v four eyes %v ttl %s, want %s by %q approvers %q four eyes %v ttl %s",
					tt.in.Tool, got.Action, got.RuleID, got.Approvers, got.FourEyes, got.TTL, tt.want, tt.wantRule, tt.approvers, tt.fourEyes, tt.ttl)
			}
		})
	}

	// A runtime deny tightens a file ask.
	add(`id=freeze tool=restart verdict=deny reason=frozen`)
	if got := evalEngine(t, e, call("restart", `{}`, "C1")); got.Action != Deny || got.RuleID != "freeze" {
		t.Errorf("runtime deny over a file ask: got %s by %q, want deny by freeze", got.Action, got.RuleID)
	}

	// A standing rule never relaxes a deny, even one made for that tool.
	if _, err := e.Remember(ctx, "UADMIN", StandingRule{Tool: "db_drop", Channel: "C1"}); err != nil {
		t.Fatal(err)
	}
	if got := evalEngine(t, e, call("db_drop", `{}`, "C1")); got.Action != Deny {
		t.Errorf("standing rule over a file deny: got %s by %q, want deny", got.Action, got.RuleID)
	}

	// Overrules says which file rules beat a runtime rule.
	for _, tt := range []struct {
		rule string
		want string
	}{
		{`tool=* verdict=allow`, "no-drop:false,deploy:false,restart:false"},
		{`tool=db_drop verdict=allow`, "no-drop:true"},
		{`tool=db_drop verdict=ask`, "no-drop:true"},
		{`tool=restart verdict=allow`, "restart:true"},
		{`tool=read_x verdict=allow`, ""},
		{`tool=db_drop verdict=deny`, ""},
	} {
		if got := overrules(t, e, tt.rule); got != tt.want {
			t.Errorf("Overrules(%s): got %q, want %q", tt.rule, got, tt.want)
		}
	}
}

// A standing rule never relaxes a two-person rule, and when both layers
// ask, the larger min_approvals and the shorter remind_after hold.
func TestTwoPersonRuleIsKept(t *testing.T) {
	ctx := context.Background()
	p, err := NewPolicy(Ask, []Rule{{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: []string{"SOPS"}, MinApprovals: 2, RemindAfter: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	if _, err := e.Remember(ctx, "UBOB", StandingRule{Tool: "deploy", Channel: "C1", RuleID: "deploys"}); err != nil {
		t.Fatal(err)
	}
	in := Input{Tool: "deploy", Channel: "C1", Args: json.RawMessage(`{}`)}
	v, err := e.Evaluate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != Ask || v.MinApprovals != 2 {
		t.Fatalf("with a standing rule: got %s by %s needing %d, want an ask needing 2", v.Action, v.RuleID, v.MinApprovals)
	}
	if _, err := e.AddRule(ctx, "UADMIN", Rule{Tool: "deploy", Verdict: Ask, MinApprovals: 1, RemindAfter: 2 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if v, err = e.Evaluate(ctx, in); err != nil {
		t.Fatal(err)
	}
	if v.MinApprovals != 2 || v.RemindAfter != time.Hour {
		t.Errorf("with a runtime rule asking for 1 approval, reminding after 2h: got %d approvals, remind after %v; want the file's 2 and 1h", v.MinApprovals, v.RemindAfter)
	}
}

// A call made for several people's messages is judged as each of them:
// the strictest verdict counts, so the last writer cannot lend it their
// rules.
func TestEngineJudgesACallAsEachRequester(t *testing.T) {
	p, err := NewPolicy(Ask, []Rule{
		{ID: "lead-restarts", Tool: "restart", When: `user == "ULEAD"`, Verdict: Allow},
		{ID: "interns", Tool: "restart", When: `user == "UINTERN"`, Verdict: Deny, Reason: "interns do not restart"},
		{ID: "restarts", Tool: "restart", Verdict: Ask, Approvers: []string{"UOPS1", "UOPS2"}},
		{ID: "junior-deploys", Tool: "deploy", When: `user == "UJUNIOR"`, Verdict: Ask, Approvers: []string{"USENIOR"}},
		{ID: "deploys", Tool: "deploy", Verdict: Ask, Approvers: []string{"UOPS1"}},
		{ID: "dbs", Tool: "db", When: `user == "UJUNIOR"`, Verdict: Ask, Approvers: []string{"USENIOR", "UOPS1"}, FourEyes: true},
		{ID: "db", Tool: "db", Verdict: Ask, Approvers: []string{"UOPS1", "UBOB"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	in := func(tool, user string, requesters ...string) Input {
		return Input{Tool: tool, Args: json.RawMessage(`{}`), User: user, Requesters: requesters, Channel: "C1"}
	}
	tests := []struct {
		name  string
		in    Input
		want  Action
		rule  string
		appr  string
		extra string
	}{
		{"the lead alone", in("restart", "ULEAD"), Allow, "lead-restarts", "", ""},
		{"the lead wrote last", in("restart", "ULEAD", "UBOB", "ULEAD"), Ask, "restarts", "UOPS1,UOPS2", ""},
		{"the lead and an intern", in("restart", "ULEAD", "UINTERN"), Deny, "interns", "", ""},
		{"approvers both rules accept", in("db", "UBOB", "UJUNIOR", "UBOB"), Ask, "db", "UOPS1", ""},
		{"no approver in common", in("deploy", "UBOB", "UJUNIOR"), Deny, "deploys", "", "leave no approver"},
		// Four eyes over both leaves UOPS1 only if neither asked; here UOPS1 asked.
		{"four eyes over every requester", in("db", "UOPS1", "UJUNIOR"), Deny, "db", "", "leave no approver"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := evalEngine(t, e, tt.in)
			if v.Action != tt.want || v.RuleID != tt.rule || strings.Join(v.Approvers, ",") != tt.appr || !strings.Contains(v.Reason, tt.extra) {
				t.Errorf("got %s by %s approvers %v (%q), want %s by %s approvers %s", v.Action, v.RuleID, v.Approvers, v.Reason, tt.want, tt.rule, tt.appr)
			}
			if fv := p.Evaluate(tt.in); fv.Action != tt.want {
				t.Errorf("the file alone: %s, want %s", fv.Action, tt.want)
			}
		})
	}
}

// A runtime rule whose id the policy file took later (the file changed and
// the bot restarted) can still be removed, and then no longer applies.
func TestRuntimeRuleShadowedByALaterFileRuleCanBeRemoved(t *testing.T) {
	ctx := context.Background()
	st := newMemStore()
	e := NewEngine(nil, st)
	r, err := ParseRule(`id=hotfix tool=deploy verdict=allow`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "UADMIN", r); err != nil {
		t.Fatal(err)
	}
	p, err := NewPolicy(Ask, []Rule{{ID: "hotfix", Tool: "restart", Verdict: Ask}})
	if err != nil {
		t.Fatal(err)
	}
	e = NewEngine(p, st) // the file now has a rule hotfix
	if got := evalEngine(t, e, call("deploy", `{}`, "C1")); got.Action != Allow {
		t.Fatalf("before the removal: %s, want the runtime allow", got.Action)
	}
	if err := e.RemoveRule(ctx, "UADMIN", "hotfix"); err != nil {
		t.Fatalf("RemoveRule: %v", err)
	}
	if got := evalEngine(t, e, call("deploy", `{}`, "C1")); got.Action != Ask {
		t.Errorf("after the removal: %s by %s, want the default ask", got.Action, got.RuleID)
	}
	if err := e.RemoveRule(ctx, "UADMIN", "hotfix"); !errors.Is(err, ErrFileRule) {
		t.Errorf("removing the file's rule: %v, want ErrFileRule", err)
	}
}

// A runtime rule relaxes what decides a call no file rule matches when it
// is looser than the file's default or the annotations' ask.
func TestRelaxesDefault(t *testing.T) {
	for _, tt := range []struct {
		def, rule Action
		want      bool
	}{
		{Deny, Ask, true}, {Deny, Allow, true}, {Ask, Allow, true}, {Allow, Allow, true},
		{Ask, Ask, false}, {Allow, Ask, false}, {Deny, Deny, false},
	} {
		p, err := NewPolicy(tt.def, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := NewEngine(p, newMemStore()).RelaxesDefault(Rule{Tool: "*", Verdict: tt.rule}); got != tt.want {
			t.Errorf("default %s, runtime %s: relaxes %v, want %v", tt.def, tt.rule, got, tt.want)
		}
	}
}

// auditFails is a memStore whose audit log cannot be written.
type auditFails struct{ *memStore }

func (auditFails) Audit(context.Context, store.AuditEntry) error {
	return errors.New("audit log unavailable")
}

// A change whose audit entry could not be written stands, and its error
// says so (ErrAuditFailed), so that the caller does not make it again.
func TestChangeWhoseAuditFailsStands(t *testing.T) {
	ctx := context.Background()
	ms := newMemStore()
	e := NewEngine(mustParse(t, engineConfig), auditFails{ms})
	r, err := e.AddRule(ctx, "UADMIN", Rule{ID: "freeze", Tool: "deploy", Verdict: Deny})
	if !errors.Is(err, ErrAuditFailed) || r.ID != "freeze" {
		t.Errorf("AddRule: %+v, %v; want the rule and an error wrapping ErrAuditFailed", r, err)
	}
	if got := evalEngine(t, e, call("deploy", `{}`, "C1")); got.Action != Deny {
		t.Errorf("after the add: %s, want deny", got.Action)
	}
	if err := e.RemoveRule(ctx, "UADMIN", "freeze"); !errors.Is(err, ErrAuditFailed) {
		t.Errorf("RemoveRule: %v, want an error wrapping ErrAuditFailed", err)
	}
	s, err := e.Remember(ctx, "UADMIN", StandingRule{Tool: "files__delete", Channel: "C1"})
	if !errors.Is(err, ErrAuditFailed) || s.ID == "" {
		t.Errorf("Remember: %+v, %v; want the rule and an error wrapping ErrAuditFailed", s, err)
	}
	if err := e.Revoke(ctx, "UADMIN", s.ID); !errors.Is(err, ErrAuditFailed) {
		t.Errorf("Revoke: %v, want an error wrapping ErrAuditFailed", err)
	}
	if recs, _ := ms.Records(ctx, KindPolicyRule); len(recs) != 0 {
		t.Errorf("policy rule records after the remove: %d, want none", len(recs))
	}
	if recs, _ := ms.Records(ctx, KindStandingRule); len(recs) != 0 {
		t.Errorf("standing rule records after the revoke: %d, want none", len(recs))
	}
}

// Within the file layer the first match counts: a stricter file rule that
// an earlier one shadows never decides a runtime rule's calls, and is not
// said to leave it with no effect; rules past one that matches all of them
// are not listed at all.
func TestOverrulesFollowTheFilesFirstMatch(t *testing.T) {
	p, err := ParseConfig([]byte(`
policy:
  rules:
    - {id: staging, tool: deploy_staging, verdict: allow}
    - {id: prod, tool: deploy_prod, verdict: ask, when: "args.force == true"}
    - {id: lockdown, tool: "*", verdict: deny}
    - {id: after, tool: "deploy_*", verdict: deny}
`))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEngine(p, newMemStore())
	for _, tt := range []struct {
		rule string
		want string
	}{
		// staging decides every deploy_staging call first: lockdown
		// never does.
		{`tool=deploy_staging verdict=ask`, ""},
		// prod's condition may not hold: lockdown may decide.
		{`tool=deploy_prod verdict=allow`, "prod:false,lockdown:false"},
		// Nothing before lockdown matches: it decides every call.
		{`tool=restart verdict=ask`, "lockdown:true"},
		{`tool=deploy_* verdict=allow`, "prod:false,lockdown:false"},
	} {
		if got := overrules(t, e, tt.rule); got != tt.want {
			t.Errorf("Overrules(%s): got %q, want %q", tt.rule, got, tt.want)
		}
	}
	// The runtime rule does decide the call lockdown was said to beat.
	r, err := ParseRule(`tool=deploy_staging verdict=ask`)
	if err != nil {
		t.Fatal(err)
	}
	added, err := e.AddRule(context.Background(), "UADMIN", r)
	if err != nil {
		t.Fatal(err)
	}
	if v := evalEngine(t, e, call("deploy_staging", `{}`, "C1")); v.Action != Ask || v.RuleID != added.ID {
		t.Errorf("deploy_staging with the runtime ask: got %s by %q, want ask by %s", v.Action, v.RuleID, added.ID)
	}
}

// overrules is e.Overrules of the runtime rule written as text, each file
// rule as "id:always", joined with commas.
func overrules(t *testing.T, e *Engine, text string) string {
	t.Helper()
	r, err := ParseRule(text)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range e.Overrules(r) {
		got = append(got, fmt.Sprintf("%s:%v", o.Rule.ID, o.Always))
	}
	return strings.Join(got, ",")
}

// An ask whose calls expire no later than their first reminder is noted,
// naming where its ttl and remind_after come from; the notes agree with
// when the store reminds a call. Allow and deny rules never wait, and
// reminders turned off by the bot are no mistake of a rule's.
func TestUnreminded(t *testing.T) {
	p, err := ParseConfig([]byte(`
policy:
  rules:
    - {id: short, tool: deploy, verdict: ask, ttl: 30m}
    - {id: equal, tool: restart, verdict: ask, ttl: 2h, remind_after: 2h}
    - {id: late, tool: "files__*", verdict: ask, remind_after: 100h}
    - {id: fine, tool: rollback, verdict: ask, ttl: 2h, remind_after: 90m}
    - {id: defaults, tool: scale, verdict: ask}
    - {id: allowed, tool: read, verdict: allow}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		d    Defaults
		want []string
	}{
		{Defaults{TTL: 72 * time.Hour, RemindAfter: time.Hour}, []string{
			"rule short (tool deploy) never reminds its approvers: its calls expire after 30m (its ttl), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl",
			"rule equal (tool restart) never reminds its approvers: its calls expire after 2h (its ttl), no later than the first reminder would come, after 2h (its remind_after); give it a remind_after shorter than the ttl",
			"rule late (tool files__*) never reminds its approvers: its calls expire after 72h (APPROVAL_TTL), no later than the first reminder would come, after 100h (its remind_after); give it a remind_after shorter than the ttl",
		}},
		// Reminders off: only the rules that set their own are judged.
		{Defaults{TTL: 72 * time.Hour}, []string{
			"rule equal (tool restart) never reminds its approvers: its calls expire after 2h (its ttl), no later than the first reminder would come, after 2h (its remind_after); give it a remind_after shorter than the ttl",
			"rule late (tool files__*) never reminds its approvers: its calls expire after 72h (APPROVAL_TTL), no later than the first reminder would come, after 100h (its remind_after); give it a remind_after shorter than the ttl",
		}},
		{Defaults{TTL: time.Hour, RemindAfter: time.Hour}, []string{
			"rule short (tool deploy) never reminds its approvers: its calls expire after 30m (its ttl), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl",
			"rule equal (tool restart) never reminds its approvers: its calls expire after 2h (its ttl), no later than the first reminder would come, after 2h (its remind_after); give it a remind_after shorter than the ttl",
			"rule late (tool files__*) never reminds its approvers: its calls expire after 1h (APPROVAL_TTL), no later than the first reminder would come, after 100h (its remind_after); give it a remind_after shorter than the ttl",
			"rule defaults (tool scale) never reminds its approvers: its calls expire after 1h (APPROVAL_TTL), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl",
		}},
	} {
		got := p.Unreminded(tt.d)
		if !slices.Equal(got, tt.want) {
			t.Errorf("Unreminded(%+v):\n got %q\nwant %q", tt.d, got, tt.want)
		}
		// With reminders on, a rule is noted exactly when a call it asks
		// gets no reminder.
		e := NewEngine(p, newMemStore(), WithDefaults(tt.d))
		now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		for _, r := range p.Rules() {
			if r.Verdict != Ask {
				continue
			}
			v := evalEngine(t, e, call(strings.ReplaceAll(r.Tool, "*", "x"), `{}`, "C1"))
			if v.RuleID != r.ID {
				t.Fatalf("a call of %s: rule %s, want %s", r.Tool, v.RuleID, r.ID)
			}
			c := store.Call{CreatedAt: now, ExpiresAt: now.Add(v.TTL), RemindAfter: v.RemindAfter}
			noted := slices.ContainsFunc(got, func(n string) bool { return strings.HasPrefix(n, "rule "+r.ID+" ") })
			if reminded := len(store.Reminders(c)) > 0; reminded != (!noted && v.RemindAfter > 0) {
				t.Errorf("defaults %+v: rule %s noted %v, but its calls get %d reminders", tt.d, r.ID, noted, len(store.Reminders(c)))
			}
		}
	}
}

// Unreminded notes a rule exactly when its calls get no reminder (see
// store.Reminders), which cuts both times to whole milliseconds: a ttl
// longer than remind_after by less than one is noted.
func TestUnremindedWithinAMillisecond(t *testing.T) {
	p, err := ParseConfig([]byte("policy:\n  rules:\n    - {id: r, tool: deploy, verdict: ask, ttl: 1h0m0.0005s, remind_after: 1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	notes := p.Unreminded(Defaults{TTL: 72 * time.Hour, RemindAfter: time.Hour})
	now := time.Date(2025, 1, 2, 3, 4, 5, 200_000, time.UTC) // .0002 s
	c := store.Call{CreatedAt: now, ExpiresAt: now.Add(time.Hour + 500*time.Microsecond), RemindAfter: time.Hour}
	if got := store.Reminders(c); len(got) != 0 || len(notes) != 1 {
		t.Errorf("Unreminded notes %q; the call gets reminders %v, want a note and none", notes, got)
	}
}

// AskDrops names what an older ask needs that a newer one, deciding in its
// place, does not.
func TestAskDrops(t *testing.T) {
	two := Rule{Verdict: Ask, Approvers: []string{"UA", "UB"}, FourEyes: true, MinApprovals: 2}
	tests := []struct {
		name  string
		newer Rule
		want  []string
	}{
		{"a plain ask", Rule{Verdict: Ask}, []string{"four eyes", "2 approvals", "its approvers"}},
		{"as much", Rule{Verdict: Ask, Approvers: []string{"UB"}, FourEyes: true, MinApprovals: 2}, nil},
		{"more", Rule{Verdict: Ask, Approvers: []string{"UA"}, FourEyes: true, MinApprovals: 3}, nil},
		{"someone else", Rule{Verdict: Ask, Approvers: []string{"UA", "UC"}, FourEyes: true, MinApprovals: 2}, []string{"its approvers"}},
		{"one approval", Rule{Verdict: Ask, Approvers: []string{"UA"}, FourEyes: true, MinApprovals: 1}, []string{"2 approvals"}},
	}
	for _, tt := range tests {
		if got := AskDrops(tt.newer, two); !slices.Equal(got, tt.want) {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := AskDrops(two, Rule{Verdict: Ask}); got != nil {
		t.Errorf("over a plain ask: got %q, want nothing", got)
	}
}

// lossy is a memStore whose writes' answers are lost while lose is set
// (made or not, as made says); with blind set too, reads fail once an
// answer has been lost.
type lossy struct {
	*memStore
	lose, made, blind, unreadable bool
}

var errLost = errors.New("read tcp: connection reset by peer")

// notReplicated is a memStore whose writes are made on the primary only.
type notReplicated struct{ *memStore }

func (n notReplicated) PutRecord(ctx context.Context, r store.Record, v int64) (store.Record, error) {
	if _, err := n.memStore.PutRecord(ctx, r, v); err != nil {
		return store.Record{}, err
	}
	return store.Record{}, fmt.Errorf("put record: %w", store.ErrNotReplicated)
}

func (n notReplicated) DeleteRecord(ctx context.Context, kind, id string) error {
	if err := n.memStore.DeleteRecord(ctx, kind, id); err != nil {
		return err
	}
	return fmt.Errorf("delete record: %w", store.ErrNotReplicated)
}

// A change the replicas did not acknowledge is told so, not read back from
// the primary and told made: a failover may lose it.
func TestChangeNotReplicatedIsToldSo(t *testing.T) {
	ctx := context.Background()
	ms := newMemStore()
	e := NewEngine(mustParse(t, "policy:\n  default: ask\n"), notReplicated{ms})
	if r, err := e.AddRule(ctx, "UADMIN", Rule{ID: "r1", Tool: "deploy", Verdict: Deny}); !errors.Is(err, store.ErrNotReplicated) || r.ID != "r1" {
		t.Errorf("add: got %+v, %v; want the rule and ErrNotReplicated", r, err)
	}
	if s, err := e.Remember(ctx, "UADMIN", StandingRule{ID: "sr-1", Tool: "deploy", Channel: "C1"}); !errors.Is(err, store.ErrNotReplicated) || s.ID != "sr-1" {
		t.Errorf("remember: got %+v, %v; want the rule and ErrNotReplicated", s, err)
	}
	if err := e.Revoke(ctx, "UADMIN", "sr-1"); !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("revoke: got %v, want ErrNotReplicated", err)
	}
	if err := e.RemoveRule(ctx, "UADMIN", "r1"); !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("remove: got %v, want ErrNotReplicated", err)
	}
	// Made on the primary, in force: each is audited.
	if got := ms.auditActions(); !slices.Equal(got, []string{"UADMIN:" + AuditPolicyAdd, "UADMIN:" + AuditStandingAdd, "UADMIN:" + AuditStandingRevoke, "UADMIN:" + AuditPolicyRemove}) {
		t.Errorf("audited %q, want each change", got)
	}
}

func (l *lossy) PutRecord(ctx context.Context, r store.Record, v int64) (store.Record, error) {
	if l.lose && !l.made {
		return store.Record{}, errLost
	}
	got, err := l.memStore.PutRecord(ctx, r, v)
	if l.lose && err == nil {
		l.unreadable = l.blind
		return store.Record{}, errLost
	}
	return got, err
}

func (l *lossy) DeleteRecord(ctx context.Context, kind, id string) error {
	if l.lose && !l.made {
		return errLost
	}
	err := l.memStore.DeleteRecord(ctx, kind, id)
	if l.lose && err == nil {
		l.unreadable = l.blind
		return errLost
	}
	return err
}

func (l *lossy) Records(ctx context.Context, kind string) ([]store.Record, error) {
	if l.unreadable {
		return nil, errLost
	}
	return l.memStore.Records(ctx, kind)
}

// A change whose store answer is lost is read back: made, it is told
// made and audited; not made, it is told failed; unreadable, it is told
// unconfirmed, never failed.
func TestChangesWhoseAnswerIsLost(t *testing.T) {
	ctx := context.Background()
	changes := []struct {
		name string
		// setUp makes what the change needs, on a store that answers.
		setUp  func(*Engine)
		change func(*Engine) error
		action string
	}{
		{"add", func(*Engine) {}, func(e *Engine) error {
			_, err := e.AddRule(ctx, "UADMIN", Rule{ID: "r1", Tool: "deploy", Verdict: Deny})
			return err
		}, AuditPolicyAdd},
		{"remove", func(e *Engine) {
			if _, err := e.AddRule(ctx, "UADMIN", Rule{ID: "r1", Tool: "deploy", Verdict: Deny}); err != nil {
				t.Fatal(err)
			}
		}, func(e *Engine) error { return e.RemoveRule(ctx, "UADMIN", "r1") }, AuditPolicyRemove},
		{"remember", func(*Engine) {}, func(e *Engine) error {
			_, err := e.Remember(ctx, "UADMIN", StandingRule{ID: "sr-1", Tool: "deploy", Channel: "C1"})
			return err
		}, AuditStandingAdd},
		{"revoke", func(e *Engine) {
			if _, err := e.Remember(ctx, "UADMIN", StandingRule{ID: "sr-1", Tool: "deploy", Channel: "C1"}); err != nil {
				t.Fatal(err)
			}
		}, func(e *Engine) error { return e.Revoke(ctx, "UADMIN", "sr-1") }, AuditStandingRevoke},
	}
	for _, c := range changes {
		for _, made := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s made=%v", c.name, made), func(t *testing.T) {
				ls := &lossy{memStore: newMemStore()}
				e := NewEngine(mustParse(t, "policy:\n  default: ask\n"), ls)
				c.setUp(e)
				before := len(ls.auditActions())
				ls.lose, ls.made = true, made
				err := c.change(e)
				audited := len(ls.auditActions()) - before
				switch {
				case made && (err != nil || audited != 1 || ls.auditActions()[before] != "UADMIN:"+c.action):
					t.Errorf("made, its answer lost: got %v with %q audited, want it told made and audited", err, ls.auditActions()[before:])
				case !made && (!errors.Is(err, errLost) || errors.Is(err, ErrUnconfirmed) || audited != 0):
					t.Errorf("not made: got %v with %d audit entries, want the store's error and none", err, audited)
				}
			})
		}
		t.Run(c.name+" unreadable", func(t *testing.T) {
			ls := &lossy{memStore: newMemStore()}
			e := NewEngine(mustParse(t, "policy:\n  default: ask\n"), ls)
			c.setUp(e)
			before := len(ls.auditEntries())
			ls.lose, ls.made, ls.blind = true, true, true
			err := c.change(e)
			if !errors.Is(err, ErrUnconfirmed) || !errors.Is(err, errLost) {
				t.Errorf("got %v, want ErrUnconfirmed with the store's error", err)
			}
			// Made, as it was here: it is audited, as unconfirmed.
			if got := ls.auditEntries()[before:]; len(got) != 1 || got[0].Action != c.action || !strings.Contains(got[0].Detail, "unconfirmed") {
				t.Errorf("audited %+v, want one %s entry saying it is unconfirmed", got, c.action)
			}
		})
	}
}

// A question is settled by one answer: an ask's approval count does not
// apply to it, so no count leaves it undecidable; four eyes still does.
func TestQuestionTakesNoApprovalCount(t *testing.T) {
	p := mustParse(t, "policy:\n  default: ask\n  rules:\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      min_approvals: 2\n")
	e := NewEngine(p, newMemStore())
	in := Input{Tool: "ask_human", Args: []byte(`{}`), User: "UREQ", Channel: "D0123"}
	for _, q := range []bool{false, true} {
		in.Question = q
		for name, v := range map[string]Verdict{"policy": p.Evaluate(in), "engine": evalEngine(t, e, in)} {
			switch {
			case q && (v.Action != Ask || v.MinApprovals > 1):
				t.Errorf("%s, a question in a DM under a two-person rule: %+v, want an ask of one answer", name, v)
			case !q && v.Action != Deny:
				t.Errorf("%s, a call in a DM under a two-person rule: %+v, want it denied as undecidable", name, v)
			}
		}
	}
	// After a rule whose condition cannot be judged on the question (it
	// has no namespace), combined with the two-person rule that follows.
	failed := mustParse(t, "policy:\n  default: ask\n  rules:\n    - id: dev\n      tool: \"*\"\n      verdict: allow\n      when: args.namespace == \"dev\"\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      approvers: [UAPPROVER1, UOTHER0001]\n      four_eyes: true\n      min_approvals: 2\n")
	asked := Input{Tool: "ask_human", Args: []byte(`{"question":"Which region?"}`), User: "UAPPROVER1", Channel: "C0123", Question: true}
	for name, v := range map[string]Verdict{"policy": failed.Evaluate(asked), "engine": evalEngine(t, NewEngine(failed, newMemStore()), asked)} {
		if v.Action != Ask {
			t.Errorf("%s: a question after a condition that failed, which UOTHER0001 could answer: %s (%s)", name, v.Action, v.Reason)
		}
	}
	four := mustParse(t, "policy:\n  default: ask\n  rules:\n    - id: two\n      tool: \"*\"\n      verdict: ask\n      four_eyes: true\n")
	if v := four.Evaluate(Input{Tool: "ask_human", Args: []byte(`{}`), User: "UREQ", Channel: "D0123", Question: true}); v.Action != Deny {
		t.Errorf("a question under four eyes in a DM: %+v, want it denied: only the requester could answer", v)
	}
}

// A standing rule is found in force by its id, or by its tool and channel
// whatever its id (rules once had ids of their own); an expired one is not.
func TestStandingInForce(t *testing.T) {
	ctx := context.Background()
	e, _, c := newTestEngine(t)
	if _, err := e.Remember(ctx, "UA", StandingRule{ID: "sr-0badc0de", Tool: "deploy", Channel: "C1", ExpiresAt: c.now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id, tool, channel string
		want              bool
	}{
		{"sr-0badc0de", "other", "C2", true},
		{"sr-123456789abc", "deploy", "C1", true},
		{"sr-123456789abc", "deploy", "C2", false},
		{"sr-123456789abc", "restart", "C1", false},
	} {
		if got, err := e.StandingInForce(ctx, tt.id, tt.tool, tt.channel); err != nil || got != tt.want {
			t.Errorf("StandingInForce(%s, %s, %s) = %v, %v; want %v", tt.id, tt.tool, tt.channel, got, err, tt.want)
		}
	}
	c.mu.Lock()
	c.t = c.t.Add(2 * time.Hour)
	c.mu.Unlock()
	if got, _ := e.StandingInForce(ctx, "sr-0badc0de", "deploy", "C1"); got {
		t.Error("an expired rule is said to be in force")
	}
}
