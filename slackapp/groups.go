package slackapp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"golang.org/x/sync/singleflight"
)

const (
	// maxGroups bounds the user groups cached.
	maxGroups = 1000
	// lookupTimeout bounds one lookup shared by concurrent callers.
	lookupTimeout = 10 * time.Second
)

// groupCache resolves Slack user groups with a short cache, so a burst of
// clicks does not become a burst of usergroups.users.list calls: callers
// missing the same group at once share one call, and at most maxGroups
// groups are kept.
type groupCache struct {
	api *slack.Client
	ttl time.Duration
	max int
	sf  singleflight.Group

	mu      sync.Mutex
	entries map[string]groupEntry
}

type groupEntry struct {
	members []string
	at      time.Time
}

func newGroupCache(api *slack.Client, ttl time.Duration) *groupCache {
	return &groupCache{api: api, ttl: ttl, max: maxGroups, entries: map[string]groupEntry{}}
}

// Members returns the user ids in the user group id.
func (g *groupCache) Members(ctx context.Context, id string) ([]string, error) {
	g.mu.Lock()
	e, ok := g.entries[id]
	g.mu.Unlock()
	if ok && time.Since(e.at) < g.ttl {
		return e.members, nil
	}
	v, err := shared(ctx, &g.sf, id, func(ctx context.Context) (any, error) {
		members, err := g.api.GetUserGroupMembersContext(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("list members of user group %s: %w", id, err)
		}
		g.mu.Lock()
		put(g.entries, id, groupEntry{members: members, at: time.Now()}, g.max, g.ttl, func(e groupEntry) time.Time { return e.at })
		g.mu.Unlock()
		return members, nil
	})
	if err != nil {
		return nil, err
	}
	return v.([]string), nil
}

// shared runs fn once for all the callers asking for key at the same time.
// fn gets a context that keeps ctx's values but not its cancellation, so
// one caller giving up does not fail the others; it ends after
// lookupTimeout. Each caller still stops waiting when its own ctx ends.
func shared(ctx context.Context, sf *singleflight.Group, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	ch := sf.DoChan(key, func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		defer cancel()
		return fn(lctx)
	})
	select {
	case r := <-ch:
		return r.Val, r.Err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// put stores v under key in m, which holds at most limit entries: to make
// room it drops the expired entries (older than ttl; none when ttl is 0),
// then the oldest. The caller holds the lock guarding m.
func put[V any](m map[string]V, key string, v V, limit int, ttl time.Duration, at func(V) time.Time) {
	if _, ok := m[key]; !ok && len(m) >= limit {
		now := time.Now()
		if ttl > 0 {
			for k, e := range m {
				if now.Sub(at(e)) >= ttl {
					delete(m, k)
				}
			}
		}
		for len(m) >= limit {
			oldest, first := "", true
			for k, e := range m {
				if first || at(e).Before(at(m[oldest])) {
					oldest, first = k, false
				}
			}
			delete(m, oldest)
		}
	}
	m[key] = v
}
