package slackapp

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// Audience tells the agent who can see a conversation: the members of a
// channel, or the other party of a direct message, but for outsiders (see
// outsiders). A call whose rule names no approvers may be decided, and is
// listed in App Home, only for them.
func (a *App) Audience() agent.Audience {
	return deciderAudience{audienceCache: a.audience, outsiders: &a.outsiders}
}

// Bounds of the audience cache.
const (
	maxDMs      = 10000
	maxChannels = 256
)

// audienceCache answers CanSee from conversations.info (the other party of
// a DM, which never changes) and conversations.members (kept for ttl, so a
// burst of clicks or Home tabs is not a burst of API calls). Callers
// missing the same conversation at once share one lookup, and at most
// maxDMs DMs and maxChannels channels are kept. Errors are returned, never
// guessed: the caller refuses.
type audienceCache struct {
	api         *slack.Client
	ttl         time.Duration
	maxDMs      int
	maxChannels int
	lookups

	mu      sync.Mutex
	dms     map[string]dmEntry
	members map[string]memberEntry
	public  map[string]publicEntry
	users   map[string]userEntry
}

// userEntry is what users.info said of a user, and when.
type userEntry struct {
	userFacts
	at time.Time
}

// userFacts is what the bot needs of a user's users.info: whether they
// are a guest (is_restricted or is_ultra_restricted), who sees only the
// channels they are in, deactivated, or a bot, neither of whom can click;
// and their team and Enterprise Grid organisation, which tell someone of
// another organisation (Slack Connect), who also sees only those.
type userFacts struct {
	guest, deactivated, bot bool
	team, enterprise        string
}

type publicEntry struct {
	public bool
	at     time.Time
}

type dmEntry struct {
	user string
	at   time.Time
}

type memberEntry struct {
	members map[string]bool
	at      time.Time
}

func newAudienceCache(api *slack.Client, ttl time.Duration) *audienceCache {
	return &audienceCache{api: api, ttl: ttl, maxDMs: maxDMs, maxChannels: maxChannels, dms: map[string]dmEntry{}, members: map[string]memberEntry{}, public: map[string]publicEntry{}, users: map[string]userEntry{}}
}

// CanSee reports whether user can see channel.
func (c *audienceCache) CanSee(ctx context.Context, channel, user string) (bool, error) {
	if channel == "" || user == "" {
		return false, nil
	}
	if approvals.IsDM(channel) {
		other, err := c.dmUser(ctx, channel)
		if err != nil {
			return false, err
		}
		return other == user, nil
	}
	members, err := c.channelMembers(ctx, channel)
	if err != nil {
		return false, err
	}
	return members[user], nil
}

// dmUser returns the person the bot talks to in a DM channel.
func (c *audienceCache) dmUser(ctx context.Context, channel string) (string, error) {
	c.mu.Lock()
	e, ok := c.dms[channel]
	c.mu.Unlock()
	if ok {
		return e.user, nil
	}
	v, err := c.lookups.do(ctx, "dm:"+channel, c.lookUpDM(channel))
	if err != nil {
		return "", err
	}
	return v.(string), nil
}

// noteDM keeps that the bot's DM channel is with user, as the bot learns
// when it opens one, sparing a look-up.
func (c *audienceCache) noteDM(channel, user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	put(c.dms, channel, dmEntry{user: user, at: time.Now()}, c.maxDMs, 0, func(e dmEntry) time.Time { return e.at })
}

// lookUpDM is the look-up of the person the bot talks to in a DM channel,
// which it keeps.
func (c *audienceCache) lookUpDM(channel string) func(ctx context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		info, err := c.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: channel})
		if err != nil {
			return nil, fmt.Errorf("look up DM %s: %w", channel, err)
		}
		if !info.IsIM || info.User == "" {
			return nil, fmt.Errorf("look up DM %s: not a direct message", channel)
		}
		// A DM's other party never changes: entries do not expire, only
		// the oldest make room.
		c.noteDM(channel, info.User)
		return info.User, nil
	}
}

// isPublic reports whether channel is a public channel, which everyone in
// the workspace can see (conversations.info, kept for ttl like the
// members).
func (c *audienceCache) isPublic(ctx context.Context, channel string) (bool, error) {
	c.mu.Lock()
	e, ok := c.public[channel]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.public, nil
	}
	v, err := c.lookups.do(ctx, "info:"+channel, func(ctx context.Context) (any, error) {
		info, err := c.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: channel})
		if err != nil {
			return nil, fmt.Errorf("look up channel %s: %w", channel, err)
		}
		public := !info.IsPrivate && !info.IsIM && !info.IsMpIM
		c.mu.Lock()
		put(c.public, channel, publicEntry{public: public, at: time.Now()}, c.maxChannels, c.ttl, func(e publicEntry) time.Time { return e.at })
		c.mu.Unlock()
		return public, nil
	})
	if err != nil {
		return false, err
	}
	return v.(bool), nil
}

