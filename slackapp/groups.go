package slackapp

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/slack-go/slack"
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
	lookups

	mu      sync.Mutex
	entries map[string]groupEntry
}

type groupEntry struct {
	members []string
	// gone is Slack's answer that it lists no such group (deleted, or
	// disabled): an answer, kept as members are.
	gone error
	at   time.Time
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
		return e.members, e.gone
	}
	epoch := g.lookups.epoch()
	v, err := g.lookups.do(ctx, epochKey(id, epoch), func(ctx context.Context) (any, error) {
		members, err := g.api.GetUserGroupMembersContext(ctx, id)
		if err != nil && !unknownTo(err, "no_such_subteam") {
			return nil, fmt.Errorf("list members of user group %s: %w", id, err)
		}
		if err != nil {
			err = fmt.Errorf("list members of user group %s: %w", id, err)
		}
		g.mu.Lock()
		if g.lookups.epoch() == epoch {
			put(g.entries, id, groupEntry{members: members, gone: err, at: time.Now()}, g.max, g.ttl, func(e groupEntry) time.Time { return e.at })
		}
		g.mu.Unlock()
		return members, err
	})
	if err != nil {
		return nil, err
	}
	return v.([]string), nil
}

// kept returns the members kept of user group id, however old, without
// asking Slack: for a group Slack lists no more, who were in it.
func (g *groupCache) kept(id string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.entries[id].members
}

// membersOrNone is a groupCache as decisions read it (approvals.Authorize):
// a group Slack lists no more (deleted, or disabled) has no members. Its
// former members are then refused plainly, and their approvals dropped as
// stale, where a failure to check would refuse every decision their
// approval counts in, for as long as the call waits.
type membersOrNone struct{ *groupCache }

// Members returns the user ids in the user group id, none for a group
// Slack does not list.
func (g membersOrNone) Members(ctx context.Context, id string) ([]string, error) {
	members, err := g.groupCache.Members(ctx, id)
	if unknownTo(err, "no_such_subteam") {
		return nil, nil
	}
	return members, err
}

// forget drops what is kept of user group id, whose members changed (the
// subteam_members_changed event), or of every group with "" (see
// App.followNotices): someone taken out of it no longer decides for the
// ttl more.
func (g *groupCache) forget(id string) {
	g.mu.Lock()
	g.lookups.drop()
	if id == "" {
		clear(g.entries)
	} else {
		delete(g.entries, id)
	}
	g.mu.Unlock()
}

// lookups runs the look-ups of a cache: callers asking for the same key at
// the same time share one (as with singleflight), which runs in a
// goroutine of its own under a context that keeps the first caller's
// values but not its cancellation, so one caller giving up does not fail
// the others; it ends after lookupTimeout. Each caller still stops
// waiting when its own ctx ends. Its zero value is ready to use; close,
// called by Run as it ends, cancels the look-ups still running and waits
// for them.
type lookups struct {
	mu      sync.Mutex
	running map[string]*lookup
	closed  bool
	wg      sync.WaitGroup
	// dropped counts the times the cache dropped what it kept because
	// Slack said it changed (see drop).
	dropped uint64
}

// epoch returns how many times the cache dropped what it kept (see drop).
func (l *lookups) epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// drop counts a change Slack told of (someone left a channel, a user
// group's members changed): a look-up begun before it, which may have
// read what was, is neither joined (see epochKey) nor kept by the cache
// (which keeps one only if its epoch is still the current one) after it.
// The caller drops what it kept of the key too, under the lock it keeps
// it under.
func (l *lookups) drop() {
	l.mu.Lock()
	l.dropped++
	l.mu.Unlock()
}

// epochKey names the look-up of key begun in epoch.
func epochKey(key string, epoch uint64) string {
	return key + "#" + strconv.FormatUint(epoch, 10)
}

// lookup is one look-up running, and its result once done is closed.
type lookup struct {
	done   chan struct{}
	cancel context.CancelFunc
	val    any
	err    error
}

// do returns what fn returns for key, sharing a look-up running for it.
// Once the look-ups are closed, fn runs in the caller's goroutine.
func (l *lookups) do(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) (any, error) {
	c := l.start(ctx, key, fn)
	if c == nil {
		lctx, cancel := context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
		return fn(lctx)
	}
	select {
	case <-c.done:
		return c.val, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// start returns the look-up running for key, starting it with fn if none
// is, without waiting for it; nil once the look-ups are closed.
func (l *lookups) start(ctx context.Context, key string, fn func(ctx context.Context) (any, error)) *lookup {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	c, ok := l.running[key]
	if !ok {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		c = &lookup{done: make(chan struct{}), cancel: cancel}
		if l.running == nil {
			l.running = map[string]*lookup{}
		}
		l.running[key] = c
		l.wg.Go(func() { l.run(lctx, key, c, fn) })
	}
	return c
}

// run runs the look-up c of key; a panic in fn is its error.
func (l *lookups) run(ctx context.Context, key string, c *lookup, fn func(ctx context.Context) (any, error)) {
	defer func() {
		if r := recover(); r != nil {
			c.val, c.err = nil, fmt.Errorf("look-up %s: panic: %v", key, r)
		}
		c.cancel()
		l.mu.Lock()
		delete(l.running, key)
		l.mu.Unlock()
		close(c.done)
	}()
	c.val, c.err = fn(ctx)
}

// close cancels the look-ups running and waits for them to end; later
// look-ups run in their callers' goroutines.
func (l *lookups) close() {
	l.mu.Lock()
	l.closed = true
	for _, c := range l.running {
		c.cancel()
	}
	l.mu.Unlock()
	l.wg.Wait()
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
