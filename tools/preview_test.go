package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
)

func previewOf(t *testing.T, tool agent.Tool, args string) string {
	t.Helper()
	if tool.Preview == nil {
		t.Fatalf("%s offers no preview", tool.Name)
	}
	out, err := tool.Preview(context.Background(), json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s preview of %s: %v", tool.Name, args, err)
	}
	return out
}

func TestWorkspacePreviews(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("one\ntwo\nthree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := WorkspaceTools(WorkspaceConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]agent.Tool{}
	for _, tool := range list {
		byName[tool.Name] = tool
	}
	write, del := byName["workspace_write"], byName["workspace_delete"]
	for _, tc := range []struct {
		name string
		tool agent.Tool
		args string
		want []string
	}{
		{"diff", write, `{"path":"a.txt","content":"one\nTWO\nthree\n"}`, []string{"--- a/a.txt\n", "+++ b/a.txt\n", "-two\n", "+TWO\n", " one\n"}},
		{"new file", write, `{"path":"dir/b.txt","content":"x\ny"}`, []string{"new file dir/b.txt, 2 lines, 3 bytes"}},
		{"same", write, `{"path":"a.txt","content":"one\ntwo\nthree\n"}`, []string{"no change"}},
		{"delete", del, `{"path":"a.txt"}`, []string{"deletes a.txt (14 bytes), starting with:\none\ntwo\nthree"}},
		{"delete missing", del, `{"path":"gone.txt"}`, []string{"does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := previewOf(t, tc.tool, tc.args)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("preview of %s is %q, want it to contain %q", tc.args, got, w)
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(root, "dir")); !os.IsNotExist(err) {
		t.Errorf("a write preview created a directory: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "a.txt")); string(got) != "one\ntwo\nthree\n" {
		t.Errorf("previews changed the file: %q", got)
	}
	if _, err := write.Preview(context.Background(), json.RawMessage(`{"path":"../x","content":""}`)); err == nil {
		t.Error("a preview of a path outside the workspace did not fail")
	}
}

// A write's preview reads at most max_file_bytes of the file it would
// overwrite: a larger file is described, not read whole and diffed.
func TestWorkspaceWritePreviewOfALargeFile(t *testing.T) {
	root := t.TempDir()
	big := strings.Repeat("line\n", 1000) // 5,000 bytes
	if err := os.WriteFile(filepath.Join(root, "app.log"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := WorkspaceTools(WorkspaceConfig{Root: root, MaxFileBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list {
		if tool.Name != "workspace_write" {
			continue
		}
		got := previewOf(t, tool, `{"path":"app.log","content":"x"}`)
		want := "overwrites app.log, a file of 5000 bytes (larger than 4096, so not compared), with 1 lines, 1 bytes"
		if got != want {
			t.Errorf("preview = %.200q, want %q", got, want)
		}
		return
	}
	t.Fatal("no workspace_write tool")
}

func TestHTTPRequestPreviewRedactsSecrets(t *testing.T) {
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"api.example.com"}})
	got := previewOf(t, tools["http_request"], `{"method":"POST","url":"https://bob:pw@api.example.com/v1/deploy","headers":{"Authorization":"Bearer s3cr3t","X-Request-Id":"42","X-Api-Token":"t0k"},"body":"{\"service\":\"api\"}"}`)
	for _, w := range []string{"POST https://bob:xxxxx@api.example.com/v1/deploy\n", "Authorization: [redacted, 13 characters]", "X-Api-Token: [redacted", "X-Request-Id: 42", `"service": "api"`} {
		if !strings.Contains(got, w) {
			t.Errorf("preview %q lacks %q", got, w)
		}
	}
	for _, secret := range []string{"s3cr3t", "t0k", ":pw@"} {
		if strings.Contains(got, secret) {
			t.Errorf("preview %q shows the secret %q", got, secret)
		}
	}
	refused := previewOf(t, tools["http_request"], `{"method":"DELETE","url":"https://other.example.org/"}`)
	if !strings.Contains(refused, "refused when run") {
		t.Errorf("preview of a request to a host not allowed does not say it will be refused: %q", refused)
	}
}

func TestRunCommandPreview(t *testing.T) {
	_, work := commandFixture(t)
	tool, err := RunCommand(CommandConfig{Allow: []string{"hello"}, Dir: work, Timeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	got := previewOf(t, tool, `{"argv":["hello","a b"],"dir":"."}`)
	for _, w := range []string{`argv: ["hello", "a b"]`, "directory: ", "timeout: 7s"} {
		if !strings.Contains(got, w) {
			t.Errorf("preview %q lacks %q", got, w)
		}
	}
}

// A write whose diff would take long (the line counts' product past
// maxDiffWork) is previewed by the span it changes, at once.
func TestPreviewWriteOfALargeFileSaysTheChangedSpan(t *testing.T) {
	root := t.TempDir()
	var old, next strings.Builder
	for i := range 6000 {
		fmt.Fprintf(&old, "line %d\n", i)
		if i >= 100 && i < 5900 {
			fmt.Fprintf(&next, "line %d\n", 5999-i) // a shuffled middle
		} else {
			fmt.Fprintf(&next, "line %d\n", i)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "app.log"), []byte(old.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &workspace{cfg: WorkspaceConfig{Root: root, MaxFileBytes: 1 << 20}}
	args, _ := json.Marshal(map[string]string{"path": "app.log", "content": next.String()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan struct{})
	var got string
	var err error
	go func() {
		defer close(done)
		got, err = w.previewWrite(ctx, args)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the preview of a 6,000-line rewrite did not end within 10s")
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := "overwrites app.log (6000 lines): lines 101 to 5900 of it (5800 lines) become 5800 lines"; !strings.Contains(got, want) {
		t.Errorf("preview %q, want %q", got, want)
	}
}

// A small change in a long file is shown as a diff, with the file's own
// line numbers; lines added at its end too.
func TestLineDiffOfASmallChangeInALongFile(t *testing.T) {
	var old strings.Builder
	for i := 1; i <= 20000; i++ {
		fmt.Fprintf(&old, "line %d\n", i)
	}
	next := strings.Replace(old.String(), "line 15000\n", "rm -rf /\n", 1)
	got, err := lineDiff("app.log", old.String(), next)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "@@ -14997,7 +14997,7 @@") || !strings.Contains(got, "-line 15000\n+rm -rf /\n") {
		t.Errorf("diff of one changed line:\n%s", got)
	}
	got, err = lineDiff("app.log", old.String(), old.String()+"a\nb\n")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(got, "@@ -19998,3 +19998,5 @@") || !strings.Contains(got, "+a\n+b\n") {
		t.Errorf("diff of two appended lines:\n%s", got)
	}
	got, err = lineDiff("f", "a\nb\nc", "a\nb\nc\n")
	if err != nil || !strings.Contains(got, "-c") || !strings.Contains(got, "+c\n") {
		t.Errorf("a newline added at the end: %q, %v", got, err)
	}
}

// A last line without a newline is shown as git shows it: on its own
// line, followed by "\ No newline at end of file", never run into the
// next line of the diff.
func TestLineDiffOfALastLineWithoutANewline(t *testing.T) {
	const mark = `\ No newline at end of file` + "\n"
	for _, tc := range []struct {
		name, old, next, want string
	}{
		{"changed, neither ending with one", "keep\nold", "keep\nnew",
			"@@ -1,2 +1,2 @@\n keep\n-old\n" + mark + "+new\n" + mark},
		{"a newline added", "a\nb", "a\nb\n",
			"@@ -1,2 +1,2 @@\n a\n-b\n" + mark + "+b\n"},
		{"the newline taken away", "a\nb\n", "a\nb",
			"@@ -1,2 +1,2 @@\n a\n-b\n+b\n" + mark},
		{"a line added after one without", "a\nb", "a\nb\nc\n",
			"@@ -1,2 +1,3 @@\n a\n-b\n" + mark + "+b\n+c\n"},
		{"unchanged context without one", "x\nkeep", "y\nkeep",
			"@@ -1,2 +1,2 @@\n-x\n+y\n keep\n" + mark},
		{"one line", "old", "new",
			"@@ -1 +1 @@\n-old\n" + mark + "+new\n" + mark},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lineDiff("f", tc.old, tc.next)
			if err != nil {
				t.Fatal(err)
			}
			want := "--- a/f\n+++ b/f\n" + tc.want
			if got != want {
				t.Errorf("diff of %q to %q:\n%s\nwant:\n%s", tc.old, tc.next, got, want)
			}
		})
	}
	// Far into a long file, the hunk's line numbers are the file's.
	var old strings.Builder
	for i := 1; i <= 100; i++ {
		fmt.Fprintf(&old, "line %d\n", i)
	}
	got, err := lineDiff("f", old.String()+"end", old.String()+"END")
	if err != nil {
		t.Fatal(err)
	}
	if want := "@@ -98,4 +98,4 @@\n line 98\n line 99\n line 100\n-end\n" + mark + "+END\n" + mark; !strings.HasSuffix(got, want) {
		t.Errorf("diff of a changed last line of a long file:\n%s\nwant it to end with:\n%s", got, want)
	}
}

// workspace_write's preview of a file whose last line has no newline
// shows that line apart from the next.
func TestWorkspaceWritePreviewOfALastLineWithoutANewline(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.txt"), []byte("keep\nold"), 0o644); err != nil {
		t.Fatal(err)
	}
	list, err := WorkspaceTools(WorkspaceConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list {
		if tool.Name != "workspace_write" {
			continue
		}
		got := previewOf(t, tool, `{"path":"a.txt","content":"keep\nnew"}`)
		if want := "-old\n\\ No newline at end of file\n+new\n\\ No newline at end of file\n"; !strings.Contains(got, want) || strings.Contains(got, "-old+new") {
			t.Errorf("preview is %q, want it to contain %q", got, want)
		}
		return
	}
	t.Fatal("no workspace_write tool")
}
