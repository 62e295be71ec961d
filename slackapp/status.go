package slackapp

import (
	"context"
	"sync"

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
type threadStatuses struct {
	mu    sync.Mutex
	lines map[string]*statusLine
}

// statusLine is a conversation's status calls: the one in flight, and the
// one to send after it.
type statusLine struct {
	next    *pendingStatus
	settled chan struct{} // closed when nothing is in flight or waiting
}

// pendingStatus is a status waiting to be sent, with the context of the
// turn that set it.
type pendingStatus struct {
	ctx  context.Context
	text string
}

// setStatus sets the thread's status, in a goroutine of the app's while Run
// serves (otherwise at once), after the conversation's status call in
// flight has returned.
func (a *App) setStatus(ctx context.Context, conv, channel, thread, text string) {
	set := func(ctx context.Context, text string) {
		err := a.api.SetAssistantThreadsStatusContext(ctx, slack.AssistantThreadsSetStatusParameters{ChannelID: channel, ThreadTS: thread, Status: text})
		if err != nil {
			a.log.Debug("set thread status", "channel", channel, "err", err)
		}
	}
	if !a.running.Load() {
		a.statusSettled(ctx, conv)
		set(ctx, text)
		return
	}
	s := &a.statuses
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
// or waiting, or ctx ends. Call it before replying in the thread.
func (a *App) statusSettled(ctx context.Context, conv string) {
	s := &a.statuses
	s.mu.Lock()
	l := s.lines[conv]
	s.mu.Unlock()
	if l == nil {
		return
	}
	select {
	case <-l.settled:
	case <-ctx.Done():
	}
}
