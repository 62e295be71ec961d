package slackapp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// groupCache resolves Slack user groups with a short cache, so a burst of
// clicks does not become a burst of usergroups.users.list calls.
type groupCache struct {
	api *slack.Client
	ttl time.Duration

	mu      sync.Mutex
	entries map[string]groupEntry
}

type groupEntry struct {
	members []string
	at      time.Time
}

// Members returns the user ids in the user group id.
func (g *groupCache) Members(ctx context.Context, id string) ([]string, error) {
	g.mu.Lock()
	e, ok := g.entries[id]
	g.mu.Unlock()
	if ok && time.Since(e.at) < g.ttl {
		return e.members, nil
	}
	members, err := g.api.GetUserGroupMembersContext(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list members of user group %s: %w", id, err)
	}
	g.mu.Lock()
	g.entries[id] = groupEntry{members: members, at: time.Now()}
	g.mu.Unlock()
	return members, nil
}
