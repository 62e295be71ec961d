package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// Renewals sent together renew each lease and resume claim as one sent
// alone would, keys spread over a Cluster's nodes included, and after the
// server dropped its cached scripts.
func TestRenewalsRenewEachAsAlone(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single node", redisURL(t)},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, tc.url, redisstore.Options{Prefix: newPrefix(t, tc.url)})
			t.Cleanup(func() { _ = s.Close() })
			flushScripts(t, tc.url)

			type hold struct {
				lease, run, owner string
				want              bool
				wantErr           error
			}
			var holds []hold
			for i := range 6 {
				key := "conv:renew-" + string(rune('a'+i))
				if i%3 != 2 { // every third lease is no one's
					if ok, err := s.AcquireLease(ctx, key, "me", time.Second); err != nil || !ok {
						t.Fatalf("AcquireLease(%s) = %v, %v", key, ok, err)
					}
				}
				owner := "me"
				if i%3 == 1 {
					owner = "someone else"
				}
				holds = append(holds, hold{lease: key, owner: owner, want: i%3 == 0})
			}
			r, calls := testRun()
			if err := s.CreateRun(ctx, r, calls); err != nil {
				t.Fatal(err)
			}
			if _, _, err := s.Decide(ctx, calls[0].ID, calls[0].Fingerprint, store.Decision{Kind: "approve", Decider: "U1", At: time.Now()}); err != nil {
				t.Fatal(err)
			}
			if ok, err := s.ClaimResume(ctx, r.ID, "me", time.Second); err != nil || !ok {
				t.Fatalf("ClaimResume = %v, %v", ok, err)
			}
			holds = append(holds, hold{run: r.ID, owner: "me", want: true}, hold{run: r.ID, owner: "someone else"}, hold{run: store.NewRunID(), owner: "me", wantErr: store.ErrNotFound})

			var wg sync.WaitGroup
			for _, h := range holds {
				wg.Go(func() {
					var ok bool
					var err error
					if h.run != "" {
						ok, err = s.RenewClaim(ctx, h.run, h.owner, time.Hour)
					} else {
						ok, err = s.RenewLease(ctx, h.lease, h.owner, time.Hour)
					}
					if ok != h.want || !errors.Is(err, h.wantErr) || (h.wantErr == nil) != (err == nil) {
						t.Errorf("renewal of %+v = %v, %v; want %v, %v", h, ok, err, h.want, h.wantErr)
					}
				})
			}
			wg.Wait()
			// The renewed ones last the new ttl: past the old one, they are
			// still held.
			for _, h := range holds[:6] {
				if !h.want {
					continue
				}
				if pttl := pttlOf(t, s, h.lease); pttl < time.Minute {
					t.Errorf("lease %s has %v left after its renewal for an hour", h.lease, pttl)
				}
			}
			if ok, err := s.ClaimResume(ctx, r.ID, "someone else", time.Second); err != nil || ok {
				t.Errorf("ClaimResume by another owner after the claim's renewal = %v, %v; want false", ok, err)
			}
		})
	}
}

// heldPipelines is a hook that records the length of each pipeline of
// scripts and,
// for the first hold of them, waits until release is closed before
// sending it, telling entered.
type heldPipelines struct {
	mu      sync.Mutex
	lengths []int
	hold    int
	entered chan struct{}
	release chan struct{}
}

func (h *heldPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *heldPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *heldPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "evalsha" {
			// A new connection's handshake, or the scripts sent again
			// to a server whose cache another test, sharing it, flushed.
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.lengths = append(h.lengths, len(cmds))
		held := len(h.lengths) <= h.hold
		h.mu.Unlock()
		if held {
			h.entered <- struct{}{}
			<-h.release
		}
		return next(ctx, cmds)
	}
}

// entered waits for h to hold a pipeline.
func entered(t *testing.T, h *heldPipelines) {
	t.Helper()
	select {
	case <-h.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch of renewals went out")
	}
}

