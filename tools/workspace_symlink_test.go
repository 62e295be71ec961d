package tools

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A symlink inside the workspace changes which file a path means, without
// leaving the root: notes.md -> secrets/api-token.txt would let a read of
// notes.md return the token, and a write overwrite it, past a policy that
// denies secrets/. A path any part of which is a symlink is refused by
// every tool and preview, and nothing is read, written or deleted.
func TestWorkspaceRefusesSymlinksInside(t *testing.T) {
	root, _, tools := workspaceFixture(t, 1000)
	const token = "glpat-secret-token"
	if err := os.Mkdir(filepath.Join(root, "secrets"), 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(root, "secrets", "api-token.txt")
	if err := os.WriteFile(secret, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"notes.md": "secrets/api-token.txt", "docs": "secrets", "dir/up": ".."} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}

	for _, tc := range []struct {
		tool, path, want string
	}{
		{"workspace_read", "notes.md", `path "notes.md" is a symbolic link`},
		{"workspace_write", "notes.md", `path "notes.md" is a symbolic link`},
		{"workspace_delete", "notes.md", `path "notes.md" is a symbolic link`},
		{"workspace_list", "docs", `path "docs" is a symbolic link`},
		{"workspace_read", "docs/api-token.txt", `path "docs/api-token.txt" goes through "docs", a symbolic link`},
		{"workspace_write", "docs/api-token.txt", `path "docs/api-token.txt" goes through "docs", a symbolic link`},
		{"workspace_write", "docs/new.txt", `goes through "docs", a symbolic link`},
		{"workspace_delete", "docs/api-token.txt", `goes through "docs", a symbolic link`},
		{"workspace_read", "dir/up/secrets/api-token.txt", `goes through "dir/up", a symbolic link`},
		{"workspace_list", "dir/up/secrets", `goes through "dir/up", a symbolic link`},
	} {
		args := map[string]any{"path": tc.path}
		if tc.tool == "workspace_write" {
			args["content"] = "overwritten"
		}
		raw, _ := json.Marshal(args)
		tool := tools[tc.tool]
		if tool.Preview != nil {
			out, err := tool.Preview(context.Background(), raw)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(out, token) {
				t.Errorf("%s preview %s: got %q, %v; want an error saying %q", tc.tool, raw, out, err, tc.want)
			}
		}
		got := runTool(t, tool, args)
		if !got.IsError || !strings.Contains(got.Content, tc.want) || !strings.Contains(got.Content, "the workspace tools do not follow symbolic links") || strings.Contains(got.Content, token) {
			t.Errorf("%s %s: got %q, want an error saying %q and that symbolic links are not followed", tc.tool, raw, got.Content, tc.want)
		}
	}

	if data, err := os.ReadFile(secret); err != nil || string(data) != token {
		t.Errorf("the secret: got %q, %v; want it untouched", data, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "notes.md")); err != nil {
		t.Errorf("the link notes.md: %v, want it kept", err)
	}
	if _, err := os.Stat(filepath.Join(root, "secrets", "new.txt")); err == nil {
		t.Error("a write through the docs link created secrets/new.txt")
	}
	// A path with no symlink in it, and a new file, work as before.
	if got := runTool(t, tools["workspace_read"], map[string]any{"path": "secrets/api-token.txt"}); got.IsError || got.Content != token {
		t.Errorf("workspace_read secrets/api-token.txt: got %+v, want the file", got)
	}
	if got := runTool(t, tools["workspace_write"], map[string]any{"path": "fresh/new.txt", "content": "x"}); got.IsError {
		t.Errorf("workspace_write fresh/new.txt: got %+v, want it written", got)
	}
}

// A file of the workspace that has another name outside it (a hard link,
// which a command, a clone or a person may make) is neither read, nor
// shown in a preview, nor written through: the workspace's path would
// mean a file outside. Deleting removes the workspace's name only.
func TestWorkspaceRefusesHardLinkedFiles(t *testing.T) {
	root, outside, tools := workspaceFixture(t, 1000)
	secret := filepath.Join(outside, "secret.txt")
	if err := os.Link(secret, filepath.Join(root, "notes.md")); err != nil {
		t.Skipf("no hard links here: %v", err)
	}
	if got := runTool(t, tools["workspace_read"], map[string]any{"path": "notes.md"}); !got.IsError || strings.Contains(got.Content, "secret") || !strings.Contains(got.Content, "hard links") {
		t.Errorf("workspace_read of a hard link: %+v; want it refused, naming the hard links", got)
	}
	raw := json.RawMessage(`{"path":"notes.md","content":"overwritten"}`)
	if out, err := tools["workspace_write"].Preview(context.Background(), raw); strings.Contains(out, "secret") || err == nil && !strings.Contains(out, "hard links") {
		t.Errorf("workspace_write's preview of a hard link: %q, %v; want nothing of the file shown", out, err)
	}
	if got := runTool(t, tools["workspace_write"], map[string]any{"path": "notes.md", "content": "overwritten"}); !got.IsError || !strings.Contains(got.Content, "hard links") {
		t.Errorf("workspace_write of a hard link: %+v; want it refused", got)
	}
	if out, err := tools["workspace_delete"].Preview(context.Background(), json.RawMessage(`{"path":"notes.md"}`)); strings.Contains(out, "secret") {
		t.Errorf("workspace_delete's preview of a hard link shows the file: %q, %v", out, err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "secret" {
		t.Errorf("the file outside holds %q (%v); want it untouched", b, err)
	}
	if got := runTool(t, tools["workspace_delete"], map[string]any{"path": "notes.md"}); got.IsError {
		t.Errorf("workspace_delete of a hard link: %+v", got)
	}
	if _, err := os.Stat(secret); err != nil {
		t.Errorf("deleting the workspace's name removed the file outside: %v", err)
	}
}
