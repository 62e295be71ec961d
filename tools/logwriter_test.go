package tools

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"testing"
)

// A stderr line is logged whole, so the log's redaction sees each secret
// at once; a line too long for that is left out, not logged in pieces.
func TestStderrLinesAreLoggedWhole(t *testing.T) {
	const secret = "sk-live-0123456789abcdef"
	var out bytes.Buffer
	w := &logWriter{log: slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Value.Kind() == slog.KindString {
				a.Value = slog.StringValue(strings.ReplaceAll(a.Value.String(), secret, "[redacted]"))
			}
			return a
		},
	}))}
	// A long line whose secret straddles every 4 KiB boundary, written in
	// small pieces, then short lines.
	long := strings.Repeat("x", 4096-len(secret)/2) + secret + strings.Repeat("y", maxLogLine)
	for s := long + "\nstarting " + secret + "\n"; s != ""; {
		n := min(len(s), 1000)
		if _, err := w.Write([]byte(s[:n])); err != nil {
			t.Fatal(err)
		}
		s = s[n:]
	}
	if _, err := w.Write([]byte("listening on stdio\n")); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, part := range []string{secret[:len(secret)/2], secret[len(secret)/2:], "xxxx", "yyyy"} {
		if strings.Contains(got, part) {
			t.Errorf("the log holds %q of the long line:\n%s", part, got)
		}
	}
	for _, want := range []string{"line too long to log left out", "bytes=" + strconv.Itoa(len(long)), `"starting [redacted]"`, `"listening on stdio"`} {
		if !strings.Contains(got, want) {
			t.Errorf("the log lacks %q:\n%s", want, got)
		}
	}
	if l := w.lastLine(); l != "listening on stdio" {
		t.Errorf("last line %q", l)
	}
	// A line just within the limit is logged whole, and redacted.
	out.Reset()
	line := strings.Repeat("z", maxLogLine-len(secret)) + secret
	if _, err := w.Write([]byte(line + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, strings.Repeat("z", maxLogLine-len(secret))+"[redacted]") || strings.Contains(got, secret[:6]) {
		t.Errorf("a line within the limit was not logged whole and redacted: %.200s…", got)
	}
}
