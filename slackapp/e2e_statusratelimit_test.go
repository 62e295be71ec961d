package slackapp_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// statusRetryAfter is the Retry-After, in seconds, of the rate-limited
// status calls below: longer than any wait of the test's, so that a reply
// that waited it out fails the test instead of passing late.
const statusRetryAfter = 30

// statusCalls returns the thread status calls made so far, and whether
// every one of them was refused for the rate limit (none went through).
func (e *env) statusCalls() (calls []fakeslack.Call, allLimited bool) {
	calls = e.slack.Calls("assistant.threads.setStatus")
	for _, c := range calls {
		if c.Status != http.StatusTooManyRequests {
			return calls, false
		}
	}
	return calls, true
}

// A thread status Slack rate-limits is dropped, not waited out: the answer
// is posted while the limit is still in force (no status call has gone
// through yet), and the next turn's status is not even sent until the
// limit's Retry-After has passed, so it does not hold that answer back
// either.
func TestRateLimitedStatusDoesNotHoldTheAnswer(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	// One refusal: a status sent again (a retry, or the next turn's
	// before the Retry-After) would go through, and show.
	e.slack.RateLimit("assistant.threads.setStatus", 1, statusRetryAfter)
	e.model.Reply(fakeopenai.Text("All quiet."), fakeopenai.Text("Still quiet."))
	ts := e.slack.Mention(channel, requester, "status please")
	e.answer(ts, "All quiet.")
	calls, limited := e.statusCalls()
	if len(calls) == 0 || !limited {
		t.Fatalf("the answer was posted after %d status calls, want one, refused for the rate limit: %+v", len(calls), calls)
	}
	e.slack.ThreadReply(channel, ts, requester, "and now?")
	e.answer(ts, "Still quiet.")
	if calls, limited := e.statusCalls(); len(calls) != 1 || !limited {
		t.Errorf("%d status calls while Slack's Retry-After was in force, want only the one refused: %+v", len(calls), calls)
	}
}

// An approval card does not wait out a rate-limited status either.
func TestRateLimitedStatusDoesNotHoldTheCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.RateLimit("assistant.threads.setStatus", 1, statusRetryAfter)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 7")
	e.card(ts, "deploy")
	if calls, limited := e.statusCalls(); len(calls) == 0 || !limited {
		t.Errorf("the card was posted after %d status calls, want one, refused for the rate limit: %+v", len(calls), calls)
	}
}

// A status call Slack is slow to answer holds the answer back only
// briefly: the answer is posted while the call is still held. The status
// then lands after the answer that should have cleared it, so it is
// cleared once the call returns.
func TestSlowStatusDoesNotHoldTheAnswer(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	arrived, release := e.slack.HoldNext("assistant.threads.setStatus")
	t.Cleanup(release)
	e.model.Reply(fakeopenai.Text("All quiet."))
	ts := e.slack.Mention(channel, requester, "status please")
	<-arrived
	e.answer(ts, "All quiet.")
	// A held call is recorded once it is answered: the answer's call comes
	// first in the record.
	var order []string
	for _, c := range e.slack.Calls("") {
		switch c.Method {
		case "assistant.threads.setStatus", "chat.startStream", "chat.postMessage":
			order = append(order, c.Method)
		}
	}
	if len(order) == 0 || order[0] == "assistant.threads.setStatus" {
		t.Fatalf("the answer waited for the held status call: calls %q", order)
	}
	release()
	// The clear the answer queued behind the held call goes once it is
	// answered (the turn's end may clear it once more, harmlessly).
	waitUntil(t, "the late status is cleared", func() bool {
		calls := e.slack.Calls("assistant.threads.setStatus")
		return len(calls) >= 2 && calls[len(calls)-1].Param("status") == ""
	})
	for _, c := range e.slack.Calls("assistant.threads.setStatus")[1:] {
		if s := c.Param("status"); s != "" {
			t.Errorf("a status %q was set after the answer", s)
		}
	}
	calls := e.slack.Calls("assistant.threads.setStatus")
	if got := calls[0].Param("status"); !strings.Contains(got, "thinking") {
		t.Errorf("the held status call set %q, want the turn's status", got)
	}
	if s := e.slack.ThreadStatus(channel, ts); s != "" {
		t.Errorf("thread status %q after the answer, want it cleared", s)
	}
}
