package fakeslack

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Default credentials and identities. Tests that do not care about them can
// configure the bot under test with these values.
const (
	DefaultBotToken  = "xoxb-fake-bot-token"
	DefaultAppToken  = "xapp-fake-app-token"
	DefaultTeamID    = "T0FAKE0001"
	DefaultTeamName  = "Fake Team"
	DefaultDomain    = "fake"
	DefaultBotUserID = "U0BOT00001"
	DefaultBotID     = "B0BOT00001"
	DefaultBotName   = "toolgate"
	DefaultAppID     = "A0APP00001"
)

// Defaults for the timing options.
const (
	DefaultPingInterval = 2 * time.Second
	DefaultTriggerTTL   = 3 * time.Second
	DefaultAckWait      = 3 * time.Second
)

// User is a member of the fake workspace.
type User struct {
	ID       string
	Name     string // handle, e.g. "alice"
	RealName string
	Email    string
	IsAdmin  bool
	IsOwner  bool
	IsBot    bool
	Deleted  bool
	TZ       string
	// Guest marks a multi-channel guest (users.info is_restricted): Slack
	// shows a guest only the channels they are in, public ones included.
	Guest bool
	// TeamID is the user's own workspace: empty for the fake's, another
	// for someone from another organisation in a shared channel.
	TeamID string
}

// Channel is a conversation of the fake workspace. Private channels are
// invisible to the bot unless the bot's user is among Members.
type Channel struct {
	ID      string
	Name    string
	Private bool
	Members []string
	// Archived is reported by conversations.info; nothing else heeds it.
	Archived bool
}

// Option configures a Server.
type Option func(*config)

type config struct {
	botToken     string
	appToken     string
	teamID       string
	teamName     string
	domain       string
	botUserID    string
	botID        string
	botName      string
	appID        string
	addr         string
	pingInterval time.Duration
	// disconnectGrace is how long a connection stays open after a
	// disconnect message if the client does not close it first.
	disconnectGrace time.Duration
	triggerTTL      time.Duration
	ackWait         time.Duration
	eventRetry      time.Duration
	now             func() time.Time
	logf            func(format string, args ...any)
	observe         func(APIEvent) // see WithAPIObserver
	maxBlocksText   int            // see WithMaxBlocksText
}

// WithTokens sets the bot token (xoxb-) and the app-level token (xapp-) the
// fake accepts.
func WithTokens(botToken, appToken string) Option {
	return func(c *config) { c.botToken, c.appToken = botToken, appToken }
}

// WithTeam sets the workspace id, name and domain.
func WithTeam(id, name, domain string) Option {
	return func(c *config) { c.teamID, c.teamName, c.domain = id, name, domain }
}

// WithBot sets the bot's user id, bot id and handle.
func WithBot(userID, botID, name string) Option {
	return func(c *config) { c.botUserID, c.botID, c.botName = userID, botID, name }
}

// WithAddr makes the fake listen on addr (host:port) instead of a random
// loopback port.
func WithAddr(addr string) Option {
	return func(c *config) { c.addr = addr }
}

// WithPingInterval sets how often the fake sends websocket PING frames on
// every Socket Mode connection. Real Slack pings every few seconds and
// slack-go drops a connection that stays silent for 30 s.
func WithPingInterval(d time.Duration) Option {
	return func(c *config) { c.pingInterval = d }
}

// WithDisconnectGrace sets how long a connection stays open after
// Disconnect sends its disconnect message, if the client does not close it
// first (default a second; Slack waits about ten).
func WithDisconnectGrace(d time.Duration) Option {
	return func(c *config) { c.disconnectGrace = d }
}

// WithTriggerTTL sets how long a trigger_id stays valid for views.open and
// views.push. Slack's limit is 3 s.
func WithTriggerTTL(d time.Duration) Option {
	return func(c *config) { c.triggerTTL = d }
}

// WithAckWait sets how long SubmitView and Slash wait for the app's ack
// before giving up. Slack's limit is 3 s.
func WithAckWait(d time.Duration) Option {
	return func(c *config) { c.ackWait = d }
}

