package approvals

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Action is what a policy says about one tool call.
type Action string

// The three verdicts of a policy.
const (
	Allow Action = "allow"
	Ask   Action = "ask"
	Deny  Action = "deny"
)

// Valid reports whether a is one of Allow, Ask or Deny.
func (a Action) Valid() bool { return a == Allow || a == Ask || a == Deny }

// Hints are the MCP-style annotations of a tool that decide a call no rule
// matches. Destructive nil means "not said", which MCP reads as true.
type Hints struct {
	ReadOnly    bool  `json:"read_only,omitempty"`
	Destructive *bool `json:"destructive,omitempty"`
	Idempotent  bool  `json:"idempotent,omitempty"`
}

// Input is everything a policy may look at: the call and who asked where.
// Args are the call's arguments, already valid JSON that passed the tool's
// schema.
type Input struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args"`
	User string          `json:"user"`
	// Requesters are everyone the call is made for when it answers several
	// people's messages (User among them or not): the call is judged with
	// each of them, and User, as the rules' user, and gets the strictest
	// of those verdicts (see Strictest), so whoever writes last in a
	// thread cannot lend the call their rules.
	Requesters []string `json:"requesters,omitempty"`
	Channel    string   `json:"channel"`
	Hints      Hints    `json:"hints"`
	// Question marks a question for people (a tool whose answer is
	// given by whoever decides it): one answer settles it, so an ask's
	// min_approvals does not apply to it (four eyes and approvers do),
	// and no count leaves it undecidable.
	Question bool `json:"question,omitempty"`
}

// asked drops, from v, a rule's verdict on in, what does not apply to a
// question (see Input.Question): its approval count.
func (in Input) asked(v *Verdict) {
	if v != nil && in.Question {
		v.MinApprovals = 0
	}
}

// users are the people in is judged as: User, then the other Requesters.
func (in Input) users() []string {
	users := []string{in.User}
	for _, u := range in.Requesters {
		if !slices.Contains(users, u) {
			users = append(users, u)
		}
	}
	return users
}

// forEachUser judges in as each of its users (see Input.Requesters) with
// judge and gives the strictest verdict. A call of one user goes through
// Strictest too, so that an ask leaving no one besides them who could
// approve it is denied alike, as is an ask that no one who can see in's
// conversation could approve (see decidableIn).
func forEachUser(in Input, judge func(Input) Verdict) Verdict {
	users := in.users()
	var v Verdict
	if len(users) == 1 {
		v = Strictest([]Verdict{judge(in)}, users)
	} else {
		vs := make([]Verdict, len(users))
		for i, u := range users {
			one := in
			one.User, one.Requesters = u, nil
			vs[i] = judge(one)
		}
		v = Strictest(vs, users)
	}
	if v.Action == Ask && !decidableIn(v, in.Channel, users) {
		return undecidableInDM(v)
	}
	return v
}

// Strictest combines the verdicts on one call judged as each of the people
// it is made for (users, in the same order): a deny denies, an allow
// stands only if all allow, and asks under different rules need
// approvers each of them accepts, four eyes, the highest count and the
// shortest TTL of all (see combine); when that leaves no one who could
// approve, the call is denied, saying why.
func Strictest(vs []Verdict, users []string) Verdict {
	var v *Verdict
	for i := range vs {
		switch w := vs[i]; {
		case w.Action == Deny:
			return w
		case w.Action != Ask:
		case v == nil:
			v = &w
		default:
			// The same rule may name other approvers for each (a
			// condition that failed for one narrows them): only those both
			// accept may decide, as across rules.
			merged := *v
			if !combine(&merged, w, users...) {
				return Verdict{
					Action: Deny, RuleID: v.RuleID, RuleDigest: v.RuleDigest, FailClosed: true,
					Reason: fmt.Sprintf("the call answers messages of %s, and rules %s and %s, which judge it for different ones of them, leave no approver who could decide it for all: ask for it in a thread of its own",
						strings.Join(users, ", "), v.RuleID, w.RuleID),
					Problem: joinProblems(v.Problem, w.Problem),
				}
			}
			merged.FailClosed = v.FailClosed || w.FailClosed
			if w.RuleID != v.RuleID || w.RuleDigest != v.RuleDigest {
				sum := sha256.Sum256([]byte(v.RuleID + "\x00" + v.RuleDigest + "\x00" + w.RuleID + "\x00" + w.RuleDigest))
				merged.RuleDigest = hex.EncodeToString(sum[:8])
				merged.Combined = true
			}
			v = &merged
		}
	}
	if v == nil {
		return vs[0]
	}
	if !decidable(*v, users...) {
		return undecidable(*v, users)
	}
	return *v
}

