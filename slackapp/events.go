package slackapp

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// ConversationKey is the opaque key of a conversation: one Slack thread.
func ConversationKey(team, channel, threadTS string) string {
	return team + "/" + channel + "/" + threadTS
}

// conversationTeam is the team of the conversation keys of a thread that
// a payload naming team is about: the bot's workspace. In a channel shared
// with another organisation (Slack Connect), Slack names the workspace of
// whoever wrote or clicked, so that one thread would be as many
// conversations as organisations write in it. On Enterprise Grid, where
// the bot may be installed for the whole organisation, the payload's team
// stays the key's, as it always was (and a thread shared with another
// organisation is keyed by each writer's workspace).
func (a *App) conversationTeam(team string) string {
	if team == "" || a.teamID != "" && a.enterpriseID == "" {
		return a.teamID
	}
	return team
}

// parseKey splits a ConversationKey.
func parseKey(key string) (team, channel, threadTS string, ok bool) {
	parts := strings.SplitN(key, "/", 3)
	if len(parts) != 3 {
		return "", "", "", false
	}
	return parts[0], parts[1], parts[2], true
}

// message is a person's message the bot should answer.
type message struct {
	team, channel, user, text, ts, threadTS string
	// files names the files the message carries, for the model, which
	// reads none of them (see fileLines).
	files []string
	// received is when its envelope was read, from which Slack's time for
	// the ack runs (zero: not known).
	received time.Time
}

func (m message) key() string {
	thread := m.threadTS
	if thread == "" {
		thread = m.ts
	}
	return ConversationKey(m.team, m.channel, thread)
}

// handledEvent reports whether the app acts on events of type typ.
func handledEvent(typ string) bool {
	switch typ {
	case "app_mention", "message", "app_home_opened", "member_left_channel", "subteam_members_changed", "subteam_updated":
		return true
	}
	return false
}

// onEventsAPI routes an event and acks it. It runs in the Socket Mode
// loop, so it must not touch the store itself: every store round trip here
// would delay the acks of all the envelopes behind it. A person's message
// is recorded in its conversation before its ack, on a goroutine of its own
// (see onMessage), so that once Slack stops delivering it, it is answered
// even if this process dies; a membership change is acked once the other
// replicas are told (see membershipChanged); everything else, the bot's
// own posts and other bots' among it, is acked at once. So is the edit of
// a person's message: Slack sends an app_mention again, with the same ts,
// a new event_id and an "edited" field, when a message mentioning the bot
// is edited, and an edit is no new message, whether or not the original
// is still remembered (see store.DedupeTTL); message_changed edits are
// dropped alike.
func (a *App) onEventsAPI(ctx context.Context, env *envelope, ack func()) {
	handed := false // to onMessage, which acks once the message is recorded
	defer func() {
		if !handed {
			ack()
		}
	}()
	ev := &env.Payload.Event
	eventID := env.Payload.EventID
	team := a.conversationTeam(env.Payload.TeamID)
	switch ev.Type {
	case "app_mention":
		if !a.byPerson(ev) || ev.Edited != nil {
			return
		}
		handed = true
		a.noteAuthor(ev)
		a.onMessage(ctx, message{team: team, channel: ev.Channel, user: ev.User, text: ev.Text, ts: ev.TS, threadTS: ev.ThreadTS, files: ev.fileNames(), received: env.received}, eventID, false, ack)
	case "message":
		if !a.byPerson(ev) || ev.Edited != nil || (ev.SubType != "" && ev.SubType != "thread_broadcast" && ev.SubType != "file_share") {
			return
		}
		m := message{team: team, channel: ev.Channel, user: ev.User, text: ev.Text, ts: ev.TS, threadTS: ev.ThreadTS, files: ev.fileNames(), received: env.received}
		followUp := false
		switch {
		case ev.ChannelType == "im":
			// Who the direct message is with, kept for who can see it
			// (the requester deciding their own call), without asking.
			a.audience.noteDM(ev.Channel, ev.User)
		case a.mentionsBot(ev.Text):
			// The app_mention of the same message arrives too; whichever
			// comes first is answered.
		case ev.ThreadTS != "":
			// Maybe a follow-up in a thread the bot is part of: it is
			// recorded only in a conversation the agent knows.
			followUp = true
		default:
			return
		}
		handed = true
		a.noteAuthor(ev)
		a.onMessage(ctx, m, eventID, followUp, ack)
	case "member_left_channel":
		// Who left no longer decides what only the channel's members
		// may: the members kept, here and by the other replicas, are
		// asked for again. Their Home tab, which may list such calls,
		// is published again (a call's change refreshes only the tabs
		// of who may see it then).
		handed = a.membershipChanged(ctx, membershipNotice{Left: ev.Channel}, ack)
		a.homes.later([]string{ev.User})
	case "subteam_members_changed":
		// The same for who was taken out of a user group.
		handed = a.membershipChanged(ctx, membershipNotice{Group: ev.SubteamID}, ack)
		a.homes.later(ev.RemovedUsers)
	case "subteam_updated":
		// And for the members of a group disabled (or changed
		// otherwise). Those of a group disabled, whom Slack lists no
		// more, have their tabs, which a call's change no longer finds
		// through the group, published again, as far as they are known
		// (the event's list, and the members kept before they are
		// dropped); a rename or a new description publishes none.
		var former []string
		if ev.Subteam.DateDelete != 0 {
			former = slices.Concat(a.groups.kept(ev.Subteam.ID), ev.Subteam.Users)
		}
		handed = a.membershipChanged(ctx, membershipNotice{Group: ev.Subteam.ID}, ack)
		a.homes.later(former)
	case "app_home_opened":
		if ev.Tab != "" && ev.Tab != "home" {
			return
		}
		user, hash := ev.User, ev.View.Hash
		a.spawn(ctx, "home", func(ctx context.Context) {
			if eventID != "" && !a.firstTime(ctx, "event:"+eventID) {
				a.m.duplicate()
				return
			}
			a.openedHome(ctx, user, hash)
		})
	}
}

