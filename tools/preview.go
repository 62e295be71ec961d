package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// previewLines is how many lines of a file a delete preview shows.
const previewLines = 10

// previewWrite is workspace_write's preview: a unified diff of the file
// against the new content, or "new file, N lines". It reads, never writes,
// and at most max_file_bytes of the file: a larger one is only described.
func (w *workspace) previewWrite(ctx context.Context, raw json.RawMessage) (string, error) {
	root, args, err := w.open(raw, "")
	if err != nil {
		return "", err
	}
	defer root.Close()
	if args.Content == nil {
		return "", errors.New("content is required")
	}
	next := *args.Content
	f, fi, err := openFile(root, args.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("new file %s, %d lines, %d bytes", args.Path, countLines(next), len(next)), nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", args.Path, err)
	}
	defer f.Close()
	if !fi.Mode().IsRegular() {
		return fmt.Sprintf("cannot write %s: it is %s", args.Path, fileKind(fi)), nil
	}
	old, err := io.ReadAll(io.LimitReader(f, w.cfg.MaxFileBytes+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", args.Path, err)
	}
	if int64(len(old)) > w.cfg.MaxFileBytes {
		size := int64(len(old))
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		return fmt.Sprintf("overwrites %s, a file of %d bytes (larger than %d, so not compared), with %d lines, %d bytes", args.Path, size, w.cfg.MaxFileBytes, countLines(next), len(next)), nil
	}
	if !utf8.Valid(old) {
		return fmt.Sprintf("overwrites %s, a binary file of %d bytes, with %d lines of text", args.Path, len(old), countLines(next)), nil
	}
	if string(old) == next {
		return fmt.Sprintf("no change: %s already has this content", args.Path), nil
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return lineDiff(args.Path, string(old), next)
}

// lineDiff is the unified diff of old and next, as the file path. Only the
// part between their common first and last lines is compared (with three
// lines of context), so a small change in a long file is diffed quickly;
// a changed part too long to compare quickly (maxDiffWork) is described by
// the lines it spans. A last line without a newline is shown as git shows
// it: ended, and followed by "\ No newline at end of file".
func lineDiff(path, old, next string) (string, error) {
	a, b := markNoNewline(splitLines(old)), markNoNewline(splitLines(next))
	head := 0
	for head < len(a) && head < len(b) && a[head] == b[head] {
		head++
	}
	tail := 0
	for tail < len(a)-head && tail < len(b)-head && a[len(a)-1-tail] == b[len(b)-1-tail] {
		tail++
	}
	changedA, changedB := len(a)-head-tail, len(b)-head-tail
	if changedA*changedB > maxDiffWork {
		return fmt.Sprintf("overwrites %s (%d lines): lines %d to %d of it (%d lines) become %d lines; too many lines to show the changes line by line",
			path, len(a), head+1, head+changedA, changedA, changedB), nil
	}
	from := max(head-3, 0)
	toA, toB := min(len(a)-tail+3, len(a)), min(len(b)-tail+3, len(b))
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: a[from:toA], B: b[from:toB], FromFile: "a/" + path, ToFile: "b/" + path, Context: 3,
	})
	if err != nil || from == 0 {
		return diff, err
	}
	// The hunks' line numbers count from the part compared.
	return hunkHeader.ReplaceAllStringFunc(diff, func(h string) string {
		m := hunkHeader.FindStringSubmatch(h)
		shift := func(n string) string {
			v, _ := strconv.Atoi(n)
			return strconv.Itoa(v + from)
		}
		return "@@ -" + shift(m[1]) + m[2] + " +" + shift(m[3]) + m[4] + " @@"
	}), nil
}

// hunkHeader is a unified diff's hunk header: @@ -start[,len] +start[,len] @@.
var hunkHeader = regexp.MustCompile(`(?m)^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@`)

// splitLines splits s into lines, each with its newline but the last if s
// does not end with one.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// noNewline follows, in a diff, a file's last line that has no newline.
const noNewline = "\\ No newline at end of file\n"

// markNoNewline ends the last of lines, if it has no newline, with one and
// the line noNewline, as git's diffs do; a diff then writes it whole on
// its own line instead of running the next line on. The marked line is
// still unequal to the same text with a newline (a newline added or
// taken away at the end is a change), and equal to the same last line
// without one. It changes lines in place and returns them.
func markNoNewline(lines []string) []string {
	if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		lines[n-1] += "\n" + noNewline
	}
	return lines
}

// maxDiffWork bounds the product of the two sides' line counts that
// previewWrite diffs line by line: about 2,000 lines each, a few tens of
// milliseconds.
const maxDiffWork = 4_000_000