// undecidable is the deny of an ask v that leaves too few approvers besides
// the requesters (users) for the approvals it needs (see decidable). It
// says to ask in a thread of one's own only when the call asked by one of
// them alone could be approved.
func undecidable(v Verdict, users []string) Verdict {
	eligible, _ := Eligible(v.Approvers, v.FourEyes, users...)
	left := "no approver"
	if len(eligible) > 0 {
		left = fmt.Sprintf("only %d approver(s)", len(eligible))
	}
	reason := fmt.Sprintf("rule %s leaves %s besides the requester for the %d approval(s) it needs", v.RuleID, left, max(1, v.MinApprovals))
	if len(users) > 1 {
		reason = fmt.Sprintf("the call answers messages of %s, and rule %s leaves %s who is not one of them for the %d approval(s) it needs",
			strings.Join(users, ", "), v.RuleID, left, max(1, v.MinApprovals))
		if slices.ContainsFunc(users, func(u string) bool { return decidable(v, u) }) {
			reason += ": ask for it in a thread of its own"
		}
	}
	return Verdict{Action: Deny, RuleID: v.RuleID, RuleDigest: v.RuleDigest, FailClosed: true, Reason: reason, Problem: v.Problem}
}

// decidableIn reports whether someone could approve an ask v on a call of
// requesters made in channel. An ask naming no approvers, or whose
// approvers must see the conversation (NeedsAudience), is decided by who
// can see the conversation, and in a direct message (see IsDM) that is the
// requester alone: they can give no approval four eyes asks of someone
// else, nor more than one, nor one as an approver the ask does not name
// (a user group may hold them: that is looked up as they decide).
func decidableIn(v Verdict, channel string, requesters []string) bool {
	switch {
	case !IsDM(channel) || len(v.Approvers) > 0 && !v.NeedsAudience:
		return true
	case v.FourEyes || v.MinApprovals > 1:
		return false
	}
	return len(v.Approvers) == 0 || slices.ContainsFunc(v.Approvers, IsGroup) ||
		slices.ContainsFunc(requesters, func(u string) bool { return slices.Contains(v.Approvers, u) })
}

// undecidableInDM is the deny of an ask v that no one could approve in a
// direct message (see decidableIn).
func undecidableInDM(v Verdict) Verdict {
	why := "whom four eyes keeps from approving it"
	if !v.FourEyes {
		why = fmt.Sprintf("who cannot give the %d approvals it needs", v.MinApprovals)
	}
	names := fmt.Sprintf("rule %s names no approvers", v.RuleID)
	if len(v.Approvers) > 0 {
		names = fmt.Sprintf("rule %s leaves the call to those of its approvers who can see the conversation", v.RuleID)
		if !v.FourEyes && v.MinApprovals <= 1 {
			why = "who is not one of them"
		}
	}
	reason := fmt.Sprintf("%s, so the call can be decided only by people who can see the conversation, and in a direct message with the bot that is only the requester, %s: ask for it in a channel", names, why)
	return Verdict{Action: Deny, RuleID: v.RuleID, RuleDigest: v.RuleDigest, FailClosed: true, Reason: reason, Problem: v.Problem}
}

// Verdict is the outcome of judging an Input, with the rule that produced it.
type Verdict struct {
	Action Action `json:"action"`
	// RuleID names the rule that matched: a policy rule's id, a standing
	// rule's id, "annotations" or "default".
	RuleID string `json:"rule_id"`
	// RuleDigest identifies the content of the matching policy rule (for
	// annotations, which of their asks: "unannotated" or "destructive";
	// empty for the default), so a standing rule never carries over to a
	// different rule that took the same id, nor to a tool that says it is
	// destructive from one that said nothing.
	RuleDigest string `json:"rule_digest,omitempty"`
	// FailClosed marks a verdict forced by a condition that could not be
	// evaluated, or by a policy that could not be read.
	FailClosed bool `json:"fail_closed,omitempty"`
	// Combined marks an ask made of several rules' asks, one for each of
	// the people a call is made for (see Strictest): no standing rule
	// relaxes it, as none is made under one rule.
	Combined  bool     `json:"combined,omitempty"`
	Reason    string   `json:"reason,omitempty"`
	Approvers []string `json:"approvers,omitempty"`
	// NeedsAudience marks an ask whose Approvers must also be able to see
	// the conversation: made of an ask that names them and one that names
	// none (anyone in the conversation), so that whoever decides could
	// have decided under either (see combine).
	NeedsAudience bool          `json:"needs_audience,omitempty"`
	FourEyes      bool          `json:"four_eyes,omitempty"`
	TTL           time.Duration `json:"ttl,omitempty"`
	// MinApprovals is how many distinct approvers an ask needs (0 or 1:
	// one).
	MinApprovals int `json:"min_approvals,omitempty"`
	// RemindAfter is the rule's remind_after (zero: the bot's default).
	RemindAfter time.Duration `json:"remind_after,omitempty"`
	// Problem is, for a verdict forced by a condition that could not be
	// evaluated, the evaluation's error. It may quote the call's
	// arguments, so it is said where they are shown (to the model, in a
	// policy test, in the log), never as the rule's words (Reason).
	Problem string `json:"problem,omitempty"`
}

