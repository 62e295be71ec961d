package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store/redisstore"
	"github.com/toolgate/toolgate/store/storetest"
)

// The whole conformance suite on Redis Cluster: every script must touch
// keys of one hash slot, and no multi-key command may cross slots.
func TestConformanceCluster(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient(%s) gave a %T, want a cluster client", u, c)
	}
	_ = c.Close()
	storetest.Run(t, func(t *testing.T) (storetest.Store, func() storetest.Store) {
		opts := redisstore.Options{Prefix: newPrefix(t, u)}
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

// The conformance suite through Redis Sentinel: the store finds the master
// through the sentinels.
func TestConformanceSentinel(t *testing.T) {
	u := envURL(t, "REDIS_SENTINEL_URL", "redis+sentinel://127.0.0.1:26379/9?master_name=mymaster")
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.(*redis.Client); !ok {
		t.Fatalf("NewClient(%s) gave a %T, want a failover client", u, c)
	}
	_ = c.Close()
	storetest.Run(t, func(t *testing.T) (storetest.Store, func() storetest.Store) {
		opts := redisstore.Options{Prefix: newPrefix(t, u)}
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
