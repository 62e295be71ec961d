//go:build !unix

package tools

import (
	"os"
	"os/exec"
)

// killProcessGroup leaves cmd as it is: without process groups, cancelling
// the context kills the process only.
func killProcessGroup(cmd *exec.Cmd) {}

// killGroup does nothing: without process groups there is nothing left to
// kill once cmd has been waited for.
func killGroup(cmd *exec.Cmd) bool { return false }

// newProcessGroup leaves cmd as it is: there are no process groups.
func newProcessGroup(cmd *exec.Cmd) {}

// killedBySignal reports whether the process of ps did not exit
// successfully: without signals, a process killed at the timeout is known
// only by its failure.
func killedBySignal(ps *os.ProcessState) bool { return ps != nil && !ps.Success() }
