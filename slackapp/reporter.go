package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/store"
)

// Reporter returns the agent.Reporter of a conversation: it shows the
// agent's progress in the conversation's thread. Any replica can build it
// from the key alone.
func (a *App) Reporter(conversation string) agent.Reporter {
	team, channel, thread, ok := parseKey(conversation)
	if !ok {
		a.log.Error("conversation key is not team/channel/thread", "conversation", conversation)
		return agent.NopReporter{}
	}
	return &threadReporter{app: a, conv: conversation, team: team, channel: channel, thread: thread}
}

// threadReporter reports one conversation in its Slack thread. Answers are
// streamed (chat.startStream and friends) and, where streaming is refused,
// posted whole.
type threadReporter struct {
	app                   *App
	conv                  string
	team, channel, thread string

	// posts are the cards Announce posted, by call id, for Paused.
	posts map[string]*cardPost

	mu        sync.Mutex
	streamTS  string
	streamErr bool
	buf       strings.Builder
	streamed  strings.Builder
	// written is all the text Delta was given since the stream was last
	// ended, shown or not: what the stream did not show of it is posted
	// when it ends (see endStep).
	written   strings.Builder
	lastFlush time.Time
	// sent is closed once the last chunk handed to the stream (see flush)
	// was sent; nil when none is on its way.
	sent chan struct{}
}

// streamFlush is how much text is buffered before it is appended to the
// stream.
const streamFlush = 120

func (r *threadReporter) Status(ctx context.Context, text string) {
	// A new model step: text streamed by the previous one (which went on to
	// call tools) stays as its own message.
	r.endStep(ctx)
	r.app.setStatus(ctx, r.conv, r.channel, r.thread, text)
}

func (r *threadReporter) Delta(ctx context.Context, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written.WriteString(text)
	if r.streamErr {
		return
	}
	r.buf.WriteString(text)
	if r.buf.Len() < streamFlush && time.Since(r.lastFlush) < time.Second {
		return
	}
	r.flush(ctx)
}

// flush hands buffered text to the stream, up to the last white space, so
// an escape never splits a token such as "@channel" (endStream sends the
// rest). The chunk is sent in the background, after the chunks handed over
// before it: the turn goes on meanwhile (it records a short answer while
// the stream starts), and waits for every chunk before it ends the stream
// (see awaitSent).
func (r *threadReporter) flush(ctx context.Context) {
	pending := r.buf.String()
	cut := strings.LastIndexAny(pending, " \n\t")
	if cut <= 0 {
		return
	}
	chunk := pending[:cut]
	r.buf.Reset()
	r.buf.WriteString(pending[cut:])
	r.lastFlush = time.Now()
	prev, done := r.sent, make(chan struct{})
	r.sent = done
	r.app.spawn(ctx, "stream", func(ctx context.Context) {
		defer close(done)
		if prev != nil {
			<-prev
		}
		r.send(ctx, chunk)
	})
}

// send starts the stream with chunk, or appends chunk to it; after a failed
// call it sends nothing more.
func (r *threadReporter) send(ctx context.Context, chunk string) {
	r.app.statusSettled(ctx, r.conv)
	r.mu.Lock()
	ts, failed := r.streamTS, r.streamErr
	r.mu.Unlock()
	if failed {
		return
	}
	safe := streamSafe(chunk)
	var err error
	if ts == "" {
		opts := []slack.MsgOption{slack.MsgOptionTS(r.thread), slack.MsgOptionMarkdownText(safe)}
		if !approvals.IsDM(r.channel) {
			who := r.recipient(ctx)
			opts = append(opts, slack.MsgOptionRecipientTeamID(r.app.teamOf(who, r.team)), slack.MsgOptionRecipientUserID(who))
		}
		_, ts, err = r.app.api.StartStreamContext(ctx, r.channel, opts...)
	} else {
		_, _, err = r.app.api.AppendStreamContext(ctx, r.channel, ts, slack.MsgOptionMarkdownText(safe))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.app.log.Debug("stream answer", "channel", r.channel, "err", err)
		r.streamErr = true
		if mayHaveSucceeded(err) {
			// Slack may have shown it: it is not posted again, as an
			// answer refused so is not (see postInsisting).
			r.streamed.WriteString(chunk)
		}
		return
	}
	r.streamTS = ts
	r.streamed.WriteString(chunk)
}

// awaitSent waits until every chunk handed to the stream was sent. Only
// the turn hands chunks over (Delta), and it is the turn that ends the
// stream, so none is handed over meanwhile.
func (r *threadReporter) awaitSent() {
	r.mu.Lock()
	sent := r.sent
	r.mu.Unlock()
	if sent != nil {
		<-sent
	}
}

// recipient is the user a stream in a channel is addressed to: the person
// whose turn it is.
func (r *threadReporter) recipient(ctx context.Context) string {
	return agent.RequesterOf(ctx)
}

// Answer ends the stream with the rest of the text, or posts what of the
// answer the stream did not show (see postUnshown). An answer with nothing
// to show once rendered is posted as "(no answer)", unless a stream showed
// part of it.
func (r *threadReporter) Answer(ctx context.Context, text string) {
	r.app.statusSettled(ctx, r.conv)
	shown, written := r.endStream(ctx)
	if written != text {
		// The answer is not what the step wrote (the bot's own, at its
		// step limit): the step's text is posted as endStep posts it,
		// and the answer, which no stream showed, whole after it.
		r.postUnshown(ctx, written, shown)
		shown = ""
	}
	if shown == "" && len(AnswerMessages(text)) == 0 {
		// Blank, or only markup that renders to nothing (an empty
		// heading): the thread still hears that the turn is over.
		text = "(no answer)"
	}
	r.postUnshown(ctx, text, shown)
}

// endStep ends the stream of a model step that no Answer follows (it went
// on to call tools, or it stopped), and posts what of the text the model
// wrote in it the stream did not show (see postUnshown): where Slack
// refused the stream, or it broke part way, that text would otherwise
// never reach the thread.
func (r *threadReporter) endStep(ctx context.Context) {
	shown, written := r.endStream(ctx)
	r.postUnshown(ctx, written, shown)
}

// postUnshown posts, split within Block Kit limits, what of text a stream
// that showed shown did not: nothing when it showed it all, only the rest
// when it broke part way (so that nothing is shown twice), and the whole
// text when it showed none of it. Text with nothing to show once rendered
// is not posted.
func (r *threadReporter) postUnshown(ctx context.Context, text, shown string) {
	if shown == text {
		return
	}
	if shown != "" && strings.HasPrefix(text, shown) {
		rest := text[len(shown):]
		if fence := openFence(shown); fence != "" {
			// The stream broke inside a fenced block: what is left of
			// it is code, up to the fence that closes it.
			text = fence + "\n" + strings.TrimPrefix(rest, "\n")
		} else {
			text = strings.TrimLeft(rest, " \n")
		}
	}
	msgs := AnswerMessages(text)
	if len(msgs) > 0 {
		// A reply clears the thread's status: one on its way must not
		// land after it.
		r.app.statusSettled(ctx, r.conv)
	}
	for _, blocks := range msgs {
		if !r.app.postInsisting(ctx, r.channel, r.thread, blocks, fallbackText(text)) {
			return
		}
	}
}

// laterWaits are the waits before each try of postInsisting past the
// first.
var laterWaits = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute}

