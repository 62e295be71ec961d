package redisstore_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
	"github.com/toolgate/toolgate/store/storetest"
)

var _ storetest.Store = (*redisstore.Store)(nil)

// redisURL returns REDIS_URL: skipped locally when unset, fatal in CI.
func redisURL(t *testing.T) string {
	t.Helper()
	return envURL(t, "REDIS_URL", "redis://127.0.0.1:6379/3")
}

// envURL returns the Redis URL in the environment variable name. Unset, the
// test is skipped locally and fails in CI.
func envURL(t *testing.T, name, example string) string {
	t.Helper()
	u := os.Getenv(name)
	if u == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not set; CI must run the Redis store tests against a real Redis", name)
		}
		t.Skipf("%s is not set; set it (e.g. %s=%s) to run these Redis store tests", name, name, example)
	}
	return u
}

// skipOutsideCI skips t for the reason given, or fails it in CI, which
// must run every Redis store test.
func skipOutsideCI(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf(format+"; CI must run this test", args...)
	}
	t.Skipf(format, args...)
}

// newPrefix returns a key prefix of its own for one test, and deletes its
// keys when the test ends (on every master of a cluster).
func newPrefix(t *testing.T, rawURL string) string {
	t.Helper()
	return teststore.Prefix(t, rawURL, "toolgate-test")
}

func newStore(t *testing.T, rawURL string, opts redisstore.Options) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(t.Context(), rawURL, opts)
	if err != nil {
		t.Fatalf("New(%s): %v", rawURL, err)
	}
	return s
}

