package fixedkey

import (
	"fmt"
	"maps"
	"runtime"
	"strconv"
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

// churn runs n entries through a map of a ring of size entries, one in as
// the oldest goes out, compacting it each time the ring comes round when
// compact is set, and returns the map and the keys the ring holds.
func churn(n, size int, compact bool) (map[Key]int, []Key) {
	m := make(map[Key]int, size)
	ring := make([]Key, size)
	next := 0
	for i := range n {
		k, _ := Of("C1:" + strconv.Itoa(i))
		if old := ring[next]; old != (Key{}) {
			delete(m, old)
		}
		ring[next] = k
		m[k] = i
		next = (next + 1) % size
		if compact && next == 0 {
			m = Compacted(m, size)
		}
	}
	return m, ring
}

// A compacted map holds what the map held, and nothing else.
func TestCompacted(t *testing.T) {
	m, ring := churn(10_000, 256, true)
	if len(m) != len(ring) {
		t.Fatalf("%d entries after the churn, want %d", len(m), len(ring))
	}
	for _, k := range ring {
		if _, ok := m[k]; !ok {
			t.Fatalf("the ring's key %q is not in the compacted map", strings.TrimRight(string(k[:]), "\x00"))
		}
	}
	before := maps.Clone(m)
	if got := Compacted(m, 256); !maps.Equal(got, before) {
		t.Error("Compacted changed the entries")
	}
}

// BenchmarkRingMapChurn reports the heap a ring's map of 4,096 entries
// holds after 100,000 went through it, as the bot's maps of recent
// messages and cards after a burst: compacted each time the ring comes
// round, and not.
func BenchmarkRingMapChurn(b *testing.B) {
	for _, compact := range []bool{false, true} {
		b.Run(fmt.Sprintf("compact=%v", compact), func(b *testing.B) {
			var live float64
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				m, ring := churn(100_000, 4096, compact)
				runtime.GC()
				runtime.ReadMemStats(&after)
				live = float64(after.HeapInuse) - float64(before.HeapInuse)
				runtime.KeepAlive(m)
				runtime.KeepAlive(ring)
			}
			b.ReportMetric(live/(1<<10), "live-KiB")
		})
	}
}
