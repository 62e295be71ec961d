package fakeslack

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// slackOrigin is the Origin header slack-go's Socket Mode client sends.
const slackOrigin = "https://api.slack.com"

const writeTimeout = 5 * time.Second

// Envelope is a Socket Mode envelope the fake sent, with its ack.
type Envelope struct {
	ID   string
	Type string // "events_api", "interactive" or "slash_commands"
	// EventID and EventType are set for events_api envelopes.
	EventID   string
	EventType string
	// InteractionType is set for interactive envelopes ("block_actions",
	// "view_submission", ...).
	InteractionType string
	// TS is the ts of the message the envelope is about, if any.
	TS           string
	Payload      json.RawMessage
	RetryAttempt int
	RetryReason  string
	// Deliveries counts how often the envelope was written to a socket.
	Deliveries int
	// SentAt is the wall-clock time of the latest delivery; zero while the
	// envelope waits for a connection.
	SentAt time.Time
	Acked  bool
	// AckedAt is when the fake read the ack, before it waited for its
	// lock to record it.
	AckedAt    time.Time
	AckPayload json.RawMessage
}

type envelope struct {
	Envelope
	acceptsResponse bool
	conn            *conn // the connection holding the latest unacked delivery
}

func (e *envelope) wire() []byte {
	b, _ := json.Marshal(map[string]any{
		"envelope_id":              e.ID,
		"type":                     e.Type,
		"payload":                  e.Payload,
		"accepts_response_payload": e.acceptsResponse,
		"retry_attempt":            e.RetryAttempt,
		"retry_reason":             e.RetryReason,
	})
	return b
}

func (e *envelope) snapshot() Envelope {
	c := e.Envelope
	c.Payload = slices.Clone(e.Payload)
	c.AckPayload = slices.Clone(e.AckPayload)
	return c
}

// conn is one Socket Mode websocket connection. Only its writer goroutine
// writes to ws.
type conn struct {
	id   int
	ws   *websocket.Conn
	wake chan struct{}
	done chan struct{}
	once sync.Once

	mu         sync.Mutex
	queue      [][]byte
	closeAfter bool // close once the queue is written, after the disconnect grace
	silent     bool // sends no pings (Silence)
}

func (c *conn) enqueue(msg []byte, thenClose bool) {
	c.mu.Lock()
	c.queue = append(c.queue, msg)
	c.closeAfter = c.closeAfter || thenClose
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) shutdown() {
	c.once.Do(func() {
		close(c.done)
		_ = c.ws.Close()
	})
}

func (s *Server) serveSocket(w http.ResponseWriter, r *http.Request) {
	ticket := r.URL.Query().Get("ticket")
	s.mu.Lock()
	ok := s.tickets[ticket] && !s.closed
	delete(s.tickets, ticket)
	s.mu.Unlock()
	if !ok {
		http.Error(w, "invalid or used ticket", http.StatusUnauthorized)
		return
	}
	upgrader := websocket.Upgrader{
		CheckOrigin: func(r *http.Request) bool {
			o := r.Header.Get("Origin")
			return o == "" || o == slackOrigin
		},
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &conn{ws: ws, wake: make(chan struct{}, 1), done: make(chan struct{})}
	ws.SetPongHandler(func(data string) error { s.rtt.pong(data); return nil })

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = ws.Close()
		return
	}
	s.seq++
	c.id = s.seq
	s.accepted++
	s.conns = append(s.conns, c)
	hello, _ := json.Marshal(map[string]any{
		"type":            "hello",
		"num_connections": len(s.conns),
		"debug_info": map[string]any{
			"host":                        "fakeslack",
			"build_number":                1,
			"approximate_connection_time": 18060,
		},
		"connection_info": map[string]any{"app_id": s.cfg.appID},
	})
	c.enqueue(hello, false)
	s.flushPendingLocked()
	s.notifyLocked()
	s.wg.Add(2)
	s.mu.Unlock()
	s.logf("socket %d connected", c.id)

	go func() {
		defer s.wg.Done()
		s.writeLoop(c)
	}()
	go func() {
		defer s.wg.Done()
		s.readLoop(c)
	}()
}

func (s *Server) writeLoop(c *conn) {
	defer c.shutdown()
	ping := time.NewTicker(s.cfg.pingInterval)
	defer ping.Stop()
	var closing <-chan time.Time
	for {
		select {
		case <-c.done:
			return
		case <-s.stop:
			return
		case <-closing:
			return
		case <-ping.C:
			c.mu.Lock()
			silent := c.silent
			c.mu.Unlock()
			if silent {
				continue
			}
			if err := c.ws.WriteControl(websocket.PingMessage, []byte("ping"), time.Now().Add(writeTimeout)); err != nil {
				return
			}
			s.mu.Lock()
			s.pings++
			s.notifyLocked()
			s.mu.Unlock()
		case <-c.wake:
			c.mu.Lock()
			queue, thenClose := c.queue, c.closeAfter
			c.queue = nil
			c.mu.Unlock()
			for _, msg := range queue {
				_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
				if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
					return
				}
			}
			if thenClose && closing == nil {
				t := time.NewTimer(s.cfg.disconnectGrace)
				defer t.Stop()
				closing = t.C
			}
		}
	}
}