// hookedPair returns a store on rawURL through its own client c (for a
// test's hooks) and another store with the same prefix, both closed at
// the end.
func hookedPair(t *testing.T, rawURL string) (c redis.UniversalClient, s, other *redisstore.Store) {
	t.Helper()
	prefix := newPrefix(t, rawURL)
	c, err := redisstore.NewClient(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	s = redisstore.NewFromClient(c, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	other = newStore(t, rawURL, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = other.Close() })
	return c, s, other
}

// open opens a store on REDIS_URL; see openOn.
func open(t *testing.T) (storetest.Store, func() storetest.Store) {
	return openOn(redisURL(t))(t)
}

// openOn returns an opener of stores on the Redis at u, each on a prefix of
// its own; reopen closes the store and opens a new client on the same
// prefix, as a restarted process would.
func openOn(u string) storetest.Opener {
	return func(t *testing.T) (storetest.Store, func() storetest.Store) {
		opts := redisstore.Options{Prefix: newPrefix(t, u)}
		s := newStore(t, u, opts)
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		reopen := func() storetest.Store {
			if err := s.Close(); err != nil {
				t.Fatalf("Close before reopening: %v", err)
			}
			s = newStore(t, u, opts)
			return s
		}
		return s, reopen
	}
}

func TestConformance(t *testing.T) {
	redisURL(t)
	storetest.Run(t, open)
}

func testRun() (store.Run, []store.Call) {
	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1.1", Requester: "U1", Channel: "C1"}
	c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", ExpiresAt: time.Now().Add(time.Hour)}
	return r, []store.Call{c}
}

func TestUnreachableRedis(t *testing.T) {
	const url = "redis://127.0.0.1:1/0?dial_timeout=200ms&max_retries=-1"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if s, err := redisstore.New(ctx, url, redisstore.Options{}); err == nil {
		s.Close()
		t.Fatalf("New(%s) succeeded, want an error", url)
	}

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	s := redisstore.NewFromClient(c, redisstore.Options{})
	defer s.Close()
	_, _, err := s.Decide(ctx, store.CallID(store.NewRunID(), 0), "fp", store.Decision{Kind: "approve", Decider: "U1"})
	if err == nil {
		t.Fatal("Decide on an unreachable Redis succeeded, want an error")
	}
	for _, sentinel := range []error{store.ErrNotFound, store.ErrAlreadyDecided, store.ErrExpired, store.ErrFingerprintMismatch} {
		if errors.Is(err, sentinel) {
			t.Errorf("Decide on an unreachable Redis: error %v is %v, want a connection error", err, sentinel)
		}
	}
	if ctx.Err() != nil {
		t.Errorf("Decide on an unreachable Redis did not return before the 10s deadline")
	}
	if err := s.Ping(ctx); err == nil {
		t.Error("Ping on an unreachable Redis succeeded, want an error")
	}
}

// TestOutageLosesNothing cuts the connection to Redis, decides, and checks
// that the decision failed without a trace and works once Redis is back.
func TestOutageLosesNothing(t *testing.T) {
	u := redisURL(t)
	o, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the outage test needs a single-node REDIS_URL: %v", err)
	}
	prefix := newPrefix(t, u)
	p := startProxy(t, "127.0.0.1:0", o.Addr)
	proxied := *o
	proxied.Addr = p.addr
	proxied.DialTimeout = 200 * time.Millisecond
	proxied.MaxRetries = -1
	s := redisstore.NewFromClient(redis.NewClient(&proxied), redisstore.Options{Prefix: prefix})
	defer s.Close()
	direct := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer direct.Close()

	ctx := t.Context()
	r, calls := testRun()
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	c := calls[0]

	p.stop()
	if _, _, err := s.Decide(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U1"}); err == nil {
		t.Fatal("Decide during the outage succeeded, want an error")
	}
	got, err := direct.GetCall(ctx, c.ID)
	if err != nil || got.Status != store.Pending || got.Decision != nil {
		t.Fatalf("GetCall(%s) after the failed Decide = %+v, %v; want it pending", c.ID, got, err)
	}

	p = startProxy(t, p.addr, o.Addr) // Redis is back at the same address
	defer p.stop()
	deadline := time.Now().Add(10 * time.Second)
	for s.Ping(ctx) != nil { // the client drops its dead connections
		if time.Now().After(deadline) {
			t.Fatal("Ping through the restarted proxy still fails after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got, complete, err := s.Decide(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U1"})
	if err != nil || !complete || got.Status != store.Decided {
		t.Fatalf("Decide after the outage = %q, complete %v, %v; want decided, true, nil", got.Status, complete, err)
	}
}

// proxy forwards TCP connections to a target until stopped.
type proxy struct {
	addr string
	ln   net.Listener
	mu   sync.Mutex
	conn []net.Conn
	wg   sync.WaitGroup
}

func startProxy(t *testing.T, addr, target string) *proxy {
	t.Helper()
	var ln net.Listener
	var err error
	for range 50 { // the port of a stopped proxy may take a moment to free
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	p := &proxy{addr: ln.Addr().String(), ln: ln}
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conn = append(p.conn, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(out, in); out.Close() })
			p.wg.Go(func() { io.Copy(in, out); in.Close() })
		}
	})
	return p
}

// stop closes the listener and every connection; calling it again does
// nothing.
func (p *proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conn {
		c.Close()
	}
	p.conn = nil
	p.mu.Unlock()
	p.wg.Wait()
}

