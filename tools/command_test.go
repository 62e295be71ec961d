package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// commandFixture makes a PATH of test scripts and a working directory with
// a subdirectory and a symlink leading out of it.
func commandFixture(t *testing.T) (bin, work string) {
	t.Helper()
	base := t.TempDir()
	bin = filepath.Join(base, "bin")
	work = filepath.Join(base, "work")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{bin, filepath.Join(work, "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(work, "link")); err != nil {
		t.Fatal(err)
	}
	scripts := map[string]string{
		"hello": `echo "hello $*"; pwd; echo "secret=$TOOLGATE_TEST_SECRET greeting=$GREETING"`,
		"fail":  `echo "bad input" >&2; exit 3`,
		"loud":  `i=0; while [ $i -lt 1000 ]; do echo 0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz; i=$((i+1)); done`,
		"hang":  `sleep 30 & echo $!; wait`,
		"other": `echo other`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("TOOLGATE_TEST_SECRET", "leaked")
	return bin, work
}

func TestRunCommand(t *testing.T) {
	bin, work := commandFixture(t)
	realWork, err := filepath.EvalSymlinks(work)
	if err != nil {
		t.Fatal(err)
	}
	tool, err := RunCommand(CommandConfig{
		Allow:          []string{"hello", filepath.Join(bin, "fail"), "loud", "hang"},
		Dir:            work,
		Env:            map[string]string{"GREETING": "hi"},
		Timeout:        2 * time.Second,
		MaxOutputBytes: 1000,
	})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	if err := agent.NewRegistry().Register(tool); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if h := tool.Annotations; h.ReadOnly || h.Destructive == nil || !*h.Destructive {
		t.Errorf("run_command hints: got %+v, want destructive", h)
	}

	for _, tc := range []struct {
		name      string
		args      map[string]any
		want      string // the whole content, or a substring when prefixed by "~"
		wantError bool
	}{
		{"bare name", map[string]any{"argv": []string{"hello", "a b"}},
			"exit status 0\nhello a b\n" + realWork + "\nsecret= greeting=hi\n", false},
		{"absolute path of an allowed name", map[string]any{"argv": []string{filepath.Join(bin, "hello")}},
			"~hello \n", false},
		{"subdirectory", map[string]any{"argv": []string{"hello"}, "dir": "sub"},
			"~\n" + filepath.Join(realWork, "sub") + "\n", false},
		{"absolute subdirectory", map[string]any{"argv": []string{"hello"}, "dir": filepath.Join(work, "sub")},
			"~\n" + filepath.Join(realWork, "sub") + "\n", false},
		{"allowed path by bare name", map[string]any{"argv": []string{"fail"}},
			"exit status 3\nbad input\n", true},
		{"allowed path", map[string]any{"argv": []string{filepath.Join(bin, "fail")}},
			"exit status 3\nbad input\n", true},
		{"not allowed", map[string]any{"argv": []string{"other"}},
			`~program "other" is not allowed`, true},
		{"not allowed by path", map[string]any{"argv": []string{filepath.Join(bin, "other")}},
			"~is not allowed", true},
		{"shell", map[string]any{"argv": []string{"sh", "-c", "hello"}},
			`~program "sh" is not allowed`, true},
		{"relative path", map[string]any{"argv": []string{"./hello"}},
			"~must be a bare name or a clean absolute path", true},
		{"dot-dot path", map[string]any{"argv": []string{"../bin/hello"}},
			"~must be a bare name or a clean absolute path", true},
		{"unclean absolute path", map[string]any{"argv": []string{bin + "/../bin/hello"}},
			"~must be a bare name or a clean absolute path", true},
		{"dir escapes", map[string]any{"argv": []string{"hello"}, "dir": "../"},
			"~is outside", true},
		{"dir absolute outside", map[string]any{"argv": []string{"hello"}, "dir": "/etc"},
			"~is outside", true},
		{"dir through symlink", map[string]any{"argv": []string{"hello"}, "dir": "link"},
			`~dir "link" is a symbolic link; run_command does not follow symbolic links in `, true},
		{"dir missing", map[string]any{"argv": []string{"hello"}, "dir": "nope"},
			"~does not exist", true},
		{"output capped", map[string]any{"argv": []string{"loud"}},
			"~\n[output truncated: 108000 more bytes not shown]\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runTool(t, tool, tc.args)
			if sub, ok := strings.CutPrefix(tc.want, "~"); ok {
				if !strings.Contains(got.Content, sub) {
					t.Errorf("run_command %v: got %q, want it to contain %q", tc.args, got.Content, sub)
				}
			} else if got.Content != tc.want {
				t.Errorf("run_command %v: got %q, want %q", tc.args, got.Content, tc.want)
			}
			if got.IsError != tc.wantError {
				t.Errorf("run_command %v: got IsError %v, want %v", tc.args, got.IsError, tc.wantError)
			}
		})
	}
}

// A dir that is, or goes through, a symbolic link below the configured
// directory is refused before the policy judges the call, and again when
// the program would run, should the link appear after the check: with
// staging -> prod, a rule on args.dir would judge "staging" while the
// program ran in prod. The configured directory may itself be a link.
func TestRunCommandRefusesADirThroughASymlink(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(base, "work")
	for _, d := range []string{"prod/app", "deploy", "later"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"staging": "prod", "deploy/current": "../prod", base + "/configured": "work"} {
		if !filepath.IsAbs(link) {
			link = filepath.Join(work, link)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	configured := filepath.Join(base, "configured")
	tool, err := RunCommand(CommandConfig{Allow: []string{"pwd"}, Dir: configured})
	if err != nil {
		t.Fatal(err)
	}
	reg := registered(t, map[string]agent.Tool{"run_command": tool})
	const notFollowed = "; run_command does not follow symbolic links in "
	for _, tc := range []struct{ dir, want string }{
		{"staging", `dir "staging" is a symbolic link` + notFollowed + configured},
		{"staging/app", `dir "staging/app" goes through "staging", a symbolic link` + notFollowed + configured},
		{"deploy/current", `dir "deploy/current" is a symbolic link`},
	} {
		args := map[string]any{"argv": []string{"pwd"}, "dir": tc.dir}
		raw, _ := json.Marshal(args)
		if err := reg.Validate("run_command", raw); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%s) = %v, want it refused, saying %q", raw, err, tc.want)
		}
		if got := runTool(t, tool, args); !got.IsError || !strings.Contains(got.Content, tc.want) {
			t.Errorf("run_command %s: got %q, want it refused, saying %q", raw, got.Content, tc.want)
		}
	}

	ok := map[string]any{"argv": []string{"pwd"}, "dir": "prod/app"}
	if got := runTool(t, tool, ok); got.IsError || got.Content != "exit status 0\n"+filepath.Join(work, "prod", "app")+"\n" {
		t.Errorf("run_command %v in a configured directory that is a link: got %+v, want it run in prod/app", ok, got)
	}

	// "later" is a directory when checked, and a link to prod when run.
	later, _ := json.Marshal(map[string]any{"argv": []string{"pwd"}, "dir": "later"})
	if err := reg.Validate("run_command", later); err != nil {
		t.Fatalf("Validate(%s) = %v, want it taken", later, err)
	}
	if err := os.Remove(filepath.Join(work, "later")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("prod", filepath.Join(work, "later")); err != nil {
		t.Fatal(err)
	}
	if got := runTool(t, tool, json.RawMessage(later)); !got.IsError || !strings.Contains(got.Content, `dir "later" is a symbolic link`) {
		t.Errorf("run_command %s once later -> prod: got %q, want it refused", later, got.Content)
	}
	if got := previewOf(t, tool, string(later)); !strings.Contains(got, `refused when run: dir "later" is a symbolic link`) {
		t.Errorf("preview of %s once later -> prod: got %q, want it to say the dir will be refused", later, got)
	}
}

// The configured directory may be the file system's root: a directory
// below it is taken, written relative to it.
func TestRunCommandInADirectoryUnderTheFilesystemRoot(t *testing.T) {
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"pwd"}, Dir: "/"})
	if err != nil {
		t.Fatal(err)
	}
	reg := registered(t, map[string]agent.Tool{"run_command": tool})
	args := map[string]any{"argv": []string{"pwd"}, "dir": strings.TrimPrefix(dir, "/")}
	raw, _ := json.Marshal(args)
	if err := reg.Validate("run_command", raw); err != nil {
		t.Errorf("Validate(%s) = %v, want it taken", raw, err)
	}
	if got := runTool(t, tool, args); got.IsError || got.Content != "exit status 0\n"+dir+"\n" {
		t.Errorf("run_command %s with dir /: got %+v, want it run in %s", raw, got, dir)
	}
}

