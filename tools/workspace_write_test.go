//go:build unix

package tools

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// A workspace_write that fails part way (a full disk, a quota) leaves the
// file as it was: the model is told the write failed, and it did nothing.
// The write runs in a process of its own whose file size limit makes it
// fail after 8 bytes, as a full disk would.
func TestWorkspaceWriteThatFailsKeepsTheOldContent(t *testing.T) {
	if root := os.Getenv("TOOLGATE_TEST_FAILING_WRITE"); root != "" {
		lim := syscall.Rlimit{Cur: 8, Max: 8}
		if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
			t.Fatal(err)
		}
		if res := runTool(t, writeTool(t, root), map[string]any{"path": "deploy.yaml", "content": "replicas: 5\nimage: app:v2\n"}); !res.IsError {
			t.Fatalf("a write past the size limit: got %+v, want an error", res)
		}
		return
	}
	root := t.TempDir()
	const old = "replicas: 3\nimage: app:v1\n"
	if err := os.WriteFile(filepath.Join(root, "deploy.yaml"), []byte(old), 0o640); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkspaceWriteThatFailsKeepsTheOldContent$")
	cmd.Env = append(os.Environ(), "TOOLGATE_TEST_FAILING_WRITE="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the failing write: %v\n%s", err, out)
	}
	got, _ := os.ReadFile(filepath.Join(root, "deploy.yaml"))
	if string(got) != old {
		t.Errorf("after a failed write deploy.yaml holds %q, want the old content %q", got, old)
	}
	entries, _ := os.ReadDir(root)
	if len(entries) != 1 {
		t.Errorf("the workspace holds %d entries after the failed write, want only deploy.yaml", len(entries))
	}
}

// A write replaces the file whole, keeping its mode; one the bot may not
// write in place is refused, as before.
func TestWorkspaceWriteKeepsTheModeAndRefusesAReadOnlyFile(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Log("running as root, which may write any file: the read-only case is not checked")
	}
	root := t.TempDir()
	write := writeTool(t, root)
	p := filepath.Join(root, "run.sh")
	if err := os.WriteFile(p, []byte("old"), 0o750); err != nil {
		t.Fatal(err)
	}
	if res := runTool(t, write, map[string]any{"path": "run.sh", "content": "new"}); res.IsError {
		t.Fatalf("write: %+v", res)
	}
	fi, err := os.Stat(p)
	if got, _ := os.ReadFile(p); err != nil || string(got) != "new" || fi.Mode().Perm() != 0o750 {
		t.Errorf("after the write run.sh holds %q with mode %v, want \"new\" with 0750", got, fi.Mode().Perm())
	}
	if os.Geteuid() == 0 {
		return
	}
	if err := os.Chmod(p, 0o444); err != nil {
		t.Fatal(err)
	}
	if res := runTool(t, write, map[string]any{"path": "run.sh", "content": "newer"}); !res.IsError || !strings.Contains(res.Content, "permission denied") {
		t.Errorf("a write of a read-only file: got %+v, want it refused", res)
	}
}

// A file a service owns (its config, group-writable for the bot) keeps its
// owner, group and mode after a write; a file whose name is as long as a
// name may be is written too.
func TestWorkspaceWriteKeepsTheOwnerAndTakesLongNames(t *testing.T) {
	root := t.TempDir()
	write := writeTool(t, root)
	long := strings.Repeat("a", 250) + ".yaml"
	if err := os.WriteFile(filepath.Join(root, long), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := runTool(t, write, map[string]any{"path": long, "content": "new"}); res.IsError {
		t.Errorf("write of an existing file with a %d-byte name: %s", len(long), res.Content)
	}
	p := filepath.Join(root, "app.conf")
	if err := os.WriteFile(p, []byte("old"), 0o660); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o660); err != nil { // whatever the umask
		t.Fatal(err)
	}
	uid, gid := os.Getuid(), os.Getgid()
	if os.Geteuid() == 0 {
		uid, gid = 1234, 1234 // a service's
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	if res := runTool(t, write, map[string]any{"path": "app.conf", "content": "new"}); res.IsError {
		t.Fatalf("write: %s", res.Content)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if got, _ := os.ReadFile(p); string(got) != "new" || int(st.Uid) != uid || int(st.Gid) != gid || fi.Mode().Perm() != 0o660 {
		t.Errorf("after the write app.conf holds %q, owned by %d:%d with mode %v; want \"new\", %d:%d, 0660", got, st.Uid, st.Gid, fi.Mode().Perm(), uid, gid)
	}
}

// The bot rewrites a set-user-ID file with the model's content: the new
// content must not run with the file owner's privileges.
func TestWorkspaceWriteDropsSetuid(t *testing.T) {
	root := t.TempDir()
	write := writeTool(t, root)
	p := filepath.Join(root, "helper")
	if err := os.WriteFile(p, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o755|fs.ModeSetuid|fs.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if res := runTool(t, write, map[string]any{"path": "helper", "content": "#!/bin/sh\nid\n"}); res.IsError {
		t.Fatalf("write: %s", res.Content)
	}
	fi, _ := os.Stat(p)
	if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
		t.Errorf("after the bot (uid %d) rewrote it, helper is %v: its new content runs with its owner's privileges", os.Geteuid(), fi.Mode())
	}
}

// writeTool is the workspace_write tool of a workspace at root.
func writeTool(t *testing.T, root string) agent.Tool {
	t.Helper()
	tools, err := WorkspaceTools(WorkspaceConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools {
		if tool.Name == "workspace_write" {
			return tool
		}
	}
	t.Fatal("no workspace_write")
	return agent.Tool{}
}
