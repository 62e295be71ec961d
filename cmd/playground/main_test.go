package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/redact"
)

// step is one command of a script and what the transcript must (and must
// not) show in reaction to it.
type step struct {
	prompt  string // the person typing, as the transcript names them
	command string
	want    []string
	notWant []string
	// skipped steps come after /quit: they must not run.
	skipped bool
	// fails marks a command the playground cannot carry out: the script
	// then fails, naming it.
	fails bool
}

// play runs the playground on the commands of steps and checks the part of
// the transcript that follows each command. It returns the transcript.
func play(t *testing.T, steps []step, args ...string) string {
	t.Helper()
	// The playground makes its temporary directory here; it must be gone
	// when run returns.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REDIS_URL", "")

	var script strings.Builder
	var failed []string
	ran := 0
	for i, s := range steps {
		script.WriteString(s.command + "\n")
		if !s.skipped {
			ran++
		}
		if s.fails {
			failed = append(failed, "line "+strconv.Itoa(i+1)+" ("+shorten(s.command, 40)+")")
		}
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	args = append([]string{"-script", "-", "-quiet", "300ms", "-wait", "10s"}, args...)
	err := run(ctx, strings.NewReader(script.String()), &out, args)
	if len(failed) == 0 {
		if err != nil {
			t.Fatalf("run: %v\ntranscript:\n%s", err, out.String())
		}
	} else if want := fmt.Sprintf("%d of the script's %d commands failed: %s", len(failed), ran, strings.Join(failed, ", ")); err == nil || err.Error() != want {
		t.Fatalf("run: %v, want the error %q\ntranscript:\n%s", err, want, out.String())
	}
	transcript := out.String()

	rest := transcript
	for i, s := range steps {
		echo := s.prompt + "> " + s.command + "\n"
		if s.skipped {
			if strings.Contains(rest, echo) {
				t.Errorf("step %d (%s) ran after /quit", i+1, s.command)
			}
			continue
		}
		at := strings.Index(rest, echo)
		if at < 0 {
			t.Fatalf("step %d: %q is not echoed in the transcript:\n%s", i+1, echo, transcript)
		}
		rest = rest[at+len(echo):]
		part := rest
		if i+1 < len(steps) && !steps[i+1].skipped {
			if next := strings.Index(rest, steps[i+1].prompt+"> "+steps[i+1].command+"\n"); next >= 0 {
				part = rest[:next]
			}
		}
		for _, w := range s.want {
			if !strings.Contains(part, w) {
				t.Errorf("step %d (%s): output lacks %q; it is:\n%s", i+1, s.command, w, part)
			}
		}
		for _, w := range s.notWant {
			if strings.Contains(part, w) {
				t.Errorf("step %d (%s): output has %q; it is:\n%s", i+1, s.command, w, part)
			}
		}
	}
	if t.Failed() {
		t.Logf("transcript:\n%s", transcript)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "toolgate-playground-*")); len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
	return transcript
}