// mentionsBot reports whether text mentions the bot: <@ID> or <@ID|name>,
// not the mention of a user whose id starts with the bot's.
func (a *App) mentionsBot(text string) bool {
	if a.botUserID == "" {
		return false
	}
	prefix := "<@" + a.botUserID
	for {
		i := strings.Index(text, prefix)
		if i < 0 {
			return false
		}
		text = text[i+len(prefix):]
		if strings.HasPrefix(text, ">") || strings.HasPrefix(text, "|") {
			return true
		}
	}
}

var mentionRE = regexp.MustCompile(`<@([UW][A-Z0-9]+)(\|[^>]*)?>`)

// cleanText strips the bot's mention from a message and decodes the three
// characters Slack escapes in message text (&, < and >), so that the model
// reads what the person typed: "a && b > out", not "a &amp;&amp; b &gt;
// out" (which it would copy into a tool's arguments). Mentions and links
// stay in Slack's form ("<@U…>", "<https://…|…>").
func (a *App) cleanText(text string) string {
	text = mentionRE.ReplaceAllStringFunc(text, func(m string) string {
		if id := mentionRE.FindStringSubmatch(m); a.botUserID != "" && id[1] == a.botUserID {
			return ""
		}
		return m
	})
	return strings.TrimSpace(slackUnescape.Replace(text))
}

// fileLines is a line per file a message carries, "[file: name]", as the
// thread's earlier messages name theirs (see earlierLine): the model is
// told a file came with the message, which it cannot read.
func fileLines(names []string) string {
	var b strings.Builder
	for _, n := range names {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString("[file: " + n + "]")
	}
	return b.String()
}

// slackUnescape decodes the escapes of Slack's message text; each is read
// once ("&amp;lt;" is what "&lt;" typed becomes).
var slackUnescape = strings.NewReplacer("&amp;", "&", "&lt;", "<", "&gt;", ">")

