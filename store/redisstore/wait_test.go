package redisstore_test

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// server is a redis-server a test started, killed when the test ends.
type server struct {
	addr string
	cmd  *exec.Cmd
	c    *redis.Client
}

// startServer starts a redis-server that keeps nothing on disk on a free
// loopback port, with args added (--replicaof ...), and waits until it
// answers. Without redis-server on PATH it skips the test, except in CI.
func startServer(t *testing.T, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		skipOutsideCI(t, "redis-server is not on PATH: cannot start a primary and its replica")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	l.Close()
	cmd := exec.Command("redis-server", append([]string{"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0", "--dir", t.TempDir()}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() {
		_ = c.Close()
		_ = cmd.Process.Kill() // a stopped process too
		<-done
	})
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(t.Context()).Err() != nil {
		select {
		case err := <-done:
			t.Fatalf("redis-server exited at start: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s does not answer", addr)
		}
	}
	return &server{addr: addr, cmd: cmd, c: c}
}

// startReplicated starts a primary and a replica of it, and waits until
// the replica is in sync.
func startReplicated(t *testing.T) (primary, replica *server) {
	t.Helper()
	primary = startServer(t)
	host, port, _ := net.SplitHostPort(primary.addr)
	replica = startServer(t, "--replicaof", host, port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, _ := primary.c.Info(t.Context(), "replication").Result()
		r, _ := replica.c.Info(t.Context(), "replication").Result()
		if strings.Contains(p, "connected_slaves:1") && strings.Contains(r, "master_link_status:up") {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not come in sync with its primary:\n%s\n%s", p, r)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCalls returns how many WAIT commands the primary s answered since
// its stats were last reset.
func waitCalls(t *testing.T, s *server) int {
	t.Helper()
	info, err := s.c.Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_wait:calls="); ok {
			n := 0
			for _, ch := range rest {
				if ch < '0' || ch > '9' {
					break
				}
				n = n*10 + int(ch-'0')
			}
			return n
		}
	}
	return 0
}

// createAndDecide creates a run of one call on s and decides it, beginning
// its resume, as an approval's click does.
func createAndDecide(t *testing.T, s *redisstore.Store) (store.Run, store.Call, store.ResumeStart, error) {
	t.Helper()
	ctx := t.Context()
	r, calls := testRun()
	r.Conversation = "C1:" + r.ID
	if err := s.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	c := calls[0]
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
	fx := store.Effects{Audit: store.AuditEntry{Actor: "U1", Action: "decide", CallID: c.ID, Decision: "approve"}, Unanswered: r.Conversation}
	_, _, rs, err := s.DecideBegin(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U1", Attempt: "attempt"}, fx, rb)
	return r, c, rs, err
}

// With WaitReplicas set and the replica up, a pause, its decision and the
// resume it begins work, and each write is on the replica when its call
// returns: a decision, a conversation (a transaction), an audit entry
// (another), an inbound message and a lease (a script sent alone).
func TestWritesWaitForTheReplica(t *testing.T) {
	primary, replica := startReplicated(t)
	u := "redis://" + primary.addr + "/0"
	s := newStore(t, u, redisstore.Options{WaitReplicas: 1, WaitTimeout: 2 * time.Second})
	defer s.Close()
	ctx := t.Context()

	r, c, rs, err := createAndDecide(t, s)
	if err != nil || !rs.Claimed || rs.Started != c.ID {
		t.Fatalf("DecideBegin = claimed %v, started %q, %v; want its resume begun", rs.Claimed, rs.Started, err)
	}
	onReplica := redisstore.NewFromClient(redis.NewClient(&redis.Options{Addr: replica.addr}), redisstore.Options{})
	defer onReplica.Close()
	got, err := onReplica.GetCall(ctx, c.ID)
	if err != nil || got.Status != store.Decided {
		t.Fatalf("the call on the replica right after DecideBegin = %+v, %v; want it decided", got, err)
	}
	if ok, err := s.BeginExecution(ctx, c.ID, "attempt"); err != nil {
		t.Fatalf("BeginExecution: %v, %v", ok, err)
	}
	if err := s.SaveConversation(ctx, store.Conversation{Key: r.Conversation, State: []byte(`{"a":1}`)}); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	if conv, err := onReplica.LoadConversation(ctx, r.Conversation); err != nil || string(conv.State) != `{"a":1}` {
		t.Errorf("the conversation on the replica right after SaveConversation = %+v, %v", conv, err)
	}
	if err := s.Audit(ctx, store.AuditEntry{Actor: "U1", Action: "replicated"}); err != nil {
		t.Fatalf("Audit: %v", err)
	}
	if log, err := onReplica.AuditLog(ctx, 1); err != nil || len(log) != 1 || log[0].Action != "replicated" {
		t.Errorf("the audit log on the replica right after Audit = %+v, %v", log, err)
	}
	m, acc, err := s.AcceptMessage(ctx, "C9:"+r.ID, store.Inbound{EventID: "Ev" + r.ID, User: "U1", Text: "hi", At: time.Now()}, false)
	if err != nil || acc != store.Accepted {
		t.Fatalf("AcceptMessage = %v, %v", acc, err)
	}
	if in, err := onReplica.Inbox(ctx, "C9:"+r.ID); err != nil || len(in) != 1 || in[0].Seq != m.Seq {
		t.Errorf("the inbox on the replica right after AcceptMessage = %+v, %v", in, err)
	}
	if ok, err := s.AcquireLease(ctx, "L"+r.ID, "me", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if v, err := replica.c.Get(ctx, "toolgate:lease:{L"+r.ID+"}").Result(); err != nil || v != "me" {
		t.Errorf("the lease on the replica right after AcquireLease = %q, %v; want it held by me", v, err)
	}
}

// With the replica stopped, a decision fails within about the timeout
// with ErrNotReplicated, and so do a transaction and a script sent alone;
// the decision stands on the primary, and reads work.
func TestWritesFailWhenTheReplicaDoesNotAcknowledge(t *testing.T) {
	primary, replica := startReplicated(t)
	u := "redis://" + primary.addr + "/0"
	const timeout = 200 * time.Millisecond
	s := newStore(t, u, redisstore.Options{WaitReplicas: 1, WaitTimeout: timeout})
	defer s.Close()
	ctx := t.Context()
	r, calls := testRun()
	r.Conversation = "C1:" + r.ID
	// Paused with a timeout that a loaded machine meets.
	patient := newStore(t, u, redisstore.Options{WaitReplicas: 1, WaitTimeout: 3 * time.Second})
	defer patient.Close()
	if err := patient.CreateRun(ctx, r, calls); err != nil {
		t.Fatalf("CreateRun with the replica up: %v", err)
	}
	if err := replica.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.cmd.Process.Signal(syscall.SIGCONT) })

	c := calls[0]
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
	fx := store.Effects{Audit: store.AuditEntry{Actor: "U1", Action: "decide", CallID: c.ID, Decision: "approve"}}
	start := time.Now()
	_, _, _, err := s.DecideBegin(ctx, c.ID, c.Fingerprint, store.Decision{Kind: "approve", Decider: "U1", Attempt: "attempt"}, fx, rb)
	took := time.Since(start)
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Fatalf("DecideBegin with the replica stopped = %v, want ErrNotReplicated", err)
	}
	if !strings.Contains(err.Error(), "acknowledged by only 0 of 1 replicas within 200ms") {
		t.Errorf("DecideBegin's error %q does not say how many replicas acknowledged it", err)
	}
	if took < timeout || took > timeout+2*time.Second {
		t.Errorf("DecideBegin with the replica stopped took %s, want about %s", took, timeout)
	}
	got, err := s.GetCall(ctx, c.ID)
	if err != nil || got.Status != store.Decided {
		t.Errorf("the call on the primary after an unreplicated decision = %+v, %v; want it decided", got, err)
	}
	if err := s.SaveConversation(ctx, store.Conversation{Key: "C2:" + r.ID}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("SaveConversation with the replica stopped = %v, want ErrNotReplicated", err)
	}
	if _, err := s.AcquireLease(ctx, "L"+r.ID, "me", time.Minute); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("AcquireLease with the replica stopped = %v, want ErrNotReplicated", err)
	}
	if _, _, err := s.AcceptMessage(ctx, "C3:"+r.ID, store.Inbound{EventID: "Ev" + r.ID, User: "U1", Text: "hi", At: time.Now()}, false); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("AcceptMessage with the replica stopped = %v, want ErrNotReplicated", err)
	}
	start = time.Now()
	if _, _, err := s.LoadRun(ctx, r.ID); err != nil {
		t.Errorf("LoadRun with the replica stopped: %v", err)
	}
	if took := time.Since(start); took >= timeout {
		t.Errorf("LoadRun with the replica stopped took %s: a read waited for the replica", took)
	}
}

