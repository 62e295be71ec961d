package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// pausesChannel is the pub/sub channel on which pauses are announced (see
// store.Commit.Announce).
func (s *Store) pausesChannel() string { return s.channels + ":paused" }

// FollowPauses calls fn with the announcement of each pause made on this
// Redis, database and prefix (store.Commit.Announce, published by the script that
// records the pause, so only once it is recorded), by any process, this
// one included, until ctx ends; then it returns nil. live, if set, is
// called each time the subscription is live: first, and again once it is
// back after a reconnection. While Redis cannot be reached it keeps
// trying; a pause announced meanwhile is not replayed: an announcement
// only spares a read, and carries nothing the store does not also have.
func (s *Store) FollowPauses(ctx context.Context, live func(), fn func(announce []byte)) error {
	ps := s.c.Subscribe(ctx, s.pausesChannel())
	// A receive waiting for a message does not watch ctx: closing the
	// subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	for {
		// Receive reconnects, and subscribes again, after an error.
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if live != nil {
				live()
			}
		case *redis.Message:
			fn([]byte(m.Payload))
		}
	}
}
