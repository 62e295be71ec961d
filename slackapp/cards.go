package slackapp

import (
	"context"
	"hash/fnv"
	"sync"
	"time"

	"github.com/toolgate/toolgate/agent"
)

const (
	// cardUpdaters is how many goroutines update cards.
	cardUpdaters = 4
	// cardQueueSize bounds the updates waiting per updater.
	cardQueueSize = 64
	// cardUpdateTimeout bounds one update: waiting for a card still being
	// posted, then chat.update on each copy, with the retries of
	// rate-limited calls.
	cardUpdateTimeout = 30 * time.Second
)

// cardUpdater updates approval cards off the path of whoever reported the
// change, so that recording a decision (and acking a modal submission)
// never waits for Slack's chat.update. Updates are sharded by call id onto
// a few goroutines with FIFO queues, so those of one call are applied in
// the order they were reported (decided before executed).
type cardUpdater struct {
	a *App

	mu      sync.RWMutex
	queues  []chan agent.CallUpdate
	stopped bool
	running sync.WaitGroup
}

// start starts the updaters. Updates reported before start are made
// inline.
func (c *cardUpdater) start() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queues = make([]chan agent.CallUpdate, cardUpdaters)
	for i := range c.queues {
		c.queues[i] = make(chan agent.CallUpdate, cardQueueSize)
		c.running.Add(1)
		go c.run(c.queues[i])
	}
}

// update makes the update now if the updaters are not running (before Run,
// or after shutdown stopped them), and otherwise queues it. When the
// call's queue is full the caller waits for room, as it used to wait for
// the update itself, so the call's updates stay in order; if ctx ends
// first the update is made inline.
func (c *cardUpdater) update(ctx context.Context, u agent.CallUpdate) {
	if !c.enqueue(ctx, u) {
		c.a.updateCard(ctx, u)
	}
}

func (c *cardUpdater) enqueue(ctx context.Context, u agent.CallUpdate) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.stopped || len(c.queues) == 0 {
		return false
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(u.Call.ID))
	q := c.queues[int(h.Sum32()%uint32(len(c.queues)))]
	select {
	case q <- u:
		return true
	default:
	}
	c.a.m.error("card_queue_full")
	select {
	case q <- u:
		return true
	case <-ctx.Done():
		c.a.log.Warn("card update queue full; updating inline", "call", u.Call.ID)
		return false
	}
}

func (c *cardUpdater) run(q chan agent.CallUpdate) {
	defer c.running.Done()
	for u := range q {
		ctx, cancel, ok := c.a.noteContext(context.Background(), cardUpdateTimeout)
		if !ok {
			c.a.log.Warn("shutdown deadline passed; card not updated", "call", u.Call.ID, "phase", u.Phase)
			continue
		}
		func() {
			defer cancel()
			defer func() {
				if r := recover(); r != nil {
					c.a.log.Error("card update panicked", "call", u.Call.ID, "panic", r)
					c.a.m.error("panic")
				}
			}()
			c.a.updateCard(ctx, u)
		}()
	}
}

// stop closes the queues, after which updates are made inline, and waits
// for the queued ones until the deadline; it reports whether they were all
// done. Each runs under the shutdown deadline (see noteContext).
func (c *cardUpdater) stop(deadline time.Time) bool {
	c.mu.Lock()
	c.stopped = true
	for _, q := range c.queues {
		close(q)
	}
	c.queues = nil
	c.mu.Unlock()
	return waitUntil(doneWhen(&c.running), deadline)
}