// postInsisting posts a part of an answer, and, while Slack refuses it
// through the client's own retries (a server error, a rate limit), tries
// again after each of laterWaits, until ctx ends. The turn is recorded only
// once its answer is shown, so it waits meanwhile: a crash leaves the
// message to a takeover. A post that failed otherwise (a connection cut
// after sending it, ctx ending) is not made again: it may have been made.
// It reports whether the part was posted.
func (a *App) postInsisting(ctx context.Context, channel, thread string, blocks []slack.Block, fallback string) bool {
	_, err := a.chat(ctx, chatMessage{channel: channel, thread: thread, blocks: blocks, text: fallback})
	for _, wait := range laterWaits {
		if err == nil || !refusedBySlack(err) || mayHaveSucceeded(err) || ctx.Err() != nil {
			break
		}
		a.log.Warn("Slack refused an answer; posting it again shortly", "channel", channel, "in", wait, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(wait):
			_, err = a.chat(ctx, chatMessage{channel: channel, thread: thread, blocks: blocks, text: fallback})
		}
	}
	if err != nil {
		a.log.Error("post answer", "channel", channel, "err", err)
		a.m.error("slack_post")
	}
	return err == nil
}

// refusedBySlack reports whether err is Slack refusing a call it may
// take later (see retryLater).
func refusedBySlack(err error) bool {
	_, ok := retryLater(err)
	return ok
}

// passingErrors are the ok:false errors Slack gives for a failure of its
// own that passes (its documented internal_error, fatal_error,
// service_unavailable and request_timeout): the call may be made again.
var passingErrors = map[string]bool{"internal_error": true, "fatal_error": true, "service_unavailable": true, "request_timeout": true}

// rateLimitedCodes are the ok:false errors Slack gives for a rate limit it
// names in an answer of its own rather than with a 429 (chat.postMessage's
// rate_limited, and ratelimited): the call was not made, and may be made
// later.
var rateLimitedCodes = map[string]bool{"rate_limited": true, "ratelimited": true}

// mayHaveSucceeded reports whether err is one of the passing errors that
// Slack says may come after part of the call was made (internal_error,
// fatal_error): a post refused so is not made again, which could show it
// twice; an update may be.
func mayHaveSucceeded(err error) bool {
	e, ok := errors.AsType[slack.SlackErrorResponse](err)
	return ok && (e.Err == "internal_error" || e.Err == "fatal_error")
}

// serverRetryAfter is the wait before a call Slack refused with a server
// error, a passing one, or a rate limit its answer names with no
// Retry-After, is made again later (a variable for tests).
var serverRetryAfter = 5 * time.Second

// retryLater reports whether err is Slack refusing a call it may take
// later, once the client's retries are spent, and after how long: a rate
// limit (after its Retry-After, or one of rateLimitedCodes), a server
// error (5xx) or one of passingErrors.
func retryLater(err error) (time.Duration, bool) {
	if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
		if rl.RetryAfter <= 0 {
			return retryAfterDefault, true
		}
		return rl.RetryAfter, true
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok && sc.Code >= 500 {
		return serverRetryAfter, true
	}
	if e, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		switch {
		case passingErrors[e.Err]:
			return serverRetryAfter, true
		case rateLimitedCodes[e.Err]:
			return serverRetryAfter, true
		}
	}
	return 0, false
}

// Stopped ends the stream of a model step that failed or was cut short:
// what it showed stays, and is not shown again (no Answer follows); what
// the model wrote that it did not show is posted, as a stream would have
// shown it (see endStep). A turn cut by the shutdown still ends its
// stream, up to the shutdown deadline.
func (r *threadReporter) Stopped(ctx context.Context) {
	ctx, cancel, ok := r.app.noteContext(ctx, 5*time.Second)
	defer cancel()
	if ok {
		r.endStep(ctx)
	}
}

// fallbackText is the notification text of a model's answer or
// explanation: the text made safe as a stream's is (streamSafe), cut short.
func fallbackText(text string) string {
	return clip(streamSafe(text), 300)
}

// endStream finishes the open stream, if any, and returns the text it
// showed ("" when nothing was streamed) and the text Delta was given since
// the stream was last ended. The text still buffered goes with
// chat.stopStream itself, so a short answer takes two calls (start, stop).
// If that stop fails, the stream is stopped without it, and the text counts
// as not shown (Answer, or endStep, posts it). It waits for the chunks on
// their way first (awaitSent).
func (r *threadReporter) endStream(ctx context.Context) (shown, written string) {
	r.awaitSent()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.streamTS != "" {
		tail := r.buf.String()
		if r.streamErr {
			tail = ""
		}
		var rest []slack.MsgOption
		if tail != "" {
			r.app.statusSettled(ctx, r.conv)
			rest = append(rest, slack.MsgOptionMarkdownText(streamSafe(tail)))
		}
		_, _, err := r.app.api.StopStreamContext(ctx, r.channel, r.streamTS, rest...)
		switch {
		case err == nil:
			r.streamed.WriteString(tail)
		case tail != "":
			r.app.log.Debug("stop stream with its last text", "channel", r.channel, "err", err)
			if mayHaveSucceeded(err) {
				// Slack may have shown the text: it is not posted again.
				r.streamed.WriteString(tail)
			}
			_, _, err = r.app.api.StopStreamContext(ctx, r.channel, r.streamTS)
		}
		if err != nil {
			r.app.log.Debug("stop stream", "channel", r.channel, "err", err)
		}
	}
	shown, written = r.streamed.String(), r.written.String()
	r.streamTS, r.streamErr, r.sent = "", false, nil
	r.buf.Reset()
	r.streamed.Reset()
	r.written.Reset()
	return shown, written
}

// Announce posts one card per call in the thread, before the pause is
// saved, and returns where each went, to be saved with the call (see
// agent.Announcer). Paused (or Unsaved) finishes what it began.
func (r *threadReporter) Announce(ctx context.Context, calls []agent.PendingCall) map[string][]byte {
	r.app.statusSettled(ctx, r.conv)
	// The text of the step that made the calls comes before their cards.
	r.endStep(ctx)
	notes := make(map[string][]byte, len(calls))
	r.posts = make(map[string]*cardPost, len(calls))
	for _, c := range calls {
		p := r.app.postCard(ctx, r.channel, r.thread, c)
		r.posts[c.ID] = p
		notes[c.ID] = p.note()
	}
	return notes
}

// Paused posts the copies of the cards Announce posted for approvers who
// cannot see the conversation, tells the thread of a call no one named can
// decide (see tellUndecidable), and sets the expiry timer for them.
func (r *threadReporter) Paused(ctx context.Context, calls []agent.PendingCall) {
	for _, c := range calls {
		r.app.expiry.at(c.ExpiresAt)
		if len(c.RemindAt) > 0 {
			r.app.expiry.at(c.RemindAt[0])
		}
	}
	for _, c := range calls {
		if p := r.posts[c.ID]; p != nil {
			r.app.postCopies(ctx, p)
		}
		r.app.tellUndecidableLater(ctx, r.channel, r.thread, c)
		r.app.homes.changed(c.Call)
	}
	r.posts = nil
}

// Unsaved turns the cards Announce posted into a notice that the request
// could not be saved: nothing can decide it, and nothing runs.
func (r *threadReporter) Unsaved(ctx context.Context, calls []agent.PendingCall) {
	for _, c := range calls {
		p := r.posts[c.ID]
		if p == nil {
			continue
		}
		r.app.cards.done(p.mem)
		card := cardOf(c, nil)
		card.Status = StatusUnsaved
		for _, ref := range p.refs {
			blocks, text := r.app.cardIn(card, ref.Channel, c.Channel)
			if _, err := r.app.chat(ctx, chatMessage{channel: ref.Channel, ts: ref.TS, blocks: blocks, text: text}); err != nil {
				r.app.log.Error("mark a card whose request could not be saved", "call", c.ID, "channel", ref.Channel, "err", err)
			}
		}
		r.app.cards.forget(c.ID)
	}
	r.posts = nil
}

