package tools

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// maxListEntries caps what workspace_list returns.
const maxListEntries = 1000

// WorkspaceTools returns the tools that work on files under c.Root:
// workspace_list and workspace_read (read-only), workspace_write and
// workspace_delete (destructive). Paths are relative to the root, in their
// plain form (see checkPath: checked before the policy judges the call).
// A path any part of which is a symbolic link is refused (see
// checkNoSymlink): a link inside the root changes which file a path means,
// so the policy would judge one file and the tool use another. Every
// access goes through [os.Root] too, so a path that leaves the root, by
// ".." or through a symlink, is refused. Reads longer
// than c.MaxFileBytes are truncated with a note; larger writes are refused,
// before the policy judges the call.
// The root is created, with mode 0750, if it does not exist. Zero settings
// take their defaults.
func WorkspaceTools(c WorkspaceConfig) ([]agent.Tool, error) {
	c.MaxFileBytes = orDefault(c.MaxFileBytes, DefaultWorkspaceMaxFileBytes)
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	c.Root = filepath.Clean(c.Root)
	if _, err := os.Lstat(c.Root); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(c.Root, 0o750); err != nil {
			return nil, fmt.Errorf("workspace: create root: %w", err)
		}
	}
	if fi, err := os.Stat(c.Root); err != nil {
		return nil, fmt.Errorf("workspace: root: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("workspace: root %q is not a directory", c.Root)
	}
	w := &workspace{cfg: c}
	readOnly := approvals.Hints{ReadOnly: true, Destructive: ptr(false), Idempotent: true}
	return []agent.Tool{
		{
			Name:        "workspace_list",
			Description: "List a directory of the workspace: one entry a line, directories ending in /, files with their size.",
			Schema:      schemaWorkspaceList,
			Annotations: readOnly,
			Handler:     w.list,
			Check:       checkPath,
		},
		{
			Name:        "workspace_read",
			Description: fmt.Sprintf("Read a text file of the workspace (at most %d bytes are returned).", c.MaxFileBytes),
			Schema:      schemaWorkspaceRead,
			Annotations: readOnly,
			Handler:     w.read,
			Check:       checkPath,
		},
		{
			Name:        "workspace_write",
			Description: fmt.Sprintf("Create or overwrite a file of the workspace with the given text, creating parent directories (at most %d bytes).", c.MaxFileBytes),
			Schema:      schemaWorkspaceWrite,
			Annotations: approvals.Hints{Destructive: ptr(true), Idempotent: true},
			Handler:     w.write,
			Check:       w.checkWrite,
			Preview:     w.previewWrite,
		},
		{
			Name:        "workspace_delete",
			Description: "Delete a file or an empty directory of the workspace.",
			Schema:      schemaWorkspaceDelete,
			Annotations: approvals.Hints{Destructive: ptr(true), Idempotent: true},
			Handler:     w.delete,
			Check:       checkPath,
			Preview:     w.previewDelete,
		},
	}, nil
}

type workspace struct {
	cfg WorkspaceConfig
}

type pathArgs struct {
	Path    string  `json:"path"`
	Content *string `json:"content"`
}

// open parses the arguments, opens the root and returns the path relative
// to it, refusing one through a symbolic link (see checkNoSymlink). The
// caller closes the root.
func (w *workspace) open(raw json.RawMessage, def string) (*os.Root, pathArgs, error) {
	var args pathArgs
	if err := decodeArgs(raw, &args); err != nil {
		return nil, args, err
	}
	if args.Path == "" {
		args.Path = def
	}
	if args.Path == "" {
		return nil, args, errors.New("path is required")
	}
	rel, err := w.rel(args.Path)
	if err != nil {
		return nil, args, err
	}
	args.Path = rel
	root, err := os.OpenRoot(w.cfg.Root)
	if err != nil {
		return nil, args, fmt.Errorf("open workspace: %w", err)
	}
	if err := checkNoSymlink(root, args.Path); err != nil {
		root.Close()
		return nil, args, err
	}
	return root, args, nil
}