func TestScriptedSession(t *testing.T) {
	transcript := play(t, []step{
		{prompt: "you", command: "delete scratch.csv", want: []string{
			"card #1:", "== Approval: workspace_delete ==", "Deleting files needs a second person", "Approvers: @alice",
			"[Approve] [Deny] [Reject with reason] [Edit arguments] [Why?] [Cancel request]",
		}},
		{prompt: "you", command: "/approve", want: []string{"(only you see this)", "second pair of eyes"}, notWant: []string{"deleted scratch.csv"}},
		{prompt: "you", command: "/as alice", want: []string{"you are now alice"}},
		{prompt: "alice", command: "/approve", want: []string{
			"card #1 updated:", "Approved by @alice", "workspace_delete: deleted scratch.csv",
		}, notWant: []string{"[Approve]"}},
		{prompt: "alice", command: "read secrets/api-token.txt", want: []string{
			"workspace_read: secrets/ is off limits from chat; ask the security team.",
		}, notWant: []string{"card #", "not-a-real-token"}},
		{prompt: "alice", command: "read Secrets/api-token.txt", want: []string{
			"workspace_read: secrets/ is off limits from chat; ask the security team.",
		}, notWant: []string{"card #", "not-a-real-token"}},
		{prompt: "alice", command: "write hi to notes.md", want: []string{
			"card #2:", "== Approval: workspace_write ==", "Changing files needs a review", `"path": "notes.md"`,
		}},
		{prompt: "alice", command: "/reject not now", want: []string{
			`"Reject with reason" form`, "card #2 updated:", "Rejected by @alice", "with the reason: not now",
		}, notWant: []string{"wrote"}},
		{prompt: "alice", command: "list files and write hi to tmp/a.txt", want: []string{
			"workspace_list: ", "notes.md", "workspace_write: wrote 3 bytes to tmp/a.txt",
		}, notWant: []string{"card #3", "scratch.csv"}},
		{prompt: "alice", command: "run rm notes.md", want: []string{
			"run_command: Use workspace_delete, which asks for an approval.",
		}, notWant: []string{"card #3"}},
		{prompt: "alice", command: "run df -h", want: []string{"run_command: "}, notWant: []string{"card #3"}},
		// date -f prints the lines of any file it can read in its errors.
		{prompt: "alice", command: "run date -f ../workspace/secrets/api-token.txt", want: []string{
			"card #3:", "== Approval: run_command ==",
		}, notWant: []string{"not-a-real-token"}},
		{prompt: "alice", command: "/new", want: []string{"new thread"}},
		{prompt: "alice", command: "run ls ../workspace/secrets", want: []string{"card #1:"}, notWant: []string{"api-token.txt\n"}},
	})
	if !strings.Contains(transcript, "Toolgate playground") || !strings.Contains(transcript, "scripted model") {
		t.Errorf("the transcript does not start with the introduction:\n%s", transcript)
	}
}

func TestEditAlwaysAndCommands(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "/approve", want: []string{"no thread yet"}, fails: true},
		{prompt: "you", command: "write a to notes.md and delete report.csv", want: []string{"card #1:", "card #2:", `"path": "notes.md"`, `"path": "report.csv"`}},
		{prompt: "you", command: "/as bob", want: []string{"you are now bob"}},
		{prompt: "bob", command: "/approve 2", want: []string{"(only bob sees this)", "not an approver"}},
		{prompt: "bob", command: `/edit #1 {"path":"notes.md"}`, want: []string{"the form was not accepted"}},
		{prompt: "bob", command: `/edit #1 {"path":"notes.md","content":"b"}`, want: []string{"card #1 updated:", "Edited by @bob"}},
		{prompt: "bob", command: "/pending", want: []string{"(only bob sees this)", "workspace_delete"}},
		{prompt: "bob", command: "/as alice", want: []string{"you are now alice"}},
		{prompt: "alice", command: "/approve", want: []string{
			"card #2 updated:", "Approved by @alice", "workspace_write: ", "wrote 1 bytes to notes.md", "workspace_delete: deleted report.csv",
		}},
		{prompt: "alice", command: "/new", want: []string{"new thread"}},
		{prompt: "alice", command: "write x to draft.txt", want: []string{"card #1:"}},
		{prompt: "alice", command: "/always", want: []string{"allowed in this channel from now on", "workspace_write: wrote 2 bytes to draft.txt"}},
		{prompt: "alice", command: "write y to draft.txt", want: []string{"workspace_write: wrote 2 bytes to draft.txt"}, notWant: []string{"card #"}},
		{prompt: "alice", command: "/policy", want: []string{"four_eyes: true", "tmp-writes"}},
		{prompt: "alice", command: `/approvals policy test run_command {"argv":["rm","x"]}`, want: []string{"deny"}},
		{prompt: "alice", command: "/quit"},
		// Nothing after /quit runs.
		{prompt: "alice", command: "list files", skipped: true},
	})
}

