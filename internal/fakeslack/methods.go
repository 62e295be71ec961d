package fakeslack

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

func (s *Server) authTest(*request) (response, *apiError) {
	return response{
		"url":                   "https://" + s.cfg.domain + ".slack.com/",
		"team":                  s.cfg.teamName,
		"user":                  s.cfg.botName,
		"team_id":               s.cfg.teamID,
		"user_id":               s.cfg.botUserID,
		"bot_id":                s.cfg.botID,
		"is_enterprise_install": false,
	}, nil
}

func (s *Server) appsConnectionsOpen(*request) (response, *apiError) {
	if s.closed {
		return nil, fail("internal_error")
	}
	if s.revoked {
		return nil, fail("token_revoked")
	}
	s.opened++
	ticket := fmt.Sprintf("%d-%s", s.opened, s.idLocked())
	s.tickets[ticket] = true
	return response{"url": "ws" + strings.TrimPrefix(s.base, "http") + "/socket?ticket=" + ticket}, nil
}

// resolveLocked finds the conversation a method names. A user id names the
// bot's DM with that user, as chat.postMessage allows. Private
// conversations the bot is not in are reported as not found, as Slack does.
func (s *Server) resolveLocked(id string) (*channelState, *apiError) {
	if id == "" {
		return nil, fail("channel_not_found")
	}
	if _, ok := s.users[id]; ok && (strings.HasPrefix(id, "U") || strings.HasPrefix(id, "W")) {
		dm, _ := s.dmLocked(id)
		id = dm
	}
	st := s.channels[id]
	if st == nil || (st.Private && !st.isMember(s.cfg.botUserID)) {
		return nil, fail("channel_not_found")
	}
	return st, nil
}

// blocksParam validates and returns the blocks parameter of a message;
// nil when absent or empty. Blocks whose text objects hold more characters
// in all than a message may carry are refused as msg_blocks_too_long (see
// WithMaxBlocksText).
func (s *Server) blocksParam(rq *request, maxBlocks int) (json.RawMessage, *apiError) {
	raw := rq.raw("blocks")
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if msgs := validateBlocks(raw, maxBlocks); len(msgs) > 0 {
		return nil, fail("invalid_blocks", msgs...)
	}
	if n := blocksText(raw); n > s.cfg.maxBlocksText {
		return nil, fail("msg_blocks_too_long", fmt.Sprintf("the blocks hold %d characters of text, more than %d", n, s.cfg.maxBlocksText))
	}
	var list []json.RawMessage
	_ = json.Unmarshal(raw, &list)
	if len(list) == 0 {
		return nil, nil
	}
	return slices.Clone(raw), nil
}

func (s *Server) chatPostMessage(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	text := rq.str("text")
	if runes(text) > maxMessageText {
		return nil, fail("msg_too_long")
	}
	blocks, aerr := s.blocksParam(rq, maxMessageBlocks)
	if aerr != nil {
		return nil, aerr
	}
	if text == "" && blocks == nil && rq.str("attachments") == "" {
		return nil, fail("no_text")
	}
	m := &Message{
		Channel:  st.ID,
		TS:       s.tsLocked(),
		ThreadTS: rq.str("thread_ts"),
		User:     s.cfg.botUserID,
		BotID:    s.cfg.botID,
		Text:     text,
		Blocks:   blocks,
	}
	if md := rq.raw("metadata"); len(md) > 0 && string(md) != "null" {
		m.Metadata = slices.Clone(md)
	}
	m.Unfurls = flag(rq, "unfurl_links", false) || flag(rq, "unfurl_media", true)
	s.storeBotMessageLocked(st, m)
	return response{"channel": st.ID, "ts": m.TS, "message": s.messageJSON(m)}, nil
}

// storeBotMessageLocked stores a message the bot posted, clears the thread's
// assistant status as Slack does when the app replies, and echoes the
// message back to the app as a message event.
func (s *Server) storeBotMessageLocked(st *channelState, m *Message) {
	st.messages = append(st.messages, m)
	if m.ThreadTS != "" {
		delete(s.statuses, st.ID+"/"+m.ThreadTS)
	}
	s.notifyLocked()
	if st.isMember(s.cfg.botUserID) {
		ev := s.messageJSON(m)
		ev["channel"] = st.ID
		ev["channel_type"] = channelType(st)
		ev["event_ts"] = m.TS
		s.deliverEventLocked(ev, m.TS, "")
	}
}

