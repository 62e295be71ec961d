package slackapp

import (
	"context"
	"sync"
)

// maxOutsiders bounds the outsiders an App keeps.
const maxOutsiders = 10000

// outsiders are people of another organisation met in a channel shared
// with it (Slack Connect), known by the team their clicks and form
// submissions come from. They see what their channels show, but a call
// open to anyone in its conversation (its rule names no approvers) is not
// theirs to decide: that is for the people of the bot's workspace.
type outsiders struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// note records user as an outsider, making room by forgetting another one
// when maxOutsiders are kept (who is then known again at their next click).
func (o *outsiders) note(user string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ids == nil {
		o.ids = map[string]struct{}{}
	}
	if _, ok := o.ids[user]; !ok && len(o.ids) >= maxOutsiders {
		for id := range o.ids {
			delete(o.ids, id)
			break
		}
	}
	o.ids[user] = struct{}{}
}

// has reports whether user is a known outsider.
func (o *outsiders) has(user string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, ok := o.ids[user]
	return ok
}

// noteTeam records that user clicked or submitted a form from their team:
// someone whose team is not the bot's workspace is an outsider. On
// Enterprise Grid a payload does not tell another workspace of the same
// organisation from another organisation, so nobody is noted there.
func (a *App) noteTeam(user, team string) {
	if team == "" || a.teamID == "" || team == a.teamID || a.enterpriseID != "" {
		return
	}
	a.outsiders.note(user)
}

// deciderAudience is the agent's Audience: who can see a conversation,
// outsiders left out, so that they do not decide a call open to it.
type deciderAudience struct {
	*audienceCache
	outsiders *outsiders
}

// CanSee reports whether user can see channel and is not an outsider.
func (d deciderAudience) CanSee(ctx context.Context, channel, user string) (bool, error) {
	if d.outsiders.has(user) {
		return false, nil
	}
	return d.audienceCache.CanSee(ctx, channel, user)
}
