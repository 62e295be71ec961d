package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/store"
)

// Reminder is implemented by a Reporter that can remind the approvers of a
// call still pending. n is 1 for the reminder after the call's
// remind-after time and 2 for the one when a quarter of its TTL is left.
type Reminder interface {
	Remind(ctx context.Context, c PendingCall, n int)
}

// reminders returns when the approvers of c are reminded: once RemindAfter
// after it paused, and again when a quarter of its TTL is left, each only
// before it expires and the second only after the first. The first is the
// call's RemindAt when it is created; each claim moves RemindAt to the
// next one. The times are whole milliseconds, which every store keeps
// exactly, so a RemindAt read back is one of them.
func reminders(c store.Call) []time.Time {
	if c.RemindAfter <= 0 {
		return nil
	}
	first := c.CreatedAt.Add(c.RemindAfter).Truncate(time.Millisecond)
	if !first.Before(c.ExpiresAt.Truncate(time.Millisecond)) {
		return nil // as it expires, or after: cut, it would come just before
	}
	out := []time.Time{first}
	if last := c.ExpiresAt.Add(-c.ExpiresAt.Sub(c.CreatedAt) / 4).Truncate(time.Millisecond); last.After(first) {
		out = append(out, last)
	}
	return out
}

// remindBatch bounds the reminders one pass sends; a pass that fills it
// finds the next one due at once.
const remindBatch = 100

// remindDue sends the reminders that the store's reminder index lists as
// due at now (a batch of at most remindBatch), reading nothing about calls
// whose reminder is not due. Each reminder is claimed in the store first
// (which moves the call to its next reminder time), so it is sent once,
// whichever replica and however many passes get to it; when a pass finds
// both reminders of a call due (the bot was down), only the later one is
// claimed and sent.
func (a *Agent) remindDue(ctx context.Context, now time.Time) error {
	calls, err := a.store.DueReminders(ctx, now, remindBatch)
	if err != nil {
		return fmt.Errorf("list due reminders: %w", err)
	}
	var errs []error
	for _, c := range calls {
		times := reminders(c)
		due := 0
		for due < len(times) && !times[due].After(now) {
			due++
		}
		if due == 0 {
			continue // not due by the call's own times: nothing to send yet
		}
		var next time.Time
		if due < len(times) {
			next = times[due]
		}
		ok, err := a.store.ClaimReminder(ctx, c.ID, due, next)
		if err != nil {
			errs = append(errs, fmt.Errorf("claim reminder %d of %s: %w", due, c.ID, err))
		}
		if !ok {
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
	return errors.Join(errs...)
}
