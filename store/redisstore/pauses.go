package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// pausesChannel is the pub/sub channel on which pauses are announced (see
// store.Commit.Announce).
func (s *Store) pausesChannel() string { return s.channels + ":paused" }

// noticesChannel is the pub/sub channel of Notify.
func (s *Store) noticesChannel() string { return s.channels + ":notices" }

// FollowPauses calls fn with the announcement of each pause made on this
// Redis, database and prefix (store.Commit.Announce, published by the script that
// records the pause, so only once it is recorded), by any process, this
// one included, until ctx ends; then it returns nil. live, if set, is
// called each time the subscription is live: first, and again once it is
// back after a reconnection. While Redis cannot be reached it keeps
// trying; a pause announced meanwhile is not replayed: an announcement
// only spares a read, and carries nothing the store does not also have.
func (s *Store) FollowPauses(ctx context.Context, live func(), fn func(announce []byte)) error {
	return s.follow(ctx, s.pausesChannel(), live, fn)
}

// Notify tells every process that follows the notices of this Redis,
// database and prefix (see FollowNotices), this one included, of notice.
// It is told to those following now, once: nothing is kept for a process
// that follows later or is disconnected meanwhile.
func (s *Store) Notify(ctx context.Context, notice []byte) error {
	return s.c.Publish(ctx, s.noticesChannel(), notice).Err()
}

// FollowNotices calls fn with each notice (see Notify), by any process,
// this one included, until ctx ends; then it returns nil. live, if set,
// is called each time the subscription is live: first, and again once it
// is back after a reconnection, when notices may have been missed.
func (s *Store) FollowNotices(ctx context.Context, live func(), fn func(notice []byte)) error {
	return s.follow(ctx, s.noticesChannel(), live, fn)
}

// follow calls fn with each message published on channel until ctx ends,
// and live each time the subscription is live; while Redis cannot be
// reached it keeps trying.
func (s *Store) follow(ctx context.Context, channel string, live func(), fn func([]byte)) error {
	ps := s.c.Subscribe(ctx, channel)
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
