package botsetup

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// TestBuild runs a built bot on the fakes: the config file's tools are
// registered, its policy judges the model's call (a deny, with its reason
// sent back to the model), the verdict and the model's requests are
// metered, and the answer reaches the thread.
func TestBuild(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := writeFile(t, dir, "config.yaml", "builtin_tools:\n  workspace: {root: "+strconv.Quote(ws)+"}\n"+
		"policy:\n  rules:\n    - tool: workspace_delete\n      verdict: deny\n      reason: nothing is deleted here\n")
	file, err := LoadFile("CONFIG_FILE", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := OpenStore(t.Context(), StoreConfig{Dir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	slack := fakeslack.New(t)
	slack.AddUser(fakeslack.User{ID: "UREQUEST1", Name: "requester"})
	slack.AddChannel(fakeslack.Channel{ID: "COPS00001", Name: "ops", Members: []string{slack.BotUserID(), "UREQUEST1"}})
	model := fakeopenai.New(t)
	model.Reply(
		fakeopenai.ToolCalls(
			fakeopenai.ToolCall{ID: "call1", Name: "workspace_delete", Arguments: `{"path":"a.txt"}`},
			// Asks (the policy's default), with arguments too long to show
			// an approver in full: the Slack app's bound reaches the agent.
			fakeopenai.ToolCall{ID: "call2", Name: "workspace_write", Arguments: `{"path":"b.txt","content":"` + strings.Repeat("&", 120<<10) + `"}`},
		),
		fakeopenai.Text("done"),
	)
	reg := prometheus.NewRegistry()
	bot, err := Build(t.Context(), Parts{
		Store: st,
		File:  file,
		Model: agent.NewOpenAIModel(agent.ModelConfig{BaseURL: model.URL(), APIKey: "k", Model: "m", Timeout: 10 * time.Second}),
		Slack: slackapp.Config{
			BotToken:      slack.BotToken(),
			AppToken:      slack.AppToken(),
			APIURL:        slack.APIURL(),
			ShutdownGrace: 5 * time.Second,
		},
		Agent:   agent.Config{ApprovalTTL: time.Hour},
		Metrics: slackapp.NewMetrics(reg),
		Logger:  log,
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer bot.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- bot.App.Run(ctx, bot.Agent) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	if err := slack.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	ts := slack.Mention("COPS00001", "UREQUEST1", "delete a.txt")
	if _, err := slack.WaitMessage("COPS00001", func(m fakeslack.Message) bool {
		return m.ThreadTS == ts && m.BotID != "" && !m.Streaming && strings.Contains(m.Text, "done")
	}, 10*time.Second); err != nil {
		t.Fatalf("no answer in the thread: %v", err)
	}

	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err != nil {
		t.Errorf("the denied delete ran: %v", err)
	}
	reqs := model.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	var toolResult, tooLong string
	for _, m := range reqs[1].Messages {
		switch m.ToolCallID {
		case "call1":
			toolResult = m.Content
		case "call2":
			tooLong = m.Content
		}
	}
	if !strings.Contains(tooLong, "too long to be shown in full") {
		t.Errorf("the model was not told its arguments are too long to show an approver: %q", tooLong)
	}
	if !strings.Contains(toolResult, "nothing is deleted here") {
		t.Errorf("the model was not told the deny reason: %q", toolResult)
	}
	if got := counterValue(t, reg, "toolgate_tool_calls_total", "verdict", "deny"); got != 1 {
		t.Errorf(`toolgate_tool_calls_total{verdict="deny"} = %v, want 1`, got)
	}
	if got := counterValue(t, reg, "toolgate_envelopes_total", "type", "events_api"); got < 1 {
		t.Errorf(`toolgate_envelopes_total{type="events_api"} = %v, want the Slack app metered`, got)
	}
}

// A Slack configuration the app refuses fails Build with nothing left
// running.
func TestBuildBadSlackConfig(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := OpenStore(t.Context(), StoreConfig{Dir: dir}, log)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	file, err := LoadFile("CONFIG_FILE", "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(t.Context(), Parts{Store: st, File: file, Logger: log})
	if err == nil || !strings.HasPrefix(err.Error(), "set up slack app: ") {
		t.Errorf("got %v, want a set up slack app error", err)
	}
}

// A tool of the file that cannot be set up fails Build with a
// *ConfigError that names the file as its caller does: CONFIG_FILE for
// the bot, the -config flag for the playground.
func TestBuildNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "config.yaml", "builtin_tools:\n  run_command: {allow: [ls], dir: "+strconv.Quote(filepath.Join(dir, "nowhere"))+"}\n")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		setting, rename, want string
	}{
		{"CONFIG_FILE", "", "CONFIG_FILE: load tools: run_command"},
		{"-config", "-config " + path, "-config " + path + ": load tools: run_command"},
		{"", "", "config file: load tools: run_command"},
	} {
		file, err := LoadFile(tc.setting, path)
		if err != nil {
			t.Fatal(err)
		}
		if tc.rename != "" {
			file.Setting = tc.rename
		}
		_, err = Build(t.Context(), Parts{File: file, Logger: log})
		var ce *ConfigError
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("setting %q: got %T %v, want a *ConfigError starting %q", cmp.Or(tc.rename, tc.setting), err, err, tc.want)
		}
	}
}
