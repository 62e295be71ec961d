package redact

import (
	"net/url"
	"strings"
)

// SafeURL returns raw without its password (in the user information), or
// its user name when it has no password (a gateway's token given so), and
// the values of its query parameters other than the options known to hold
// no secret (see PublicURLOption; a "sentinel_password=" or any misspelt
// option may hold one), for logs and errors. A URL that does not parse is
// shown only by its scheme.
func SafeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || strings.Contains(raw, "#") {
		if scheme, _, ok := strings.Cut(raw, "://"); ok {
			return scheme + "://" + Text
		}
		return Text
	}
	if TokenAsUser(u) {
		u.User = url.User("xxxxx")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		// A query that does not parse could hide a password anywhere.
		u.RawQuery = Text
		return u.Redacted()
	}
	hidden := false
	for k := range q {
		if !PublicURLOption(k) {
			q.Set(k, "xxxxx")
			hidden = true
		}
	}
	if hidden {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// TokenAsUser reports whether u's user information is a user name alone,
// which a gateway's token often is (Basic auth with no password).
func TokenAsUser(u *url.URL) bool {
	if u.User == nil || u.User.Username() == "" {
		return false
	}
	_, hasPassword := u.User.Password()
	return !hasPassword
}

// publicURLOptions are the Redis URL options whose values are never
// secret: every option go-redis reads from a URL's query but "password".
var publicURLOptions = map[string]bool{
	"addr": true, "client_name": true, "conn_max_idle_time": true, "conn_max_lifetime": true,
	"conn_max_lifetime_jitter": true, "context_timeout_enabled": true, "db": true, "dial_timeout": true,
	"dialer_retries": true, "dialer_retry_timeout": true, "failing_timeout_seconds": true, "idle_timeout": true,
	"master_name": true, "max_active_conns": true, "max_concurrent_dials": true, "max_conn_age": true,
	"max_idle_conns": true, "max_redirects": true, "max_retries": true, "max_retry_backoff": true,
	"min_idle_conns": true, "min_retry_backoff": true, "pipeline_pool_size": true, "pipeline_read_buffer_size": true,
	"pipeline_write_buffer_size": true, "pool_fifo": true, "pool_size": true, "pool_timeout": true, "protocol": true,
	"read_only": true, "read_timeout": true, "replica_only": true, "route_by_latency": true,
	"route_by_latency_tolerance": true, "route_randomly": true, "skip_verify": true,
	"use_disconnected_replicas": true, "username": true, "write_timeout": true,
}

// PublicURLOption reports whether the values of a Redis URL's query
// parameter name are never secret (see SafeURL).
func PublicURLOption(name string) bool { return publicURLOptions[name] }