// checkNoSymlink refuses rel, a clean path relative to root, if any of its
// parts that exist is a symbolic link, the last one included (see
// firstSymlink). os.Root keeps every access inside the root, but a link
// inside it still changes which file a path means: notes.md ->
// secrets/api-token.txt would let a read of notes.md return the token, and
// a write overwrite it, past a policy rule that denies secrets/. (A link
// put in place after the check, by something other than these tools, is
// still kept inside the root by os.Root.)
func checkNoSymlink(root *os.Root, rel string) error {
	switch link := firstSymlink(root, rel); link {
	case "":
		return nil
	case rel:
		return fmt.Errorf("path %q is a symbolic link; the workspace tools do not follow symbolic links", rel)
	default:
		return fmt.Errorf("path %q goes through %q, a symbolic link; the workspace tools do not follow symbolic links", rel, link)
	}
}

// firstSymlink returns the first of the parts of rel, a clean path
// relative to root, that is a symbolic link (rel itself if only its last
// part is), or "" if none of those that exist is. Each part is looked at
// with Lstat, from the first, so each is seen as it is, through parts
// already found to be directories. A part that is missing (a file to be
// written) or not reachable ends the look: the caller's own access says
// what is wrong.
func firstSymlink(root *os.Root, rel string) string {
	if rel == "." {
		return ""
	}
	part := ""
	for name := range strings.SplitSeq(rel, string(filepath.Separator)) {
		part = filepath.Join(part, name)
		fi, err := root.Lstat(part)
		if err != nil {
			return ""
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return part
		}
	}
	return ""
}

// checkPath refuses a path not written in its one plain form, relative
// to the root: an absolute path, ".." (tmp/../x), "." (./x), doubled or
// trailing slashes. The policy judges the path as written, so a rule on
// args.path ("tmp/ may be written without asking", "secrets/ is denied")
// must see the path the tool will use, not another spelling of it.
func checkPath(raw json.RawMessage) error {
	var args pathArgs
	if err := json.Unmarshal(raw, &args); err != nil || args.Path == "" {
		return nil // the handler says what is wrong
	}
	p := args.Path
	switch {
	case filepath.IsAbs(p):
		return fmt.Errorf("path %q: give the path relative to the workspace root, not an absolute one", p)
	case !filepath.IsLocal(p):
		return fmt.Errorf("path %q leaves the workspace", p)
	case filepath.Clean(p) != p:
		return fmt.Errorf("path %q: write it plainly, as %q (no ., .., doubled or trailing slashes)", p, filepath.Clean(p))
	}
	return nil
}

// checkWrite is workspace_write's check: a path in its plain form (see
// checkPath), and content within max_file_bytes, which the write would
// refuse once approved.
func (w *workspace) checkWrite(raw json.RawMessage) error {
	if err := checkPath(raw); err != nil {
		return err
	}
	var args pathArgs
	if err := json.Unmarshal(raw, &args); err != nil || args.Path == "" || args.Content == nil {
		return nil // the handler says what is wrong
	}
	return w.checkSize(args.Path, *args.Content)
}

// checkSize refuses content longer than max_file_bytes, to be written to
// path.
func (w *workspace) checkSize(path, content string) error {
	if n := int64(len(content)); n > w.cfg.MaxFileBytes {
		return fmt.Errorf("cannot write %q: %d bytes is more than the limit of %d", path, n, w.cfg.MaxFileBytes)
	}
	return nil
}

// rel turns p into a path relative to the root, refusing one that leaves
// it lexically; os.Root catches symlinks that do.
func (w *workspace) rel(p string) (string, error) {
	if filepath.IsAbs(p) {
		r, err := filepath.Rel(w.cfg.Root, filepath.Clean(p))
		if err != nil || !filepath.IsLocal(r) {
			return "", fmt.Errorf("path %q is outside the workspace %s", p, w.cfg.Root)
		}
		return r, nil
	}
	if !filepath.IsLocal(p) {
		return "", fmt.Errorf("path %q leaves the workspace", p)
	}
	return filepath.Clean(p), nil
}

