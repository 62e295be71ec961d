package tools

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// A header value with blanks around it (which Go and servers drop) and a
// Content-Length (which Go writes itself) are refused before any card: a
// rule and the card would read a value that is not sent.
func TestHeaderNotSentAsWrittenIsRefused(t *testing.T) {
	srv := newRecorder(t, nil)
	reg := registered(t, httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}}))
	for _, tc := range []struct{ name, value, want string }{
		{"X-Env", "production ", "blank"},
		{"X-Env", "\tproduction", "blank"},
		{"Content-Length", "2", "Content-Length"},
		{"content-length", "2", "Content-Length"},
	} {
		raw, _ := json.Marshal(map[string]any{"method": "POST", "url": srv.URL + "/deploy", "headers": map[string]string{tc.name: tc.value}, "body": "delete-everything"})
		if err := reg.Validate("http_request", raw); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want it refused, saying %q", raw, err, tc.want)
		}
	}
	raw, _ := json.Marshal(map[string]any{"method": "POST", "url": srv.URL + "/deploy", "headers": map[string]string{"X-Env": "pro duction"}})
	if err := reg.Validate("http_request", raw); err != nil {
		t.Errorf("%s: %v, want a blank inside a value taken", raw, err)
	}
}

// An escape with a lower-case hex digit (%2f) is the same URL as its
// upper-case form, which servers decode alike: only the upper-case
// spelling is taken, so that a rule on args.url sees one spelling.
func TestLowerCaseEscapeIsRefused(t *testing.T) {
	srv := newRecorder(t, nil)
	reg := registered(t, httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}}))
	for _, u := range []string{"/api/v4/projects/team%2fprod", "/api/v4/projects/team%2Fprod?q=a%2fb", "/p/%c3%A9"} {
		raw, _ := json.Marshal(map[string]any{"method": "DELETE", "url": srv.URL + u})
		if err := reg.Validate("http_request", raw); err == nil || !strings.Contains(err.Error(), "upper case") {
			t.Errorf("%s: %v, want it refused, naming the upper-case form", u, err)
		}
	}
	raw, _ := json.Marshal(map[string]any{"method": "DELETE", "url": srv.URL + "/api/v4/projects/team%2Fprod?q=a%2Fb"})
	if err := reg.Validate("http_request", raw); err != nil {
		t.Errorf("the upper-case spelling: %v, want it taken", err)
	}
}

// run_command's cap keeps whole characters, as the other tools' caps do:
// a character it cuts is counted with the bytes not shown.
func TestRunCommandCapKeepsWholeCharacters(t *testing.T) {
	bin, work := commandFixture(t)
	script := "#!/bin/sh\nprintf 'ab\\342\\202\\254\\342\\202\\254'\n" // "ab€€"
	if err := os.WriteFile(filepath.Join(bin, "euro"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tool, err := RunCommand(CommandConfig{Allow: []string{"euro"}, Dir: work, Timeout: 5 * time.Second, MaxOutputBytes: 4})
	if err != nil {
		t.Fatal(err)
	}
	res, err := tool.Handler(t.Context(), json.RawMessage(`{"argv":["euro"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if !utf8.ValidString(res.Content) || !strings.Contains(res.Content, "ab\n") || !strings.Contains(res.Content, "6 more bytes not shown") {
		t.Errorf("run_command result = %q, want \"ab\" and 6 more bytes not shown", res.Content)
	}
}

// Once the cap has dropped output, nothing written after is kept, though
// the character the cap cut left room: the output shown is a start of
// what the program wrote, whole characters only.
func TestCappedOutputKeepsNothingAfterTheCut(t *testing.T) {
	for _, later := range []string{"XYZ", "\u20ac"} {
		b := &cappedBuffer{max: 4}
		b.Write([]byte("abc\u20ac")) // the cap cuts the euro sign
		b.Write([]byte(later))
		if got := string(b.buf); got != "abc" || b.dropped != int64(3+len(later)) {
			t.Errorf("then %q: kept %q with %d bytes dropped, want \"abc\" with %d", later, got, b.dropped, 3+len(later))
		}
	}
}
