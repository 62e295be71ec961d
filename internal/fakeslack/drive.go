package fakeslack

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
)

// Mention posts text from user in channel with the bot mentioned (a
// "<@BOTUSERID>" prefix is added when text has none) and returns the
// message ts. If the bot is a member of the channel, it receives two
// envelopes for the one message, as from real Slack: an app_mention event
// and a message event with the same ts and a different event_id. An unknown
// channel is created as a public channel with the user and the bot in it.
func (s *Server) Mention(channel, user, text string) string {
	return s.userMessage(channel, "", user, s.withMention(text), true)
}

// Post posts text from user in channel and returns its ts. The bot
// receives a message event if it is in the channel, plus an app_mention
// event if text mentions it.
func (s *Server) Post(channel, user, text string) string {
	return s.userMessage(channel, "", user, text, strings.Contains(text, s.mention()))
}

// ThreadReply posts text from user as a reply in the thread threadTS and
// returns its ts. Events are delivered as for Post, with thread_ts set.
func (s *Server) ThreadReply(channel, threadTS, user, text string) string {
	return s.userMessage(channel, threadTS, user, text, strings.Contains(text, s.mention()))
}

// DM sends text from user to the bot in their direct-message channel and
// returns its ts. The bot receives a message event with channel_type "im"
// (Slack sends no app_mention in DMs). Use DMChannel for the channel id.
func (s *Server) DM(user, text string) string {
	return s.userMessage(s.DMChannel(user), "", user, text, false)
}

// PostAsBot posts a message from another bot (botID, B…) in channel and
// returns its ts. The app receives a message event with subtype
// "bot_message" if it is in the channel.
func (s *Server) PostAsBot(channel, botID, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ensureChannelLocked(channel, "")
	m := &Message{Channel: st.ID, TS: s.tsLocked(), BotID: botID, Text: text}
	st.messages = append(st.messages, m)
	s.notifyLocked()
	if st.isMember(s.cfg.botUserID) {
		ev := jsonObject{
			"type": "message", "subtype": "bot_message", "bot_id": botID, "username": botID,
			"text": text, "ts": m.TS, "channel": st.ID, "channel_type": channelType(st), "event_ts": m.TS,
		}
		s.deliverEventLocked(ev, m.TS, "")
	}
	return m.TS
}

func (s *Server) mention() string { return "<@" + s.cfg.botUserID + ">" }

func (s *Server) withMention(text string) string {
	if strings.Contains(text, s.mention()) {
		return text
	}
	return s.mention() + " " + text
}

func (s *Server) ensureChannelLocked(channel, user string) *channelState {
	st := s.channels[channel]
	if st == nil {
		st = &channelState{Channel: Channel{ID: channel, Name: channel, Members: []string{s.cfg.botUserID}}}
		s.channels[channel] = st
	}
	if user != "" && st.kind == kindChannel && !st.isMember(user) {
		st.Members = append(st.Members, user)
	}
	return st
}

func (s *Server) userMessage(channel, threadTS, user, text string, mentioned bool) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.users[user]; !ok {
		s.users[user] = &User{ID: user, Name: user, RealName: user}
	}
	st := s.ensureChannelLocked(channel, user)
	// In a channel shared with another organisation (Slack Connect), an
	// event carries the author's workspace: the event's team, user_team and
	// source_team, and the outer team_id too (see deliverEventLocked).
	authorTeam := s.cfg.teamID
	if u := s.users[user]; u != nil && u.TeamID != "" {
		authorTeam = u.TeamID
	}
	m := &Message{Channel: st.ID, TS: s.tsLocked(), ThreadTS: threadTS, User: user, Text: text}
	st.messages = append(st.messages, m)
	s.notifyLocked()
	if !st.isMember(s.cfg.botUserID) {
		return m.TS
	}
	base := func(typ string) jsonObject {
		ev := jsonObject{
			"type":          typ,
			"user":          user,
			"text":          text,
			"ts":            m.TS,
			"channel":       st.ID,
			"event_ts":      m.TS,
			"team":          authorTeam,
			"client_msg_id": uuid(),
		}
		if authorTeam != s.cfg.teamID {
			ev["user_team"], ev["source_team"] = authorTeam, authorTeam
		}
		if threadTS != "" {
			ev["thread_ts"] = threadTS
			if parent := st.find(threadTS); parent != nil && parent.User != "" {
				ev["parent_user_id"] = parent.User
			}
		}
		return ev
	}
	if mentioned && st.kind != kindIM {
		s.deliverEventLocked(base("app_mention"), m.TS, authorTeam)
	}
	ev := base("message")
	ev["channel_type"] = channelType(st)
	s.deliverEventLocked(ev, m.TS, authorTeam)
	return m.TS
}

