package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that calls itself once per round trip to
// the server: once per command sent alone (a script is one EVALSHA, plus an
// EVAL when the server did not have it cached yet) and once per pipeline,
// however many commands it holds. The handshake of a new connection (HELLO,
// AUTH, SELECT, CLIENT SETINFO, READONLY) is left out: it is the cost of
// dialling, which the connection pool keeps rare. On a single node or a
// Sentinel primary that is exact; a Redis Cluster pipeline that spans
// several nodes is counted once although it reaches each of them. Add it
// with AddHook.
type RoundTrips func()

var _ redis.Hook = RoundTrips(nil)

// DialHook leaves dialling alone.
func (f RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook counts one command sent alone.
func (f RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			f()
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts one pipeline.
func (f RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && !handshake(cmds[0]) {
			f()
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is one that go-redis sends on a new
// connection before any of the Store's own; the Store sends none of them.
func handshake(cmd redis.Cmder) bool {
	switch cmd.Name() {
	case "hello", "auth", "select", "client", "readonly":
		return true
	}
	return false
}

// AddHook adds h to the Store's clients: it sees every command the Store
// sends from then on (the lease watcher's subscriptions aside). Add hooks
// before the Store is used.
func (s *Store) AddHook(h redis.Hook) {
	s.c.AddHook(h)
	if s.renewals != nil {
		s.renewals.AddHook(h)
	}
}
