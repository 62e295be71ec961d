package slackapp

import (
	"slices"
	"time"
)

// SetLaterWaits sets laterWaits for a test and returns what restores it.
func SetLaterWaits(w ...time.Duration) (restore func()) {
	old := laterWaits
	laterWaits = w
	return func() { laterWaits = old }
}

// Serving reports whether a has a queue for the conversation key: a turn,
// resume or decision of it runs or waits in this process.
func (a *App) Serving(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.queues[key]
	return ok
}

// KeepsMember reports whether a keeps user as a member of channel.
func (a *App) KeepsMember(channel, user string) bool {
	a.audience.mu.Lock()
	defer a.audience.mu.Unlock()
	return a.audience.members[channel].members[user]
}

// KeepsGroupMember reports whether a keeps user as a member of the user
// group id.
func (a *App) KeepsGroupMember(id, user string) bool {
	a.groups.mu.Lock()
	defer a.groups.mu.Unlock()
	return slices.Contains(a.groups.entries[id].members, user)
}

// SetCardRetryWait sets serverRetryAfter for a test and returns what
// restores it.
func SetCardRetryWait(d time.Duration) (restore func()) {
	old := serverRetryAfter
	serverRetryAfter = d
	return func() { serverRetryAfter = old }
}

// SetCardUpdateTimeout sets cardUpdateTimeout for a test and returns what
// restores it.
func SetCardUpdateTimeout(d time.Duration) (restore func()) {
	old := cardUpdateTimeout
	cardUpdateTimeout = d
	return func() { cardUpdateTimeout = old }
}