// dave is not in #ops: in the terminal, as on the page, he cannot post
// there, so he never becomes a member of it (the fake Slack would add the
// poster) and one of the "anyone in this channel" who may approve.
func TestOutsiderCannotPost(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "/as dave", want: []string{"you are now dave"}},
		{prompt: "dave", command: "list files", want: []string{"dave is not in #ops, so cannot post here"}, notWant: []string{"mentions @toolgate", "workspace_list"}, fails: true},
		{prompt: "dave", command: "/as you", want: []string{"you are now you"}},
		{prompt: "you", command: "write hi to notes.md", want: []string{"card #1:", "Approvers: anyone in this channel"}},
		{prompt: "you", command: "/as dave", want: []string{"you are now dave"}},
		{prompt: "dave", command: "looks fine to me", want: []string{"dave is not in #ops, so cannot post here"}, notWant: []string{"toolgate:"}, fails: true},
		// Slack shows no ephemeral message to someone outside the
		// channel: the bot says why it refused in dave's DM.
		{prompt: "dave", command: "/approve", want: []string{"toolgate (in dave's DM):", "Nothing changed."}, notWant: []string{"Approved by @dave", "wrote"}},
	})
}

// bob is in #ops but named by no rule: he may decide a call that anyone in
// the channel may (a write outside tmp/), and is refused one whose rule
// names its approvers (a delete, alice's).
func TestBystanderDecidesWhatAnyoneMay(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "write hello to notes.md", want: []string{"card #1:", "Rule: `writes`", "Approvers: anyone in this channel"}},
		{prompt: "you", command: "/as bob", want: []string{"you are now bob", "named by no rule"}, notWant: []string{"approves nothing"}},
		{prompt: "bob", command: "/approve", want: []string{"card #1 updated:", "Approved by @bob", "bytes to notes.md"}},
		{prompt: "bob", command: "/as you", want: []string{"you are now you"}},
		{prompt: "you", command: "delete scratch.csv", want: []string{"card #2:", "Approvers: @alice"}},
		{prompt: "you", command: "/as bob", want: []string{"you are now bob"}},
		{prompt: "bob", command: "/approve", want: []string{"(only bob sees this)", "not an approver"}, notWant: []string{"Approved by @bob", "deleted scratch.csv"}},
	})
}

func TestOwnConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	config := "builtin_tools:\n  workspace: {root: " + strconv.Quote(filepath.Join(dir, "ws")) + "}\n" +
		"policy:\n  default: ask\n  rules:\n    - id: my-rule\n      tool: \"workspace_*\"\n      verdict: deny\n      reason: Not in my workspace.\n"
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	play(t, []step{
		{prompt: "you", command: "list files", want: []string{"workspace_list: Not in my workspace."}},
		{prompt: "you", command: "/policy", want: []string{"my-rule"}, notWant: []string{"tmp-writes"}},
	}, "-config", file)

	if err := os.WriteFile(file, []byte("policy:\n  rules:\n    - tool: x\n      verdict: maybe\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := run(context.Background(), strings.NewReader(""), &out, []string{"-script", "-", "-config", file})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a bad config file: got %v, want an error naming %s", err, file)
	}
}

func TestQuitStopsReading(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "/quit"},
		{prompt: "you", command: "status api", skipped: true},
	})
}

