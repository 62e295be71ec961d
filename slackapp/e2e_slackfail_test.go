package slackapp_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// groupPolicy has deploys decided by the members of one user group.
const groupPolicy = `
policy:
  default: ask
  rules:
    - id: deploys
      tool: deploy
      verdict: ask
      approvers: [SOPS00009]
`

// An approver whose user group Slack could not list, or a member of the
// conversation whose membership it could not say, is told to try again,
// not that they may not decide: that may be false.
func TestLookupFailureIsNotToldAsARefusal(t *testing.T) {
	for _, tt := range []struct {
		name, policy, method string
	}{
		// Both are looked up first as the card is posted, or the call
		// paused: the look-ups fail from before the mention.
		{"user group", groupPolicy, "usergroups.users.list"},
		{"conversation's members", "\npolicy:\n  default: ask\n  rules:\n    - id: deploys\n      tool: deploy\n      verdict: ask\n", "conversations.members"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.policy = tt.policy
			e.slack.AddUserGroup("SOPS00009", approver)
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)), fakeopenai.Text("Deployed."))
			// Enough for every look-up before the click's, each with the
			// client's retries: the start's check of the approvers, the
			// pause's, the card's.
			for range 40 {
				e.slack.FailNext(tt.method, 503)
			}
			ts := e.slack.Mention(channel, requester, "deploy api 1")
			card := e.card(ts, "deploy")
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			waitUntil(t, "the approver is told something", func() bool { return len(e.slack.Ephemerals(approver)) > 0 })
			if got := e.slack.Ephemerals(approver)[0].Text; got != slackapp.UnverifiedText() {
				t.Errorf("an approver Slack could not check was told %q, want %q", got, slackapp.UnverifiedText())
			}
			if n := e.deploy.Load(); n != 0 {
				t.Fatalf("deploy ran %d times while who may decide could not be checked", n)
			}
		})
	}
}

// A card update Slack refuses with server errors past the client's
// retries, or with an error it names as passing, is made again later: the
// card of a denied call kept its buttons.
func TestCardUpdateRefusedForNowIsMadeAgain(t *testing.T) {
	for _, tt := range []struct {
		name string
		fail func(*fakeslack.Server)
	}{
		{"server errors", func(s *fakeslack.Server) {
			for range 10 {
				s.FailNext("chat.update", 503)
			}
		}},
		{"passing error", func(s *fakeslack.Server) {
			for range 2 {
				s.ErrorNext("chat.update", "internal_error")
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Restored once the bot has stopped (cleanups run last first).
			t.Cleanup(slackapp.SetCardRetryWait(10 * time.Millisecond))
			e := newEnv(t, storeKinds(t)[0])
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("Not deploying then."))
			ts := e.slack.Mention(channel, requester, "deploy api 2")
			card := e.card(ts, "deploy")
			tt.fail(e.slack)
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionDeny, "")
			must(t, err)
			e.answer(ts, "Not deploying then.")
			waitUntil(t, "the denied call's card without buttons", func() bool {
				m, _ := e.slack.Message(channel, card.TS)
				return !isCard(m) && strings.Contains(blocksText(m), "Denied by")
			})
		})
	}
}

// An answer Slack refuses with an error it names as passing is posted
// again, as one refused with a server error is; not one refused with an
// error Slack says may come after the post was made (internal_error),
// which would show it twice.
func TestAnswerRefusedWithAPassingErrorIsPostedAgain(t *testing.T) {
	// Restored once the bot has stopped (cleanups run last first).
	t.Cleanup(slackapp.SetLaterWaits(10*time.Millisecond, 10*time.Millisecond))
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.FailNext("chat.startStream", 400)
	e.slack.ErrorNext("chat.postMessage", "service_unavailable")
	e.model.Reply(fakeopenai.Text("The answer is 42."))
	ts := e.slack.Mention(channel, requester, "the answer?")
	e.answer(ts, "The answer is 42.")

	e.slack.FailNext("chat.startStream", 400)
	e.slack.ErrorAfterNext("chat.postMessage", "internal_error")
	e.model.Reply(fakeopenai.Text("Made once."), fakeopenai.Text("Next."))
	e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> again?")
	e.answer(ts, "Made once.")
	e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> next?")
	e.answer(ts, "Next.")
	n := 0
	for _, m := range e.slack.Thread(channel, ts) {
		if m.BotID != "" && strings.Contains(m.Text, "Made once.") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("an answer Slack posted and answered internal_error for was posted %d times:\n%s", n, dumpThread(e.slack.Thread(channel, ts)))
	}
}

