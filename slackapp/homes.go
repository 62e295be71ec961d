package slackapp

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
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
	// the requesters' tabs are, and those of the members whose tab this
	// process published (see homeRefresh.published).
	maxHomeAudience = 100
	// maxHomeHashes bounds the users whose tab's hash is kept; past it,
	// one is forgotten for each new one (its next publish checks itself,
	// see publishHomes).
	maxHomeHashes = 10000
)

// homeRefresh collects the pending calls that appeared or changed since
// the Home tabs were last republished. Reporters add to it without
// waiting; refreshHomes drains it.
//
// It also orders the publishing of each user's tab: a round and a tab
// published as its user opens it each read the pending calls and then
// publish, and the one that reads first may publish last, its older
// reading (a decided call still listed, with its buttons) over the newer
// one until the next change. So a user's tab is published by one of them
// at a time, each reading once it holds the user (see claim and acquire).
// Other replicas publish the same tabs, unordered with this process: the
// hash Slack gave each tab this process published is kept, so that a
// publish from a reading older than the tab's is refused rather than
// shown (see publishHomes).
type homeRefresh struct {
	mu    sync.Mutex
	calls []agent.Call
	index map[string]int // position in calls by call id
	users []string       // left over from a round that hit maxHomesPerRound
	wake  chan struct{}
	// publishing holds the users whose tab is being published, each with
	// a channel closed once it is out; again marks those of them that a
	// round left out, to be published in the next round.
	publishing map[string]chan struct{}
	again      map[string]bool
	// hashes holds the hash of the view each user's tab was last
	// published with by this process, while no publish of another
	// replica is known to have replaced it.
	hashes map[string]string
}

func newHomeRefresh() homeRefresh {
	return homeRefresh{wake: make(chan struct{}, 1)}
}

// changed notes that call c appeared, was decided, expired or was
// cancelled; changes of one call before the next round count once. It
// never blocks.
func (h *homeRefresh) changed(c agent.Call) { h.note(c, true) }

// retake queues c again for the next round, unless a newer change of it
// is queued already, which it must not replace.
func (h *homeRefresh) retake(c agent.Call) { h.note(c, false) }

// note queues c for the next round; a change of it queued already is
// replaced if replace is set.
func (h *homeRefresh) note(c agent.Call, replace bool) {
	h.mu.Lock()
	if i, ok := h.index[c.ID]; ok {
		if replace {
			h.calls[i] = c
		}
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
	users = slices.DeleteFunc(slices.Clone(users), func(u string) bool { return u == "" })
	if len(users) == 0 {
		return
	}
	h.mu.Lock()
	h.users = append(h.users, users...)
	h.mu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// claim takes the tabs of users for a round and returns those it took:
// the others are being published (as their users opened them), and are
// marked to be published in the next round once that is out (see
// release), with a reading made after it. The round does not wait for
// them.
func (h *homeRefresh) claim(users []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var claimed []string
	for _, u := range users {
		if _, busy := h.publishing[u]; busy {
			if h.again == nil {
				h.again = map[string]bool{}
			}
			h.again[u] = true
			continue
		}
		h.hold(u)
		claimed = append(claimed, u)
	}
	return claimed
}

// acquire takes the tab of user, who opened it, waiting while it is being
// published (by a round, or as they opened it before); false if ctx ended
// first.
func (h *homeRefresh) acquire(ctx context.Context, user string) bool {
	for {
		h.mu.Lock()
		out, busy := h.publishing[user]
		if !busy {
			h.hold(user)
			h.mu.Unlock()
			return true
		}
		h.mu.Unlock()
		select {
		case <-out:
		case <-ctx.Done():
			return false
		}
	}
}

// hold notes that user's tab is being published. h.mu is held.
func (h *homeRefresh) hold(user string) {
	if h.publishing == nil {
		h.publishing = map[string]chan struct{}{}
	}
	h.publishing[user] = make(chan struct{})
}

// release notes that the tabs of users, taken by claim or acquire, are
// out, and keeps those a round left out meanwhile for the next round.
func (h *homeRefresh) release(users []string) {
	h.mu.Lock()
	var again []string
	for _, u := range users {
		if out, ok := h.publishing[u]; ok {
			close(out)
			delete(h.publishing, u)
		}
		if h.again[u] {
			delete(h.again, u)
			again = append(again, u)
		}
	}
	if len(h.publishing) == 0 {
		h.publishing, h.again = nil, nil // maps keep the size a burst gave them
	}
	h.mu.Unlock()
	if len(again) > 0 {
		h.later(again)
	}
}

// hashOf returns the hash of user's tab as this process last published
// it, or "" if it does not know it.
func (h *homeRefresh) hashOf(user string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hashes[user]
}

// published returns those of members whose tab this process published
// (whose hash it keeps), in order.
func (h *homeRefresh) published(members map[string]bool) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for u := range h.hashes {
		if members[u] {
			out = append(out, u)
		}
	}
	slices.Sort(out)
	return out
}

// setHash keeps hash as that of user's tab; "" forgets it.
func (h *homeRefresh) setHash(user, hash string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if hash == "" {
		delete(h.hashes, user)
		return
	}
	if h.hashes == nil {
		h.hashes = map[string]string{}
	}
	if _, ok := h.hashes[user]; !ok && len(h.hashes) >= maxHomeHashes {
		for u := range h.hashes {
			delete(h.hashes, u)
			break
		}
	}
	h.hashes[user] = hash
}

// refreshHomes republishes the Home tab of everyone concerned by a call
// that appeared, was decided, expired or was cancelled: its requesters,
// its approvers (user groups expanded) and, for a call open to anyone in
// its channel, the channel's members (in a channel of more than
// maxHomeAudience, only those whose tab this process published: see
// concerned). Changes are gathered for Config.HomeRefreshDelay, so each
// person's tab is published at most once a round, and a round publishes
// at most maxHomesPerRound tabs, one at a time and from one listing of
// the pending calls, so the bot stays within Slack's rate limits and the
// store is read once a round (again only for tabs that another replica
// published meanwhile, or whose hash this process does not know: see
// publishHomes). A tab being published as its user opened it is left to
// the next round (see publishRound). It returns when stopping is closed
// or ctx ends.
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
		a.publishRound(ctx, users, stopping)
	}
}

