package slackapp

import (
	"context"
	"sync"
	"time"
)

// expiryClock is the earliest deadline the expiry timer knows of. A call
// paused in this process, or announced as paused by another replica (see
// agent.Agent.FollowPauses), moves it earlier at once (see at); after each
// pass the store says when the next pending call, paused by any replica,
// is due.
type expiryClock struct {
	mu   sync.Mutex
	next time.Time // zero: none known
	wake chan struct{}
}

// at tells the timer about a deadline; it wakes the timer if the deadline
// is earlier than the one it sleeps towards.
func (e *expiryClock) at(t time.Time) {
	e.mu.Lock()
	earlier := e.next.IsZero() || t.Before(e.next)
	if earlier {
		e.next = t
	}
	e.mu.Unlock()
	if earlier {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

// take returns the known deadline and forgets it: a pass is about to run.
func (e *expiryClock) take() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.next
	e.next = time.Time{}
	return t
}

// peek returns the known deadline.
func (e *expiryClock) peek() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.next
}

// expire expires due calls on time until stopping is closed: it sleeps
// until the earliest deadline it knows of (at most SweepInterval, so calls
// whose pause this process missed are expired too), expires what is
// due, and asks the store for the next deadline. Several replicas may
// expire the same call; the store's decision is atomic, so one wins and
// reports it. Each resume goes on its conversation's queue.
func (a *App) expire(ctx context.Context, stopping <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stopping:
			return
		case <-a.expiry.wake:
			next := a.expiry.peek()
			if d := time.Until(next); !next.IsZero() && d > 0 {
				timer.Reset(min(d, a.cfg.SweepInterval))
				continue
			}
		case <-timer.C:
		}
		taken := a.expiry.take()
		next, err := a.ag.Expire(ctx, func(runID, conversation string) {
			if !closed(stopping) { // else the next process's sweep resumes it
				a.resumeFound(ctx, conversation, runID)
			}
		})
		if err != nil && ctx.Err() == nil {
			a.log.Warn("expire due approvals", "err", err)
			a.m.error("expire")
		}
		if err != nil && !taken.IsZero() {
			a.expiry.at(taken) // not done: still due
		}
		if !next.IsZero() {
			a.expiry.at(next)
		}
		// A wake-up sent by the at above, or by a pause before the peek
		// below, is accounted for by the peek; one sent after it stays,
		// and wakes the loop.
		select {
		case <-a.expiry.wake:
		default:
		}
		wait := a.cfg.SweepInterval
		if next := a.expiry.peek(); !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		if err != nil {
			// Try again in a moment, not at once: the store may be back.
			wait = min(a.cfg.SweepInterval, time.Second)
		}
		timer.Reset(wait)
	}
}
