package slackapp

import "time"

// SetLaterWaits sets laterWaits for a test and returns what restores it.
func SetLaterWaits(w ...time.Duration) (restore func()) {
	old := laterWaits
	laterWaits = w
	return func() { laterWaits = old }
}
