package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

func workspaceFixture(t *testing.T, maxBytes int64) (root, outside string, tools map[string]agent.Tool) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(root, "dir"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		filepath.Join(root, "a.txt"):           "alpha",
		filepath.Join(root, "dir", "b.txt"):    "beta",
		filepath.Join(root, "big.txt"):         strings.Repeat("x", 100),
		filepath.Join(root, "bin.dat"):         "\xff\xfe\x00",
		filepath.Join(outside, "secret.txt"):   "secret",
		filepath.Join(root, "dir", "gone.txt"): "",
	}
	for p, c := range files {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(root, "secret-link")); err != nil {
		t.Fatal(err)
	}
	ts, err := WorkspaceTools(WorkspaceConfig{Root: root, MaxFileBytes: maxBytes})
	if err != nil {
		t.Fatalf("WorkspaceTools: %v", err)
	}
	reg := agent.NewRegistry()
	tools = map[string]agent.Tool{}
	for _, tool := range ts {
		if err := reg.Register(tool); err != nil {
			t.Fatalf("Register(%s): %v", tool.Name, err)
		}
		tools[tool.Name] = tool
	}
	return root, outside, tools
}

func TestWorkspaceTools(t *testing.T) {
	root, outside, tools := workspaceFixture(t, 50)
	for _, tc := range []struct {
		name      string
		tool      string
		args      map[string]any
		want      string // the whole content, or a substring when prefixed by "~"
		wantError bool
	}{
		{"list root", "workspace_list", map[string]any{},
			"a.txt (5 bytes)\nbig.txt (100 bytes)\nbin.dat (3 bytes)\ndir/\nout -> " + outside + "\nsecret-link -> " + filepath.Join(outside, "secret.txt") + "\n", false},
		{"list dir", "workspace_list", map[string]any{"path": "dir"}, "b.txt (4 bytes)\ngone.txt (0 bytes)\n", false},
		{"read", "workspace_read", map[string]any{"path": "a.txt"}, "alpha", false},
		{"read nested", "workspace_read", map[string]any{"path": "dir/../dir/b.txt"}, "beta", false},
		{"read absolute inside", "workspace_read", map[string]any{"path": filepath.Join(root, "a.txt")}, "alpha", false},
		{"read truncated", "workspace_read", map[string]any{"path": "big.txt"},
			strings.Repeat("x", 50) + "\n[file truncated: only the first 50 bytes are shown]\n", false},
		{"read binary", "workspace_read", map[string]any{"path": "bin.dat"}, "~not a text file", true},
		{"read directory", "workspace_read", map[string]any{"path": "dir"}, "~it is a directory", true},
		{"read missing", "workspace_read", map[string]any{"path": "nope.txt"}, `cannot read "nope.txt": no such file or directory`, true},
		{"read dot-dot", "workspace_read", map[string]any{"path": "../outside/secret.txt"}, "~leaves the workspace", true},
		{"read absolute outside", "workspace_read", map[string]any{"path": filepath.Join(outside, "secret.txt")}, "~is outside the workspace", true},
		{"read through dir symlink", "workspace_read", map[string]any{"path": "out/secret.txt"}, `path "out/secret.txt" goes through "out", a symbolic link; the workspace tools do not follow symbolic links`, true},
		{"read file symlink", "workspace_read", map[string]any{"path": "secret-link"}, `path "secret-link" is a symbolic link; the workspace tools do not follow symbolic links`, true},
		{"list through symlink", "workspace_list", map[string]any{"path": "out"}, "~is a symbolic link", true},
		{"write through symlink", "workspace_write", map[string]any{"path": "out/new.txt", "content": "x"}, `path "out/new.txt" goes through "out", a symbolic link; the workspace tools do not follow symbolic links`, true},
		{"write dot-dot", "workspace_write", map[string]any{"path": "../new.txt", "content": "x"}, "~leaves the workspace", true},
		{"write too big", "workspace_write", map[string]any{"path": "new.txt", "content": strings.Repeat("y", 51)}, "~51 bytes is more than the limit of 50", true},
		{"write", "workspace_write", map[string]any{"path": "new/deep/c.txt", "content": "gamma"}, "wrote 5 bytes to new/deep/c.txt", false},
		{"read written", "workspace_read", map[string]any{"path": "new/deep/c.txt"}, "gamma", false},
		{"delete", "workspace_delete", map[string]any{"path": "dir/gone.txt"}, "deleted dir/gone.txt", false},
		{"delete again", "workspace_delete", map[string]any{"path": "dir/gone.txt"}, "dir/gone.txt does not exist: there is nothing to delete", false},
		{"delete root", "workspace_delete", map[string]any{"path": "."}, "cannot delete the workspace root", true},
		{"delete through symlink", "workspace_delete", map[string]any{"path": "out/secret.txt"}, "~goes through \"out\", a symbolic link", true},
		{"delete non-empty dir", "workspace_delete", map[string]any{"path": "dir"}, `cannot delete "dir": directory not empty`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runTool(t, tools[tc.tool], tc.args)
			if sub, ok := strings.CutPrefix(tc.want, "~"); ok {
				if !strings.Contains(got.Content, sub) {
					t.Errorf("%s %v: got %q, want it to contain %q", tc.tool, tc.args, got.Content, sub)
				}
			} else if got.Content != tc.want {
				t.Errorf("%s %v: got %q, want %q", tc.tool, tc.args, got.Content, tc.want)
			}
			if got.IsError != tc.wantError {
				t.Errorf("%s %v: got IsError %v, want %v", tc.tool, tc.args, got.IsError, tc.wantError)
			}
		})
	}
	for _, p := range []string{filepath.Join(outside, "secret.txt"), filepath.Join(root, "dir", "b.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: got %v, want it untouched", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
		t.Errorf("a write through a symlink created a file outside the workspace")
	}
}