// Remind posts a reminder in the thread, mentioning the approvers the
// call still awaits (not those whose approval is counted, nor, under four
// eyes, its requesters: see stillAwaited), and in the places the card's
// copies went for those of them who cannot see the conversation. A
// reminder that would name no one (every approver the card names is
// counted, or a requester) is not sent. The posts are made in the
// background: the pass that sends reminders also expires calls, which a
// slow Slack must not hold up. Before each post the call is checked to be
// still pending, so a decision made meanwhile stops the rest.
func (r *threadReporter) Remind(ctx context.Context, c agent.PendingCall, n int) {
	r.app.spawn(ctx, "remind", func(ctx context.Context) {
		r.app.statusSettled(ctx, r.conv)
		// Read again: approvals counted since the pass read the call are
		// not awaited any more, and an edit may have changed its count
		// and deadline.
		c, pending := r.app.pendingNow(ctx, c)
		if !pending {
			return
		}
		if r.app.ag != nil && len(c.Approvers) > 0 {
			// Named are only those the policy as it is now lets
			// approve: who was taken out of its rule since the pause
			// would be refused.
			c.Approvers = r.app.ag.StillApprovers(ctx, c.Call, c.Approvers)
			if len(c.Approvers) == 0 {
				return
			}
		}
		card := cardOf(c, nil)
		if len(card.Approvers) > 0 && len(remindedApprovers(card)) == 0 {
			return
		}
		text := ReminderText(card, n)
		r.app.post(ctx, r.channel, r.thread, text)
		for _, target := range r.app.reminderTargets(ctx, r.channel, c.Call) {
			if !r.app.stillPending(ctx, c.ID) {
				return
			}
			r.app.post(ctx, target, "", text)
		}
	})
}

// stillPending reports whether the call is pending as stored (true when
// that cannot be read: a reminder too many beats one lost).
func (a *App) stillPending(ctx context.Context, callID string) bool {
	_, pending := a.pendingNow(ctx, agent.PendingCall{Call: agent.Call{ID: callID}})
	return pending
}

// pendingNow returns c as stored now, and whether it is still pending (c
// as it is, and true, when that cannot be read: see stillPending).
func (a *App) pendingNow(ctx context.Context, c agent.PendingCall) (agent.PendingCall, bool) {
	if a.ag == nil {
		return c, true
	}
	pc, err := a.ag.Call(ctx, c.ID)
	switch {
	case err == nil:
		return pc, pc.Status == agent.CallPending
	case errors.Is(err, approvals.ErrUnknownCall):
		return c, false
	}
	return c, true
}

var _ agent.Reminder = (*threadReporter)(nil)

// Updated updates every copy of the call's card in place, on the card's
// own queue: the decision or turn that reported it goes on without
// waiting for Slack, and the updates of one card are made in the order
// they were reported (decided before executed). Home tabs list pending
// calls only, so they are refreshed when a call leaves Pending or gets an
// approval, not when a decided call's tool has run (the decision's update
// refreshed them already).
func (r *threadReporter) Updated(ctx context.Context, u agent.CallUpdate) {
	if u.Call.Status == agent.CallPending {
		// An edit may have brought the deadline forward, and with it
		// the last reminder: the timer wakes for the earlier of the
		// deadline and the next reminder still to come (those before
		// now were sent, or are due at the pass the timer already
		// waits for).
		r.app.expiry.at(u.Call.ExpiresAt)
		now := time.Now()
		for _, t := range u.Call.RemindAt {
			if t.After(now) {
				r.app.expiry.at(t)
				break
			}
		}
	}
	r.app.updateLater(ctx, u)
	if u.Phase != agent.PhaseExecuted {
		r.app.homes.changed(u.Call)
	}
}

// cardUpdateTimeout bounds one card update: waiting for a card still being
// posted, then chat.update on each copy, with the retries of rate-limited
// calls. A rate limit whose Retry-After runs past it is not waited out:
// the copy's update is made again later (see copyUpdated). A variable for
// tests.
var cardUpdateTimeout = 30 * time.Second

// updateLater queues a card update on the card's queue; outside Run it is
// made at once.
func (a *App) updateLater(ctx context.Context, u agent.CallUpdate) {
	a.onCardQueue(ctx, u, func(ctx context.Context) { a.updateCard(ctx, u) })
}

// onCardQueue queues update, which renders u on the call's card, on the
// card's queue, bounded by cardUpdateTimeout; outside Run it is made at
// once.
func (a *App) onCardQueue(ctx context.Context, u agent.CallUpdate, render func(ctx context.Context)) {
	update := func(ctx context.Context) {
		ctx, cancel, ok := a.noteContext(ctx, cardUpdateTimeout)
		defer cancel()
		if !ok {
			a.log.Warn("shutdown deadline passed; card not updated", "call", u.Call.ID, "phase", u.Phase)
			return
		}
		render(ctx)
	}
	if !a.running.Load() {
		update(ctx)
		return
	}
	a.enqueue(ctx, cardQueue(u.Call.ID), update)
}

// cardQueue is the queue that serialises the updates of a call's card.
func cardQueue(callID string) string { return "card:" + callID }

// cardRef is where one copy of a card was posted.
type cardRef struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// cardRefs is the note kept with a call in the store (PutCallNote) of
// where its card copies are, for every replica and after a restart; it
// lives as long as the call, so nothing deletes it. It is written once the thread's
// card is out and where the copies go is known, again before each further
// copy is posted, and once all are out, so a crash loses at most the copy
// whose post had just returned. Posting is set, with the time posting
// began, while copies are still to come: a decision can arrive before the
// last copy is out, and its update waits for the list to be complete. A
// marker older than cardWait counts as finished, so a final write that
// failed does not hold updates back for good. Until the first write
// there is no record: an update elsewhere waits for one while the call is
// younger than cardWait.
type cardRefs struct {
	Posting      bool      `json:"posting,omitempty"`
	PostingSince time.Time `json:"posting_since,omitzero"`
	Refs         []cardRef `json:"refs"`
}

// posting reports whether the copies are still being posted at now.
func (r cardRefs) posting(now time.Time) bool {
	return r.Posting && now.Sub(r.PostingSince) < cardWait
}

// cardPost is a card being posted: its copy in the thread is out (or
// failed), its other copies are still to come.
type cardPost struct {
	callID string
	card   Card
	// channel and thread are the conversation's.
	channel, thread string
	blocks          []slack.Block // of the copy in the conversation
	text            string
	since           time.Time
	mem             *postedCard
	blind           []string  // the approvers the other copies are for
	unexpanded      []string  // user groups of approvers that could not be listed
	refs            []cardRef // the copies out so far
	saved           int       // of refs, the ones in the store (with the call, or by PutCallNote)
	announced       int       // of refs, the ones saved with the pause (the thread's copy)
}

// note is the note to save with the call (cardRefs) once the thread's copy
// is out (or failed): marked as posting while copies are still to come.
func (p *cardPost) note() []byte {
	p.saved = len(p.refs)
	p.announced = len(p.refs)
	return mustJSON(cardRefs{Posting: len(p.blind) > 0, PostingSince: p.since, Refs: p.refs})
}

