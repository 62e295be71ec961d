package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// DefaultWaitTimeout is how long a write waits for its replicas when
// Options.WaitReplicas is set and Options.WaitTimeout is not.
const DefaultWaitTimeout = time.Second

// ErrNotReplicated is wrapped by the error of a store call whose write the
// primary made but fewer replicas than Options.WaitReplicas acknowledged
// within Options.WaitTimeout (or whose WAIT failed); it is
// store.ErrNotReplicated. The write stands on the primary, but a failover
// that promotes a replica that did not get it loses it: the caller treats
// the step as neither done nor refused, as it treats a reply that was
// lost.
var ErrNotReplicated = store.ErrNotReplicated

// waitHook makes every write of the Store wait for replicas: it sends
// WAIT numreplicas timeout after the write, on the same connection and in
// the same round trip, and turns a short count into an error on each
// write command that succeeded (so that a caller that reads each command's
// reply apart, ignoring the pipeline's error, sees it too). WAIT counts
// the replicas that acknowledged the connection's latest write, so it must
// follow the write on its connection: a write sent alone is sent in a
// pipeline with its WAIT; a pipeline gets its WAIT as its last command; a
// transaction (MULTI ... EXEC), whose replies go-redis reads itself and
// which cannot hold a WAIT (Redis answers a WAIT inside MULTI at once), is
// sent on a connection of its own followed by WAIT, a second round trip.
// A command or pipeline that only reads gets no WAIT: it would wait for
// nothing, and, with a replica down, fail for nothing.
//
// Before Redis 7, WAIT counts from the connection's latest write that
// Redis sent on to its replicas; a write that changed nothing (a script
// answering a resend as its first sending did, a decision refused as made
// already) sends nothing on, and the WAIT after it would count from an
// older write of that connection, or none: it would confirm at once what
// another connection wrote, and may not have reached a replica, such as
// the decision the lost first sending made. So a PUBLISH to a channel no
// one listens to, which Redis always sends on to its replicas, goes before
// each WAIT: the WAIT then counts every write the primary made before it,
// whichever connection made it, on every version (Redis 7 counts from the
// connection's latest command).
//
// It works on a client of one node or of a Sentinel's primary only; a
// Cluster client routes a keyless WAIT to any node (see Options).
type waitHook struct {
	c       *redis.Client
	n       int
	timeout time.Duration
	// mark is the channel of the PUBLISH before each WAIT.
	mark string
}

var _ redis.Hook = (*waitHook)(nil)

// waited marks the context of a transaction the hook sends itself, with
// its WAIT after it: the hook lets it through.
type waited struct{}

func (h *waitHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook sends a write that was to go alone in a pipeline with its
// WAIT (see ProcessPipelineHook): one round trip still. Hooks added to the
// client before the Store was made see the command, then that pipeline.
func (h *waitHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !writes(cmd) || ctx.Value(waited{}) != nil {
			return next(ctx, cmd)
		}
		p := h.c.Pipeline()
		_ = p.Process(ctx, cmd)
		_, _ = p.Exec(ctx)
		return cmd.Err()
	}
}

// ProcessPipelineHook appends WAIT to a pipeline that writes, and sends a
// transaction that writes followed by WAIT (see tx).
func (h *waitHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(waited{}) != nil || !anyCmd(cmds, writes) {
			return next(ctx, cmds)
		}
		if len(cmds) >= 2 && cmds[0].Name() == "multi" && cmds[len(cmds)-1].Name() == "exec" {
			return h.tx(ctx, cmds[1:len(cmds)-1])
		}
		mark := redis.NewIntCmd(ctx, "publish", h.mark, "")
		wait := redis.NewIntCmd(ctx, "wait", h.n, h.timeout.Milliseconds())
		_ = next(ctx, append(cmds[:len(cmds):len(cmds)], mark, wait))
		h.settle(cmds, mark, wait)
		return firstErr(cmds)
	}
}

