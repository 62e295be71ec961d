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
	if c := clientOf(t, u); !isType[*redis.ClusterClient](c) {
		t.Fatalf("NewClient(%s) gave a %T, want a cluster client", u, c)
	}
	storetest.Run(t, openOn(u))
}

// The conformance suite through Redis Sentinel: the store finds the master
// through the sentinels.
func TestConformanceSentinel(t *testing.T) {
	u := envURL(t, "REDIS_SENTINEL_URL", "redis+sentinel://127.0.0.1:26379/9?master_name=mymaster")
	if c := clientOf(t, u); !isType[*redis.Client](c) {
		t.Fatalf("NewClient(%s) gave a %T, want a failover client", u, c)
	}
	storetest.Run(t, openOn(u))
}

// clientOf returns the (closed) client NewClient makes for u, to check its
// kind.
func clientOf(t *testing.T, u string) redis.UniversalClient {
	t.Helper()
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	return c
}

func isType[T any](v any) bool {
	_, ok := v.(T)
	return ok
}