// previewDelete is workspace_delete's preview: what is there, its size and
// first lines.
func (w *workspace) previewDelete(_ context.Context, raw json.RawMessage) (string, error) {
	root, args, err := w.open(raw, "")
	if err != nil {
		return "", err
	}
	defer root.Close()
	fi, err := root.Lstat(args.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("%s does not exist: nothing to delete", args.Path), nil
	}
	if err != nil {
		return "", fmt.Errorf("stat %s: %w", args.Path, err)
	}
	switch {
	case fi.IsDir():
		return fmt.Sprintf("deletes the directory %s (only if it is empty)", args.Path), nil
	case !fi.Mode().IsRegular():
		out := fmt.Sprintf("deletes %s, %s", args.Path, fileKind(fi))
		if fi.Mode()&fs.ModeSymlink != 0 {
			out += " (the link, not what it points to)"
		}
		return out, nil
	}
	f, _, err := openFile(root, args.Path)
	if err != nil {
		return "", fmt.Errorf("open %s: %w", args.Path, err)
	}
	defer f.Close()
	head, err := io.ReadAll(io.LimitReader(f, 4<<10))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", args.Path, err)
	}
	out := fmt.Sprintf("deletes %s (%d bytes)", args.Path, fi.Size())
	if !validPrefix(head) {
		return out + ", a binary file", nil
	}
	lines := strings.SplitAfter(string(head), "\n")
	if len(lines) > previewLines {
		lines = lines[:previewLines]
	}
	first := strings.TrimRight(strings.Join(lines, ""), "\n")
	if first == "" {
		return out + ", empty", nil
	}
	return out + ", starting with:\n" + first, nil
}

// validPrefix reports whether b is UTF-8 text, allowing a rune cut at its
// end.
func validPrefix(b []byte) bool {
	for i := 0; i < utf8.UTFMax && len(b) > 0; i++ {
		if utf8.Valid(b) {
			return true
		}
		b = b[:len(b)-1]
	}
	return utf8.Valid(b)
}

func countLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// secretHeaders are the request headers whose values a preview hides.
var secretHeaders = []string{"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"}

// secretHeader reports whether a header's value is a secret: a known one,
// or one whose name says token, secret, key or password.
func secretHeader(name string) bool {
	n := strings.ToLower(name)
	if slices.Contains(secretHeaders, n) {
		return true
	}
	for _, w := range []string{"token", "secret", "password", "key"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// previewRequest is http_request's preview: the request line, the headers
// with secrets redacted (and the URL's password), and the body.
func (h *httpTool) previewRequest(_ context.Context, raw json.RawMessage) (string, error) {
	var args httpArgs
	if err := decodeArgs(raw, &args); err != nil {
		return "", err
	}
	if args.Method == "" {
		args.Method = http.MethodGet
	}
	u, err := url.Parse(args.URL)
	if err != nil {
		return "", fmt.Errorf("invalid url: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", args.Method, u.Redacted())
	if err := h.check(u); err != nil {
		fmt.Fprintf(&b, "(refused when run: %v)\n", err)
	}
	names := make([]string, 0, len(args.Headers))
	for k := range args.Headers {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		v := args.Headers[k]
		if secretHeader(k) {
			v = "[redacted, " + strconv.Itoa(len(v)) + " characters]"
		}
		fmt.Fprintf(&b, "%s: %s\n", k, v)
	}
	if args.Body != "" {
		body := args.Body
		var pretty bytes.Buffer
		if json.Indent(&pretty, []byte(body), "", "  ") == nil {
			body = pretty.String()
		}
		fmt.Fprintf(&b, "\n%s\n", body)
	}
	return b.String(), nil
}

// previewCommand is run_command's preview: the program and its arguments
// (quoted), the directory it runs in and its timeout.
func (r *commandTool) previewCommand(_ context.Context, raw json.RawMessage) (string, error) {
	var args commandArgs
	if err := decodeArgs(raw, &args); err != nil {
		return "", err
	}
	if len(args.Argv) == 0 {
		return "", errors.New("argv must name a program")
	}
	quoted := make([]string, len(args.Argv))
	for i, a := range args.Argv {
		quoted[i] = strconv.Quote(a)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "argv: [%s]\n", strings.Join(quoted, ", "))
	if _, err := r.resolve(args.Argv[0]); err != nil {
		fmt.Fprintf(&b, "(refused when run: %v)\n", err)
	}
	dir, err := r.workDir(args.Dir)
	if err != nil {
		fmt.Fprintf(&b, "directory: %q (refused when run: %v)\n", args.Dir, err)
	} else {
		fmt.Fprintf(&b, "directory: %s\n", dir)
	}
	fmt.Fprintf(&b, "timeout: %s\n", r.cfg.Timeout)
	return b.String(), nil
}
