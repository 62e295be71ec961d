package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// outputGrace is how long run_command waits for the rest of the output
// once the program and its process group are gone.
const outputGrace = time.Second

// passedEnv are the variables of the bot's own environment a command sees;
// everything else (tokens, API keys) stays out.
var passedEnv = []string{"PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"}

// RunCommand returns the run_command tool: it runs one allowlisted
// executable with arguments, without a shell, and returns the exit status
// and the combined stdout and stderr (capped at c.MaxOutputBytes).
//
// argv[0] must be spelled exactly as an entry of c.Allow (checked before
// the policy judges the call, so rules on it see that spelling): an
// allowed absolute path, or an allowed bare name, which PATH resolves. The working
// directory is c.Dir (which may be a symbolic link) or a directory inside
// it, none of whose parts below c.Dir may be a symbolic link (see
// checkDir). After
// c.Timeout (or when the call's context reaches its deadline first; the
// result names the time the call had, and says that what the command did
// is unknown), and as soon as the program has exited, its whole process
// group is killed, so that what it started in the background in that
// group dies with the call. What it started outside the group (a new
// session, with setsid, or a daemon: ssh's ControlPersist master,
// gpg-agent) is not killed and outlives the call; when such a process
// still holds the output once the program has ended, the result says it
// was left running. Commands run with PATH, HOME, USER, LANG, LC_ALL, TZ
// and TMPDIR from the bot's environment plus c.Env, nothing else. A
// non-zero exit is an error result. The tool is marked destructive, so
// policies ask by default. Zero settings take their defaults.
func RunCommand(c CommandConfig) (agent.Tool, error) {
	c.Timeout = orDefault(c.Timeout, DefaultCommandTimeout)
	c.MaxOutputBytes = orDefault(c.MaxOutputBytes, DefaultCommandMaxOutputBytes)
	if err := c.validate(); err != nil {
		return agent.Tool{}, fmt.Errorf("run_command: %w", err)
	}
	dir, err := filepath.EvalSymlinks(c.Dir)
	if err != nil {
		return agent.Tool{}, fmt.Errorf("run_command: dir: %w", err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return agent.Tool{}, fmt.Errorf("run_command: dir %q is not a directory", c.Dir)
	}
	r := &commandTool{cfg: c}
	return agent.Tool{
		Name: "run_command",
		Description: "Run a program (no shell: no pipes, globs or variables) and return its exit status and combined output. " +
			"Allowed programs: " + strings.Join(c.Allow, ", ") + ". Timeout: " + c.Timeout.String() + ".",
		Schema:      schemaRunCommand,
		Annotations: approvals.Hints{Destructive: ptr(true)},
		Handler:     r.run,
		Preview:     r.previewCommand,
		Check:       r.checkArgs,
	}, nil
}

// checkArgs refuses a program not named exactly as the allow list names
// it (/usr/bin/rm for an allowed rm, say): the policy judges args.argv[0]
// as written, so a rule on it ("rm is denied") must see the name the allow
// list knows; and a working directory not written plainly (see checkDir).
func (r *commandTool) checkArgs(raw json.RawMessage) error {
	var args commandArgs
	if err := json.Unmarshal(raw, &args); err != nil || len(args.Argv) == 0 {
		return nil // the handler says what is wrong
	}
	if p := args.Argv[0]; !slices.Contains(r.cfg.Allow, p) {
		return fmt.Errorf("program %q is not allowed; name it exactly as one of: %s", p, strings.Join(r.cfg.Allow, ", "))
	}
	return r.checkDir(args.Dir)
}

// checkDir refuses a working directory not written plainly, relative to
// the configured one, so that a rule on args.dir sees where the program
// runs ("staging/../prod" is prod; "/srv/work/prod" is "prod"), and one
// that is, or goes through, a symbolic link below the configured directory
// (see checkNoSymlink): with staging -> prod, "staging" is prod too. The
// absolute form of a directory inside is answered with its plain one.
func (r *commandTool) checkDir(dir string) error {
	switch {
	case dir == "":
		return nil
	case filepath.IsAbs(dir):
		if rel, err := filepath.Rel(r.cfg.Dir, dir); err == nil && filepath.IsLocal(rel) {
			return fmt.Errorf("dir %q: give it relative to %s, as %q", dir, r.cfg.Dir, filepath.Clean(rel))
		}
		return fmt.Errorf("dir %q is outside %s; give a directory relative to it", dir, r.cfg.Dir)
	case !filepath.IsLocal(dir):
		return fmt.Errorf("dir %q is outside %s", dir, r.cfg.Dir)
	case filepath.Clean(dir) != dir:
		return fmt.Errorf("dir %q: write it plainly, as %q (no ., .., doubled or trailing slashes)", dir, filepath.Clean(dir))
	}
	return r.checkNoSymlink(dir, dir)
}

// checkNoSymlink refuses dir, the working directory as given, if rel, its
// clean path relative to the configured directory, is or goes through a
// symbolic link below it (see firstSymlink); the configured directory
// itself is followed as it is now (see base). It runs before the
// policy judges the call and again when the program is about to run, as
// a link may have been put in place since; one put in place in the instant
// between that last check and the program's start is not caught, but one
// that leads outside is (see workDir).
func (r *commandTool) checkNoSymlink(dir, rel string) error {
	base, err := r.base()
	if err != nil {
		return err
	}
	root, err := os.OpenRoot(base)
	if err != nil {
		return fmt.Errorf("dir %q: cannot open %s: %v", dir, r.cfg.Dir, errors.Unwrap(err))
	}
	defer root.Close()
	switch link := firstSymlink(root, rel); link {
	case "":
		return nil
	case rel:
		return fmt.Errorf("dir %q is a symbolic link; run_command does not follow symbolic links in %s", dir, r.cfg.Dir)
	default:
		return fmt.Errorf("dir %q goes through %q, a symbolic link; run_command does not follow symbolic links in %s", dir, link, r.cfg.Dir)
	}
}

type commandTool struct {
	cfg CommandConfig
}

type commandArgs struct {
	Argv []string `json:"argv"`
	Dir  string   `json:"dir"`
}

func (r *commandTool) run(ctx context.Context, raw json.RawMessage) (agent.Result, error) {
	var args commandArgs
	if err := decodeArgs(raw, &args); err != nil {
		return errorResult("%v", err), nil
	}
	if len(args.Argv) == 0 {
		return errorResult("argv must name a program"), nil
	}
	path, err := r.resolve(args.Argv[0])
	if err != nil {
		return errorResult("%v", err), nil
	}
	dir, err := r.workDir(args.Dir)
	if err != nil {
		return errorResult("%v", err), nil
	}

	limit := timeLimit(ctx, r.cfg.Timeout)
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args.Argv[1:]...)
	cmd.Args[0] = args.Argv[0]
	cmd.Dir = dir
	cmd.Env = commandEnv(r.cfg.Env)
	out := &cappedBuffer{max: r.cfg.MaxOutputBytes}
	// The output goes through a pipe of our own rather than one exec.Cmd
	// makes, so that Wait returns when the program exits even if something
	// it started still holds the pipe open.
	pr, pw, err := os.Pipe()
	if err != nil {
		return agent.Result{}, fmt.Errorf("run %s: %w", args.Argv[0], err)
	}
	defer pr.Close()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = time.Second
	killProcessGroup(cmd)

	waited, err := startKept(cmd, cmd.Start)
	defer waited()
	pw.Close()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(out, pr)
	}()
	leftBehind, timedOut := false, false
	if err == nil {
		err = cmd.Wait()
		// Decided now, not after the wait for the output below: a program
		// that exited on its own before the deadline did not time out,
		// however long something it left behind holds the pipe. It timed
		// out if the deadline came before it ended and the kill ended it.
		timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded) && killedBySignal(cmd.ProcessState)
		// What the program left running in its group dies with the
		// call.
		leftBehind = killGroup(cmd)
		// The program did run to its end: its exit status is what counts.
		if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil {
			err = nil
			if !cmd.ProcessState.Success() {
				err = &exec.ExitError{ProcessState: cmd.ProcessState}
			}
		}
	}
	heldOpen := false
	select {
	case <-copied:
	case <-time.After(outputGrace):
		// Something outside the process group holds the pipe: the
		// kill did not reach it.
		heldOpen = true
		pr.Close()
		<-copied
	}
	var status string
	var exitErr *exec.ExitError
	switch {
	case timedOut:
		// The agent's words for a call cut by TOOL_TIMEOUT never come:
		// the tool's timeout, at most that, comes first.
		status = fmt.Sprintf("timed out after %s; the process group was killed: %s", limit, agent.UnknownOutcome)
	case err == nil:
		status = "exit status 0"
	case errors.As(err, &exitErr):
		status = exitErr.ProcessState.String()
	default:
		if ctx.Err() != nil {
			return agent.Result{}, fmt.Errorf("run %s: %w", args.Argv[0], ctx.Err())
		}
		return errorResult("cannot run %s: %v", args.Argv[0], err), nil
	}
	var b strings.Builder
	b.WriteString(status + "\n")
	b.Write(out.buf)
	if out.dropped > 0 {
		fmt.Fprintf(&b, "\n[output truncated: %d more bytes not shown]\n", out.dropped)
	}
	if leftBehind && !timedOut {
		b.WriteString("\n[processes the program left running were killed]\n")
	}
	if heldOpen {
		b.WriteString("\n[a process the program started outside its process group (with setsid, or as a daemon) still held its output after it ended, and was left running]\n")
	}
	if timedOut {
		return agent.UnknownOutcomeResult(b.String()), nil
	}
	return agent.Result{Content: b.String(), IsError: err != nil}, nil
}

