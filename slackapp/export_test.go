package slackapp

import "time"

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
