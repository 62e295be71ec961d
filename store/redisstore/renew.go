package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// renewalConns is how many connections (per node, on a Cluster) the
// client of RenewHolds has, apart from the Store's other commands: a
// renewal never waits for a connection behind them, however many turns
// keep the others busy, so a lease does not lapse while its holder is
// alive for want of one. One batch of renewals is sent at a time; the
// second connection stands in while the first is re-dialled.
const renewalConns = 2

// RenewHolds renews each lease and resume claim of holds as RenewLease and
// RenewClaim would, in one round trip (a second one only for a server
// that had not cached the scripts), on connections of their own when the
// Store was made by New. Each hold gets its own result; a hold whose
// command failed, or the round trip, gets the error.
func (s *Store) RenewHolds(ctx context.Context, ttl time.Duration, holds []store.Hold) []store.Renewed {
	out := make([]store.Renewed, len(holds))
	if ttl < time.Millisecond {
		for i, h := range holds {
			out[i].Err = fmt.Errorf("renew %s: ttl %v is under 1ms", holdName(h), ttl)
		}
		return out
	}
	c := s.renewals
	if c == nil {
		c = s.c
	}
	ms := ttl.Milliseconds()
	send := func(ctx context.Context, p redis.Pipeliner, h store.Hold, eval func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd) *redis.Cmd {
		if h.Run != "" {
			return eval(renewClaim, ctx, p, []string{s.runKey(h.Run), s.claimKey(h.Run)}, h.Owner, ms)
		}
		return eval(renewLease, ctx, p, []string{s.leaseKey(h.Lease)}, h.Owner, ms)
	}
	cmds := make([]*redis.Cmd, len(holds))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, h := range holds {
			cmds[i] = send(ctx, p, h, (*redis.Script).EvalSha)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = send(ctx, p, holds[i], (*redis.Script).Eval)
			}
			return nil
		})
	}
	for i, cmd := range cmds {
		n, err := cmd.Int()
		switch {
		case err != nil:
			out[i].Err = fmt.Errorf("renew %s: %w", holdName(holds[i]), err)
		case n < 0:
			out[i].Err = fmt.Errorf("renew %s: %w", holdName(holds[i]), store.ErrNotFound)
		default:
			out[i].OK = n == 1
		}
	}
	return out
}

// holdName names h in an error, as RenewLease and RenewClaim do.
func holdName(h store.Hold) string {
	if h.Run != "" {
		return "resume claim of run " + h.Run
	}
	return "lease " + h.Lease
}