// onMessage records a message, acks its envelope and runs its turn on
// the conversation's queue. The record (agent.Accept) is one atomic store
// step that also de-duplicates: the same message arrives as app_mention and
// message, and any envelope may be redelivered. A followUp message is
// recorded only in a thread the bot is part of. A recorded message is
// answered whatever happens to this process: if its turn does not run here
// (the bot shuts down, the process dies), another replica, or this one
// after a restart, takes it over (see App.takeover). If the store cannot
// record a message to the bot, the envelope is acked all the same and the
// turn runs, so that the thread hears about the store's failure; a followUp
// message is left unacked instead, for Slack to deliver again, and so is a
// copy of a message that another copy is still recording (see record).
// This is the one place where an accepted message is handed to the agent.
//
// A message for a conversation with no work queued in this process, when a
// turn slot is free, makes this goroutine the conversation's queue server
// at once: the record also takes the conversation's lease and reads what
// the turn starts from (agent.AcceptTaking), and the turn runs here, then
// whatever was queued behind it.
func (a *App) onMessage(ctx context.Context, m message, eventID string, followUp bool, ack func()) {
	a.spawn(ctx, "message", func(ctx context.Context) {
		key := m.key()
		var q *queue
		var s *slot
		release := func() { s.release() }
		// Tried by the copy of the message that records it, just before.
		reserve := func() bool {
			q, s = a.reserve(key)
			return q != nil
		}
		// Given back when the record waits for the thread's mention (see
		// record): a wait holds no turn slot. What was queued behind
		// meanwhile is served on a goroutine of its own.
		unreserve := func() {
			if q == nil {
				return
			}
			release()
			held := q
			q = nil
			a.handOn(ctx, key, held)
		}
		// Once reserved, the slot is given back and the queue served
		// whatever happens after, a panic included.
		defer func() {
			if q != nil {
				release()
				a.serve(ctx, key, q) // what was queued behind this turn
			}
		}()
		req, in, taken := a.record(ctx, m, eventID, followUp, reserve, unreserve)
		if in == intakeRedeliver {
			return
		}
		ack()
		recorded := in == intakeRecorded
		switch {
		case in == intakeDrop:
		case q == nil:
			// A message acked without a record is recorded again at
			// once, here, while its turn waits on the conversation's
			// queue behind earlier work and then for a turn slot:
			// recorded, it is answered even if this process dies
			// before its turn. The turn waits for the outcome.
			var late chan struct{}
			if !recorded {
				late = make(chan struct{})
			}
			a.enqueueAsked(ctx, key, func(ctx context.Context) {
				if late != nil {
					<-late // req and recorded are set
				}
				// Shutdown may have cancelled the work before this
				// message's turn.
				err := ctx.Err()
				var s *slot
				if err == nil {
					s, err = a.turnSlot(ctx, key, true)
				}
				if err != nil {
					a.notStarted(ctx, m, req, recorded)
					return
				}
				defer s.release()
				a.runTurn(s.during(ctx), req)
			})
			if late != nil {
				defer close(late) // a panic too lets the turn go on
				req, recorded = a.recordLate(ctx, req)
			}
		case ctx.Err() != nil:
			a.ag.ReleaseTaken(ctx, taken)
			a.notStarted(ctx, m, req, recorded)
		case taken != nil:
			out, err := a.ag.RunTaken(ctx, req, taken)
			a.reportTurn(ctx, req.Conversation, out, err)
		default:
			a.runTurn(s.during(ctx), req)
		}
	})
}

// recordTimeout bounds recording a message before its ack (Slack wants
// the ack within 3 s).
const recordTimeout = 2 * time.Second

// copyWait bounds how long a copy of a message (Slack's redelivery of it,
// or the app_mention or message twin of one message) waits for the copy
// that records it: a little longer than that copy's own record, which
// ends at its deadline (recordTimeout), then gives back, for at most
// 250 ms, a lease its failed record may have taken; so the wait does not
// end first, and the copy follows the first one's outcome.
const copyWait = recordTimeout + 400*time.Millisecond