// resolve finds the executable argv0 names and checks it is allowed.
func (r *commandTool) resolve(argv0 string) (string, error) {
	var path string
	if strings.ContainsRune(argv0, filepath.Separator) {
		if !filepath.IsAbs(argv0) || filepath.Clean(argv0) != argv0 {
			return "", fmt.Errorf("program %q must be a bare name or a clean absolute path", argv0)
		}
		path = argv0
	} else {
		p, err := exec.LookPath(argv0)
		if err != nil {
			if slices.Contains(r.cfg.Allow, argv0) {
				return "", fmt.Errorf("program %q is allowed but was not found in PATH", argv0)
			}
			return "", fmt.Errorf("program %q is not allowed (allowed: %s)", argv0, strings.Join(r.cfg.Allow, ", "))
		}
		path = p
	}
	for _, a := range r.cfg.Allow {
		if filepath.IsAbs(a) {
			if path == a {
				return path, nil
			}
			continue
		}
		if p, err := exec.LookPath(a); err == nil && p == path {
			return path, nil
		}
	}
	return "", fmt.Errorf("program %q is not allowed (allowed: %s)", argv0, strings.Join(r.cfg.Allow, ", "))
}

// base is the configured directory as it is now: a link there (a
// release's, switched at each deploy) is followed as it points at the
// call, not as it did when the tool was made.
func (r *commandTool) base() (string, error) {
	dir, err := filepath.EvalSymlinks(r.cfg.Dir)
	if err != nil {
		return "", fmt.Errorf("the configured dir %s does not exist now", r.cfg.Dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("the configured dir %s is not a directory now", r.cfg.Dir)
	}
	return dir, nil
}

// workDir returns the directory named by dir (relative to the configured
// directory, or absolute inside it), refusing any that lies outside, and
// any that is or goes through a symbolic link below the configured
// directory (see checkNoSymlink).
func (r *commandTool) workDir(dir string) (string, error) {
	base, err := r.base()
	if err != nil || dir == "" {
		return base, err
	}
	rel := dir
	if filepath.IsAbs(dir) {
		var err error
		if rel, err = filepath.Rel(r.cfg.Dir, dir); err != nil || !filepath.IsLocal(rel) {
			if rel, err = filepath.Rel(base, dir); err != nil || !filepath.IsLocal(rel) {
				return "", fmt.Errorf("dir %q is outside %s", dir, r.cfg.Dir)
			}
		}
	}
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("dir %q is outside %s", dir, r.cfg.Dir)
	}
	rel = filepath.Clean(rel) // as filepath.Join below takes it
	if err := r.checkNoSymlink(dir, rel); err != nil {
		return "", err
	}
	full, err := filepath.EvalSymlinks(filepath.Join(base, rel))
	if err != nil {
		return "", fmt.Errorf("dir %q does not exist in %s", dir, r.cfg.Dir)
	}
	if !inside(full, base) {
		return "", fmt.Errorf("dir %q leads outside %s through a symlink", dir, r.cfg.Dir)
	}
	if fi, err := os.Stat(full); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("dir %q is not a directory", dir)
	}
	return full, nil
}

