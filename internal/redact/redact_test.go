package redact_test

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/redact"
)

func TestRedactor(t *testing.T) {
	r := redact.New("abc", "s3cret", "s3cret-and-more", "")
	if got := r.String("token s3cret-and-more, then s3cret, abc"); got != "token [redacted], then [redacted], abc" {
		t.Errorf("String = %q: want the longest secret whole, and values under 4 bytes kept", got)
	}
	err := r.Error(&fs.PathError{Op: "open", Path: "/x/s3cret", Err: fs.ErrNotExist})
	if err.Error() != "open /x/[redacted]: file does not exist" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Error = %v: want the secret hidden and the error kept", err)
	}
	plain := errors.New("nothing to hide")
	if r.Error(plain) != plain || r.Error(nil) != nil {
		t.Error("an error with no secret, or nil, was wrapped")
	}
	if got := (redact.Redactor{}).String("s3cret"); got != "s3cret" {
		t.Errorf("the zero Redactor replaced %q", got)
	}
}

// A secret with a backslash, a quote or an HTML character is found as JSON
// writes it inside a string (a model's tool arguments, a span's captured
// messages), by either of Go's encoders.
func TestRedactorFindsASecretWrittenInJSON(t *testing.T) {
	const secret = `Pa55\w0rd"<Redis>`
	r := redact.New(secret)
	for _, text := range []string{
		`{"path":"Pa55\\w0rd\"<Redis>"}`,
		`{"path":"Pa55\\w0rd\"\u003cRedis\u003e"}`,
		"raw Pa55\\w0rd\"<Redis>",
		`{"arguments":"{\"path\":\"Pa55\\\\w0rd\\\"<Redis>\"}"}`,
	} {
		if got := r.String(text); strings.Contains(got, "w0rd") {
			t.Errorf("String(%s) = %s: want the secret hidden", text, got)
		}
	}
}

// A value too short to be a secret is left out in every form: its JSON
// escapes are ordinary text.
func TestRedactorLeavesShortValuesOutInEveryForm(t *testing.T) {
	r := redact.New("&", "<", `"`)
	for _, text := range []string{`{"url":"https://x/?a=1\u0026b=2"}`, `a \u003c b`, `{"q":"say \"hi\""}`} {
		if got := r.String(text); got != text {
			t.Errorf("String(%s) = %s: want it as it is", text, got)
		}
	}
}

// Output also replaces a secret cut short where a line, or the text, ends
// (an output kept up to a limit), from its first 8 bytes on, and leaves a
// shorter start, or one that goes on with other text, as it is.
func TestRedactorOutput(t *testing.T) {
	r := redact.New("sk-live-0123456789", "tok")
	for _, tt := range []struct{ in, want string }{
		{"key sk-live-0123456789 refused", "key [redacted] refused"},
		{"key sk-live-0123", "key [redacted]"},
		{"key sk-live-01\n[output truncated: 9 more bytes not shown]\n", "key [redacted]\n[output truncated: 9 more bytes not shown]\n"},
		{"a sk-live-0 then sk-live-012345678\nok", "a sk-live-0 then [redacted]\nok"},
		{"sk-live", "sk-live"},
		{"sk-live-0123x", "sk-live-0123x"},
		{"tok is short, and sk-live-01", "tok is short, and [redacted]"},
	} {
		if got := r.Output(tt.in); got != tt.want {
			t.Errorf("Output(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	if got := (redact.Redactor{}).Output("sk-live-01"); got != "sk-live-01" {
		t.Errorf("the zero Redactor changed %q", got)
	}
}

// Output finds a secret cut short at the end of a long line full of
// starts of it (a JSON result on one line, full of paths).
func TestRedactorOutputOfALongLine(t *testing.T) {
	r := redact.New("/usr/local/bin/files-mcp")
	line := strings.Repeat(`"/usr/local/lib/x",`, 20_000) + "/usr/local/bin/fil"
	if got := r.Output(line); !strings.HasSuffix(got, `"/usr/local/lib/x",[redacted]`) || len(got) != len(line)-len("/usr/local/bin/fil")+len(redact.Text) {
		t.Errorf("Output of a long line ending with a cut secret ends %q", got[len(got)-40:])
	}
}

// BenchmarkOutputLongLine measures Output on one long line holding many
// starts of a secret, which it reads once.
func BenchmarkOutputLongLine(b *testing.B) {
	r := redact.New("/usr/local/bin/files-mcp")
	line := strings.Repeat(`"/usr/local/lib/x",`, 20_000)
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		r.Output(line)
	}
}