// ackLeeway is the part of Slack's time for an ack (ackWindow) that a
// record made after a wait for another copy leaves for the ack itself.
const ackLeeway = 200 * time.Millisecond

// minRecordTime is the least time worth a record: with less left of its
// envelope's time, a copy that waited is left unacked for Slack to deliver
// again.
const minRecordTime = 100 * time.Millisecond

// recordDeadline is when the record of a copy of m that waited for another
// copy must end, for m's envelope to be acked in time: recordTimeout from
// now, and no later than ackLeeway before Slack's time for the ack runs
// out.
func recordDeadline(m message, now time.Time) time.Time {
	deadline := now.Add(recordTimeout)
	if ack := m.received.Add(ackWindow - ackLeeway); !m.received.IsZero() && ack.Before(deadline) {
		deadline = ack
	}
	return deadline
}

// youngThread reports whether the message of timestamp ts (a thread's
// root, or a reply) was written within the last few seconds before now.
func youngThread(ts string, now time.Time) bool {
	sec, _, ok := parseTS(ts)
	if !ok {
		return false
	}
	age := now.Sub(time.Unix(sec, 0))
	return age > -time.Minute && age < 5*time.Second
}

// intake is what becomes of a message once record has tried to record it.
type intake int

const (
	// intakeRecorded: recorded; ack it and run its turn.
	intakeRecorded intake = iota
	// intakeUnrecorded: the store failed; ack it and run its turn all the
	// same, which reports the failure in the thread.
	intakeUnrecorded
	// intakeDrop: a duplicate, or a thread reply outside the bot's
	// conversations; ack it and do nothing.
	intakeDrop
	// intakeRedeliver: a thread reply the store could not record; leave it
	// unacked, so that Slack delivers it again.
	intakeRedeliver
)