// WithEventRetry makes the fake deliver an events_api envelope again, as
// Slack does with an event not acked in time, when the app has not acked it
// d after a delivery: with retry_attempt increased and retry_reason
// "timeout", at most maxEventRetries times. (Slack waits 3 s for the ack,
// then retries at once, after a minute and after five minutes.) Without
// this option unacked envelopes are delivered again only on a dropped
// connection or by Redeliver. Interactive and slash command envelopes are
// never retried on a timer: Slack shows the user an error instead.
func WithEventRetry(d time.Duration) Option {
	return func(c *config) { c.eventRetry = d }
}

// maxEventRetries is how often Slack retries an event that is not acked.
const maxEventRetries = 3

// WithMaxBlocksText sets how many characters the text objects of a
// message's blocks may hold in all before a post, an update or the end of
// a stream is refused with msg_blocks_too_long (default
// DefaultMaxBlocksText). Slack does not document the figure; a test can
// lower it to check that an app stays clear of it.
func WithMaxBlocksText(n int) Option {
	return func(c *config) { c.maxBlocksText = n }
}

// WithClock replaces time.Now for everything the fake timestamps: message
// ts values, trigger expiry and the recorded call times. Socket pings and
// waits always use the real clock. now is called with and without the
// fake's lock held (a call's arrival is taken before the lock), so it
// must be safe for concurrent use.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.now = now }
}

// WithLogf makes the fake log what it receives and sends.
func WithLogf(logf func(format string, args ...any)) Option {
	return func(c *config) { c.logf = logf }
}

// Server is a fake Slack: a Web API under /api/ and a Socket Mode websocket
// endpoint, both on one loopback HTTP server. All methods are safe for
// concurrent use.
type Server struct {
	cfg   config
	ln    net.Listener
	http  *http.Server
	base  string
	stop  chan struct{}
	wg    sync.WaitGroup
	close sync.Once

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced whenever state changes
	closed    bool
	seq       int
	idPrefix  string // random per server, so ids never repeat across runs
	lastTS    time.Time
	users     map[string]*User
	channels  map[string]*channelState
	dms       map[string]string // user id -> DM channel id
	groups    map[string][]string
	ephemeral []Ephemeral
	views     map[string]*viewState
	viewOrder []string
	triggers  map[string]*trigger
	statuses  map[string]string // channel + "/" + thread_ts -> status
	calls     []Call
	unknown   []string
	inject    map[string][]injection
	conns     []*conn
	rr        int
	opened    int             // apps.connections.open calls answered with a URL
	accepted  int             // Socket Mode connections accepted
	tickets   map[string]bool // socket URLs handed out and not yet used
	pings     int
	revoked   bool // the app token is revoked (RevokeAppToken)
	envs      map[string]*envelope
	envOrder  []string
	pending   []*envelope          // waiting for a connection
	retries   map[*time.Timer]bool // pending WithEventRetry timers
	rtt       rttProbes
}

// New starts a fake Slack for a test and stops it when the test ends.
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s, err := start(opts...)
	if err != nil {
		t.Fatalf("fakeslack: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake Slack outside of a test, for example in a local
// playground binary. It panics if it cannot listen. Call Close to stop it.
func Start(opts ...Option) *Server {
	s, err := start(opts...)
	if err != nil {
		panic(fmt.Sprintf("fakeslack: %v", err))
	}
	return s
}

func start(opts ...Option) (*Server, error) {
	cfg := config{
		botToken:        DefaultBotToken,
		appToken:        DefaultAppToken,
		teamID:          DefaultTeamID,
		teamName:        DefaultTeamName,
		domain:          DefaultDomain,
		botUserID:       DefaultBotUserID,
		botID:           DefaultBotID,
		botName:         DefaultBotName,
		appID:           DefaultAppID,
		addr:            "127.0.0.1:0",
		pingInterval:    DefaultPingInterval,
		disconnectGrace: time.Second,
		triggerTTL:      DefaultTriggerTTL,
		ackWait:         DefaultAckWait,
		now:             time.Now,
		maxBlocksText:   DefaultMaxBlocksText,
	}
	for _, opt := range opts {
		opt(&cfg)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.addr, err)
	}
	s := &Server{
		cfg:      cfg,
		ln:       ln,
		base:     "http://" + ln.Addr().String(),
		stop:     make(chan struct{}),
		changed:  make(chan struct{}),
		users:    make(map[string]*User),
		channels: make(map[string]*channelState),
		dms:      make(map[string]string),
		groups:   make(map[string][]string),
		views:    make(map[string]*viewState),
		triggers: make(map[string]*trigger),
		statuses: make(map[string]string),
		inject:   make(map[string][]injection),
		envs:     make(map[string]*envelope),
		tickets:  make(map[string]bool),
		retries:  make(map[*time.Timer]bool),
	}
	s.users[cfg.botUserID] = &User{ID: cfg.botUserID, Name: cfg.botName, RealName: cfg.botName, IsBot: true}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/", s.serveAPI)
	mux.HandleFunc("/socket", s.serveSocket)
	mux.HandleFunc("/response/", s.serveResponseURL)
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.wg.Go(func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logf("serve: %v", err)
		}
	})
	return s, nil
}

