//go:build !unix

package tools

import "os/exec"

// killProcessGroup leaves cmd as it is: without process groups, cancelling
// the context kills the process only.
func killProcessGroup(cmd *exec.Cmd) {}
