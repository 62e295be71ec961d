package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// hasControl reports the first control character in s other than newline
// and tab, or -1.
func hasControl(s string) int {
	for i, r := range s {
		if r != '\n' && r != '\t' && (r < 0x20 || r >= 0x7f && r <= 0x9f) {
			return i
		}
	}
	return -1
}

func TestTerminalSafe(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcödé ⏳\n\tindented", "plain text, ünïcödé ⏳\n\tindented"},
		{"done\x1b[8m\x1b]52;c;ZXZpbA==\x07", "done\uFFFD[8m\uFFFD]52;c;ZXZpbA==\uFFFD"},
		{"up\x1b[2A\x1b[Kover\rwritten\b", "up\uFFFD[2A\uFFFD[Kover\uFFFDwritten\uFFFD"},
		{"nul\x00 del\x7f", "nul\uFFFD del\uFFFD"},
		{"c1 csi \u009b2J and osc \u009d52;c;x\u009c", "c1 csi \uFFFD2J and osc \uFFFD52;c;x\uFFFD"},
		// A lone 0x9b byte is CSI to a terminal that reads 8-bit controls.
		{"raw \x9b2J", "raw \uFFFD2J"},
	} {
		if got := terminalSafe(tc.in); got != tc.want {
			t.Errorf("terminalSafe(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// A bot message carrying escape sequences, in its blocks or its fallback
// text, is printed with none of them.
func TestPrintedMessagesHaveNoControls(t *testing.T) {
	const evil = "\x1b[8mhidden\x1b]52;c;ZXZpbA==\x07\u009b2J\r"
	blocks, _ := json.Marshal([]map[string]any{
		{"type": "header", "text": map[string]any{"type": "plain_text", "text": "head" + evil}},
		{"type": "section", "text": map[string]any{"type": "mrkdwn", "text": "*bold*" + evil}, "fields": []any{map[string]any{"type": "plain_text", "text": "field" + evil}}},
		{"type": "context", "elements": []any{map[string]any{"type": "plain_text", "text": "ctx" + evil}}},
		{"type": "markdown", "text": "md" + evil},
		{"type": "rich_text", "elements": []any{map[string]any{"type": "rich_text_section", "elements": []any{map[string]any{"type": "text", "text": "rich" + evil}}}}},
		{"type": "actions", "elements": []any{map[string]any{"type": "button", "action_id": "x", "text": map[string]any{"type": "plain_text", "text": "btn" + evil}}}},
		{"type": "image", "alt_text": "alt" + evil},
	})
	var out bytes.Buffer
	s := newSession(nil, &out, options{})
	s.printMessage(fakeslack.Message{TS: "1.000001", BotID: "B1", Blocks: blocks}, false)
	s.printMessage(fakeslack.Message{TS: "1.000002", BotID: "B1", Text: "fallback" + evil}, false)
	got := out.String()
	if i := hasControl(got); i >= 0 {
		t.Errorf("printed a control character at byte %d: %q", i, got)
	}
	for _, w := range []string{"head\uFFFD[8mhidden\uFFFD]52;c;ZXZpbA==\uFFFD", "btn\uFFFD", "fallback\uFFFD[8m"} {
		if !strings.Contains(got, w) {
			t.Errorf("output lacks %q: %q", w, got)
		}
	}
}

// A model answer with escape sequences reaches the terminal with the
// escapes shown, not sent.
func TestModelAnswerEscapesAreNotSent(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("REDIS_URL", "")
	model := fakeopenai.New(t)
	model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Text("done\x1b[8m\x1b]52;c;ZXZpbA==\x07")
	})
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", model.URL())
	t.Setenv("OPENAI_MODEL", "test-model")

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, strings.NewReader("hello\n"), &out, []string{"-script", "-", "-quiet", "300ms", "-wait", "10s"}); err != nil {
		t.Fatalf("run: %v", err)
	}
	got := out.String()
	// The bot writes them out before they reach Slack (see the README's
	// hidden characters).
	if !strings.Contains(got, "done⟦U+001B⟧[8m⟦U+001B⟧]52;c;ZXZpbA==⟦U+0007⟧") {
		t.Errorf("the answer is not shown with its escapes made visible:\n%q", got)
	}
	if i := hasControl(got); i >= 0 {
		t.Errorf("the terminal got a control character at byte %d:\n%q", i, got)
	}
}

// Ctrl-C in terminal mode stops the playground while it waits for the bot
// (a model that does not answer): it waited out -wait first.
func TestCtrlCWhileTheBotIsBusy(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	model := fakeopenai.Start()
	defer model.Close()
	seen, release := make(chan struct{}, 1), make(chan struct{})
	defer close(release)
	model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		select {
		case seen <- struct{}{}:
		default:
		}
		<-release
		return fakeopenai.Text("late")
	})
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", model.URL())
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, r, io.Discard, []string{"-tty", "-wait", "10m"}) }()
	if _, err := w.WriteString("hello\n"); err != nil {
		t.Fatal(err)
	}
	<-seen
	cancel() // as Ctrl-C does
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the playground did not stop within a minute of Ctrl-C: it waits out -wait (10 minutes) first")
	}
}
