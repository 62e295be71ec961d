package bodylimit

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// A body read within its bounds ends as the body does; one byte past the
// total, or past the longest line, fails the read.
func TestBody(t *testing.T) {
	for _, tc := range []struct {
		name           string
		body           string
		total, maxLine int64
		want           string // "" when read whole
	}{
		{"exactly the bound", strings.Repeat("a\n", 50), 100, 10, ""},
		{"one byte more", strings.Repeat("a\n", 50) + "a", 100, 10, "more than 100 bytes"},
		{"a line exactly the longest", "aaaaaaaaaa\nb", 100, 10, ""},
		{"a line one byte longer", "aaaaaaaaaaa\nb", 100, 10, "a line of more than 10 bytes"},
		{"no line bound", strings.Repeat("a", 100), 100, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tooLarge := errors.New("too large")
			b := &Body{ReadCloser: io.NopCloser(strings.NewReader(tc.body)), Total: tc.total, MaxLine: tc.maxLine, TooLarge: func(line bool) error {
				if line {
					return fmt.Errorf("%w: a line of more than %d bytes", tooLarge, tc.maxLine)
				}
				return fmt.Errorf("%w: more than %d bytes", tooLarge, tc.total)
			}}
			got, err := io.ReadAll(b)
			switch {
			case tc.want == "" && (err != nil || string(got) != tc.body):
				t.Errorf("read %d bytes, %v; want the whole body", len(got), err)
			case tc.want != "" && (!errors.Is(err, tooLarge) || err.Error() != "too large: "+tc.want):
				t.Errorf("read %d bytes, %v; want %q", len(got), err, tc.want)
			}
		})
	}
}
