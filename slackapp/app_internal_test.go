package slackapp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// Work of one key runs in order, one at a time; work of another key does
// not wait for it; a queue's goroutine ends once its queue is empty.
func TestQueuesRunInOrderAndApart(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	release := make(chan struct{})
	var got []string
	done := make(chan struct{})
	a.active.Add(1) // as Run's loop would: the count stays positive
	a.enqueue(ctx, "A", func(context.Context) {
		<-release
		got = append(got, "A1")
	})
	a.enqueue(ctx, "A", func(context.Context) {
		got = append(got, "A2")
		close(done)
	})
	ranB := make(chan struct{})
	a.enqueue(ctx, "B", func(context.Context) { close(ranB) })
	select {
	case <-ranB:
	case <-done:
		t.Fatal("A's second job ran before its first was released")
	}
	close(release)
	<-done
	a.active.Add(-1)
	a.wg.Wait()
	if want := []string{"A1", "A2"}; !slices.Equal(got, want) {
		t.Errorf("A's jobs ran as %v, want %v", got, want)
	}
	a.mu.Lock()
	n := len(a.queues)
	a.mu.Unlock()
	if n != 0 {
		t.Errorf("%d queues are left after their work ended, want none", n)
	}
}

func TestRefusalTextPolicyDenied(t *testing.T) {
	err := fmt.Errorf("decide r.0: %w", &agent.DetailError{Err: approvals.ErrPolicyDenied, Detail: "Deploys are frozen"})
	text, result := refusalText(agent.Call{}, "U1", err)
	if result != "policy_denied" || text != "The policy now denies this call: Deploys are frozen. Nothing ran." {
		t.Errorf("refusalText = %q, %q", text, result)
	}
}

func TestRequireAdmin(t *testing.T) {
	// Nothing listens on the API URL: every look-up fails.
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: "http://127.0.0.1:1/", AdminUsers: []string{"UADMIN"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "UADMIN", adminChange); !ok || refusal != "" {
		t.Errorf("requireAdmin(an admin) = %q, %v", refusal, ok)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "USOMEONE", adminChange); ok || !strings.Contains(refusal, "nothing changed") {
		t.Errorf("requireAdmin(someone, no Web API) = %q, %v", refusal, ok)
	}
}

// expiryAgent records expiry passes and answers each with the next deadline
// it is given.
type expiryAgent struct {
	Agent
	passes chan struct{}
	next   chan time.Time
}

func (f *expiryAgent) Expire(context.Context, func(runID, conversation string)) (time.Time, error) {
	f.passes <- struct{}{}
	return <-f.next, nil
}

// The expiry timer sleeps until the next deadline it knows: one the store
// reports after a pass, or one a call paused in this process sets; never a
// fixed tick (SweepInterval is an hour here).
func TestExpiryTimerFollowsDeadlines(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", SweepInterval: time.Hour}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &expiryAgent{passes: make(chan struct{}), next: make(chan time.Time)}
	a.ag = f
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.expire(t.Context(), stopping)
	}()
	pass := func(what string, next time.Time) {
		t.Helper()
		select {
		case <-f.passes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no expiry pass %s", what)
		}
		f.next <- next
	}
	pass("at start", time.Time{})
	// A call paused here wakes the timer.
	a.expiry.at(time.Now().Add(20 * time.Millisecond))
	pass("at a deadline set by a pause", time.Now().Add(20*time.Millisecond))
	pass("at the deadline the store reported", time.Time{})
	close(stopping)
	<-done
}
