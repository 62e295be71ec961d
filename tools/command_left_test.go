package tools

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// A command cut by the tool's own timeout (at most TOOL_TIMEOUT, so it
// comes first and the agent's words for a cut call never would) says that
// what it did is unknown and that it must not be run again unchecked.
func TestRunCommandTimeoutHasAnUnknownOutcome(t *testing.T) {
	_, work := commandFixture(t)
	tool, err := RunCommand(CommandConfig{Allow: []string{"hang"}, Dir: work, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	got := runTool(t, tool, map[string]any{"argv": []string{"hang"}})
	want := "timed out after 300ms; the process group was killed: " + agent.UnknownOutcome + "\n"
	if !got.IsError || !strings.HasPrefix(got.Content, want) || !got.OutcomeUnknown() {
		t.Errorf("run_command hang: got %q (outcome unknown: %v), want an error starting %q, of unknown outcome", got.Content, got.OutcomeUnknown(), want)
	}
}

// What a program starts outside its process group (setsid, a daemon) is
// not killed with the group: when it still holds the output once the
// program has ended, the result says it was left running.
func TestRunCommandSaysWhatItLeftRunningOutsideItsGroup(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"sh"}, Dir: t.TempDir(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	// The sleep gives setsid the time to leave the group before sh ends.
	got := runTool(t, tool, map[string]any{"argv": []string{"sh", "-c", "setsid sleep 30 & echo $!; sleep 0.3; echo done"}})
	if pid, err := strconv.Atoi(strings.SplitN(got.Content, "\n", 3)[1]); err == nil {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	}
	const note = "\n[a process the program started outside its process group (with setsid, or as a daemon) still held its output after it ended, and was left running]\n"
	if got.IsError || !strings.HasPrefix(got.Content, "exit status 0\n") || !strings.Contains(got.Content, "\ndone\n") || !strings.HasSuffix(got.Content, note) {
		t.Errorf("run_command leaving a new session behind: got %q, want exit status 0, done and the note %q", got.Content, note)
	}

	got = runTool(t, tool, map[string]any{"argv": []string{"sh", "-c", "echo done"}})
	if strings.Contains(got.Content, "left running") {
		t.Errorf("run_command leaving nothing behind: got %q, want no note", got.Content)
	}
}
