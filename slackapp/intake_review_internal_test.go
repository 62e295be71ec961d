package slackapp

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
)

// A rate limit whose Retry-After runs past the call's deadline is not
// waited out: it is returned at once, with its Retry-After, for the
// caller to try again later.
func TestRateLimitPastTheDeadlineIsReturnedAtOnce(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Retry-After", "5")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: srv.URL + "/"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err = a.chat(ctx, chatMessage{channel: "C1", ts: "1.5", text: "hi"})
	rl, ok := errors.AsType[*slack.RateLimitedError](err)
	if !ok || rl.RetryAfter != 5*time.Second {
		t.Fatalf("chat() error = %v; want Slack's rate limit, with its Retry-After of 5 s", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("chat() returned after %v; want at once", d)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls; want 1", n)
	}
}

// The update waiting for a card's copy is the latest one Slack refused or
// that failed, and keeps the time of the first refusal; one made drops it.
func TestCardRetryIsTheLatestUpdate(t *testing.T) {
	var m cardMemory
	ref := cardRef{Channel: "C1", TS: "1.5"}
	t0 := time.Now()
	decided := cardRetry{call: agent.Call{ID: "c1", Status: agent.CallDecided}, text: "decided", since: t0, due: t0.Add(31 * time.Second)}
	if !m.refused("c1", ref, decided) {
		t.Fatal("the first refusal of a copy is not to be scheduled")
	}
	ran := cardRetry{call: decided.call, text: "ran", since: t0.Add(time.Second), due: t0.Add(40 * time.Second)}
	if m.refused("c1", ref, ran) {
		t.Error("a copy with an update waiting is scheduled again")
	}
	if r, ok := m.waiting("c1", ref); !ok || r.text != "ran" || !r.since.Equal(t0) || !r.due.Equal(ran.due) {
		t.Errorf("waiting = %+v, %v; want the latest update, due when it is, since the first refusal", r, ok)
	}
	m.failed("c1", ref, cardRetry{call: decided.call, text: "skipped"})
	if r, _ := m.waiting("c1", ref); r.text != "skipped" || !r.due.Equal(ran.due) {
		t.Errorf("after a later update failed, waiting = %+v; want it, when the last refusal is due", r)
	}
	m.failed("c2", ref, cardRetry{text: "other"})
	if _, ok := m.waiting("c2", ref); ok {
		t.Error("an update that failed is made again without a rate limit")
	}
	m.settled("c1", ref)
	if _, ok := m.waiting("c1", ref); ok {
		t.Error("an update made leaves an older one waiting")
	}
}

// A copy of a message that waited for another records within what is left
// of its envelope's 3 s, and at most recordTimeout.
func TestRecordDeadline(t *testing.T) {
	now := time.Now()
	for _, tt := range []struct {
		name     string
		received time.Time
		want     time.Time
	}{
		{"unknown receipt", time.Time{}, now.Add(recordTimeout)},
		{"just received", now, now.Add(recordTimeout)},
		{"received 2.2 s ago", now.Add(-2200 * time.Millisecond), now.Add(ackWindow - ackLeeway - 2200*time.Millisecond)},
		{"received 3 s ago", now.Add(-3 * time.Second), now.Add(-ackLeeway)},
	} {
		if got := recordDeadline(message{received: tt.received}, now); !got.Equal(tt.want) {
			t.Errorf("%s: recordDeadline = now%+v, want now%+v", tt.name, got.Sub(now), tt.want.Sub(now))
		}
	}
}

// A waiting update that shows an approval as running is not made late:
// what became of the call follows it, rendered by whichever process
// resumed it, maybe another one already, which it would undo. A waiting
// update of another phase is made (the call as stored has not moved on:
// here no agent reads it).
func TestCardRetryOfARunningApprovalIsDropped(t *testing.T) {
	var updates atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		updates.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true,"channel":"C1","ts":"1.5"}`))
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: srv.URL + "/"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ref := cardRef{Channel: "C1", TS: "1.5"}
	past := time.Now().Add(-time.Second)
	for _, tt := range []struct {
		phase agent.Phase
		made  int64
	}{{agent.PhaseDecided, 0}, {agent.PhaseExecuted, 1}} {
		updates.Store(0)
		a.cards.refused("c1", ref, cardRetry{call: agent.Call{ID: "c1", Status: agent.CallDecided}, rank: phaseRank(tt.phase), text: string(tt.phase), since: past, due: past})
		a.retryCopy(t.Context(), "c1", ref)
		if n := updates.Load(); n != tt.made {
			t.Errorf("a waiting update of phase %s: %d made, want %d", tt.phase, n, tt.made)
		}
		if _, ok := a.cards.waiting("c1", ref); ok {
			t.Errorf("a waiting update of phase %s is still waiting", tt.phase)
		}
	}
}
