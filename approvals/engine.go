package approvals

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/cel-go/cel"

	"github.com/toolgate/toolgate/store"
)

// Record kinds the Engine keeps in its RecordStore.
const (
	// KindPolicyRule records hold rules added with the slash command; the
	// record id is the rule id.
	KindPolicyRule = "policy_rule"
	// KindStandingRule records hold standing rules made by Remember; the
	// record id is the standing rule id.
	KindStandingRule = "standing_rule"
)

// Audit actions of the changes an Engine makes.
const (
	AuditPolicyAdd      = "policy_add"
	AuditPolicyRemove   = "policy_remove"
	AuditStandingAdd    = "standing_add"
	AuditStandingRevoke = "standing_revoke"
	AuditStandingExpire = "standing_expire"
)

// SystemActor is the actor of audit entries of changes no person made, such
// as deleting an expired standing rule.
const SystemActor = "system"

// ErrUnknownRule is wrapped by errors about a rule id that does not exist.
var ErrUnknownRule = errors.New("unknown rule")

// ErrRuleExists is wrapped when a rule is added with an id already in use.
var ErrRuleExists = errors.New("rule id already in use")

// ErrAuditFailed is wrapped when a change was made but its audit entry
// could not be written: the change stands, so making it again would make
// another one (a second rule, say).
var ErrAuditFailed = errors.New("auditing it failed")

// ErrUnconfirmed is wrapped when the store's answer to a change was lost
// (a time-out, a dropped connection) and reading the change back failed
// too: it may have been made.
var ErrUnconfirmed = errors.New("the store's answer was lost and the change could not be read back: it may have been made")

// confirmReserve is the part of a change's time kept to read it back when
// the store's answer to its write is lost.
const confirmReserve = 500 * time.Millisecond

// write makes the store write of a change, with ctx's time but for a
// reserve, and when its answer is lost (an error refused does not name:
// the store may have made the write) reads back with made whether it was
// made, with what is left: it returns nil if it was, err if it was not,
// and an error wrapping ErrUnconfirmed and err if that cannot be told. So
// a change is never told as failed while it is in force, nor made without
// its audit entry.
func write(ctx context.Context, do func(context.Context) error, refused func(error) bool, made func(context.Context) (bool, error)) error {
	wctx, cancel := context.WithCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		wctx, cancel = context.WithDeadline(ctx, d.Add(-min(confirmReserve, time.Until(d)/4)))
	}
	err := do(wctx)
	cancel()
	// A write the replicas did not acknowledge is on the primary, where a
	// read finds it, and may be lost in a failover: told as it is.
	if err == nil || refused(err) || errors.Is(err, store.ErrNotReplicated) {
		return err
	}
	ok, rerr := made(ctx)
	switch {
	case rerr != nil:
		return fmt.Errorf("%w: %w (reading it back: %v)", ErrUnconfirmed, err, rerr)
	case ok:
		return nil
	}
	return err
}

// auditUnconfirmed audits a change whose store answer was lost and could
// not be read back (ErrUnconfirmed) as made, its detail saying it is
// unconfirmed: one that was made is never in force unaudited. A failure
// of this entry too is logged only: the change's error says enough.
func (e *Engine) auditUnconfirmed(ctx context.Context, actor, action, tool, channel, id, detail string) {
	detail = strings.TrimSpace("unconfirmed (the store's answer was lost) " + detail)
	if err := e.audit(ctx, actor, action, tool, channel, id, detail); err != nil && e.log != nil {
		e.log.Warn("audit a change whose store answer was lost", "action", action, "id", id, "err", err)
	}
}

// primaryOnly takes from *err a write the replicas did not acknowledge
// (store.ErrNotReplicated) and returns it: the change is on the primary,
// in force, so it is audited as made, and the error told after (see
// onPrimary).
func primaryOnly(err *error) error {
	if errors.Is(*err, store.ErrNotReplicated) {
		e := *err
		*err = nil
		return e
	}
	return nil
}

// onPrimary is the error of a change made (what, with args) that the
// replicas did not acknowledge (unreplicated, from primaryOnly), or nil.
func onPrimary(unreplicated error, what string, args ...any) error {
	if unreplicated == nil {
		return nil
	}
	return fmt.Errorf("%s on the store's primary, but its replicas did not acknowledge it (a failover may lose it): %w", fmt.Sprintf(what, args...), unreplicated)
}

// conflict and notFound are the store's refusals of a record's put and
// delete, for write.
func conflict(err error) bool { return errors.Is(err, store.ErrConflict) }
func notFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// stored reports, for write, whether the record kind/id holds data.
func (e *Engine) stored(kind, id string, data []byte) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		recs, err := e.rs.Records(ctx, kind)
		return slices.ContainsFunc(recs, func(r store.Record) bool { return r.ID == id && bytes.Equal(r.Data, data) }), err
	}
}

// deleted reports, for write, whether the record kind/id is gone.
func (e *Engine) deleted(kind, id string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		recs, err := e.rs.Records(ctx, kind)
		return !slices.ContainsFunc(recs, func(r store.Record) bool { return r.ID == id }), err
	}
}

// ErrFileRule is wrapped when a change made at run time would remove a rule
// of the policy file: the file is a floor, changed only by editing it.
var ErrFileRule = errors.New("rule is in the policy file")

// RecordStore keeps the Engine's records. store implementations satisfy it;
// when the store also has an Audit method (see Auditor), every change is
// written to the audit log.
type RecordStore interface {
	// PutRecord stores r; with expectVersion >= 0 it fails with
	// store.ErrConflict unless the stored version (0 when absent) matches.
	PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error)
	// Records lists the records of a kind.
	Records(ctx context.Context, kind string) ([]store.Record, error)
	// DeleteRecord deletes a record or returns store.ErrNotFound.
	DeleteRecord(ctx context.Context, kind, id string) error
}

// Auditor appends to the audit log.
type Auditor interface {
	Audit(ctx context.Context, e store.AuditEntry) error
}

// Source says where an effective rule comes from.
type Source string

// Rule sources.
const (
	SourceFile  Source = "file"  // the policy file
	SourceAdmin Source = "admin" // added with the slash command
)

// RuleView is one rule of the effective policy, as listed by Rules.
type RuleView struct {
	Rule
	Source Source
	// AddedBy and AddedAt say who added an admin rule and when; they are
	// empty for file rules.
	AddedBy string
	AddedAt time.Time
}

