package botsetup

import (
	"errors"
	"net/url"
	"strings"
)

// redactedText stands in for a URL that does not parse, in SafeURL.
const redactedText = "[redacted]"

// ConfigError is a problem with the configuration: a missing or malformed
// setting, a store that cannot be reached at its URL, or a config file that
// cannot be read or does not parse. Its message is on one line (see
// OneLine) and names the setting or file at fault.
type ConfigError struct {
	Err error
}

func (e *ConfigError) Error() string { return OneLine(e.Err.Error()) }

func (e *ConfigError) Unwrap() error { return e.Err }

// OneLine folds a multi-line message onto one line. Lines that only point at
// a column (CEL's " | expr" and " | ...^" excerpts) are left out: the message
// already gives the line and column.
func OneLine(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "|") {
			continue
		}
		kept = append(kept, l)
	}
	return strings.Join(kept, "; ")
}

// SafeURL returns raw without its password (in the user information or a
// password query parameter), for logs and errors. A URL that does not parse
// is shown only by its scheme.
func SafeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || strings.Contains(raw, "#") {
		if scheme, _, ok := strings.Cut(raw, "://"); ok {
			return scheme + "://" + redactedText
		}
		return redactedText
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		// A query that does not parse could hide a password anywhere.
		u.RawQuery = redactedText
		return u.Redacted()
	}
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// checkURLForm refuses a URL written so that parsing it would quote parts
// of it in its errors (a password with a character that must be
// percent-encoded): the error says what is wrong without quoting any of
// it.
func checkURLForm(raw string) error {
	const encode = "percent-encode the characters ; # / ? % @ : in the user name and password (%3B %23 %2F %3F %25 %40 %3A)"
	if strings.Contains(raw, "#") {
		return errors.New("the URL has a '#': " + encode)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("the URL does not parse: " + encode)
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		return errors.New("the URL's query does not parse: percent-encode ; and % in its values")
	}
	return nil
}
