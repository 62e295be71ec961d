package slackapp_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
)

// Slack's failures of its own that pass (service_unavailable,
// internal_error, fatal_error, request_timeout), answered to auth.test at
// start, are waited out as an outage is: the bot asks again and serves,
// rather than exiting.
func TestStartRidesOutAPassingAuthTestError(t *testing.T) {
	for _, code := range []string{"service_unavailable", "internal_error", "fatal_error", "request_timeout"} {
		t.Run(code, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.slack.ErrorNext("auth.test", code)
			b := e.launch(e.open())
			e.bot = b
			waitUntil(t, "the bot connects", func() bool {
				select {
				case err := <-b.done:
					e.bot = nil
					b.st.Close()
					t.Fatalf("Run ended with %v after one %s from auth.test; want it asked again", err, code)
				default:
				}
				return b.app.Connected()
			})
			e.model.Reply(fakeopenai.Text("Up."))
			ts := e.slack.Mention(channel, requester, "hello")
			e.answer(ts, "Up.")
		})
	}
}

// chat.postMessage's rate limits answered as ok:false with HTTP 200
// (rate_limited, ratelimited) are a wait, not a refusal: the answer is
// posted again later.
func TestAnswerRefusedWithARateLimitCodeIsPostedAgain(t *testing.T) {
	for _, code := range []string{"rate_limited", "ratelimited"} {
		t.Run(code, func(t *testing.T) {
			t.Cleanup(slackapp.SetLaterWaits(10*time.Millisecond, 10*time.Millisecond))
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.slack.FailNext("chat.startStream", 400)
			e.slack.ErrorNext("chat.postMessage", code)
			e.model.Reply(fakeopenai.Text("The answer is 42."))
			ts := e.slack.Mention(channel, requester, "the answer?")
			e.answer(ts, "The answer is 42.")
		})
	}
}