// Close stops the server, closes every Socket Mode connection and waits for
// all of the fake's goroutines to return. It is safe to call more than once.
func (s *Server) Close() {
	s.close.Do(func() {
		s.mu.Lock()
		s.closed = true
		for t := range s.retries {
			t.Stop()
		}
		conns := slices.Clone(s.conns)
		s.notifyLocked()
		s.mu.Unlock()
		close(s.stop)
		_ = s.http.Close()
		for _, c := range conns {
			c.shutdown()
		}
		s.wg.Wait()
	})
}

// URL returns the base URL of the fake, e.g. "http://127.0.0.1:PORT".
func (s *Server) URL() string { return s.base }

// APIURL returns the Web API base URL with its trailing slash, ready for
// slack.OptionAPIURL.
func (s *Server) APIURL() string { return s.base + "/api/" }

// BotToken returns the bot token the fake accepts.
func (s *Server) BotToken() string { return s.cfg.botToken }

// AppToken returns the app-level token the fake accepts for
// apps.connections.open.
func (s *Server) AppToken() string { return s.cfg.appToken }

// TeamID returns the workspace id.
func (s *Server) TeamID() string { return s.cfg.teamID }

// BotUserID returns the bot's user id, the one mentions refer to as <@id>.
func (s *Server) BotUserID() string { return s.cfg.botUserID }

// BotID returns the bot id (B…) set on the bot's own messages.
func (s *Server) BotID() string { return s.cfg.botID }

// AppID returns the app id.
func (s *Server) AppID() string { return s.cfg.appID }

// AddUser adds or replaces a workspace member.
func (s *Server) AddUser(u User) {
	if u.Name == "" {
		u.Name = u.ID
	}
	if u.RealName == "" {
		u.RealName = u.Name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.users[u.ID] = &u
}

// AddChannel adds or replaces a channel. Whether the bot is in it depends on
// whether BotUserID is among its members.
func (s *Server) AddChannel(c Channel) {
	if c.Name == "" {
		c.Name = c.ID
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.channels[c.ID]
	if st == nil {
		st = &channelState{}
		s.channels[c.ID] = st
	}
	st.Channel = Channel{ID: c.ID, Name: c.Name, Private: c.Private, Members: slices.Clone(c.Members), Archived: c.Archived}
	st.kind = kindChannel
}

// AddGroupDM adds or replaces a group direct message (an mpim) between
// members; its events have channel_type "mpim". Add the bot's user id to
// members for the bot to be in it.
func (s *Server) AddGroupDM(id string, members ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.channels[id]
	if st == nil {
		st = &channelState{}
		s.channels[id] = st
	}
	st.Channel = Channel{ID: id, Name: "mpdm-" + id, Private: true, Members: slices.Clone(members)}
	st.kind = kindMPIM
}

// Join adds users to a channel's members. It does nothing for an unknown
// channel.
func (s *Server) Join(channel string, users ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.channels[channel]; st != nil {
		for _, u := range users {
			if !slices.Contains(st.Members, u) {
				st.Members = append(st.Members, u)
			}
		}
	}
}

// Leave removes users from a channel's members, and sends the app a
// member_left_channel event for each when the bot is a member. It does
// nothing for an unknown channel.
func (s *Server) Leave(channel string, users ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.channels[channel]
	if st == nil {
		return
	}
	left := slices.DeleteFunc(slices.Clone(st.Members), func(m string) bool { return !slices.Contains(users, m) })
	st.Members = slices.DeleteFunc(st.Members, func(m string) bool { return slices.Contains(users, m) })
	if !st.isMember(s.cfg.botUserID) {
		return // Slack tells only a member of the channel
	}
	kind := "C"
	if st.Private {
		kind = "G"
	}
	for _, u := range left {
		s.deliverEventLocked(jsonObject{"type": "member_left_channel", "user": u, "channel": channel, "channel_type": kind, "team": s.cfg.teamID, "event_ts": s.tsLocked()}, "", "")
	}
}

// AddUserGroup adds or replaces a user group (subteam) and its members.
// Replacing the members of a group sends the app a subteam_members_changed
// event naming those added and those removed.
func (s *Server) AddUserGroup(id string, members ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, existed := s.groups[id]
	s.groups[id] = slices.Clone(members)
	if !existed {
		return
	}
	added := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return slices.Contains(before, m) })
	removed := slices.DeleteFunc(slices.Clone(before), func(m string) bool { return slices.Contains(members, m) })
	ts := s.tsLocked()
	s.deliverEventLocked(jsonObject{"type": "subteam_members_changed", "subteam_id": id, "team_id": s.cfg.teamID,
		"added_users": added, "added_users_count": strconv.Itoa(len(added)), "removed_users": removed, "removed_users_count": strconv.Itoa(len(removed)), "event_ts": ts}, "", "")
}

