package slackapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/internal/fastjson"
)

// Envelope types the app handles.
const (
	envelopeEvents      = "events_api"
	envelopeInteractive = "interactive"
	envelopeCommand     = "slash_commands"
)

// envelope is one Socket Mode envelope, decoded in one pass with what the
// app routes by in its payload; the handlers that need the whole payload
// decode it with decodePayload.
type envelope struct {
	ID                     string  `json:"envelope_id"`
	Type                   string  `json:"type"`
	Payload                payload `json:"payload"`
	AcceptsResponsePayload bool    `json:"accepts_response_payload"`
	RetryAttempt           int     `json:"retry_attempt"`
	RetryReason            string  `json:"retry_reason"`
	// Reason is a disconnect message's.
	Reason string `json:"reason"`

	// raw is the message as read; bad, if set, is why some of its fields
	// did not decode.
	raw []byte
	bad error
	// conn is the connection the envelope came on; received is when it
	// was read.
	conn     *socketConn
	received time.Time
}

// decodePayload decodes env's whole payload into v.
func (env *envelope) decodePayload(v any) error {
	return json.Unmarshal(env.raw, &struct {
		Payload any `json:"payload"`
	}{v})
}

// Socket Mode limits.
const (
	// maxAckSize: Slack silently drops replies of 20 KB or more.
	maxAckSize = 20 * 1024
	// defaultSilence is how long a connection may stay without any frame
	// (Slack pings every few seconds) before it is taken for dead.
	defaultSilence = 30 * time.Second
	// oldConnGrace is how long a connection Slack asked to replace is
	// still read once its successor is open (Slack closes it itself,
	// usually sooner); what it delivers meanwhile is handled.
	oldConnGrace = 10 * time.Second
	// socketWriteWait bounds a write without a deadline of its own.
	socketWriteWait = 10 * time.Second
	// youngConn is how long a connection must live past its hello not to
	// die young. One that ends (is lost, or Slack asks to replace it)
	// before its hello, or sooner than that after it, is replaced after a
	// backoff that grows while connections keep dying young; a connection
	// normally lives for hours.
	youngConn = 5 * time.Second
	// slackOrigin is the Origin header Slack's clients send.
	slackOrigin = "https://api.slack.com"
)

// socket is the app's Socket Mode client. Run opens a connection with
// apps.connections.open, reads envelopes from it into envelopes, and
// replaces it when Slack asks (a disconnect message: the new connection
// opens before the old one is dropped), when it fails, or when it stays
// silent for longer than silence. Acks are written on the envelope's
// connection, or on the current one if that one is gone; writes are
// serialized per connection.
type socket struct {
	open    func(ctx context.Context) (url string, err error)
	dialer  websocket.Dialer
	log     *slog.Logger
	debug   bool
	silence time.Duration

	envelopes chan *envelope
	// connected is set once the current connection said hello, and unset
	// when it is lost.
	connected atomic.Bool

	mu      sync.Mutex
	current *socketConn
	changed chan struct{} // closed when current changes

	// crowdedWait is how long Run waits before opening a connection after
	// Slack refused one for too many (the nth refusal in a row, from 0):
	// backoff, or a test's.
	crowdedWait func(n int) time.Duration
	// youngWait is how long Run waits before opening a connection after
	// one that died young (the nth in a row, from 0): backoff, or a
	// test's.
	youngWait func(n int) time.Duration
	// now is the clock a connection's life is measured by: time.Now, or a
	// test's.
	now func() time.Time
}

func newSocket(open func(ctx context.Context) (string, error), log *slog.Logger, debug bool, silence time.Duration) *socket {
	if silence <= 0 {
		silence = defaultSilence
	}
	return &socket{
		open: open, log: log, debug: debug, silence: silence,
		// A write buffer larger than any ack sends each ack as one frame.
		dialer:      websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 30 * time.Second, WriteBufferSize: 32 * 1024},
		envelopes:   make(chan *envelope, 64),
		changed:     make(chan struct{}),
		crowdedWait: backoff,
		youngWait:   backoff,
		now:         time.Now,
	}
}

