package tools

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// ReapOrphans waits, until ctx ends, for the processes that end as this
// one's children without being started by it. Run as PID 1 (the bot is
// its own init in the tools image, so that no other process of its user
// holds its environment, the tokens, where the programs it starts could
// read it), it is given what those programs leave behind once their
// parent exits, and each would stay a zombie, holding a process id, until
// waited for. The programs the tools start are left to their exec.Cmd
// (see startKept).
func ReapOrphans(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGCHLD)
	defer signal.Stop(sig)
	for {
		reapOrphans()
		select {
		case <-ctx.Done():
			return
		case <-sig:
		}
	}
}

// reapOrphans waits for this process's children that have ended, but the
// programs the tools started, and returns how many it waited for.
func reapOrphans() int {
	started.starting.Lock()
	defer started.starting.Unlock()
	self := strconv.Itoa(os.Getpid())
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || kept(pid) {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// "pid (comm) state ppid ...": the name may hold spaces and
		// parentheses, so the fields are read after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 || f[0] != "Z" || f[1] != self {
			continue
		}
		var ws syscall.WaitStatus
		if p, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); p == pid {
			n++
		}
	}
	return n
}