// factsOf is what the bot needs of u.
func factsOf(u *slack.User) userFacts {
	return userFacts{guest: u.IsRestricted || u.IsUltraRestricted, deactivated: u.Deleted, bot: u.IsBot, team: u.TeamID, enterprise: u.Enterprise.EnterpriseID}
}

// user returns what users.info says of user, kept for ttl.
func (c *audienceCache) user(ctx context.Context, user string) (userFacts, error) {
	c.mu.Lock()
	e, ok := c.users[user]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.userFacts, nil
	}
	v, err := c.lookups.do(ctx, "user:"+user, func(ctx context.Context) (any, error) {
		u, err := c.api.GetUserInfoContext(ctx, user)
		if err != nil {
			return nil, fmt.Errorf("look up user %s: %w", user, err)
		}
		f := factsOf(u)
		c.mu.Lock()
		put(c.users, user, userEntry{userFacts: f, at: time.Now()}, c.maxDMs, c.ttl, func(e userEntry) time.Time { return e.at })
		c.mu.Unlock()
		return f, nil
	})
	if err != nil {
		return userFacts{}, err
	}
	return v.(userFacts), nil
}

// seesPublic reports whether user can see public channel: anyone of the
// workspace (ours reports whether a user is) but a guest (see user), who,
// as someone of another organisation, sees only the channels they are in.
// Someone who cannot be looked up sees it if they are in it; else the
// answer is no, with the error.
func (c *audienceCache) seesPublic(ctx context.Context, channel, user string, ours func(userFacts) bool) (bool, error) {
	f, err := c.user(ctx, user)
	if err != nil {
		if members, merr := c.channelMembers(ctx, channel); merr == nil && members[user] {
			return true, nil
		}
		return false, err
	}
	if !f.guest && ours(f) {
		return true, nil
	}
	members, err := c.channelMembers(ctx, channel)
	return members[user], err
}

// channelMembers returns the members of a channel, every page of them.
func (c *audienceCache) channelMembers(ctx context.Context, channel string) (map[string]bool, error) {
	c.mu.Lock()
	e, ok := c.members[channel]
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return e.members, nil
	}
	epoch := c.lookups.epoch()
	v, err := c.lookups.do(ctx, epochKey("members:"+channel, epoch), c.lookUpMembers(channel, epoch))
	if err != nil {
		return nil, err
	}
	return v.(map[string]bool), nil
}

// forget drops what is kept of channel's members, as someone left it (the
// member_left_channel event), or of every channel's with "" (someone may
// have left any: see App.followNotices): the next check asks Slack,
// instead of letting them decide for up to the ttl more. Look-ups under
// way, which may have read them as members, are not kept.
func (c *audienceCache) forget(channel string) {
	c.mu.Lock()
	c.lookups.drop()
	if channel == "" {
		clear(c.members)
	} else {
		delete(c.members, channel)
	}
	c.mu.Unlock()
}

// lookUpMembers is the look-up of a channel's members, every page of them,
// begun in epoch (see lookups.drop), which it keeps unless the epoch has
// passed since.
func (c *audienceCache) lookUpMembers(channel string, epoch uint64) func(ctx context.Context) (any, error) {
	return func(ctx context.Context) (any, error) {
		members := map[string]bool{}
		cursor := ""
		for {
			ids, next, err := c.api.GetUsersInConversationContext(ctx, &slack.GetUsersInConversationParameters{ChannelID: channel, Cursor: cursor, Limit: 1000})
			if err != nil {
				return nil, fmt.Errorf("list members of %s: %w", channel, err)
			}
			for _, id := range ids {
				members[id] = true
			}
			if next == "" {
				break
			}
			cursor = next
		}
		c.mu.Lock()
		if c.lookups.epoch() == epoch {
			put(c.members, channel, memberEntry{members: members, at: time.Now()}, c.maxChannels, c.ttl, func(e memberEntry) time.Time { return e.at })
		}
		c.mu.Unlock()
		return members, nil
	}
}

// warm starts looking up who can see channel, without waiting, unless what
// is kept stays fresh for at least half the ttl more: a card that anyone
// in the conversation may decide is posted there, and its first click
// should not wait on Slack. A failed look-up is not kept; the click asks
// again.
func (c *audienceCache) warm(ctx context.Context, channel string) {
	if channel == "" {
		return
	}
	c.mu.Lock()
	var fresh bool
	if approvals.IsDM(channel) {
		_, fresh = c.dms[channel]
	} else {
		e, ok := c.members[channel]
		fresh = ok && time.Since(e.at) < c.ttl/2
	}
	c.mu.Unlock()
	switch {
	case fresh:
	case approvals.IsDM(channel):
		c.lookups.start(ctx, "dm:"+channel, c.lookUpDM(channel))
	default:
		epoch := c.lookups.epoch()
		c.lookups.start(ctx, epochKey("members:"+channel, epoch), c.lookUpMembers(channel, epoch))
	}
}
