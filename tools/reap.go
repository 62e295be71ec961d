package tools

import (
	"os/exec"
	"sync"
)

// started holds the programs the tools start (run_command's, stdio MCP
// servers), which their exec.Cmd waits for: ReapOrphans leaves them to it.
var started = struct {
	// starting is held for reading while a program starts, and for
	// writing while orphans are reaped, so that a program that ends as
	// it starts is never taken for one.
	starting sync.RWMutex
	mu       sync.Mutex
	pids     map[int]bool
}{pids: map[int]bool{}}

// startKept runs start, which starts cmd, and keeps cmd's process as one
// its exec.Cmd waits for (see ReapOrphans) until done is called, once it
// has been waited for.
func startKept(cmd *exec.Cmd, start func() error) (done func(), err error) {
	started.starting.RLock()
	defer started.starting.RUnlock()
	err = start()
	if cmd.Process == nil {
		return func() {}, err
	}
	pid := cmd.Process.Pid
	started.mu.Lock()
	started.pids[pid] = true
	started.mu.Unlock()
	return func() {
		started.mu.Lock()
		delete(started.pids, pid)
		started.mu.Unlock()
	}, err
}

// kept reports whether pid is a program a tool started and waits for.
func kept(pid int) bool {
	started.mu.Lock()
	defer started.mu.Unlock()
	return started.pids[pid]
}
