package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
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

// expireDue sends again the expiries of earlier passes that were not
// confirmed (see unconfirmedExpiries), then expires the due calls (a batch
// of at most 100), and returns the runs whose step that completed.
func (a *Agent) expireDue(ctx context.Context) ([]runRef, error) {
	var errs []error
	var runs []runRef
	expire := func(c store.Call, e expiryAttempt, again bool) {
		got, complete, err := a.store.DecideAudited(ctx, c.ID, "", e.d, e.fx)
		if again && errors.Is(err, store.ErrAlreadyDecided) {
			// A store that does not answer a decision sent again as its
			// first sending: the call read back tells whether it holds
			// this expiry.
			var ours bool
			got, complete, ours, err = a.expiredBy(ctx, c, e.d.Attempt)
			if err == nil && !ours {
				err = store.ErrAlreadyDecided
			}
		}
		if errors.Is(err, store.ErrAlreadyDecided) || errors.Is(err, store.ErrConflict) {
			a.unsent.drop(c.ID)
			return
		}
		if err = a.decided(ctx, e.fx.Audit, err); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				a.unsent.drop(c.ID)
			} else {
				a.unsent.keep(c, e)
			}
			errs = append(errs, fmt.Errorf("expire %s: %w", c.ID, err))
			return
		}
		a.unsent.drop(c.ID)
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
	for _, u := range a.unsent.list() {
		expire(u.c, u.expiryAttempt, true)
	}
	now := a.cfg.Now()
	due, err := a.store.Due(ctx, now, 100)
	if err != nil {
		errs = append(errs, fmt.Errorf("list due calls: %w", err))
	}
	for _, c := range due {
		if a.unsent.has(c.ID) {
			continue // sent again above, and not answered again
		}
		// Attempt names this sending (see Cancel).
		d := store.Decision{Kind: storedKind(approvals.Expire), Decider: System, At: now, Attempt: newNonce()}
		expire(c, expiryAttempt{d: d, fx: decisionEffects(c, System, d.Kind, c.Fingerprint, now)}, false)
	}
	return runs, errors.Join(errs...)
}

// expiredBy reads back call c, refused as decided when its expiry, the
// sending attempt names, was sent again: ours reports whether the call
// holds that expiry, and complete whether no call of its step is pending.
func (a *Agent) expiredBy(ctx context.Context, c store.Call, attempt string) (got store.Call, complete, ours bool, err error) {
	_, calls, err := a.store.LoadRun(ctx, c.RunID)
	if err != nil {
		return store.Call{}, false, false, err
	}
	i := slices.IndexFunc(calls, func(x store.Call) bool { return x.ID == c.ID })
	if i < 0 || !decidedBy(attempt)(calls[i]) {
		return store.Call{}, false, false, nil
	}
	return calls[i], !slices.ContainsFunc(calls, func(x store.Call) bool { return x.Status == store.Pending }), true, nil
}

// maxUnconfirmedExpiries bounds the expiries kept to send again; past it
// an expiry not confirmed is left to the stalled-resume sweep, which
// resumes its run.
const maxUnconfirmedExpiries = 1000

// expiryAttempt is one sending of an expiry: the decision, with the
// attempt that names it, and its effects.
type expiryAttempt struct {
	d  store.Decision
	fx store.Effects
}

// unconfirmedExpiries are the expiries whose store step failed without a
// refusal, by call id: made or not, the answer lost, or made on a Redis
// primary whose replicas did not confirm it (store.ErrNotReplicated). A
// call that holds its expiry is no longer listed as due, so nothing else
// would report it expired or resume its run before the stalled-resume
// sweep: each pass sends them again, the same attempt, until the store
// answers (as its first sending, or refusing it as made already, or made
// by someone else).
type unconfirmedExpiries struct {
	mu sync.Mutex
	m  map[string]unconfirmedExpiry
}

type unconfirmedExpiry struct {
	c store.Call
	expiryAttempt
}

func (u *unconfirmedExpiries) keep(c store.Call, e expiryAttempt) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.m[c.ID]; !ok && len(u.m) >= maxUnconfirmedExpiries {
		return
	}
	if u.m == nil {
		u.m = make(map[string]unconfirmedExpiry)
	}
	u.m[c.ID] = unconfirmedExpiry{c, e}
}

func (u *unconfirmedExpiries) drop(id string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, id)
}

func (u *unconfirmedExpiries) has(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	_, ok := u.m[id]
	return ok
}

// list returns the expiries kept, oldest deadline first.
func (u *unconfirmedExpiries) list() []unconfirmedExpiry {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := slices.Collect(maps.Values(u.m))
	slices.SortFunc(l, func(x, y unconfirmedExpiry) int { return x.c.ExpiresAt.Compare(y.c.ExpiresAt) })
	return l
}