// Reasons of Slack's disconnect messages that Run tells apart.
const (
	// tooManyWebsockets: the connection is past an app's limit (10,
	// across all its processes).
	tooManyWebsockets = "too_many_websockets"
	// linkDisabled: Socket Mode is turned off for the app, and the
	// connections opened until it is turned on again end the same way.
	linkDisabled = "link_disabled"
)

// socketConn is one websocket connection.
type socketConn struct {
	ws      *websocket.Conn
	wmu     sync.Mutex    // serializes writes other than control frames
	closed  chan struct{} // closed by close
	once    sync.Once
	hello   chan struct{} // closed when Slack said hello on the connection
	greeted sync.Once
	// greetedAt is when the hello came (by socket.now), set before hello
	// is closed.
	greetedAt time.Time
	refresh   chan struct{} // closed when Slack asks to replace the connection
	asked     sync.Once
	// reason is the reason Slack gave for the refresh, set before refresh
	// is closed.
	reason string
	// retire closes the connection a while after it was replaced; only
	// Run touches it.
	retire *time.Timer
}

func (c *socketConn) close() {
	c.once.Do(func() {
		close(c.closed)
		_ = c.ws.Close()
	})
}

// stop closes the connection for good and stops its retire timer; only
// Run calls it.
func (c *socketConn) stop() {
	if c.retire != nil {
		c.retire.Stop()
	}
	c.close()
}

// write writes one message. A failed write closes the connection, whose
// reader then ends.
func (c *socketConn) write(ctx context.Context, msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return net.ErrClosed
	default:
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(socketWriteWait)
	}
	_ = c.ws.SetWriteDeadline(deadline)
	if err := c.ws.WriteMessage(websocket.TextMessage, msg); err != nil {
		c.close()
		return err
	}
	return nil
}

