package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// before it expires and the second only after the first.
func reminders(c store.Call) []time.Time {
	if c.RemindAfter <= 0 {
		return nil
	}
	first := c.CreatedAt.Add(c.RemindAfter)
	if !first.Before(c.ExpiresAt) {
		return nil
	}
	out := []time.Time{first}
	if last := c.ExpiresAt.Add(-c.ExpiresAt.Sub(c.CreatedAt) / 4); last.After(first) {
		out = append(out, last)
	}
	return out
}

// remindDue sends the reminders of pending calls that are due at now and
// returns the time of the next one (zero if none). Each reminder is
// claimed in the store first, so it is sent once, whichever replica and
// however many passes get to it; when a pass finds both reminders of a
// call due (the bot was down), only the later one is sent.
func (a *Agent) remindDue(ctx context.Context, now time.Time) (time.Time, error) {
	calls, err := a.store.Pending(ctx, store.Filter{})
	if err != nil {
		return time.Time{}, fmt.Errorf("list calls to remind: %w", err)
	}
	var next time.Time
	var errs []error
	for _, c := range calls {
		times := reminders(c)
		due := 0
		for i, t := range times {
			if t.After(now) {
				if next.IsZero() || t.Before(next) {
					next = t
				}
				break
			}
			due = i + 1
		}
		if due == 0 {
			continue
		}
		send := false
		for n := 1; n <= due; n++ {
			ok, err := a.store.SeenEvent(ctx, "remind:"+c.ID+":"+strconv.Itoa(n), time.Until(c.ExpiresAt)+store.DedupeTTL)
			if err != nil {
				errs = append(errs, fmt.Errorf("claim reminder %d of %s: %w", n, c.ID, err))
				send = false
				break
			}
			send = ok && n == due // earlier ones are claimed, not sent
		}
		if !send {
			continue
		}
		rep, ok := a.reporter(c.Conversation).(Reminder)
		if !ok {
			continue
		}
		p := a.pendingOf([]store.Call{c})
		if len(p) == 1 {
			rep.Remind(ctx, p[0], due)
		}
	}
	return next, errors.Join(errs...)
}
