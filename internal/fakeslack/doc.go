// Package fakeslack is a fake Slack for tests: a Web API and a Socket Mode
// websocket endpoint on one loopback HTTP server, driven by real clients
// (slack-go's, the bot's own Socket Mode client).
//
// Point the client at it with
//
//	s := fakeslack.New(t)
//	api := slack.New(s.BotToken(),
//		slack.OptionAPIURL(s.APIURL()),
//		slack.OptionAppLevelToken(s.AppToken()))
//	client := socketmode.New(api)
//
// and run the client as usual. apps.connections.open answers with a ws://
// URL of the fake, so no network or Slack account is involved.
//
// # What is faked
//
// A workspace with a bot identity (BotUserID, BotID, TeamID), users with
// admin and owner flags (AddUser), public and private channels with members
// (AddChannel), DMs (DMChannel) and user groups (AddUserGroup).
//
// The Web API methods the bot needs: auth.test, apps.connections.open,
// chat.postMessage, chat.postEphemeral, chat.update, chat.delete,
// chat.getPermalink, chat.startStream, chat.appendStream, chat.stopStream,
// views.open, views.push, views.update, views.publish, conversations.open,
// conversations.info, conversations.members, conversations.replies,
// users.info, usergroups.users.list, assistant.threads.setStatus and
// reactions.add. Any other method answers unknown_method and is listed by
// UnknownMethods. Every call is recorded (Calls, WaitCall), as are messages
// in their latest version (Messages, Thread, Message), ephemeral messages
// (Ephemerals), views (Views, HomeView, OpenModals) and thread statuses
// (ThreadStatus). Changed signals the next change of any of it, for a
// client that follows the workspace live (the playground's web page).
//
// Socket Mode: tests act as users with Mention, Post, ThreadReply, DM,
// PostAsBot, Click, ClickInView, SubmitView, CloseView, Slash and OpenHome; each
// delivery is an Envelope whose ack can be awaited (WaitAck) and timed
// (AckLatency). Redeliver, WithEventRetry, Disconnect, Drop, Silence and
// RevokeAppToken exercise the app's handling of retries and reconnects;
// Deliver and SendFrame send envelopes and messages of any shape. RateLimit and FailNext script HTTP 429 and
// 5xx answers; HoldNext keeps a call waiting until the test releases it, to
// order events without sleeping.
//
// For load tools: WithAPIObserver hands every answered Web API call and its
// answer to a function as it happens, and RoundTrip measures the loopback
// websocket round trip (PING to PONG) on the app's connections, the
// baseline for envelope ack times.
//
// # What is mimicked from real Slack
//
// The fake deliberately reproduces the platform behaviour that apps get
// wrong:
//
//   - Tokens are checked: the bot token for Web API methods, the app-level
//     token for apps.connections.open; otherwise not_authed or
//     invalid_auth, which slack-go treats as fatal.
//   - A socket URL is good for one connection. The server sends a hello
//     message first and websocket PING frames every few seconds; slack-go
//     relies on them and reconnects after 30 s of silence. The client's
//     Origin header (https://api.slack.com) is accepted.
//   - A mention in a channel the bot is in arrives twice: as app_mention
//     and as a message event with the same ts and another event_id. The
//     text contains "<@BOTUSERID>". Channels the bot is not in deliver no
//     events.
//   - The bot's own posts come back to it as message events with bot_id
//     set and no bot_message subtype. Other bots' posts carry the
//     bot_message subtype.
//   - Envelopes not acked when a connection drops are redelivered on the
//     next connection with retry_attempt increased and retry_reason
//     "timeout". Several connections (several replicas) share the
//     envelopes round-robin; envelopes sent while none is open wait.
//   - A trigger_id can be exchanged once, within three seconds
//     (invalid_trigger_id, exchanged_trigger_id, expired_trigger_id).
//   - Block Kit limits: 50 blocks per message and 100 per view, 3000
//     characters of section text, 2000 per field and button value, 150 per
//     header, 40000 characters of message text (msg_too_long), duplicate
//     block_ids; modal titles of at most 24 characters. Text objects hold
//     1 to 3000 characters, and plain_text only where Slack wants it
//     (headers, buttons, labels, placeholders of at most 150, titles,
//     confirmation dialogs: title 100, text 300, buttons 30); a
//     plain_text_input's max_length is at most 3000 and its initial_value
//     within it; a modal with an input block needs a submit button.
//   - Limits Slack does not document with Block Kit: a message whose
//     blocks hold more than 12,000 characters of text in all is refused
//     with msg_blocks_too_long (see WithMaxBlocksText), whatever its text
//     field may hold; a view of more than 250 kB of JSON with
//     view_too_large, by views.open, views.push, views.update and
//     views.publish, and in a response_action (see SubmitView).
//     MessageProblems and ViewProblems check blocks and views against
//     these rules without sending them.
//   - chat.startStream outside a DM needs recipient_user_id and
//     recipient_team_id; chat.update and chat.delete only work on the bot's
//     own messages; private channels the bot is not in are
//     channel_not_found; a reply in a thread clears its assistant status.
//   - HTTP 429 answers carry Retry-After, which slack-go reports as
//     *slack.RateLimitedError.
//
// # Simplifications
//
// Public channels accept posts from the bot even when it is not a member
// (as with the chat:write.public scope). No message_changed or
// message_deleted events are sent, nothing is paginated, response_url posts
// are only recorded (as the pseudo-method "response_url"), and a slash
// command's ack payload is recorded as an ephemeral message. Unacked
// envelopes are redelivered on a dropped connection or by Redeliver, and
// on a timer only with WithEventRetry (events only, at a fixed interval
// rather than Slack's schedule).
package fakeslack