// record records m in its conversation (agent.Accept). The copy of the
// message that records it first calls reserve: if that reports true, the
// record is agent.AcceptTaking, whose *agent.Taken it returns; before it
// waits to ask again (a reply in a young thread), it calls unreserve. It returns
// the request for its turn and what to do with the message. A thread reply
// that does not mention the bot (followUp) is recorded only in a
// conversation the bot is part of, which only the store knows: when the
// store fails, it is left unacked, and Slack's next delivery records it
// once the store is back.
//
// Other copies of the message that reach this process meanwhile wait for
// the first one (see recentMessages), at most copyWait. One whose wait ran
// out records the message itself, within what is left of its envelope's
// time (recordDeadline); when that is too little, or the store fails, it
// is left unacked for Slack to deliver again: the first copy, still at it,
// records the message or answers it with the one note of its failure.
func (a *App) record(ctx context.Context, m message, eventID string, followUp bool, reserve func() bool, unreserve func()) (agent.Request, intake, *agent.Taken) {
	text := a.cleanText(m.text)
	if lines := fileLines(m.files); lines != "" {
		text = strings.TrimSpace(text + "\n" + lines)
	}
	if text == "" {
		text = "(empty message)"
	}
	req := agent.Request{Conversation: m.key(), User: m.user, Channel: m.channel, Text: text, EventID: eventID, MsgID: m.channel + ":" + m.ts}
	rec, first := a.recent.begin(req.MsgID)
	waited := !first
	if !first {
		wctx, cancel := context.WithTimeout(ctx, copyWait)
		for !first {
			if rec.wait(wctx) {
				cancel()
				a.m.duplicate()
				return req, intakeDrop, nil
			}
			if wctx.Err() != nil {
				break // record it ourselves; the store de-duplicates
			}
			rec, first = a.recent.begin(req.MsgID)
		}
		cancel()
	}
	// The first copy's recording is finished however record returns: a
	// panic (which spawn logs) and the returns before the record finish it
	// as not recorded, so that the next copy tries for itself rather than
	// wait for it in vain. Later copies are dropped once this one
	// recorded the message, or answers it without a record (a mention the
	// store could not record: one turn tells the thread so, not one per
	// copy); they try for themselves when this one found the thread
	// unknown, or leaves a reply unacked for Slack to deliver again.
	handled := false
	if first {
		defer func() { a.recent.finish(req.MsgID, rec, handled) }()
	}
	now := time.Now()
	deadline := now.Add(recordTimeout)
	if waited {
		// The wait took part of the envelope's time: the record gets what
		// is left of it.
		deadline = recordDeadline(m, now)
		if deadline.Sub(now) < minRecordTime {
			a.log.Warn("no time left to record a message before its ack; leaving it unacked for Slack to deliver again", "conversation", req.Conversation)
			return req, intakeRedeliver, nil
		}
	}
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var r agent.Request
	var acc store.Acceptance
	var taken *agent.Taken
	var err error
	if reserve() {
		// The lease outlives the record's deadline: the turn runs under
		// ctx, and renews it.
		r, acc, taken, err = a.ag.AcceptTaking(rctx, req, followUp)
	} else {
		r, acc, err = a.ag.Accept(rctx, req, followUp)
	}
	for wait := 200 * time.Millisecond; err == nil && acc == store.Unknown && (youngThread(m.threadTS, time.Now()) || youngThread(m.ts, time.Now())); wait *= 2 {
		// A reply in a thread started a moment ago, or itself written a
		// moment ago (a mention in the middle of an older thread may
		// have come just before it): the mention may be being recorded
		// still (by another replica, or on another connection), and
		// its first turn reads the thread only up to it. Asked again,
		// within the record's deadline (an unknown thread recorded
		// nothing of the message). The turn slot reserved for the
		// message goes back while it waits.
		unreserve()
		select {
		case <-rctx.Done():
		case <-time.After(wait):
			r, acc, err = a.ag.Accept(rctx, req, followUp)
			continue
		}
		break
	}
	handled = err == nil && acc != store.Unknown || err != nil && !followUp
	switch {
	case errors.Is(err, store.ErrNotReplicated):
		// Recorded, but not yet on the store's replicas: asking the
		// thread to send it again would have it answered twice once
		// they have it. Slack delivers it again, and a delivery once
		// the replicas are back finds it recorded; where none comes,
		// the takeover of unanswered conversations answers it (its
		// lease, taken with it, lapses).
		a.log.Warn("recorded a message that the store's replicas have not confirmed; leaving it unacked for Slack to deliver again", "conversation", req.Conversation, "err", err)
		a.m.error("record")
		handled = false // the next copy, or delivery, asks for itself
		return req, intakeRedeliver, nil
	case err != nil && !first:
		// The first copy is still recording it: it records the message
		// or answers it, and tells the thread of a failure once.
		a.log.Warn("could not record a copy of a message another copy is recording; leaving it unacked for Slack to deliver again", "conversation", req.Conversation, "err", err)
		a.m.error("record")
		return req, intakeRedeliver, nil
	case err != nil && followUp:
		a.log.Warn("could not record a thread reply; leaving it unacked for Slack to deliver again", "conversation", req.Conversation, "err", err)
		a.m.error("record")
		return req, intakeRedeliver, nil
	case err != nil:
		a.log.Warn("could not record a message; answering it without a record", "conversation", req.Conversation, "err", err)
		a.m.error("record")
		return req, intakeUnrecorded, nil
	case acc == store.Duplicate:
		a.m.duplicate()
		return req, intakeDrop, nil
	case acc == store.Unknown:
		return req, intakeDrop, nil
	}
	return r, intakeRecorded, taken
}

// recordLate records a message acked without a record (its record failed
// or missed the ack's deadline) while its turn waits, which may take long
// when every slot is taken: once recorded, it is answered even if this
// process dies meanwhile. It reports whether the message is recorded; if
// not, the turn records it (agent.Run), and tells the thread if it cannot.
func (a *App) recordLate(ctx context.Context, req agent.Request) (agent.Request, bool) {
	rctx, cancel := context.WithTimeout(ctx, lateRecordTimeout)
	defer cancel()
	return a.recordAgain(rctx, req)
}

