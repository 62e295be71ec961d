// Package redact hides secrets (tokens, passwords, header values) in text
// that is logged, shown or sent on: the last line of defence, since an
// error from a library, or what a tool prints, may quote a secret.
package redact

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
)

// Text stands in for a secret.
const Text = "[redacted]"

// Redactor replaces secrets by Text. Its zero value replaces nothing.
type Redactor struct {
	r *strings.Replacer
	// secrets are those replaced, longest first.
	secrets []string
}

// New returns a Redactor of secrets. Values shorter than 4 bytes are left
// out: they would blank out ordinary words. For a URL with a password pass
// the password too: libraries quote URLs in other forms than the one given.
// A secret is also found as JSON writes it inside a string (a `\` or a `"`
// escaped, as in a model's tool arguments), and inside a string of JSON
// written in JSON again (those arguments in a span's captured messages).
func New(secrets ...string) Redactor {
	secrets = slices.DeleteFunc(slices.Clone(secrets), func(s string) bool { return len(s) < 4 })
	forms := secrets
	for range 2 {
		var next []string
		for _, s := range forms {
			for _, f := range jsonForms(s) {
				if !slices.Contains(secrets, f) {
					secrets = append(secrets, f)
					next = append(next, f)
				}
			}
		}
		forms = next
	}
	// Longest first: a replacer takes the first listed of secrets that
	// match at a place, so a secret that starts with another would keep
	// its tail.
	slices.SortStableFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	var pairs, kept []string
	for _, s := range secrets {
		if len(s) >= 4 {
			pairs = append(pairs, s, Text)
			kept = append(kept, s)
		}
	}
	if len(pairs) == 0 {
		return Redactor{}
	}
	return Redactor{r: strings.NewReplacer(pairs...), secrets: kept}
}

// jsonForms are the ways JSON writes s inside a string: as Go's encoder
// does by default (<, > and & as \u escapes) and without those escapes.
func jsonForms(s string) []string {
	var out []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			out = append(out, strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(b.String(), "\n"), `"`), `"`))
		}
	}
	return out
}

// minPart is the shortest start of a secret Output takes for the secret
// cut short: shorter ones are too likely to be ordinary text.
const minPart = 8

// Output is String for text that may have been cut anywhere, such as a
// tool's output kept up to a limit: the start of a secret, of minPart
// bytes or more, that runs to the end of a line or of s is taken for the
// secret cut short there (a cut output goes on with a line saying so),
// and replaced too.
func (r Redactor) Output(s string) string {
	s = r.String(s)
	for _, sec := range r.secrets {
		if len(sec) <= minPart || strings.ContainsRune(sec, '\n') {
			continue
		}
		head := sec[:minPart]
		var b strings.Builder
		last := 0
		for from := 0; ; {
			i := strings.Index(s[from:], head)
			if i < 0 {
				break
			}
			start := from + i
			// A cut secret ends its line within its own length: look no
			// further, so that a long line is not read again at each
			// start found in it.
			window := s[start:min(len(s), start+len(sec))]
			end := start + len(window)
			if j := strings.IndexByte(window, '\n'); j >= 0 {
				end = start + j
			} else if end < len(s) {
				from = start + 1
				continue
			}
			if !strings.HasPrefix(sec, s[start:end]) {
				from = start + 1
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(Text)
			last, from = end, end
		}
		if last > 0 {
			b.WriteString(s[last:])
			s = b.String()
		}
	}
	return s
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

// ReplaceAttr is a slog.HandlerOptions.ReplaceAttr that redacts strings and
// errors, the message included: a logger built with it keeps the secrets
// out of every line.
func (r Redactor) ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindString:
		if s := a.Value.String(); r.String(s) != s {
			a.Value = slog.StringValue(r.String(s))
		}
	case slog.KindAny:
		if err, ok := a.Value.Any().(error); ok {
			a.Value = slog.StringValue(r.String(err.Error()))
		}
	}
	return a
}

// redactedError is an error whose message had secrets removed.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.err }