func TestNewClient(t *testing.T) {
	tests := []struct {
		url          string
		cluster      bool
		wantAddrs    []string
		pipelineRead int
	}{
		{url: "redis://127.0.0.1:6379/3"},
		{url: "rediss://user:pw@redis.example.com:6380/0"},
		{url: "redis+cluster://10.0.0.1:7000,10.0.0.2:7001", cluster: true, wantAddrs: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{url: "rediss+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001/?dial_timeout=1s&addr=10.0.0.3:7002", cluster: true,
			wantAddrs: []string{"10.0.0.1:7000", "10.0.0.3:7002", "10.0.0.2:7001"}},
		// A "/" in the query is not a database.
		{url: "redis+cluster://10.0.0.1:7000,10.0.0.2:7001?client_name=bot/eu-1", cluster: true, wantAddrs: []string{"10.0.0.1:7000", "10.0.0.2:7001"}},
		{url: "redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/2?master_name=main"},
		{url: "redis://127.0.0.1:6379/3?pipeline_read_buffer_size=65536", pipelineRead: 64 << 10},
	}
	// Connections get small buffers unless the URL says otherwise: the
	// store's commands and replies are a few KiB.
	const small = 16 << 10
	for _, tt := range tests {
		c, err := redisstore.NewClient(tt.url)
		if err != nil {
			t.Errorf("NewClient(%s): %v", tt.url, err)
			continue
		}
		cc, isCluster := c.(*redis.ClusterClient)
		if isCluster != tt.cluster {
			t.Errorf("NewClient(%s) = %T, want cluster %v", tt.url, c, tt.cluster)
		}
		// The store's callers bound its calls with their context's
		// deadline (an envelope's ack waits on some): go-redis heeds it
		// only when told to.
		if isCluster && !cc.Options().ContextTimeoutEnabled || !isCluster && !c.(*redis.Client).Options().ContextTimeoutEnabled {
			t.Errorf("NewClient(%s) does not heed its callers' deadlines", tt.url)
		}
		if isCluster {
			got := slices.Clone(cc.Options().Addrs)
			want := slices.Clone(tt.wantAddrs)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("NewClient(%s) seed nodes = %v, want %v", tt.url, got, want)
			}
			if o := cc.Options(); o.ReadBufferSize != small || o.WriteBufferSize != small || o.PipelineReadBufferSize != 0 {
				t.Errorf("NewClient(%s) buffers = read %d, write %d, pipeline read %d; want %d, %d and none (no pipeline pool)", tt.url, o.ReadBufferSize, o.WriteBufferSize, o.PipelineReadBufferSize, small, small)
			}
		} else {
			o := c.(*redis.Client).Options()
			wantPipe := cmp.Or(tt.pipelineRead, small)
			if o.ReadBufferSize != small || o.WriteBufferSize != small || o.PipelineReadBufferSize != wantPipe || o.PipelineWriteBufferSize != small {
				t.Errorf("NewClient(%s) buffers = read %d, write %d, pipeline %d and %d; want %d, %d, %d and %d", tt.url, o.ReadBufferSize, o.WriteBufferSize, o.PipelineReadBufferSize, o.PipelineWriteBufferSize, small, small, wantPipe, small)
			}
		}
		c.Close()
	}
	for _, bad := range []string{
		"http://127.0.0.1:6379",
		"127.0.0.1:6379",
		"redis+sentinel://10.0.0.1:26379",
		"redis+cluster://",
		"redis+cluster://10.0.0.1:7000,,10.0.0.2:7001",
		"redis://127.0.0.1:6379/?bogus=1",
		// Reads from replicas could miss what the store just wrote.
		"redis+cluster://10.0.0.1:7000?read_only=true",
		"redis+cluster://10.0.0.1:7000?route_randomly=true",
		"redis+sentinel://10.0.0.1:26379?master_name=main&replica_only=true",
		"redis+sentinel://10.0.0.1:26379?master_name=main&route_by_latency=true",
		// A cluster has database 0 only.
		"redis+cluster://10.0.0.1:7000,10.0.0.2:7001/3",
	} {
		if c, err := redisstore.NewClient(bad); err == nil {
			c.Close()
			t.Errorf("NewClient(%s) succeeded, want an error", bad)
		}
	}
	for _, good := range []string{"redis+cluster://10.0.0.1:7000/0", "redis+cluster://10.0.0.1:7000/?dial_timeout=1s"} {
		c, err := redisstore.NewClient(good)
		if err != nil {
			t.Errorf("NewClient(%s) = %v, want a client", good, err)
			continue
		}
		c.Close()
	}
}