// recordAgain records the message of req, acked without a record, and
// reports whether it is recorded: by this record, or by the failed
// attempt after all, its answer lost (a duplicate; req.Seq is then zero),
// or on the store's primary, its replicas behind (store.ErrNotReplicated:
// it stands there, and the takeover answers it if its turn does not).
func (a *App) recordAgain(ctx context.Context, req agent.Request) (agent.Request, bool) {
	r, acc, err := a.ag.Accept(ctx, req, false)
	switch {
	case errors.Is(err, store.ErrNotReplicated):
		return req, true
	case err != nil:
		return req, false
	}
	return r, acc == store.Accepted || acc == store.Duplicate
}

// lateRecordTimeout bounds recordLate.
const lateRecordTimeout = 10 * time.Second

// lastRecordTimeout bounds the record notStarted tries before its note.
const lastRecordTimeout = time.Second

// notStarted answers a message whose turn had not started when the
// shutdown cut work short. The note must not fail with ctx, but ends at the
// shutdown deadline. A recorded message is answered after the restart (or
// by another replica); one the store could not record must be sent again.
func (a *App) notStarted(ctx context.Context, m message, req agent.Request, recorded bool) {
	ctx, cancel, ok := a.noteContext(ctx, 5*time.Second)
	defer cancel()
	if !ok {
		a.log.Warn("shutdown deadline passed; a message not started was not answered", "conversation", m.key(), "recorded", recorded)
		return
	}
	if !recorded {
		// Its records failed, or were cut short by the shutdown, and may
		// have been made all the same: asked once more, so that a
		// message the next process answers is not asked for again,
		// within a bound that leaves the note its time.
		rctx, cancel := context.WithTimeout(ctx, lastRecordTimeout)
		req, recorded = a.recordAgain(rctx, req)
		cancel()
	}
	if recorded {
		// An earlier turn of the conversation may have answered it with
		// its own message (a turn answers every message recorded before
		// it began): then there is nothing to promise. Nor is there when
		// the thread was promised an answer already.
		if done, err := a.ag.TakenIn(ctx, req); err == nil && done {
			return
		}
		if !a.firstRestartNote(req.Conversation) {
			return
		}
	}
	note := restartingText
	if recorded {
		note = restartingRecordedText
	}
	a.post(ctx, m.channel, threadOf(m), note)
}

// restartingText answers a message that could not be recorded and whose
// turn had not started when the bot began shutting down.
const restartingText = "I was restarting before I got to this; please send your message again."

// restartingRecordedText answers a recorded message whose turn had not
// started when the bot began shutting down: it is answered after the
// restart (or by another replica).
const restartingRecordedText = "I'm restarting; I'll answer this as soon as I'm back."

func threadOf(m message) string {
	if m.threadTS != "" {
		return m.threadTS
	}
	return m.ts
}

// runTurn runs one turn and reports failures in the thread.
func (a *App) runTurn(ctx context.Context, req agent.Request) {
	out, err := a.ag.Run(ctx, req)
	a.reportTurn(ctx, req.Conversation, out, err)
}

// takeOverTurn answers what a conversation left unanswered (see
// agent.TakeOver); with nothing to do it reports nothing.
func (a *App) takeOverTurn(ctx context.Context, key string) {
	out, err := a.ag.TakeOver(ctx, key)
	if err == nil && out.Status == agent.Idle {
		return
	}
	a.log.Info("took over a conversation", "conversation", key, "status", out.Status)
	a.reportTurn(ctx, key, out, err)
}

