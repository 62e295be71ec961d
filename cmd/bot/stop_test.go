package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// silentListener accepts connections and never answers on them, as a
// Redis behind a firewall that drops replies would; each accepted
// connection is sent on the channel it returns. The listener and its
// connections are closed at the end of the test.
func silentListener(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan struct{}, 64)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), ch
}

// waitStopped cancels a bot started with run and returns what run
// returned; the 15 s only guard against a hang, as in stopRun.
func waitStopped(t *testing.T, cancel context.CancelFunc, errc <-chan error) error {
	t.Helper()
	cancel()
	select {
	case err := <-errc:
		return err
	case <-time.After(15 * time.Second):
		t.Fatal("run did not return within 15s of the cancel")
	}
	return nil
}

// runInBackground runs the bot with env set until cancel, and returns
// its log and, once it returned, its result.
func runInBackground(t *testing.T, env map[string]string) (cancel context.CancelFunc, logs *syncBuffer, errc <-chan error) {
	t.Helper()
	setEnv(t, env)
	ctx, cancel := context.WithCancel(t.Context())
	logs = &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- run(ctx, nil, io.Discard, logs) }()
	return cancel, logs, done
}

// A stop (SIGTERM, Ctrl-C) while the bot still waits for its Redis to
// answer is a clean stop, exit status 0: not a bad REDIS_URL (status 2),
// which would send an operator hunting for a setting that is fine.
func TestRunStoppedWhileConnectingToRedis(t *testing.T) {
	addr, accepted := silentListener(t)
	env := validEnv(t)
	env["REDIS_URL"] = "redis://" + addr + "/0"
	cancel, logs, errc := runInBackground(t, env)
	defer cancel()

	// The bot has dialled the Redis, which will never answer: it is
	// connecting when the stop comes.
	select {
	case <-accepted:
	case err := <-errc:
		t.Fatalf("run returned before dialling the Redis: %v\nlogs:\n%s", err, logs)
	}
	err := waitStopped(t, cancel, errc)
	if code := exitCode(err); code != 0 || err != nil {
		t.Errorf("run after a stop during start-up = %v (exit status %d), want nil (0)", err, code)
	}
	if strings.Contains(logs.String(), "REDIS_URL") {
		t.Errorf("the log blames REDIS_URL for a stop:\n%s", logs)
	}
}

// A stop while the bot waits for an MCP server's first answer is a clean
// stop too: the start-up step it cuts makes no difference.
func TestRunStoppedWhileConnectingAToolServer(t *testing.T) {
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	configFile := filepath.Join(dir, "config.yaml")
	// A stdio server that starts and never answers the handshake; it
	// ends when the bot closes its stdin.
	if err := os.WriteFile(configFile, []byte(`mcp_servers:
  - name: mute
    command: ["/bin/sh", "-c", "touch `+started+`; exec cat >/dev/null"]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := validEnv(t)
	env["CONFIG_FILE"] = configFile
	cancel, logs, errc := runInBackground(t, env)
	defer cancel()

	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		select {
		case err := <-errc:
			t.Fatalf("run returned before starting the MCP server: %v\nlogs:\n%s", err, logs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	err := waitStopped(t, cancel, errc)
	if code := exitCode(err); code != 0 || err != nil {
		t.Errorf("run after a stop while connecting the tools = %v (exit status %d), want nil (0)", err, code)
	}
}

// A request still running when the bot stops (here a 20 s CPU profile,
// PPROF=true) is cut once the HTTP server's grace is over, with a
// warning: the stop is still clean, as the orchestrator asked for it.
func TestRunStopsCleanlyWithARequestRunning(t *testing.T) {
	slack := fakeslack.New(t)
	model := fakeopenai.New(t)
	setEnv(t, map[string]string{
		"SLACK_APP_TOKEN": slack.AppToken(),
		"SLACK_BOT_TOKEN": slack.BotToken(),
		"SLACK_API_URL":   slack.APIURL(),
		"OPENAI_API_KEY":  testAPIKey,
		"OPENAI_BASE_URL": model.URL(),
		"DATA_DIR":        t.TempDir(),
		"HTTP_ADDR":       "127.0.0.1:0",
		"PPROF":           "true",
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &syncBuffer{}
	errc := make(chan error, 1)
	go func() { errc <- run(ctx, nil, io.Discard, logs) }()
	base := "http://" + waitLog(t, logs, "starting", errc).HTTPAddr
	if err := slack.WaitConnected(1, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	reqCtx, stopReq := context.WithCancel(context.Background())
	defer stopReq()
	profiled := make(chan error, 1)
	go func() {
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, base+"/debug/pprof/profile?seconds=20", nil)
		if err == nil {
			var resp *http.Response
			if resp, err = http.DefaultClient.Do(req); err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
		profiled <- err
	}()
	// The profile's handler runs: the request is in flight at the stop.
	for {
		if _, dump := get(t, base+"/debug/pprof/goroutine?debug=1"); strings.Contains(dump, "net/http/pprof.Profile") {
			break
		}
		select {
		case err := <-profiled:
			t.Fatalf("the profile ended before the stop: %v", err)
		case err := <-errc:
			t.Fatalf("run returned before the stop: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}

	err := waitStopped(t, cancel, errc)
	if err != nil {
		t.Fatalf("run after a stop with a request running = %v, want nil", err)
	}
	waitLog(t, logs, "stop http server: requests still running were cut", nil)
	waitLog(t, logs, "stopped", nil)
	// The cut request ends without its profile.
	if err := <-profiled; err == nil {
		t.Error("the profile request succeeded, want it cut by the stop")
	} else if errors.Is(err, context.Canceled) {
		t.Errorf("the profile request ended by the test's own cancel, not the stop: %v", err)
	}
}
