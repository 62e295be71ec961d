package tools

import (
	"io"
	"strings"
	"testing"
)

// An HTTP server's answer of exactly the bound is read whole; one byte
// more fails the read.
func TestBoundedBodyOfAnMCPAnswer(t *testing.T) {
	for _, tc := range []struct {
		body     string
		tooLarge bool
	}{{strings.Repeat("a", 100), false}, {strings.Repeat("a", 101), true}} {
		b := &boundedBody{ReadCloser: io.NopCloser(strings.NewReader(tc.body)), left: 100}
		got, err := io.ReadAll(b)
		if tc.tooLarge != (err != nil) || !tc.tooLarge && string(got) != tc.body {
			t.Errorf("a body of %d bytes: read %d, %v; want too large: %v", len(tc.body), len(got), err, tc.tooLarge)
		}
	}
}