// reportTurn reports how a turn ended: failures, and a message that waits
// on a paused step whose calls are still pending.
func (a *App) reportTurn(ctx context.Context, key string, out agent.Outcome, err error) {
	_, channel, thread, _ := parseKey(key)
	a.m.turn(string(out.Status), err)
	a.statusSettled(ctx, key) // a reply here clears it
	if errors.Is(err, agent.ErrLeaseLost) {
		a.handOver(ctx, key, err)
		return
	}
	if err != nil {
		switch {
		case agent.Interrupted(err):
			a.log.Warn("turn cut short by the shutdown; it is answered after the restart", "conversation", key, "err", err)
		case errors.Is(err, agent.ErrLeaseTimeout):
			a.log.Warn("turn waited too long for a conversation held elsewhere; it is answered once the conversation is free", "conversation", key, "err", err)
		default:
			a.log.Error("turn failed", "conversation", key, "err", err)
		}
		a.postFailure(ctx, key, err)
		return
	}
	if out.Status == agent.Waiting {
		// A call may have been decided since the turn read it: a decision
		// does not wait for the conversation's turn. The note names the
		// calls still pending; with none, the resume that follows answers
		// the message, and the thread is told nothing.
		var pending []agent.PendingCall
		for _, p := range out.Pending {
			if a.stillPending(ctx, p.ID) {
				pending = append(pending, p)
			}
		}
		if len(pending) == 0 {
			return
		}
		waits := make([]Waiting, 0, len(pending))
		for _, p := range pending {
			waits = append(waits, Waiting{Tool: p.Tool, Approvers: p.Approvers, Human: p.Human})
		}
		a.post(ctx, channel, thread, WaitingText(waits, a.firstWaitingNote(ctx, pending), approvals.IsDM(channel)))
	}
}

// waitingNoteTTL is how long a paused run's waiting notes mention no one
// after the first that did.
const waitingNoteTTL = 24 * time.Hour

// firstWaitingNote reports whether the note answering a message in a thread
// paused on pending may mention the approvers: only the first of the run's
// notes does (per waitingNoteTTL, on any replica), so that messages in the
// thread cannot make the bot ping them again and again (reminders do, on
// their schedule). If the store cannot tell, no one is mentioned.
func (a *App) firstWaitingNote(ctx context.Context, pending []agent.PendingCall) bool {
	if len(pending) == 0 {
		return false
	}
	first, err := a.st.SeenEvent(ctx, "waiting:"+pending[0].RunID, waitingNoteTTL)
	if err != nil {
		a.log.Warn("mark a waiting note as sent", "run", pending[0].RunID, "err", err)
		return false
	}
	return first
}

// handOver follows a turn or resume that stopped because it lost the
// conversation's lease or the run's resume claim (agent.ErrLeaseLost). The
// thread is told nothing: the work is still listed for takeover, and
// another process may be carrying it on already. A TakeOver is queued
// here: it does nothing while another process holds the conversation,
// and otherwise carries the work on at once, without waiting for the
// takeover scan.
func (a *App) handOver(ctx context.Context, key string, err error) {
	a.log.Warn("lost the conversation to another process or to the clock; handing it over", "conversation", key, "err", err)
	a.takeOverLater(ctx, key)
}

// postFailure tells the conversation's thread that its turn or resume
// failed, or was cut short (failureText). The promise of an answer after
// the restart is made once (see firstRestartNote).
func (a *App) postFailure(ctx context.Context, key string, err error) {
	text := failureText(err, a.cfg.Redact)
	if text == restartingRecordedText && !a.firstRestartNote(key) {
		return
	}
	_, channel, thread, _ := parseKey(key)
	a.post(ctx, channel, thread, text)
}

