package slackapp_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// redisServer is a redis-server process of the test's own, with an
// append-only file in a temporary directory so that its data survives a
// stop and a start, as a production Redis with persistence does.
type redisServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
	done chan error
}

// startRedisServer starts a redis-server on a free loopback port. Without
// redis-server on PATH it skips the test, except in CI (CI=true), where
// that fails it.
func startRedisServer(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server is not on PATH; CI must run the Redis restart test")
		}
		t.Skip("redis-server is not on PATH: skipping the test that stops and starts Redis")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	must(t, l.Close())
	r := &redisServer{t: t, port: port, dir: t.TempDir()}
	r.start()
	t.Cleanup(func() {
		if r.cmd != nil {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

func (r *redisServer) url() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.port) }

// start runs redis-server on the port and data directory and waits until it
// answers PING.
func (r *redisServer) start() {
	r.t.Helper()
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir)
	w := newTestWriter(r.t)
	cmd.Stdout = w
	cmd.Stderr = w
	must(r.t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	r.cmd, r.done = cmd, done

	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.port), MaxRetries: -1})
	defer c.Close()
	waitUntil(r.t, "redis-server answers PING", func() bool {
		select {
		case err := <-done:
			r.t.Fatalf("redis-server exited at start: %v", err)
		default:
		}
		return c.Ping(context.Background()).Err() == nil
	})
}

// stop shuts redis-server down with SIGTERM (it fsyncs the append-only file
// and exits) and waits for the process to end.
func (r *redisServer) stop() {
	r.t.Helper()
	must(r.t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		r.t.Fatal("redis-server did not stop on SIGTERM")
	}
	r.cmd = nil
}

// redisAt is a store kind on the Redis at url, under a random key prefix.
func redisAt(url string) storeKind {
	return storeKind{name: "redis-restart", open: func(t *testing.T) func() fullStore {
		prefix := "test-" + store.NewRunID()
		return func() fullStore {
			s, err := redisstore.New(context.Background(), url, redisstore.Options{Prefix: prefix})
			must(t, err)
			return s
		}
	}}
}

// Redis stopped while a call waits for approval and started again on the
// same data: a click during the outage is refused with a clear private
// message and nothing runs; a message sent during the outage is answered
// with the documented store error; after the start the call is still
// pending, the same click runs it exactly once and the thread gets the
// answer. The bot keeps running throughout and is ready again.
func TestRedisStoppedAndStartedDuringClicks(t *testing.T) {
	rs := startRedisServer(t)
	e := newEnv(t, redisAt(rs.url()))
	b := e.start()
	ctx := context.Background()
	must(t, b.app.Ready(ctx))

	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("deployed at last"))
	ts := e.slack.Mention(channel, requester, "deploy")
	card := e.card(ts, "deploy")

	rs.stop()
	if err := b.app.Ready(ctx); err == nil {
		t.Error("Ready reports ready while Redis is stopped")
	}

	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	// The store does not answer: whether the decision was recorded is
	// not known (a reply lost after the step was made looks the same).
	// The click asks the store again for a while before it says so.
	var told string
	waitLong(t, "the clicker is told", func() bool {
		for _, m := range e.slack.Ephemerals(approver) {
			if strings.Contains(m.Text, "your decision") {
				told = m.Text
				return true
			}
		}
		return false
	})
	if !strings.Contains(told, "could not confirm") || !strings.Contains(told, "nothing was decided") {
		t.Errorf("the clicker was told %q, want that the decision could not be confirmed", told)
	}

	// A message to the bot in the thread during the outage is acked and
	// answered without the inbox guarantee: the turn reports the store
	// error, and that the message must be sent again.
	e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> is it done?")
	e.waitThread(ts, "reporting the store error", func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text, "couldn't save your message")
	})

	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times during the outage", n)
	}
	if m, _ := e.slack.Message(channel, card.TS); m.Updates != 0 || !isCard(m) {
		t.Errorf("the card changed although nothing was recorded: %s", m.Text)
	}
	select {
	case err := <-b.done:
		t.Fatalf("the bot stopped during the outage: %v", err)
	default:
	}

	rs.start()
	waitUntil(t, "the bot is ready again", func() bool { return b.app.Ready(ctx) == nil })

	_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "deployed at last")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want 1", n)
	}
	if got := e.deployArgs(); len(got) != 1 || got[0] != `{"service":"api","version":"2"}` {
		t.Errorf("deploy ran with %q, want the approved arguments", got)
	}
}

// waitLong polls cond until it holds, failing the test after a minute.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
