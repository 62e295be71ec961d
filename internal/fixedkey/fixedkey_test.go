package fixedkey

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	a, ok := Of("C1:1700000000.000100")
	if !ok {
		t.Fatal("Of refused a message id")
	}
	if b, _ := Of("C1:1700000000.000100"); a != b {
		t.Error("the same id gave two keys")
	}
	if b, _ := Of("C1:1700000000.00010"); a == b {
		t.Error("a prefix of an id gave the id's key")
	}
	if _, ok := Of(strings.Repeat("x", 32)); !ok {
		t.Error("Of refused an id of 32 bytes")
	}
	for _, bad := range []string{"", strings.Repeat("x", 33), "a\x00"} {
		if _, ok := Of(bad); ok {
			t.Errorf("Of(%q) = ok, want refused", bad)
		}
	}
}
