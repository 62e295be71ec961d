//go:build unix

package tools

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A named pipe in the workspace (which something else put there) is
// refused by the workspace tools and described by their previews, at
// once: opening one for reading or writing would wait for the other end.
func TestNamedPipeInTheWorkspace(t *testing.T) {
	root, _, tools := workspaceFixture(t, 1<<10)
	if err := syscall.Mkfifo(filepath.Join(root, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, tt := range []struct{ tool, args, want string }{
			{"workspace_read", `{"path":"pipe"}`, `cannot read "pipe": it is a named pipe`},
			{"workspace_write", `{"path":"pipe","content":"x"}`, `cannot write "pipe": it is a named pipe`},
			{"workspace_list", `{"path":"pipe"}`, `cannot list "pipe": it is a named pipe`},
		} {
			res, err := tools[tt.tool].Handler(ctx, json.RawMessage(tt.args))
			if err != nil || !res.IsError || !strings.Contains(res.Content, tt.want) {
				t.Errorf("%s %s = %+v, %v; want an error with %q", tt.tool, tt.args, res, err, tt.want)
			}
		}
		for _, tt := range []struct{ tool, args, want string }{
			{"workspace_write", `{"path":"pipe","content":"x"}`, "cannot write pipe: it is a named pipe"},
			{"workspace_delete", `{"path":"pipe"}`, "deletes pipe, a named pipe"},
		} {
			out, err := tools[tt.tool].Preview(ctx, json.RawMessage(tt.args))
			if err != nil || !strings.Contains(out, tt.want) {
				t.Errorf("preview of %s %s = %q, %v; want %q", tt.tool, tt.args, out, err, tt.want)
			}
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("a workspace tool waited on a named pipe")
	}
}
