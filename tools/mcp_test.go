package tools

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// Environment variables that make the test binary an MCP stdio server.
const (
	envServe = "TOOLGATE_TEST_MCP_SERVE"
	// envDieMark adds tools that write this file and exit before answering.
	envDieMark = "TOOLGATE_TEST_MCP_DIE_MARK"
	envDown    = "TOOLGATE_TEST_MCP_DOWN" // a file; while it exists the server exits at once
)

// Arguments that make the test binary an MCP stdio server without any
// environment, or a process that only sleeps.
const (
	argServe = "-toolgate-test-mcp-serve"
	argSleep = "-toolgate-test-sleep"
)

func TestMain(m *testing.M) {
	switch {
	case slices.Contains(os.Args[1:], argSleep):
		time.Sleep(5 * time.Minute)
		os.Exit(0)
	case os.Getenv(envServe) == "1" || slices.Contains(os.Args[1:], argServe):
		os.Exit(serveStdio())
	case slices.Contains(os.Args[1:], argStall):
		os.Exit(serveStalling())
	}
	os.Exit(m.Run())
}

func serveStdio() int {
	if f := os.Getenv(envDown); f != "" {
		if _, err := os.Stat(f); err == nil {
			fmt.Fprintln(os.Stderr, "test server is down")
			return 1
		}
	}
	if err := newTestServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type textIn struct {
	Text string `json:"text" jsonschema:"the text to echo"`
}

type idIn struct {
	ID string `json:"id"`
}

type addIn struct {
	A int `json:"a"`
	B int `json:"b"`
}

type repeatIn struct {
	Text string `json:"text"`
	N    int    `json:"n"`
}

type sumOut struct {
	Sum int `json:"sum"`
}

// newTestServer is an MCP server with a read-only tool, a destructive one,
// a failing one, one with structured output, and tools to look at and
// change the server.
func newTestServer() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "test", Version: "v1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echo text.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in textIn) (*mcp.CallToolResult, any, error) {
			return text("echo: " + in.Text), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "delete_item", Description: "Delete an item.", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return text("deleted " + in.ID), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "preview_delete", Description: "Say what delete_item would do.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			if in.ID == "missing" {
				return nil, nil, errors.New("no item " + in.ID)
			}
			return text("would delete item " + in.ID + " (3 rows)"), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "fail", Description: "Always fails."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("boom")
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add", Description: "Add two numbers.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in addIn) (*mcp.CallToolResult, sumOut, error) {
			return nil, sumOut{Sum: in.A + in.B}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "pid", Description: "The server's process id.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "environ", Description: "The server's environment.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(strings.Join(os.Environ(), "\n")), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "spawn", Description: "Start a child process that sleeps; return its pid."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			cmd := exec.Command(os.Args[0], argSleep)
			if err := cmd.Start(); err != nil {
				return nil, nil, err
			}
			go cmd.Wait()
			return text(strconv.Itoa(cmd.Process.Pid)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "repeat", Description: "Repeat text n times.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in repeatIn) (*mcp.CallToolResult, any, error) {
			return text(strings.Repeat(in.Text, in.N)), nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "add_tool", Description: "Add the tool extra."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(s, &mcp.Tool{Name: "extra", Description: "Added later.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return text("extra"), nil, nil
				})
			return text("added"), nil, nil
		})
	if mark := os.Getenv(envDieMark); mark != "" {
		// Tools that do their effect, then exit before answering.
		die := func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			_ = os.WriteFile(mark, []byte("done"), 0o644)
			os.Exit(3)
			return nil, nil, nil
		}
		mcp.AddTool(s, &mcp.Tool{Name: "write_then_die", Description: "Write, then exit before answering."}, die)
		mcp.AddTool(s, &mcp.Tool{Name: "read_then_die", Description: "Read, then exit before answering.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, die)
	}
	return s
}

// testOptions make reconnection fast.
func testOptions() managerOptions {
	return managerOptions{
		minBackoff:     10 * time.Millisecond,
		maxBackoff:     100 * time.Millisecond,
		connectTimeout: 10 * time.Second,
		pingInterval:   100 * time.Millisecond,
		pingTimeout:    2 * time.Second,
		stable:         time.Minute,
		closeWait:      5 * time.Second,
		abandonAfter:   500 * time.Millisecond,
	}
}

// Close waits for the servers at most closeWait, then says so, so that a
// shutdown stays within its time.
func TestCloseIsBounded(t *testing.T) {
	m := &Manager{cancel: func() {}, opts: managerOptions{closeWait: 50 * time.Millisecond}}
	stuck := make(chan struct{})
	defer close(stuck)
	m.wg.Go(func() { <-stuck }) // a server that does not stop
	if err := m.Close(); err == nil || !strings.Contains(err.Error(), "still stopping after 50ms") {
		t.Errorf("Close with a server that does not stop = %v, want an error after 50ms", err)
	}
}