// The renewals asked for while batches are out go together in the next
// one, leaving out those whose callers gave up; a caller's giving up does
// not end the others' round trip.
func TestRenewalsAskedMeanwhileGoInOneBatch(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	h := &heldPipelines{hold: 2, entered: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(h)
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	for _, k := range []string{"conv:a", "conv:b", "conv:c", "conv:d", "conv:e"} {
		if ok, err := s.AcquireLease(ctx, k, "me", time.Minute); err != nil || !ok {
			t.Fatalf("AcquireLease(%s) = %v, %v", k, ok, err)
		}
	}
	type result struct {
		ok  bool
		err error
	}
	renew := func(ctx context.Context, key string) <-chan result {
		r := make(chan result, 1)
		go func() {
			ok, err := s.RenewLease(ctx, key, "me", time.Minute)
			r <- result{ok, err}
		}()
		return r
	}
	// Two batches out, each held before it is sent.
	a := renew(ctx, "conv:a")
	entered(t, h)
	b := renew(ctx, "conv:b")
	entered(t, h)
	// Three more wait; one of them gives up.
	cr := renew(ctx, "conv:c")
	gaveUpCtx, giveUp := context.WithCancel(ctx)
	d := renew(gaveUpCtx, "conv:d")
	e := renew(ctx, "conv:e")
	eventuallyTrue(t, "three renewals waiting", func() bool { return redisstore.RenewalsWaiting(s) == 3 })
	giveUp()
	if res := <-d; !errors.Is(res.err, context.Canceled) {
		t.Errorf("renewal given up = %+v, want context.Canceled", res)
	}
	close(h.release)
	for name, r := range map[string]<-chan result{"a": a, "b": b, "c": cr, "e": e} {
		if res := <-r; !res.ok || res.err != nil {
			t.Errorf("renewal of %s = %+v, want held", name, res)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Equal(h.lengths, []int{1, 1, 2}) {
		t.Errorf("pipelines sent = %v commands, want 1 and 1, then the 2 that waited (the one given up left out)", h.lengths)
	}
}

// A renewal goes out on connections of its own: the store's other
// commands, holding every connection of their pool (pipelines' included),
// do not hold it up.
func TestRenewalsDoNotWaitForTheStoresConnections(t *testing.T) {
	u := redisURL(t)
	sep := "?"
	if strings.Contains(u, "?") {
		sep = "&"
	}
	prefix := newPrefix(t, u)
	s := newStore(t, u+sep+"pool_size=1&pipeline_pool_size=-1&pool_timeout=30s", redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if ok, err := s.AcquireLease(ctx, "conv:busy", "me", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}

	// The pool's one connection blocks on a list no one pushes to until
	// the test does; the test sees it blocked before it renews.
	blocked := make(chan error, 1)
	list := prefix + ":test-blocked"
	name := "toolgate-renew-test-" + store.NewRunID()
	go func() {
		c := redisstore.ClientOf(s)
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			p.ClientSetName(ctx, name)
			p.BLPop(ctx, 20*time.Second, list)
			return nil
		})
		blocked <- err
	}()
	watcher, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close()
	eventuallyTrue(t, "the pool's connection blocked", func() bool {
		list, err := watcher.ClientList(ctx).Result()
		return err == nil && strings.Contains(list, "name="+name) && strings.Contains(list, "cmd=blpop")
	})

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ok, err := s.RenewLease(rctx, "conv:busy", "me", time.Minute)
	if err != nil || !ok {
		t.Errorf("RenewLease while the store's only other connection is busy = %v, %v; want true", ok, err)
	}
	select {
	case err := <-blocked:
		t.Fatalf("the blocking command ended (%v) before the renewal was checked", err)
	default:
	}
	if err := watcher.RPush(ctx, list, "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := <-blocked; err != nil {
		t.Fatalf("the blocking command: %v", err)
	}
}

// flushScripts has every primary of the Redis at u drop its cached
// scripts, so that the next script sent by its hash is not found.
func flushScripts(t *testing.T, u string) {
	t.Helper()
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flush := func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() }
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(t.Context(), flush)
	} else {
		err = flush(t.Context(), c.(*redis.Client))
	}
	if err != nil {
		t.Fatal(err)
	}
}

