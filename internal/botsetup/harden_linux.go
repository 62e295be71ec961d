package botsetup

import (
	"fmt"
	"syscall"
)

// prctl options (linux/prctl.h).
const (
	prGetDumpable = 3
	prSetDumpable = 4
)

// Harden makes the process non-dumpable. Its /proc/PID files then belong
// to root, so the programs it starts (run_command, stdio MCP servers),
// which run as the same user, cannot read its environment (the tokens) or
// its memory; they get a minimal environment of their own. The process
// still reads its own /proc/self (the process metrics), and the programs
// it starts are dumpable again once they exec. It also turns off core
// dumps, which would hold the same secrets.
func Harden() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); errno != 0 {
		return fmt.Errorf("make the process non-dumpable: %w", errno)
	}
	return nil
}

// dumpable reports the process's dumpable flag.
func dumpable() (bool, error) {
	r, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prGetDumpable, 0, 0)
	if errno != 0 {
		return false, errno
	}
	return r != 0, nil
}