// OpenHome delivers an app_home_opened event for user's Home tab and
// returns the envelope id. The event carries the Home view last published
// for the user, if any.
func (s *Server) OpenHome(user string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	dm, _ := s.dmLocked(user)
	ts := s.tsLocked()
	ev := jsonObject{"type": "app_home_opened", "user": user, "channel": dm, "tab": "home", "event_ts": ts}
	if home := s.homeLocked(user); home != nil {
		ev["view"] = json.RawMessage(home.JSON)
	}
	return s.deliverEventLocked(ev, "", "").ID
}

func (s *Server) userRefJSON(user string) jsonObject {
	name, team := user, s.cfg.teamID
	if u := s.users[user]; u != nil {
		name, team = u.Name, cmp.Or(u.TeamID, team)
	}
	return jsonObject{"id": user, "username": name, "name": name, "team_id": team}
}

func (s *Server) teamJSON() jsonObject {
	return jsonObject{"id": s.cfg.teamID, "domain": s.cfg.domain}
}

func (s *Server) responseURL() string {
	return s.base + "/response/" + randomHex(16)
}

// findElement looks for an interactive element by action_id in a blocks
// array and returns it with the block_id of its block.
func findElement(blocks json.RawMessage, actionID string) (el jsonObject, blockID string, ok bool) {
	var list []jsonObject
	if json.Unmarshal(blocks, &list) != nil {
		return nil, "", false
	}
	for _, b := range list {
		blockID, _ = b["block_id"].(string)
		var cands []any
		if elems, ok := b["elements"].([]any); ok {
			cands = append(cands, elems...)
		}
		for _, k := range []string{"accessory", "element"} {
			if e, ok := b[k]; ok {
				cands = append(cands, e)
			}
		}
		for _, c := range cands {
			if e, ok := c.(jsonObject); ok && e["action_id"] == actionID {
				return e, blockID, true
			}
		}
	}
	return nil, "", false
}

// actionJSON renders the element a user acted on, with the chosen value.
func actionJSON(el jsonObject, blockID, value, actionTS string) jsonObject {
	typ, _ := el["type"].(string)
	a := jsonObject{"action_id": el["action_id"], "block_id": blockID, "type": typ, "action_ts": actionTS}
	if value == "" {
		value, _ = el["value"].(string)
	}
	switch typ {
	case "static_select", "external_select", "overflow", "radio_buttons":
		a["selected_option"] = jsonObject{"text": jsonObject{"type": "plain_text", "text": value}, "value": value}
	case "users_select":
		a["selected_user"] = value
	case "conversations_select":
		a["selected_conversation"] = value
	case "channels_select":
		a["selected_channel"] = value
	case "datepicker":
		a["selected_date"] = value
	default:
		if t, ok := el["text"].(jsonObject); ok {
			a["text"] = t
		}
		a["value"] = value
	}
	return a
}

// Click delivers a block_actions interaction for user pressing (or
// choosing value in) the element actionID of the message messageTS in
// channel, with a fresh trigger_id. An empty value means the element's own
// value. It returns the envelope id, or an error if the message or the
// element does not exist.
func (s *Server) Click(user, channel, messageTS, actionID, value string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clickLocked(user, channel, messageTS, actionID, value)
}