func TestScriptFlagAndHelp(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	file := filepath.Join(t.TempDir(), "script.txt")
	if err := os.WriteFile(file, []byte("# a comment\nlist files\n/help\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	// Standard input is ignored when -script is given.
	if err := run(context.Background(), strings.NewReader("delete scratch.csv\n"), &out, []string{"-script", file, "-quiet", "300ms"}); err != nil {
		t.Fatalf("run: %v", err)
	}
	got := out.String()
	for _, w := range []string{"you> list files\n", "workspace_list: ", "scratch.csv", "/reject [#N] REASON"} {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q:\n%s", w, got)
		}
	}
	for _, w := range []string{"a comment", "delete scratch.csv\n"} {
		if strings.Contains(got, "> "+w) {
			t.Errorf("output has %q:\n%s", w, got)
		}
	}

	out.Reset()
	if err := run(context.Background(), strings.NewReader(""), &out, []string{"-h"}); err != nil {
		t.Errorf("-h: %v", err)
	}
	if !strings.Contains(out.String(), "-script") {
		t.Errorf("-h does not list the flags:\n%s", out.String())
	}
	if err := run(context.Background(), strings.NewReader(""), &out, []string{"extra"}); err == nil {
		t.Error("an extra argument was accepted")
	}
	if err := run(context.Background(), strings.NewReader(""), &out, []string{"-tty", "-script", file}); err == nil {
		t.Error("-tty and -script together were accepted")
	}
}

// The page has no login: it is served on a loopback address only.
func TestAddrMustBeLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:0": true, "localhost:8088": true, "[::1]:8088": true, "127.0.0.2:80": true,
		"0.0.0.0:8080": false, ":8080": false, "192.168.1.5:8080": false, "[::]:8080": false, "example.com:80": false,
	} {
		_, err := parseFlags([]string{"-addr", addr}, io.Discard)
		if ok && err != nil {
			t.Errorf("-addr %s: %v, want it accepted", addr, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "loopback address only")) {
			t.Errorf("-addr %s: %v, want it refused as not loopback", addr, err)
		}
	}
}

// A session stops when its context ends (as on Ctrl-C), while it waits
// for a line.
func TestCancelledContextStops(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	defer r.Close()
	outR, outW := io.Pipe()
	defer outR.Close()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, r, outW, []string{"-tty", "-quiet", "300ms"})
		outW.Close()
		done <- err
	}()
	// The introduction ends with the session about to read its first line.
	const introEnd = "/quit ends.\n\n"
	started := make(chan struct{})
	var out strings.Builder
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		seen := false
		for {
			n, err := outR.Read(buf)
			out.Write(buf[:n])
			if !seen && strings.Contains(out.String(), introEnd) {
				seen = true
				close(started)
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-started:
	case <-read:
		t.Fatalf("the session ended before it started:\n%s", out.String())
	case <-time.After(20 * time.Second):
		t.Fatal("the session did not start")
	}
	cancel() // as Ctrl-C does
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	<-read
	if got := out.String(); !strings.HasSuffix(got, "\nstopping\n") {
		t.Errorf("the output does not end with the session stopping:\n%s", got)
	}
}

func TestScriptedModel(t *testing.T) {
	for _, tc := range []struct {
		text  string
		tools []string
		args  []string
	}{
		{"list files", []string{"workspace_list"}, []string{`{}`}},
		{"ls tmp", []string{"workspace_list"}, []string{`{"path":"tmp"}`}},
		{"Read Notes.md", []string{"workspace_read"}, []string{`{"path":"Notes.md"}`}},
		{"delete scratch.csv.", []string{"workspace_delete"}, []string{`{"path":"scratch.csv"}`}},
		{"write hello world to tmp/a.txt", []string{"workspace_write"}, []string{`{"content":"hello world\n","path":"tmp/a.txt"}`}},
		{"run df -h", []string{"run_command"}, []string{`{"argv":["df","-h"]}`}},
		{"list files and delete a.csv, run uptime", []string{"workspace_list", "workspace_delete", "run_command"}, nil},
		{"ask which one and why", []string{"ask_human"}, []string{`{"question":"which one and why?"}`}},
		{"make me a sandwich", nil, nil},
		{"list files and make me a sandwich", nil, nil},
	} {
		calls, ok := parseRequest(tc.text)
		if ok != (tc.tools != nil) {
			t.Errorf("%q: understood = %v", tc.text, ok)
			continue
		}
		var tools []string
		for i, c := range calls {
			tools = append(tools, c.Name)
			if i < len(tc.args) && c.Arguments != tc.args[i] {
				t.Errorf("%q: call %d arguments %s, want %s", tc.text, i, c.Arguments, tc.args[i])
			}
			if !strings.HasPrefix(c.ID, "call_") {
				t.Errorf("%q: call id %q", tc.text, c.ID)
			}
		}
		if strings.Join(tools, ",") != strings.Join(tc.tools, ",") {
			t.Errorf("%q: tools %v, want %v", tc.text, tools, tc.tools)
		}
	}
}

