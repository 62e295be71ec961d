// Package slackapp is the Slack edge of the bot: everything that speaks
// Slack lives here, and nothing below it (agent, approvals, store) imports
// slack-go.
//
// The package covers:
//
//   - Socket Mode: the connection to Slack (no public URL), through the
//     app's own small client (gorilla/websocket; slack-go serves the Web
//     API and its types): a connection Slack asks to replace is read until
//     its successor is open and Slack closes it, a lost or silent one is
//     replaced at once, and envelopes are decoded only as far as their
//     handler needs, so the echoes of the bot's own posts cost little;
//     acking every envelope within three seconds before any slow work,
//     de-duplicating events by event_id and ignoring the bot's own and
//     other bots' posts;
//   - events: mentions and thread replies that start or continue a
//     conversation, answered in the thread of the message that started it;
//   - buttons: the decisions on approval cards, one handler per action id
//     (ActionApprove, ActionDeny, ActionReject, ActionEdit, ActionRemember,
//     ActionRememberExact, ActionRespond, ActionCancel, ActionViewArgs, ActionViewModelArgs,
//     ActionViewPreview), ActionWhy (the model explains the pending call in
//     its thread; nothing is decided), and the Home tab's ActionRevokeRule;
//   - modals: reject with a reason, edit arguments, answer a question and
//     view full arguments or the full effect preview, routed by callback id
//     (CallbackReject, CallbackEdit, CallbackRespond);
//   - the /approvals slash command and the App Home tab, republished for
//     the people concerned whenever a pending call appears or ends.
//
// # Concurrency
//
// Each conversation has a queue and a goroutine while it has work; one
// semaphore (Config.MaxTurns) bounds running turns; one WaitGroup owned by
// Run waits for them all. A message's turn and the resume that follows a
// decision go on the conversation's queue, so they run in order and never
// behind another conversation's. A message for a conversation with no
// queue, when a turn slot is free, is recorded together with taking the
// conversation's lease, and the goroutine that recorded it runs its turn
// at once and serves the queue; a click whose decision completes a step
// of a conversation that no turn of this process holds, when a slot is
// free, claims the resume with the decision, and runs it at once in a
// goroutine of its own under the conversation's lease. A click, a form submission, a slash
// command or a Home tab runs in its own goroutine as soon as it arrives: a
// decision is recorded at once (the store decides atomically) even while
// the conversation's turn runs. Updates of one card run in order on the
// card's own queue, and wait on a signal for the card's post to finish.
// Approvals expire on a timer set to the next deadline the store knows.
//
// # Rendering
//
// Everything users see is built by pure functions of plain data: CardBlocks
// for approval cards, ExplanationBlocks for a Why? answer, RejectModal,
// EditModal, RespondModal, ArgsModal and PreviewModal for modals, HomeView and StandingRuleBlocks for the App Home tab, AnswerMessages for the model's
// answers, and the *Text functions for short replies. They keep no state,
// make no calls, and stay within Block Kit limits (50 blocks per message,
// 100 per view, 3000 characters per section, 2000 per button value). Their
// output is checked against golden files in testdata; regenerate them with
//
//	go test ./slackapp -run Golden -update
//
// # Untrusted text
//
// Model-authored text, tool arguments and tool output are untrusted. They
// reach mrkdwn only through Escape, MarkdownToMrkdwn or a code block built
// from escaped text, so they cannot produce a mention (<@U…>, <!subteam^…>),
// a broadcast (<!channel>, <!here>, or a bare @here, which gets an
// invisible word joiner after its at-sign), a channel link or a link whose
// label hides its target. Text objects are sent with verbatim set, so Slack
// adds no links or mentions of its own. The only mentions on a rendered
// surface are the requester, the decider and the approvers, which come from
// Slack and the policy, and are written only when they are well-formed
// user (U…, W…) or user-group (S…) ids.
//
// Buttons carry only the opaque call id; a handler loads the call from the
// store and re-checks who clicked, the call's status and its argument
// fingerprint before acting.
package slackapp