// A call to a Redis that takes the connection but answers nothing (a
// stalled or paused server) ends at its caller's deadline, not at
// go-redis's own read timeout (3 s): an envelope's ack waits on such calls.
func TestStalledRedisCallEndsAtItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() }) // held open, never answered
		}
	}()
	c, err := redisstore.NewClient("redis://" + ln.Addr().String() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	s := redisstore.NewFromClient(c, redisstore.Options{})
	t.Cleanup(func() { s.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.SeenEvent(ctx, "Ev1", time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Error("SeenEvent on a Redis that answers nothing succeeded")
		}
	case <-time.After(2500 * time.Millisecond):
		t.Fatal("SeenEvent with a 100 ms deadline still waits after 2.5 s on a Redis that answers nothing")
	}
}

// A redis:// URL naming a node of a Redis Cluster is refused at once,
// saying to use redis+cluster://: the node answers a ping, but nearly every
// command would fail with MOVED.
func TestClusterNodeNamedAsOneServerIsRefused(t *testing.T) {
	u := envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")
	first, _, _ := strings.Cut(strings.TrimPrefix(u, "redis+cluster://"), ",")
	s, err := redisstore.New(t.Context(), "redis://"+first+"/0", redisstore.Options{})
	if err == nil {
		s.Close()
		t.Fatalf("New(redis://%s/0) on a cluster node succeeded, want an error", first)
	}
	if !strings.Contains(err.Error(), "redis+cluster://") {
		t.Errorf("New(redis://%s/0) on a cluster node = %v, want it to say redis+cluster://", first, err)
	}
	if s, err := redisstore.New(t.Context(), redisURL(t), redisstore.Options{}); err != nil {
		t.Errorf("New(%s) on a single node = %v", redisURL(t), err)
	} else {
		s.Close()
	}
}

// A redis:// URL naming a Sentinel or a replica is refused at once, saying
// what to write instead: both answer a ping, but a Sentinel refuses every
// command of the store and a replica every write.
func TestSentinelOrReplicaNamedAsOneServerIsRefused(t *testing.T) {
	sentinel, _, _ := strings.Cut(strings.TrimPrefix(envURL(t, "REDIS_SENTINEL_URL", "redis+sentinel://127.0.0.1:26379/9?master_name=toolgate"), "redis+sentinel://"), "/")
	sentinel, _, _ = strings.Cut(sentinel, ",")
	sentinel, _, _ = strings.Cut(sentinel, "?")
	for _, tt := range []struct{ name, url, want string }{
		{"sentinel", "redis://" + sentinel + "/0", "redis+sentinel://"},
		{"replica", "redis://" + startReplica(t) + "/0", "replica"},
	} {
		s, err := redisstore.New(t.Context(), tt.url, redisstore.Options{})
		if err == nil {
			s.Close()
			t.Errorf("New(%s) on a %s succeeded, want an error", tt.url, tt.name)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%s) on a %s = %v, want it to say %s", tt.url, tt.name, err, tt.want)
		}
	}
}

// startReplica starts a redis-server replica of the node of REDIS_URL on a
// free loopback port and returns its address. Without redis-server on PATH
// it skips the test, except in CI.
func startReplica(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOutsideCI(t, "redis-server is not on PATH: cannot start a replica")
	}
	o, err := redis.ParseURL(redisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	primaryHost, primaryPort, _ := net.SplitHostPort(o.Addr)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", t.TempDir(), "--replicaof", primaryHost, primaryPort)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for c.Ping(t.Context()).Err() != nil {
		select {
		case err := <-done:
			t.Fatalf("redis-server exited at start: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return addr
}

// TestKeysExpire checks that every key but the audit log and the records
// has a TTL, and that the keys of a run share its hash tag.
func TestKeysExpire(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer s.Close()
	ctx := t.Context()
	r, calls := testRun()
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	if _, _, err := s.Decide(ctx, calls[0].ID, "fp", store.Decision{Kind: "approve", Decider: "U1"}); err != nil {
		t.Fatalf("Decide: %v", err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "me", time.Minute); err != nil || !ok {
		t.Fatalf("ClaimResume = %v, %v", ok, err)
	}
	if err := s.SaveConversation(ctx, store.Conversation{Key: "C2:2.2"}); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	if _, err := s.AcquireLease(ctx, "C2:2.2", "me", time.Minute); err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	if _, err := s.SeenEvent(ctx, "Ev1", time.Minute); err != nil {
		t.Fatalf("SeenEvent: %v", err)
	}
	if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "decide"}); err != nil {
		t.Fatalf("Audit: %v", err)
	}
	if _, err := s.PutRecord(ctx, store.Record{Kind: "rule", ID: "r1"}, -1); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}

	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	kept := map[string]bool{prefix + ":audit": true, prefix + ":records:rule": true, prefix + ":records-version": true}
	runKeys := 0
	for _, k := range keys {
		if strings.Contains(k, r.ID) {
			runKeys++
			if !strings.HasPrefix(k, prefix+":run:{"+r.ID+"}") {
				t.Errorf("key %s of run %s does not start with its hash tag", k, r.ID)
			}
		}
		ttl, err := c.PTTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if kept[k] {
			continue
		}
		if ttl <= 0 {
			t.Errorf("key %s has TTL %v, want one", k, ttl)
		}
	}
	if runKeys != 3 { // run, call, claim
		t.Errorf("found %d keys of run %s, want 3 (run, call, claim) among %v", runKeys, r.ID, keys)
	}
}