// A write over max_file_bytes is refused with the schema's checks, before
// any card, with the handler's words, rather than being approved and then
// failing. A write of the limit exactly is taken.
func TestWorkspaceWriteOverTheLimitIsRefusedBeforeTheCard(t *testing.T) {
	root, _, tools := workspaceFixture(t, 10)
	reg := registered(t, tools)
	const want = `cannot write "notes.md": 30 bytes is more than the limit of 10`
	args := map[string]any{"path": "notes.md", "content": "this is longer than ten bytes\n"}
	raw, _ := json.Marshal(args)
	if err := reg.Validate("workspace_write", raw); err == nil || err.Error() != want {
		t.Errorf("Validate(%s) = %v, want %q", raw, err, want)
	}
	if got := runTool(t, tools["workspace_write"], args); !got.IsError || got.Content != want {
		t.Errorf("workspace_write %s: got %q (error %v), want %q", raw, got.Content, got.IsError, want)
	}
	if _, err := os.Stat(filepath.Join(root, "notes.md")); err == nil {
		t.Error("the refused write created notes.md")
	}
	exact, _ := json.Marshal(map[string]any{"path": "notes.md", "content": "ten bytes\n"})
	if err := reg.Validate("workspace_write", exact); err != nil {
		t.Errorf("Validate(%s) = %v, want a write of the limit exactly taken", exact, err)
	}
}

func TestWorkspaceHints(t *testing.T) {
	_, _, tools := workspaceFixture(t, 10)
	for name, wantReadOnly := range map[string]bool{
		"workspace_list": true, "workspace_read": true, "workspace_write": false, "workspace_delete": false,
	} {
		h := tools[name].Annotations
		destructive := h.Destructive == nil || *h.Destructive
		if h.ReadOnly != wantReadOnly || destructive == wantReadOnly {
			t.Errorf("%s hints: got %+v, want read-only %v and destructive %v", name, h, wantReadOnly, !wantReadOnly)
		}
	}
}

func TestWorkspaceRootCreated(t *testing.T) {
	root := filepath.Join(t.TempDir(), "a", "workspace")
	if _, err := WorkspaceTools(WorkspaceConfig{Root: root}); err != nil {
		t.Fatalf("WorkspaceTools with a missing root: %v", err)
	}
	fi, err := os.Stat(root)
	if err != nil || !fi.IsDir() {
		t.Fatalf("the root was not created: %v", err)
	}
	if perm := fi.Mode().Perm(); perm&^0o750 != 0 {
		t.Errorf("root permissions: got %v, want at most 0750", perm)
	}
}

func TestWorkspaceRootNotADirectory(t *testing.T) {
	root := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(root, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := WorkspaceTools(WorkspaceConfig{Root: root})
	if err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("WorkspaceTools with a file as root: got %v, want a not a directory error", err)
	}
}
