package slackapp

import (
	"regexp"
	"strings"
)

// tokenRE is the shape of every button value this bot makes (see token):
// a call id (a 16-hex-digit run id, a dot, the call's index) and the
// SHA-256 fingerprint of its arguments.
var tokenRE = regexp.MustCompile(`^[0-9a-f]{16}\.[0-9]{1,4}~[0-9a-f]{64}$`)

// validToken reports whether a button value or modal metadata has the shape
// of one this bot made. A value that does not was forged or garbled; one
// that does may still name a call that is gone.
func validToken(v string) bool {
	return tokenRE.MatchString(strings.TrimSpace(v))
}

// InvalidRequestText answers a click or submission whose value this bot
// did not make: forged, or garbled on the way.
func InvalidRequestText() string {
	return "That is not a valid request: this button's value was not made by this bot, so nothing was decided. Use the buttons on the approval card."
}