// Run serves Socket Mode until ctx ends (it returns ctx's error) or a
// connection is refused for good: a revoked, invalid or missing app token
// (invalid_auth, account_inactive, token_revoked, not_authed, or an HTTP
// 404), or one unfit for Socket Mode (missing_scope, not_allowed_token_type),
// returned as the error. Any other failure to connect is retried with
// capped backoff. A lost connection is replaced, and so is one Slack asks
// to replace (its successor opens before it is dropped): at once if it
// lived for youngConn past its hello, otherwise after a backoff that grows
// while connections keep dying young, so that connections that end as
// soon as they open are not replaced as fast as they die. A connection
// Slack refuses for too many (too_many_websockets) is replaced after a
// backoff of its own, which grows while Slack keeps refusing. A connection
// Slack ends because Socket Mode is turned off for the app (link_disabled)
// counts as dying young however long it lived: Run keeps trying, with
// backoff, so that the app serves again once Socket Mode is turned back
// on. Run waits for the readers it starts.
func (s *socket) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	var conns []*socketConn // open, or closed since the last connect
	crowded := 0            // refusals for too many connections in a row
	young := 0              // connections that died young in a row
	defer func() {
		s.connected.Store(false)
		s.setCurrent(nil)
		for _, c := range conns {
			c.stop()
		}
		wg.Wait()
	}()
	for {
		c, err := s.connect(ctx)
		if err != nil {
			return err
		}
		if prev := s.setCurrent(c); prev != nil {
			prev.retire = time.AfterFunc(oldConnGrace, prev.close)
		}
		conns = append(openConns(conns), c)
		wg.Go(func() { s.read(ctx, c) })
		asked, diedYoung, err := s.watch(ctx, c)
		if err != nil {
			return err
		}
		// Open the next connection; one Slack asked to replace is read
		// until Slack closes it.
		var wait time.Duration
		if asked && c.reason == tooManyWebsockets {
			wait = s.crowdedWait(crowded)
			crowded++
		} else {
			if asked {
				crowded = 0
			}
			if diedYoung || asked && c.reason == linkDisabled {
				wait = s.youngWait(young)
				young++
			} else {
				young = 0
			}
		}
		if wait <= 0 {
			continue
		}
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// watch waits until c ends: Slack asks to replace it (asked), or it is
// lost (read logged why), or ctx ends (its error). diedYoung is whether it
// ended before its hello or sooner than youngConn after it.
func (s *socket) watch(ctx context.Context, c *socketConn) (asked, diedYoung bool, err error) {
	select {
	case <-ctx.Done():
		return false, false, ctx.Err()
	case <-c.refresh:
	case <-c.closed:
	}
	select {
	case <-c.refresh:
		// Asked, and maybe closed by Slack since: the reason counts.
		asked = true
	default:
	}
	select {
	case <-c.hello:
		diedYoung = s.now().Sub(c.greetedAt) < youngConn
	default:
		diedYoung = true
	}
	return asked, diedYoung, nil
}

// openConns returns the connections of conns not closed yet, and stops
// the others.
func openConns(conns []*socketConn) []*socketConn {
	open := conns[:0]
	for _, c := range conns {
		select {
		case <-c.closed:
			c.stop()
		default:
			open = append(open, c)
		}
	}
	return open
}

func (s *socket) setCurrent(c *socketConn) (prev *socketConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, s.current = s.current, c
	close(s.changed)
	s.changed = make(chan struct{})
	return prev
}

func (s *socket) currentConn() (*socketConn, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.current, s.changed
}

// connect opens a connection, retrying with backoff until it succeeds, ctx
// ends, or the app token is refused for good.
func (s *socket) connect(ctx context.Context) (*socketConn, error) {
	for attempt := 0; ; attempt++ {
		c, err := s.dial(ctx)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if tokenRefused(err) {
			return nil, &TokenRefusedError{App: true, Err: err}
		}
		if hint, ok := unfitAppToken(err); ok {
			return nil, &TokenRefusedError{App: true, Err: err, Hint: hint}
		}
		if fatalSocketError(err) {
			return nil, err
		}
		wait := backoff(attempt)
		if rl, ok := errors.AsType[*slack.RateLimitedError](err); ok {
			wait = max(wait, rl.RetryAfter)
		}
		s.log.Warn("socket mode: could not connect; retrying", "attempt", attempt+1, "retry_in", wait.String(), "err", err)
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// fatalSocketError reports whether err, from opening a connection, means
// the app token will not be accepted however often it is tried.
func fatalSocketError(err error) bool {
	if tokenRefused(err) {
		return true
	}
	e, ok := errors.AsType[slack.StatusCodeError](err)
	return ok && e.Code == http.StatusNotFound
}

// tokenRefused reports whether err is Slack refusing the token a call was
// made with, for good.
func tokenRefused(err error) bool {
	if e, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
		switch e.Err {
		case "invalid_auth", "account_inactive", "token_revoked", "not_authed":
			return true
		}
	}
	return false
}

// unfitAppToken reports whether err, from apps.connections.open, is Slack
// refusing the app-level token for what it is rather than for a passing
// reason, which no retry changes: a token without the connections:write
// scope (the scopes of an app-level token cannot be changed once it is
// made), or a token of another kind (a bot token pasted as the app
// token). It returns what to do about it.
func unfitAppToken(err error) (hint string, ok bool) {
	e, isSlack := errors.AsType[slack.SlackErrorResponse](err)
	switch {
	case !isSlack:
		return "", false
	case e.Err == "missing_scope":
		return "the app-level token needs the connections:write scope; generate one with it (the app's Basic Information, App-Level Tokens)", true
	case e.Err == "not_allowed_token_type":
		return "this is not an app-level token (xapp-…); generate one with the connections:write scope (the app's Basic Information, App-Level Tokens)", true
	}
	return "", false
}

// TokenRefusedError is Run's error when Slack refuses one of the app's
// tokens for good (invalid_auth, account_inactive, token_revoked,
// not_authed): the bot token at start, or the app-level token when
// Socket Mode connects (App), which is refused for good too when it lacks
// the connections:write scope or is not an app-level token.
type TokenRefusedError struct {
	App bool
	Err error
	// Hint, if set, says what to do about it (see unfitAppToken).
	Hint string
}

func (e *TokenRefusedError) Error() string {
	which := "bot token"
	if e.App {
		which = "app-level token"
	}
	return "slack refused the " + which + ": " + e.Err.Error()
}

func (e *TokenRefusedError) Unwrap() error { return e.Err }

func (s *socket) dial(ctx context.Context) (*socketConn, error) {
	url, err := s.open(ctx)
	if err != nil {
		return nil, fmt.Errorf("apps.connections.open: %w", err)
	}
	ws, resp, err := s.dialer.DialContext(ctx, url, http.Header{"Origin": {slackOrigin}})
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("dial socket mode: %w", err)
	}
	c := &socketConn{ws: ws, closed: make(chan struct{}), hello: make(chan struct{}), refresh: make(chan struct{})}
	// Slack's envelopes are a few hundred KiB at most (a click carries its
	// whole message); a larger frame ends the connection, which is opened
	// again, instead of being read into memory.
	ws.SetReadLimit(maxEnvelopeBytes)
	ws.SetPingHandler(func(data string) error {
		_ = ws.SetReadDeadline(time.Now().Add(s.silence))
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(socketWriteWait))
		if _, temporary := err.(net.Error); err == websocket.ErrCloseSent || temporary {
			return nil
		}
		return err
	})
	return c, nil
}