func (s *Server) readLoop(c *conn) {
	defer s.dropConn(c)
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			s.logf("socket %d: ignoring %s", c.id, data)
			continue
		}
		// The ack's time is when it was read, before the fake waits for
		// its lock.
		at := time.Now()
		s.mu.Lock()
		if e := s.envs[ack.EnvelopeID]; e != nil {
			e.Acked = true
			e.AckedAt = at
			if len(ack.Payload) > 0 && string(ack.Payload) != "null" {
				e.AckPayload = slices.Clone(ack.Payload)
			}
			e.conn = nil
			s.notifyLocked()
		}
		s.mu.Unlock()
		s.logf("socket %d: ack %s", c.id, ack.EnvelopeID)
	}
}

// dropConn forgets a closed connection. Envelopes it delivered and that were
// not acked are delivered again, with retry_attempt increased, on another
// connection or on the next one to open, as Slack does.
func (s *Server) dropConn(c *conn) {
	c.shutdown()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.conns = slices.DeleteFunc(s.conns, func(x *conn) bool { return x == c })
	var retry []*envelope
	for _, id := range s.envOrder {
		if e := s.envs[id]; e.conn == c && !e.Acked {
			e.conn = nil
			e.RetryAttempt++
			e.RetryReason = "timeout"
			retry = append(retry, e)
		}
	}
	s.pending = append(retry, s.pending...)
	if !s.closed {
		s.flushPendingLocked()
	}
	s.notifyLocked()
	s.logf("socket %d closed, %d envelope(s) to redeliver", c.id, len(retry))
}

// newEnvelopeLocked records an envelope and sends it on the next connection
// in turn, or keeps it until one opens.
func (s *Server) newEnvelopeLocked(typ string, payload any, acceptsResponse bool) *envelope {
	raw, _ := json.Marshal(payload)
	e := &envelope{
		Envelope:        Envelope{ID: uuid(), Type: typ, Payload: raw},
		acceptsResponse: acceptsResponse,
	}
	s.envs[e.ID] = e
	s.envOrder = append(s.envOrder, e.ID)
	s.pending = append(s.pending, e)
	s.flushPendingLocked()
	s.notifyLocked()
	return e
}

// flushPendingLocked spreads waiting envelopes round-robin over the open
// connections.
func (s *Server) flushPendingLocked() {
	for len(s.pending) > 0 && len(s.conns) > 0 {
		e := s.pending[0]
		s.pending = s.pending[1:]
		c := s.conns[s.rr%len(s.conns)]
		s.rr++
		s.sendLocked(c, e)
	}
}

func (s *Server) sendLocked(c *conn, e *envelope) {
	e.conn = c
	e.Deliveries++
	e.SentAt = time.Now()
	c.enqueue(e.wire(), false)
	if s.cfg.eventRetry > 0 && e.Type == "events_api" && e.RetryAttempt < maxEventRetries {
		delivery := e.Deliveries
		var t *time.Timer
		t = time.AfterFunc(s.cfg.eventRetry, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.retries, t)
			s.retryUnackedLocked(e, delivery)
		})
		s.retries[t] = true
	}
}

// retryUnackedLocked delivers e again if its delivery number delivery is
// still the latest and not acked (see WithEventRetry).
func (s *Server) retryUnackedLocked(e *envelope, delivery int) {
	if s.closed || e.Acked || e.Deliveries != delivery {
		return
	}
	e.conn = nil
	e.RetryAttempt++
	e.RetryReason = "timeout"
	s.pending = append(s.pending, e)
	s.flushPendingLocked()
	s.notifyLocked()
	s.logf("envelope %s not acked in time: retry %d", e.ID, e.RetryAttempt)
}

// deliverEventLocked wraps an Events API event in an event_callback and an
// events_api envelope. Its team_id is team, or the fake's own when empty:
// in a channel shared with another organisation (Slack Connect) Slack
// sends the workspace of the event's author there
// (slackapi/node-slack-sdk#1370), while authorizations name the
// installation.
func (s *Server) deliverEventLocked(inner jsonObject, ts, team string) *envelope {
	eventID := "Ev" + s.idLocked()
	now := s.cfg.now()
	extShared := team != "" && team != s.cfg.teamID
	if !extShared {
		team = s.cfg.teamID
	}
	payload := jsonObject{
		"token":      "",
		"team_id":    team,
		"api_app_id": s.cfg.appID,
		"event":      inner,
		"type":       "event_callback",
		"event_id":   eventID,
		"event_time": now.Unix(),
		"authorizations": []jsonObject{{
			"enterprise_id":         nil,
			"team_id":               s.cfg.teamID,
			"user_id":               s.cfg.botUserID,
			"is_bot":                true,
			"is_enterprise_install": false,
		}},
		"is_ext_shared_channel": extShared,
		"event_context":         "4-" + randomHex(32),
	}
	e := s.newEnvelopeLocked("events_api", payload, false)
	e.EventID = eventID
	e.EventType, _ = inner["type"].(string)
	e.TS = ts
	return e
}