// postCard posts the call's card in the thread and returns the post, whose
// copies postCopies posts.
func (a *App) postCard(ctx context.Context, channel, thread string, pc agent.PendingCall) *cardPost {
	if pc.NeedsAudience {
		// Those who can see the conversation decide it: their clicks
		// look that up, so it is looked up now, off the way.
		a.audience.warm(ctx, channel)
	}
	card := cardOf(pc, nil)
	p := &cardPost{callID: pc.ID, card: card, channel: channel, thread: thread, since: time.Now()}
	p.blocks, p.text = CardBlocks(card), CardText(card)
	// Updates of this card made by this process read where it is from
	// memory, once it is posted; other replicas read the store.
	p.mem = a.cards.posting(pc.ID)
	ts := a.postCardMessage(ctx, channel, thread, pc.ID, p)
	if ts != "" {
		p.added(a, channel, ts)
	} else if ctx.Err() == nil {
		// The thread is not left without a word of the pause. (A turn
		// that was stopped, its lease lost or cut by a shutdown, saves
		// no pause, so there is nothing to decide elsewhere: after a
		// lost lease the turn that takes the conversation over posts
		// its own card, after a shutdown the thread is told of the
		// restart.)
		a.post(ctx, channel, thread, CardNotPostedText(pc.Tool, pc.Approvers, pc.Human))
	}
	// Who needs a copy is known before the pause is saved (from the
	// audience cache, which asks Slack at most once a minute per channel),
	// so the note saved with the call says whether copies are to come.
	// Only approvers who may decide the call without seeing the
	// conversation get copies: none when its deciders must be in it.
	p.blind, p.unexpanded = a.blindApproversNoting(ctx, channel, pc.Requester, namedDeciders(pc.Call))
	return p
}

// cardPostTries bounds the posts of a card after the first that Slack
// refused in its answer without making it (a rate limit, a passing
// failure), each after the wait it asks for, at most cardPostMaxWait.
const (
	cardPostTries   = 2
	cardPostMaxWait = 30 * time.Second
)

// postCardMessage posts the message of card p and returns its ts, "" if
// it is not posted. A post Slack may have made though its answer says
// otherwise (internal_error, fatal_error, a gateway's server error, an
// answer lost or late) is looked for in the thread, never posted again,
// so that no second card keeps its buttons; one Slack refused without
// making it in its answer (rate_limited, service_unavailable) is posted
// again after a wait, twice at most.
func (a *App) postCardMessage(ctx context.Context, channel, thread, callID string, p *cardPost) string {
	msg := chatMessage{channel: channel, thread: thread, blocks: p.blocks, text: p.text}
	post := func() (string, error) { return a.chat(withoutServerRetries(ctx), msg) }
	ts, err := post()
	for tries := 0; err != nil; tries++ {
		a.log.Error("post message", "channel", channel, "err", err)
		a.m.error("slack_post")
		if ctx.Err() != nil {
			return ""
		}
		if postMayHaveBeenMade(err) {
			// Slack may have posted it: it is looked for in the thread,
			// so that it is updated in place, and not said to be missing.
			return a.postedCard(ctx, channel, thread, callID, p.since)
		}
		// Only a refusal in Slack's answer (rate_limited, a passing
		// failure) is posted again here: a 429 comes back once the
		// client has waited out its own retries already, which the turn
		// holding the conversation would wait out again.
		_, inAnswer := errors.AsType[slack.SlackErrorResponse](err)
		wait, later := retryLater(err)
		if !later || !inAnswer || tries >= cardPostTries || wait > cardPostMaxWait {
			return ""
		}
		a.log.Warn("Slack refused a card; posting it again shortly", "channel", channel, "in", wait, "err", err)
		if ctxtime.Sleep(ctx, wait) != nil {
			return ""
		}
		ts, err = post()
	}
	return ts
}

// postMayHaveBeenMade reports whether a post that failed with err may
// have been made all the same: Slack's internal_error or fatal_error (see
// mayHaveSucceeded), a server error (a gateway's 502 or 504 may come
// after Slack made it), or an answer that never came (a time-out, a
// connection cut after the request was sent).
func postMayHaveBeenMade(err error) bool {
	if mayHaveSucceeded(err) {
		return true
	}
	if sc, ok := errors.AsType[slack.StatusCodeError](err); ok {
		return sc.Code >= http.StatusInternalServerError
	}
	if _, cut := errors.AsType[*answerLostError](err); cut {
		return true
	}
	_, lost := errors.AsType[*url.Error](err)
	return lost
}

// postedCard returns the ts of the card of call callID that the bot posted
// in thread since since, read with conversations.replies: one whose post
// Slack answered with an error that may come after the post was made (see
// mayHaveSucceeded). "" if there is none, or the thread cannot be read.
func (a *App) postedCard(ctx context.Context, channel, thread, callID string, since time.Time) string {
	msgs, _, _, err := a.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
		ChannelID: channel, Timestamp: thread, Inclusive: true, Limit: repliesPage,
		Oldest: strconv.FormatFloat(float64(since.Add(-time.Minute).UnixMicro())/1e6, 'f', 6, 64),
	})
	if err != nil {
		a.log.Warn("look for a card Slack may have posted", "channel", channel, "call", callID, "err", err)
		return ""
	}
	// Its buttons carry the call's token (see token).
	mark := []byte(`"` + callID + "~")
	for _, m := range slices.Backward(msgs) {
		if m.BotID == "" || a.botID != "" && m.BotID != a.botID {
			continue // not the bot's
		}
		if b, err := json.Marshal(m.Blocks); err == nil && bytes.Contains(b, mark) {
			return m.Timestamp
		}
	}
	return ""
}

func (p *cardPost) added(a *App, channel, ts string) {
	p.refs = append(p.refs, cardRef{Channel: channel, TS: ts})
	a.cards.add(p.mem, cardRef{Channel: channel, TS: ts})
}

// postCopies posts the copies of a card posted by postCard (see
// sendCopies), then brings them up to date with the call (see
// catchUpCopies).
func (a *App) postCopies(ctx context.Context, p *cardPost) {
	a.sendCopies(ctx, p)
	a.catchUpCopies(ctx, p)
}

// sendCopies posts the copies of a card posted by postCard, and saves
// where they are: before each further copy is posted, and once all are
// out, so a crash loses at most the copy whose post had just returned.
func (a *App) sendCopies(ctx context.Context, p *cardPost) {
	defer a.cards.done(p.mem)
	save := func(ctx context.Context, r cardRefs) error {
		err := a.st.PutCallNote(ctx, p.callID, mustJSON(r))
		if err == nil {
			p.saved = len(r.Refs)
		}
		return err
	}
	var unreached []copyPlace
	for _, g := range p.unexpanded {
		// Its members could not be listed, so none of them who cannot see
		// the conversation gets a copy.
		unreached = append(unreached, copyPlace{user: g})
	}
	for _, place := range a.copyPlacesFor(ctx, p.blind) {
		target := place.channel
		if target == "" {
			unreached = append(unreached, place)
			continue
		}
		if len(p.refs) > p.saved {
			if err := save(ctx, cardRefs{Posting: true, PostingSince: p.since, Refs: p.refs}); err != nil {
				a.log.Warn("remember where a card copy is", "call", p.callID, "err", err)
			}
		}
		blocks, text := a.cardIn(p.card, target, p.channel)
		if ts := a.postBlocks(ctx, target, "", blocks, text); ts != "" {
			p.added(a, target, ts)
		} else {
			unreached = append(unreached, place)
		}
	}
	if len(unreached) > 0 {
		// The thread hears of approvers the card could not reach, who
		// would otherwise wait on a card they never get.
		a.post(ctx, p.channel, p.thread, CopiesNotPostedText(p.card.Tool, unreached))
	}
	if len(p.refs) == 0 {
		a.log.Error("no copy of the approval card could be posted; it is listed by /approvals pending and in App Home", "call", p.callID)
	}
	if len(p.blind) == 0 {
		// Saved with the call, with no marker: nothing more to write.
		return
	}
	// The final write clears the marker. It is made even when ctx ended
	// meanwhile, and tried twice.
	var err error
	for range 2 {
		wctx, cancel, ok := a.noteContext(ctx, 5*time.Second)
		if !ok {
			err = errors.New("the shutdown deadline has passed")
			break
		}
		err = save(wctx, cardRefs{Refs: p.refs})
		cancel()
		if err == nil {
			return
		}
	}
	a.log.Error("remember where the card is; replicas other than this one update the copies recorded so far", "call", p.callID, "err", err)
}