// StandingRule is a standing permission made by a Remember decision: calls
// of Tool in Channel that would be asked are allowed while When (if set)
// holds and the rule has not expired.
type StandingRule struct {
	ID string `json:"id"`
	// Tool is an exact tool name, not a glob.
	Tool    string `json:"tool"`
	Channel string `json:"channel"`
	// When is an optional CEL condition with the same variables as a
	// policy rule's.
	When      string    `json:"when,omitempty"`
	CreatedBy string    `json:"created_by"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt is when the rule stops applying; zero means never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// RuleID is the policy rule whose ask this standing rule relaxes; it
	// applies only to calls that rule asks about, so allowing a tool under
	// one rule never waives another rule's approvers. Empty applies to any
	// ask of the tool.
	RuleID string `json:"rule_id,omitempty"`
	// RuleDigest is the Verdict.RuleDigest of that rule when the standing
	// rule was made; if the rule changes (or its id is reused), the
	// standing rule stops applying.
	RuleDigest string `json:"rule_digest,omitempty"`
	// Fingerprint, when set, narrows the rule to calls whose arguments have
	// this fingerprint (see Fingerprint): "for these exact arguments".
	Fingerprint string `json:"fingerprint,omitempty"`
}

// relaxes reports whether s may turn the ask verdict v into allow: v comes
// from the rule s was made under, unchanged since. A standing rule that
// names no rule (made before rules were recorded) relaxes only asks that
// name no approvers, and so does one that names its rule but not its
// digest (made before digests were recorded), whose rule may have changed
// since, to name approvers or to another rule taking its id.
func (s StandingRule) relaxes(v Verdict) bool {
	switch {
	case s.RuleID == "":
		return len(v.Approvers) == 0
	case s.RuleDigest == "" && v.RuleDigest != "":
		// Made under the annotations before their asks had digests: of
		// a tool that said nothing or that said it is destructive, which
		// cannot be told now; it relaxes only the first.
		if s.RuleID == RuleAnnotations && v.RuleDigest != "unannotated" {
			return false
		}
		return s.RuleID == v.RuleID && len(v.Approvers) == 0
	}
	return s.RuleID == v.RuleID && s.RuleDigest == v.RuleDigest
}

// Expired reports whether s no longer applies at now.
func (s StandingRule) Expired(now time.Time) bool {
	return !s.ExpiresAt.IsZero() && !now.Before(s.ExpiresAt)
}

// RememberedRule builds the standing rule a Remember decision asks for on a
// call of tool in channel that the verdict v asked about: its conditions,
// an expiry TTL after the decision when TTL is set, the decided arguments'
// fingerprint when Exact is set, and v's rule, which is the only one it
// relaxes. Pass it to Engine.Remember.
func RememberedRule(d Decision, tool, channel string, v Verdict) StandingRule {
	s := StandingRule{Tool: tool, Channel: channel, When: d.Conditions, CreatedBy: d.Decider, CreatedAt: d.At, RuleID: v.RuleID, RuleDigest: v.RuleDigest}
	if d.Exact {
		s.Fingerprint = d.Fingerprint
	}
	if d.TTL > 0 {
		s.ExpiresAt = d.At.Add(d.TTL)
	}
	return s
}

// adminRule is the data of a KindPolicyRule record.
type adminRule struct {
	Rule    Rule      `json:"rule"`
	AddedBy string    `json:"added_by"`
	AddedAt time.Time `json:"added_at"`
}

// Engine is the effective policy: the file Policy merged with changes made
// with the slash command and standing rules from Remember, all kept in a
// RecordStore so every replica judges alike. There are two layers of rules:
//
//   - the file's rules, in file order (the first match of the layer counts);
//   - admin rules added with AddRule at run time, newest first, so a later,
//     more specific exception wins over an earlier one.
//
// The file is a floor: the verdict is the strictest of the two layers'
// matches (deny > ask > allow), so a runtime rule can tighten any call
// (deny, ask, four eyes, a shorter TTL, approvers where the file names
// none) but relax no file rule. When no rule of either layer matches, the
// tool's hints decide, then the policy default (see Policy.Evaluate).
//
// Then, if the verdict is ask, a standing rule for that exact tool in the
// call's channel, made under the rule that asked and whose condition holds,
// relaxes it to allow. Standing rules never override deny, never relax the
// ask of a four-eyes rule, and never relax a fail-closed ask from a
// condition that could not be evaluated.
//
// An Engine reads the store on every evaluation and caches only compiled
// conditions (keyed by the record's content), so a change made on one replica applies on all at once. It is
// safe for concurrent use.
type Engine struct {
	file     *Policy
	rs       RecordStore
	env      *cel.Env
	now      func() time.Time
	log      *slog.Logger // audit lines; nil: none
	defaults Defaults
	makers   MakerCheck // nil: none

	mu    sync.Mutex
	cache map[string]cachedProgram // "kind/id" -> compiled record
	// last is the state compiled from the records judged by last, while
	// they are unchanged (see compile).
	last *compiledFrom
}

// compiledFrom is a state and the records it was compiled from, good
// until the first of its standing rules expires (zero: none does).
type compiledFrom struct {
	rules, standing []store.Record // ids and data, cloned
	st              *state
	until           time.Time
}

// sameRecords reports whether a and b are the same records, by id and
// data, in the same order.
func sameRecords(a, b []store.Record) bool {
	return slices.EqualFunc(a, b, func(x, y store.Record) bool { return x.ID == y.ID && bytes.Equal(x.Data, y.Data) })
}

// idsAndData clones the ids and data of recs.
func idsAndData(recs []store.Record) []store.Record {
	out := make([]store.Record, len(recs))
	for i, r := range recs {
		out[i] = store.Record{ID: r.ID, Data: slices.Clone(r.Data)}
	}
	return out
}

// cachedProgram is a compiled record, valid while the record's data is
// unchanged. (Versions alone do not do: a record deleted and put again
// starts over at version 1.)
type cachedProgram struct {
	data []byte
	rule compiledRule // for policy rules
	prg  cel.Program  // for standing rules; nil when no condition
	err  error
}

// EngineOption configures an Engine.
type EngineOption func(*Engine)

// WithClock sets the clock used for record times and standing-rule expiry;
// the default is time.Now.
func WithClock(now func() time.Time) EngineOption {
	return func(e *Engine) { e.now = now }
}

// WithDefaults gives the asks of rules that set no ttl or remind_after
// the bot's (APPROVAL_TTL, REMINDER_AFTER) in their verdicts, so that a
// rule combined with them (a runtime rule over a file rule, a condition
// that failed) can only shorten them. Without it such a verdict says
// zero, the caller's default.
func WithDefaults(d Defaults) EngineOption {
	return func(e *Engine) { e.defaults = d }
}

// MakerCheck reports whether the maker of a standing rule may still
// approve, in channel, under the ask the standing rule relaxes: nil if
// they may; an error otherwise, a lookup that failed included.
type MakerCheck func(ctx context.Context, ask Verdict, maker, channel string) error

// WithMakerCheck has a standing rule (Always allow) relax an ask only
// while check lets its maker approve under it: one taken out of the
// rule's user group since, or out of the conversation under a rule that
// names no approvers, no longer lets calls run unasked (the rule applies
// again once they are back); one that cannot be checked does not either.
// Without it, a standing rule stands for as long as its rule is unchanged.
func WithMakerCheck(check MakerCheck) EngineOption {
	return func(e *Engine) { e.makers = check }
}

// MakersUnder is the MakerCheck of Authorize with groups, and, under an
// ask that names no approvers, of audience: the maker must be able to
// see the conversation (audience nil: not checked).
func MakersUnder(groups GroupResolver, audience func(ctx context.Context, channel, user string) (bool, error)) MakerCheck {
	return func(ctx context.Context, ask Verdict, maker, channel string) error {
		if err := Authorize(ctx, Approvable{Approvers: ask.Approvers}, maker, groups); err != nil {
			return err
		}
		if len(ask.Approvers) > 0 || audience == nil {
			return nil
		}
		ok, err := audience(ctx, channel, maker)
		switch {
		case err != nil:
			return fmt.Errorf("%w (%w): %w", ErrNotApprover, ErrUnverified, err)
		case !ok:
			return fmt.Errorf("%s cannot see the conversation: %w", maker, ErrNotApprover)
		}
		return nil
	}
}

// WithAuditLog writes every audit entry of the Engine's changes to l as
// well, as one line with the message "audit" (see store.AuditEntry.Log).
func WithAuditLog(l *slog.Logger) EngineOption {
	return func(e *Engine) { e.log = l }
}

// NewEngine returns an Engine over the file policy p (nil: no file rules,
// default ask) and the record store rs.
func NewEngine(p *Policy, rs RecordStore, opts ...EngineOption) *Engine {
	if p == nil {
		p, _ = NewPolicy(Ask, nil) // cannot fail: no rules
	}
	e := &Engine{file: p, rs: rs, env: p.env, now: time.Now, cache: make(map[string]cachedProgram)}
	for _, o := range opts {
		o(e)
	}
	e.file = e.file.withDefaults(e.defaults)
	return e
}

// state is the stored part of the effective policy at one moment.
type state struct {
	admin    []RuleView // newest first
	compiled []compiledRule
	standing []standingCompiled // oldest first, none expired
	expired  []StandingRule     // expired standing rules, to delete
}

type standingCompiled struct {
	StandingRule
	prg cel.Program
	err error
}

// load reads the admin rules, removals and standing rules.
func (e *Engine) load(ctx context.Context) (*state, error) {
	recs, standing, err := e.records(ctx)
	if err != nil {
		return nil, err
	}
	return e.compile(recs, standing)
}

// compile builds the state from the admin rules and standing rules. The
// state of the same records as the last call's is that call's (every
// judgement reads the records, and they seldom change), until one of its
// standing rules expires; a state is never changed once built.
func (e *Engine) compile(recs, standing []store.Record) (*state, error) {
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if l := e.last; l != nil && (l.until.IsZero() || now.Before(l.until)) && sameRecords(recs, l.rules) && sameRecords(standing, l.standing) {
		return l.st, nil
	}
	st, err := e.compileLocked(recs, standing, now)
	if err != nil {
		return nil, err
	}
	l := &compiledFrom{rules: idsAndData(recs), standing: idsAndData(standing), st: st}
	for _, s := range st.standing {
		if !s.ExpiresAt.IsZero() && (l.until.IsZero() || s.ExpiresAt.Before(l.until)) {
			l.until = s.ExpiresAt
		}
	}
	e.last = l
	return st, nil
}

// compileLocked is compile's work, with e.mu held, at now.
func (e *Engine) compileLocked(recs, standing []store.Record, now time.Time) (*state, error) {
	st := &state{}
	live := make(map[string]bool, len(recs)+len(standing))
	type entry struct {
		view RuleView
		c    compiledRule
	}
	var admin []entry
	for _, rec := range recs {
		var ar adminRule
		if err := json.Unmarshal(rec.Data, &ar); err != nil {
			// An unreadable admin rule could be a deny: refuse to judge.
			return nil, fmt.Errorf("decode policy rule %s: %w", rec.ID, err)
		}
		ar.Rule.ID = rec.ID
		key := KindPolicyRule + "/" + rec.ID
		live[key] = true
		cp, ok := e.cache[key]
		if !ok || !bytes.Equal(cp.data, rec.Data) {
			c, err := compileRule(e.env, ar.Rule)
			if err != nil {
				// Keep the rule so it fails closed on the tools it names.
				c = compiledRule{Rule: ar.Rule, digest: ruleDigest(ar.Rule), err: fmt.Errorf("rule does not compile: %w", err)}
			}
			c.defaults = e.defaults
			cp = cachedProgram{data: slices.Clone(rec.Data), rule: c}
			e.cache[key] = cp
		}
		admin = append(admin, entry{RuleView{Rule: ar.Rule, Source: SourceAdmin, AddedBy: ar.AddedBy, AddedAt: ar.AddedAt}, cp.rule})
	}
	slices.SortStableFunc(admin, func(a, b entry) int {
		if c := b.view.AddedAt.Compare(a.view.AddedAt); c != 0 {
			return c
		}
		return cmp.Compare(b.view.ID, a.view.ID)
	})
	for _, a := range admin {
		st.admin = append(st.admin, a.view)
		st.compiled = append(st.compiled, a.c)
	}

	for _, rec := range standing {
		var s StandingRule
		if err := json.Unmarshal(rec.Data, &s); err != nil {
			continue // standing rules only relax; an unreadable one is ignored
		}
		s.ID = rec.ID
		if s.Expired(now) {
			st.expired = append(st.expired, s)
			continue
		}
		key := KindStandingRule + "/" + rec.ID
		live[key] = true
		cp, ok := e.cache[key]
		if !ok || !bytes.Equal(cp.data, rec.Data) {
			cp = cachedProgram{data: slices.Clone(rec.Data)}
			if s.When != "" {
				cp.prg, cp.err = compileWhen(e.env, s.When)
			}
			e.cache[key] = cp
		}
		st.standing = append(st.standing, standingCompiled{StandingRule: s, prg: cp.prg, err: cp.err})
	}
	slices.SortStableFunc(st.standing, func(a, b standingCompiled) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	for k := range e.cache {
		if !live[k] {
			delete(e.cache, k)
		}
	}
	return st, nil
}

// BatchRecordStore is a RecordStore that can list several kinds in one
// round trip; the Engine uses it when the store offers it.
type BatchRecordStore interface {
	RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error)
}

// records reads the admin rules and standing rules.
func (e *Engine) records(ctx context.Context) (rules, standing []store.Record, err error) {
	if b, ok := e.rs.(BatchRecordStore); ok {
		m, err := b.RecordsOf(ctx, KindPolicyRule, KindStandingRule)
		if err != nil {
			return nil, nil, fmt.Errorf("load policy records: %w", err)
		}
		return m[KindPolicyRule], m[KindStandingRule], nil
	}
	if rules, err = e.rs.Records(ctx, KindPolicyRule); err != nil {
		return nil, nil, fmt.Errorf("load policy rules: %w", err)
	}
	if standing, err = e.rs.Records(ctx, KindStandingRule); err != nil {
		return nil, nil, fmt.Errorf("load standing rules: %w", err)
	}
	return rules, standing, nil
}

// Evaluate judges one call against the effective policy (see Engine for the
// layers). If the stored changes cannot be read it fails closed: a call a
// file rule denies stays denied; any other call gets an ask verdict with
// RuleID RuleUnavailable and a reason; the error is returned with it.
func (e *Engine) Evaluate(ctx context.Context, in Input) (Verdict, error) {
	return e.EvaluateRecords(ctx, in, nil)
}

// RecordKinds are the kinds of the records an Engine judges by.
func (e *Engine) RecordKinds() []string { return []string{KindPolicyRule, KindStandingRule} }

// EvaluateRecords is Evaluate on records the caller read, each of
// RecordKinds as BatchRecordStore.RecordsOf lists it, so a
// caller that reads the store anyway, for the call it judges, spares the
// Engine its own read. The verdict is the one Evaluate gives at the time
// of that read. A nil recs is read as Evaluate reads it.
func (e *Engine) EvaluateRecords(ctx context.Context, in Input, recs map[string][]store.Record) (Verdict, error) {
	var st *state
	var err error
	if recs == nil {
		st, err = e.load(ctx)
	} else {
		st, err = e.compile(recs[KindPolicyRule], recs[KindStandingRule])
	}
	if err != nil {
		// The file's rules are still known, and are a floor: a call they
		// deny (the default included) stays denied; anything else fails
		// closed, asking at least what the file's verdict asks.
		fv := e.file.Evaluate(in)
		if fv.Action == Deny {
			return fv, err
		}
		v := Verdict{
			Action:     Ask,
			RuleID:     RuleUnavailable,
			Reason:     "the policy store could not be read, so the call needs a decision",
			FailClosed: true,
		}
		tighten(&v, fv)
		return v, err
	}
	e.dropExpired(ctx, st.expired)
	return forEachUser(in, func(in Input) Verdict { return e.verdict(ctx, st, in) }), nil
}

// verdict judges in, as its User alone, by the file and the runtime rules
// and standing rules of st.
func (e *Engine) verdict(ctx context.Context, st *state, in Input) Verdict {
	act := newActivation(in)
	fileV, fileFailed, fileOpen := evaluate(e.file.rules, in, act)
	adminV, adminFailed, adminOpen := evaluate(st.compiled, in, act)
	v, failed := strictest(fileV, fileFailed, fileOpen, adminV, adminFailed, in.User)
	switch fb := fallback(in.Hints, e.file.def); {
	case v == nil:
		v = &fb
	case (fileV == nil || fileOpen) && (adminV == nil || adminOpen):
		// Only conditions that failed matched, in either layer.
		t := tightenByFallback(*v, fb)
		v = &t
	}
	if v.Action != Ask || v.FourEyes || v.MinApprovals > 1 || failed {
		return *v
	}
	argsFP := ""
	for _, s := range st.standing {
		if s.Tool != in.Tool || s.Channel != in.Channel || s.err != nil || !s.relaxes(*v) {
			continue
		}
		if s.Fingerprint != "" {
			if argsFP == "" {
				if _, fp, err := Fingerprint(in.Args); err == nil {
					argsFP = fp
				}
			}
			if argsFP != s.Fingerprint {
				continue
			}
		}
		if s.prg != nil {
			vars, err := act.get()
			if err != nil {
				continue
			}
			if ok, err := evalBool(s.prg, vars); err != nil || !ok {
				continue
			}
		}
		if e.makers != nil {
			if err := e.makers(ctx, *v, s.CreatedBy, in.Channel); err != nil {
				if e.log != nil {
					e.log.Warn("the maker of a standing rule may no longer approve under the rule it relaxes, or cannot be checked: it does not apply", "standing_rule", s.ID, "by", s.CreatedBy, "rule", v.RuleID, "err", err)
				}
				continue
			}
		}
		return Verdict{
			Action: Allow,
			RuleID: StandingPrefix + s.ID,
			Reason: fmt.Sprintf("remembered by %s (instead of: %s)", s.CreatedBy, describe(*v)),
		}
	}
	return *v
}

// dropExpired deletes expired standing rules, so they are not read on
// every later check, and audits each as AuditStandingExpire. A rule
// another replica deleted first is skipped; other failures leave the rule
// for the next check, which skips it as expired meanwhile.
func (e *Engine) dropExpired(ctx context.Context, rules []StandingRule) {
	for _, s := range rules {
		err := e.rs.DeleteRecord(ctx, KindStandingRule, s.ID)
		if err == nil {
			err = e.audit(ctx, SystemActor, AuditStandingExpire, s.Tool, s.Channel, s.ID, "")
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) && e.log != nil {
			e.log.Warn("delete expired standing rule", "id", s.ID, "err", err)
		}
	}
}

// fileRuleID is the shape of the ids the policy file's rules without one
// get (rule-1, rule-2, ...).
var fileRuleID = regexp.MustCompile(`^rule-[0-9]+$`)

// strictness orders actions: deny > ask > allow.
func strictness(a Action) int {
	switch a {
	case Deny:
		return 2
	case Ask:
		return 1
	}
	return 0
}

// strictest combines the verdict of the file layer with that of the
// runtime layer (either nil when no rule of the layer matched). The
// stricter action wins. When both say the same, the runtime rule (the newer,
// more specific one) speaks, but for an ask it cannot loosen the file rule:
// the file's approvers stay when it names any, four eyes holds if either
// says so (and whether they must see the conversation, the file's word
// with them), the shorter TTL applies, and the digest covers both rules so a
// standing rule made under this ask stops applying when either changes.
// When the file's ask is open (only rules whose condition failed matched:
// it may not apply at all), the call needs approvers both rules accept, as
// within a layer (see combine). Asks that together leave no one who could
// approve (approvers too few for the approvals needed, or only the
// requester under four eyes) make a deny that says so.
func strictest(file *Verdict, fileFailed, fileOpen bool, admin *Verdict, adminFailed bool, requester string) (*Verdict, bool) {
	switch {
	case admin == nil:
		return file, fileFailed
	case file == nil:
		return admin, adminFailed
	case strictness(file.Action) > strictness(admin.Action):
		return file, fileFailed
	case strictness(admin.Action) > strictness(file.Action) || admin.Action != Ask:
		return admin, adminFailed
	}
	v := *admin
	if fileOpen {
		if !combine(&v, *file, requester) {
			d := approversConflict(*file, *admin)
			return &d, true
		}
	} else {
		if len(file.Approvers) > 0 {
			// The file's approvers stay, with whether they must see the
			// conversation: the runtime's says so of its own approvers.
			v.Approvers, v.NeedsAudience = nil, file.NeedsAudience
		}
		tighten(&v, *file)
		if !decidable(v, requester) {
			from := strings.Join(v.Approvers, ", ")
			if v.FourEyes {
				from += " other than the requester"
			}
			return &Verdict{
				Action: Deny, RuleID: file.RuleID, RuleDigest: file.RuleDigest, FailClosed: true,
				Reason: fmt.Sprintf("rule %s and runtime rule %s together need %d approval(s) from %s, which no one can give: an admin must change one of them",
					file.RuleID, admin.RuleID, max(1, v.MinApprovals), from),
				Problem: joinProblems(file.Problem, admin.Problem),
			}, true
		}
	}
	if v.Reason == "" {
		v.Reason = file.Reason
	}
	v.FailClosed = file.FailClosed || admin.FailClosed
	v.Problem = joinProblems(file.Problem, admin.Problem)
	sum := sha256.Sum256([]byte(file.RuleID + "\x00" + file.RuleDigest + "\x00" + admin.RuleDigest))
	v.RuleDigest = hex.EncodeToString(sum[:8])
	return &v, fileFailed || adminFailed
}

// describe names the rule and reason of a verdict in a few words.
func describe(v Verdict) string {
	if v.Reason == "" {
		return "rule " + v.RuleID
	}
	return "rule " + v.RuleID + ": " + v.Reason
}

// Test is Evaluate for `/approvals policy test`: the verdict and the rule
// that produced it, without running anything.
func (e *Engine) Test(ctx context.Context, in Input) (Verdict, error) {
	return e.Evaluate(ctx, in)
}

// Rules returns the effective policy rules: admin rules newest first, then
// the file rules in file order. Each layer's first match counts, and the
// stricter of the two wins (see Engine).
func (e *Engine) Rules(ctx context.Context) ([]RuleView, error) {
	st, err := e.load(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(st.admin)
	for _, r := range e.file.Rules() {
		out = append(out, RuleView{Rule: r, Source: SourceFile})
	}
	return out, nil
}

// Overrule is a file rule stricter than a runtime rule where both match.
type Overrule struct {
	Rule Rule
	// Always is set when the file rule matches every call the runtime rule
	// does (no condition, a glob covering the runtime rule's), so the
	// runtime rule never changes the verdict on those calls.
	Always bool
}

// Overrules lists the file rules stricter than r (deny > ask > allow) that
// may match a call r matches, in file order. Globs are compared by what
// they can match; a condition is not analysed, so a file rule with one is
// listed as overruling r where it holds. The file layer's first match
// counts: a rule is Always only if no earlier rule may match r's calls
// first, and none after a rule that matches all of them is listed, as it
// never decides one.
func (e *Engine) Overrules(r Rule) []Overrule {
	var out []Overrule
	earlier := false // an earlier file rule may decide some of r's calls
	for _, f := range e.file.Rules() {
		if !globsOverlap(f.Tool, r.Tool) {
			continue
		}
		covers := f.When == "" && globCovers(f.Tool, r.Tool)
		if strictness(f.Verdict) > strictness(r.Verdict) {
			out = append(out, Overrule{Rule: f, Always: covers && !earlier})
		}
		if covers {
			break
		}
		earlier = true
	}
	return out
}

// KeepApprovers lists the file rules that ask, name approvers and may
// match a call r matches, in file order, when r is an ask naming
// approvers: where one of them matches, its approvers decide the call, not
// r's (see strictest). Globs are compared as Overrules compares them.
func (e *Engine) KeepApprovers(r Rule) []Rule {
	if r.Verdict != Ask || len(r.Approvers) == 0 {
		return nil
	}
	var out []Rule
	for _, f := range e.file.Rules() {
		if !globsOverlap(f.Tool, r.Tool) {
			continue
		}
		if f.Verdict == Ask && len(f.Approvers) > 0 {
			out = append(out, f)
		}
		if f.When == "" && globCovers(f.Tool, r.Tool) {
			break
		}
	}
	return out
}

// RelaxesDefault returns the policy file's default and reports whether r,
// a runtime rule, is looser than what decides a call no file rule matches:
// the default, or the tool's annotations, which ask unless the tool says
// it is read-only. Where no file rule matches, r decides in their place,
// so an allow can open a tool the file's default denies, or one that would
// ask for lack of annotations.
func (e *Engine) RelaxesDefault(r Rule) (def Action, relaxes bool) {
	def = e.file.Default()
	return def, strictness(r.Verdict) < max(strictness(def), strictness(Ask))
}

// Loosens lists the older runtime rules than r (it must be stored) that are
// stricter than it (deny > ask > allow, or an ask that needs what r's ask
// does not: see AskDrops) and may match a call it matches, newest first: r
// comes before them in the runtime layer, so where both match r decides,
// and is looser. Globs are compared as Overrules compares them.
func (e *Engine) Loosens(ctx context.Context, r Rule) ([]Rule, error) {
	st, err := e.load(ctx)
	if err != nil {
		return nil, err
	}
	var out []Rule
	older := false
	for _, v := range st.admin {
		if v.ID == r.ID {
			older = true
			continue
		}
		stricter := strictness(v.Verdict) > strictness(r.Verdict) || (v.Verdict == Ask && r.Verdict == Ask && len(AskDrops(r, v.Rule)) > 0)
		if older && stricter && globsOverlap(v.Tool, r.Tool) {
			out = append(out, v.Rule)
		}
	}
	return out, nil
}

// AskDrops lists what the ask rule older needs of an approval that the ask
// rule newer, deciding in its place, does not: "four eyes", "N approvals",
// "its approvers" (newer lets anyone in the channel approve, or names
// someone older does not; groups are compared by id). Empty when newer
// needs as much.
func AskDrops(newer, older Rule) []string {
	var out []string
	if older.FourEyes && !newer.FourEyes {
		out = append(out, "four eyes")
	}
	if n := max(1, older.MinApprovals); n > max(1, newer.MinApprovals) {
		out = append(out, fmt.Sprintf("%d approvals", n))
	}
	if len(older.Approvers) > 0 && (len(newer.Approvers) == 0 || slices.ContainsFunc(newer.Approvers, func(a string) bool { return !slices.Contains(older.Approvers, a) })) {
		out = append(out, "its approvers")
	}
	return out
}

// hasMeta reports whether a glob has pattern characters.
func hasMeta(glob string) bool { return strings.ContainsAny(glob, `*?[\`) }

// globsOverlap reports whether some tool name may match both globs; two
// patterns with wildcards are assumed to overlap.
func globsOverlap(a, b string) bool {
	switch {
	case !hasMeta(a):
		return matchesTool(b, a)
	case !hasMeta(b):
		return matchesTool(a, b)
	}
	return true
}

// Unreached returns a note for each rule of p that no call can reach: an
// earlier rule with no condition matches every tool it does (first match
// wins).
func (p *Policy) Unreached() []string {
	var out []string
	rules := p.Rules()
	for j, r := range rules {
		for _, earlier := range rules[:j] {
			if earlier.When == "" && globCovers(earlier.Tool, r.Tool) {
				out = append(out, fmt.Sprintf("rule %s (tool %s) is never reached: rule %s (tool %s, no condition) comes first and matches every call it would", r.ID, r.Tool, earlier.ID, earlier.Tool))
				break
			}
		}
	}
	return out
}

// Unreminded returns a note for each ask rule of p whose calls are never
// reminded (see UnremindedNote).
func (p *Policy) Unreminded(d Defaults) []string {
	var out []string
	for _, r := range p.Rules() {
		if n := UnremindedNote(r, d); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// UnremindedNote returns a note when r is an ask whose calls are never
// reminded: their ttl (the rule's, or d's) is not longer than their
// remind_after (the rule's, or d's), so they expire before the first
// reminder is due (see store.Reminders); else "". A value from d is named
// as the bot's setting. A rule whose ttl d does not know (zero), or that
// takes d's zero remind_after (reminders off), gets none: it is no
// mistake of the rule's.
func UnremindedNote(r Rule, d Defaults) string {
	if r.Verdict != Ask {
		return ""
	}
	ttl, ttlFrom := r.TTL, "its ttl"
	if ttl == 0 {
		ttl, ttlFrom = d.TTL, "APPROVAL_TTL"
	}
	remind, remindFrom := r.RemindAfter, "its remind_after"
	if remind == 0 {
		remind, remindFrom = d.RemindAfter, "REMINDER_AFTER"
	}
	// Reminders are whole milliseconds after the pause (see
	// store.Reminders): one less than a millisecond before the expiry
	// may be cut to it.
	if ttl <= 0 || remind <= 0 || ttl-remind >= time.Millisecond {
		return ""
	}
	return fmt.Sprintf("rule %s (tool %s) never reminds its approvers: its calls expire after %s (%s), no later than the first reminder would come, after %s (%s); give it a remind_after shorter than the ttl",
		r.ID, r.Tool, formatDuration(ttl), ttlFrom, formatDuration(remind), remindFrom)
}

// Unreminded returns UnremindedNote of r by the engine's defaults.
func (e *Engine) Unreminded(r Rule) string { return UnremindedNote(r, e.defaults) }

// MatchesNone reports whether glob matches none of names.
func MatchesNone(glob string, names []string) bool {
	return !slices.ContainsFunc(names, func(n string) bool { return matchesTool(glob, n) })
}

// globCovers reports whether every tool name matching inner matches outer.
func globCovers(outer, inner string) bool {
	return outer == "*" || outer == inner || (!hasMeta(inner) && matchesTool(outer, inner))
}

// AddRule validates r and stores it as an admin rule, in the runtime layer
// before older admin rules; it tightens calls it matches and cannot relax
// a file rule (see Engine and Overrules). An empty ID gets a generated one
// ("admin-" and 8 hex digits). It fails, changing nothing, if r is invalid,
// or with ErrRuleExists if the id names an admin rule or a file rule
// (remove an admin rule first to replace it). The change is
// audited as AuditPolicyAdd; if only the audit fails, the rule stays added
// and the error, which wraps ErrAuditFailed, says so.
func (e *Engine) AddRule(ctx context.Context, actor string, r Rule) (Rule, error) {
	if r.ID == "" {
		r.ID = "admin-" + randomHex(4)
	} else if err := validateID(r.ID); err != nil {
		return Rule{}, fmt.Errorf("add rule: id: %w", err)
	} else if fileRuleID.MatchString(r.ID) {
		// The ids the file's rules without one get, by position: a file
		// that grows would take it, and the rule added here could no
		// longer be removed.
		return Rule{}, fmt.Errorf("add rule: id: invalid id %q: ids of the form rule-<n> are those of the policy file's rules without an id", r.ID)
	}
	if _, err := compileRule(e.env, r); err != nil {
		return Rule{}, fmt.Errorf("add rule %s: %w", r.ID, err)
	}
	if slices.ContainsFunc(e.file.rules, func(c compiledRule) bool { return c.ID == r.ID }) {
		return Rule{}, fmt.Errorf("add rule %s: the policy file has a rule with this id: %w", r.ID, ErrRuleExists)
	}
	data, err := store.EncodeJSON(adminRule{Rule: r, AddedBy: actor, AddedAt: e.now().UTC()})
	if err != nil {
		return Rule{}, fmt.Errorf("add rule %s: %w", r.ID, err)
	}
	err = write(ctx, func(ctx context.Context) error {
		_, err := e.rs.PutRecord(ctx, store.Record{Kind: KindPolicyRule, ID: r.ID, Data: data}, 0)
		return err
	}, conflict, e.stored(KindPolicyRule, r.ID, data))
	unreplicated := primaryOnly(&err)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return Rule{}, fmt.Errorf("add rule %s: %w", r.ID, ErrRuleExists)
		}
		if errors.Is(err, ErrUnconfirmed) {
			e.auditUnconfirmed(ctx, actor, AuditPolicyAdd, r.Tool, "", r.ID, r.String())
			return r, fmt.Errorf("add rule %s: %w", r.ID, err)
		}
		return Rule{}, fmt.Errorf("add rule %s: %w", r.ID, err)
	}
	if err := e.audit(ctx, actor, AuditPolicyAdd, r.Tool, "", r.ID, r.String()); err != nil {
		return r, fmt.Errorf("rule %s added, but %w: %w", r.ID, ErrAuditFailed, err)
	}
	return r, onPrimary(unreplicated, "rule %s added", r.ID)
}

// RemoveRule deletes the admin rule with the given id (even when the file,
// changed since, has a rule of that id too). It returns an error wrapping
// ErrFileRule, changing nothing, if only a file rule has the id (the file
// is a floor: change the file to remove one), and one wrapping
// ErrUnknownRule if no rule has that id. The change is audited as
// AuditPolicyRemove; if only the audit fails, the rule stays removed and
// the error wraps ErrAuditFailed.
func (e *Engine) RemoveRule(ctx context.Context, actor, id string) error {
	// Read first for the audit entry, which says what rule went: its
	// text, as policy add's entry gave it.
	removed, err := e.adminRule(ctx, id)
	if err != nil {
		return fmt.Errorf("remove rule %s: %w", id, err)
	}
	// The stored rule goes first: a file changed since it was added may
	// have a rule of the same id, which must not keep it in force.
	err = write(ctx, func(ctx context.Context) error {
		return e.rs.DeleteRecord(ctx, KindPolicyRule, id)
	}, notFound, e.deleted(KindPolicyRule, id))
	unreplicated := primaryOnly(&err)
	if err != nil {
		if errors.Is(err, ErrUnconfirmed) {
			e.auditUnconfirmed(ctx, actor, AuditPolicyRemove, removed.Tool, "", id, removed.String())
		}
		if !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("remove rule %s: %w", id, err)
		}
		if slices.ContainsFunc(e.file.rules, func(c compiledRule) bool { return c.ID == id }) {
			return fmt.Errorf("remove rule %s: change the policy file to remove it: %w", id, ErrFileRule)
		}
		return fmt.Errorf("remove rule %s: %w", id, ErrUnknownRule)
	}
	detail := ""
	if removed.ID != "" {
		detail = removed.String()
	}
	if err := e.audit(ctx, actor, AuditPolicyRemove, removed.Tool, "", id, detail); err != nil {
		return fmt.Errorf("rule %s removed, but %w: %w", id, ErrAuditFailed, err)
	}
	return onPrimary(unreplicated, "rule %s removed", id)
}

// adminRule returns the admin rule id as stored, or a zero Rule (no ID)
// if there is none or it does not decode.
func (e *Engine) adminRule(ctx context.Context, id string) (Rule, error) {
	recs, err := e.rs.Records(ctx, KindPolicyRule)
	if err != nil {
		return Rule{}, err
	}
	for _, rec := range recs {
		var ar adminRule
		if rec.ID == id && json.Unmarshal(rec.Data, &ar) == nil {
			return ar.Rule, nil
		}
	}
	return Rule{}, nil
}

// Remember stores a standing rule and returns it as stored. Tool (an exact
// name, not a glob) and Channel are required; When, if set, must be a bool CEL condition.
// An empty ID gets a generated one ("sr-" and 8 hex digits); CreatedBy is
// set to actor, and CreatedAt to now when zero. An ExpiresAt at or before
// CreatedAt is refused. The change is audited as AuditStandingAdd; if only
// the audit fails, the rule stays stored and the error wraps ErrAuditFailed.
func (e *Engine) Remember(ctx context.Context, actor string, s StandingRule) (StandingRule, error) {
	switch {
	case s.Tool == "":
		return StandingRule{}, errors.New("remember: tool: missing")
	case strings.ContainsAny(s.Tool, `*?[\`):
		return StandingRule{}, fmt.Errorf("remember: tool: %q is a glob; a standing rule names one exact tool", s.Tool)
	case s.Channel == "":
		return StandingRule{}, errors.New("remember: channel: missing")
	}
	if s.When != "" {
		if _, err := compileWhen(e.env, s.When); err != nil {
			return StandingRule{}, fmt.Errorf("remember: %w", err)
		}
	}
	if s.ID == "" {
		s.ID = "sr-" + randomHex(4)
	} else if err := validateID(s.ID); err != nil {
		return StandingRule{}, fmt.Errorf("remember: id: %w", err)
	}
	s.CreatedBy = actor
	if s.CreatedAt.IsZero() {
		s.CreatedAt = e.now().UTC()
	}
	if !s.ExpiresAt.IsZero() && !s.ExpiresAt.After(s.CreatedAt) {
		return StandingRule{}, fmt.Errorf("remember: expires_at %s is not after created_at %s", s.ExpiresAt.Format(time.RFC3339), s.CreatedAt.Format(time.RFC3339))
	}
	data, err := store.EncodeJSON(s)
	if err != nil {
		return StandingRule{}, fmt.Errorf("remember: %w", err)
	}
	var detail []string
	if s.Fingerprint != "" {
		detail = append(detail, "exact_args="+s.Fingerprint[:min(12, len(s.Fingerprint))])
	}
	if s.When != "" {
		detail = append(detail, "when="+quote(s.When))
	}
	if !s.ExpiresAt.IsZero() {
		detail = append(detail, "expires="+s.ExpiresAt.Format(time.RFC3339))
	}
	err = write(ctx, func(ctx context.Context) error {
		_, err := e.rs.PutRecord(ctx, store.Record{Kind: KindStandingRule, ID: s.ID, Data: data}, 0)
		return err
	}, conflict, e.stored(KindStandingRule, s.ID, data))
	unreplicated := primaryOnly(&err)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return StandingRule{}, fmt.Errorf("remember %s: %w", s.ID, ErrRuleExists)
		}
		if errors.Is(err, ErrUnconfirmed) {
			e.auditUnconfirmed(ctx, actor, AuditStandingAdd, s.Tool, s.Channel, s.ID, strings.Join(detail, " "))
		}
		return StandingRule{}, fmt.Errorf("remember %s: %w", s.ID, err)
	}
	if err := e.audit(ctx, actor, AuditStandingAdd, s.Tool, s.Channel, s.ID, strings.Join(detail, " ")); err != nil {
		return s, fmt.Errorf("standing rule %s stored, but %w: %w", s.ID, ErrAuditFailed, err)
	}
	return s, onPrimary(unreplicated, "standing rule %s stored", s.ID)
}

// StandingRules lists the standing rules of a channel (all channels when
// channel is empty) that have not expired, oldest first. A record that does
// not decode is left out, and logged with its id, rather than hiding the
// others: judging ignores it too (it only relaxes), and Revoke still
// deletes it by that id.
func (e *Engine) StandingRules(ctx context.Context, channel string) ([]StandingRule, error) {
	recs, err := e.rs.Records(ctx, KindStandingRule)
	if err != nil {
		return nil, fmt.Errorf("load standing rules: %w", err)
	}
	now := e.now()
	var out []StandingRule
	for _, rec := range recs {
		var s StandingRule
		if err := json.Unmarshal(rec.Data, &s); err != nil {
			if e.log != nil {
				e.log.Warn("skip a standing rule that does not decode; revoke it by its id", "id", rec.ID, "err", err)
			}
			continue
		}
		s.ID = rec.ID
		if (channel == "" || s.Channel == channel) && !s.Expired(now) {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b StandingRule) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Revoke deletes a standing rule (expired or not). It returns an error
// wrapping ErrUnknownRule if there is none with that id. The change is
// audited as AuditStandingRevoke; if only the audit fails, the rule stays
// deleted and the error wraps ErrAuditFailed.
func (e *Engine) Revoke(ctx context.Context, actor, id string) error {
	// Read first for the channel its audit entry names: the audit log
	// shows an entry only to those who may see its channel.
	s, err := e.standingRule(ctx, id)
	if err != nil {
		return fmt.Errorf("revoke standing rule %s: %w", id, err)
	}
	err = write(ctx, func(ctx context.Context) error {
		return e.rs.DeleteRecord(ctx, KindStandingRule, id)
	}, notFound, e.deleted(KindStandingRule, id))
	unreplicated := primaryOnly(&err)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("revoke standing rule %s: %w", id, ErrUnknownRule)
		}
		if errors.Is(err, ErrUnconfirmed) {
			e.auditUnconfirmed(ctx, actor, AuditStandingRevoke, s.Tool, s.Channel, id, "")
		}
		return fmt.Errorf("revoke standing rule %s: %w", id, err)
	}
	if err := e.audit(ctx, actor, AuditStandingRevoke, s.Tool, s.Channel, id, ""); err != nil {
		return fmt.Errorf("standing rule %s revoked, but %w: %w", id, ErrAuditFailed, err)
	}
	return onPrimary(unreplicated, "standing rule %s revoked", id)
}

// StandingInForce reports whether a standing rule that has not expired is
// stored with the id, or for tool in channel: an Always allow's rule by its
// id, or one saved under an id of another form (as rules were once given
// ids of their own), or another Always allow's for the tool there.
func (e *Engine) StandingInForce(ctx context.Context, id, tool, channel string) (bool, error) {
	rules, err := e.StandingRules(ctx, "")
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(rules, func(s StandingRule) bool {
		return s.ID == id || s.Tool == tool && s.Channel == channel
	}), nil
}

// standingRule reads one standing rule, expired or not; one not stored is
// ErrUnknownRule.
func (e *Engine) standingRule(ctx context.Context, id string) (StandingRule, error) {
	recs, err := e.rs.Records(ctx, KindStandingRule)
	if err != nil {
		return StandingRule{}, err
	}
	for _, rec := range recs {
		if rec.ID != id {
			continue
		}
		var s StandingRule
		_ = json.Unmarshal(rec.Data, &s) // one that does not decode is still revoked
		s.ID = id
		return s, nil
	}
	return StandingRule{}, ErrUnknownRule
}

// audit logs an entry with the audit logger, if there is one, and writes
// it if the store keeps an audit log. An entry about a channel (a
// standing rule's) names it, so the audit log shows it only to those who
// may see that channel.
func (e *Engine) audit(ctx context.Context, actor, action, tool, channel, id, detail string) error {
	if detail != "" {
		detail = "id=" + id + " " + detail
	} else {
		detail = "id=" + id
	}
	entry := store.AuditEntry{
		At:      e.now().UTC(),
		Actor:   actor,
		Action:  action,
		Channel: channel,
		Tool:    tool,
		Outcome: "ok",
		Detail:  detail,
	}
	if e.log != nil {
		entry.Log(ctx, e.log)
	}
	a, ok := e.rs.(Auditor)
	if !ok {
		return nil
	}
	return a.Audit(ctx, entry)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
