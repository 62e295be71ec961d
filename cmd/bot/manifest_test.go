package main

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/slack-go/slack"
	"go.yaml.in/yaml/v3"
)

// TestManifest checks that manifest.yaml is a Slack app manifest with every
// key the bot relies on: unknown keys (a typo) fail the decoding.
func TestManifest(t *testing.T) {
	data, err := os.ReadFile("../../manifest.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var m slack.Manifest
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("manifest.yaml: %v", err)
	}

	if m.Display.Name == "" || m.Features.BotUser.DisplayName == "" {
		t.Error("the app or its bot user has no name")
	}
	if !m.Features.BotUser.AlwaysOnline {
		t.Error("the bot user is not always online")
	}
	if !m.Settings.SocketModeEnabled {
		t.Error("Socket Mode is not enabled")
	}
	if !m.Settings.Interactivity.IsEnabled {
		t.Error("interactivity is not enabled")
	}
	if m.Settings.Interactivity.RequestUrl != "" || m.Settings.EventSubscriptions.RequestUrl != "" {
		t.Error("a request URL is set, but Socket Mode apps need none")
	}
	home := m.Features.AppHome
	if !home.HomeTabEnabled || !home.MessagesTabEnabled || home.MessagesTabReadOnlyEnabled {
		t.Errorf("app_home = %+v, want the home and messages tabs on and the messages tab writable", home)
	}
	if slices.Contains(m.OAuthConfig.Scopes.Bot, "assistant:write") && m.Features.AssistantView == nil {
		t.Error("assistant:write needs features.assistant_view")
	}

	for _, scope := range []string{
		"app_mentions:read", "channels:history", "groups:history", "im:history", "im:write",
		"chat:write", "commands", "users:read", "usergroups:read", "channels:read",
		"groups:read", "im:read", "assistant:write", "mpim:history", "mpim:read",
	} {
		if !slices.Contains(m.OAuthConfig.Scopes.Bot, scope) {
			t.Errorf("bot scope %s is missing", scope)
		}
	}
	for _, event := range []string{"app_mention", "message.im", "message.channels", "message.groups", "message.mpim", "app_home_opened", "member_left_channel", "subteam_members_changed", "subteam_updated"} {
		if !slices.Contains(m.Settings.EventSubscriptions.BotEvents, event) {
			t.Errorf("bot event %s is missing", event)
		}
	}

	i := slices.IndexFunc(m.Features.SlashCommands, func(c slack.ManifestSlashCommand) bool { return c.Command == "/approvals" })
	if i < 0 {
		t.Fatal("no /approvals slash command")
	}
	cmd := m.Features.SlashCommands[i]
	if cmd.Description == "" {
		t.Error("/approvals has no description")
	}
	if want := "help | pending | policy list|add|remove|test | rules list|revoke | audit"; cmd.UsageHint != want {
		t.Errorf("/approvals usage hint %q, want %q", cmd.UsageHint, want)
	}
	if cmd.ShouldEscape {
		t.Error("/approvals escapes its text; the handler expects raw ids")
	}
}