// TestStaleIndexEntriesDropped deletes a call behind the store's back, as
// its TTL would, and checks that the listings skip and drop it.
func TestStaleIndexEntriesDropped(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer s.Close()
	ctx := t.Context()
	r, calls := testRun()
	calls[0].ExpiresAt = time.Now().Add(-time.Second)
	calls[0].RemindAt = time.Now().Add(-time.Minute)
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runKeys, err := c.Keys(ctx, prefix+":run:{"+r.ID+"}*").Result()
	if err != nil || len(runKeys) == 0 {
		t.Fatalf("keys of run %s = %v, %v", r.ID, runKeys, err)
	}
	if err := c.Del(ctx, runKeys...).Err(); err != nil {
		t.Fatal(err)
	}
	if due, err := s.Due(ctx, time.Now(), 0); err != nil || len(due) != 0 {
		t.Errorf("Due with a deleted call = %v, %v; want none", due, err)
	}
	if p, err := s.Pending(ctx, store.Filter{}); err != nil || len(p) != 0 {
		t.Errorf("Pending with a deleted call = %v, %v; want none", p, err)
	}
	if ids, err := s.Stalled(ctx, 0); err != nil || len(ids) != 0 {
		t.Errorf("Stalled with a deleted run = %v, %v; want none", ids, err)
	}
	if due, err := s.DueReminders(ctx, time.Now(), 0); err != nil || len(due) != 0 {
		t.Errorf("DueReminders with a deleted call = %v, %v; want none", due, err)
	}
	for _, k := range []string{prefix + ":due", prefix + ":pending", prefix + ":runs", prefix + ":remind"} {
		if n, err := c.ZCard(ctx, k).Result(); err != nil || n != 0 {
			t.Errorf("ZCARD %s = %d, %v; want 0 after the stale entry was read", k, n, err)
		}
	}
}

// The runs index holds a run whose time has come for Stalled once a
// decision is made on it, not when the run is paused, so that Stalled
// reads the runs whose resume may be due however many are paused: on one
// node the script of the decision that leaves none of its calls pending
// lists it; on a Cluster, where every run is listed when it is paused, by
// its expiry, every decision sent on it moves it to the decision's time,
// beside its script, and Stalled passes over those with calls pending.
// Finishing the run unlists it, and Stalled drops a run that is finished
// or gone.
func TestRunsListedOnceDecided(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		cluster   bool
	}{
		{"single node", redisURL(t), false},
		{"cluster", envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103"), true},
	} {
		t.Run(tc.name, func(t *testing.T) { testRunsListedOnceDecided(t, tc.url, tc.cluster) })
	}
}