func TestBlocksText(t *testing.T) {
	blocks := json.RawMessage(`[
		{"type":"header","text":{"type":"plain_text","text":"Approval: restart_service"}},
		{"type":"section","text":{"type":"mrkdwn","text":"*Approvers:* <@U0ALICE001> &amp; <!subteam^S1|@oncall>\n` + "```" + `\n{&quot;a&quot;: 1 &lt; 2}\n` + "```" + `"},
		 "accessory":{"type":"button","action_id":"view_args","text":{"type":"plain_text","text":"View full arguments"}}},
		{"type":"section","fields":[{"type":"mrkdwn","text":"*Rule:* restarts"}]},
		{"type":"context","elements":[{"type":"mrkdwn","text":":hourglass_flowing_sand: Expires <!date^1700000000^{date}|Nov 14>"},{"type":"plain_text","text":"see <https://example.com|docs>"}]},
		{"type":"actions","elements":[{"type":"button","action_id":"approve","text":{"type":"plain_text","text":"Approve"}},{"type":"button","action_id":"deny","text":{"type":"plain_text","text":"Deny"}}]}
	]`)
	got := blocksText(blocks, "fallback")
	want := "== Approval: restart_service ==\n" +
		"Approvers: @alice & @oncall\n" +
		"  {&quot;a&quot;: 1 < 2}\n" +
		"[View full arguments]\n" +
		"Rule: restarts\n" +
		"⏳ Expires Nov 14 · see <https://example.com|docs>\n" +
		"[Approve] [Deny]"
	if got != want {
		t.Errorf("blocksText:\n%s\nwant:\n%s", got, want)
	}
	if got := blocksText(nil, "plain <@U0BOB00001>"); got != "plain @bob" {
		t.Errorf("without blocks: %q", got)
	}
}

func TestModelFromEnvironment(t *testing.T) {
	for _, key := range []string{"sk-test", ""} {
		t.Run("key="+key, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			model := fakeopenai.New(t)
			model.Handle(scriptedModel)
			// OPENAI_BASE_URL alone (a local server) is enough.
			t.Setenv("OPENAI_API_KEY", key)
			t.Setenv("OPENAI_BASE_URL", model.URL())
			t.Setenv("OPENAI_MODEL", "test-model")

			var out bytes.Buffer
			if err := run(context.Background(), strings.NewReader("list files\n"), &out, []string{"-script", "-", "-quiet", "300ms"}); err != nil {
				t.Fatalf("run: %v", err)
			}
			for _, w := range []string{"the real model test-model", "workspace_list: "} {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
			reqs := model.Requests()
			if len(reqs) == 0 || reqs[0].Model != "test-model" {
				t.Errorf("the configured model was not asked: %d requests", len(reqs))
			}
		})
	}
}

// REDIS_URL, exported for a real bot, is never the playground's store: its
// people would change that bot's policy and decide its calls.
func TestRedisURLIsNotUsed(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	// Nothing listens on port 1: a playground that tried Redis would fail.
	t.Setenv("REDIS_URL", "redis://127.0.0.1:1/0")
	var out bytes.Buffer
	if err := run(context.Background(), strings.NewReader("/policy\n"), &out, []string{"-script", "-"}); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !strings.Contains(out.String(), "an embedded store in a temporary directory") {
		t.Errorf("the playground does not say it runs on its own store:\n%s", out.String())
	}
}

