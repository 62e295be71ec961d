package tools

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The configured dir may be a link (README): /srv/app/current -> a release,
// switched at each deploy. Commands must run where it points now.
func TestRunCommandDirLinkIsFollowedAsItIsNow(t *testing.T) {
	base := t.TempDir()
	v1, v2 := filepath.Join(base, "releases", "v1"), filepath.Join(base, "releases", "v2")
	for _, d := range []string{v1, v2} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	current := filepath.Join(base, "current")
	if err := os.Symlink(v1, current); err != nil {
		t.Fatal(err)
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"/bin/pwd"}, Dir: current})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	// A deploy switches current to v2 and removes v1.
	tmp := filepath.Join(base, "current.new")
	if err := os.Symlink(v2, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	got := runTool(t, tool, map[string]any{"argv": []string{"/bin/pwd"}})
	if got.IsError || !strings.Contains(got.Content, v2) {
		t.Errorf("run_command in %s (now -> v2): got %q, want it run in %s", current, got.Content, v2)
	}
	if err := os.RemoveAll(v1); err != nil {
		t.Fatal(err)
	}
	got = runTool(t, tool, map[string]any{"argv": []string{"/bin/pwd"}})
	if got.IsError || !strings.Contains(got.Content, v2) {
		t.Errorf("run_command in %s after v1 was removed: got %q, want it run in %s", current, got.Content, v2)
	}
}

// A configured dir that no longer exists is told as such, not as a
// program that is missing.
func TestRunCommandWhoseDirIsGoneSaysSo(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "work")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"/bin/pwd"}, Dir: dir})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	got := runTool(t, tool, map[string]any{"argv": []string{"/bin/pwd"}})
	if !got.IsError || !strings.Contains(got.Content, "the configured dir "+dir+" does not exist now") {
		t.Errorf("run_command with its dir gone: got %q", got.Content)
	}
}