// catchUpCopies renders the call as stored on the copies sendCopies
// posted, once they are all out and recorded, when it is no longer what
// they show: decided, expired, cancelled, or with other approvals or
// arguments. An update made meanwhile on another replica waited for them
// at most cardWait and then updated only the copies recorded so far
// (this process's own updates wait for every copy: see cardLocations);
// the copies posted after that show the call as it paused, and nothing
// else would update them. An update that read where the copies are after
// the final record found them all, and one that read before it was made
// after the decision it renders, so the call read here, after the final
// record, shows that decision. The copy in the conversation was recorded
// with the pause, so every update found it; it is left as they made it.
func (a *App) catchUpCopies(ctx context.Context, p *cardPost) {
	copies := slices.Clone(p.refs[p.announced:])
	if len(copies) == 0 || a.ag == nil {
		return
	}
	rctx, cancel, ok := a.noteContext(ctx, 5*time.Second)
	defer cancel()
	if !ok {
		return
	}
	u, err := a.ag.News(rctx, p.callID)
	if errors.Is(err, approvals.ErrUnknownCall) {
		return // the call is gone, and its card with it
	}
	if err != nil {
		a.log.Warn("read the call once its card's copies are out; they show it as it paused", "call", p.callID, "err", err)
		return
	}
	c := u.Call
	if c.Status == agent.CallPending && token(c.ID, c.Fingerprint) == p.card.CallID && slices.Equal(c.Approvals, p.card.Approvals) {
		return // as the copies show it
	}
	a.onCardQueue(ctx, u, func(ctx context.Context) {
		if u.Phase == agent.PhaseCounted && a.movedOn(ctx, c) {
			return
		}
		if !a.cards.advance(c.ID, phaseRank(u.Phase)) {
			return // this process rendered later news on them already
		}
		a.cardRenderer(ctx, c, a.storedCard(ctx, u), phaseRank(u.Phase))(copies)
		a.cardRendered(u)
		a.overtaken(ctx, u, copies)
	})
}

// cardWait bounds how long an update waits for a card still being posted.
const cardWait = 5 * time.Second

