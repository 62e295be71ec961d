package slackapp

import (
	"context"
	"sync"

	"github.com/slack-go/slack"
)

// threadStatuses are the thread status calls (assistant.threads.setStatus)
// in flight, by conversation. A status is set off the turn's goroutine, so
// the turn goes on to the model or the tool without waiting for Slack. Slack
// clears a thread's status when the app replies in it, so a reply waits
// until the status call before it has returned (App.statusSettled), and a
// status waits for the one before it: they reach Slack in the order they
// were set, and none lands after the reply that should clear it.
type threadStatuses struct {
	mu       sync.Mutex
	inflight map[string]chan struct{} // closed when the call has returned
}

// setStatus sets the thread's status, in a goroutine of the app's while Run
// serves (otherwise at once), after the conversation's previous status call
// has returned.
func (a *App) setStatus(ctx context.Context, conv, channel, thread, text string) {
	a.statusSettled(ctx, conv)
	set := func(ctx context.Context) {
		err := a.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: channel, ThreadTS: thread, Status: text})
		if err != nil {
			a.log.Debug("set thread status", "channel", channel, "err", err)
		}
	}
	if !a.running.Load() {
		set(ctx)
		return
	}
	done := make(chan struct{})
	s := &a.statuses
	s.mu.Lock()
	if s.inflight == nil {
		s.inflight = map[string]chan struct{}{}
	}
	s.inflight[conv] = done
	s.mu.Unlock()
	a.spawn(ctx, "status", func(ctx context.Context) {
		defer func() {
			s.mu.Lock()
			if s.inflight[conv] == done {
				delete(s.inflight, conv)
				if len(s.inflight) == 0 {
					s.inflight = nil // a map keeps the size a burst gave it
				}
			}
			s.mu.Unlock()
			close(done)
		}()
		set(ctx)
	})
}

// statusSettled waits until the conversation's status call in flight, if
// any, has returned, or ctx ends. Call it before replying in the thread.
func (a *App) statusSettled(ctx context.Context, conv string) {
	s := &a.statuses
	s.mu.Lock()
	done := s.inflight[conv]
	s.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}
