package teststore

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

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
	if url, ok := ClusterURL(t); ok {
		kinds = append(kinds, Kind{Name: "redis-cluster", Open: func(t *testing.T) func() storetest.Store { return openRedis(t, url) }})
	}
	return kinds
}

// ClusterURL returns REDIS_CLUSTER_URL (a Redis Cluster). When it is
// unset, it fails t in CI and reports false elsewhere.
func ClusterURL(t testing.TB) (string, bool) {
	t.Helper()
	url := os.Getenv("REDIS_CLUSTER_URL")
	if url == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("REDIS_CLUSTER_URL is not set; CI must run the Redis Cluster tests")
		}
		t.Log("REDIS_CLUSTER_URL is not set: leaving out Redis Cluster")
		return "", false
	}
	return url, true
}

// Prefix returns a Redis key prefix of its own for one test, starting
// with name, and deletes its keys (on every master of a cluster) when the
// test ends.
func Prefix(t testing.TB, rawURL, name string) string {
	t.Helper()
	prefix := name + "-" + store.NewRunID()
	t.Cleanup(func() {
		err := EachKey(context.Background(), rawURL, prefix, func(ctx context.Context, node *redis.Client, key string) error {
			return node.Del(ctx, key).Err()
		})
		if err != nil {
			t.Errorf("clean up %s: %v", prefix, err)
		}
	})
	return prefix
}

// EachKey calls fn with each key under prefix, on every master of the
// Redis at rawURL.
func EachKey(ctx context.Context, rawURL, prefix string, fn func(ctx context.Context, node *redis.Client, key string) error) error {
	c, err := redisstore.NewClient(rawURL)
	if err != nil {
		return err
	}
	defer c.Close()
	scan := func(ctx context.Context, node *redis.Client) error {
		iter := node.Scan(ctx, 0, prefix+":*", 500).Iterator()
		for iter.Next(ctx) {
			if err := fn(ctx, node, iter.Val()); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	return redisstore.EachPrimary(ctx, c, scan)
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
	prefix := Prefix(t, url, "test")
	h := &handles{}
	t.Cleanup(h.close)
	return func() storetest.Store {
		return h.swap(func() (storetest.Store, error) {
			return redisstore.New(context.Background(), url, redisstore.Options{Prefix: prefix})
		}, t)
	}
}