func testRunsListedOnceDecided(t *testing.T, u string, cluster bool) {
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer s.Close()
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := t.Context()
	run := func(calls int) (store.Run, []store.Call) {
		r, cs := testRun()
		for i := 1; i < calls; i++ {
			cs = append(cs, store.Call{ID: store.CallID(r.ID, i), Tool: "t", Fingerprint: "fp", ExpiresAt: cs[0].ExpiresAt})
		}
		if err := s.CreateRun(ctx, r, cs); err != nil {
			t.Fatalf("CreateRun: %v", err)
		}
		return r, cs
	}
	decide := func(callID string) {
		if _, _, err := s.Decide(ctx, callID, "fp", store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}); err != nil {
			t.Fatalf("Decide(%s): %v", callID, err)
		}
	}
	// The runs whose time has come: those Stalled reads.
	listed := func() []string {
		t.Helper()
		ids, err := c.ZRangeByScore(ctx, prefix+":runs", &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(time.Now().UnixMilli(), 10)}).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	sorted := func(ids ...string) []string {
		slices.Sort(ids)
		return ids
	}
	run(1)                     // paused
	halfRun, half := run(2)    // one of two decided
	decided, calls := run(1)   // decided
	finished, fcalls := run(1) // decided, then finished
	decide(half[0].ID)
	// Listed by its expiry (as an earlier version listed every run on one
	// node, and this one does on a Cluster), then decided.
	if err := c.ZAdd(ctx, prefix+":runs", redis.Z{Score: float64(calls[0].ExpiresAt.UnixMilli()), Member: decided.ID}).Err(); err != nil {
		t.Fatal(err)
	}
	decide(calls[0].ID)
	decide(fcalls[0].ID)
	want := sorted(decided.ID, finished.ID)
	if cluster {
		want = sorted(decided.ID, finished.ID, halfRun.ID)
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Errorf("runs listed = %v, want the decided ones %v (the paused one never)", got, want)
	}
	if err := s.FinishRun(ctx, finished.ID); err != nil {
		t.Fatal(err)
	}
	// A run finished with a call pending, whose last call is decided
	// after all, is not listed (on a Cluster, not once Stalled read it).
	cut, cutCalls := run(1)
	if err := s.FinishRun(ctx, cut.ID); err != nil {
		t.Fatal(err)
	}
	decide(cutCalls[0].ID)
	want = []string{decided.ID}
	if cluster {
		want = sorted(decided.ID, halfRun.ID, cut.ID)
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Errorf("runs listed after FinishRun = %v, want %v", got, want)
	}
	if ttl, err := c.PTTL(ctx, prefix+":runs").Result(); err != nil || ttl <= 0 {
		t.Errorf("TTL of the runs index = %v, %v; want one", ttl, err)
	}
	if ids, err := s.Stalled(ctx, 0); err != nil || !slices.Equal(ids, []string{decided.ID}) {
		t.Errorf("Stalled = %v, %v; want [%s]", ids, err, decided.ID)
	}
	want = []string{decided.ID}
	if cluster {
		want = sorted(decided.ID, halfRun.ID)
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Errorf("runs listed after Stalled = %v, want %v", got, want)
	}
	deleteRun(t, c, prefix, decided.ID)
	deleteRun(t, c, prefix, halfRun.ID)
	if ids, err := s.Stalled(ctx, 0); err != nil || len(ids) != 0 {
		t.Errorf("Stalled with the decided runs gone = %v, %v; want none", ids, err)
	}
	if got := listed(); len(got) != 0 {
		t.Errorf("runs listed once the decided runs are gone = %v, want none", got)
	}
}

// deleteRun deletes the keys of run runID (as their expiry would), on
// whichever node holds them.
func deleteRun(t *testing.T, c redis.UniversalClient, prefix, runID string) {
	t.Helper()
	var n atomic.Int64
	err := redisstore.EachPrimary(t.Context(), c, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+":run:{"+runID+"}*").Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		n.Add(int64(len(keys)))
		return node.Del(ctx, keys...).Err()
	})
	if err != nil || n.Load() == 0 {
		t.Fatalf("delete the keys of run %s: %d deleted, %v", runID, n.Load(), err)
	}
}