// failureText tells people in the thread what went wrong, without internals
// they cannot act on. Work the store recorded (every error but
// agent.ErrNotRecorded and agent.ErrPauseNotSaved) is carried on by a
// takeover or the sweep, so the thread is not asked to send it again: that
// would answer it twice. The
// model server's own words, when shown, go through redact first (nil: as
// they are), before they are cut and escaped, which would hide a secret
// from it.
func failureText(err error, redact func(string) string) string {
	var me *agent.ModelError
	recorded := !errors.Is(err, agent.ErrNotRecorded)
	switch {
	case agent.Interrupted(err):
		return restartingRecordedText
	case errors.As(err, &me) && me.Misconfigured():
		return misconfiguredText(serverWords(me, redact))
	case errors.As(err, &me) && me.Kind == agent.ErrKindContentRefused:
		return contentRefusedText(serverWords(me, redact))
	case errors.As(err, &me):
		return fmt.Sprintf("I couldn't get an answer from the model (%s). Your message is kept; send another message to try again.", Escape(me.Kind.String()))
	case errors.Is(err, agent.ErrLeaseTimeout):
		return "This thread is busy with an earlier message; I'll answer this one as soon as it's done."
	case errors.Is(err, context.Canceled):
		// Not recorded (see agent.Interrupted).
		return "I was interrupted before finishing (the bot is restarting). Please send your message again."
	case errors.Is(err, agent.ErrPauseNotSaved):
		return "I couldn't save the approval request (my state store may be unavailable), so nothing ran. Please ask again in a minute."
	case recorded:
		return "Something went wrong while working on this (my state store may be unavailable). Nothing is lost; I'll try again shortly."
	default:
		return "Something went wrong and I couldn't save your message (my state store may be unavailable). Please send it again in a minute."
	}
}

// maxServerMessage bounds the model server's own words in a failure
// message.
const maxServerMessage = 300

// serverWords is me with its message, the server's own words, put through
// redact (unless nil).
func serverWords(me *agent.ModelError, redact func(string) string) *agent.ModelError {
	if redact == nil {
		return me
	}
	clean := *me
	clean.Message = redact(me.Message)
	return &clean
}

// misconfiguredText tells the thread that the model server refused the
// request for a reason only the bot's operator can fix (see
// agent.ModelError.Misconfigured): its HTTP status and what the server
// said (serverCode). Sending the message again cannot help, so the text
// does not suggest it.
func misconfiguredText(me *agent.ModelError) string {
	said := ""
	if code := serverCode(me); code != "" {
		said = ": " + code
	}
	how := "in its answer"
	if me.StatusCode != 0 {
		how = fmt.Sprintf("HTTP %d", me.StatusCode)
	}
	return fmt.Sprintf("The model server refused the request (%s%s). This is a configuration problem for the bot's operator (the API key, its quota, the model's name or its context size); sending another message won't help until it is fixed.", how, said)
}

// contentRefusedText tells the thread that the model provider refused the
// request for its content (see agent.ErrKindContentRefused), with what it
// said (serverCode): the messages it refused are left out of the
// conversation, so that the thread goes on.
func contentRefusedText(me *agent.ModelError) string {
	said := ""
	if code := serverCode(me); code != "" {
		said = " (" + code + ")"
	}
	return "The model provider refused this request because of its content" + said + ". Your message was left out of the conversation so that the thread can go on; rephrase it if you need an answer."
}

// serverCode is what the model server said, as a code span: cut short,
// its hidden characters written out (see revealHidden), so that none of
// them can reorder the bot's sentence around it, and escaped; "" when it
// said nothing.
func serverCode(me *agent.ModelError) string {
	msg := strings.TrimSpace(me.Message)
	if msg == "" {
		return ""
	}
	// Written out first, then cut: a server's message of invisible
	// characters would otherwise grow ten times past the cut.
	shown, _ := revealHidden(msg)
	shown, _ = truncate(shown, maxServerMessage)
	return inlineCode(shown)
}

func dedupe(s []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// slackbot is the user Slackbot posts as, with no bot_id: reminders and the
// custom responses members set up, which would make it the requester of
// calls a person asked for through it, out of four eyes' sight.
const slackbot = "USLACKBOT"

// byPerson reports whether ev was written by a person: not by a bot (this
// one, another app, Slackbot), and by someone.
func (a *App) byPerson(ev *eventFields) bool {
	return ev.BotID == "" && ev.User != "" && ev.User != a.botUserID && ev.User != slackbot
}