// ClickMany delivers one click per user on the same version of the message,
// as when several people press a button before the card changes. It returns
// the envelope ids in the order of users.
func (s *Server) ClickMany(users []string, channel, messageTS, actionID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(users))
	for _, u := range users {
		id, err := s.clickLocked(u, channel, messageTS, actionID, "")
		if err != nil {
			return ids, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func (s *Server) clickLocked(user, channel, messageTS, actionID, value string) (string, error) {
	st := s.channels[channel]
	if st == nil {
		return "", fmt.Errorf("fakeslack: unknown channel %s", channel)
	}
	m := st.find(messageTS)
	if m == nil || m.Deleted {
		return "", fmt.Errorf("fakeslack: no message %s in %s", messageTS, channel)
	}
	el, blockID, ok := findElement(m.Blocks, actionID)
	if !ok {
		return "", fmt.Errorf("fakeslack: message %s in %s has no element %q", messageTS, channel, actionID)
	}
	actionTS := s.tsLocked()
	container := jsonObject{"type": "message", "message_ts": m.TS, "channel_id": st.ID, "is_ephemeral": false}
	if m.ThreadTS != "" {
		container["thread_ts"] = m.ThreadTS
	}
	chName := st.Name
	if st.kind == kindIM {
		chName = "directmessage"
	}
	payload := jsonObject{
		"type":                  "block_actions",
		"user":                  s.userRefJSON(user),
		"api_app_id":            s.cfg.appID,
		"token":                 "",
		"container":             container,
		"trigger_id":            s.issueTriggerLocked(user),
		"team":                  s.teamJSON(),
		"enterprise":            nil,
		"is_enterprise_install": false,
		"channel":               jsonObject{"id": st.ID, "name": chName},
		"message":               s.messageJSON(m),
		"state":                 jsonObject{"values": jsonObject{}},
		"response_url":          s.responseURL(),
		"actions":               []jsonObject{actionJSON(el, blockID, value, actionTS)},
	}
	e := s.newEnvelopeLocked("interactive", payload, false)
	e.InteractionType = "block_actions"
	e.TS = m.TS
	return e.ID, nil
}

// ClickInView delivers a block_actions interaction for user pressing the
// element actionID in a view (a modal or the Home tab) and returns the
// envelope id.
func (s *Server) ClickInView(user, viewID, actionID, value string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.views[viewID]
	if vs == nil {
		return "", fmt.Errorf("fakeslack: unknown view %s", viewID)
	}
	blocks, _ := json.Marshal(vs.obj["blocks"])
	el, blockID, ok := findElement(blocks, actionID)
	if !ok {
		return "", fmt.Errorf("fakeslack: view %s has no element %q", viewID, actionID)
	}
	payload := jsonObject{
		"type":                  "block_actions",
		"user":                  s.userRefJSON(user),
		"api_app_id":            s.cfg.appID,
		"token":                 "",
		"container":             jsonObject{"type": "view", "view_id": vs.ID},
		"trigger_id":            s.issueTriggerLocked(user),
		"team":                  s.teamJSON(),
		"enterprise":            nil,
		"is_enterprise_install": false,
		"view":                  json.RawMessage(vs.JSON),
		"actions":               []jsonObject{actionJSON(el, blockID, value, s.tsLocked())},
	}
	e := s.newEnvelopeLocked("interactive", payload, false)
	e.InteractionType = "block_actions"
	return e.ID, nil
}

// stateValue renders one input's submitted value the way Slack reports the
// element type found in the view.
func stateValue(el jsonObject, value string) jsonObject {
	typ, _ := el["type"].(string)
	switch typ {
	case "static_select", "external_select", "radio_buttons":
		return jsonObject{"type": typ, "selected_option": jsonObject{"text": jsonObject{"type": "plain_text", "text": value}, "value": value}}
	case "users_select":
		return jsonObject{"type": typ, "selected_user": value}
	case "conversations_select":
		return jsonObject{"type": typ, "selected_conversation": value}
	case "channels_select":
		return jsonObject{"type": typ, "selected_channel": value}
	case "datepicker":
		return jsonObject{"type": typ, "selected_date": value}
	case "checkboxes", "multi_static_select":
		var opts []jsonObject
		if value != "" {
			for v := range strings.SplitSeq(value, ",") {
				opts = append(opts, jsonObject{"text": jsonObject{"type": "plain_text", "text": v}, "value": v})
			}
		}
		return jsonObject{"type": typ, "selected_options": opts}
	}
	return jsonObject{"type": "plain_text_input", "value": value}
}

// SubmitView delivers a view_submission for user submitting the modal
// viewRef (a view id, or the callback_id of the user's latest open modal)
// with values[blockID][actionID] as the inputs' values (for multi-selects a
// comma-separated list). A non-empty privateMetadata replaces the view's.
// If no such modal was opened through the fake, a minimal one with
// viewRef as callback_id is made up.
//
// It waits for the ack (see WithAckWait) and returns its payload, e.g.
// {"response_action":"errors","errors":{...}}, applying the response
// action to the fake's views: none closes the view, "errors" keeps it,
// "update" replaces it, "push" pushes a new one and "clear" closes all.
// A view in an "update" or "push" that Slack would refuse (too large,
// or breaking Block Kit's rules) leaves the views as they were, as Slack
// shows the user an error instead: SubmitView then returns the ack with an
// error naming what is wrong.
func (s *Server) SubmitView(user, viewRef string, values map[string]map[string]string, privateMetadata string) (json.RawMessage, error) {
	s.mu.Lock()
	vs := s.views[viewRef]
	if vs == nil {
		for _, v := range s.openStackLocked(user) {
			if v.CallbackID == viewRef {
				vs = v
			}
		}
	}
	if vs == nil {
		vs = s.putViewLocked(&viewState{View: View{User: user}}, jsonObject{
			"type": "modal", "callback_id": viewRef, "private_metadata": privateMetadata,
			"title": jsonObject{"type": "plain_text", "text": viewRef},
		})
	}
	view := jsonObject{}
	for k, v := range vs.obj {
		view[k] = v
	}
	if privateMetadata != "" {
		view["private_metadata"] = privateMetadata
	}
	blocks, _ := json.Marshal(vs.obj["blocks"])
	state := jsonObject{}
	for blockID, actions := range values {
		b := jsonObject{}
		for actionID, value := range actions {
			el, _, _ := findElement(blocks, actionID)
			b[actionID] = stateValue(el, value)
		}
		state[blockID] = b
	}
	view["state"] = jsonObject{"values": state}
	payload := jsonObject{
		"type":                  "view_submission",
		"team":                  s.teamJSON(),
		"user":                  s.userRefJSON(user),
		"api_app_id":            s.cfg.appID,
		"token":                 "",
		"trigger_id":            s.issueTriggerLocked(user),
		"view":                  view,
		"response_urls":         []any{},
		"is_enterprise_install": false,
		"enterprise":            nil,
	}
	e := s.newEnvelopeLocked("interactive", payload, false)
	e.InteractionType = "view_submission"
	id, viewID := e.ID, vs.ID
	s.mu.Unlock()

	ack, err := s.WaitAck(id, s.cfg.ackWait)
	if err != nil {
		return nil, err
	}
	return ack, s.applyResponseAction(user, viewID, ack)
}

func (s *Server) applyResponseAction(user, viewID string, ack json.RawMessage) error {
	var ra struct {
		Action string          `json:"response_action"`
		View   json.RawMessage `json:"view"`
	}
	_ = json.Unmarshal(ack, &ra)
	var view jsonObject
	if ra.Action == "update" || ra.Action == "push" {
		v, aerr := checkView(ra.View, "modal")
		if aerr != nil {
			return fmt.Errorf("response_action %s refused: %s %v", ra.Action, aerr.code, aerr.messages)
		}
		view = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vs := s.views[viewID]
	switch ra.Action {
	case "errors":
	case "update":
		s.putViewLocked(vs, view)
	case "push":
		s.putViewLocked(&viewState{View: View{User: user, RootViewID: vs.RootViewID, PreviousViewID: vs.ID}}, view)
	case "clear":
		for _, v := range s.openStackLocked(user) {
			v.Closed = true
		}
	default:
		vs.Closed = true
	}
	s.notifyLocked()
	return nil
}

// Slash delivers a slash_commands envelope for user running command (e.g.
// "/approvals") with text in channel, waits for the ack (see WithAckWait)
// and returns its payload. A payload with text or blocks is recorded as an
// ephemeral message to the user, which is how Slack shows it.
func (s *Server) Slash(user, channel, command, text string) (json.RawMessage, error) {
	s.mu.Lock()
	st := s.ensureChannelLocked(channel, "")
	userName := user
	if u := s.users[user]; u != nil {
		userName = u.Name
	}
	payload := jsonObject{
		"token":        "",
		"team_id":      s.cfg.teamID,
		"team_domain":  s.cfg.domain,
		"channel_id":   st.ID,
		"channel_name": st.Name,
		"user_id":      user,
		"user_name":    userName,
		"command":      command,
		"text":         text,
		"api_app_id":   s.cfg.appID,
		"response_url": s.responseURL(),
		"trigger_id":   s.issueTriggerLocked(user),
	}
	e := s.newEnvelopeLocked("slash_commands", payload, true)
	id := e.ID
	s.mu.Unlock()

	ack, err := s.WaitAck(id, s.cfg.ackWait)
	if err != nil {
		return nil, err
	}
	var reply struct {
		Text   string          `json:"text"`
		Blocks json.RawMessage `json:"blocks"`
	}
	if json.Unmarshal(ack, &reply) == nil && (reply.Text != "" || len(reply.Blocks) > 0) {
		s.mu.Lock()
		s.ephemeral = append(s.ephemeral, Ephemeral{Channel: channel, User: user, TS: s.tsLocked(), Text: reply.Text, Blocks: reply.Blocks})
		s.notifyLocked()
		s.mu.Unlock()
	}
	return ack, nil
}

// IssueTrigger returns a fresh trigger_id for user, as an interaction
// would, for tests that call views.open directly.
func (s *Server) IssueTrigger(user string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issueTriggerLocked(user)
}