func (s *Server) chatPostEphemeral(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	user := rq.str("user")
	if _, ok := s.users[user]; !ok {
		return nil, fail("user_not_found")
	}
	if !st.isMember(user) {
		return nil, fail("user_not_in_channel")
	}
	text := rq.str("text")
	if runes(text) > maxMessageText {
		return nil, fail("msg_too_long")
	}
	blocks, aerr := s.blocksParam(rq, maxMessageBlocks)
	if aerr != nil {
		return nil, aerr
	}
	if text == "" && blocks == nil {
		return nil, fail("no_text")
	}
	ts := s.tsLocked()
	s.ephemeral = append(s.ephemeral, Ephemeral{
		Channel: st.ID, User: user, TS: ts, ThreadTS: rq.str("thread_ts"), Text: text, Blocks: blocks,
	})
	s.notifyLocked()
	return response{"message_ts": ts}, nil
}

// ownMessageLocked finds a message of the bot's for update, delete and
// streaming.
func (s *Server) ownMessageLocked(rq *request, tsParam, notOwn string) (*channelState, *Message, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, nil, aerr
	}
	m := st.find(rq.str(tsParam))
	if m == nil || m.Deleted {
		return nil, nil, fail("message_not_found")
	}
	if m.BotID != s.cfg.botID {
		return nil, nil, fail(notOwn)
	}
	return st, m, nil
}

func (s *Server) chatUpdate(rq *request) (response, *apiError) {
	st, m, aerr := s.ownMessageLocked(rq, "ts", "cant_update_message")
	if aerr != nil {
		return nil, aerr
	}
	text := rq.str("text")
	if runes(text) > maxMessageText {
		return nil, fail("msg_too_long")
	}
	blocks, aerr := s.blocksParam(rq, maxMessageBlocks)
	if aerr != nil {
		return nil, aerr
	}
	if rq.has("text") {
		m.Text = text
	}
	if rq.has("blocks") {
		m.Blocks = blocks
	}
	m.Updates++
	s.notifyLocked()
	return response{"channel": st.ID, "ts": m.TS, "text": m.Text, "message": s.messageJSON(m)}, nil
}

func (s *Server) chatDelete(rq *request) (response, *apiError) {
	st, m, aerr := s.ownMessageLocked(rq, "ts", "cant_delete_message")
	if aerr != nil {
		return nil, aerr
	}
	m.Deleted = true
	s.notifyLocked()
	return response{"channel": st.ID, "ts": m.TS}, nil
}

func (s *Server) chatGetPermalink(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	m := st.find(rq.str("message_ts"))
	if m == nil || m.Deleted {
		return nil, fail("message_not_found")
	}
	link := fmt.Sprintf("https://%s.slack.com/archives/%s/p%s", s.cfg.domain, st.ID, strings.ReplaceAll(m.TS, ".", ""))
	if m.ThreadTS != "" && m.ThreadTS != m.TS {
		link += "?thread_ts=" + m.ThreadTS + "&cid=" + st.ID
	}
	return response{"channel": st.ID, "permalink": link}, nil
}

// streamText returns the markdown text of a streaming call: markdown_text
// plus the text of any markdown_text chunks.
func streamText(rq *request) string {
	text := rq.str("markdown_text")
	var chunks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if raw := rq.raw("chunks"); len(raw) > 0 && json.Unmarshal(raw, &chunks) == nil {
		for _, c := range chunks {
			if c.Type == "markdown_text" {
				text += c.Text
			}
		}
	}
	return text
}

func (s *Server) chatStartStream(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	if st.kind != kindIM {
		if rq.str("recipient_user_id") == "" {
			return nil, fail("missing_recipient_user_id")
		}
		if rq.str("recipient_team_id") == "" {
			return nil, fail("missing_recipient_team_id")
		}
	}
	text := streamText(rq)
	if runes(text) > maxStreamText {
		return nil, fail("msg_too_long")
	}
	m := &Message{
		Channel:   st.ID,
		TS:        s.tsLocked(),
		ThreadTS:  rq.str("thread_ts"),
		User:      s.cfg.botUserID,
		BotID:     s.cfg.botID,
		Text:      text,
		Streaming: true,
		Streamed:  true,
	}
	s.storeBotMessageLocked(st, m)
	return response{"channel": st.ID, "ts": m.TS}, nil
}

func (s *Server) chatAppendStream(rq *request) (response, *apiError) {
	st, m, aerr := s.ownMessageLocked(rq, "ts", "message_not_owned_by_app")
	if aerr != nil {
		return nil, aerr
	}
	if !m.Streaming {
		return nil, fail("message_not_in_streaming_state")
	}
	text := streamText(rq)
	if text == "" {
		return nil, fail("no_text")
	}
	if runes(text) > maxStreamText {
		return nil, fail("msg_too_long")
	}
	m.Text += text
	s.notifyLocked()
	return response{"channel": st.ID, "ts": m.TS}, nil
}

