package agent

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// A body read within its bound ends as the body does; one byte past the
// bound, or past the longest line, fails the read.
func TestBoundedBody(t *testing.T) {
	for _, tc := range []struct {
		name          string
		body          string
		left, maxLine int64
		tooLarge      bool
	}{
		{"exactly the bound", strings.Repeat("a\n", 50), 100, 10, false},
		{"one byte more", strings.Repeat("a\n", 50) + "a", 100, 10, true},
		{"a line exactly the longest", "aaaaaaaaaa\nb", 100, 10, false},
		{"a line one byte longer", "aaaaaaaaaaa\nb", 100, 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &boundedBody{ReadCloser: io.NopCloser(strings.NewReader(tc.body)), left: tc.left, maxLine: tc.maxLine}
			got, err := io.ReadAll(b)
			if tc.tooLarge != errors.Is(err, errAnswerTooLarge) || !tc.tooLarge && (err != nil || string(got) != tc.body) {
				t.Errorf("read %d bytes, %v; want too large: %v", len(got), err, tc.tooLarge)
			}
		})
	}
}