// pttlOf returns how long the lease on key has left.
func pttlOf(t *testing.T, s *redisstore.Store, key string) time.Duration {
	t.Helper()
	d, err := redisstore.ClientOf(s).PTTL(t.Context(), redisstore.LeaseKey(s, key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// eventuallyTrue waits up to 10 s for cond, checking every 10 ms.
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// blackHole listens on a port of its own and accepts connections that it
// never answers; it sends each on the returned channel.
func blackHole(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	c := make(chan net.Conn, 16)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { _ = conn.Close() })
			c <- conn
		}
	}()
	return l.Addr().String(), c
}

// A batch that hangs (a connection that stopped answering) does not hold
// up the next: a renewal asked for meanwhile goes out in a batch of its
// own.
func TestRenewalsGoOnPastAHungBatch(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	o, err := redis.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	hole, accepted := blackHole(t)
	var dials sync.Mutex
	first := true
	var d net.Dialer
	o.ContextTimeoutEnabled = true
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Lock()
		hung := first
		first = false
		dials.Unlock()
		if hung {
			return d.DialContext(ctx, "tcp", hole)
		}
		return d.DialContext(ctx, network, addr)
	}
	o.Protocol = 2 // no HELLO: the hung connection is taken as it is
	s := redisstore.NewFromClient(redis.NewClient(o), redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	other := newStore(t, u, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = other.Close() })
	ctx := t.Context()
	for _, k := range []string{"conv:hung", "conv:next"} {
		if ok, err := other.AcquireLease(ctx, k, "me", time.Minute); err != nil || !ok {
			t.Fatalf("AcquireLease(%s) = %v, %v", k, ok, err)
		}
	}

	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hung := make(chan error, 1)
	go func() {
		_, err := s.RenewLease(hctx, "conv:hung", "me", time.Minute)
		hung <- err
	}()
	<-accepted // its batch went out on the connection that does not answer
	nctx, cancelNext := context.WithTimeout(ctx, 5*time.Second)
	defer cancelNext()
	if ok, err := s.RenewLease(nctx, "conv:next", "me", time.Minute); err != nil || !ok {
		t.Errorf("renewal while another batch hangs = %v, %v; want true", ok, err)
	}
	cancel()
	if err := <-hung; err == nil {
		t.Error("the renewal on the connection that does not answer succeeded")
	}
}