// A bot that stops on its own (here: Slack revokes its app token and drops
// its connection) ends the playground with the bot's error, in the page's
// mode and the terminal's alike.
func TestBotStoppingEndsThePlayground(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts options
	}{
		{"page", options{addr: "127.0.0.1:0", noOpen: true}},
		{"terminal", options{tty: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Setenv("TMPDIR", t.TempDir())
			t.Setenv("OPENAI_API_KEY", "")
			t.Setenv("OPENAI_BASE_URL", "")
			t.Setenv("REDIS_URL", "")
			log := slog.New(slog.NewTextHandler(io.Discard, nil))
			pg, err := start(t.Context(), mode.opts, log)
			if err != nil {
				t.Fatalf("start: %v", err)
			}
			defer pg.close()
			r, w, err := os.Pipe() // input that never ends
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			defer r.Close()
			done := make(chan error, 1)
			go func() { done <- pg.serve(t.Context(), mode.opts, r, false, io.Discard) }()
			pg.slack.RevokeAppToken()
			pg.slack.Drop()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "the bot stopped") || !strings.Contains(err.Error(), "app-level token") {
					t.Errorf("serve = %v, want the bot's error", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the playground went on serving after its bot stopped")
			}
		})
	}
}

// A -script fails (run returns an error, so the program exits 1) when a
// command could not be carried out, and says which; what the bot answers,
// a denied call or a refused approval, is no failure.
func TestScriptFailures(t *testing.T) {
	play(t, []step{
		{prompt: "you", command: "/approve", want: []string{"no thread yet: post a message first"}, fails: true},
		{prompt: "you", command: "/as eve", want: []string{`no such person "eve"`}, fails: true},
		{prompt: "you", command: "read secrets/api-token.txt", want: []string{"workspace_read: secrets/ is off limits from chat"}},
		{prompt: "you", command: "/deny", want: []string{"no pending card in this thread"}, fails: true},
		{prompt: "you", command: "delete scratch.csv", want: []string{"card #1:"}},
		{prompt: "you", command: "/approve", want: []string{"(only you see this)", "second pair of eyes"}},
		{prompt: "you", command: "/deny 7", want: []string{"there is no card #7 in this thread"}, fails: true},
		{prompt: "you", command: "/reject", want: []string{"type a reason after the command"}, fails: true},
		{prompt: "you", command: "/frobnicate all the things, and then some more of them", want: []string{"unknown command /frobnicate"}, fails: true},
		{prompt: "you", command: "/as dave", want: []string{"you are now dave"}},
		{prompt: "dave", command: "/pending", want: []string{"dave is not in #ops"}, fails: true},
	})

	// An action the bot is still busy with when -wait runs out: the model
	// takes its time.
	t.Setenv("TMPDIR", t.TempDir())
	model := fakeopenai.New(t)
	model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Response{Text: "done", Delay: 30 * time.Second}
	})
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", model.URL())
	var out bytes.Buffer
	err := run(context.Background(), strings.NewReader("hello\n"), &out, []string{"-script", "-", "-wait", "3s"})
	if want := "1 of the script's 1 command failed: line 1 (hello)"; err == nil || err.Error() != want {
		t.Errorf("run: %v, want %q\n%s", err, want, out.String())
	}
	if !strings.Contains(out.String(), "(still waiting for the bot") {
		t.Errorf("the transcript does not say the bot was still busy:\n%s", out.String())
	}

	// -tty is for a person at the terminal, who sees each problem.
	t.Setenv("OPENAI_BASE_URL", "")
	out.Reset()
	if err := run(context.Background(), strings.NewReader("/approve\n"), &out, []string{"-tty"}); err != nil {
		t.Errorf("-tty: %v, want no error", err)
	}
}

