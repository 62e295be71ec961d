package redisstore

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// Renewals of leases and resume claims (RenewLease, RenewClaim) are what
// keeps a live turn's or resume's work its own: one that comes too late
// gives the work up. So they do not queue with the Store's other commands.
// They go out on a client of their own (renewalConns connections per
// node, when the Store was made by New), and in batches: the renewals
// asked for while a batch is on its way go together in the next, one
// pipeline, so that however many turns a process runs, renewing costs it
// a round trip or two per renewal interval. Each node (one, but on a
// Cluster) has its own queue and up to renewSenders batches out at once,
// so that a batch that hangs (a node that stopped answering, a half-open
// connection) holds up neither the next batch nor another node's.

// renewalConns is how many connections (per node, on a Cluster) the
// renewals' client has; one per batch out at once.
const renewalConns = renewSenders

// renewSenders is how many batches of one node's renewals are out at once.
const renewSenders = 2

// maxRenewBatch bounds the renewals sent in one round trip.
const maxRenewBatch = 1024

// renewal is one renewal waiting for its batch.
type renewal struct {
	ctx context.Context
	// run is the run of a resume claim; key the lease's key otherwise.
	run, key string
	owner    string
	ttl      time.Duration
	done     chan renewed // buffered: a sender never waits for a caller gone
}

type renewed struct {
	ok  bool
	err error
}

// renewQueue holds the renewals waiting for one node's next batch.
type renewQueue struct {
	waiting []*renewal
	// senders counts the goroutines sending this queue's batches; each
	// sends until the queue is empty.
	senders int
}

// renewer queues renewals by node.
type renewer struct {
	mu     sync.Mutex
	queues map[string]*renewQueue
	// closed is set by Store.Close: no sender starts after it.
	closed bool
	// senders are the goroutines sending batches, which Store.Close
	// waits for.
	senders sync.WaitGroup
}

// renewalClient is the client renewals are sent on.
func (s *Store) renewalClient() redis.UniversalClient {
	if s.renewals != nil {
		return s.renewals
	}
	return s.c
}

// renew sends r in the next batch of its node and waits for its result,
// or for r.ctx to end.
func (s *Store) renew(r *renewal) (bool, error) {
	if r.ttl < time.Millisecond {
		return false, fmt.Errorf("renew %s: ttl %v is under 1ms", r.name(), r.ttl)
	}
	if err := r.ctx.Err(); err != nil {
		return false, fmt.Errorf("renew %s: %w", r.name(), err)
	}
	r.done = make(chan renewed, 1)
	node := s.renewalNode(r)
	s.renewer.mu.Lock()
	if s.renewer.closed {
		s.renewer.mu.Unlock()
		return false, fmt.Errorf("renew %s: %w", r.name(), redis.ErrClosed)
	}
	if s.renewer.queues == nil {
		s.renewer.queues = map[string]*renewQueue{}
	}
	q := s.renewer.queues[node]
	if q == nil {
		q = &renewQueue{}
		s.renewer.queues[node] = q
	}
	q.waiting = append(q.waiting, r)
	if q.senders < renewSenders {
		q.senders++
		s.renewer.senders.Go(func() { s.sendRenewals(node, q) })
	}
	s.renewer.mu.Unlock()
	select {
	case res := <-r.done:
		return res.ok, res.err
	case <-r.ctx.Done():
		return false, fmt.Errorf("renew %s: %w", r.name(), r.ctx.Err())
	}
}

// renewalNode names the node r's key is on: the master's address on a
// Cluster (as the client last learnt it), "" otherwise.
func (s *Store) renewalNode(r *renewal) string {
	cc, ok := s.renewalClient().(*redis.ClusterClient)
	if !ok {
		return ""
	}
	n, err := cc.MasterForKey(r.ctx, r.redisKey(s))
	if err != nil {
		return "" // the client's routing will find it
	}
	return n.Options().Addr
}

// sendRenewals sends q's batches until q is empty.
func (s *Store) sendRenewals(node string, q *renewQueue) {
	for {
		s.renewer.mu.Lock()
		n := min(len(q.waiting), maxRenewBatch)
		if n == 0 {
			q.waiting = nil
			q.senders--
			if q.senders == 0 {
				delete(s.renewer.queues, node)
			}
			s.renewer.mu.Unlock()
			return
		}
		batch := q.waiting[:n:n]
		q.waiting = q.waiting[n:]
		s.renewer.mu.Unlock()
		s.sendBatch(batch)
	}
}

// sendBatch sends the renewals of batch whose callers still wait in one
// pipeline (a second one for those a server had not cached the scripts
// of), and gives each caller its result. The round trip is the callers':
// it lasts as long as the latest of their deadlines (a third of its ttl
// for a caller with none), and does not end when one of them gives up.
func (s *Store) sendBatch(batch []*renewal) {
	now := time.Now()
	var deadline time.Time
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() != nil {
			continue
		}
		live = append(live, r)
		d, ok := r.ctx.Deadline()
		if !ok {
			d = now.Add(r.ttl / 3)
		}
		if d.After(deadline) {
			deadline = d
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	c := s.renewalClient()
	cmds := make([]*redis.Cmd, len(live))
	send := func(eval func(*redis.Script, context.Context, redis.Scripter, []string, ...any) *redis.Cmd, which []int) {
		_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range which {
				r := live[i]
				if r.run != "" {
					cmds[i] = eval(renewClaim, ctx, p, []string{s.runKey(r.run), s.claimKey(r.run)}, r.owner, r.ttl.Milliseconds())
				} else {
					cmds[i] = eval(renewLease, ctx, p, []string{s.leaseKey(r.key)}, r.owner, r.ttl.Milliseconds())
				}
			}
			return nil
		})
	}
	all := make([]int, len(live))
	for i := range all {
		all[i] = i
	}
	send((*redis.Script).EvalSha, all)
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		send((*redis.Script).Eval, again)
	}
	for i, r := range live {
		n, err := cmds[i].Int()
		switch {
		case err != nil:
			r.done <- renewed{err: fmt.Errorf("renew %s: %w", r.name(), err)}
		case n < 0:
			r.done <- renewed{err: fmt.Errorf("renew %s: %w", r.name(), store.ErrNotFound)}
		default:
			r.done <- renewed{ok: n == 1}
		}
	}
}

// name names r in an error.
func (r *renewal) name() string {
	if r.run != "" {
		return "resume claim of run " + r.run
	}
	return "lease " + r.key
}

// redisKey is the Redis key r renews.
func (r *renewal) redisKey(s *Store) string {
	if r.run != "" {
		return s.claimKey(r.run)
	}
	return s.leaseKey(r.key)
}