// A command that outlives the tool's timeout is cut by it, with its
// process group.
func TestRunCommandTimeoutKillsGroup(t *testing.T) {
	_, work := commandFixture(t)
	tool, err := RunCommand(CommandConfig{Allow: []string{"hang"}, Dir: work, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	// No deadline of the caller's: a time-out can only be the tool's own.
	type result struct {
		res agent.Result
		err error
	}
	ran := make(chan result, 1)
	go func() {
		res, err := tool.Handler(t.Context(), json.RawMessage(`{"argv":["hang"]}`))
		ran <- result{res, err}
	}()
	var got agent.Result
	select {
	case r := <-ran:
		if r.err != nil {
			t.Fatalf("run_command hang: %v", r.err)
		}
		got = r.res
	case <-time.After(20 * time.Second):
		// The hang script's sleep would take 30 s.
		t.Fatal("run_command hang did not return")
	}
	if !got.IsError || !strings.HasPrefix(got.Content, "timed out after 300ms; the process group was killed: ") {
		t.Fatalf("run_command hang: got %+v, want a timeout error", got)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(got.Content, "\n", 3)[1]))
	if err != nil {
		t.Fatalf("no child pid in %q: %v", got.Content, err)
	}
	waitFor(t, fmt.Sprintf("the background child %d is dead", pid), func() bool {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true // gone
		}
		// A zombie waiting for a reaper is dead too.
		_, rest, _ := strings.Cut(string(stat), ") ")
		return strings.HasPrefix(rest, "Z")
	})
}