// A bounded listing skips and drops the stale entries it reads, counts
// only pending calls toward its limit, and leaves the entries past it.
func TestStaleEntriesAndALimit(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer s.Close()
	ctx := t.Context()
	gone, _ := testRun()
	gone.CreatedAt = time.Now().Add(-time.Hour)
	var live []store.Call
	for i := range 3 {
		r, calls := testRun()
		r.CreatedAt = time.Now().Add(time.Duration(i-3) * time.Minute)
		if err := s.CreateRun(ctx, r, calls); err != nil {
			t.Fatalf("CreateRun: %v", err)
		}
		live = append(live, calls[0])
	}
	_, calls := testRun()
	calls[0].ID = store.CallID(gone.ID, 0)
	if err := s.CreateRun(ctx, gone, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	runKeys, err := c.Keys(ctx, prefix+":run:{"+gone.ID+"}*").Result()
	if err != nil || len(runKeys) == 0 {
		t.Fatalf("keys of run %s = %v, %v", gone.ID, runKeys, err)
	}
	if err := c.Del(ctx, runKeys...).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := s.Pending(ctx, store.Filter{Limit: 2})
	if err != nil || len(p) != 2 || p[0].ID != live[0].ID || p[1].ID != live[1].ID {
		t.Errorf("Pending(limit 2) with the oldest call deleted = %v, %v; want %s, %s", p, err, live[0].ID, live[1].ID)
	}
	if n, err := c.ZCard(ctx, prefix+":pending").Result(); err != nil || n != 3 {
		t.Errorf("ZCARD %s:pending = %d, %v; want 3, the stale entry dropped", prefix, n, err)
	}
}

// A reminder index entry left at an earlier time than its call's RemindAt
// (ClaimReminder's second command failed) is not listed as due, and
// DueReminders moves it to the call's time; one whose call has no
// reminder left is removed.
func TestReminderIndexRepaired(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	defer s.Close()
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	r, calls := testRun()
	calls = append(calls, store.Call{ID: store.CallID(r.ID, 1), Tool: "t", Fingerprint: "fp", ExpiresAt: now.Add(time.Hour)})
	calls[0].RemindAt = now.Add(-time.Minute)
	calls[1].RemindAt = now.Add(-time.Minute)
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	later := now.Add(30 * time.Minute)
	for _, claim := range []struct {
		id   string
		next time.Time
	}{{calls[0].ID, later}, {calls[1].ID, time.Time{}}} {
		if ok, err := s.ClaimReminder(ctx, claim.id, 1, claim.next); err != nil || !ok {
			t.Fatalf("ClaimReminder(%s) = %v, %v; want true, nil", claim.id, ok, err)
		}
	}
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := prefix + ":remind"
	stale := float64(now.Add(-time.Minute).UnixMilli())
	if err := c.ZAdd(ctx, key, redis.Z{Score: stale, Member: calls[0].ID}, redis.Z{Score: stale, Member: calls[1].ID}).Err(); err != nil {
		t.Fatal(err)
	}
	if due, err := s.DueReminders(ctx, now, 0); err != nil || len(due) != 0 {
		t.Fatalf("DueReminders with entries left behind = %v, %v; want none", due, err)
	}
	got, err := c.ZRangeWithScores(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	want := []redis.Z{{Score: float64(later.UnixMilli()), Member: calls[0].ID}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reminder index after DueReminders = %v, want %v", got, want)
	}
	if next, err := s.NextReminder(ctx); err != nil || !next.Equal(later) {
		t.Errorf("NextReminder = %v, %v; want %v, nil", next, err, later)
	}
}

// Audit entries past the retention are deleted, not only hidden: a store
// told to keep them longer no longer finds them.
func TestAuditRetentionTrims(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	ctx := t.Context()
	long := redisstore.Options{Prefix: prefix, AuditRetention: 1000 * 24 * time.Hour}
	s := newStore(t, u, long)
	old := store.AuditEntry{At: time.Now().Add(-100 * 24 * time.Hour), Actor: "U1", Action: "decide", CallID: "old"}
	if err := s.Audit(ctx, old); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = newStore(t, u, redisstore.Options{Prefix: prefix, AuditRetention: 90 * 24 * time.Hour})
	if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "decide", CallID: "new"}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = newStore(t, u, long)
	defer s.Close()
	log, err := s.AuditLog(ctx, 0)
	if err != nil || len(log) != 1 || log[0].CallID != "new" {
		t.Errorf("AuditLog after trimming = %+v, %v; want only the new entry", log, err)
	}
}

// Audit entries past the retention are deleted by the sweep's periodic
// pass (Stalled) even when nothing new is audited: the log is not left
// holding them until the next entry comes.
func TestStalledTrimsTheAuditLog(t *testing.T) {
	for _, u := range []string{redisURL(t), envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")} {
		t.Run(u, func(t *testing.T) {
			ctx := t.Context()
			const retention = 300 * time.Millisecond
			s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u), AuditRetention: retention})
			defer s.Close()
			c, err := redisstore.NewClient(u)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "decide", CallID: "old"}); err != nil {
				t.Fatal(err)
			}
			if n, err := c.LLen(ctx, s.AuditKey()).Result(); err != nil || n != 1 {
				t.Fatalf("%d audit entries stored after one Audit, %v; want 1", n, err)
			}
			time.Sleep(retention + 100*time.Millisecond)
			if _, err := s.Stalled(ctx, 100); err != nil {
				t.Fatalf("Stalled: %v", err)
			}
			if n, err := c.LLen(ctx, s.AuditKey()).Result(); err != nil || n != 0 {
				t.Errorf("%d audit entries still stored after the retention of %v ran out and a sweep's Stalled, %v; want none", n, retention, err)
			}
		})
	}
}