// testLogger collects the manager's logs and prints them if the test fails.
func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	var mu sync.Mutex
	var buf bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			t.Logf("logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loadYAML loads the MCP servers of a config file's text with opts, and
// closes them when the test ends.
func loadYAML(t *testing.T, yaml string, opts managerOptions) (*agent.Registry, *Manager) {
	t.Helper()
	cfg, err := ParseConfig([]byte(yaml))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	reg := agent.NewRegistry()
	m, err := load(t.Context(), cfg, reg, testLogger(t), opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return reg, m
}

// call validates args like the agent does and runs the tool.
func call(t *testing.T, reg *agent.Registry, name, args string) agent.Result {
	t.Helper()
	tool, ok := reg.Lookup(name)
	if !ok {
		t.Fatalf("tool %s is not registered", name)
	}
	if err := reg.Validate(name, json.RawMessage(args)); err != nil {
		t.Fatalf("Validate(%s, %s): %v", name, args, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := tool.Handler(ctx, json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s(%s): unexpected error %v", name, args, err)
	}
	return res
}

// fixture is an MCP server the manager reaches over one transport, which a
// test can stop and start again.
type fixture struct {
	yaml  string // the mcp_servers entry, named srv
	stop  func(t *testing.T)
	start func(t *testing.T)
}

func stdioFixture(t *testing.T) fixture {
	down := filepath.Join(t.TempDir(), "down")
	return fixture{
		yaml: fmt.Sprintf(`
mcp_servers:
  - name: srv
    command: [%q]
    env: {%s: "1", %s: %q, GORACE: "atexit_sleep_ms=0"}
`, os.Args[0], envServe, envDown, down),
		stop: func(t *testing.T) {
			if err := os.WriteFile(down, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		start: func(t *testing.T) {
			if err := os.Remove(down); err != nil {
				t.Fatal(err)
			}
		},
	}
}

// httpFixture serves the test server on 127.0.0.1 and records the
// X-Api-Key header of every request.
func httpFixture(t *testing.T, gotKey *atomic.Value) fixture {
	srv := newTestServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	wrapped := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotKey.Store(r.Header.Get("X-Api-Key"))
		handler.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	var mu sync.Mutex
	var hs *http.Server
	var served sync.WaitGroup
	serve := func(ln net.Listener) {
		mu.Lock()
		defer mu.Unlock()
		hs = &http.Server{Handler: wrapped}
		s := hs
		served.Go(func() { s.Serve(ln) })
	}
	stop := func(*testing.T) {
		mu.Lock()
		defer mu.Unlock()
		if hs != nil {
			hs.Close()
			hs = nil
		}
	}
	serve(ln)
	t.Cleanup(func() {
		stop(t)
		served.Wait()
	})
	t.Setenv("TOOLGATE_TEST_KEY", "s3cret")
	return fixture{
		yaml: fmt.Sprintf(`
mcp_servers:
  - name: srv
    url: http://%s/mcp
    headers: {X-Api-Key: "${TOOLGATE_TEST_KEY}"}
`, addr),
		stop: stop,
		start: func(t *testing.T) {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("listen again on %s: %v", addr, err)
			}
			serve(ln)
		},
	}
}

func TestManagerStdio(t *testing.T) {
	f := stdioFixture(t)
	testManager(t, f, testOptions(), func(t *testing.T, reg *agent.Registry) {
		// Kill the server process; while the down file exists it cannot
		// come back.
		pid, err := strconv.Atoi(call(t, reg, "srv__pid", `{}`).Content)
		if err != nil {
			t.Fatalf("srv__pid: %v", err)
		}
		f.stop(t)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	})
}

func TestManagerHTTP(t *testing.T) {
	var gotKey atomic.Value
	f := httpFixture(t, &gotKey)
	// No pings: the call itself must find the server gone.
	opts := testOptions()
	opts.pingInterval = time.Hour
	testManager(t, f, opts, func(t *testing.T, _ *agent.Registry) { f.stop(t) })
	if got, _ := gotKey.Load().(string); got != "s3cret" {
		t.Errorf("X-Api-Key reaching the server: got %q, want %q", got, "s3cret")
	}
}

// testManager runs the same checks over any transport; crash takes the
// server down until f.start.
func testManager(t *testing.T, f fixture, opts managerOptions, crash func(*testing.T, *agent.Registry)) {
	log := testLogger(t)
	cfg, err := ParseConfig([]byte(f.yaml + `
builtin_tools:
  ask_human: {}
policy:
  default: deny
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	reg := agent.NewRegistry()
	m, err := load(t.Context(), cfg, reg, log, opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { m.Close() })

	t.Run("status", func(t *testing.T) {
		st := m.Status()
		if len(st) != 1 || !st[0].Connected || st[0].Tools != 10 || st[0].LastError != "" {
			t.Fatalf("Status() = %+v, want srv connected with 9 tools", st)
		}
	})

	t.Run("tools", func(t *testing.T) {
		var names []string
		for _, tool := range reg.List() {
			names = append(names, tool.Name)
		}
		want := "ask_human srv__add srv__add_tool srv__delete_item srv__echo srv__environ srv__fail srv__pid srv__preview_delete srv__repeat srv__spawn"
		if got := strings.Join(names, " "); got != want {
			t.Errorf("registered tools: got %s, want %s", got, want)
		}
		echo, _ := reg.Lookup("srv__echo")
		if echo.Description != "Echo text." {
			t.Errorf("srv__echo description: got %q, want %q", echo.Description, "Echo text.")
		}
		// Where its calls go is part of what the tool is: an approved
		// call does not run on another server's tool of that name.
		if want := "mcp srv " + cmp.Or(cfg.Servers[0].URL, strings.Join(cfg.Servers[0].Command[:min(1, len(cfg.Servers[0].Command))], "")); !strings.HasPrefix(echo.Origin, want) {
			t.Errorf("srv__echo origin: got %q, want it to begin %q", echo.Origin, want)
		}
		var schema struct {
			Type       string                     `json:"type"`
			Required   []string                   `json:"required"`
			Properties map[string]json.RawMessage `json:"properties"`
		}
		if err := json.Unmarshal(echo.Schema, &schema); err != nil {
			t.Fatalf("srv__echo schema %s: %v", echo.Schema, err)
		}
		if schema.Type != "object" || len(schema.Required) != 1 || schema.Required[0] != "text" || schema.Properties["text"] == nil {
			t.Errorf("srv__echo schema: got %s, want an object requiring text", echo.Schema)
		}
		if err := reg.Validate("srv__echo", json.RawMessage(`{"text": 3}`)); err == nil {
			t.Errorf("Validate(srv__echo, text: 3): got nil, want a schema error")
		}
	})

	t.Run("policy defaults", func(t *testing.T) {
		policy, err := approvals.ParseConfig([]byte(f.yaml + "policy:\n  default: deny\n"))
		if err != nil {
			t.Fatalf("approvals.ParseConfig: %v", err)
		}
		for _, tc := range []struct {
			tool string
			want approvals.Action
		}{
			{"srv__echo", approvals.Allow},
			{"srv__add", approvals.Allow},
			{"srv__delete_item", approvals.Ask},
			{"srv__fail", approvals.Ask}, // no annotations: destructive per MCP
			{"ask_human", approvals.Ask},
		} {
			tool, _ := reg.Lookup(tc.tool)
			v := policy.Evaluate(approvals.Input{Tool: tc.tool, Args: json.RawMessage(`{}`), Hints: tool.Annotations})
			if v.Action != tc.want {
				t.Errorf("verdict for %s (hints %+v): got %s, want %s", tc.tool, tool.Annotations, v.Action, tc.want)
			}
		}
	})

	t.Run("calls", func(t *testing.T) {
		for _, tc := range []struct {
			tool, args  string
			wantContent string
			wantError   bool
		}{
			{"srv__echo", `{"text": "hi"}`, "echo: hi", false},
			{"srv__delete_item", `{"id": "42"}`, "deleted 42", false},
			{"srv__fail", `{}`, "the tool reported an error: boom", true},
			{"srv__add", `{"a": 1, "b": 2}`, `{"sum":3}`, false},
		} {
			got := call(t, reg, tc.tool, tc.args)
			if got.Content != tc.wantContent || got.IsError != tc.wantError {
				t.Errorf("%s(%s): got %+v, want {Content:%s IsError:%v}", tc.tool, tc.args, got, tc.wantContent, tc.wantError)
			}
		}
	})

	t.Run("protocol error", func(t *testing.T) {
		// A tool the server does not know: the server answers with a
		// JSON-RPC error, which is the model's problem, not an outage.
		got, err := m.servers[0].handler("missing", approvals.Hints{}, "")(t.Context(), json.RawMessage(`{}`))
		if err != nil || !got.IsError || !strings.HasPrefix(got.Content, "MCP server srv refused the call to missing: ") {
			t.Errorf("calling an unknown tool: got %+v, %v; want a refusal", got, err)
		}
		if !m.Status()[0].Connected {
			t.Errorf("status after a protocol error: got disconnected, want connected")
		}
	})

	t.Run("list_changed", func(t *testing.T) {
		if got := call(t, reg, "srv__add_tool", `{}`); got.IsError {
			t.Fatalf("srv__add_tool: %+v", got)
		}
		waitFor(t, "srv__extra is registered", func() bool {
			_, ok := reg.Lookup("srv__extra")
			return ok
		})
		if got := call(t, reg, "srv__extra", `{}`); got.Content != "extra" {
			t.Errorf("srv__extra: got %+v, want extra", got)
		}
		if got := m.Status()[0].Tools; got != 11 {
			t.Errorf("tool count after list_changed: got %d, want 11", got)
		}
	})

	t.Run("crash and restart", func(t *testing.T) {
		crash(t, reg)
		// Whether the call or the manager notices first, the call must
		// say the server is unavailable.
		waitFor(t, "a call says the server is unavailable", func() bool {
			got := call(t, reg, "srv__echo", `{"text": "hi"}`)
			return got.IsError && got.NotSent() && strings.HasPrefix(got.Content, "MCP server srv is unavailable, so the call was not sent: ")
		})
		st := m.Status()[0]
		if st.Connected || st.LastError == "" {
			t.Errorf("status while down: got %+v, want not connected with an error", st)
		}
		if _, ok := reg.Lookup("srv__echo"); !ok {
			t.Errorf("srv__echo was unregistered while its server is down; want it kept")
		}

		f.start(t)
		waitFor(t, "the server is connected again", func() bool { return m.Status()[0].Connected })
		if got := call(t, reg, "srv__echo", `{"text": "back"}`); got.Content != "echo: back" || got.IsError {
			t.Errorf("srv__echo after restart: got %+v, want echo: back", got)
		}
		if st := m.Status()[0]; st.LastError != "" {
			t.Errorf("status after restart: got last error %q, want none", st.LastError)
		}
	})

	t.Run("close", func(t *testing.T) {
		if err := m.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		got := call(t, reg, "srv__echo", `{"text": "hi"}`)
		if !got.IsError || !strings.Contains(got.Content, "unavailable") {
			t.Errorf("srv__echo after Close: got %+v, want an unavailable error", got)
		}
	})
}

func TestLoadServerDownAtStart(t *testing.T) {
	f := stdioFixture(t)
	f.stop(t)
	cfg, err := ParseConfig([]byte(f.yaml))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	reg := agent.NewRegistry()
	m, err := load(t.Context(), cfg, reg, testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load with a server down: got error %v, want none", err)
	}
	defer m.Close()
	st := m.Status()[0]
	if st.Connected || st.Transport != "stdio" || !strings.Contains(st.LastError, `exit status 1; last stderr line "test server is down"`) {
		t.Errorf("status: got %+v, want a stdio server not connected, with its exit status and stderr", st)
	}
	// The model sees one stand-in tool that says why the server is missing.
	if list := reg.List(); len(list) != 1 || list[0].Name != "srv__unavailable" || !list[0].Annotations.ReadOnly {
		t.Fatalf("tools registered: got %v, want only the read-only srv__unavailable", list)
	}
	if got := call(t, reg, "srv__unavailable", `{}`); !got.IsError || !strings.Contains(got.Content, "MCP server srv is unavailable") || !strings.Contains(got.Content, "test server is down") {
		t.Errorf("srv__unavailable: got %+v, want an error saying why the server is down", got)
	}
	f.start(t)
	waitFor(t, "the server connects", func() bool { return m.Status()[0].Connected })
	if got := call(t, reg, "srv__echo", `{"text": "late"}`); got.Content != "echo: late" {
		t.Errorf("srv__echo: got %+v, want echo: late", got)
	}
	if _, ok := reg.Lookup("srv__unavailable"); ok {
		t.Error("the stand-in tool is still registered after the server connected")
	}
}

func TestLoadBadCommand(t *testing.T) {
	cfg := Config{Servers: []ServerConfig{{Name: "nope", Command: []string{filepath.Join(t.TempDir(), "no-such-server")}}}}
	m, err := load(t.Context(), cfg, agent.NewRegistry(), testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: got error %v, want none", err)
	}
	defer m.Close()
	st := m.Status()[0]
	if st.Connected || !strings.Contains(st.LastError, "no-such-server") {
		t.Errorf("status: got %+v, want an error naming the command", st)
	}
}

func TestToolName(t *testing.T) {
	for _, tc := range []struct{ tool, want string }{
		{"read_file", "files__read_file"},
		{"read.file/v2", "files__read_file_v2"},
		{strings.Repeat("x", 80), "files__" + strings.Repeat("x", 57)},
	} {
		if got := toolName("files__", tc.tool); got != tc.want || !agent.ValidName(got) {
			t.Errorf("toolName(files__, %q): got %q, want %q", tc.tool, got, tc.want)
		}
	}
}

func TestHints(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *mcp.ToolAnnotations
		want approvals.Hints
	}{
		{"none", nil, approvals.Hints{}},
		{"read-only", &mcp.ToolAnnotations{ReadOnlyHint: true}, approvals.Hints{ReadOnly: true}},
		{"destructive", &mcp.ToolAnnotations{DestructiveHint: ptr(true)}, approvals.Hints{Destructive: ptr(true)}},
		{"additive idempotent", &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true}, approvals.Hints{Destructive: ptr(false), Idempotent: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hints(tc.in)
			if got.ReadOnly != tc.want.ReadOnly || got.Idempotent != tc.want.Idempotent || !sameBoolPtr(got.Destructive, tc.want.Destructive) {
				t.Errorf("hints(%+v): got %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func sameBoolPtr(a, b *bool) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func TestToResult(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *mcp.CallToolResult
		want agent.Result
	}{
		{"texts", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a"}, &mcp.TextContent{Text: "b"}}}, agent.Result{Content: "a\nb"}},
		{"error", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no"}}, IsError: true}, agent.Result{Content: "the tool reported an error: no", IsError: true}},
		{"error without text", &mcp.CallToolResult{IsError: true}, agent.Result{Content: "the tool reported an error, with no message", IsError: true}},
		{"error with a success's words", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployment.apps/api scaled"}}, IsError: true}, agent.Result{Content: "the tool reported an error: deployment.apps/api scaled", IsError: true}},
		{"structured only", &mcp.CallToolResult{StructuredContent: map[string]any{"n": 1}}, agent.Result{Content: `{"n":1}`}},
		{"structured and same text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{ "n": 1 }`}}, StructuredContent: map[string]any{"n": 1}}, agent.Result{Content: `{ "n": 1 }`}},
		{"structured and other text", &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}, StructuredContent: map[string]any{"n": 1}}, agent.Result{Content: "done\n{\"n\":1}"}},
		{"image", &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{MIMEType: "image/png", Data: []byte("abc")}}}, agent.Result{Content: "[image: image/png, 3 bytes]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toResult(tc.in); got != tc.want {
				t.Errorf("toResult: got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	o := managerOptions{minBackoff: 100 * time.Millisecond, maxBackoff: 30 * time.Second}
	for _, tc := range []struct {
		attempt  int
		min, max time.Duration
	}{
		{0, 50 * time.Millisecond, 100 * time.Millisecond},
		{3, 400 * time.Millisecond, 800 * time.Millisecond},
		{20, 15 * time.Second, 30 * time.Second},
		{100, 15 * time.Second, 30 * time.Second},
	} {
		for range 20 {
			if got := o.delay(tc.attempt); got < tc.min || got > tc.max {
				t.Errorf("delay(%d): got %s, want within [%s, %s]", tc.attempt, got, tc.min, tc.max)
			}
		}
	}
}

func TestPingFindsHTTPServerGone(t *testing.T) {
	var gotKey atomic.Value
	f := httpFixture(t, &gotKey)
	cfg, err := ParseConfig([]byte(f.yaml))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	m, err := load(t.Context(), cfg, agent.NewRegistry(), testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	if st := m.Status()[0]; !st.Connected || st.Transport != "http" {
		t.Fatalf("status: got %+v, want a connected http server", st)
	}
	f.stop(t)
	waitFor(t, "the status shows the server down without any call", func() bool {
		st := m.Status()[0]
		return !st.Connected && st.LastError != ""
	})
	f.start(t)
	waitFor(t, "the server is connected again", func() bool { return m.Status()[0].Connected })
}

// unsetPassedEnv unsets the variables of the bot's environment that
// commands and stdio servers see, restoring them when the test ends.
func unsetPassedEnv(t *testing.T) {
	t.Helper()
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			if err := os.Unsetenv(k); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Setenv(k, v) })
		}
	}
}

