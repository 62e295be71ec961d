package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/store"
)

func TestRedactor(t *testing.T) {
	const token = "xoxb-1-secret"
	red := newRedactor(token, "", "abc") // empty and very short values are ignored
	base := errors.New("auth failed")
	err := red.Error(fmt.Errorf("call with %s: %w", token, base))
	if got, want := err.Error(), "call with [redacted]: auth failed"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, base) {
		t.Error("the redacted error no longer wraps its cause")
	}
	if plain := errors.New("abc is fine"); red.Error(plain) != plain {
		t.Error("an error without secrets was rewrapped")
	}
	if red.Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}

	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: red.ReplaceAttr}))
	log.Info("using "+token, "token", token, "err", fmt.Errorf("bad %s", token), "n", 3)
	if strings.Contains(buf.String(), token) {
		t.Errorf("log line has the token: %s", buf.String())
	}
	if !strings.Contains(buf.String(), `"err":"bad [redacted]"`) || !strings.Contains(buf.String(), `"n":3`) {
		t.Errorf("log line lost its attributes: %s", buf.String())
	}
}

func TestURLSecrets(t *testing.T) {
	tests := []struct {
		url      string
		secrets  []string
		noSecret bool
	}{
		{url: "redis://127.0.0.1:6379/0", noSecret: true},
		{url: "redis://:p%40ss-word@redis:6379/0", secrets: []string{"p@ss-word", "p%40ss-word"}},
		{url: "redis+sentinel://s1:26379,s2:26379/0?master_name=m&password=sentinel-pw", secrets: []string{"sentinel-pw"}},
		{url: "redis+sentinel://s1:26379/0?master_name=m&sentinel_password=topsecret1", secrets: []string{"topsecret1"}},
		{url: "redis://h:6379/0?dial_timeout=3s&pool_size=20&username=default&use_disconnected_replicas=true", noSecret: true},
		{url: "redis://user:pw-1234@host:bad port/", secrets: []string{"redis://user:pw-1234@host:bad port/"}},
		{url: "redis+cluster://:v6-pw@[fd00::1]:7000,[fd00::2]:7000", secrets: []string{"v6-pw"}},
		{url: "https://GatewayTok77@gw.example/api/", secrets: []string{"GatewayTok77"}},
		{url: "redis://default@h:6379/0", noSecret: true},
		{url: "redis+sentinel://[fd00::1]:26379,[fd00::2]:26379/0?master_name=m&sentinel_password=v6-sentinel-pw", secrets: []string{"v6-sentinel-pw"}},
	}
	for _, tt := range tests {
		got := urlSecrets(tt.url)
		if tt.noSecret && len(got) != 0 {
			t.Errorf("urlSecrets(%q) = %q, want none", tt.url, got)
		}
		red := newRedactor(got...)
		for _, s := range tt.secrets {
			if out := red.String("x " + s + " x"); strings.Contains(out, s) {
				t.Errorf("with the secrets of %q, %q is not redacted: %q", tt.url, s, out)
			}
		}
	}
}

func TestOTELSecrets(t *testing.T) {
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":       "https://user:pw-9876@collector:4318/?api_key=qwerty123",
		"OTEL_EXPORTER_OTLP_HEADERS":        "Authorization=Basic%20dXNlcjpwYXNz, x-team = team-key-1 ",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-honeycomb-team=abcd1234efgh",
	}
	red := newRedactor(otelSecrets(func(k string) string { return env[k] })...)
	for _, s := range []string{"pw-9876", "qwerty123", "Basic%20dXNlcjpwYXNz", "Basic dXNlcjpwYXNz", "dXNlcjpwYXNz", "team-key-1", "abcd1234efgh"} {
		if out := red.String("x " + s + " x"); strings.Contains(out, s) {
			t.Errorf("%q is not redacted: %q", s, out)
		}
	}
	if out := red.String("Authorization x-team collector:4318"); out != "Authorization x-team collector:4318" {
		t.Errorf("header names and the collector's address are redacted: %q", out)
	}
}

// A secret that starts with another is hidden whole, in whichever order
// they are given.
func TestRedactorSecretStartingWithAnother(t *testing.T) {
	const user, password = "svc-tool", "svc-tool-Zq9pR2mK7w"
	for _, red := range []redactor{newRedactor(user, password), newRedactor(password, user)} {
		if got := red.String("auth " + password + " as " + user); strings.Contains(got, "Zq9pR2mK7w") || strings.Contains(got, user) {
			t.Errorf("String = %q, want both hidden", got)
		}
	}
}

// The Redis client's lines go through the bot's log: in its format, with
// its redaction.
func TestRedisClientLinesAreLogged(t *testing.T) {
	const password = "s3cret-pass"
	red := newRedactor(password)
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{ReplaceAttr: red.ReplaceAttr}))
	redisLog{log}.Printf(t.Context(), "pool.go:770: redis: connection pool: failed to dial redis://u:%s@10.0.0.5:6379\n", password)
	line := buf.String()
	if !strings.Contains(line, `"level":"WARN"`) || !strings.Contains(line, "redis client: pool.go:770: redis: connection pool: failed to dial") || strings.Contains(line, password) {
		t.Errorf("log line = %s; want a JSON warning with the client's text, the password hidden", line)
	}
}

// Audit lines are written whatever LOG_LEVEL keeps out, named AUDIT.
func TestAuditLinesPassEveryLevel(t *testing.T) {
	for _, level := range []string{"warn", "error"} {
		var buf bytes.Buffer
		log := newLogger(&buf, config{LogLevel: level, LogFormat: "json"}, newRedactor())
		log.Info("not kept")
		store.AuditEntry{Actor: "U1", Action: "execute", Tool: "deploy"}.Log(t.Context(), log)
		line := buf.String()
		if strings.Contains(line, "not kept") || !strings.Contains(line, `"level":"AUDIT"`) || !strings.Contains(line, `"msg":"audit"`) {
			t.Errorf("LOG_LEVEL=%s: log = %s; want the audit line alone, at level AUDIT", level, line)
		}
	}
}