// Connections returns the number of open Socket Mode connections.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// ConnectionsAccepted returns how many Socket Mode connections have been
// accepted so far, each with its hello queued before any later message:
// unlike ConnectionsOpened, it counts a reconnect only once the new
// connection is there to receive a Disconnect.
func (s *Server) ConnectionsAccepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// ConnectionsOpened returns how many socket URLs apps.connections.open has
// handed out, which grows with every (re)connect.
func (s *Server) ConnectionsOpened() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opened
}

// WaitConnected waits until at least n Socket Mode connections are open.
func (s *Server) WaitConnected(n int, timeout time.Duration) error {
	return s.waitFor(timeout, func() bool { return len(s.conns) >= n })
}

// PingsSent returns the number of websocket PING frames sent so far over
// all connections.
func (s *Server) PingsSent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

// Disconnect sends a disconnect message with reason ("refresh_requested",
// "link_disabled", "warning") on every connection and closes each one when
// the client does, or after a second (see WithDisconnectGrace). Unacked envelopes are redelivered on
// the next connection.
func (s *Server) Disconnect(reason string) {
	msg, _ := json.Marshal(map[string]any{
		"type":       "disconnect",
		"reason":     reason,
		"debug_info": map[string]any{"host": "fakeslack"},
	})
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.enqueue(msg, true)
	}
}

// Silence stops the pings on every open connection, as on a connection
// that died without closing; connections opened later are pinged as usual.
func (s *Server) Silence() {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.silent = true
		c.mu.Unlock()
	}
}

// WaitConnections waits until open connections are open and opened socket
// URLs have been handed out in all (see ConnectionsOpened).
func (s *Server) WaitConnections(open, opened int, timeout time.Duration) error {
	return s.waitFor(timeout, func() bool { return len(s.conns) == open && s.opened == opened })
}

// RevokeAppToken makes apps.connections.open answer token_revoked from now
// on, as Slack does once the app-level token is revoked.
func (s *Server) RevokeAppToken() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = true
}

// Deliver sends an envelope of type typ with payload as it is, valid for its
// type or not, and returns its id. Its ack can be awaited like any other's.
func (s *Server) Deliver(typ string, payload json.RawMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.newEnvelopeLocked(typ, payload, false).ID
}

// SendFrame writes data as a text frame on every open connection: a message
// that need not be an envelope, nor JSON.
func (s *Server) SendFrame(data []byte) {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.enqueue(slices.Clone(data), false)
	}
}

// Drop closes every connection abruptly, without a disconnect message, as a
// network failure would.
func (s *Server) Drop() {
	s.mu.Lock()
	conns := slices.Clone(s.conns)
	s.mu.Unlock()
	for _, c := range conns {
		c.shutdown()
	}
}

// Redeliver sends an envelope again with retry_attempt increased and
// retry_reason "timeout", as Slack does when an ack is late. The envelope
// counts as unacked until the app acks it again.
func (s *Server) Redeliver(envelopeID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.envs[envelopeID]
	if e == nil {
		return fmt.Errorf("fakeslack: unknown envelope %q", envelopeID)
	}
	e.RetryAttempt++
	e.RetryReason = "timeout"
	e.Acked, e.AckedAt, e.AckPayload = false, time.Time{}, nil
	s.pending = append(s.pending, e)
	s.flushPendingLocked()
	s.notifyLocked()
	return nil
}

// Envelopes returns every envelope sent, oldest first.
func (s *Server) Envelopes() []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Envelope, 0, len(s.envOrder))
	for _, id := range s.envOrder {
		out = append(out, s.envs[id].snapshot())
	}
	return out
}

// EnvelopesByTS returns the envelopes about the message ts, oldest first:
// for a mention, its app_mention and message events.
func (s *Server) EnvelopesByTS(ts string) []Envelope {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Envelope
	for _, id := range s.envOrder {
		if e := s.envs[id]; e.TS == ts {
			out = append(out, e.snapshot())
		}
	}
	return out
}

// Envelope returns one envelope by id.
func (s *Server) Envelope(id string) (Envelope, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.envs[id]; e != nil {
		return e.snapshot(), true
	}
	return Envelope{}, false
}

// WaitAck waits until the app acks the envelope and returns the ack's
// payload, nil when the ack had none.
func (s *Server) WaitAck(envelopeID string, timeout time.Duration) (json.RawMessage, error) {
	var payload json.RawMessage
	err := s.waitFor(timeout, func() bool {
		e := s.envs[envelopeID]
		if e == nil || !e.Acked {
			return false
		}
		payload = slices.Clone(e.AckPayload)
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for ack of %s: %w", envelopeID, err)
	}
	return payload, nil
}

// AckLatency returns the wall-clock time between the latest delivery of an
// envelope and its ack; false while it is not acked.
func (s *Server) AckLatency(envelopeID string) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.envs[envelopeID]
	if e == nil || !e.Acked {
		return 0, false
	}
	return e.AckedAt.Sub(e.SentAt), true
}

func uuid() string {
	h := randomHex(32)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}