// A call the bot's bound on one tool call (the handler's context) cuts
// before the tool's own timeout says how long it had, not the timeout.
func TestRunCommandCutByTheCallersDeadline(t *testing.T) {
	_, work := commandFixture(t)
	tool, err := RunCommand(CommandConfig{Allow: []string{"hang"}, Dir: work, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	got, err := tool.Handler(ctx, json.RawMessage(`{"argv":["hang"]}`))
	if err != nil {
		t.Fatalf("run_command hang: %v", err)
	}
	if !got.IsError || !cutWithin(got.Content, "", 300*time.Millisecond) || !strings.Contains(got.Content, "; the process group was killed: ") {
		t.Errorf("run_command hang, cut after 300ms with a 10m timeout: got %+v, want it to say it timed out after at most 300ms", got)
	}
}

func TestRunCommandConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  CommandConfig
		want string
	}{
		{"missing dir", CommandConfig{Allow: []string{"ls"}, Dir: filepath.Join(t.TempDir(), "nope")}, "no such file"},
		{"no allow", CommandConfig{Dir: t.TempDir()}, "allow must list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RunCommand(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RunCommand(%+v): got error %v, want one containing %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestRunCommandGetsNoSecrets(t *testing.T) {
	if _, err := os.Stat("/usr/bin/env"); err != nil {
		t.Skip("no /usr/bin/env")
	}
	t.Setenv("SLACK_BOT_TOKEN", "xoxb-leak")
	unsetPassedEnv(t)
	tool, err := RunCommand(CommandConfig{Allow: []string{"/usr/bin/env"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	got := runTool(t, tool, map[string]any{"argv": []string{"/usr/bin/env"}})
	if got.IsError || strings.Contains(got.Content, "xoxb-leak") {
		t.Errorf("run_command env: got %+v, want a success without the bot's token", got)
	}
}

func TestRunCommandBackgroundChild(t *testing.T) {
	tool, err := RunCommand(CommandConfig{Allow: []string{"/bin/sh"}, Dir: t.TempDir(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	// The background sleep keeps the output pipe open after sh exits.
	got := runTool(t, tool, map[string]any{"argv": []string{"/bin/sh", "-c", "sleep 300 & echo $!; echo hi"}})
	if got.IsError || !strings.HasPrefix(got.Content, "exit status 0\n") || !strings.Contains(got.Content, "\nhi\n") {
		t.Fatalf("run_command with a background child: got %+v, want exit status 0 and hi", got)
	}
	pid, err := strconv.Atoi(strings.SplitN(got.Content, "\n", 3)[1])
	if err != nil {
		t.Fatalf("no child pid in %q: %v", got.Content, err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, fmt.Sprintf("the background child %d is gone", pid), func() bool { return processGone(pid) })
}

// A program that exits before the timeout is reported by its exit status,
// even when something it started in a session of its own holds the output
// pipe past the timeout: the wait for the rest of the output does not make
// it a time-out.
func TestRunCommandExitsBeforeTheTimeoutLeavingThePipeOpen(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"sh"}, Dir: t.TempDir(), Timeout: time.Second})
	if err != nil {
		t.Fatalf("RunCommand: %v", err)
	}
	got := runTool(t, tool, map[string]any{"argv": []string{"sh", "-c", "setsid sleep 3 & echo $!; sleep 0.6; echo done; exit 0"}})
	if pid, err := strconv.Atoi(strings.SplitN(got.Content, "\n", 3)[1]); err == nil {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	}
	if got.IsError || !strings.HasPrefix(got.Content, "exit status 0\n") || !strings.Contains(got.Content, "\ndone\n") {
		t.Errorf("run_command exiting 0 after 0.6s of a 1s timeout, its pipe held by a new session: got %+v, want exit status 0 and done", got)
	}
}