func (s *Server) chatStopStream(rq *request) (response, *apiError) {
	st, m, aerr := s.ownMessageLocked(rq, "ts", "message_not_owned_by_app")
	if aerr != nil {
		return nil, aerr
	}
	if !m.Streaming {
		return nil, fail("message_not_in_streaming_state")
	}
	text := streamText(rq)
	if runes(text) > maxStreamText {
		return nil, fail("msg_too_long")
	}
	blocks, aerr := s.blocksParam(rq, maxMessageBlocks)
	if aerr != nil {
		return nil, aerr
	}
	m.Text += text
	if blocks != nil {
		m.Blocks = blocks
	}
	m.Streaming = false
	s.notifyLocked()
	return response{"channel": st.ID, "ts": m.TS, "message": s.messageJSON(m)}, nil
}

func (s *Server) reactionsAdd(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	m := st.find(rq.str("timestamp"))
	if m == nil || m.Deleted {
		return nil, fail("message_not_found")
	}
	name := rq.str("name")
	if name == "" {
		return nil, fail("invalid_name")
	}
	if slices.Contains(m.Reactions, name) {
		return nil, fail("already_reacted")
	}
	m.Reactions = append(m.Reactions, name)
	s.notifyLocked()
	return nil, nil
}

func (s *Server) assistantThreadsSetStatus(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel_id"))
	if aerr != nil {
		return nil, aerr
	}
	threadTS := rq.str("thread_ts")
	if threadTS == "" {
		return nil, fail("invalid_arguments", "missing required field: thread_ts")
	}
	key := st.ID + "/" + threadTS
	if status := rq.str("status"); status != "" {
		s.statuses[key] = status
	} else {
		delete(s.statuses, key)
	}
	s.notifyLocked()
	return nil, nil
}

func (s *Server) conversationsOpen(rq *request) (response, *apiError) {
	if ch := rq.str("channel"); ch != "" {
		st, aerr := s.resolveLocked(ch)
		if aerr != nil {
			return nil, aerr
		}
		return response{"channel": s.channelJSON(st), "already_open": true, "no_op": true}, nil
	}
	users := strings.Split(rq.str("users"), ",")
	if len(users) == 0 || users[0] == "" {
		return nil, fail("users_list_not_supplied")
	}
	for _, u := range users {
		if _, ok := s.users[u]; !ok {
			return nil, fail("user_not_found")
		}
	}
	if len(users) == 1 {
		id, existed := s.dmLocked(users[0])
		return response{"channel": s.channelJSON(s.channels[id]), "already_open": existed, "no_op": existed}, nil
	}
	members := append(slices.Clone(users), s.cfg.botUserID)
	slices.Sort(members)
	for _, st := range s.channels {
		if st.kind == kindMPIM && slices.Equal(st.Members, members) {
			return response{"channel": s.channelJSON(st), "already_open": true, "no_op": true}, nil
		}
	}
	id := "G" + s.idLocked()
	st := &channelState{Channel: Channel{ID: id, Name: "mpdm-" + id, Private: true, Members: members}, kind: kindMPIM}
	s.channels[id] = st
	return response{"channel": s.channelJSON(st)}, nil
}

func (s *Server) conversationsInfo(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	return response{"channel": s.channelJSON(st)}, nil
}

func (s *Server) conversationsMembers(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	return response{
		"members":           slices.Clone(st.Members),
		"response_metadata": map[string]any{"next_cursor": ""},
	}, nil
}

func (s *Server) conversationsReplies(rq *request) (response, *apiError) {
	st, aerr := s.resolveLocked(rq.str("channel"))
	if aerr != nil {
		return nil, aerr
	}
	m := st.find(rq.str("ts"))
	if m == nil || m.Deleted {
		return nil, fail("thread_not_found")
	}
	root := m.TS
	if m.ThreadTS != "" {
		root = m.ThreadTS
	}
	// As Slack: oldest first, within latest (exclusive unless inclusive)
	// and oldest, limit at a time (1000 by default and at most), the
	// cursor naming where the next page begins.
	latest, oldest, inclusive := rq.str("latest"), rq.str("oldest"), rq.str("inclusive") == "true" || rq.str("inclusive") == "1"
	var all []*Message
	for _, x := range st.messages {
		switch {
		case x.Deleted || x.TS != root && x.ThreadTS != root:
		case latest != "" && (tsAfter(x.TS, latest) || x.TS == latest && !inclusive):
		case oldest != "" && (tsAfter(oldest, x.TS) || x.TS == oldest && !inclusive):
		default:
			all = append(all, x)
		}
	}
	limit, err := strconv.Atoi(rq.str("limit"))
	if err != nil || limit <= 0 || limit > 1000 {
		limit = 1000
	}
	from := 0
	if c := rq.str("cursor"); c != "" {
		if from, err = strconv.Atoi(c); err != nil || from < 0 || from > len(all) {
			return nil, fail("invalid_cursor")
		}
	}
	to := min(from+limit, len(all))
	msgs := make([]jsonObject, 0, to-from)
	for _, x := range all[from:to] {
		msgs = append(msgs, s.threadMessageJSON(st, x))
	}
	next := ""
	if to < len(all) {
		next = strconv.Itoa(to)
	}
	return response{
		"messages":          msgs,
		"has_more":          next != "",
		"response_metadata": map[string]any{"next_cursor": next},
	}, nil
}