// -wait must be positive and -quiet not negative: a zero wait would give
// up on the bot at once, after every command.
func TestWaitAndQuietFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for accepted
	}{
		{[]string{"-wait", "0"}, "-wait 0s: want a positive duration"},
		{[]string{"-wait", "-1s"}, "-wait -1s: want a positive duration"},
		{[]string{"-quiet", "-1ms"}, "-quiet -1ms: want a duration of 0 or more"},
		{[]string{"-quiet", "0", "-wait", "1ms"}, ""},
	} {
		_, err := parseFlags(tc.args, io.Discard)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want it accepted", tc.args, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("%v: %v, want an error starting %q", tc.args, err, tc.want)
		}
	}
}

// A tool of a -config file that cannot be set up is reported as the
// -config file's fault: the bot's CONFIG_FILE plays no part here.
func TestOwnConfigToolThatCannotBeSetUp(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	config := "builtin_tools:\n  run_command: {allow: [ls], dir: " + strconv.Quote(filepath.Join(dir, "nowhere")) + "}\n"
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), strings.NewReader(""), io.Discard, []string{"-script", "-", "-config", file})
	if err == nil || !strings.HasPrefix(err.Error(), "-config "+file+": load tools: run_command") || strings.Contains(err.Error(), "CONFIG_FILE") {
		t.Errorf("run: %v, want an error naming -config %s", err, file)
	}
}

// A -config file the bot refuses at start, and `bot policy check` reports,
// is refused here too, naming the file: a workspace root that holds the
// file or the playground's store, or a tool timeout longer than the bot's.
func TestOwnConfigRefusedAsByTheBot(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	dir := t.TempDir() // made before TMPDIR is set: out of the store's reach
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	file := filepath.Join(dir, "config.yaml")
	for _, tc := range []struct{ name, config, want string }{
		{"root holds the config file", "builtin_tools:\n  workspace: {root: " + strconv.Quote(dir) + "}\n", "holds -config " + file},
		{"root holds the store", "builtin_tools:\n  workspace: {root: " + strconv.Quote(tmp) + "}\n", "holds the playground's store directory " + tmp},
		{"run_command dir holds the store", "builtin_tools:\n  run_command: {allow: [ls], dir: " + strconv.Quote(tmp) + "}\n", "builtin_tools.run_command.dir " + tmp + " holds"},
		{"timeout longer than the bot's", "builtin_tools:\n  http_request: {allowed_hosts: [api.github.com], timeout: 3m}\n", "TOOL_TIMEOUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(file, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			err := run(context.Background(), strings.NewReader(""), io.Discard, []string{"-script", "-", "-config", file})
			if err == nil || !strings.HasPrefix(err.Error(), "-config "+file+": ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run -config: %v, want an error naming -config %s and saying %q", err, file, tc.want)
			}
			if left, _ := filepath.Glob(filepath.Join(tmp, "toolgate-playground-*")); len(left) > 0 {
				t.Errorf("temporary directories left behind: %v", left)
			}
		})
	}
}