// Words are the reason of v as its rule says it, safe to show beside the
// call's card: its Reason, or its rule.
func (v Verdict) Words() string {
	if v.Reason == "" {
		return "rule " + v.RuleID
	}
	return v.Reason
}

// Why is the reason of v for the model, the log and whoever sees the
// call's arguments: its Words, and what could not be evaluated.
func (v Verdict) Why() string {
	if v.Problem != "" {
		return v.Words() + " (" + v.Problem + ")"
	}
	return v.Words()
}

// joinProblems joins the evaluation errors of two verdicts.
func joinProblems(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// Kind is the kind of a decision on a paused call (SPEC section 2).
type Kind string

// Every decision an approver (or the system) can make on a paused call.
const (
	Approve  Kind = "approve"
	Edit     Kind = "edit"
	Reject   Kind = "reject" // with a reason, given to the model verbatim
	Refuse   Kind = "deny"   // a plain Deny: the model must not retry
	Respond  Kind = "respond"
	Remember Kind = "remember"
	Expire   Kind = "expire"
	Cancel   Kind = "cancel"
)

// Runs reports whether a decision of kind k executes the tool.
func (k Kind) Runs() bool { return k == Approve || k == Edit || k == Remember }

// Kinds are the known kinds.
var Kinds = []Kind{Approve, Edit, Reject, Refuse, Respond, Remember, Expire, Cancel}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return slices.Contains(Kinds, k) }

// Decision is what someone decided about one paused call. It names the call,
// the fingerprint of the arguments the decider was shown, the decider and the
// time. Reason goes with Reject, Args with Edit (the new arguments), Answer
// with Respond, Conditions optionally with Remember. The agent stamps At
// with its own clock when it records the decision.
type Decision struct {
	CallID      string          `json:"call_id"`
	Fingerprint string          `json:"fingerprint"`
	Kind        Kind            `json:"kind"`
	Decider     string          `json:"decider"`
	At          time.Time       `json:"at"`
	Reason      string          `json:"reason,omitempty"`
	Args        json.RawMessage `json:"args,omitempty"`
	Answer      string          `json:"answer,omitempty"`
	// Conditions is an optional CEL expression narrowing a Remember rule.
	Conditions string `json:"conditions,omitempty"`
	// TTL is an optional lifetime for a Remember rule; zero means no expiry.
	TTL time.Duration `json:"ttl,omitempty"`
	// Exact narrows a Remember rule to calls with exactly the arguments
	// decided on (those of Fingerprint).
	Exact bool `json:"exact,omitempty"`
}

// Errors a refused decision wraps; check them with errors.Is.
var (
	ErrUnknownCall         = errors.New("unknown call")
	ErrAlreadyDecided      = errors.New("already decided")
	ErrExpired             = errors.New("approval expired")
	ErrFingerprintMismatch = errors.New("arguments changed since they were shown")
	ErrNotApprover         = errors.New("you are not an approver for this")
	// ErrUnverified, beside ErrNotApprover: whether the decider may
	// decide could not be checked (Slack did not answer who is in a user
	// group or a conversation), so the decision is refused for now.
	ErrUnverified   = errors.New("who may decide could not be checked")
	ErrInvalidArgs  = errors.New("invalid arguments")
	ErrPolicyDenied = errors.New("denied by policy")
	// ErrAlreadyApproved: the decider's approval of these arguments is
	// already counted toward a rule's min_approvals; it counts once.
	ErrAlreadyApproved = errors.New("your approval is already counted")
)

// RefusedError is returned when a decision is refused because the call was
// already decided; it says by whom, when and how.
type RefusedError struct {
	Err       error // one of the sentinel errors above
	DecidedBy string
	DecidedAt time.Time
	Kind      Kind
}

func (e *RefusedError) Error() string {
	if e.DecidedBy == "" {
		return e.Err.Error()
	}
	return e.Err.Error() + " by " + e.DecidedBy + " (" + string(e.Kind) + ")"
}

func (e *RefusedError) Unwrap() error { return e.Err }