// tx sends the commands of a transaction, cmds, in MULTI ... EXEC on a
// connection taken from the pool for it, then WAIT on that connection.
func (h *waitHook) tx(ctx context.Context, cmds []redis.Cmder) error {
	conn := h.c.Conn()
	defer func() { _ = conn.Close() }()
	ctx = context.WithValue(ctx, waited{}, true)
	_, _ = conn.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range cmds {
			_ = p.Process(ctx, c)
		}
		return nil
	})
	if anyCmd(cmds, func(c redis.Cmder) bool { return c.Err() == nil || c.Err() == redis.Nil }) {
		// EXEC ran (a command's own error reply does not stop the
		// others): what it wrote is waited for.
		mark := redis.NewIntCmd(ctx, "publish", h.mark, "")
		wait := redis.NewIntCmd(ctx, "wait", h.n, h.timeout.Milliseconds())
		_, _ = conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			_ = p.Process(ctx, mark)
			_ = p.Process(ctx, wait)
			return nil
		})
		h.settle(cmds, mark, wait)
	}
	return firstErr(cmds)
}

// settle sets, when the mark before wait failed, or wait reports fewer
// replicas than asked or failed, an error wrapping ErrNotReplicated on
// each write of cmds that succeeded (or was answered nil).
func (h *waitHook) settle(cmds []redis.Cmder, mark, wait *redis.IntCmd) {
	got, err := wait.Result()
	if err == nil {
		err = mark.Err()
	}
	if err == nil && got >= int64(h.n) {
		return
	}
	var nerr error
	if err != nil {
		nerr = fmt.Errorf("%w: written on the primary, but waiting for %d replicas to acknowledge it failed: %v", ErrNotReplicated, h.n, err)
	} else {
		nerr = fmt.Errorf("%w: written on the primary but acknowledged by only %d of %d replicas within %s; check that the replicas are up and connected to the primary (INFO replication)", ErrNotReplicated, got, h.n, h.timeout)
	}
	for _, c := range cmds {
		// A write answered nil (SET NX GET of a new key) made its write
		// as one answered a value did.
		if err := c.Err(); writes(c) && (err == nil || err == redis.Nil) {
			c.SetErr(nerr)
		}
	}
}

// firstErr is the error of the first of cmds that failed.
func firstErr(cmds []redis.Cmder) error {
	for _, c := range cmds {
		if err := c.Err(); err != nil {
			return err
		}
	}
	return nil
}

func anyCmd(cmds []redis.Cmder, f func(redis.Cmder) bool) bool {
	for _, c := range cmds {
		if f(c) {
			return true
		}
	}
	return false
}

// writes reports whether cmd may write: every command but the reads and
// the connection's own commands listed in notWrites. A command not listed
// (a script, one the store starts to use) is taken as a write, so that
// nothing that writes goes without its WAIT.
func writes(cmd redis.Cmder) bool { return !notWrites[cmd.Name()] }

// notWrites are the commands that write no data: reads, the handshake of
// a connection, transactions' brackets (their commands are judged), and
// PUBLISH, whose message is a hint that no replica keeps.
var notWrites = map[string]bool{}

func init() {
	for _, name := range strings.Fields(`
		get mget getrange strlen exists type ttl pttl expiretime pexpiretime
		hget hgetall hmget hkeys hvals hlen hexists hstrlen hscan hrandfield
		lrange llen lindex lpos
		smembers sismember smismember scard srandmember sscan sinter sunion sdiff
		zrange zrangebyscore zrevrangebyscore zrangebylex zrevrangebylex zrevrange
		zcard zscore zmscore zcount zlexcount zrank zrevrank zscan zrandmember
		scan keys dbsize randomkey object memory dump
		evalsha_ro eval_ro fcall_ro
		info ping echo time command config role lastsave slowlog latency
		hello auth select client readonly readwrite
		multi exec discard watch unwatch
		wait waitaof publish spublish script cluster`) {
		notWrites[name] = true
	}
}

// ConnectedReplicas returns the number of replicas connected to the
// primary the Store writes to, as its INFO replication reports it
// (connected_slaves); on a Cluster, the fewest of any primary's.
func (s *Store) ConnectedReplicas(ctx context.Context) (int, error) {
	least := -1
	err := EachPrimary(ctx, s.c, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		n, err := connectedReplicas(info)
		if err != nil {
			return err
		}
		if least < 0 || n < least {
			least = n
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count connected replicas: %w", err)
	}
	return max(least, 0), nil
}

// connectedReplicas reads connected_slaves from INFO replication's text.
func connectedReplicas(info string) (int, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO replication has no connected_slaves")
}