// A reminder overdue by more than the run retention (every replica was
// down, or the reminder pass kept failing) is still listed once another
// run is created: its entry is not trimmed as if its call were deleted,
// for a call waits up to four weeks, longer than the retention.
func TestOverdueReminderOutlivesTheRetention(t *testing.T) {
	for _, u := range []string{redisURL(t), envURL(t, "REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103")} {
		t.Run(u, func(t *testing.T) {
			ctx := t.Context()
			s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u), Retention: time.Second})
			now := time.Now().Truncate(time.Millisecond)
			run := func(remindAt time.Time) store.Call {
				r := store.Run{ID: store.NewRunID(), Conversation: "C1:" + store.NewRunID(), Requester: "U1", Channel: "C1"}
				c := store.Call{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp", Requester: "U1", Conversation: r.Conversation, ExpiresAt: now.Add(time.Hour), RemindAt: remindAt}
				if err := s.CreateRun(ctx, r, []store.Call{c}); err != nil {
					t.Fatal(err)
				}
				return c
			}
			overdue := run(now.Add(-time.Minute))
			run(now.Add(time.Minute)) // whose write trims what is past the retention
			due, err := s.DueReminders(ctx, now, 0)
			if err != nil || len(due) != 1 || due[0].ID != overdue.ID {
				t.Errorf("DueReminders = %v, %v; want the overdue call", due, err)
			}
		})
	}
}

// failLIndex fails every LINDEX while armed.
type failLIndex struct{ armed *atomic.Bool }

func (failLIndex) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h failLIndex) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.armed.Load() && cmd.Name() == "lindex" {
			cmd.SetErr(errors.New("connection cut"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}
func (failLIndex) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The audit log's trim is a best effort made after the write it follows:
// one that fails (the connection cut between the two) fails neither the
// write, which was made, nor the sweep's listing of stalled runs; a later
// one trims.
func TestFailedAuditTrimFailsNothing(t *testing.T) {
	u := redisURL(t)
	prefix := newPrefix(t, u)
	ctx := t.Context()
	opts := redisstore.Options{Prefix: prefix, AuditRetention: time.Hour}
	other := newStore(t, u, opts)
	defer other.Close()
	if err := other.Audit(ctx, store.AuditEntry{At: time.Now().Add(-2 * time.Hour), Actor: "U1", Action: "decide", CallID: "old"}); err != nil {
		t.Fatal(err)
	}
	c, err := redisstore.NewClient(u)
	if err != nil {
		t.Fatal(err)
	}
	var armed atomic.Bool
	c.AddHook(failLIndex{armed: &armed})
	s := redisstore.NewFromClient(c, opts)
	defer s.Close()
	armed.Store(true)
	if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "decide", CallID: "new"}); err != nil {
		t.Errorf("Audit whose trim failed: %v; want the entry written, and no error", err)
	}
	if _, err := s.Stalled(ctx, 100); err != nil {
		t.Errorf("Stalled whose trim failed: %v; want the runs listed", err)
	}
	armed.Store(false)
	if _, err := s.Stalled(ctx, 100); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	raw, err := c.LRange(ctx, s.AuditKey(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raw {
		var e store.AuditEntry
		if json.Unmarshal([]byte(r), &e) == nil {
			ids[e.CallID] = true
		}
	}
	if !ids["new"] || ids["old"] {
		t.Errorf("audit log holds %v; want the new entry, and the old one trimmed by the later sweep", ids)
	}
}
