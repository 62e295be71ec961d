package redisstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
	"github.com/toolgate/toolgate/store/storetest"
)

// clusterURL returns REDIS_CLUSTER_URL, a redis+cluster:// URL of a real
// Redis Cluster (CI starts one). Unset, the test is skipped locally and
// fails in CI.
func clusterURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("REDIS_CLUSTER_URL")
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("REDIS_CLUSTER_URL is not set; CI must run the Redis Cluster tests")
		}
		t.Skip("REDIS_CLUSTER_URL is not set; set it (e.g. redis+cluster://127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003) to run the Redis Cluster tests")
	}
	return u
}

// clusterPrefix returns a key prefix of its own and deletes its keys, on
// every master, when the test ends.
func clusterPrefix(t *testing.T, rawURL string) string {
	t.Helper()
	prefix := "toolgate-test-" + store.NewRunID()
	t.Cleanup(func() {
		c, err := redisstore.NewClient(rawURL)
		if err != nil {
			t.Errorf("clean up %s: %v", prefix, err)
			return
		}
		defer c.Close()
		cc, ok := c.(*redis.ClusterClient)
		if !ok {
			t.Errorf("clean up %s: %T is not a cluster client", prefix, c)
			return
		}
		ctx := context.Background()
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			iter := node.Scan(ctx, 0, prefix+":*", 500).Iterator()
			for iter.Next(ctx) {
				if err := node.Del(ctx, iter.Val()).Err(); err != nil {
					return err
				}
			}
			return iter.Err()
		})
		if err != nil {
			t.Errorf("clean up %s: %v", prefix, err)
		}
	})
	return prefix
}

// The whole conformance suite on Redis Cluster: every script must touch
// keys of one hash slot, and no multi-key command may cross slots.
func TestConformanceCluster(t *testing.T) {
	u := clusterURL(t)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient(%s) gave a %T, want a cluster client", u, c)
	}
	_ = c.Close()
	storetest.Run(t, func(t *testing.T) (storetest.Store, func() storetest.Store) {
		opts := redisstore.Options{Prefix: clusterPrefix(t, u)}
		s := newStore(t, u, opts)
		t.Cleanup(func() { _ = s.Close() })
		reopen := func() storetest.Store {
			if err := s.Close(); err != nil {
				t.Fatalf("Close before reopening: %v", err)
			}
			s = newStore(t, u, opts)
			return s
		}
		return s, reopen
	})
}
