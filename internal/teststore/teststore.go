package teststore

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/redisstore"
	"github.com/toolgate/toolgate/store/storetest"
)

// Kind is one store implementation.
type Kind struct {
	Name string
	// Open prepares a place for a store and returns a function that opens
	// a handle on it. Each call models a process start on the same data:
	// the previous handle is closed first. The last one is closed when the
	// test ends.
	Open func(t *testing.T) func() storetest.Store
}

// RedisURL returns REDIS_URL. When it is unset, it fails t in CI and
// reports false elsewhere.
func RedisURL(t testing.TB) (string, bool) {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("REDIS_URL is not set; CI must run the Redis tests")
		}
		return "", false
	}
	return url, true
}

// Kinds returns the embedded store and, when REDIS_URL is set, Redis.
func Kinds(t *testing.T) []Kind {
	t.Helper()
	kinds := []Kind{{Name: "bolt", Open: openBolt}}
	if url, ok := RedisURL(t); ok {
		kinds = append(kinds, Kind{Name: "redis", Open: func(t *testing.T) func() storetest.Store { return openRedis(t, url) }})
	} else {
		t.Log("REDIS_URL is not set: leaving out the Redis store")
	}
	if url := os.Getenv("REDIS_CLUSTER_URL"); url != "" {
		kinds = append(kinds, Kind{Name: "redis-cluster", Open: func(t *testing.T) func() storetest.Store { return openRedis(t, url) }})
	}
	return kinds
}

// handles keeps the latest handle of one place, closing the one before.
type handles struct {
	mu  sync.Mutex
	cur storetest.Store
}

func (h *handles) swap(open func() (storetest.Store, error), t *testing.T) storetest.Store {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != nil {
		_ = h.cur.Close()
		h.cur = nil
	}
	s, err := open()
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	h.cur = s
	return s
}

func (h *handles) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur != nil {
		_ = h.cur.Close()
	}
}

func openBolt(t *testing.T) func() storetest.Store {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	h := &handles{}
	t.Cleanup(h.close)
	return func() storetest.Store {
		return h.swap(func() (storetest.Store, error) { return boltstore.Open(path, boltstore.Options{}) }, t)
	}
}

func openRedis(t *testing.T, url string) func() storetest.Store {
	prefix := "test-" + store.NewRunID()
	h := &handles{}
	t.Cleanup(h.close)
	return func() storetest.Store {
		return h.swap(func() (storetest.Store, error) {
			return redisstore.New(context.Background(), url, redisstore.Options{Prefix: prefix})
		}, t)
	}
}