// countWaits is a hook that counts the WAIT commands the client sends.
type countWaits struct{ n *atomic.Int64 }

func (h countWaits) count(cmds ...redis.Cmder) {
	for _, c := range cmds {
		if c.Name() == "wait" {
			h.n.Add(1)
		}
	}
}
func (countWaits) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countWaits) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(cmd); return next(ctx, cmd) }
}
func (h countWaits) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(cmds...); return next(ctx, cmds) }
}

// Reads send no WAIT, and writes one each; without WaitReplicas nothing
// sends one. Counted both by a hook and by the primary's command stats.
func TestWaitFollowsWritesOnly(t *testing.T) {
	primary, _ := startReplicated(t)
	u := "redis://" + primary.addr + "/0"
	for _, n := range []int{1, 0} {
		if err := primary.c.ConfigResetStat(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		s := newStore(t, u, redisstore.Options{WaitReplicas: n})
		var hooked atomic.Int64
		s.AddHook(countWaits{&hooked})
		ctx := t.Context()
		r, c, _, err := createAndDecide(t, s)
		if err != nil {
			t.Fatalf("WaitReplicas %d: CreateRun and DecideBegin: %v", n, err)
		}
		if err := s.SaveConversation(ctx, store.Conversation{Key: r.Conversation}); err != nil {
			t.Fatalf("WaitReplicas %d: SaveConversation: %v", n, err)
		}
		wrote := waitCalls(t, primary)
		if n == 0 && (wrote != 0 || hooked.Load() != 0) {
			t.Errorf("without WaitReplicas, writes sent WAIT (%d by the server's count, %d by the hook's)", wrote, hooked.Load())
		}
		if n > 0 && (wrote < 3 || hooked.Load() != int64(wrote)) {
			t.Errorf("with WaitReplicas, a pause, a decision and a conversation sent WAIT %d times by the server's count, %d by the hook's; want at least 3, the same", wrote, hooked.Load())
		}
		if err := primary.c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		hooked.Store(0)
		if _, err := s.GetCall(ctx, c.ID); err != nil {
			t.Fatalf("GetCall: %v", err)
		}
		if _, _, err := s.LoadRun(ctx, r.ID); err != nil {
			t.Fatalf("LoadRun: %v", err)
		}
		if _, err := s.LoadConversation(ctx, r.Conversation); err != nil {
			t.Fatalf("LoadConversation: %v", err)
		}
		if _, err := s.AuditLog(ctx, 10); err != nil {
			t.Fatalf("AuditLog: %v", err)
		}
		if _, err := s.Inbox(ctx, r.Conversation); err != nil {
			t.Fatalf("Inbox: %v", err)
		}
		if got := waitCalls(t, primary); got != 0 || hooked.Load() != 0 {
			t.Errorf("WaitReplicas %d: reads sent WAIT (%d by the server's count, %d by the hook's)", n, got, hooked.Load())
		}
		_ = s.Close()
	}
}

// New refuses WaitReplicas on a Redis Cluster, and a wait its read
// timeout would cut; neither needs a server.
func TestWaitReplicasRefused(t *testing.T) {
	for _, tt := range []struct {
		url  string
		opts redisstore.Options
		want string
	}{
		{"redis+cluster://127.0.0.1:1", redisstore.Options{WaitReplicas: 1}, "not supported on Redis Cluster"},
		{"redis://127.0.0.1:1/0?read_timeout=1s", redisstore.Options{WaitReplicas: 1}, "must be shorter than the connection's read timeout"},
		{"redis://127.0.0.1:1/0", redisstore.Options{WaitReplicas: -1}, "negative option"},
		{"redis://127.0.0.1:1/0", redisstore.Options{WaitReplicas: 1, WaitTimeout: 500 * time.Microsecond}, "must be at least 1ms"},
	} {
		s, err := redisstore.New(t.Context(), tt.url, tt.opts)
		if err == nil {
			s.Close()
			t.Errorf("New(%s, %+v) succeeded, want an error", tt.url, tt.opts)
		} else if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%s, %+v) = %v, want it to say %q", tt.url, tt.opts, err, tt.want)
		}
	}
}

