package slackapp

import (
	"context"
	"encoding/json"
	"time"
)

// Notices is a store that several replicas share and that carries notices
// between them (redisstore). Slack tells one replica that someone left a
// channel or a user group: the others must stop counting them as members
// too, at once rather than when what they keep of the members expires.
type Notices interface {
	// Notify tells every replica following the notices, this one
	// included, of notice.
	Notify(ctx context.Context, notice []byte) error
	// FollowNotices calls fn with each notice until ctx ends, and live
	// each time notices reach this replica: first, and again after a
	// reconnection, when some may have been missed.
	FollowNotices(ctx context.Context, live func(), fn func(notice []byte)) error
}

// notifyTimeout bounds the sending of a notice, which comes before the ack
// of the event that made it (Slack waits 3 s for the ack).
const notifyTimeout = 2 * time.Second

// membershipNotice tells the replicas that who may decide changed.
type membershipNotice struct {
	// Left is a channel someone left (member_left_channel).
	Left string `json:"left,omitempty"`
	// Group is a user group whose members changed
	// (subteam_members_changed).
	Group string `json:"group,omitempty"`
}

// membershipChanged drops what this replica keeps of the members n names,
// then tells the other replicas, if the store carries notices, and acks the
// event on a goroutine of its own once they are told (or the telling
// failed: they ask Slack again within the minute their members are kept).
// It reports whether it took ack.
func (a *App) membershipChanged(ctx context.Context, n membershipNotice, ack func()) bool {
	a.forgetMembers(n)
	ns, ok := a.st.(Notices)
	if !ok {
		return false
	}
	a.spawn(ctx, "notice", func(ctx context.Context) {
		defer ack()
		ctx, cancel := context.WithTimeout(ctx, notifyTimeout)
		defer cancel()
		if err := ns.Notify(ctx, mustJSON(n)); err != nil {
			a.log.Warn("tell the other replicas that members changed; they ask Slack again within a minute", "channel", n.Left, "user_group", n.Group, "err", err)
			a.m.error("notify")
		}
	})
	return true
}

// followNotices drops what this replica keeps of the members each notice
// names, and everything it keeps of members each time the notices reach
// it again after a reconnection (it may have missed some), until ctx
// ends. It returns at once if the store carries no notices.
func (a *App) followNotices(ctx context.Context) {
	ns, ok := a.st.(Notices)
	if !ok {
		return
	}
	first := true
	live := func() {
		if !first {
			a.audience.forget("")
			a.groups.forget("")
		}
		first = false
	}
	err := ns.FollowNotices(ctx, live, func(b []byte) {
		var n membershipNotice
		if json.Unmarshal(b, &n) == nil {
			a.forgetMembers(n)
		}
	})
	if err != nil {
		a.log.Warn("not following the other replicas' notices: someone who left a channel or user group another replica was told of decides here for up to a minute", "err", err)
	}
}

// forgetMembers drops what is kept of the members n names.
func (a *App) forgetMembers(n membershipNotice) {
	if n.Left != "" {
		a.audience.forget(n.Left)
	}
	if n.Group != "" {
		a.groups.forget(n.Group)
	}
}
