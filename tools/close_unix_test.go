//go:build unix

package tools

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// A stdio server that does not stop when its input ends (here a shell that
// goes on sleeping after the server exits) is killed, with its process
// group, by a Close that could not wait for it: nothing it started
// outlives the bot, and Close returns once the group is dead.
func TestCloseKillsStdioServersItCannotWaitFor(t *testing.T) {
	script := fmt.Sprintf("%q %s; exec sleep 60", os.Args[0], argServe)
	opts := testOptions()
	opts.closeWait = 300 * time.Millisecond
	_, m := loadYAML(t, fmt.Sprintf("mcp_servers:\n  - name: srv\n    command: [sh, -c, %q]\n    env: {GORACE: \"atexit_sleep_ms=0\"}\n", script), opts)
	s := m.servers[0]
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	if proc == nil || proc.Process == nil {
		t.Fatal("the stdio server is not running")
	}
	pgid := proc.Process.Pid
	closed := make(chan error, 1)
	go func() { closed <- m.Close() }()
	select {
	case err := <-closed:
		if err == nil || !strings.Contains(err.Error(), "were killed") {
			t.Errorf("Close = %v, want it to say the stdio servers were killed", err)
		}
	case <-time.After(30 * time.Second):
		// Waiting for the server's shell would take 60 s.
		t.Fatal("Close did not return")
	}
	if live := liveInGroup(t, pgid); len(live) > 0 {
		t.Errorf("processes of the server's group still run after Close: %v", live)
	}
}

// liveInGroup lists the processes of process group pgid that are not
// zombies, from /proc.
func liveInGroup(t *testing.T, pgid int) []string {
	t.Helper()
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	if len(stats) == 0 {
		t.Skip("no /proc to list processes")
	}
	var live []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces.
		rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
		fields := strings.Fields(rest)
		if len(fields) < 3 || fields[0] == "Z" {
			continue
		}
		if g, _ := strconv.Atoi(fields[2]); g == pgid {
			live = append(live, f)
		}
	}
	return live
}

// A stdio server that never answers the handshake (npx still downloading,
// a hung start) is killed with its children once the bot stops while it
// starts: Load closes the manager, and no process of it is left.
func TestStdioServerStuckStartingIsKilledAtTheStop(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := fmt.Sprintf(`trap "" TERM; sleep 300 & echo $! > %q; wait`, pidFile)
	cfg := Config{Servers: []ServerConfig{{Name: "slow", Command: []string{"/bin/sh", "-c", script}}}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := load(ctx, cfg, agent.NewRegistry(), testLogger(t), testOptions())
		done <- err
	}()
	var pid int
	waitFor(t, "the server started", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	cancel() // SIGTERM while the server starts: Load closes the manager
	stopped := time.Now()
	if err := <-done; err == nil {
		t.Fatal("Load: got nil, want the context's error")
	}
	if took := time.Since(stopped); took > 3*time.Second {
		t.Errorf("Load returned %s after the stop, waiting on the server's start", took.Round(100*time.Millisecond))
	}
	// The kill is sent as the stop comes; the process dies as the system
	// gets to it, well within this bound (the server sleeps five minutes).
	for deadline := time.Now().Add(2 * time.Second); !processGone(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d of the stdio server that was starting still runs 2 s after Load closed the manager", pid)
		}
	}
}

// A stdio server that never answers initialize holds up Load for its
// connect timeout, and no more: the bot's start is bounded by it.

// A stdio server that never answers the handshake holds the start up for
// the connect timeout, not for the SDK's closing sequence after it.
func TestStdioServerStuckStartingHoldsTheStartForTheConnectTimeout(t *testing.T) {
	script := `trap "" TERM; sleep 300 & wait`
	cfg := Config{Servers: []ServerConfig{{Name: "slow", Command: []string{"/bin/sh", "-c", script}}}}
	opts := testOptions()
	opts.connectTimeout = time.Second
	start := time.Now()
	m, err := load(t.Context(), cfg, agent.NewRegistry(), testLogger(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Cleanup(func() { m.Close() })
	if took > 3*time.Second {
		t.Errorf("Load took %s with a server that never answers and connectTimeout 1s; want about 1s (status %+v)", took.Round(100*time.Millisecond), m.Status())
	}
}

// The same as TestHandlerOfAnEarlierListingDoesNotCall, for a server that
// keeps no session (stateless HTTP, the usual shape behind a load
// balancer): its redeploy ends no session and sends no list_changed, and
// its tools are listed again only at the next ping (30 s by default). A
// call approved with {} and resumed in that window is checked against the
// old listing, passes, and the new release runs it with a default no card
// showed.
