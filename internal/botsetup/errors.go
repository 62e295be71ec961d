package botsetup

import (
	"errors"
	"net/url"
	"strings"

	"github.com/toolgate/toolgate/store/redisstore"
)

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

// checkURLForm refuses a Redis URL not of the form wanted (no scheme,
// white space around it) or written so that parsing it would quote parts
// of it in its errors (a password with a character that must be
// percent-encoded): the error says what is wrong without quoting any of
// it, and gives the advice on user names and passwords only to a URL that
// has them.
func checkURLForm(raw string) error {
	const (
		form   = "want redis://host:port/db (such as redis://10.0.0.5:6379/0), rediss:// for TLS, redis+cluster:// or redis+sentinel://"
		encode = "percent-encode the characters ; # / ? % @ : in the user name and password (%3B %23 %2F %3F %25 %40 %3A)"
	)
	advice := form
	if strings.Contains(raw, "@") {
		advice = encode
	}
	switch {
	case strings.TrimSpace(raw) != raw:
		return errors.New("the URL has white space before or after it: remove it; " + form)
	case !strings.Contains(raw, "://"):
		return errors.New("the URL has no scheme: " + form)
	case strings.Contains(raw, "#"):
		return errors.New("the URL has a '#': " + advice)
	}
	u, err := url.Parse(redisstore.OneHostURL(raw))
	if err != nil {
		return errors.New("the URL does not parse: " + advice)
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		return errors.New("the URL's query does not parse: percent-encode ; and % in its values")
	}
	return nil
}
