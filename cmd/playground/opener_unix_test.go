//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The browser opener runs in a session, and so a process group, of its
// own: the terminal's Ctrl-C, a SIGINT to the playground's process group,
// must not reach the browser that xdg-open may run in the foreground. And
// the playground ends without waiting for such an opener, which lasts as
// long as the browser.
func TestBrowserOpenerIsDetached(t *testing.T) {
	bin := t.TempDir()
	started := filepath.Join(bin, "started")
	if err := syscall.Mkfifo(started, 0o600); err != nil {
		t.Fatal(err)
	}
	// The fake opener says its pid, then lasts as a browser would.
	script := "#!/bin/sh\necho $$ > '" + started + "'\nexec sleep 30\n"
	for _, name := range []string{"xdg-open", "open"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("DISPLAY", ":0")
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REDIS_URL", "")
	opts := options{addr: "127.0.0.1:0"}
	pg, err := start(context.Background(), opts, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(pg.close)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveWeb(ctx, pg, opts, io.Discard) }()
	said := make(chan string, 1)
	go func() {
		raw, _ := os.ReadFile(started) // waits for the opener to open the FIFO
		said <- string(raw)
	}()
	var pid int
	select {
	case raw := <-said:
		if pid, err = strconv.Atoi(strings.TrimSpace(raw)); err != nil {
			t.Fatalf("the opener said %q", raw)
		}
	case err := <-done:
		t.Fatalf("serveWeb returned before opening the browser: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the opener did not start")
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	group, err := syscall.Getpgid(pid)
	switch {
	case errors.Is(err, syscall.EPERM): // another session, where that is an error
	case err != nil:
		t.Errorf("the opener's process group: %v", err)
	case group == syscall.Getpgrp():
		t.Errorf("the opener runs in the playground's process group %d", group)
	}

	cancel() // as Ctrl-C does
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveWeb: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveWeb waited for the browser opener after its context ended")
	}
}
