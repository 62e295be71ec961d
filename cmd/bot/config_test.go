package main

import (
	"slices"
	"testing"
	"time"
)

// Slack's tokens end in random letters and digits, which now and then
// spell a word a stand-in has ("your" in about one bot token in 44,000):
// such a token is taken, and kept out of the output, while the stand-ins
// of .env.example and the docs are still refused.
func TestPlaceholderToken(t *testing.T) {
	for _, tc := range []struct {
		tok, prefix string
		want        bool
	}{
		{"xoxb-", "xoxb-", true},
		{"xapp-", "xapp-", true},
		{"xoxb-…", "xoxb-", true},
		{"xoxb-...", "xoxb-", true},
		{"xapp-1-…", "xapp-", true},
		{"xoxb-xxxx", "xoxb-", true},
		{"xoxb-<your token>", "xoxb-", true},
		{"xoxb-your-bot-token", "xoxb-", true},
		{"xoxb-YOUR_BOT_TOKEN", "xoxb-", true},
		{"xoxb-changeme", "xoxb-", true},
		{"xapp-REPLACE-ME", "xapp-", true},
		{"xoxb-123456789012-1234567890123-AbYoUrEfGhIjKlMnOpQrStUv", "xoxb-", false},
		{"xoxb-123456789012-1234567890123-ChangeMeReplaceYourToken", "xoxb-", false},
		{"xapp-1-A0123YOUR45-1234567890123-0a1b2c3d4e5f", "xapp-", false},
		{testBotToken, "xoxb-", false},
		{testAppToken, "xapp-", false},
	} {
		if got := placeholderToken(tc.tok, tc.prefix); got != tc.want {
			t.Errorf("placeholderToken(%q): got %v, want %v", tc.tok, got, tc.want)
		}
	}
}

// TestTokenSpellingAWordIsTaken loads a configuration whose bot token's
// random part spells "your", as a real one may.
func TestTokenSpellingAWordIsTaken(t *testing.T) {
	const tok = "xoxb-123456789012-1234567890123-AbYoUrEfGhIjKlMnOpQrStUv"
	env := validEnv(t)
	env["SLACK_BOT_TOKEN"] = tok
	setEnv(t, env)
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.SlackBotToken != tok {
		t.Errorf("SLACK_BOT_TOKEN: got %q", c.SlackBotToken)
	}
	if secrets := envSecrets(func(k string) string { return env[k] }); !slices.Contains(secrets, tok) {
		t.Error("the token is not among the secrets kept out of the output")
	}
}

// The floor of SWEEP_INTERVAL and TAKEOVER_INTERVAL is no more than the
// crash tests use (TAKEOVER_INTERVAL=200ms): a value at the floor is
// taken.
func TestIntervalsAtTheFloor(t *testing.T) {
	env := validEnv(t)
	env["SWEEP_INTERVAL"] = "100ms"
	env["TAKEOVER_INTERVAL"] = "100ms"
	setEnv(t, env)
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig with both intervals at 100ms: %v", err)
	}
	if c.SweepInterval != 100*time.Millisecond || c.TakeoverInterval != 100*time.Millisecond {
		t.Errorf("SweepInterval %v, TakeoverInterval %v, want 100ms each", c.SweepInterval, c.TakeoverInterval)
	}
}