// cardLocations returns where the call's card copies are, waiting while
// they are still being posted (at most cardWait): for a card this process
// posts, until it signals that it is done, and then from memory; for one
// another replica posts (rare: the card is visible once its first copy is
// out), by re-reading the record now and then while it is marked as
// being posted, or is missing for a call younger than cardWait. When this
// process is still posting copies after cardWait, late is set: it waits
// until they are all out (or ctx ends) and returns those past the first
// skip.
func (a *App) cardLocations(ctx context.Context, c agent.Call) (refs []cardRef, late func(ctx context.Context, skip int) []cardRef, err error) {
	if mem, ok := a.cards.lookup(c.ID); ok {
		t := time.NewTimer(cardWait)
		defer t.Stop()
		select {
		case <-mem.posted:
		case <-t.C:
			late = func(ctx context.Context, skip int) []cardRef {
				select {
				case <-mem.posted:
				case <-ctx.Done():
				}
				return a.cards.refsOf(mem)[skip:]
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		return a.cards.refsOf(mem), late, nil
	}
	deadline := time.Now().Add(cardWait)
	for {
		note, err := a.st.CallNote(ctx, c.ID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, nil // the call is gone, and its card with it
		}
		if err != nil {
			return nil, nil, err
		}
		var refs cardRefs
		if note != nil {
			if err := json.Unmarshal(note, &refs); err != nil {
				return nil, nil, fmt.Errorf("decode card locations: %w", err)
			}
		}
		now := time.Now()
		unwritten := note == nil && now.Sub(c.CreatedAt) < cardWait
		if !(refs.posting(now) || unwritten) || now.After(deadline) {
			return refs.Refs, nil, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reminderTargets lists where a reminder of c goes for the named approvers
// (user groups expanded) who cannot see the conversation, in channel, and
// whom c still awaits (see stillAwaited): APPROVALS_CHANNEL if set, for
// those in it, and a DM to each of the others; none when none is left.
func (a *App) reminderTargets(ctx context.Context, channel string, c agent.Call) []string {
	blind := slices.DeleteFunc(a.blindApprovers(ctx, channel, c.Requester, a.deciders(ctx, c)), func(u string) bool {
		return !stillAwaited(u, c.Approvals, c.FourEyes, c.Requester, c.Requesters)
	})
	return a.copyPlaces(ctx, blind)
}

// blindApprovers lists the named approvers (user groups expanded) who
// cannot see the channel, other than the requester and the bot.
func (a *App) blindApprovers(ctx context.Context, channel, requester string, approvers []string) []string {
	blind, _ := a.blindApproversNoting(ctx, channel, requester, approvers)
	return blind
}

// blindApproversNoting is blindApprovers, and the user groups among
// approvers whose members could not be listed (left out of blind).
func (a *App) blindApproversNoting(ctx context.Context, channel, requester string, approvers []string) (blind, unexpanded []string) {
	if len(approvers) == 0 {
		return nil, nil
	}
	var members map[string]bool
	if !approvals.IsDM(channel) {
		if public, err := a.audience.isPublic(ctx, channel); err == nil && public {
			return a.guestsOutside(ctx, channel, requester, approvers), nil
		}
		var err error
		if members, err = a.audience.channelMembers(ctx, channel); err != nil {
			a.log.Warn("list channel members; every approver gets a copy", "channel", channel, "err", err)
		}
	}
	users, unexpanded := a.expandNoting(ctx, approvers)
	for _, id := range users {
		if id != requester && !members[id] && id != a.botUserID {
			blind = append(blind, id)
		}
	}
	return blind, unexpanded
}

// guestsOutside lists the approvers named one by one who cannot see public
// channel, other than the requester and the bot: guests, and people of
// another organisation, who are not in it. Everyone else of the workspace
// can see it, user groups' members too (a guest cannot be in a user
// group). One who cannot be looked up is listed.
func (a *App) guestsOutside(ctx context.Context, channel, requester string, approvers []string) []string {
	var blind []string
	for _, id := range approvers {
		if approvals.IsGroup(id) || id == requester || id == a.botUserID {
			continue
		}
		sees, err := a.audience.seesPublic(ctx, channel, id, a.ofOurs)
		if err != nil {
			a.log.Warn("look up an approver of a call in a public channel; they get a copy", "channel", channel, "user", id, "err", err)
		}
		if !sees {
			blind = append(blind, id)
		}
	}
	return blind
}

// copyPlaces lists where the copies for approvers who cannot see the
// conversation go: APPROVALS_CHANNEL if set, for those in it, and a DM to
// each of the others.
func (a *App) copyPlaces(ctx context.Context, blind []string) []string {
	var out []string
	for _, p := range a.copyPlacesFor(ctx, blind) {
		if p.channel != "" {
			out = append(out, p.channel)
		}
	}
	return out
}

// copyPlace is where a copy of a card goes: channel, for user (empty for
// APPROVALS_CHANNEL); channel is empty when the DM could not be opened.
type copyPlace struct{ channel, user string }

// copyPlacesFor is copyPlaces, naming whom each copy is for.
func (a *App) copyPlacesFor(ctx context.Context, blind []string) []copyPlace {
	if len(blind) == 0 {
		return nil
	}
	var out []copyPlace
	if ch := a.cfg.ApprovalsChannel; ch != "" {
		members, err := a.audience.channelMembers(ctx, ch)
		if err != nil {
			a.log.Warn("list the members of APPROVALS_CHANNEL; the copy goes there for every approver", "channel", ch, "err", err)
			return []copyPlace{{channel: ch}}
		}
		// Those who are not in it would never see the copy there: they
		// get theirs by DM.
		var outside []string
		for _, u := range blind {
			if !members[u] {
				outside = append(outside, u)
			}
		}
		if len(outside) < len(blind) {
			out = append(out, copyPlace{channel: ch})
		}
		blind = outside
	}
	for _, u := range blind {
		ch, _, _, err := a.api.OpenConversationContext(ctx, &slack.OpenConversationParameters{Users: []string{u}, ReturnIM: true})
		if err != nil {
			a.log.Warn("open DM to approver", "user", u, "err", err)
			out = append(out, copyPlace{user: u})
			continue
		}
		a.audience.noteDM(ch.ID, u) // for the copy's updates (see dmMaySee)
		out = append(out, copyPlace{channel: ch.ID, user: u})
	}
	return out
}

// expand turns approver ids into user ids, expanding user groups.
func (a *App) expand(ctx context.Context, approvers []string) []string {
	users, _ := a.expandNoting(ctx, approvers)
	return users
}

// expandNoting is expand, and the user groups whose members could not be
// listed (left out).
func (a *App) expandNoting(ctx context.Context, approvers []string) (users, failed []string) {
	for _, id := range approvers {
		if strings.HasPrefix(id, "S") {
			m, err := a.groups.Members(ctx, id)
			if err != nil {
				a.log.Warn("expand user group", "group", id, "err", err)
				failed = append(failed, id)
				continue
			}
			users = append(users, m...)
			continue
		}
		users = append(users, id)
	}
	return dedupe(users), failed
}

// updateCard renders the call's current state on every copy of its card.
func (a *App) updateCard(ctx context.Context, u agent.CallUpdate) {
	if u.Phase == agent.PhaseCounted && a.movedOn(ctx, u.Call) {
		return
	}
	refs, late, err := a.cardLocations(ctx, u.Call)
	if err != nil {
		a.log.Error("find the card to update", "call", u.Call.ID, "err", err)
		return
	}
	if !a.cards.advance(u.Call.ID, phaseRank(u.Phase)) {
		return // older news than the card shows
	}
	update := a.cardRenderer(ctx, u.Call, a.updatedCard(ctx, u), phaseRank(u.Phase))
	update(refs)
	if late != nil {
		// Copies this process was still posting: updated once they are
		// out, before any later update of the card (which waits on the
		// card's queue), so none keeps buttons of a decided call.
		more := late(ctx, len(refs))
		if ctx.Err() == nil {
			update(more)
			refs = append(refs, more...)
		}
		// Otherwise the update's time is up: those still being posted
		// are rendered as the call is stored once they are out (see
		// catchUpCopies), not failed here one by one.
	}
	a.cardRendered(u)
	if u.Phase == agent.PhaseCounted || u.Phase == agent.PhaseDecided && u.StepPending {
		a.overtaken(ctx, u, refs)
	}
}

// overtakenRenders bounds how many times overtaken renders a card again.
const overtakenRenders = 3

// overtaken renders the card of u's call, whose news u this process just
// rendered on refs, again as the store has the call now when the store
// has later news: another process may have decided it, or run it, and
// rendered that first, which this render, slow to reach Slack, then
// covered (Slack has no conditional update, and the processes order only
// their own updates of a card): a count's buttons back on a decided call,
// "runs once the other calls of this step are decided" over the tool's
// output. Each render is checked so in turn, until what the card shows is
// what is stored (at most overtakenRenders times). It is called after a
// count, and after a decision whose step's resume may be another
// process's (other calls of the step were pending); a final render needs
// none.
func (a *App) overtaken(ctx context.Context, u agent.CallUpdate, refs []cardRef) {
	if a.ag == nil || len(refs) == 0 || phaseRank(u.Phase) == finalRank {
		return
	}
	for range overtakenRenders {
		news, err := a.ag.News(ctx, u.Call.ID)
		if err != nil {
			if !errors.Is(err, approvals.ErrUnknownCall) {
				a.log.Warn("read the call after an update of its card; the card may show older news", "call", u.Call.ID, "err", err)
			}
			return
		}
		rank := phaseRank(news.Phase)
		if rank < phaseRank(u.Phase) || rank == phaseRank(u.Phase) && !differs(news.Call, u.Call) {
			return
		}
		if news.Unstarted && u.Phase != agent.PhaseCounted {
			// Its resume's update tells what became of it: it follows,
			// or it was made and says why the call did not run, which
			// the store could not keep. A count's buttons over a call
			// decided since are rendered away, though: its step may
			// wait on other calls for hours before its resume tells.
			return
		}
		u = news
		a.cards.advance(u.Call.ID, rank)
		a.cardRenderer(ctx, u.Call, a.storedCard(ctx, u), rank)(refs)
		a.cardRendered(u)
		if rank == finalRank {
			return
		}
	}
}

// storedCard renders u, the news about a call as stored (see
// agent.Agent.News), as a Card: one decided whose tool has not reported
// is shown without an outcome, since "running…" may be past by now.
func (a *App) storedCard(ctx context.Context, u agent.CallUpdate) Card {
	card := a.updatedCard(ctx, u)
	if u.Phase == agent.PhaseDecided {
		card.Outcome = ""
	}
	return card
}

// updatedCard renders u, the news about a call, as a Card. An Always
// allow's card says so when its standing rule is not in force (one read of
// the rules; a failed read leaves the card as the decision says).
func (a *App) updatedCard(ctx context.Context, u agent.CallUpdate) Card {
	pc := agent.PendingCall{Call: u.Call}
	if a.ag != nil {
		if t, ok := a.ag.Tools().Lookup(u.Call.Tool); ok {
			pc.Human = t.Human
		}
	}
	card := cardOf(pc, &u)
	if d := u.Call.Decision; d != nil && d.Kind == approvals.Remember && a.policy != nil {
		in, err := a.policy.StandingInForce(ctx, agent.StandingRuleID(u.Call.ID), u.Call.Tool, u.Call.Channel)
		if err != nil {
			a.log.Warn("read whether an Always allow's rule is in force", "call", u.Call.ID, "err", err)
		}
		card.NoRule = err == nil && !in
	}
	return card
}

// cardRenderer returns a function that renders card, of call c in the
// phase of rank (see phaseRank), on the copies it is given, each as its
// place shows it (see cardAt).
func (a *App) cardRenderer(ctx context.Context, c agent.Call, card Card, rank uint8) func(refs []cardRef) {
	type rendered struct {
		blocks []slack.Block
		text   string
	}
	byPlace := map[string]rendered{} // by the kind of place (see cardIn)
	return func(refs []cardRef) {
		for _, ref := range refs {
			place := placeOf(ref.Channel, c.Channel)
			if place == "dm" && !a.dmMaySee(ctx, ref.Channel, c) {
				// Its reader no longer may (taken out of the rule by an
				// edit, or out of a group): what the call became is
				// sealed, as on a copy in a channel.
				place = "approvals"
			}
			r, ok := byPlace[place]
			if !ok {
				r.blocks, r.text = a.cardAt(card, place, c.Channel)
				byPlace[place] = r
			}
			_, err := a.chat(ctx, chatMessage{channel: ref.Channel, ts: ref.TS, blocks: r.blocks, text: r.text})
			a.copyUpdated(ctx, ref, cardRetry{call: c, rank: rank, blocks: r.blocks, text: r.text}, err)
		}
	}
}

// cardRetry is an update of a copy of a card that Slack refused with a
// rate limit, to be made again once it allows (see cardRetryLater).
type cardRetry struct {
	// call is the call as blocks and text show it, in the phase of rank.
	call   agent.Call
	rank   uint8
	blocks []slack.Block
	text   string
	// since is when Slack first refused an update of the copy, due when
	// it allows one again.
	since, due time.Time
}

// cardRetryFor bounds how long an update of a card's copy that Slack keeps
// keeps refusing for now (see retryLater) is made again.
const cardRetryFor = 3 * time.Hour

// copyUpdated follows up the update of a card's copy at ref with r: made
// (err nil), it is the copy's latest news, and an older update waiting to
// be made again is dropped. Refused for now (a rate limit, a server error
// or a passing one, past the retries the update's budget allowed: see
// webClient and retryLater), it is made again later, on the card's queue, behind the updates queued meanwhile
// (see cardRetryLater); an update of the copy refused meanwhile takes its
// place. Failed otherwise, it is logged; an update waiting for the copy
// makes this one instead.
func (a *App) copyUpdated(ctx context.Context, ref cardRef, r cardRetry, err error) {
	c := r.call
	if err == nil {
		a.cards.settled(c.ID, ref)
		return
	}
	if after, ok := retryLater(err); ok && a.running.Load() && ctx.Value(notesKey{}) != nil {
		now := time.Now()
		r.since, r.due = now, now.Add(after+rand.N(retryAfterJitter))
		a.log.Warn("Slack refused a card update for now; making it again later", "call", c.ID, "channel", ref.Channel, "in", after, "err", err)
		if a.cards.refused(c.ID, ref, r) {
			a.cardRetryLater(ctx, c.ID, ref)
		}
		return
	}
	a.cards.failed(c.ID, ref, r)
	a.log.Error("update card", "call", c.ID, "channel", ref.Channel, "err", err)
	a.m.error("slack_update")
}

// cardRetryLater makes the update waiting for a card's copy (see
// cardMemory.refused) once it is due, on the card's queue, so that the
// updates of one card stay in order, until it is made, a later update of
// the copy is, or Slack has refused it for cardRetryFor. It must be called
// where spawn may be, in Run (ctx carries the context of notes).
//
// The wait is no work the shutdown waits for (it is not counted as
// spawn's are), but Run waits for its goroutine, which ends at the
// shutdown deadline at the latest: an update due before then is made, as
// card updates are during the shutdown; one due later is logged and lost.
func (a *App) cardRetryLater(ctx context.Context, callID string, ref cardRef) {
	notes := ctx.Value(notesKey{}).(context.Context)
	// The card's queue may end (its jobs have their own deadlines); the
	// context keeps only its values.
	qctx := context.WithoutCancel(ctx)
	a.wg.Go(func() {
		defer func() {
			if r := recover(); r != nil {
				a.cards.settled(callID, ref)
				a.log.Error("panic", "in", "card retry", "panic", r)
				a.m.error("panic")
			}
		}()
		for {
			r, ok := a.cards.waiting(callID, ref)
			if !ok {
				return
			}
			if r.due.Sub(r.since) > cardRetryFor {
				a.cards.settled(callID, ref)
				a.log.Error("Slack kept refusing a card update with rate limits; giving up", "call", callID, "channel", ref.Channel, "since", r.since)
				a.m.error("slack_update")
				return
			}
			if wait := time.Until(r.due); wait > 0 && ctxtime.Sleep(notes, wait) == nil {
				continue
			}
			if notes.Err() != nil {
				a.cards.settled(callID, ref)
				a.log.Warn("shutdown deadline passed; a card update Slack rate-limited was not made", "call", callID, "channel", ref.Channel)
				return
			}
			done := make(chan struct{})
			a.enqueue(qctx, cardQueue(callID), func(ctx context.Context) {
				defer close(done)
				a.retryCopy(ctx, callID, ref)
			})
			select {
			case <-done:
			case <-notes.Done():
			}
		}
	})
}

// retryCopy makes the update waiting for a card's copy once it is due, on
// the card's queue, unless the call as stored has moved on from what it
// shows: the update of that change renders it (here, behind this one, or
// on another replica).
func (a *App) retryCopy(qctx context.Context, callID string, ref cardRef) {
	ctx, cancel, ok := a.noteContext(qctx, cardUpdateTimeout)
	defer cancel()
	if !ok {
		return
	}
	r, ok := a.cards.waiting(callID, ref)
	if !ok || time.Now().Before(r.due) {
		return // made, or refused again meanwhile: waited for anew
	}
	if r.rank == phaseRank(agent.PhaseDecided) || a.movedOn(ctx, r.call) {
		// An approval shown as running is followed by what became of
		// the call, rendered by whichever process resumed it, maybe
		// another one already: made late, it would undo that.
		a.cards.settled(callID, ref)
		return
	}
	_, err := a.chat(ctx, chatMessage{channel: ref.Channel, ts: ref.TS, blocks: r.blocks, text: r.text})
	if _, later := retryLater(err); err != nil && !later {
		a.cards.settled(callID, ref)
		a.log.Error("update card", "call", callID, "channel", ref.Channel, "err", err)
		a.m.error("slack_update")
		return
	}
	a.copyUpdated(ctx, ref, r, err)
}

// movedOn reports whether the call as stored has moved on from c (an
// approval counted toward it, or an update waiting to be made again): it
// was decided, expired or cancelled since, holds other approvals (a later
// count, or an edit that restarted the count) or arguments, or is gone.
// The update of each such change renders it, before or after this one
// (reported from another click, they can come in any order), so c
// rendered after it would show what is past, such as the buttons of a
// call that takes no more clicks. If the call cannot be read, it has not.
func (a *App) movedOn(ctx context.Context, c agent.Call) bool {
	if a.ag == nil {
		return false
	}
	cur, err := a.ag.Call(ctx, c.ID)
	if errors.Is(err, approvals.ErrUnknownCall) {
		return true
	}
	if err != nil {
		a.log.Warn("read the call before updating its card again; updating it", "call", c.ID, "err", err)
		return false
	}
	return differs(cur.Call, c)
}

// differs reports whether cur, a call as stored, is news to a card that
// shows c: another status, other arguments or other approvals.
func differs(cur, c agent.Call) bool {
	return cur.Status != c.Status || cur.Fingerprint != c.Fingerprint || !slices.Equal(cur.Approvals, c.Approvals)
}

// cardRendered notes that u is rendered on the call's card: once it is
// final, nothing will change the card again, and what this process
// remembers of it is forgotten (where it is stays in the store with the
// call).
func (a *App) cardRendered(u agent.CallUpdate) {
	if u.Phase != agent.PhaseCounted && (u.Phase != agent.PhaseDecided || u.Call.Status != agent.CallDecided) {
		a.cards.forget(u.Call.ID)
	}
}

// cardIn renders card for its copy in channel, of a call made in
// conversation (the conversation's channel). The conversation's copy shows
// everything. Copies outside it are read by people who may not see it:
// the approvers' DMs show that the call ran, not its output, which only
// the thread shows; a copy in any other channel (APPROVALS_CHANNEL, now or
// when the copy was posted), read by whoever is in that channel, is sealed
// (see Card.Sealed).
func (a *App) cardIn(card Card, channel, conversation string) ([]slack.Block, string) {
	return a.cardAt(card, placeOf(channel, conversation), conversation)
}

// cardAt renders card for a copy in a place of the kind place (see
// placeOf), of a call made in conversation.
func (a *App) cardAt(card Card, place, conversation string) ([]slack.Block, string) {
	if place != "conversation" {
		card.CopyOf = conversation
		if card.OutputSummary != "" {
			card.OutputSummary = ""
			card.Outcome += " (the output is in the conversation's thread)"
		}
	}
	if place == "approvals" {
		card = Seal(card)
	}
	return CardBlocks(card), CardText(card)
}

// dmMaySee reports whether the person of the direct message channel may
// see c (see maySee); false when who that is cannot be told.
func (a *App) dmMaySee(ctx context.Context, channel string, c agent.Call) bool {
	user, err := a.audience.dmUser(ctx, channel)
	if err != nil {
		a.log.Warn("tell whose direct message a card's copy is in; sealing it", "channel", channel, "err", err)
		return false
	}
	return a.maySee(ctx, c, user)
}

// placeOf is the kind of place a card's copy in channel is, for a call
// made in conversation: "conversation", "dm" (a direct message, whose
// channel id starts with D: copyPlacesFor opens one per approver) or
// "approvals" (any other channel). It is told from the ids alone, never
// from the current APPROVALS_CHANNEL: a copy posted there stays sealed
// after the setting is moved or unset and the bot restarts.
func placeOf(channel, conversation string) string {
	switch {
	case channel == conversation:
		return "conversation"
	case approvals.IsDM(channel):
		return "dm"
	}
	return "approvals"
}

// postBlocks posts a message (in a thread if thread is set) and returns its
// ts, or "" after logging a failure that persisted through the retries.
func (a *App) postBlocks(ctx context.Context, channel, thread string, blocks []slack.Block, text string) string {
	ts, err := a.chat(ctx, chatMessage{channel: channel, thread: thread, blocks: blocks, text: text})
	if err != nil {
		a.log.Error("post message", "channel", channel, "err", err)
		a.m.error("slack_post")
		return ""
	}
	return ts
}

// post posts plain mrkdwn text (already safe) in a thread, as several
// messages when it is longer than one may hold (a reminder mentioning
// hundreds of approvers: each of them is still mentioned). These are
// notices people must get even when the work that sends them was cut
// short (a shutdown), so the post is not cancelled with ctx; it ends at the
// shutdown deadline, and past it the note is logged instead.
func (a *App) post(ctx context.Context, channel, thread, text string) {
	ctx, cancel, ok := a.noteContext(ctx, 10*time.Second)
	defer cancel()
	if !ok {
		a.log.Warn("shutdown deadline passed; note not posted", "channel", channel, "thread", thread, "text", clip(text, 200))
		return
	}
	for _, m := range noteMessages(text) {
		if a.postBlocks(ctx, channel, thread, m.blocks, m.text) == "" {
			return
		}
	}
}

// noteMessage is one message of a note: its blocks, and its text for
// notifications.
type noteMessage struct {
	blocks []slack.Block
	text   string
}

// noteMessages is mrkdwn text (already safe) as sections within Block
// Kit's limits, over as many messages as they take.
func noteMessages(text string) []noteMessage {
	groups := messageGroups(splitMrkdwn(text, maxSectionText))
	msgs := make([]noteMessage, len(groups))
	for i, parts := range groups {
		msgs[i].text = strings.Join(parts, "\n")
		for _, p := range parts {
			msgs[i].blocks = append(msgs[i].blocks, section(p))
		}
	}
	return msgs
}

// cardOf renders a stored call, and what happened to it, as a Card.
func cardOf(pc agent.PendingCall, u *agent.CallUpdate) Card {
	c := pc.Call
	card := Card{
		CallID: token(c.ID, c.Fingerprint), Tool: c.Tool, Args: c.Args, Requester: c.Requester, Requesters: c.Requesters,
		RuleID: c.RuleID, Reason: c.Reason, Approvers: c.Approvers, FourEyes: c.FourEyes, NoAlwaysAllow: c.NoAlwaysAllow,
		RequestedAt: c.CreatedAt, ExpiresAt: c.ExpiresAt, Human: pc.Human,
		MinApprovals: c.MinApprovals, Approvals: c.Approvals, ArgsEdited: c.Edited,
		Preview: c.Preview, PreviewError: c.PreviewError, InDM: approvals.IsDM(c.Channel),
	}
	if pc.Human {
		var q struct {
			Question string `json:"question"`
		}
		_ = json.Unmarshal(c.Args, &q)
		card.Question = q.Question
	}
	switch c.Status {
	case agent.CallDecided:
		card.Status = StatusDecided
	case agent.CallExpired:
		card.Status = StatusExpired
	case agent.CallCancelled:
		card.Status = StatusCancelled
	default:
		card.Status = StatusPending
	}
	if d := c.Decision; d != nil {
		card.Decision, card.Decider, card.DecidedAt = d.Kind, d.Decider, d.At
		card.RejectReason, card.EditedArgs, card.Answer, card.ExactAllow = d.Reason, d.Args, d.Answer, d.Exact
	}
	if u != nil {
		switch u.Phase {
		case agent.PhaseExecuted:
			card.Outcome = "ran"
			switch {
			case u.Result.OutcomeUnknown():
				card.Outcome = "outcome unknown: it may have done its work (its result says why)"
			case u.Result.NotSent():
				card.Outcome = "not sent: it did nothing (its result says why)"
			case u.Result.IsError:
				card.Outcome = "failed"
			}
			card.OutputSummary = u.Result.Content
		case agent.PhaseSkipped:
			switch {
			case u.Note == agent.NoteInterrupted:
				// It may have run: the bot stopped while it did.
				card.Outcome = "outcome unknown: the bot stopped while it ran, and it was not run again"
			case u.Note != "" && c.Status == agent.CallDecided && c.Decision.Kind != approvals.Refuse &&
				c.Decision.Kind != approvals.Reject && c.Decision.Kind != approvals.Respond:
				card.Outcome = "not run: " + u.Note
			}
		case agent.PhaseDecided:
			if c.Status == agent.CallDecided && c.Decision != nil {
				switch c.Decision.Kind {
				case approvals.Approve, approvals.Edit, approvals.Remember:
					card.Outcome = "running…"
					if u.StepPending {
						card.Outcome = "runs once the other calls of this step are decided"
					}
				}
			}
		}
	}
	return card
}

// token is the opaque value of a card's buttons: the call id and the
// fingerprint of the arguments the card shows, so a decision is bound to
// exactly those arguments.
func token(callID, fingerprint string) string { return callID + "~" + fingerprint }

// parseToken splits a button value made by token.
func parseToken(v string) (callID, fingerprint string) {
	callID, fingerprint, _ = strings.Cut(v, "~")
	return callID, fingerprint
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// streamSafe makes model text safe for a streamed markdown message: no
// mention, broadcast or link syntax survives, "[label](url)" cannot
// become a link whose label hides its target, and the characters that
// could reorder or hide text are written out (revealInProse). Each
// character is written out alone, so a chunk cut at white space (see
// flush) never splits one.
func streamSafe(s string) string {
	return linkSyntax.Replace(Escape(revealInProse(s)))
}

// linkSyntax breaks Markdown's inline ("[label](url)") and reference
// ("[label][1]", "[1]: url") link forms.
var linkSyntax = strings.NewReplacer("](", "] (", "][", "] [", "]:", "] :")