func (w *workspace) list(_ context.Context, raw json.RawMessage) (agent.Result, error) {
	root, args, err := w.open(raw, ".")
	if err != nil {
		return errorResult("%v", err), nil
	}
	defer root.Close()
	// Opened without waiting (see openFile): a plain open of a named pipe
	// would wait for a writer, with nothing to end the wait.
	f, fi, err := openFile(root, args.Path)
	if err != nil {
		return fsError("list", args.Path, err), nil
	}
	defer f.Close()
	switch {
	case fi.Mode().IsRegular():
		return errorResult("cannot list %q: it is a file, not a directory; use workspace_read", args.Path), nil
	case !fi.IsDir():
		return errorResult("cannot list %q: it is %s", args.Path, fileKind(fi)), nil
	}
	entries, err := f.ReadDir(maxListEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fsError("list", args.Path, err), nil
	}
	more := len(entries) > maxListEntries
	if more {
		entries = entries[:maxListEntries]
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	var b strings.Builder
	for _, e := range entries {
		switch {
		case e.IsDir():
			fmt.Fprintf(&b, "%s/\n", e.Name())
		case e.Type()&fs.ModeSymlink != 0:
			target, _ := root.Readlink(filepath.Join(args.Path, e.Name()))
			fmt.Fprintf(&b, "%s -> %s\n", e.Name(), target)
		default:
			var size int64
			if fi, err := e.Info(); err == nil {
				size = fi.Size()
			}
			fmt.Fprintf(&b, "%s (%d bytes)\n", e.Name(), size)
		}
	}
	if more {
		fmt.Fprintf(&b, "[only the first %d entries are shown]\n", maxListEntries)
	}
	if len(entries) == 0 {
		b.WriteString("(empty directory)\n")
	}
	return agent.Result{Content: b.String()}, nil
}

func (w *workspace) read(_ context.Context, raw json.RawMessage) (agent.Result, error) {
	root, args, err := w.open(raw, "")
	if err != nil {
		return errorResult("%v", err), nil
	}
	defer root.Close()
	f, fi, err := openFile(root, args.Path)
	if err != nil {
		return fsError("read", args.Path, err), nil
	}
	defer f.Close()
	switch {
	case fi.IsDir():
		return errorResult("cannot read %q: it is a directory; use workspace_list", args.Path), nil
	case !fi.Mode().IsRegular():
		return errorResult("cannot read %q: it is %s", args.Path, fileKind(fi)), nil
	}
	data, err := io.ReadAll(io.LimitReader(f, w.cfg.MaxFileBytes+1))
	if err != nil {
		return fsError("read", args.Path, err), nil
	}
	truncated := int64(len(data)) > w.cfg.MaxFileBytes
	if truncated {
		data = data[:w.cfg.MaxFileBytes]
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	if !utf8.Valid(data) {
		return errorResult("cannot read %q: it is not a text file", args.Path), nil
	}
	content := string(data)
	if truncated {
		content += fmt.Sprintf("\n[file truncated: only the first %d bytes are shown]\n", len(data))
	}
	return agent.Result{Content: content}, nil
}

func (w *workspace) write(_ context.Context, raw json.RawMessage) (agent.Result, error) {
	root, args, err := w.open(raw, "")
	if err != nil {
		return errorResult("%v", err), nil
	}
	defer root.Close()
	if args.Content == nil {
		return errorResult("content is required"), nil
	}
	if err := w.checkSize(args.Path, *args.Content); err != nil {
		return errorResult("%v", err), nil
	}
	if dir := filepath.Dir(args.Path); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fsError("write", args.Path, err), nil
		}
	}
	mode := fs.FileMode(0o644)
	var existing fs.FileInfo
	switch fi, err := root.Lstat(args.Path); {
	case err == nil && !fi.Mode().IsRegular():
		return errorResult("cannot write %q: it is %s", args.Path, fileKind(fi)), nil
	case err == nil && hardLinked(fi):
		return fsError("write", args.Path, errHardLinked), nil
	case err == nil:
		// Written only if it could be written in place: the rename
		// below would replace a file the bot may not write.
		f, err := root.OpenFile(args.Path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fsError("write", args.Path, err), nil
		}
		f.Close()
		// Not setuid or setgid: content the model wrote runs with no
		// one's privileges, as a write by anyone but root leaves it.
		mode = fi.Mode() & (fs.ModePerm | fs.ModeSticky)
		existing = fi
	case !errors.Is(err, fs.ErrNotExist):
		return fsError("write", args.Path, err), nil
	}
	// Written whole to a file of its own beside it, then renamed over it:
	// a write that fails part way (a full disk) leaves the file as it was,
	// never emptied or cut. The rename replaces the name, never writing
	// through a link that took the file's place meanwhile.
	// The new file keeps the owner and group of the one it replaces (a
	// service's config it must still read); where the bot may not give
	// it them, the file is written in place, as it can be.
	tmp := filepath.Join(filepath.Dir(args.Path), ".toolgate-"+rand.Text()[:12]+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return fsError("write", args.Path, err), nil
	}
	if existing != nil {
		if uid, gid, ok := ownerOf(existing); ok && f.Chown(uid, gid) != nil {
			f.Close()
			_ = root.Remove(tmp)
			return writeInPlace(root, args.Path, *args.Content), nil
		}
	}
	_, err = f.Write([]byte(*args.Content))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The mode as asked, whatever the umask made of it.
		err = root.Chmod(tmp, mode)
	}
	if err == nil {
		err = root.Rename(tmp, args.Path)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fsError("write", args.Path, err), nil
	}
	return agent.Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(*args.Content), args.Path)}, nil
}