// DisableUserGroup disables a user group: usergroups.users.list answers
// no_such_subteam for it, and the app gets a subteam_updated event with
// its date_delete set and no users.
func (s *Server) DisableUserGroup(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.groups, id)
	ts := s.tsLocked()
	s.deliverEventLocked(jsonObject{"type": "subteam_updated", "team_id": s.cfg.teamID,
		"subteam": jsonObject{"id": id, "team_id": s.cfg.teamID, "is_usergroup": true, "date_delete": time.Now().Unix()}, "event_ts": ts}, "", "")
}

// RenameUserGroup renames a user group: its members stay, and the app
// gets a subteam_updated event, which lists them, as Slack's does for any
// change of a group.
func (s *Server) RenameUserGroup(id, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	members := slices.Clone(s.groups[id])
	ts := s.tsLocked()
	s.deliverEventLocked(jsonObject{"type": "subteam_updated", "team_id": s.cfg.teamID,
		"subteam": jsonObject{"id": id, "team_id": s.cfg.teamID, "is_usergroup": true, "name": name, "date_delete": 0, "users": members, "user_count": len(members)}, "event_ts": ts}, "", "")
}

// DMChannel returns the id of the bot's direct-message channel with user,
// creating it if needed, as conversations.open would.
func (s *Server) DMChannel(user string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _ := s.dmLocked(user)
	return id
}

func (s *Server) dmLocked(user string) (id string, existed bool) {
	if id, ok := s.dms[user]; ok {
		return id, true
	}
	id = "D" + s.idLocked()
	s.dms[user] = id
	s.channels[id] = &channelState{
		Channel: Channel{ID: id, Name: id, Private: true, Members: []string{user, s.cfg.botUserID}},
		kind:    kindIM,
		imUser:  user,
	}
	return id, false
}

// idLocked returns a fresh upper-case suffix for generated ids.
func (s *Server) idLocked() string {
	s.seq++
	if s.idPrefix == "" {
		var b [3]byte
		_, _ = rand.Read(b[:])
		s.idPrefix = strings.ToUpper(hex.EncodeToString(b[:]))
	}
	return fmt.Sprintf("%s%07d", s.idPrefix, s.seq)
}

// tsLocked returns a fresh message timestamp, strictly increasing even when
// the clock stands still.
func (s *Server) tsLocked() string {
	now := s.cfg.now().Truncate(time.Microsecond)
	if !now.After(s.lastTS) {
		now = s.lastTS.Add(time.Microsecond)
	}
	s.lastTS = now
	return fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
}

// notifyLocked wakes everyone waiting for a state change.
func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// waitFor calls cond under the lock until it reports true, the timeout
// passes or the server closes.
func (s *Server) waitFor(timeout time.Duration, cond func() bool) error {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if cond() {
			s.mu.Unlock()
			return nil
		}
		if s.closed {
			s.mu.Unlock()
			return ErrClosed
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return ErrTimeout
		}
	}
}

// Errors returned by the waiting methods.
var (
	ErrTimeout = errors.New("fakeslack: timed out")
	ErrClosed  = errors.New("fakeslack: server closed")
)

func (s *Server) logf(format string, args ...any) {
	if s.cfg.logf != nil {
		s.cfg.logf("fakeslack: "+format, args...)
	}
}