// The bot's Azure OpenAI settings are refused at start, naming the one at
// fault: the playground's client would send Azure the plain OpenAI
// protocol. -scripted does not read them.
func TestAzureSettingsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		version, base, want string
	}{
		{"2024-10-21", "https://example.test/v1", "OPENAI_API_VERSION is set, which means Azure OpenAI"},
		{"", "https://my-resource.openai.azure.com", "OPENAI_BASE_URL is an Azure OpenAI endpoint"},
		{"", "https://My-Resource.OpenAI.Azure.com:443/", "OPENAI_BASE_URL is an Azure OpenAI endpoint"},
	} {
		t.Setenv("TMPDIR", t.TempDir())
		t.Setenv("OPENAI_API_KEY", "key")
		t.Setenv("OPENAI_BASE_URL", tc.base)
		t.Setenv("OPENAI_API_VERSION", tc.version)
		err := run(context.Background(), strings.NewReader(""), io.Discard, []string{"-script", "-"})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !strings.Contains(err.Error(), "-scripted") {
			t.Errorf("%s %s: %v, want an error starting %q", tc.version, tc.base, err, tc.want)
		}
		if left, _ := filepath.Glob(filepath.Join(os.Getenv("TMPDIR"), "toolgate-playground-*")); len(left) > 0 {
			t.Errorf("temporary directories left behind: %v", left)
		}
	}
	t.Setenv("TMPDIR", t.TempDir())
	if err := run(context.Background(), strings.NewReader(""), io.Discard, []string{"-script", "-", "-scripted"}); err != nil {
		t.Errorf("-scripted with Azure settings: %v", err)
	}
}

// With a real model, the model's API key is a secret, as in the bot: a
// model server that quotes it in its refusal (a proxy's 401) does not have
// it posted in the workspace.
func TestModelKeyIsNotPosted(t *testing.T) {
	const key = "sk-test-SECRET-0123456789"
	t.Setenv("TMPDIR", t.TempDir())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"message":"invalid api key ` + strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ") + `","type":"invalid_request_error"}}`))
	}))
	defer srv.Close()
	t.Setenv("OPENAI_API_KEY", key)
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	var out bytes.Buffer
	if err := run(context.Background(), strings.NewReader("list files\n"), &out, []string{"-script", "-", "-quiet", "300ms"}); err != nil {
		t.Fatalf("run: %v", err)
	}
	if strings.Contains(out.String(), key) {
		t.Errorf("the model's API key was posted in the workspace:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "invalid api key [redacted]") {
		t.Errorf("the server's refusal is not shown, redacted:\n%s", out.String())
	}
}

// The log keeps the secrets it is given out of its lines: the message, a
// string and an error alike.
func TestLogRedactsSecrets(t *testing.T) {
	const key, tool = "sk-test-SECRET-0123456789", "ghp-tool-SECRET-9876543210"
	var out strings.Builder
	red := newRedactorRef(redact.New(key))
	log := newLogger(&out, false, red)
	log.Error("the model refused "+key, "body", "invalid api key "+key, "err", fmt.Errorf("HTTP 401: %s", key))
	if got := out.String(); strings.Contains(got, key) || !strings.Contains(got, "HTTP 401: [redacted]") {
		t.Errorf("log:\n%s", got)
	}
	// The config file's tools' secrets, known once it is read, are kept
	// out of the lines written after.
	red.set(redact.New(key, tool))
	out.Reset()
	log.Error("a tool failed", "err", fmt.Errorf("HTTP 401 with token %s", tool))
	if got := out.String(); strings.Contains(got, tool) || !strings.Contains(got, "token [redacted]") {
		t.Errorf("log after the config's secrets were added:\n%s", got)
	}
}

// The log made before the config file is read keeps the file's tools'
// secrets out once start has read it.
func TestLogLearnsTheConfigsSecrets(t *testing.T) {
	const secret = "pg-tool-SECRET-31415926"
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("PG_TEST_TOKEN", secret)
	dir := t.TempDir()
	t.Setenv("TMPDIR", t.TempDir())
	file := filepath.Join(dir, "config.yaml")
	work := t.TempDir()
	if err := os.WriteFile(file, []byte("builtin_tools:\n  run_command: {allow: [ls], dir: "+strconv.Quote(work)+", env: {TOKEN: \"${PG_TEST_TOKEN}\"}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	red := newRedactorRef(redact.New())
	pg, err := start(t.Context(), options{config: file, logSecrets: red}, newLogger(io.Discard, false, red))
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer pg.close()
	if got := red.get().String("token " + secret); strings.Contains(got, secret) {
		t.Errorf("the log's redactor after start: %q, want the tool's secret out", got)
	}
}
