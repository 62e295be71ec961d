//go:build unix

package tools

import (
	"os"
	"os/exec"
	"syscall"
)

// killProcessGroup starts cmd in its own process group and makes its
// context's cancellation kill the whole group, so that children the command
// started die with it.
func killProcessGroup(cmd *exec.Cmd) {
	newProcessGroup(cmd)
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// killGroup kills what is left of the process group of cmd, which has been
// waited for, and reports whether anything was. The group's id cannot be
// reused while any member is alive.
func killGroup(cmd *exec.Cmd) bool {
	return cmd.Process != nil && syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) == nil
}

// newProcessGroup starts cmd in a process group of its own, for killGroup.
func newProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killedBySignal reports whether the process of ps was ended by a signal,
// as the kill at the timeout ends it, rather than exiting on its own.
func killedBySignal(ps *os.ProcessState) bool {
	if ps == nil {
		return false
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}