// maxEnvelopeBytes bounds one Socket Mode message.
const maxEnvelopeBytes = 16 << 20

// readMessage reads the next data message of ws into buf, and returns a
// copy of it. A buf grown past maxKeptBuffer is let go after the message.
func readMessage(ws *websocket.Conn, buf *bytes.Buffer) ([]byte, error) {
	_, r, err := ws.NextReader()
	if err != nil {
		return nil, err
	}
	buf.Reset()
	defer func() {
		if buf.Cap() > maxKeptBuffer {
			*buf = bytes.Buffer{}
		}
	}()
	if _, err := buf.ReadFrom(r); err != nil {
		return nil, err
	}
	return bytes.Clone(buf.Bytes()), nil
}

// read reads c until it fails, is closed, or stays silent for longer than
// s.silence. Envelopes go to s.envelopes, with bad set if some of their
// fields did not decode; hello and disconnect messages are handled here. A
// message that is not an envelope (no envelope id) is logged and skipped.
func (s *socket) read(ctx context.Context, c *socketConn) {
	defer func() {
		if cur, _ := s.currentConn(); cur == c {
			s.connected.Store(false)
		}
		c.close()
	}()
	// Each message is read into buf, then copied out at its size: reading
	// it whole at once grows a fresh buffer from 512 bytes every time.
	var buf bytes.Buffer
	for {
		_ = c.ws.SetReadDeadline(time.Now().Add(s.silence))
		data, err := readMessage(c.ws, &buf)
		if err != nil {
			select {
			case <-c.closed: // closed here, on purpose or after a failed write
			default:
				if cur, _ := s.currentConn(); cur == c {
					s.log.Warn("socket mode connection lost; reconnecting", "err", err)
				}
			}
			return
		}
		if s.debug {
			s.log.Debug("socket mode message", "message", redactJSON(data))
		}
		received := time.Now()
		// Decoded into a zero value, which fastjson decodes fastest.
		env := &envelope{}
		err = fastjson.Unmarshal(data, env)
		env.raw, env.conn, env.received = data, c, received
		if err != nil {
			if env.ID == "" {
				s.log.Warn("socket mode: skipping a message that is not an envelope", "err", err)
				continue
			}
			env.bad = err
		}
		switch env.Type {
		case "hello":
			c.greeted.Do(func() {
				c.greetedAt = s.now()
				close(c.hello)
			})
			if cur, _ := s.currentConn(); cur == c {
				s.connected.Store(true)
				s.log.Info("socket mode connected")
			}
		case "disconnect":
			switch env.Reason {
			case tooManyWebsockets:
				s.log.Warn("socket mode: Slack refuses this connection: the app has too many open (Slack allows 10 across all replicas; each replica holds one, two while it replaces one)", "reason", env.Reason)
			case linkDisabled:
				s.log.Warn("socket mode: Slack ended the connection: Socket Mode is turned off for this app (turn it on in the app's settings); reconnecting with backoff", "reason", env.Reason)
			default:
				s.log.Info("socket mode: slack asks to reconnect", "reason", env.Reason)
			}
			c.asked.Do(func() {
				c.reason = env.Reason
				close(c.refresh)
			})
		case "":
			s.log.Warn("socket mode: skipping a message with no type", "envelope", env.ID)
		default:
			if env.ID == "" {
				// Nothing to ack it with: Slack never sends one.
				s.log.Warn("socket mode: skipping an envelope with no id", "type", env.Type)
				continue
			}
			select {
			case s.envelopes <- env:
			case <-ctx.Done():
				return
			}
		}
	}
}

