//go:build unix

package tools

import (
	"os/exec"
	"syscall"
)

// killProcessGroup starts cmd in its own process group and makes its
// context's cancellation kill the whole group, so that children the command
// started die with it.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
