package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// leaseChannel is the pub/sub channel on which releases of a lease are
// announced (by the releaseLease script).
func (s *Store) leaseChannel(key string) string { return s.leases.prefix + key }

// WatchLease subscribes to the releases of the lease on key, by any process
// on this Redis, database and prefix; the subscription is live when it returns.
// Releases are announced with PUBLISH, which Redis Cluster relays to every
// node. The process shares one pattern subscription among all its
// watches, made on the first one and ended by Close. An announcement made
// while the subscription's connection is lost is not heard: every watch
// is woken when it is made again, and a waiter must also re-check now and
// then. Closing the watch ends it.
func (s *Store) WatchLease(ctx context.Context, key string) (store.LeaseWatch, error) {
	w, err := s.leases.watch(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("watch lease %s: %w", key, err)
	}
	return w, nil
}

// leaseHub shares one pattern subscription to lease releases among the
// process's watches.
type leaseHub struct {
	c      redis.UniversalClient
	prefix string

	// subscribeWait bounds the making of the subscription, whatever the
	// watch's context allows.
	subscribeWait time.Duration

	mu sync.Mutex
	ps *redis.PubSub // nil until the first watch
	// subscribing is the attempt to make the subscription that a watch
	// is making; nil while none is.
	subscribing *subscribeAttempt
	watches     map[string]map[*leaseWatch]struct{}
	closing     chan struct{}
	done        chan struct{} // closed when the receiving goroutine has ended
}

func newLeaseHub(c redis.UniversalClient, prefix string) *leaseHub {
	return &leaseHub{c: c, prefix: prefix, subscribeWait: 5 * time.Second, watches: map[string]map[*leaseWatch]struct{}{}, closing: make(chan struct{})}
}

// subscribeAttempt is one watch's making of the subscription: done is
// closed when it ended, with err set if it failed.
type subscribeAttempt struct {
	done chan struct{}
	err  error
}

// watch adds a watch of key, making the hub's subscription first if it has
// none. One watch makes it at a time, by its own context and the hub's
// bound, without holding the hub: a Redis that does not answer holds up
// neither the announcements nor the other watches, which wait for that
// attempt by their own contexts and fail with it.
func (h *leaseHub) watch(ctx context.Context, key string) (*leaseWatch, error) {
	for {
		h.mu.Lock()
		if h.isClosing() {
			h.mu.Unlock()
			return nil, redis.ErrClosed
		}
		if h.ps != nil {
			w := &leaseWatch{hub: h, key: key, released: make(chan struct{}, 1)}
			if h.watches[key] == nil {
				h.watches[key] = map[*leaseWatch]struct{}{}
			}
			h.watches[key][w] = struct{}{}
			h.mu.Unlock()
			return w, nil
		}
		if at := h.subscribing; at != nil {
			h.mu.Unlock()
			select {
			case <-at.done:
				if at.err != nil && (ctx.Err() != nil || !isContextErr(at.err)) {
					return nil, at.err
				}
				// Made, or given up because the watch making it was
				// given up on: try again.
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		at := &subscribeAttempt{done: make(chan struct{})}
		h.subscribing = at
		h.mu.Unlock()
		ps, err := h.subscribe(ctx)
		h.mu.Lock()
		h.subscribing = nil
		at.err = err
		close(at.done)
		switch {
		case err != nil:
			h.mu.Unlock()
			return nil, err
		case h.isClosing():
			h.mu.Unlock()
			_ = ps.Close()
			return nil, redis.ErrClosed
		}
		h.ps, h.done = ps, make(chan struct{})
		go h.run(ps)
		h.mu.Unlock()
	}
}

// subscribe makes the pattern subscription to the prefix's releases, and
// waits for Redis to confirm it (from then on, releases reach this
// process) until ctx ends or subscribeWait has passed.
// An attempt given up because ctx ended returns ctx's error, so that the
// watches waiting for it, whose contexts have not ended, try again.
func (h *leaseHub) subscribe(ctx context.Context) (*redis.PubSub, error) {
	sctx, cancel := context.WithTimeout(ctx, h.subscribeWait)
	defer cancel()
	ps := h.c.PSubscribe(sctx, globEscaper.Replace(h.prefix)+"*")
	if _, err := ps.Receive(sctx); err != nil {
		_ = ps.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return ps, nil
}

// isContextErr reports whether err is a context's ending: an attempt to
// subscribe given up by the watch that made it, not failed by Redis.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// isClosing reports whether close was called.
func (h *leaseHub) isClosing() bool {
	select {
	case <-h.closing:
		return true
	default:
		return false
	}
}

// globEscaper writes a string as a PSUBSCRIBE pattern that matches it
// alone: a prefix may hold the pattern's special characters.
var globEscaper = strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)

// run hands each announced release to the watches of its lease until the
// hub is closed. When the subscription is made again after its connection
// was lost, every watch is woken: a release announced meanwhile was not
// heard, and a waiter woken for nothing only tries its lease once more.
func (h *leaseHub) run(ps *redis.PubSub) {
	defer close(h.done)
	for {
		msg, err := ps.Receive(context.Background())
		if err != nil {
			// The subscription reconnects (and subscribes again) on the
			// next receive; do not spin while Redis is away.
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-h.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		h.mu.Lock()
		switch m := msg.(type) {
		case *redis.Subscription:
			for _, ws := range h.watches {
				wake(ws)
			}
		case *redis.Message:
			wake(h.watches[strings.TrimPrefix(m.Channel, h.prefix)])
		}
		h.mu.Unlock()
	}
}

// wake tells each of ws that its lease may be free.
func wake(ws map[*leaseWatch]struct{}) {
	for w := range ws {
		select {
		case w.released <- struct{}{}:
		default:
		}
	}
}

func (h *leaseHub) remove(w *leaseWatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watches[w.key], w)
	if len(h.watches[w.key]) == 0 {
		delete(h.watches, w.key)
	}
}

// close ends the subscription and waits for its goroutine.
func (h *leaseHub) close() {
	h.mu.Lock()
	if h.isClosing() {
		h.mu.Unlock()
		return
	}
	close(h.closing)
	ps, done := h.ps, h.done
	h.mu.Unlock()
	if ps != nil {
		_ = ps.Close()
		<-done
	}
}

// leaseWatch is one waiter's share of the hub's subscription.
type leaseWatch struct {
	hub      *leaseHub
	key      string
	released chan struct{}
}

func (w *leaseWatch) Released() <-chan struct{} { return w.released }

func (w *leaseWatch) Close() error {
	w.hub.remove(w)
	return nil
}
