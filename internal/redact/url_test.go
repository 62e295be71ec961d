package redact

import "testing"

// SafeURL shows a URL without its secrets: the password, a user name
// given with no password (a gateway's token), the query values that may
// hold one; a URL that does not parse by its scheme alone.
func TestSafeURL(t *testing.T) {
	tests := []struct{ url, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://:p%40ss-word@redis:6379/0", "redis://:xxxxx@redis:6379/0"},
		{"redis+sentinel://s1:26379,s2:26379/0?master_name=m&password=sentinel-pw", "redis+sentinel://s1:26379,s2:26379/0?master_name=m&password=xxxxx"},
		{"redis://user:pw-1234@host:bad port/", "redis://[redacted]"},
		{"redis+sentinel://s1:26379/0?master_name=m&password=pw;1234", "redis+sentinel://s1:26379/0?[redacted]"},
		{"redis://:pw#1234@host:6379/0", "redis://[redacted]"},
		{"redis+sentinel://127.0.0.1:1?master_name=m&sentinel_password=topsecret1&dial_timeout=3s", "redis+sentinel://127.0.0.1:1?dial_timeout=3s&master_name=m&sentinel_password=xxxxx"},
		{"redis://h:6379/0?pasword=typo-secret", "redis://h:6379/0?pasword=xxxxx"},
		{"https://GatewayTok77@gw.example/api/", "https://xxxxx@gw.example/api/"},
		{"https://gw:GatewayPw99@gw.example/api/?key=k1", "https://gw:xxxxx@gw.example/api/?key=xxxxx"},
	}
	for _, tt := range tests {
		if got := SafeURL(tt.url); got != tt.want {
			t.Errorf("SafeURL(%q) = %q, want %q", tt.url, got, tt.want)
		}
	}
}
