package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// runRef names a run to resume and its conversation.
type runRef struct{ run, conversation string }

// Expire expires the calls that are due now, sends the reminders that are
// due (each once, see Reminder), and returns the next deadline: the
// earliest expiry of a pending call or reminder still to send, from the
// store's indexes (the zero time if none), so the caller can sleep until
// then. That is after now unless more is due at once (a pass that filled
// its batch, or work that came due while it ran): a reminder the index
// still lists as due that the pass found not due by its call's own times
// counts at the call's own next reminder time instead, so that the caller
// does not wake at once for it, again and again. It is safe to run on
// every replica at once: expiry is a compare-and-set, and exactly one
// expiry or decision completes a step.
// Each run whose step the expiry completed is passed to resume with its
// conversation key (Resume it there); with a nil resume, Expire calls
// Resume itself. It returns every error after doing what it can; the next
// deadline is then what could be read (zero if nothing).
func (a *Agent) Expire(ctx context.Context, resume func(runID, conversation string)) (time.Time, error) {
	runs, err := a.expireDue(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range runs {
		if resume != nil {
			resume(r.run, r.conversation)
			continue
		}
		if _, err := a.Resume(ctx, r.run); err != nil {
			errs = append(errs, err)
		}
	}
	now := a.cfg.Now()
	pass, err := a.remindDue(ctx, now)
	if err != nil {
		errs = append(errs, err)
	}
	next, err := a.store.NextExpiry(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("next expiry: %w", err))
	}
	remind, err := a.store.NextReminder(ctx)
	if err != nil {
		errs = append(errs, fmt.Errorf("next reminder: %w", err))
	}
	if !remind.IsZero() && !remind.After(now) && !pass.more && pass.holds(remind) {
		// The earliest listed reminder is one the pass left as not due:
		// the next of those calls by their own times stands for it.
		// Other reminders behind it are found by the pass at the
		// deadline returned, or the caller's next sweep.
		remind = pass.next
	}
	if !remind.IsZero() && (next.IsZero() || remind.Before(next)) {
		next = remind
	}
	return next, errors.Join(errs...)
}

// expireDue expires the due calls (a batch of at most 100) and returns the
// runs whose step that completed.
func (a *Agent) expireDue(ctx context.Context) ([]runRef, error) {
	var errs []error
	now := a.cfg.Now()
	due, err := a.store.Due(ctx, now, 100)
	if err != nil {
		errs = append(errs, fmt.Errorf("list due calls: %w", err))
	}
	var runs []runRef
	for _, c := range due {
		// Attempt names this sending (see Cancel).
		d := store.Decision{Kind: storedKind(approvals.Expire), Decider: System, At: now, Attempt: newNonce()}
		fx := decisionEffects(c, System, d.Kind, c.Fingerprint, now)
		got, complete, err := a.store.DecideAudited(ctx, c.ID, "", d, fx)
		if errors.Is(err, store.ErrAlreadyDecided) || errors.Is(err, store.ErrConflict) {
			continue
		}
		if err = a.decided(ctx, fx.Audit, err); err != nil {
			errs = append(errs, fmt.Errorf("expire %s: %w", c.ID, err))
			continue
		}
		view := viewOf(got)
		if a.cfg.Expired != nil {
			a.cfg.Expired(view)
		}
		a.reporter(got.Conversation).Updated(ctx, CallUpdate{Call: view, Phase: PhaseSkipped, Note: "expired"})
		if complete {
			a.resumable.add(got.RunID, got.Conversation)
			runs = append(runs, runRef{got.RunID, got.Conversation})
		}
	}
	return runs, errors.Join(errs...)
}