// commandEnv is the environment of a command or stdio server: the passedEnv
// variables that are set, then extra. It is never nil, even when empty: an
// exec.Cmd with a nil Env would inherit the bot's whole environment.
func commandEnv(extra map[string]string) []string {
	env := make([]string, 0, len(passedEnv)+len(extra))
	for _, k := range passedEnv {
		if _, ok := extra[k]; ok {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// cappedBuffer keeps the first max bytes written to it and counts the rest.
type cappedBuffer struct {
	mu      sync.Mutex
	max     int64
	buf     []byte
	dropped int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - int64(len(c.buf))
	if c.dropped > 0 {
		// Past the cap (the character it cut left room): nothing after
		// a gap is kept.
		room = 0
	}
	if int64(len(p)) <= room {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	first := c.dropped == 0
	room = max(room, 0)
	c.buf = append(c.buf, p[:room]...)
	c.dropped += int64(len(p)) - room
	if first {
		// The cap keeps whole characters, as the other tools' do: a
		// character it cuts is counted with the rest.
		n := len(c.buf)
		for i := n - 1; i >= 0 && i >= n-utf8.UTFMax; i-- {
			if utf8.RuneStart(c.buf[i]) {
				if !utf8.FullRune(c.buf[i:]) {
					c.dropped += int64(n - i)
					c.buf = c.buf[:i]
				}
				break
			}
		}
	}
	return len(p), nil
}

// schemaRunCommand is the argument schema of run_command.
var schemaRunCommand = json.RawMessage(`{
  "type": "object",
  "properties": {
    "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "The program and its arguments, e.g. [\"kubectl\", \"get\", \"pods\"]."},
    "dir": {"type": "string", "description": "Working directory, relative to the configured directory, written plainly (no . or ..). Default: the configured directory."}
  },
  "required": ["argv"],
  "additionalProperties": false
}`)