// publishRound publishes the tabs of a round's users (see publishHomes),
// but for those being published as their users opened them, which the
// next round publishes (see homeRefresh.claim).
func (a *App) publishRound(ctx context.Context, users []string, stopping <-chan struct{}) {
	claimed := a.homes.claim(users)
	defer a.homes.release(claimed)
	a.publishHomes(ctx, claimed, stopping)
}

// openedHome publishes the Home tab of user, who opened it (see showHome).
// hash is that of the tab as they opened it, if it was published before:
// a process that knows no hash of its own for the tab publishes with it,
// so that its publish needs no check (see publishHomes). The view it names
// was published from a reading made before the user opened it, so before
// this process reads; if another publish replaced it since, Slack refuses
// this one and the tab is read again, as for a hash of this process's own.
func (a *App) openedHome(ctx context.Context, user, hash string) {
	a.showHome(ctx, user, hash)
}

// showHome publishes the Home tab of user, who opened it or changed
// something on it (revoked a standing rule): at once, unless it is being
// published already (by a round, or by an earlier showHome), and then once
// that is out, so that the tab published last shows the latest reading of
// the pending calls. shown is the hash of the tab as the user sees it, or
// "" (see openedHome).
func (a *App) showHome(ctx context.Context, user, shown string) {
	if !a.homes.acquire(ctx, user) {
		return
	}
	defer a.homes.release([]string{user})
	if shown != "" && a.homes.hashOf(user) == "" {
		a.homes.setHash(user, shown)
	}
	a.publishHomes(ctx, []string{user}, nil)
}

// concerned lists the people whose Home tab shows the calls: requesters,
// approvers (named ones who may not see the call now too: outside its
// conversation, or the card's before an edit), and the audience of calls open to their channel: every
// member of a channel of up to maxHomeAudience members, and of a larger
// one those whose tab this process published, which may list the call
// (the others see it as they open their tab).
func (a *App) concerned(ctx context.Context, calls []agent.Call) []string {
	var out []string
	members := map[string][]string{}
	failed := map[string]bool{} // channels Slack did not list this round
	for _, c := range calls {
		out = append(out, requestedBy(c)...)
		if c.NeedsAudience && len(c.Approvers) > 0 || !slices.Equal(c.CardApprovers, c.Approvers) {
			// Named approvers who may not see the call now (outside its
			// conversation, or the card's, before an edit moved the call
			// under another rule) may have it listed still.
			out = append(out, a.expand(ctx, slices.Concat(c.CardApprovers, c.Approvers))...)
		}
		if len(namedDeciders(c)) > 0 {
			out = append(out, a.expand(ctx, a.deciders(ctx, c))...)
			continue
		}
		if approvals.IsDM(c.Channel) {
			continue // a DM's audience is its requester
		}
		if failed[c.Channel] {
			a.homes.retake(c)
			continue
		}
		m, ok := members[c.Channel]
		if !ok {
			all, err := a.audience.channelMembers(ctx, c.Channel)
			if err != nil {
				// Its members' tabs may list the call still: one Slack
				// may list next time is taken again in the next round,
				// with the others of its channel.
				members[c.Channel] = nil
				if mayPass(err) {
					a.log.Warn("list channel members; their Home tabs are refreshed in the next round", "channel", c.Channel, "err", err)
					failed[c.Channel] = true
					a.homes.retake(c)
				} else {
					a.log.Warn("list channel members", "channel", c.Channel, "err", err)
				}
				continue
			}
			if len(all) <= maxHomeAudience {
				for id := range all {
					m = append(m, id)
				}
				slices.Sort(m)
			} else {
				m = a.homes.published(all)
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
