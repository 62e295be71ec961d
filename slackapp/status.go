package slackapp

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// threadStatuses are the thread status calls (assistant.threads.setStatus)
// of each conversation. A status is set off the turn's goroutine, so the
// turn goes on to the model or the tool without waiting for Slack, and
// never waits for the status before it either: a conversation has at most
// one call in flight, and a status set meanwhile is sent once it returns,
// in place of any other still waiting (a status nobody would see before
// the next is never sent). So statuses reach Slack in the order they were
// set. Slack clears a thread's status when the app replies in it, so a
// reply waits until no status of its conversation is in flight or waiting
// (App.statusSettled): none lands after the reply that should clear it.
//
// A status is cosmetic, and never holds a reply back for long: a status
// call is made once (a rate limit or a server error is not retried) and
// within statusCallTimeout, and a reply waits for the calls at most
// statusWait. A reply that stops waiting has its conversation's status
// cleared once the call in flight returns (see statusSettled). After a
// rate limit, statuses are dropped until Slack's Retry-After has passed.
type threadStatuses struct {
	mu    sync.Mutex
	lines map[string]*statusLine
	// limitedUntil is when the last rate limit on status calls ends.
	limitedUntil time.Time
}

// How long a status may hold things up.
const (
	// statusCallTimeout bounds one status call: a status shown later than
	// that is stale.
	statusCallTimeout = 5 * time.Second
	// statusWait is the longest a reply waits for its conversation's
	// status calls.
	statusWait = time.Second
)

// statusLine is a conversation's status calls: the one in flight, and the
// one to send after it.
type statusLine struct {
	next    *pendingStatus
	settled chan struct{} // closed when nothing is in flight or waiting
	// overtaken is set once a reply went ahead of the calls (see
	// statusSettled): the replies after it do not wait for them either.
	overtaken bool
}

// pendingStatus is a status waiting to be sent, with the context of the
// turn that set it; an empty text clears the thread's status.
type pendingStatus struct {
	ctx  context.Context
	text string
}

// limited reports whether status calls are rate-limited at the moment.
func (s *threadStatuses) limited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Now().Before(s.limitedUntil)
}

// limitFor notes that Slack rate-limited a status call for d.
func (s *threadStatuses) limitFor(d time.Duration) {
	until := time.Now().Add(d)
	s.mu.Lock()
	defer s.mu.Unlock()
	if until.After(s.limitedUntil) {
		s.limitedUntil = until
	}
}

// setStatus sets the thread's status, in a goroutine of the app's while Run
// serves (otherwise at once), after the conversation's status call in
// flight has returned.
func (a *App) setStatus(ctx context.Context, conv, channel, thread, text string) {
	s := &a.statuses
	set := func(ctx context.Context, text string) {
		if s.limited() {
			return
		}
		// A call outlives the turn that set it, which may end meanwhile
		// (a reply went ahead of the call): cut short, it could still land
		// after the status that clears it.
		ctx, cancel, ok := a.noteContext(ctx, statusCallTimeout)
		defer cancel()
		if !ok {
			return
		}
		err := a.api.SetAssistantThreadsStatusContext(withoutRetries(ctx), slack.AssistantThreadsSetStatusParameters{ChannelID: channel, ThreadTS: thread, Status: text})
		if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
			s.limitFor(rl.RetryAfter)
		} else if sc, ok := errors.AsType[slack.StatusCodeError](err); ok && sc.Code == http.StatusTooManyRequests {
			s.limitFor(retryAfterDefault) // no usable Retry-After
		}
		if err != nil {
			a.log.Debug("set thread status", "channel", channel, "err", err)
		}
	}
	if !a.running.Load() {
		a.statusSettled(ctx, conv)
		set(ctx, text)
		return
	}
	s.mu.Lock()
	if l := s.lines[conv]; l != nil {
		l.next = &pendingStatus{ctx: ctx, text: text}
		s.mu.Unlock()
		return
	}
	if s.lines == nil {
		s.lines = map[string]*statusLine{}
	}
	l := &statusLine{settled: make(chan struct{})}
	s.lines[conv] = l
	s.mu.Unlock()
	a.spawn(ctx, "status", func(ctx context.Context) {
		for {
			set(ctx, text)
			s.mu.Lock()
			next := l.next
			l.next = nil
			if next == nil {
				delete(s.lines, conv)
				if len(s.lines) == 0 {
					s.lines = nil // a map keeps the size a burst gave it
				}
				s.mu.Unlock()
				close(l.settled)
				return
			}
			s.mu.Unlock()
			ctx, text = next.ctx, next.text
		}
	})
}

// statusSettled waits until the conversation has no status call in flight
// or waiting, for at most statusWait, or until ctx ends. Call it before
// replying in the thread. A reply that stops waiting goes ahead of the
// calls: the status waiting, set before the reply, is replaced by one that
// clears the thread's status once the call in flight returns (a status
// set after the reply replaces that in turn), so a status landing after
// the reply does not stay. Until the calls are done, later replies do not
// wait for them, and clear the status after them the same way.
func (a *App) statusSettled(ctx context.Context, conv string) {
	s := &a.statuses
	s.mu.Lock()
	l := s.lines[conv]
	if l == nil {
		s.mu.Unlock()
		return
	}
	if !l.overtaken {
		s.mu.Unlock()
		t := time.NewTimer(statusWait)
		defer t.Stop()
		select {
		case <-l.settled:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		if s.lines[conv] != l {
			s.mu.Unlock()
			return // settled meanwhile
		}
		l.overtaken = true
	}
	l.next = &pendingStatus{ctx: ctx, text: ""}
	s.mu.Unlock()
}
