package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/store"
)

// ConversationKey is the opaque key of a conversation: one Slack thread.
func ConversationKey(team, channel, threadTS string) string {
	return team + "/" + channel + "/" + threadTS
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
}

func (m message) key() string {
	thread := m.threadTS
	if thread == "" {
		thread = m.ts
	}
	return ConversationKey(m.team, m.channel, thread)
}

// onEventsAPI routes an event. It runs in the Socket Mode loop, after the
// ack, so it must not touch the store: every store round trip here would
// delay the acks of all the envelopes behind it, and a burst of events
// would break Slack's 3 s ack deadline. De-duplication and the other store
// lookups run on the conversation's queue (see onMessage).
func (a *App) onEventsAPI(ctx context.Context, evt socketmode.Event) {
	e, ok := evt.Data.(slackevents.EventsAPIEvent)
	if !ok {
		return
	}
	var envelope struct {
		EventID string `json:"event_id"`
		TeamID  string `json:"team_id"`
	}
	_ = json.Unmarshal(evt.Request.Payload, &envelope)
	eventID := envelope.EventID
	team := envelope.TeamID
	if team == "" {
		team = a.teamID
	}
	switch ev := e.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if ev.BotID != "" || ev.User == "" || ev.User == a.botUserID {
			return
		}
		a.onMessage(ctx, message{team: team, channel: ev.Channel, user: ev.User, text: ev.Text, ts: ev.TimeStamp, threadTS: ev.ThreadTimeStamp}, eventID, false)
	case *slackevents.MessageEvent:
		if ev.BotID != "" || ev.User == "" || ev.User == a.botUserID || (ev.SubType != "" && ev.SubType != "thread_broadcast" && ev.SubType != "file_share") {
			return
		}
		m := message{team: team, channel: ev.Channel, user: ev.User, text: ev.Text, ts: ev.TimeStamp, threadTS: ev.ThreadTimeStamp}
		followUp := false
		switch {
		case ev.ChannelType == "im":
		case a.mentionsBot(ev.Text):
			// The app_mention of the same message arrives too; whichever
			// comes first is answered.
		case ev.ThreadTimeStamp != "":
			// Maybe a follow-up in a thread the bot is part of; its queue
			// looks the conversation up.
			followUp = true
		default:
			return
		}
		a.onMessage(ctx, m, eventID, followUp)
	case *slackevents.AppHomeOpenedEvent:
		if ev.Tab != "" && ev.Tab != "home" {
			return
		}
		user := ev.User
		a.spawn(ctx, "home", func(ctx context.Context) {
			if eventID != "" && !a.firstTime(ctx, "event:"+eventID) {
				a.m.duplicate()
				return
			}
			a.publishHome(ctx, user)
		})
	}
}

func (a *App) mentionsBot(text string) bool {
	return a.botUserID != "" && strings.Contains(text, "<@"+a.botUserID)
}

func (a *App) knownConversation(ctx context.Context, key string) bool {
	_, err := a.st.LoadConversation(ctx, key)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		a.log.Warn("look up conversation", "conversation", key, "err", err)
	}
	return err == nil
}

var mentionRE = regexp.MustCompile(`<@([UW][A-Z0-9]+)(\|[^>]*)?>`)

// cleanText strips the bot's mention from a message.
func (a *App) cleanText(text string) string {
	text = mentionRE.ReplaceAllStringFunc(text, func(m string) string {
		if a.botUserID != "" && strings.HasPrefix(m, "<@"+a.botUserID) {
			return ""
		}
		return m
	})
	return strings.TrimSpace(text)
}

// onMessage answers a message once (the same message may arrive as
// app_mention and message, and any envelope may be redelivered) on the
// conversation's queue. Both copies of a message and every redelivery
// have the same conversation key, so they are checked one after the other.
// A followUp message is answered only in a thread the bot is part of. This
// is the one place where an accepted message is handed to the agent.
func (a *App) onMessage(ctx context.Context, m message, eventID string, followUp bool) {
	key := m.key()
	a.enqueue(ctx, key, func(ctx context.Context) {
		if ctx.Err() != nil {
			// Shutdown cancelled the work before this message's turn.
			a.notStarted(ctx, m, eventID, followUp)
			return
		}
		if !a.accept(ctx, m, eventID, followUp) {
			return
		}
		release, err := a.turnSlot(ctx, key)
		if err != nil {
			a.post(ctx, m.channel, threadOf(m), restartingText)
			return
		}
		defer release()
		text := a.cleanText(m.text)
		if text == "" {
			text = "(empty message)"
		}
		a.runTurn(ctx, agent.Request{Conversation: key, User: m.user, Channel: m.channel, Text: text})
	})
}

// notStarted answers a message whose turn had not started when the
// shutdown cut work short. The lookups and the note must not fail with ctx,
// but end at the shutdown deadline.
func (a *App) notStarted(ctx context.Context, m message, eventID string, followUp bool) {
	ctx, cancel, ok := a.noteContext(ctx, 5*time.Second)
	defer cancel()
	if !ok {
		a.log.Warn("shutdown deadline passed; a message not started was not answered", "conversation", m.key())
		return
	}
	if a.accept(ctx, m, eventID, followUp) {
		a.post(ctx, m.channel, threadOf(m), restartingText)
	}
}

// restartingText answers a message whose turn had not started when the bot
// began shutting down.
const restartingText = "I was restarting before I got to this; please send your message again."

// accept reports whether the bot should answer m: the first copy of the
// message, and for a follow-up, in a thread the bot is part of.
func (a *App) accept(ctx context.Context, m message, eventID string, followUp bool) bool {
	if eventID != "" && !a.firstTime(ctx, "event:"+eventID) {
		a.m.duplicate()
		return false
	}
	if followUp && !a.knownConversation(ctx, m.key()) {
		return false
	}
	if !a.firstTime(ctx, "msg:"+m.channel+":"+m.ts) {
		a.m.duplicate()
		return false
	}
	return true
}

func threadOf(m message) string {
	if m.threadTS != "" {
		return m.threadTS
	}
	return m.ts
}

// runTurn runs one turn and reports failures in the thread.
func (a *App) runTurn(ctx context.Context, req agent.Request) {
	_, channel, thread, _ := parseKey(req.Conversation)
	out, err := a.ag.Run(ctx, req)
	a.m.turn(string(out.Status), err)
	if err != nil {
		a.log.Error("turn failed", "conversation", req.Conversation, "err", err)
		a.post(ctx, channel, thread, failureText(err))
		return
	}
	if out.Status == agent.Waiting {
		waits := make([]Waiting, 0, len(out.Pending))
		for _, p := range out.Pending {
			waits = append(waits, Waiting{Tool: p.Tool, Approvers: p.Approvers})
		}
		a.post(ctx, channel, thread, WaitingText(waits))
	}
}

// failureText tells people in the thread what went wrong, without internals
// they cannot act on.
func failureText(err error) string {
	var me *agent.ModelError
	switch {
	case errors.As(err, &me):
		return fmt.Sprintf("I couldn't get an answer from the model (%s). Your message is kept; send another message to try again.", Escape(me.Kind.String()))
	case errors.Is(err, agent.ErrLeaseTimeout):
		return "This thread is busy with an earlier message; please try again in a minute."
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "I was interrupted before finishing (the bot is restarting). Please send your message again."
	default:
		return "Something went wrong while working on this (my state store may be unavailable). Nothing pending was lost; please try again in a minute."
	}
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
