package agent

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// CallStatus says where a paused call stands.
type CallStatus string

// The statuses of a paused call. A call is pending until it is decided (by
// a person), expires or is cancelled; the last three are final.
const (
	CallPending   CallStatus = "pending"
	CallDecided   CallStatus = "decided"
	CallExpired   CallStatus = "expired"
	CallCancelled CallStatus = "cancelled"
)

// Decision is how a paused call was decided.
type Decision struct {
	Kind    approvals.Kind
	Decider string
	At      time.Time
	// Reason is a rejection's reason; Args the edited arguments of an
	// Edit; Answer a Respond's answer.
	Reason string
	Args   json.RawMessage
	Answer string
	// Exact marks a Remember whose standing rule allows these exact
	// arguments only.
	Exact bool
}

// Call is a paused call as the agent reports it to whoever drives it: what
// a card shows and what deciding it needs.
type Call struct {
	ID          string
	RunID       string
	Tool        string
	Args        json.RawMessage // canonical JSON
	Fingerprint string
	Requester   string
	// Requesters are everyone whose message the turn that made the call
	// answers (Requester among them); four eyes forbids each of them.
	Requesters   []string
	Channel      string
	Conversation string
	RuleID       string
	Reason       string
	// Approvers are those who may decide the call as shown: for a call
	// with an edit (pending, or the one it was decided with or after),
	// those both its rule and the card's name, or its rule's when they
	// name no one in common (see editApprovers); a decider must then be
	// among CardApprovers too. Who may see the call follows them, decided
	// or not.
	Approvers []string
	// CardApprovers are the approvers of the card's rule, whom a decider
	// of an edit must be among as well as the edit's rule's.
	CardApprovers []string
	// NeedsAudience is set when a decider must also be able to see the
	// conversation: the card's rule names no approvers (anyone in the
	// conversation decides), even when an edit's rule names some
	// (Approvers lists them then), or an edit's rule names none while the
	// card's names some (Approvers lists the card's then). An edit's mark
	// holds once the call is decided, expired or cancelled too, for who
	// may see it.
	NeedsAudience bool
	FourEyes      bool
	// NoAlwaysAllow marks an ask a standing rule may not relax (made of
	// several requesters' asks, or forced by a failed condition).
	NoAlwaysAllow bool
	CreatedAt     time.Time
	ExpiresAt     time.Time
	Status        CallStatus
	// Decision is set once the call is decided, expired or cancelled.
	Decision *Decision
	// MinApprovals is how many distinct approvers the call needs (0 or 1:
	// one); Approvals are those counted so far, of the arguments in Args.
	MinApprovals int
	Approvals    []string
	// Edited is set while a pending call's arguments are an edit (Args
	// holds them; the count restarted with the editor).
	Edited bool
	// RemindAt are the times its approvers are reminded while it is
	// pending (none when reminders are off).
	RemindAt []time.Time
	// Preview is what the tool said the call would do with Args, computed
	// when it paused; PreviewError why it could not (see Tool.Preview).
	Preview      string
	PreviewError string
}

// kindOf reads the kind of a stored decision ("" for none): the store keeps
// it as an opaque string, written by storedKind. These two are the only
// conversions between the store's string and approvals.Kind.
func kindOf(d *store.Decision) approvals.Kind {
	if d == nil {
		return ""
	}
	return approvals.Kind(d.Kind)
}

// storedKind is how a decision kind is kept in the store.
func storedKind(k approvals.Kind) string { return string(k) }

// viewOf is the one place where a stored call becomes the agent's view of
// it: the store keeps the decision kind as an opaque string.
func viewOf(c store.Call) Call {
	v := Call{
		ID: c.ID, RunID: c.RunID, Tool: c.Tool, Args: c.Args, Fingerprint: c.Fingerprint,
		Requester: c.Requester, Requesters: c.Requesters, Channel: c.Channel, Conversation: c.Conversation,
		RuleID: c.RuleID, Reason: c.Reason, Approvers: c.Approvers, CardApprovers: c.Approvers, NeedsAudience: len(c.Approvers) == 0 || c.NeedsAudience, FourEyes: c.FourEyes,
		NoAlwaysAllow: c.NoAlwaysAllow, CreatedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt, Status: CallStatus(c.Status),
		Preview: c.Preview, PreviewError: c.PreviewError,
	}
	if d := c.Decision; d != nil {
		v.Decision = &Decision{Kind: kindOf(d), Decider: d.Decider, At: d.At, Reason: d.Reason, Args: d.Args, Answer: d.Answer, Exact: d.Exact}
	}
	v.MinApprovals = c.MinApprovals
	for _, ap := range c.Approvals {
		v.Approvals = append(v.Approvals, ap.Approver)
	}
	v.RemindAt = reminders(c)
	if c.Edit != nil {
		// The edit's arguments wait on the approvers both its rule and
		// the card's admit. An edit under a rule that names no approvers
		// is decided only by people who can see the conversation, as the
		// agent checks on every decision, whoever the card's rule names.
		// An edit stored without the mark needs what the card's rule
		// needs.
		//
		// Who may decide the edit is who may see the call: that holds
		// once it is decided (with the edit, or by a Deny or Reject of
		// it), expired or cancelled too, as its decision may hold the
		// edited arguments or words about them. Only its arguments go
		// back to the model's (a decision holds the edited ones).
		v.Approvers = editApprovers(c.Approvers, c.Edit.Approvers)
		v.NeedsAudience = v.NeedsAudience || c.Edit.NeedsAudience
	}
	if d := c.Decision; d != nil && kindOf(d) == approvals.Edit {
		// An edit that decided the call at once, under a rule that asks:
		// seen by the same people as an edit that waits on approvals
		// would be, as the decision holds the edited arguments. One into
		// arguments the policy allows keeps the card's approvers.
		v.Approvers = editApprovers(v.Approvers, d.Approvers)
		v.NeedsAudience = v.NeedsAudience || d.NeedsAudience
	}
	if c.Edit != nil && c.Status == store.Pending {
		// The pending arguments are the edit's, waiting on as many
		// approvals as the most either rule asks for.
		v.Args, v.Edited = c.Edit.Args, true
		v.Preview, v.PreviewError = c.Edit.Preview, c.Edit.PreviewError
		v.MinApprovals = max(v.MinApprovals, c.Edit.MinApprovals)
	}
	return v
}

// editApprovers are the approvers a card shows for a pending edit: those
// of the card's rule (card) that the edit's rule (edit) names too, or
// either list when the other is empty (anyone in the conversation). Ids
// are compared as given, so a user group on one side and its member on the
// other have none in common: then the edit's rule's are shown, as the
// stricter.
func editApprovers(card, edit []string) []string {
	switch {
	case len(edit) == 0:
		return card
	case len(card) == 0:
		return edit
	}
	var both []string
	for _, id := range edit {
		if slices.Contains(card, id) {
			both = append(both, id)
		}
	}
	if len(both) == 0 {
		return edit
	}
	return both
}