// processGone reports whether the process pid has ended (a zombie waiting
// for its reaper counts as ended).
func processGone(pid int) bool {
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		_, rest, _ := strings.Cut(string(stat), ") ")
		return strings.HasPrefix(rest, "Z")
	}
	return syscall.Kill(pid, 0) != nil
}

func TestStdioServerGetsNoSecrets(t *testing.T) {
	t.Setenv("SLACK_BOT_TOKEN", "xoxb-leak")
	unsetPassedEnv(t)
	cfg := Config{Servers: []ServerConfig{{Name: "srv", Command: []string{os.Args[0], argServe}}}}
	reg := agent.NewRegistry()
	m, err := load(t.Context(), cfg, reg, testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	if st := m.Status()[0]; !st.Connected {
		t.Fatalf("status: got %+v, want connected", st)
	}
	if got := call(t, reg, "srv__environ", `{}`); strings.Contains(got.Content, "xoxb-leak") {
		t.Errorf("the stdio server's environment has the bot's token:\n%s", got.Content)
	}
}

func TestStdioServerProcessGroupKilled(t *testing.T) {
	f := stdioFixture(t)
	reg, m := loadYAML(t, f.yaml, testOptions())
	spawn := func() int {
		t.Helper()
		pid, err := strconv.Atoi(call(t, reg, "srv__spawn", `{}`).Content)
		if err != nil {
			t.Fatalf("srv__spawn: %v", err)
		}
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		return pid
	}

	// The server dies and is reconnected: its child goes with it.
	child := spawn()
	server, err := strconv.Atoi(call(t, reg, "srv__pid", `{}`).Content)
	if err != nil {
		t.Fatalf("srv__pid: %v", err)
	}
	if err := syscall.Kill(server, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("the server's child %d is gone after the server died", child), func() bool { return processGone(child) })
	waitFor(t, "the server is connected again", func() bool { return m.Status()[0].Connected })

	// Close stops the server and its child.
	child = spawn()
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitFor(t, fmt.Sprintf("the server's child %d is gone after Close", child), func() bool { return processGone(child) })
}

// A redirect to another origin is not followed at all (see
// TestHTTPRedirectElsewhereRefused): neither the configured headers nor
// anything else reaches the host it points to, and the status says why.
func TestHTTPHeadersStayOnTheEndpoint(t *testing.T) {
	srv := newTestServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var mu sync.Mutex
	var endpointKeys, otherKeys []string
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		otherKeys = append(otherKeys, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		handler.ServeHTTP(w, r)
	}))
	defer other.Close()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		endpointKeys = append(endpointKeys, r.Header.Get("X-Api-Key"))
		mu.Unlock()
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer endpoint.Close()

	cfg := Config{Servers: []ServerConfig{{Name: "srv", URL: endpoint.URL + "/mcp", Headers: map[string]string{"X-Api-Key": "s3cret"}}}}
	m, err := load(t.Context(), cfg, agent.NewRegistry(), testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	if st := m.Status()[0]; st.Connected || !strings.Contains(st.LastError, "redirected") {
		t.Errorf("status: got %+v, want not connected, saying the endpoint redirected elsewhere", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(endpointKeys) == 0 || endpointKeys[0] != "s3cret" {
		t.Errorf("X-Api-Key at the endpoint: got %q, want s3cret", endpointKeys)
	}
	if len(otherKeys) > 0 {
		t.Errorf("the host redirected to got %d requests (X-Api-Key %q), want none", len(otherKeys), otherKeys)
	}
}

func TestHTTPServerErrorsHideTheURL(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_KEY", "k3y-in-the-url")
	// Nothing listens on port 1.
	cfg, err := ParseConfig([]byte(`
mcp_servers:
  - name: srv
    url: http://user:${TOOLGATE_TEST_KEY}@127.0.0.1:1/mcp/${TOOLGATE_TEST_KEY}?key=${TOOLGATE_TEST_KEY}
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	m, err := load(t.Context(), cfg, agent.NewRegistry(), log, testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	st := m.Status()[0]
	if st.Connected || !strings.Contains(st.LastError, "http://127.0.0.1:1") {
		t.Errorf("status: got %+v, want an error naming http://127.0.0.1:1", st)
	}
	res, err := m.servers[0].handler("echo", approvals.Hints{}, "")(t.Context(), json.RawMessage(`{}`))
	if err != nil || !res.IsError || !strings.Contains(res.Content, "unavailable") {
		t.Errorf("a call: got %+v, %v; want an unavailable error", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for what, s := range map[string]string{"status": st.LastError, "call result": res.Content, "log": logs.String()} {
		for _, secret := range []string{"k3y-in-the-url", "user:", "/mcp"} {
			if strings.Contains(s, secret) {
				t.Errorf("the %s has %q: %s", what, secret, s)
			}
		}
	}
}

func TestMCPResultCapped(t *testing.T) {
	f := stdioFixture(t)
	reg, _ := loadYAML(t, f.yaml+"    max_output_bytes: 101\n", testOptions())
	got := call(t, reg, "srv__repeat", `{"text": "é", "n": 100}`)
	// 101 bytes would cut the 51st é in two.
	want := strings.Repeat("é", 50) + "\n[output truncated: 100 more bytes not shown]\n"
	if got.Content != want || got.IsError {
		t.Errorf("srv__repeat: got %+v, want %q", got, want)
	}
	if got := call(t, reg, "srv__repeat", `{"text": "a", "n": 101}`); got.Content != strings.Repeat("a", 101) {
		t.Errorf("srv__repeat at the cap: got %+v, want 101 bytes", got)
	}
}

// A server's preview tool runs with the call's arguments and its text is
// the preview; its error is the preview's error.
func TestMCPPreviewTool(t *testing.T) {
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			f := stdioFixture(t)
			if transport == "http" {
				f = httpFixture(t, new(atomic.Value))
			}
			reg, _ := loadYAML(t, f.yaml+"    preview: {delete_item: preview_delete}\n", testOptions())
			del, ok := reg.Lookup("srv__delete_item")
			if !ok || del.Preview == nil {
				t.Fatalf("srv__delete_item registered %v, with a preview %v; want both", ok, ok && del.Preview != nil)
			}
			if echo, _ := reg.Lookup("srv__echo"); echo.Preview != nil {
				t.Error("srv__echo has a preview although none is configured")
			}
			got, err := del.Preview(t.Context(), json.RawMessage(`{"id":"7"}`))
			if err != nil || got != "would delete item 7 (3 rows)" {
				t.Errorf("preview of delete_item 7: got %q, %v; want the preview tool's text", got, err)
			}
			if _, err := del.Preview(t.Context(), json.RawMessage(`{"id":"missing"}`)); err == nil || !strings.Contains(err.Error(), "no item missing") {
				t.Errorf("preview of a failing preview tool: got %v, want its error", err)
			}
		})
	}
}

// A preview tool that is not read-only, or does not exist, is refused at
// start-up.
func TestMCPPreviewToolMustBeReadOnly(t *testing.T) {
	for _, tc := range []struct{ preview, want string }{
		{"{delete_item: fail}", `preview tool "fail" of "delete_item": it is not annotated readOnlyHint`},
		{"{delete_item: nope}", `preview tool "nope" of "delete_item": the server has no such tool`},
		{"{gone: echo}", `the server has no tool "gone" to preview`},
	} {
		t.Run(tc.preview, func(t *testing.T) {
			f := stdioFixture(t)
			cfg, err := ParseConfig([]byte(f.yaml + "    preview: " + tc.preview + "\n"))
			if err != nil {
				t.Fatalf("ParseConfig: %v", err)
			}
			m, err := load(t.Context(), cfg, agent.NewRegistry(), testLogger(t), testOptions())
			if err == nil {
				m.Close()
				t.Fatalf("Load with preview %s succeeded, want it refused", tc.preview)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Load with preview %s: got %v, want %q", tc.preview, err, tc.want)
			}
		})
	}
}

// jsonRPCMethod returns the method and the raw id of the JSON-RPC request
// r carries, leaving r's body readable again.
func jsonRPCMethod(t *testing.T, r *http.Request) (method string, id json.RawMessage) {
	t.Helper()
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Error(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var req struct {
		Method string          `json:"method"`
		ID     json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(body, &req)
	return req.Method, req.ID
}

// An HTTP server's answer is read up to a bound, as a stdio server's line
// is: a tool result larger than it fails the call instead of being read
// whole into memory (and cut to max_output_bytes only afterwards).
func TestHTTPServerAnswerIsBounded(t *testing.T) {
	srv := newTestServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if method, id := jsonRPCMethod(t, r); method == "tools/call" {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"`, id)
				chunk := bytes.Repeat([]byte("a"), 1<<20)
				for range maxMessageBytes>>20 + 4 {
					if _, err := w.Write(chunk); err != nil {
						return // the client stopped reading
					}
				}
				io.WriteString(w, `"}]}}`)
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	defer ts.Close()
	reg := agent.NewRegistry()
	m, err := load(t.Context(), Config{Servers: []ServerConfig{{Name: "srv", URL: ts.URL + "/mcp"}}}, reg, testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	if st := m.Status()[0]; !st.Connected {
		t.Fatalf("status: got %+v, want connected", st)
	}
	res := call(t, reg, "srv__echo", `{"text":"hi"}`)
	if !res.IsError || !strings.Contains(res.Content, "larger than 16 MiB") {
		t.Errorf("a tool result past the bound: got error %v, %.200q; want the call failed as too large", res.IsError, res.Content)
	}
}

// A server that answers the handshake but never the tool list holds up
// neither Load nor the bot's start: the list is bounded by the connect
// timeout, and the server is reported down.
func TestHTTPServerThatNeverListsItsTools(t *testing.T) {
	srv := newTestServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if method, _ := jsonRPCMethod(t, r); method == "tools/list" {
				<-r.Context().Done()
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	defer ts.Close()
	defer ts.CloseClientConnections()
	opts := testOptions()
	opts.connectTimeout = 500 * time.Millisecond
	opts.minBackoff, opts.maxBackoff = time.Hour, time.Hour // one attempt
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m, err := load(ctx, Config{Servers: []ServerConfig{{Name: "srv", URL: ts.URL + "/mcp"}}}, agent.NewRegistry(), testLogger(t), opts)
	if err != nil {
		t.Fatalf("Load: %v (it waited for a list that never came)", err)
	}
	defer m.Close()
	if st := m.Status()[0]; st.Connected || !strings.Contains(st.LastError, "list tools") {
		t.Errorf("status: got %+v, want the server down with a list error", st)
	}
}

// A server that stops answering after it took a call, as a stdio server
// that dies while the call runs: the call may have had its effect, so the
// model is told that its outcome is unknown and not to call it again
// blindly, unless the tool is read-only, which may be tried again; it is
// never told the call was not sent.
func TestServerThatDiesDuringACall(t *testing.T) {
	for _, tt := range []struct {
		tool, want, not string
	}{
		{"srv__write_then_die", "whether the call took effect is unknown. Do not call it again", "try again later"},
		{"srv__read_then_die", "it may have run; the tool is read-only or idempotent, so it is safe to call again", "unknown"},
	} {
		t.Run(tt.tool, func(t *testing.T) {
			mark := filepath.Join(t.TempDir(), "effect")
			cfg, err := ParseConfig([]byte(fmt.Sprintf(`
mcp_servers:
  - name: srv
    command: [%q]
    env: {%s: "1", %s: %q}
`, os.Args[0], envServe, envDieMark, mark)))
			if err != nil {
				t.Fatal(err)
			}
			reg := agent.NewRegistry()
			m, err := load(t.Context(), cfg, reg, testLogger(t), testOptions())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Close() })
			got := call(t, reg, tt.tool, `{}`)
			if _, err := os.Stat(mark); err != nil {
				t.Fatalf("the tool did not run: %v", err)
			}
			if !got.IsError || !strings.Contains(got.Content, tt.want) || strings.Contains(got.Content, tt.not) {
				t.Errorf("result = %+v; want an error saying %q, not %q", got, tt.want, tt.not)
			}
			if got.NotSent() {
				t.Errorf("result = %+v: a call the tool ran is reported as not sent", got)
			}
		})
	}
}

// A server's JSON-RPC error for a call reaches the model cut to
// max_output_bytes, as a result does: its message can be megabytes. What
// the cut keeps still says that the outcome is unknown (the tool is not
// annotated read-only or idempotent).
func TestRefusedCallIsCut(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "v1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "fail_rpc", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: strings.Repeat("E", 1<<20)}
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()
	reg, _ := loadYAML(t, fmt.Sprintf("mcp_servers:\n  - name: srv\n    url: %s\n    max_output_bytes: 1024\n", ts.URL), testOptions())
	fail, ok := reg.Lookup("srv__fail_rpc")
	if !ok {
		t.Fatal("srv__fail_rpc is not registered")
	}
	res, err := fail.Handler(t.Context(), json.RawMessage(`{}`))
	if err != nil || !res.IsError || len(res.Content) > 1200 || !strings.Contains(res.Content, "[output truncated: ") {
		t.Errorf("a failed call with a 1 MiB message = %d bytes (error %v, %v), want an error result cut to max_output_bytes", len(res.Content), res.IsError, err)
	}
	if !strings.Contains(res.Content, agent.UnknownOutcome) || !res.OutcomeUnknown() {
		t.Errorf("the cut result of a failed call does not say its outcome is unknown (flagged: %v): %.300s", res.OutcomeUnknown(), res.Content)
	}
}

// Tools whose names become one once made valid (repos.delete and
// repos_delete) are all left out, whatever order the server lists them in:
// the name would call one or the other, and its rules and standing
// approvals would follow whichever came first.
func TestMCPToolsOfOneNameAreLeftOut(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "clash", Version: "v1"}, nil)
	for _, name := range []string{"repos.delete", "repos_delete", "repos_list"} {
		mcp.AddTool(srv, &mcp.Tool{Name: name, Description: name},
			func(context.Context, *mcp.CallToolRequest, idIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil, nil
			})
	}
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()
	reg := agent.NewRegistry()
	m, err := load(t.Context(), Config{Servers: []ServerConfig{{Name: "gh", URL: ts.URL}}}, reg, testLogger(t), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer m.Close()
	if _, ok := reg.Lookup("gh__repos_delete"); ok {
		t.Error("gh__repos_delete is registered, though two tools of the server take that name")
	}
	if res := call(t, reg, "gh__repos_list", `{"id":"x"}`); res.IsError || res.Content != "repos_list" {
		t.Errorf("gh__repos_list = %+v, want the tool of that name", res)
	}
	if st := m.Status()[0]; st.Tools != 1 {
		t.Errorf("status counts %d tools, want 1", st.Tools)
	}
}

// A secret in a stdio server's command, printed by the server on stderr as
// it fails to start, is hidden wherever the manager shows that stderr: its
// log, its status and the stand-in tool the model calls. The secret has
// characters that quoting escapes, as the status quotes the last line.
func TestMCPSecretOfTheCommandHidden(t *testing.T) {
	const secret = `tok"en\1234`
	t.Setenv("TOOLGATE_TEST_MCP_TOKEN", secret)
	cfg, err := ParseConfig([]byte(`
mcp_servers:
  - name: leaky
    command: ["/bin/sh", "-c", "printf 'token=%s\n' \"$0\" >&2; exit 1", "${TOOLGATE_TEST_MCP_TOKEN}"]
`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	var logs syncBuffer
	reg := agent.NewRegistry()
	m, err := load(t.Context(), cfg, reg, slog.New(slog.NewTextHandler(&logs, nil)), testOptions())
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	quoted := strconv.Quote(secret)
	hidden := func(where, text string) {
		t.Helper()
		if strings.Contains(text, secret) || strings.Contains(text, quoted[1:len(quoted)-1]) {
			t.Errorf("%s shows the secret: %s", where, text)
		}
		if !strings.Contains(text, "token=[redacted]") {
			t.Errorf("%s does not show the server's stderr, redacted: %s", where, text)
		}
	}
	hidden("the status", m.Status()[0].LastError)
	hidden("the stand-in tool", call(t, reg, "leaky__unavailable", `{}`).Content)
	m.Close() // every attempt logged
	hidden("the log", logs.String())
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A server's tools are the same tools after a credential it is given in
// its URL or its command's arguments is rotated: their origin (part of
// what an approved call is checked against) holds none; another host,
// path or program is another origin.
func TestOriginLeavesCredentialsOut(t *testing.T) {
	origin := func(c ServerConfig) string { return (&server{cfg: c}).origin() }
	same := [][2]ServerConfig{
		{{Name: "gh", URL: "https://mcp.example/mcp?token=old"}, {Name: "gh", URL: "https://mcp.example/mcp?token=new"}},
		{{Name: "gh", URL: "https://bot:old@mcp.example/mcp"}, {Name: "gh", URL: "https://bot:new@mcp.example/mcp"}},
		{{Name: "graf", Command: []string{"mcp-grafana", "--token", "old"}}, {Name: "graf", Command: []string{"mcp-grafana", "--token", "new"}}},
	}
	for _, p := range same {
		if a, b := origin(p[0]), origin(p[1]); a != b || strings.Contains(a, "old") {
			t.Errorf("origins %q and %q; want one, with no credential", a, b)
		}
	}
	other := [][2]ServerConfig{
		{{Name: "gh", URL: "https://mcp.example/mcp"}, {Name: "gh", URL: "https://mcp.other.example/mcp"}},
		{{Name: "gh", URL: "https://mcp.example/mcp"}, {Name: "gh", URL: "https://mcp.example/v2/mcp"}},
		{{Name: "graf", Command: []string{"mcp-grafana"}}, {Name: "graf", Command: []string{"mcp-prometheus"}}},
	}
	for _, p := range other {
		if a, b := origin(p[0]), origin(p[1]); a == b {
			t.Errorf("origin %q for %+v and %+v; want two", a, p[0], p[1])
		}
	}
}
