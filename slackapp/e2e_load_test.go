package slackapp_test

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// A burst of 500 mentions while the model holds every request: every
// envelope is acked and a slash command is answered while no turn can
// finish (acks and commands never wait for turns), every conversation's
// turn reaches the model at once (none waits for another's model call),
// every conversation is answered once the model answers, and the
// goroutines of the conversations end with their work. How fast the acks
// are is measured by cmd/loadbench, next to the loopback round trip.
func TestEnvelopeBurst(t *testing.T) {
	if testing.Short() {
		t.Skip("a burst of 500 mentions")
	}
	const mentions = 500
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.ShutdownGrace = 100 * time.Millisecond
	// 500 turns renew their leases at once on a loaded machine: a lease
	// long enough that a late renewal is not taken for a lost one.
	e.leaseTTL = 10 * time.Second
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	var asked atomic.Int64
	e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		asked.Add(1)
		<-release
		return fakeopenai.Text("ok")
	})
	e.start()
	baseline := workGoroutines()

	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	begin := time.Now()
	var threads []string
	for i := range mentions {
		// Distinct channels, so no two mentions share a conversation.
		threads = append(threads, e.slack.Mention(fmt.Sprintf("CBURST%04d", i), requester, "status please"))
	}
	var envs []string
	for _, ts := range threads {
		for _, env := range e.slack.EnvelopesByTS(ts) {
			envs = append(envs, env.ID)
		}
	}
	if len(envs) != 2*mentions {
		t.Fatalf("%d envelopes for %d mentions, want two each", len(envs), mentions)
	}
	var worst time.Duration
	for _, id := range envs {
		if _, err := e.slack.WaitAck(id, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		latency, _ := e.slack.AckLatency(id)
		worst = max(worst, latency)
	}
	// The model still holds every request: no turn has finished.
	if text := e.slash(requester, "help"); !strings.Contains(text, "/approvals pending") {
		t.Errorf("/approvals help during the burst answered %q", text)
	}
	t.Logf("acked and command answered after %v", time.Since(begin))
	waitUntil(t, "every conversation's turn is at the model at once", func() bool { return asked.Load() == mentions })
	for i, ts := range threads {
		for _, m := range e.slack.Thread(fmt.Sprintf("CBURST%04d", i), ts) {
			if m.BotID != "" {
				t.Fatalf("a thread was answered while the model held every request: %q", m.Text)
			}
		}
	}
	unblock()
	for i, ts := range threads {
		e.answerIn(fmt.Sprintf("CBURST%04d", i), ts, "ok")
	}
	t.Logf("all answered after %v", time.Since(begin))
	close(stop)
	<-sampled
	waitUntil(t, "the conversations' goroutines have ended", func() bool {
		return workGoroutines() <= baseline+10
	})
	t.Logf("slowest ack %v, goroutines at work %d, peak of all %d", worst, baseline, peak.Load())
}

// workGoroutines counts the goroutines of this process except those that
// serve HTTP connections (the clients' idle connections kept for reuse,
// and the fakes' server side of them), which outlive the work that
// opened them by design.
func workGoroutines() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "net/http.(*persistConn)") || strings.Contains(g, "net/http.(*conn).serve") {
			continue
		}
		count++
	}
	return count
}
