//go:build !unix

package main

import "os/exec"

// detach leaves cmd as it is: there are no process groups to leave.
func detach(cmd *exec.Cmd) {}
