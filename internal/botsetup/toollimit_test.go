package botsetup

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/agent"
)

// lateServer is an MCP server over streamable HTTP that answers 503, as a
// server that is down, until up is set.
type lateServer struct {
	srv *mcp.Server
	url string
	up  atomic.Bool
}

func newLateServer(t *testing.T, tools int) *lateServer {
	t.Helper()
	s := &lateServer{srv: mcp.NewServer(&mcp.Implementation{Name: "late", Version: "v1"}, nil)}
	for i := range tools {
		s.add(i)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.up.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	s.url = ts.URL
	return s
}

// add adds the tool tool_<i>; a connected client is told its tools changed.
func (s *lateServer) add(i int) {
	s.srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("tool_%d", i), InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		})
}

// logLines is a JSON log, safe for a writer and a reader at once.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// with returns the lines whose msg starts with prefix.
func (l *logLines) with(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	text := l.buf.String()
	l.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// waitLines waits until n lines have a msg starting with prefix.
func (l *logLines) waitLines(t *testing.T, prefix string, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := l.with(t, prefix)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d log lines %q, want %d; the log:\n%s", len(got), prefix, n, l.buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const (
	overLimit   = "the model is offered more tools than MODEL_MAX_TOOLS allows"
	withinLimit = "the model is offered no more tools than MODEL_MAX_TOOLS allows again"
)

// An MCP server that is down at start counts as its stand-in; Build
// refuses more tools than MaxTools, saying so, and allows them without a
// limit.
func TestBuildRefusesTooManyTools(t *testing.T) {
	late := newLateServer(t, 5)
	file, err := LoadFile("CONFIG_FILE", writeFile(t, t.TempDir(), "config.yaml",
		"mcp_servers:\n  - name: late\n    url: "+late.url+"\nbuiltin_tools:\n  ask_human: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	_, err = Build(t.Context(), Parts{File: file, Logger: log, MaxTools: 1, MaxToolsSetting: "MODEL_MAX_TOOLS"})
	var ce *ConfigError
	want := "MODEL_MAX_TOOLS: the model would be offered 2 tools, over the limit of 1 (a model server refuses every request offering more tools than it allows; OpenAI allows 128): " +
		"1 built-in, 1 from MCP server late (not connected yet: a stand-in, its tools count once it has listed them); " +
		"remove MCP servers from mcp_servers in CONFIG_FILE (or built-in tools from builtin_tools), have a server offer fewer tools"
	if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "raise MODEL_MAX_TOOLS (0: no limit)") {
		t.Errorf("Build with 2 tools and MaxTools 1: %T %v, want a *ConfigError starting %q", err, err, want)
	}
	// Within the limit, and without one, Build gets past the tools (to
	// the Slack app, which this test does not set up).
	for _, max := range []int{2, 0} {
		if _, err := Build(t.Context(), Parts{File: file, Logger: log, MaxTools: max}); err == nil || !strings.HasPrefix(err.Error(), "set up slack app: ") {
			t.Errorf("Build with 2 tools and MaxTools %d: %v, want it past the tools", max, err)
		}
	}
}

// A server that connects after the start, or whose tool list grows, can
// put the model over the limit: each such change is logged as an error,
// once, and nothing is dropped; a change back within the limit is logged
// too.
func TestToolLimitAtRuntime(t *testing.T) {
	late := newLateServer(t, 5)
	file, err := LoadFile("CONFIG_FILE", writeFile(t, t.TempDir(), "config.yaml",
		"mcp_servers:\n  - name: late\n    url: "+late.url+"\nbuiltin_tools:\n  ask_human: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	bot, err := buildLogging(t, logs, Parts{File: file, Agent: agent.Config{ApprovalTTL: time.Hour}, MaxTools: 6, MaxToolsSetting: "MODEL_MAX_TOOLS"})
	if err != nil {
		t.Fatalf("Build with ask_human and a server down (2 tools), MaxTools 6: %v", err)
	}
	defer bot.Close()
	if got := logs.with(t, overLimit); len(got) != 0 {
		t.Fatalf("logged %v within the limit", got)
	}

	// The server comes up with 5 tools: 6, the limit.
	late.up.Store(true)
	waitFor(t, "the server's tools are listed", func() bool { return bot.Tools.Status()[0].Tools == 5 })
	late.add(5) // 7
	lines := logs.waitLines(t, overLimit, 1)
	late.add(6) // 8
	lines = logs.waitLines(t, overLimit, 2)
	for i, want := range []string{"1 built-in, 6 from MCP server late", "1 built-in, 7 from MCP server late"} {
		l := lines[i]
		if l["level"] != "ERROR" || l["tools"] != float64(7+i) || l["max"] != float64(6) || l["shares"] != want ||
			!strings.Contains(fmt.Sprint(l["fix"]), "raise MODEL_MAX_TOOLS") {
			t.Errorf("log line %d: %v, want an error with tools %d, max 6, shares %q and what to do", i, l, 7+i, want)
		}
	}
	// Nothing was dropped: the model is offered all 8.
	waitFor(t, "all 7 of the server's tools are registered", func() bool { return bot.Tools.Status()[0].Tools == 7 })

	late.srv.RemoveTools("tool_5", "tool_6") // 6 again
	back := logs.waitLines(t, withinLimit, 1)
	if back[0]["level"] != "INFO" || back[0]["tools"] != float64(6) {
		t.Errorf("back within the limit: %v", back[0])
	}
	late.add(5) // 7: over again, logged again
	logs.waitLines(t, overLimit, 3)
	time.Sleep(200 * time.Millisecond)
	if got := logs.with(t, overLimit); len(got) != 3 {
		t.Errorf("%d errors logged for 3 changes over the limit: %v", len(got), got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
