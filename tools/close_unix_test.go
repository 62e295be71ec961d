//go:build unix

package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
