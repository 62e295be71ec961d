package slackapp_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// In a channel shared with another organisation, an event's team_id is
// its author's workspace. A partner's reply in a thread the bot works in,
// paused on a card, is the same conversation: it is told the thread waits
// on an approval, and answered after the resume, with the thread's
// history.
func TestPartnerReplyInASharedThreadIsTheSameConversation(t *testing.T) {
	e, ts, card := sharedChannelCard(t, requester)
	e.model.Reply(fakeopenai.Text("Partner: it was version 7."))

	e.slack.ThreadReply(shared, ts, partner, "which version was that again?")
	e.answerIn(shared, ts, "waiting on approval")

	_, err := e.slack.Click(other, shared, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(shared, ts, "Deployed api 7.")
	e.answerIn(shared, ts, "Partner: it was version 7.")
	req := e.request(3)
	if !strings.Contains(req.Messages[len(req.Messages)-1].Content, "which version") {
		t.Errorf("the partner's message is not the last of the third request")
	}
	if !strings.Contains(req.Messages[0].Content+req.Messages[1].Content, "deploy api 7") {
		t.Errorf("the third request does not hold the thread's first message: the reply was answered as a conversation of its own")
	}
}

// A guest sees only the channels they are in, public ones too. A guest
// named as an approver of a call in a public channel they are not in gets
// a copy of the card by DM, as an approver outside a private channel
// does; a guest in the channel, and a member of the workspace who is not,
// get none: they see the card where it is.
func TestGuestApproverOutsideAPublicChannelGetsACopy(t *testing.T) {
	const outside, inside = "UGUEST0001", "UGUEST0002"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [UGUEST0002, UAPPROVER1, UGUEST0001]\n"
	e.slack.AddUser(fakeslack.User{ID: outside, Name: "contractor", Guest: true})
	e.slack.AddUser(fakeslack.User{ID: inside, Name: "auditor", Guest: true})
	e.slack.AddChannel(fakeslack.Channel{ID: shared, Name: "ops", Members: []string{requester, inside, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(shared, requester, "deploy api 7")
	e.cardIn(shared, ts, "deploy")
	waitForCopy(t, e, outside)
	for _, u := range []string{inside, approver} {
		if n := len(e.slack.Messages(e.slack.DMChannel(u))); n != 0 {
			t.Errorf("%s, who can see the channel, got %d messages by DM", u, n)
		}
	}
}

// A partner of another organisation mentions the bot in a channel shared
// with it (Slack Connect): the answer is streamed to them, and
// chat.startStream's recipient_team_id must be the team the recipient
// belongs to (Slack: "The encoded ID of the team the user receiving the
// streaming text belongs to"), not the bot's workspace.
func TestStreamToAPartnerNamesTheirTeam(t *testing.T) {
	const partnerTeam = "T0PARTNER1"
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddUser(fakeslack.User{ID: partner, Name: "partner", TeamID: partnerTeam})
	e.slack.AddChannel(fakeslack.Channel{ID: shared, Name: "shared-ops", Members: []string{requester, partner, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.Response{Text: "Here is a fairly long answer that arrives in several pieces, one after the other.", Chunks: 8})
	ts := e.slack.Mention(shared, partner, "tell me something")
	e.answerIn(shared, ts, "several pieces")
	starts := e.slack.Calls("chat.startStream")
	if len(starts) != 1 {
		t.Fatalf("%d chat.startStream calls, want 1", len(starts))
	}
	if u, team := starts[0].Param("recipient_user_id"), starts[0].Param("recipient_team_id"); u != partner || team != partnerTeam {
		t.Errorf("stream addressed to user %q of team %q; want %q of %q", u, team, partner, partnerTeam)
	}
}

// An approver in a public channel whom Slack cannot look up (users.info
// failing) but who is in the channel sees the card there: no copy.
func TestApproverInAPublicChannelNotLookedUpGetsNoCopy(t *testing.T) {
	const guest = "UGUEST0001"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [UAPPROVER1, UGUEST0001]\n"
	e.slack.AddUser(fakeslack.User{ID: guest, Name: "contractor", Guest: true})
	e.slack.AddChannel(fakeslack.Channel{ID: shared, Name: "ops", Members: []string{requester, approver, e.slack.BotUserID()}})
	e.start()
	// The check of the policy's approvers at start looks both up first.
	waitUntil(t, "the approvers checked at start", func() bool { return len(e.slack.Calls("users.info")) == 2 })
	e.slack.ErrorNext("users.info", "internal_error") // the first approver's
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(shared, requester, "deploy api 7")
	e.cardIn(shared, ts, "deploy")
	waitForCopy(t, e, guest)
	if n := len(e.slack.Messages(e.slack.DMChannel(approver))); n != 0 {
		t.Errorf("the approver in the channel, not looked up, got %d messages by DM", n)
	}
}

// waitForCopy waits until user has a copy of a card by DM.
func waitForCopy(t *testing.T, e *env, user string) {
	t.Helper()
	waitUntil(t, user+" gets a copy of the card by DM", func() bool {
		return slices.ContainsFunc(e.slack.Messages(e.slack.DMChannel(user)), isCard)
	})
}

// A member of the bot's workspace is never taken for an outsider by the
// envelope's team_id (in a shared channel Slack may set it to the
// channel's workspace, the partner's): only the event's own team, or
// user_team, names its author's workspace; and an event the bot ignores
// (a channel_join) notes nobody. They still decide a call open to the
// conversation.
func TestMemberIsNotTakenForAnOutsiderByTheEnvelopesTeam(t *testing.T) {
	for _, subtype := range []string{"channel_join", ""} {
		t.Run("subtype "+subtype, func(t *testing.T) {
			e, ts, card := sharedChannelCard(t, requester)
			ev := map[string]any{"type": "message", "user": other, "team": e.slack.TeamID(),
				"text": "a word from the team", "ts": "1800000000.000100", "channel": shared, "channel_type": "channel"}
			if subtype != "" {
				ev["subtype"] = subtype
			} else {
				ev["thread_ts"] = ts
			}
			payload, err := json.Marshal(map[string]any{"type": "event_callback", "team_id": "T0PARTNER1", "api_app_id": e.slack.AppID(),
				"event_id": "EvMEMBER1", "event_time": time.Now().Unix(), "event": ev, "is_ext_shared_channel": true})
			must(t, err)
			if _, err := e.slack.WaitAck(e.slack.Deliver("events_api", payload), 10*time.Second); err != nil {
				t.Fatal(err)
			}
			_, err = e.slack.Click(other, shared, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answerIn(shared, ts, "Deployed api 7.")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want 1", n)
			}
		})
	}
}

// Someone of another organisation (Slack Connect) named as an approver of
// a call in a public channel of the bot's workspace that they are not in
// cannot see that channel: like a guest, they get a copy of the card by
// DM. An approver of the workspace who is not in it either sees it, and
// gets none.
func TestApproverOfAnotherOrganisationOutsideAPublicChannelGetsACopy(t *testing.T) {
	const public = "CPUBLIC001"
	e := newEnv(t, storeKinds(t)[0])
	e.policy = "policy:\n  rules:\n    - tool: deploy\n      verdict: ask\n      approvers: [UPARTNER01, UAPPROVER1]\n"
	e.slack.AddUser(fakeslack.User{ID: partner, Name: "partner", TeamID: "T0PARTNER1"})
	e.slack.AddChannel(fakeslack.Channel{ID: public, Name: "ops", Members: []string{requester, e.slack.BotUserID()}})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)), fakeopenai.Text("Deployed api 7."))
	ts := e.slack.Mention(public, requester, "deploy api 7")
	e.cardIn(public, ts, "deploy")
	waitForCopy(t, e, partner)
	if n := len(e.slack.Messages(e.slack.DMChannel(approver))); n != 0 {
		t.Errorf("the approver of the workspace, who sees the public channel, got %d messages by DM", n)
	}
}