// A requester who clicks Cancel while Slack does not list the channel's
// members is told to try again, not that they are not in the conversation.
func TestCancelWhileMembersCannotBeListed(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"1"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 1")
	card := e.card(ts, "deploy")
	for range 10 {
		e.slack.FailNext("conversations.members", 503)
	}
	_, err := e.slack.Click(requester, channel, card.TS, slackapp.ActionCancel, "")
	must(t, err)
	waitUntil(t, "the requester is told something", func() bool { return len(e.slack.Ephemerals(requester)) > 0 })
	if got := e.slack.Ephemerals(requester)[0].Text; got != slackapp.UnverifiedText() {
		t.Errorf("a requester Slack could not check was told %q, want %q", got, slackapp.UnverifiedText())
	}
}

// When a user group of a call's approvers cannot be listed as the card is
// posted, the thread hears that its members got no copy (the card in a DM
// with the bot, which none of them can see).
func TestGroupThatCannotBeListedIsNamedAsUnreached(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.policy = groupPolicy
	e.slack.AddUserGroup("SOPS00009", approver)
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)))
	for range 10 {
		e.slack.FailNext("usergroups.users.list", 503)
	}
	dm := e.slack.DMChannel(requester)
	ts := e.slack.DM(requester, "deploy api 3")
	e.cardIn(dm, ts, "deploy")
	e.waitIn(dm, ts, "with the note of the copies not sent", func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text, "couldn't send the approval card") && strings.Contains(m.Text, "SOPS00009")
	})
}

// A card Slack posted but answered with an error that may come after the
// post was made (internal_error; a gateway's 504 after Slack made it; an
// answer lost to the client's time-out) is found in the thread, not posted
// again: the thread is not told it could not be posted, and the card, the
// only one, is updated in place once the call is decided and runs.
func TestCardSlackPostedButAnsweredWithAnErrorIsUpdated(t *testing.T) {
	for _, tt := range []struct {
		name      string
		fail      func(e *env) (release func())
		transport http.RoundTripper
	}{
		{"internal_error", func(e *env) func() { e.slack.ErrorAfterNext("chat.postMessage", "internal_error"); return func() {} }, nil},
		{"a gateway's 504", func(e *env) func() {
			e.slack.FailAfterNext("chat.postMessage", http.StatusGatewayTimeout)
			return func() {}
		}, nil},
		{"an answer lost", func(e *env) func() {
			_, release := e.slack.HoldAnswerNext("chat.postMessage")
			return release
		}, nil},
		{"an answer cut while read", func(*env) func() { return func() {} }, &cutAnswer{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			e.cfg.HTTPClient = &http.Client{Timeout: 2 * time.Second, Transport: tt.transport}
			e.start()
			defer tt.fail(e)()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)), fakeopenai.Text("Deployed."))
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")
			_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed.")
			if n := e.deploy.Load(); n != 1 {
				t.Fatalf("deploy ran %d times, want once", n)
			}
			waitUntil(t, "the card updated in place", func() bool {
				m, ok := e.slack.Message(channel, card.TS)
				return ok && !isCard(m)
			})
			e.stop()
			cards := 0
			for _, m := range e.slack.Thread(channel, ts) {
				if strings.Contains(m.Text+blocksText(m), "couldn't post its approval card") {
					t.Errorf("the thread was told the card could not be posted, though it was:\n%s", dumpThread(e.slack.Thread(channel, ts)))
				}
				if strings.Contains(m.Text+blocksText(m), "deploy") && m.TS != card.TS && len(m.Blocks) > 0 && m.Text != "Deployed." {
					cards++
				}
			}
			if n := len(e.slack.Calls("chat.postMessage")); cards != 0 || n > 2 {
				t.Errorf("%d other cards, %d posts; want the card posted once:\n%s", cards, n, dumpThread(e.slack.Thread(channel, ts)))
			}
		})
	}
}

// cutAnswer answers the first chat.postMessage as Slack did (a 200: the
// post made), but cuts the connection while its body is read.
type cutAnswer struct{ cut atomic.Bool }

func (c *cutAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, "chat.postMessage") || !c.cut.CompareAndSwap(false, true) {
		return resp, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(resp.Body, 5), iotest.ErrReader(io.ErrUnexpectedEOF)), resp.Body}
	return resp, nil
}

// A card Slack refused as rate limited (ok:false rate_limited, for a burst
// of posts: nothing was posted) is posted again after a wait, not given up
// at once with a note into the channel that limits it.
func TestCardRefusedAsRateLimitedIsPostedAgain(t *testing.T) {
	t.Cleanup(slackapp.SetCardRetryWait(50 * time.Millisecond))
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.slack.ErrorNext("chat.postMessage", "rate_limited")
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"6"}`)), fakeopenai.Text("Deployed."))
	ts := e.slack.Mention(channel, requester, "deploy api 6")
	first := e.waitThread(ts, "the card or the note that it was not posted", func(m fakeslack.Message) bool {
		return m.BotID != "" && (isCard(m) || strings.Contains(m.Text, "couldn't post its approval card"))
	})
	if !isCard(first) {
		t.Errorf("a card refused as rate limited was given up at once; the thread has:\n%s", dumpThread(e.slack.Thread(channel, ts)))
	}
}