// writeInPlace writes content over the regular file path of root, as a
// file whose owner the bot may not give a new one is written: emptied,
// then written (a write that fails part way leaves it cut).
func writeInPlace(root *os.Root, path, content string) agent.Result {
	// Not waiting on a FIFO for a reader, should one take the file's
	// place meanwhile.
	f, err := root.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fsError("write", path, err)
	}
	fi, err := f.Stat()
	switch {
	case err != nil || !fi.Mode().IsRegular():
		f.Close()
		return errorResult("cannot write %q: it is %s", path, fileKind(fi))
	case hardLinked(fi):
		f.Close()
		return fsError("write", path, errHardLinked)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.Write([]byte(content))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fsError("write", path, err)
	}
	return agent.Result{Content: fmt.Sprintf("wrote %d bytes to %s", len(content), path)}
}

func (w *workspace) delete(_ context.Context, raw json.RawMessage) (agent.Result, error) {
	root, args, err := w.open(raw, "")
	if err != nil {
		return errorResult("%v", err), nil
	}
	defer root.Close()
	if args.Path == "." {
		return errorResult("cannot delete the workspace root"), nil
	}
	if err := root.Remove(args.Path); errors.Is(err, fs.ErrNotExist) {
		// As a delete run again (the tool is idempotent: one a crash cut
		// short runs again after the restart) finds it: gone, which is
		// what was asked. Not an error, which would say it failed.
		return agent.Result{Content: args.Path + " does not exist: there is nothing to delete"}, nil
	} else if err != nil {
		return fsError("delete", args.Path, err), nil
	}
	return agent.Result{Content: "deleted " + args.Path}, nil
}

// fsError words a file system error for the model.
func fsError(op, path string, err error) agent.Result {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return errorResult("cannot %s %q: no such file or directory", op, path)
	case errors.Is(err, fs.ErrPermission):
		return errorResult("cannot %s %q: permission denied", op, path)
	case strings.Contains(err.Error(), "path escapes from parent"):
		// os.Root's refusal; the os package does not export it.
		return errorResult("cannot %s %q: it leads outside the workspace through a symlink", op, path)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return errorResult("cannot %s %q: %v", op, path, err)
}

// openFile opens name in root for reading without waiting: a FIFO (which
// something else wrote into the workspace) would block an open until a
// writer came, and the reads of a regular file or a directory are the
// same. It returns the file's mode too; the caller refuses what it cannot
// use (what is not a regular file, or not a directory).
//
// A regular file with other names (hard links) is refused with
// errHardLinked: one may be outside the workspace.
func openFile(root *os.Root, name string) (*os.File, fs.FileInfo, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && hardLinked(fi) {
		err = errHardLinked
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// errHardLinked refuses a file that has other names than the one given.
var errHardLinked = errors.New("the file has other names (hard links), which may be outside the workspace")

// fileKind names what a file that is not a regular one is.
func fileKind(fi fs.FileInfo) string {
	if fi == nil {
		return "not a regular file"
	}
	switch m := fi.Mode(); {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "not a regular file"
}

// schemaWorkspaceList is the argument schema of workspace_list.
var schemaWorkspaceList = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Directory relative to the workspace root. Default: the root."}
  },
  "additionalProperties": false
}`)

// schemaWorkspaceRead is the argument schema of workspace_read.
var schemaWorkspaceRead = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path relative to the workspace root."}
  },
  "required": ["path"],
  "additionalProperties": false
}`)

// schemaWorkspaceWrite is the argument schema of workspace_write.
var schemaWorkspaceWrite = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path relative to the workspace root."},
    "content": {"type": "string", "description": "The whole new content of the file."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`)

// schemaWorkspaceDelete is the argument schema of workspace_delete.
var schemaWorkspaceDelete = json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "Path relative to the workspace root."}
  },
  "required": ["path"],
  "additionalProperties": false
}`)
