//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// detach starts cmd in a session, and so a process group, of its own: the
// terminal's Ctrl-C (a SIGINT to the playground's process group) and its
// hangup do not reach it, nor the browser it may run in the foreground.
func detach(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
}
