// Package redact hides secrets (tokens, passwords, header values) in text
// that is logged, shown or sent on: the last line of defence, since an
// error from a library, or what a tool prints, may quote a secret.
package redact

import (
	"slices"
	"strings"
)

// Text stands in for a secret.
const Text = "[redacted]"

// Redactor replaces secrets by Text. Its zero value replaces nothing.
type Redactor struct {
	r *strings.Replacer
}

// New returns a Redactor of secrets. Values shorter than 4 bytes are left
// out: they would blank out ordinary words. For a URL with a password pass
// the password too: libraries quote URLs in other forms than the one given.
func New(secrets ...string) Redactor {
	// Longest first: a replacer takes the first listed of secrets that
	// match at a place, so a secret that starts with another would keep
	// its tail.
	secrets = slices.Clone(secrets)
	slices.SortStableFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	var pairs []string
	for _, s := range secrets {
		if len(s) >= 4 {
			pairs = append(pairs, s, Text)
		}
	}
	if len(pairs) == 0 {
		return Redactor{}
	}
	return Redactor{r: strings.NewReplacer(pairs...)}
}

// String returns s with every secret replaced.
func (r Redactor) String(s string) string {
	if r.r == nil {
		return s
	}
	return r.r.Replace(s)
}

// Error wraps err so that its message has no secret; errors.Is and errors.As
// still see err. It returns err itself when its message has none.
func (r Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := r.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// redactedError is an error whose message had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.err }
