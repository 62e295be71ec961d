package redact_test

import (
	"errors"
	"io/fs"
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
