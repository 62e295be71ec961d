package fakeslack

import (
	"encoding/json"
	"net/url"
	"slices"
	"time"
)

type channelKind int

const (
	kindChannel channelKind = iota
	kindIM
	kindMPIM
)

type channelState struct {
	Channel
	kind     channelKind
	imUser   string
	messages []*Message
}

func (c *channelState) find(ts string) *Message {
	for _, m := range c.messages {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

func (c *channelState) isMember(user string) bool { return slices.Contains(c.Members, user) }

// Message is a message as the fake stores it: the latest version after any
// chat.update, chat.appendStream or chat.stopStream.
type Message struct {
	Channel  string
	TS       string
	ThreadTS string // empty for a top-level message
	User     string
	BotID    string // set on messages the bot posted
	Text     string
	Blocks   json.RawMessage // as posted; nil when the message has none
	Metadata json.RawMessage // chat.postMessage metadata, if any
	// Unfurls is true when Slack would unfurl the links of a posted
	// message: unfurl_links sent true, or unfurl_media not sent false.
	Unfurls bool
	// Updates counts the chat.update calls that changed the message.
	Updates int
	Deleted bool
	// Streaming is true between chat.startStream and chat.stopStream.
	Streaming bool
	// Streamed is true for messages created by chat.startStream.
	Streamed  bool
	Reactions []string
}

func (m *Message) clone() Message {
	c := *m
	c.Blocks = slices.Clone(m.Blocks)
	c.Metadata = slices.Clone(m.Metadata)
	c.Reactions = slices.Clone(m.Reactions)
	return c
}

// Ephemeral is a message posted with chat.postEphemeral, visible to one user.
type Ephemeral struct {
	Channel  string
	User     string
	TS       string
	ThreadTS string
	Text     string
	Blocks   json.RawMessage
}

// Call is one recorded Web API request.
type Call struct {
	Method string
	// Params holds the query and form parameters, without the token.
	Params url.Values
	// Body holds the request body of JSON requests (views.*,
	// apps.connections.open); nil for form requests.
	Body json.RawMessage
	At   time.Time
	// Status is the HTTP status the fake answered with and Error the
	// Slack error code of a {"ok":false} answer.
	Status int
	Error  string
}

// Param returns a parameter by name, looking first at the form and query
// parameters and then at the top level of a JSON body. Non-string JSON
// values are returned as JSON text.
func (c Call) Param(name string) string {
	if v, ok := c.Params[name]; ok && len(v) > 0 {
		return v[0]
	}
	if len(c.Body) == 0 {
		return ""
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(c.Body, &top) != nil {
		return ""
	}
	raw, ok := top[name]
	if !ok {
		return ""
	}
	var str string
	if json.Unmarshal(raw, &str) == nil {
		return str
	}
	return string(raw)
}

// OK reports whether the call was answered with HTTP 200 and "ok": true.
func (c Call) OK() bool { return c.Status == 200 && c.Error == "" }

// Calls returns the recorded calls to method, oldest first; all calls when
// method is empty.
func (s *Server) Calls(method string) []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Call
	for _, c := range s.calls {
		if method == "" || c.Method == method {
			out = append(out, c)
		}
	}
	return out
}

// WaitCall waits until a call to method for which pred reports true has been
// recorded (pred may be nil) and returns the first such call. It returns
// ErrTimeout if none arrives within timeout.
func (s *Server) WaitCall(method string, pred func(Call) bool, timeout time.Duration) (Call, error) {
	var found Call
	err := s.waitFor(timeout, func() bool {
		for _, c := range s.calls {
			if c.Method == method && (pred == nil || pred(c)) {
				found = c
				return true
			}
		}
		return false
	})
	return found, err
}

// UnknownMethods returns the Web API methods that were called but that the
// fake does not implement, in call order.
func (s *Server) UnknownMethods() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.unknown)
}

// Messages returns the channel's messages, thread replies included, in
// posting order. Deleted messages are left out.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.channels[channel]
	if st == nil {
		return nil
	}
	var out []Message
	for _, m := range st.messages {
		if !m.Deleted {
			out = append(out, m.clone())
		}
	}
	return out
}

// Thread returns the parent message threadTS and its replies in posting
// order. Deleted messages are left out.
func (s *Server) Thread(channel, threadTS string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.channels[channel]
	if st == nil {
		return nil
	}
	var out []Message
	for _, m := range st.messages {
		if !m.Deleted && (m.TS == threadTS || m.ThreadTS == threadTS) {
			out = append(out, m.clone())
		}
	}
	return out
}

// Message returns the latest version of one message, deleted or not.
func (s *Server) Message(channel, ts string) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.channels[channel]; st != nil {
		if m := st.find(ts); m != nil {
			return m.clone(), true
		}
	}
	return Message{}, false
}

// WaitMessage waits until the channel has a message for which pred reports
// true and returns it.
func (s *Server) WaitMessage(channel string, pred func(Message) bool, timeout time.Duration) (Message, error) {
	var found Message
	err := s.waitFor(timeout, func() bool {
		st := s.channels[channel]
		if st == nil {
			return false
		}
		for _, m := range st.messages {
			if !m.Deleted && pred(m.clone()) {
				found = m.clone()
				return true
			}
		}
		return false
	})
	return found, err
}

// Ephemerals returns the ephemeral messages shown to user, oldest first.
func (s *Server) Ephemerals(user string) []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ephemeral
	for _, e := range s.ephemeral {
		if e.User == user {
			e.Blocks = slices.Clone(e.Blocks)
			out = append(out, e)
		}
	}
	return out
}

// ThreadStatus returns the status last set with assistant.threads.setStatus
// on a thread; empty when none is set or it was cleared.
func (s *Server) ThreadStatus(channel, threadTS string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statuses[channel+"/"+threadTS]
}
