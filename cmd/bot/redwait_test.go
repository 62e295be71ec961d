package main

import (
	"testing"
	"time"
)

// The wait for Redis replicas is off by default, with a timeout of 1s for
// when it is set; both are read from the environment.
func TestRedisWaitSettings(t *testing.T) {
	setEnv(t, validEnv(t))
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.RedisWaitReplicas != 0 || c.RedisWaitTimeout != time.Second {
		t.Errorf("defaults REDIS_WAIT_REPLICAS %d, REDIS_WAIT_TIMEOUT %s; want 0, 1s", c.RedisWaitReplicas, c.RedisWaitTimeout)
	}
	env := validEnv(t)
	env["REDIS_WAIT_REPLICAS"], env["REDIS_WAIT_TIMEOUT"] = "2", "250ms"
	setEnv(t, env)
	if c, err = loadConfig(); err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	if c.RedisWaitReplicas != 2 || c.RedisWaitTimeout != 250*time.Millisecond {
		t.Errorf("REDIS_WAIT_REPLICAS=2 REDIS_WAIT_TIMEOUT=250ms read as %d, %s", c.RedisWaitReplicas, c.RedisWaitTimeout)
	}
}
