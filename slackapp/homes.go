package slackapp

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// Bounds of the live inbox.
const (
	// maxHomeChanges bounds the changed calls waiting for a refresh; more
	// are dropped (their people see them when they open the tab).
	maxHomeChanges = 1000
	// maxHomesPerRound bounds the Home tabs republished in one round;
	// the rest wait for the next round, HomeRefreshDelay later.
	maxHomesPerRound = 100
	// maxHomeAudience bounds the channel members whose tab is refreshed
	// for a call open to anyone in its channel; in a larger channel only
	// the requesters' tabs are.
	maxHomeAudience = 100
)

// homeRefresh collects the pending calls that appeared or changed since
// the Home tabs were last republished. Reporters add to it without
// waiting; refreshHomes drains it.
type homeRefresh struct {
	mu    sync.Mutex
	calls []agent.Call
	index map[string]int // position in calls by call id
	users []string       // left over from a round that hit maxHomesPerRound
	wake  chan struct{}
}

func newHomeRefresh() homeRefresh {
	return homeRefresh{wake: make(chan struct{}, 1)}
}

// changed notes that call c appeared, was decided, expired or was
// cancelled; changes of one call before the next round count once. It
// never blocks.
func (h *homeRefresh) changed(c agent.Call) {
	h.mu.Lock()
	if i, ok := h.index[c.ID]; ok {
		h.calls[i] = c
	} else if len(h.calls) < maxHomeChanges {
		if h.index == nil {
			h.index = map[string]int{}
		}
		h.index[c.ID] = len(h.calls)
		h.calls = append(h.calls, c)
	}
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets the changed calls and the users left over.
func (h *homeRefresh) take() ([]agent.Call, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	calls, users := h.calls, h.users
	h.calls, h.users, h.index = nil, nil, nil
	return calls, users
}

// later keeps users for the next round and makes sure there is one.
func (h *homeRefresh) later(users []string) {
	h.mu.Lock()
	h.users = append(h.users, users...)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// refreshHomes republishes the Home tab of everyone concerned by a call
// that appeared, was decided, expired or was cancelled: its requesters,
// its approvers (user groups expanded) and, for a call open to anyone in
// its channel, the channel's members (up to maxHomeAudience). Changes are
// gathered for Config.HomeRefreshDelay, so each person's tab is published
// at most once a round, and a round publishes at most maxHomesPerRound
// tabs, one at a time and from one listing of the pending calls, so the
// bot stays within Slack's rate limits and the store is read once a
// round. It
// returns when stopping is closed or ctx ends.
func (a *App) refreshHomes(ctx context.Context, stopping <-chan struct{}) {
	for {
		select {
		case <-stopping:
			return
		case <-ctx.Done():
			return
		case <-a.homes.wake:
		}
		t := time.NewTimer(a.cfg.HomeRefreshDelay)
		select {
		case <-stopping:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		calls, users := a.homes.take()
		users = dedupe(append(users, a.concerned(ctx, calls)...))
		if len(users) > maxHomesPerRound {
			a.homes.later(users[maxHomesPerRound:])
			users = users[:maxHomesPerRound]
		}
		a.publishHomes(ctx, users, stopping)
	}
}

// concerned lists the people whose Home tab shows the calls: requesters,
// approvers, and the audience of calls open to their channel.
func (a *App) concerned(ctx context.Context, calls []agent.Call) []string {
	var out []string
	members := map[string][]string{}
	for _, c := range calls {
		out = append(out, c.Requester)
		out = append(out, c.Requesters...)
		if len(namedDeciders(c)) > 0 {
			out = append(out, a.expand(ctx, a.deciders(ctx, c))...)
			continue
		}
		if strings.HasPrefix(c.Channel, "D") {
			continue // a DM's audience is its requester
		}
		m, ok := members[c.Channel]
		if !ok {
			all, err := a.audience.channelMembers(ctx, c.Channel)
			if err != nil {
				a.log.Warn("list channel members", "channel", c.Channel, "err", err)
			}
			if len(all) <= maxHomeAudience {
				for id := range all {
					m = append(m, id)
				}
				slices.Sort(m)
			}
			members[c.Channel] = m
		}
		out = append(out, m...)
	}
	var users []string
	for _, u := range out {
		if u != "" && u != a.botUserID {
			users = append(users, u)
		}
	}
	return users
}