// ackMessage is the reply to an envelope.
type ackMessage struct {
	EnvelopeID string `json:"envelope_id"`
	Payload    any    `json:"payload,omitempty"`
}

// errAckTooLarge is the error of an ack whose reply Slack would drop.
var errAckTooLarge = errors.New("ack too large")

// ackWindow is how long after an envelope's delivery Slack waits for its
// ack before it takes the envelope as failed (and delivers it again).
const ackWindow = 3 * time.Second

// ack replies to env with payload (nil for none). A reply of maxAckSize or
// more is refused, as Slack would drop it. It is written on env's
// connection, or, once that one is gone, on the current one, waiting for
// one until ctx ends, and no longer than ackWindow after env was read:
// past that Slack has given up on it, and envelopes read from a lost
// connection are not acked one wait after another.
func (s *socket) ack(ctx context.Context, env *envelope, payload any) error {
	msg, err := json.Marshal(ackMessage{EnvelopeID: env.ID, Payload: payload})
	if err != nil {
		return fmt.Errorf("encode ack: %w", err)
	}
	if len(msg) >= maxAckSize {
		return fmt.Errorf("%w: ack of %d bytes: Slack drops replies of %d bytes or more", errAckTooLarge, len(msg), maxAckSize)
	}
	if s.debug {
		s.log.Debug("socket mode ack", "message", redactJSON(msg))
	}
	tried := env.conn
	if tried != nil && tried.write(ctx, msg) == nil {
		return nil
	}
	// A write keeps ctx's deadline: one cut short would close a working
	// connection.
	wait := ctx
	if !env.received.IsZero() {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, env.received.Add(ackWindow))
		defer cancel()
	}
	for {
		c, changed := s.currentConn()
		if c != nil && c != tried {
			if c.write(ctx, msg) == nil {
				return nil
			}
			tried = c
		}
		select {
		case <-changed:
		case <-wait.Done():
			return fmt.Errorf("no socket mode connection to ack on: %w", wait.Err())
		}
	}
}

// redactJSON returns a JSON message for a debug log, with its tokens and
// response URLs blanked.
func redactJSON(data []byte) string {
	var v any
	if json.Unmarshal(data, &v) != nil {
		return "(not JSON)"
	}
	redactValue(v)
	out, _ := json.Marshal(v)
	return string(out)
}

func redactValue(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, child := range v {
			switch strings.ToLower(k) {
			case "token", "bot_access_token", "action_token", "response_url", "url":
				v[k] = "[redacted]"
			default:
				redactValue(child)
			}
		}
	case []any:
		for _, child := range v {
			redactValue(child)
		}
	}
}