// ConnectedReplicas counts the replicas connected to the primary.
func TestConnectedReplicas(t *testing.T) {
	primary, _ := startReplicated(t)
	s := newStore(t, "redis://"+primary.addr+"/0", redisstore.Options{})
	defer s.Close()
	if n, err := s.ConnectedReplicas(t.Context()); err != nil || n != 1 {
		t.Errorf("ConnectedReplicas = %d, %v; want 1", n, err)
	}
}

// A step that writes nothing (a resend answered as its first sending was,
// a decision refused as made already) waits all the same for what the
// primary wrote before it, whichever connection wrote it: here a write of
// another client, which the stopped replica never got. Before Redis 7 its
// WAIT alone would count from its own connection's writes (none) and
// confirm it at once.
func TestWaitCountsWhatOtherConnectionsWrote(t *testing.T) {
	primary, replica := startReplicated(t)
	c := redis.NewClient(&redis.Options{Addr: primary.addr, MaxRetries: -1})
	s := redisstore.NewFromClient(c, redisstore.Options{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	defer s.Close()
	ctx := t.Context()
	if err := replica.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.cmd.Process.Signal(syscall.SIGCONT) })
	if err := primary.c.Set(ctx, "decided", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := c.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"decided"}).Err()
	if !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("a script that wrote nothing, after a write the replica did not get = %v, want ErrNotReplicated", err)
	}
}

// A write answered nil (SeenEvent's SET NX GET of a new key) waits for the
// replica as any other: with the replica stopped it is not confirmed.
func TestWriteAnsweredNilWaitsForTheReplica(t *testing.T) {
	primary, replica := startReplicated(t)
	s := newStore(t, "redis://"+primary.addr+"/0", redisstore.Options{WaitReplicas: 1, WaitTimeout: 200 * time.Millisecond})
	defer s.Close()
	if err := replica.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.cmd.Process.Signal(syscall.SIGCONT) })
	if first, err := s.SeenEvent(t.Context(), "Ev1", time.Minute); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("SeenEvent with the replica stopped = %v, %v; want ErrNotReplicated", first, err)
	}
}
