package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// mcpServerOffering starts a streamable HTTP MCP server offering n tools
// and returns its URL.
func mcpServerOffering(t *testing.T, n int) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "many", Version: "v1"}, nil)
	for i := range n {
		srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("tool_%03d", i), Description: "A tool.", InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
			})
	}
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(ts.Close)
	return ts.URL
}

// TestTooManyToolsRefusedAtStart starts the bot with 129 tools: one
// built-in (ask_human) and two MCP servers of 100 and 28. With the
// default MODEL_MAX_TOOLS, OpenAI's 128, the bot refuses to start, as for
// a bad setting, saying how many tools there are, from where, and what to
// do; with MODEL_MAX_TOOLS=0 (no limit) or 129 it starts and offers the
// model all 129.
func TestTooManyToolsRefusedAtStart(t *testing.T) {
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte(fmt.Sprintf(`mcp_servers:
  - name: github
    url: %s
  - name: jira
    url: %s
builtin_tools:
  ask_human: {}
policy:
  default: ask
  rules:
    - tool: github__tool_000
      verdict: allow
`, mcpServerOffering(t, 100), mcpServerOffering(t, 28))), 0o600); err != nil {
		t.Fatal(err)
	}

	t.Run("refused", func(t *testing.T) {
		env := validEnv(t)
		env["CONFIG_FILE"] = configFile
		setEnv(t, env)
		_, err := runFails(t, "129 tools")
		if code := exitCode(err); code != 2 {
			t.Errorf("exit status %d (%v), want 2", code, err)
		}
		msg := err.Error()
		t.Logf("the error: %s", msg)
		for _, want := range []string{
			"MODEL_MAX_TOOLS",
			"129 tools",
			"limit of 128",
			"1 built-in",
			"100 from MCP server github",
			"28 from MCP server jira",
			"remove MCP servers from mcp_servers in CONFIG_FILE",
			"raise MODEL_MAX_TOOLS",
		} {
			if !strings.Contains(msg, want) {
				t.Errorf("the error does not say %q: %s", want, msg)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("the error is not on one line: %q", msg)
		}
	})

	for _, limit := range []string{"0", "129"} {
		t.Run("MODEL_MAX_TOOLS="+limit, func(t *testing.T) {
			slack := fakeslack.New(t)
			model := fakeopenai.New(t)
			model.SetMaxTools(0) // a model server that accepts more tools than OpenAI
			setEnv(t, map[string]string{
				"SLACK_APP_TOKEN": slack.AppToken(),
				"SLACK_BOT_TOKEN": slack.BotToken(),
				"SLACK_API_URL":   slack.APIURL(),
				"OPENAI_API_KEY":  testAPIKey,
				"OPENAI_BASE_URL": model.URL(),
				"OPENAI_MODEL":    fakeopenai.DefaultModel,
				"DATA_DIR":        t.TempDir(),
				"CONFIG_FILE":     configFile,
				"HTTP_ADDR":       "127.0.0.1:0",
				"MODEL_MAX_TOOLS": limit,
			})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			logs := &syncBuffer{}
			errc := make(chan error, 1)
			go func() { errc <- run(ctx, nil, io.Discard, logs) }()
			waitLog(t, logs, "starting", errc)
			if err := slack.WaitConnected(1, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := callOnce(t, slack, model, logs, "github__tool_000", "Called."); got != "done" {
				t.Errorf("github__tool_000's result = %q, want done", got)
			}
			if got := len(model.Requests()[0].Tools); got != 129 {
				t.Errorf("the model was offered %d tools, want all 129", got)
			}
			stopRun(t, cancel, errc, logs, slack)
		})
	}
}
