package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Reminder is implemented by a Reporter that can remind the approvers of a
// call still pending. n is 1 for the reminder after the call's
// remind-after time and 2 for the one when a quarter of its TTL is left.
type Reminder interface {
	Remind(ctx context.Context, c PendingCall, n int)
}

// StillApprovers returns those of approvers (user ids and user groups, as
// c's card names them) whom the policy as it is now lets approve c, as a
// decision on it is judged (see authorize), for a reminder to name: all
// of them when the policy allows c or its ask names no one, those its ask
// names (directly, or in a group it names) otherwise, none when it denies
// c. When the policy cannot be read now, all of them: a reminder too many
// beats one lost.
func (a *Agent) StillApprovers(ctx context.Context, c Call, approvers []string) []string {
	var hints approvals.Hints
	human := false
	if tool, ok := a.tools.Lookup(c.Tool); ok {
		hints, human = tool.Annotations, tool.Human
	}
	v, err := a.evaluateStrict(ctx, approvals.Input{Tool: c.Tool, Args: c.Args, User: c.Requester, Requesters: c.Requesters, Channel: c.Channel, Hints: hints, Question: human}, nil)
	switch {
	case err != nil:
		return approvers
	case v.Action == approvals.Deny:
		return nil
	case v.Action != approvals.Ask || len(v.Approvers) == 0:
		return approvers
	}
	return slices.DeleteFunc(slices.Clone(approvers), func(id string) bool {
		return !slices.Contains(v.Approvers, id) && approvals.Authorize(ctx, approvals.Approvable{Approvers: v.Approvers}, id, a.cfg.Groups) != nil
	})
}

// reminders returns when the approvers of c are reminded (see
// store.Reminders): once RemindAfter after it paused, and again when a
// quarter of its TTL is left, each only before it expires and the second
// only after the first. The first is the call's RemindAt when it is
// created; each claim moves RemindAt to the next one, and so does an edit
// that brings the call's expiry forward (see store.NextRemindAt).
func reminders(c store.Call) []time.Time {
	return store.Reminders(c)
}

// remindBatch bounds the reminders one pass sends; a pass that fills it
// finds the next one due at once.
const remindBatch = 100

// remindPass is what a pass of remindDue leaves for the next deadline.
type remindPass struct {
	// more is set when the pass filled its batch and moved calls on: more
	// reminders may be due at once.
	more bool
	// held are the reminder times of the calls listed as due that the
	// pass left listed at them, though nothing of theirs is due by their
	// own times (or their claim was refused while they stayed listed).
	held []time.Time
	// next is the earliest reminder due by their own times of those
	// calls (zero: none).
	next time.Time
}

// holds reports whether t is the reminder time of a call the pass left
// listed though nothing of it is due.
func (p remindPass) holds(t time.Time) bool { return slices.ContainsFunc(p.held, t.Equal) }

// hold notes a call the pass left listed at at, whose own next reminder
// is next (zero: none).
func (p *remindPass) hold(at, next time.Time) {
	p.held = append(p.held, at)
	if !next.IsZero() && (p.next.IsZero() || next.Before(p.next)) {
		p.next = next
	}
}

// remindDue sends the reminders that the store's reminder index lists as
// due at now (a batch of at most remindBatch), reading nothing about calls
// whose reminder is not due. A reminder is due by the call's own times
// (reminders) once its time has come, unless it or a later one was
// claimed (Reminded). Each reminder is claimed in the store first (which
// moves the call to its next reminder time), so it is sent once,
// whichever replica and however many passes get to it; when a pass finds
// both reminders of a call due (the bot was down), only the later one is
// claimed and sent.
//
// A call can be listed with nothing due by its own times: a pass that
// worked out the call's next reminder from its expiry just before an edit
// brought that forward leaves it listed at a reminder the new expiry no
// longer has, and so did an edit stored by an earlier version. Such a
// call with no reminder left is taken out of the index by a claim past
// its last reminder, which sends nothing; one whose next reminder is
// still to come stays listed, and is held in the result so that the
// pass's deadline is that reminder's time, not the listed one, already
// past.
func (a *Agent) remindDue(ctx context.Context, now time.Time) (remindPass, error) {
	var pass remindPass
	calls, err := a.store.DueReminders(ctx, now, remindBatch)
	if err != nil {
		return pass, fmt.Errorf("list due reminders: %w", err)
	}
	var errs []error
	moved := false
	for _, c := range calls {
		times := reminders(c)
		due := 0
		for due < len(times) && !times[due].After(now) {
			due++
		}
		if due <= c.Reminded {
			if c.Reminded < len(times) {
				// Not due by its own times yet: nothing to send.
				pass.hold(c.RemindAt, times[c.Reminded])
				continue
			}
			// No reminder left: the claim of one past the last takes
			// the call out of the index.
			ok, err := a.store.ClaimReminder(ctx, c.ID, c.Reminded+1, time.Time{})
			if err != nil {
				errs = append(errs, fmt.Errorf("claim the end of the reminders of %s: %w", c.ID, err))
			}
			moved = moved || ok
			continue
		}
		var next time.Time
		if due < len(times) {
			next = times[due]
		}
		ok, err := a.store.ClaimReminder(ctx, c.ID, due, next)
		if err != nil {
			errs = append(errs, fmt.Errorf("claim reminder %d of %s: %w", due, c.ID, err))
		}
		moved = moved || ok
		if !ok {
			if err == nil {
				// Claimed by another pass, or the call left Pending
				// meanwhile: either moved it on, and a listing left
				// at its time is no reminder due.
				pass.hold(c.RemindAt, next)
			}
			continue
		}
		rep, isReminder := a.reporter(c.Conversation).(Reminder)
		if !isReminder {
			continue
		}
		if p := a.pendingOf([]store.Call{c}); len(p) == 1 {
			rep.Remind(ctx, p[0], due)
		}
	}
	pass.more = len(calls) == remindBatch && moved
	return pass, errors.Join(errs...)
}