// tsAfter reports whether Slack timestamp a is after b.
func tsAfter(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	if len(as) != len(bs) {
		return len(as) > len(bs)
	}
	return as > bs || as == bs && af > bf
}

func (s *Server) usersInfo(rq *request) (response, *apiError) {
	u, ok := s.users[rq.str("user")]
	if !ok {
		return nil, fail("user_not_found")
	}
	return response{"user": s.userJSON(u)}, nil
}

func (s *Server) usergroupsUsersList(rq *request) (response, *apiError) {
	members, ok := s.groups[rq.str("usergroup")]
	if !ok {
		return nil, fail("no_such_subteam")
	}
	return response{"users": slices.Clone(members)}, nil
}

// messageJSON renders a message as Slack's APIs and events show it.
func (s *Server) messageJSON(m *Message) jsonObject {
	o := jsonObject{"type": "message", "ts": m.TS, "text": m.Text, "team": s.cfg.teamID}
	if m.User != "" {
		o["user"] = m.User
	}
	if m.BotID != "" {
		o["bot_id"] = m.BotID
		o["app_id"] = s.cfg.appID
		o["bot_profile"] = jsonObject{
			"id": m.BotID, "app_id": s.cfg.appID, "name": s.cfg.botName, "team_id": s.cfg.teamID, "deleted": false,
		}
	}
	if m.ThreadTS != "" {
		o["thread_ts"] = m.ThreadTS
	}
	if m.Blocks != nil {
		o["blocks"] = json.RawMessage(m.Blocks)
	}
	if m.Metadata != nil {
		o["metadata"] = json.RawMessage(m.Metadata)
	}
	if m.Updates > 0 {
		o["edited"] = jsonObject{"user": m.User, "ts": m.TS}
	}
	return o
}

func (s *Server) threadMessageJSON(st *channelState, m *Message) jsonObject {
	o := s.messageJSON(m)
	if m.ThreadTS == "" || m.ThreadTS == m.TS {
		var replies int
		for _, x := range st.messages {
			if !x.Deleted && x.ThreadTS == m.TS && x.TS != m.TS {
				replies++
			}
		}
		if replies > 0 {
			o["thread_ts"] = m.TS
			o["reply_count"] = replies
		}
	}
	return o
}

func channelType(st *channelState) string {
	switch {
	case st.kind == kindIM:
		return "im"
	case st.kind == kindMPIM:
		return "mpim"
	case st.Private:
		return "group"
	}
	return "channel"
}

func (s *Server) channelJSON(st *channelState) jsonObject {
	o := jsonObject{
		"id":              st.ID,
		"created":         1700000000,
		"is_channel":      st.kind == kindChannel,
		"is_group":        st.kind == kindChannel && st.Private,
		"is_im":           st.kind == kindIM,
		"is_mpim":         st.kind == kindMPIM,
		"is_private":      st.Private,
		"is_archived":     st.Archived,
		"is_general":      false,
		"is_member":       st.isMember(s.cfg.botUserID),
		"is_ext_shared":   false,
		"is_org_shared":   false,
		"context_team_id": s.cfg.teamID,
	}
	if st.kind == kindIM {
		o["user"] = st.imUser
		o["is_open"] = true
	} else {
		o["name"] = st.Name
		o["name_normalized"] = st.Name
		o["num_members"] = len(st.Members)
	}
	return o
}

func (s *Server) userJSON(u *User) jsonObject {
	return jsonObject{
		"id":                  u.ID,
		"team_id":             cmp.Or(u.TeamID, s.cfg.teamID),
		"name":                u.Name,
		"real_name":           u.RealName,
		"deleted":             u.Deleted,
		"tz":                  u.TZ,
		"is_admin":            u.IsAdmin,
		"is_owner":            u.IsOwner,
		"is_primary_owner":    false,
		"is_restricted":       u.Guest,
		"is_ultra_restricted": false,
		"is_bot":              u.IsBot,
		"is_app_user":         false,
		"profile": jsonObject{
			"real_name":    u.RealName,
			"display_name": u.Name,
			"email":        u.Email,
			"team":         s.cfg.teamID,
		},
	}
}

// flag is a boolean parameter of rq, def when not sent.
func flag(rq *request, name string, def bool) bool {
	switch string(rq.raw(name)) {
	case "true", `"true"`, "1":
		return true
	case "false", `"false"`, "0":
		return false
	}
	return def
}
