package slackapp

import (
	"cmp"
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
	mu    sync.Mutex
	teams map[string]string // user -> their team
}

// note records user as an outsider of team, making room by forgetting
// another one when maxOutsiders are kept (who is then known again at their
// next click or message).
func (o *outsiders) note(user, team string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.teams == nil {
		o.teams = map[string]string{}
	}
	if _, ok := o.teams[user]; !ok && len(o.teams) >= maxOutsiders {
		for id := range o.teams {
			delete(o.teams, id)
			break
		}
	}
	o.teams[user] = team
}

// forget drops user from the outsiders, if there.
func (o *outsiders) forget(user string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.teams, user)
}

// has reports whether user is a known outsider.
func (o *outsiders) has(user string) bool {
	_, ok := o.team(user)
	return ok
}

// team returns the team of user, if a known outsider.
func (o *outsiders) team(user string) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t, ok := o.teams[user]
	return t, ok
}

// noteTeam records that user clicked, submitted a form or wrote a message
// from their team: someone whose team is not the bot's workspace is an
// outsider, and someone whose team is, is not (any longer). On Enterprise
// Grid a payload does not tell another workspace of the same organisation
// from another organisation, so nobody is noted there.
func (a *App) noteTeam(user, team string) {
	switch {
	case user == "" || team == "" || a.teamID == "" || a.enterpriseID != "":
	case team == a.teamID:
		a.outsiders.forget(user)
	default:
		a.outsiders.note(user, team)
	}
}

// ofOurs reports whether f, what users.info says of someone, is of the
// bot's workspace, or on Enterprise Grid of its organisation: someone of
// another (Slack Connect) sees only the channels they are in. Someone
// whose team is not told is taken to be.
func (a *App) ofOurs(f userFacts) bool {
	switch {
	case a.teamID == "" || f.team == "":
		return true
	case a.enterpriseID != "":
		return f.enterprise == a.enterpriseID || f.enterprise == "" && f.team == a.teamID
	}
	return f.team == a.teamID
}

// noteAuthor records the workspace of the author of a person's message
// the bot takes in, as the event names it (its team, user_team in a
// shared channel): never the envelope's team_id, which Slack may set to
// the channel's workspace rather than the author's.
func (a *App) noteAuthor(ev *eventFields) {
	a.noteTeam(ev.User, cmp.Or(ev.UserTeam, ev.Team))
}

// teamOf returns the team of user: their own if they are a known outsider,
// else def.
func (a *App) teamOf(user, def string) string {
	if t, ok := a.outsiders.team(user); ok {
		return t
	}
	return def
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
