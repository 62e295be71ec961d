package main

import (
	"net/url"
	"strings"

	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/store/redisstore"
)

// redactor keeps secrets out of logs and error messages (see
// redact.Redactor), and out of every line of the log (its ReplaceAttr).
type redactor struct{ redact.Redactor }

// newRedactor returns a redactor that hides each secret.
func newRedactor(secrets ...string) redactor { return redactor{redact.New(secrets...)} }

// envSecrets returns the secrets of the environment: the Slack tokens
// (a placeholder is no secret: hidden, it would garble the error that says
// to replace it), the model's API key, those of REDIS_URL (see urlSecrets)
// and of the OpenTelemetry exporter's settings (see otelSecrets).
func envSecrets(getenv func(string) string) []string {
	var secrets []string
	for _, t := range []struct{ env, prefix string }{{"SLACK_APP_TOKEN", "xapp-"}, {"SLACK_BOT_TOKEN", "xoxb-"}} {
		if tok := getenv(t.env); !placeholderToken(tok, t.prefix) {
			secrets = append(secrets, tok)
		}
	}
	secrets = append(secrets, getenv("OPENAI_API_KEY"))
	for _, k := range []string{"REDIS_URL", "SLACK_API_URL", "OPENAI_BASE_URL"} {
		secrets = append(secrets, urlSecrets(getenv(k))...)
	}
	return append(secrets, otelSecrets(getenv)...)
}

// otelSecrets returns the secrets of the OpenTelemetry exporter's
// settings: each header value of OTEL_EXPORTER_OTLP_HEADERS and
// OTEL_EXPORTER_OTLP_TRACES_HEADERS as written, decoded, and decoded
// without its scheme ("Bearer <key>"), which a collector may quote in the
// error the exporter logs; and those of the endpoints (see urlSecrets).
func otelSecrets(getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		out = append(out, urlSecrets(getenv(k))...)
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		for _, pair := range strings.Split(getenv(k), ",") {
			_, v, ok := strings.Cut(pair, "=")
			if !ok {
				continue
			}
			out = append(out, v, strings.TrimSpace(v))
			if d, err := url.PathUnescape(v); err == nil {
				d = strings.TrimSpace(d)
				out = append(out, d)
				if _, cred, ok := strings.Cut(d, " "); ok {
					out = append(out, strings.TrimSpace(cred))
				}
			}
		}
	}
	return out
}

// urlSecrets returns the secrets of a URL: the password of its user
// information (or, for an http(s) URL, its user name when it has no
// password: a gateway's token) and the values of its query options other than those known
// to hold none (a "password" as in redis+sentinel URLs, a misspelt one),
// and the whole URL when it has any or does not parse (so a parser's error
// quoting it gives nothing away).
func urlSecrets(raw string) []string {
	u, err := url.Parse(redisstore.OneHostURL(raw))
	if err != nil {
		return []string{raw}
	}
	var out []string
	if u.User != nil {
		if p, ok := u.User.Password(); ok {
			out = append(out, p, url.QueryEscape(p), url.PathEscape(p))
		}
	}
	if name := u.User.Username(); (u.Scheme == "http" || u.Scheme == "https") && redact.TokenAsUser(u) {
		// An http(s) URL's user name with no password is a gateway's
		// token, as Basic auth takes it (a Redis URL's is a user name,
		// "default" as often as not, which no log may lose).
		out = append(out, name, url.QueryEscape(name), url.PathEscape(name))
	}
	for k, vs := range u.Query() {
		if redact.PublicURLOption(k) {
			continue
		}
		for _, p := range vs {
			out = append(out, p, url.QueryEscape(p))
		}
	}
	if len(out) > 0 {
		out = append([]string{raw}, out...)
	}
	return out
}