// On a Cluster, a node that stopped answering holds up the renewals of
// its own keys only, even with every batch it may have out hung.
func TestRenewalsOfOneNodeDoNotWaitForAnother(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	prefix := newPrefix(t, u)
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	plain := c.(*redis.ClusterClient)
	defer plain.Close()
	ctx := t.Context()
	hole, accepted := blackHole(t)
	o := plain.Options()
	hungAddr := ""
	var d net.Dialer
	co := *o
	co.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == hungAddr {
			return d.DialContext(ctx, "tcp", hole)
		}
		return d.DialContext(ctx, network, addr)
	}
	co.Protocol = 2
	s := redisstore.NewFromClient(redis.NewClusterClient(&co), redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	other := redisstore.NewFromClient(plain, redisstore.Options{Prefix: prefix})

	// Leases on two masters: two on the one that will stop answering.
	nodeOf := func(key string) string {
		n, err := plain.MasterForKey(ctx, redisstore.LeaseKey(s, key))
		if err != nil {
			t.Fatal(err)
		}
		return n.Options().Addr
	}
	byNode := map[string][]string{}
	for i := 0; len(byNode) < 2 || !slices.ContainsFunc(slices.Collect(maps.Values(byNode)), func(ks []string) bool { return len(ks) >= 2 }); i++ {
		k := fmt.Sprintf("conv:node-%d", i)
		n := nodeOf(k)
		byNode[n] = append(byNode[n], k)
	}
	var healthy string
	var hungKeys []string
	for n, ks := range byNode {
		if len(ks) >= 2 && hungAddr == "" {
			hungAddr, hungKeys = n, ks[:2]
		}
	}
	for n, ks := range byNode {
		if n != hungAddr {
			healthy = ks[0]
		}
	}
	for _, k := range append([]string{healthy}, hungKeys...) {
		if ok, err := other.AcquireLease(ctx, k, "me", time.Minute); err != nil || !ok {
			t.Fatalf("AcquireLease(%s) = %v, %v", k, ok, err)
		}
	}

	hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	hung := make(chan error, len(hungKeys))
	for _, k := range hungKeys {
		go func() {
			_, err := s.RenewLease(hctx, k, "me", time.Minute)
			hung <- err
		}()
		<-accepted // a batch out to the node that does not answer
	}
	nctx, cancelNext := context.WithTimeout(ctx, 5*time.Second)
	defer cancelNext()
	if ok, err := s.RenewLease(nctx, healthy, "me", time.Minute); err != nil || !ok {
		t.Errorf("renewal on a node that answers while another's batches hang = %v, %v; want true", ok, err)
	}
	cancel()
	for range hungKeys {
		if err := <-hung; err == nil {
			t.Error("a renewal on the node that does not answer succeeded")
		}
	}
}

// The renewals' client is a few connections of its own, which never sends
// a renewal again: one sent again after its caller gave up would extend a
// hold its owner took as not renewed, and may have given up.
func TestRenewalsClientSendsOnce(t *testing.T) {
	for _, tc := range []struct{ name, url string }{
		{"single node", redisURL(t)},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t, tc.url, redisstore.Options{Prefix: newPrefix(t, tc.url)})
			t.Cleanup(func() { _ = s.Close() })
			c := redisstore.RenewalsClient(s)
			if c == redisstore.ClientOf(s) {
				t.Fatal("renewals go out on the store's other client")
			}
			// A MaxRetries of -1 is none, which a client of one node
			// shows as 0 once made; 0 would be 3.
			var retries, none, pool int
			switch c := c.(type) {
			case *redis.ClusterClient:
				retries, none, pool = c.Options().MaxRetries, -1, c.Options().PoolSize
			case *redis.Client:
				retries, none, pool = c.Options().MaxRetries, 0, c.Options().PoolSize
			}
			if retries != none || pool != 2 {
				t.Errorf("renewals' client: %d retries, %d connections; want none and 2", retries, pool)
			}
		})
	}
}

// Close waits for the renewals' senders: a batch still out on a
// connection that does not answer, its caller gone, ends with the closed
// client before Close returns; a renewal asked for after Close fails at
// once.
func TestCloseWaitsForTheRenewalsInFlight(t *testing.T) {
	hole, accepted := blackHole(t)
	s := redisstore.NewFromClient(redis.NewClient(&redis.Options{Addr: hole, Protocol: 2}), redisstore.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := s.RenewLease(ctx, "conv:x", "owner", 30*time.Second)
		done <- err
	}()
	<-accepted // the batch is on its way, and no answer comes
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a renewal on a connection that does not answer succeeded")
	}
	_ = s.Close()
	buf := make([]byte, 1<<20)
	if stacks := string(buf[:runtime.Stack(buf, true)]); strings.Contains(stacks, "(*Store).sendRenewals") {
		t.Errorf("a renewals' sender still runs after Close returned:\n%s", stacks)
	}
	if _, err := s.RenewLease(t.Context(), "conv:x", "owner", 30*time.Second); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("RenewLease after Close = %v; want redis.ErrClosed", err)
	}
}
