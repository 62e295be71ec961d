package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/bodylimit"
	"github.com/toolgate/toolgate/internal/redact"
)

// ServerStatus is the state of one MCP server, for health checks.
type ServerStatus struct {
	Name string `json:"name"`
	// Transport is "stdio" or "http".
	Transport string `json:"transport"`
	Connected bool   `json:"connected"`
	// LastError says why the server is not connected, or why it last
	// disconnected.
	LastError string `json:"last_error,omitempty"`
	// Tools is the number of the server's tools in the registry.
	Tools int `json:"tools"`
}

// Manager keeps MCP servers connected and their tools in an
// [agent.Registry]. A server's tools are named <server>__<tool>; their
// schemas are the servers' input schemas and their hints the servers'
// annotations. When a server fails or dies its tools stay registered and
// answer with an error result saying the server is unavailable, while the
// manager reconnects it with jittered exponential backoff and refreshes its
// tools. A tools/list_changed notification refreshes them too.
//
// Each stdio server runs with PATH, HOME, USER, LANG, LC_ALL, TZ and TMPDIR
// from the bot's environment plus its configured env, so that the bot's
// own secrets do not reach it; its stderr is logged. On Unix it runs in a
// process group of its own, which is killed when the server is
// disconnected, so that children of a wrapper (npx starting node) do not
// outlive it.
//
// An HTTP server's redirect to another scheme, host or port than its
// endpoint's is not followed (a 307 or 308 would send a call's arguments
// and the session's id there): the request fails saying so. Its headers
// are sent only to its endpoint's scheme, host and port, and no proxy is
// used. Errors and statuses name an HTTP server by scheme, host and port
// only: URLs in them lose their user information, path and query.
//
// A call or ping returns once its context ends, even when a stdio server
// has stopped reading its input and the request is stuck in the pipe (the
// SDK does not watch the context while it writes): the server's process
// group is then killed, which ends the write, and the server is started
// again.
//
// A JSON-RPC error answering a call is told to the model as a refusal only
// for an unknown method or tool and refused arguments (-32601, -32602);
// another (the Go SDK answers a tool handler's error with one) is a
// failure, of unknown outcome unless the tool is read-only or idempotent.
//
// A tool result longer than the server's max_output_bytes is truncated
// with a note.
//
// A server's tools are only known once it has connected; until then the
// registry holds one read-only stand-in, <server>__unavailable, whose
// result tells the model that the server is not connected and why.
//
// The secrets of the configuration (see [Config.Secrets]) are replaced by
// "[redacted]" in what the manager tells the model (the results, errors
// and previews of every tool it registers, built-in or MCP, of the values
// of headers, env and url parts, a value cut short by an output's limit
// too), in its statuses and in the errors and stderr lines it logs: a stdio server may print its command line or env
// on stderr, which is logged and quoted in the error of a server that
// failed to start.
//
// A Manager is safe for concurrent use. Close stops it.
type Manager struct {
	reg     *agent.Registry
	log     *slog.Logger
	opts    managerOptions
	servers []*server
	// redact hides the configuration's secrets; output, its credentials
	// (see Config.credentials), in the tools' results.
	redact, output redact.Redactor

	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// managerOptions are the timings of a Manager; tests shorten them.
type managerOptions struct {
	minBackoff     time.Duration
	maxBackoff     time.Duration
	connectTimeout time.Duration
	pingInterval   time.Duration
	pingTimeout    time.Duration
	// stable is how long a session must last for the backoff to start over.
	stable time.Duration
	// closeWait bounds Close: a stdio server that ignores the end of its
	// input is stopped by signals only seconds later.
	closeWait time.Duration
	// abandonAfter is how long a call or ping may go on once its context
	// has ended before it is abandoned (see await).
	abandonAfter time.Duration
}

func defaultManagerOptions() managerOptions {
	return managerOptions{
		minBackoff:     500 * time.Millisecond,
		maxBackoff:     30 * time.Second,
		connectTimeout: 20 * time.Second,
		pingInterval:   30 * time.Second,
		pingTimeout:    10 * time.Second,
		stable:         time.Minute,
		closeWait:      5 * time.Second,
		abandonAfter:   time.Second,
	}
}

// Load registers the built-in tools cfg enables in reg, then connects every
// MCP server of cfg and registers its tools. It waits for each server's
// first connection attempt (or for ctx); a server that fails does not make
// Load fail: its status says why and it is retried in the background until
// Close. Load fails if a built-in cannot be set up or registered, if a
// server's configured preview tool is missing or not annotated
// readOnlyHint, or if ctx ends first. A nil log discards the manager's logs.
func Load(ctx context.Context, cfg Config, reg *agent.Registry, log *slog.Logger) (*Manager, error) {
	return load(ctx, cfg, reg, log, defaultManagerOptions())
}

func load(ctx context.Context, cfg Config, reg *agent.Registry, log *slog.Logger, opts managerOptions) (*Manager, error) {
	builtins, err := Builtins(cfg)
	if err != nil {
		return nil, fmt.Errorf("load tools: %w", err)
	}
	// The tools' output is redacted of the credentials only: the other
	// secrets are paths (a server's program, arguments and dir), which
	// tools name (see Config.credentials).
	out := redact.New(cfg.credentials...)
	for _, t := range builtins {
		if err := reg.Register(redactedTool(out, t)); err != nil {
			return nil, fmt.Errorf("load tools: %w", err)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m := &Manager{reg: reg, log: log, opts: opts, cancel: cancel, redact: redact.New(cfg.secrets...), output: out}
	for _, sc := range cfg.Servers {
		s := m.newServer(sc)
		// Until the server's own tools are listed, one stand-in tool tells
		// the model the server is not connected and why.
		if err := reg.Register(s.standIn()); err != nil {
			cancel()
			return nil, fmt.Errorf("load tools: %w", err)
		}
		m.servers = append(m.servers, s)
	}
	for _, s := range m.servers {
		m.wg.Go(func() { s.run(runCtx) })
	}
	for _, s := range m.servers {
		select {
		case <-s.ready:
		case <-ctx.Done():
			m.Close()
			return nil, fmt.Errorf("load tools: %w", ctx.Err())
		}
		s.mu.Lock()
		refused := s.refused
		s.mu.Unlock()
		if refused != nil {
			m.Close()
			return nil, fmt.Errorf("load tools: mcp server %s: %w", s.cfg.Name, refused)
		}
	}
	return m, nil
}

// Status returns the state of every server, in configuration order.
func (m *Manager) Status() []ServerStatus {
	out := make([]ServerStatus, 0, len(m.servers))
	for _, s := range m.servers {
		out = append(out, s.status())
	}
	return out
}

// Close disconnects every server (stopping stdio servers) and waits for the
// manager's goroutines to end, at most 5 s, so that a shutdown stays within
// its time: past that it kills the stdio servers still running, with their
// process groups, waits a moment more and returns an error. The servers'
// tools stay in the registry and answer that their server is unavailable.
// Close is idempotent.
func (m *Manager) Close() error {
	m.closeOnce.Do(m.cancel)
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(m.opts.closeWait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
	}
	for _, s := range m.servers {
		s.killProcess()
	}
	t.Reset(time.Second)
	select {
	case <-done:
		return fmt.Errorf("MCP servers still stopping after %s: the stdio ones were killed", m.opts.closeWait)
	case <-t.C:
		return fmt.Errorf("MCP servers still stopping after %s, and a second after a kill of their processes", m.opts.closeWait)
	}
}

// delay is how long to wait before reconnect attempt n (from 0): doubling
// from minBackoff up to maxBackoff, then picked at random in its upper half.
func (o managerOptions) delay(n int) time.Duration {
	d := o.maxBackoff
	if n < 32 {
		if b := o.minBackoff << n; b > 0 && b < d {
			d = b
		}
	}
	return d/2 + rand.N(d/2+1)
}

// server is one MCP server and the goroutine that keeps it connected.
type server struct {
	cfg       ServerConfig
	prefix    string
	m         *Manager
	log       *slog.Logger
	client    *mcp.Client
	http      *http.Client // for an HTTP server
	maxOutput int64

	ready     chan struct{} // closed after the first connection attempt
	readyOnce sync.Once
	refresh   chan struct{} // a tools/list_changed arrived
	broken    chan *mcp.ClientSession

	mu        sync.Mutex
	session   *mcp.ClientSession // nil when not connected
	lastErr   error
	toolCount int
	// refused is why the last tool list was refused for its preview
	// configuration (see errPreviewRefused); nil otherwise.
	refused error
	// listed is the digest of the last tool list registered (see sync).
	listed string
	// proc is a stdio server's running process, killed with its process
	// group by a Close that could not wait for it, or when a request to
	// it is abandoned (see abandon); nil when none runs. procSession is
	// its session.
	proc        *exec.Cmd
	procSession *mcp.ClientSession
	// closing is the last session watch closed (or is closing): a call on
	// it that the connection refused as closed was never written.
	closing *mcp.ClientSession
}

// killProcess kills a stdio server's process group, if one runs.
func (s *server) killProcess() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil {
		killGroup(s.proc)
	}
}

// setProc records the stdio server's running process and its session
// (nil: none).
func (s *server) setProc(cmd *exec.Cmd, cs *mcp.ClientSession) {
	s.mu.Lock()
	s.proc, s.procSession = cmd, cs
	s.mu.Unlock()
}

// errPreviewRefused marks a tool list refused because a configured preview
// tool is missing or not read-only: a configuration mistake, which makes
// Load fail rather than wait for the server to change.
var errPreviewRefused = errors.New("preview configuration refused")

func (m *Manager) newServer(cfg ServerConfig) *server {
	s := &server{
		cfg:       cfg,
		prefix:    cfg.Name + "__",
		m:         m,
		log:       m.log.With("mcp_server", cfg.Name),
		ready:     make(chan struct{}),
		refresh:   make(chan struct{}, 1),
		broken:    make(chan *mcp.ClientSession, 1),
		lastErr:   errors.New("not connected yet"),
		maxOutput: orDefault(cfg.MaxOutputBytes, DefaultMCPMaxOutputBytes),
	}
	if cfg.URL != "" {
		origin := ""
		if u, err := url.Parse(cfg.URL); err == nil {
			origin = urlOrigin(u)
		}
		s.http = &http.Client{
			Transport: &headerTransport{base: newHTTPTransport(), origin: origin, headers: cfg.Headers},
			CheckRedirect: func(req *http.Request, via []*http.Request) error {
				// Go would send a 307's or 308's POST again, the call's
				// arguments and its Mcp-Session-Id, to wherever it
				// points, http included.
				if origin == "" || urlOrigin(req.URL) != origin {
					return fmt.Errorf("the server redirected the request to %s: redirects to another scheme, host or port than the endpoint's are not followed", safeURL(req.URL.String()))
				}
				if len(via) >= 10 { // Go's own limit
					return errors.New("stopped after 10 redirects")
				}
				return nil
			},
		}
	}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "toolgate"}, &mcp.ClientOptions{
		Logger:       s.log,
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			// The tools as last listed are the server's no more: their
			// handlers refuse to call (see handler) until a listing is
			// registered, however long listing them fails. A tool that
			// became destructive would run as read-only meanwhile.
			s.mu.Lock()
			s.listed = ""
			s.mu.Unlock()
			select {
			case s.refresh <- struct{}{}:
			default:
			}
		},
	})
	// Every listing asks the server: the SDK keeps one for the ttlMs a
	// server gives it (protocol 2026-07-28) and drops it only on
	// tools/list_changed, which a stateless server redeployed never sends,
	// so that the listings at each ping and before a call would read the
	// old release's tools, annotations and defaults.
	s.client.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			res, err := next(ctx, method, req)
			if r, ok := res.(*mcp.ListToolsResult); ok && r != nil {
				r.TTLMs = 0
			}
			return res, err
		}
	})
	return s
}

func (s *server) transportName() string {
	if s.cfg.URL != "" {
		return "http"
	}
	return "stdio"
}

func (s *server) status() ServerStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ServerStatus{Name: s.cfg.Name, Transport: s.transportName(), Connected: s.session != nil, Tools: s.toolCount}
	if s.lastErr != nil {
		st.LastError = s.clean(s.lastErr).Error()
	}
	return st
}

// run keeps the server connected until ctx ends.
func (s *server) run(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		start := time.Now()
		err := s.serve(ctx)
		if ctx.Err() != nil {
			s.setDown(errors.New("the tool manager was closed"))
			return
		}
		if time.Since(start) >= s.m.opts.stable {
			attempt = 0
		}
		delay := s.m.opts.delay(attempt)
		s.log.Warn("mcp server unavailable", "err", err, "retry_in", delay.Round(time.Millisecond))
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			s.setDown(errors.New("the tool manager was closed"))
			return
		case <-t.C:
		}
	}
}

// serve connects once, registers the tools and watches the session until it
// ends, returning why.
func (s *server) serve(ctx context.Context) error {
	cs, stop, err := s.connect(ctx)
	defer stop()
	if err != nil {
		err = s.clean(err)
		s.setDown(err)
		return err
	}
	if err := s.syncBounded(ctx, cs); err != nil {
		err = s.clean(fmt.Errorf("list tools: %w", err))
		cs.Close()
		s.setDown(err)
		return err
	}
	// A session that failed while its watch was ending may have left its
	// signal; none can be there for cs, which no call has seen yet.
	select {
	case <-s.broken:
	default:
	}
	s.mu.Lock()
	s.session, s.lastErr = cs, nil
	n := s.toolCount
	s.mu.Unlock()
	s.markReady()
	s.log.Info("mcp server connected", "tools", n)

	err = s.clean(s.watch(ctx, cs))
	s.setDown(err)
	return err
}

// keptTransport is a CommandTransport whose process ReapOrphans leaves to
// its exec.Cmd (which the session's Close waits for) until waited is
// called.
type keptTransport struct {
	mcp.CommandTransport
	done func()
	// unwatch stops the kill of the process group that Connect sets off
	// should ctx end first (see started).
	unwatch func() bool
}

// Connect starts the process. Until started is called, the session's
// handshake under way, the process group is killed as ctx ends (the
// connect timeout, or the bot stopping): a server that never answers is
// gone at once, not after the SDK's own closing sequence (stdin closed,
// then SIGTERM, then SIGKILL, seconds apart), and none of its children
// outlives the bot.
func (t *keptTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	var conn mcp.Connection
	done, err := startKept(t.Command, func() (err error) {
		conn, err = t.CommandTransport.Connect(ctx)
		return err
	})
	t.done = done
	if t.Command.Process != nil {
		cmd := t.Command
		t.unwatch = context.AfterFunc(ctx, func() { killGroup(cmd) })
	}
	return conn, err
}

// started tells t that the session started: its process outlives the
// connect's context.
func (t *keptTransport) started() {
	if t.unwatch != nil {
		t.unwatch()
	}
}

// waited tells ReapOrphans that the process was waited for, if it started.
func (t *keptTransport) waited() {
	if t.done != nil {
		t.done()
	}
}

// connect starts a session. The caller calls stop once the session is
// closed (or failed to start): for a stdio server it kills what is left of
// the server's process group.
func (s *server) connect(ctx context.Context) (cs *mcp.ClientSession, stop func(), err error) {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.connectTimeout)
	defer cancel()
	if s.cfg.URL != "" {
		// The SDK's own bound on one event is not applied by this
		// transport when none is given (0 reads an event of any size).
		t := &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: s.http, MaxEventSize: maxMessageBytes}
		cs, err := s.client.Connect(ctx, t, nil)
		if err != nil {
			return nil, func() {}, fmt.Errorf("connect to %s: %w", safeURL(s.cfg.URL), err)
		}
		return cs, func() {}, nil
	}
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Dir = s.cfg.Dir
	cmd.Env = commandEnv(s.cfg.Env)
	stderr := &logWriter{log: s.log, redact: s.m.redact}
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	newProcessGroup(cmd)
	t := &keptTransport{CommandTransport: mcp.CommandTransport{Command: cmd}}
	stop = func() {
		s.setProc(nil, nil)
		killGroup(cmd)
		t.waited()
	}
	cs, err = s.client.Connect(ctx, t, nil)
	if err == nil {
		// Started (Connect wrote cmd.Process): Close may kill it now.
		t.started()
		s.setProc(cmd, cs)
	}
	if err != nil {
		var details []string
		if cmd.ProcessState != nil {
			details = append(details, cmd.ProcessState.String())
		}
		if l := stderr.lastLine(); l != "" {
			details = append(details, fmt.Sprintf("last stderr line %q", l))
		}
		if len(details) > 0 {
			return nil, stop, fmt.Errorf("start %s (%s): %w", s.cfg.Command[0], strings.Join(details, "; "), err)
		}
		return nil, stop, fmt.Errorf("start %s: %w", s.cfg.Command[0], err)
	}
	return cs, stop, nil
}

// watch waits until the session ends, ctx ends or a call finds the server
// gone, answering list_changed notifications and pinging meanwhile. It
// closes the session before returning, having first taken it out of use
// (see closeSession): closing waits for the calls in flight.
func (s *server) watch(ctx context.Context, cs *mcp.ClientSession) (err error) {
	ended := make(chan error, 1)
	s.m.wg.Go(func() { ended <- cs.Wait() })
	closed := false
	closeSession := func(why error) error {
		closed = true
		return s.closeSession(cs, why)
	}
	defer func() {
		if !closed {
			closeSession(err)
		}
	}()

	ping := time.NewTicker(s.m.opts.pingInterval)
	defer ping.Stop()
	// stale is set while a listing the server asked for has not been made.
	stale := false
	for {
		select {
		case <-ctx.Done():
			closeSession(errors.New("the tool manager was closed"))
			return ctx.Err()
		case err := <-ended:
			why := errors.New("the server closed the connection")
			if err != nil {
				why = fmt.Errorf("the connection ended: %w", err)
			}
			if closeErr := closeSession(why); closeErr != nil {
				return fmt.Errorf("the server exited: %v", closeErr)
			}
			return why
		case b := <-s.broken:
			if b == cs {
				s.mu.Lock()
				err := s.lastErr
				s.mu.Unlock()
				return err
			}
		case <-s.refresh:
			listed, err := s.relist(ctx, cs)
			if err != nil {
				return err
			}
			stale = !listed
		case <-ping.C:
			pctx, cancel := context.WithTimeout(ctx, s.m.opts.pingTimeout)
			pctx, probe := s.probe(pctx)
			// The ping waits for the session's write lock, which a call
			// stuck in a write to a stdio server that reads no more
			// holds: await returns all the same.
			_, abandoned, err := await(s.m, pctx, func() (struct{}, error) {
				return struct{}{}, cs.Ping(pctx, nil)
			})
			cancel()
			if abandoned {
				err := fmt.Errorf("ping: no answer within %s, and the ping could not even be sent: the server takes no more input", s.m.opts.pingTimeout)
				s.abandon(cs, err)
				return err
			}
			if err != nil && breaks(err, probe) && ctx.Err() == nil {
				return fmt.Errorf("ping: %w", err)
			}
			if stale || s.http != nil && cs.ID() == "" {
				// A listing that list_changed asked for and that failed
				// is made again at each ping until it is made: the tools
				// (and their annotations, which the policy reads) would
				// stay as they were before the change. A server that
				// keeps no session (stateless HTTP) tells of no restart,
				// and a new version of it could not send list_changed to
				// a session it never saw: its tools are listed again at
				// each ping.
				listed, err := s.relist(ctx, cs)
				if err != nil {
					return err
				}
				stale = !listed
			}
		}
	}
}

// relist lists the tools of cs again (see sync), and reports whether it
// did. It returns the error that ends the session, if the listing's
// failure says the server is gone; any other failure is logged, and the
// tools stay as they were until a listing is made.
func (s *server) relist(ctx context.Context, cs *mcp.ClientSession) (listed bool, err error) {
	lctx, probe := s.probe(ctx)
	err = s.syncBounded(lctx, cs)
	switch {
	case err == nil:
		return true, nil
	case breaks(err, probe):
		return false, fmt.Errorf("list tools: %w", err)
	}
	s.log.Warn("refreshing mcp tools failed; listing them again at the next ping", "err", s.clean(err))
	return false, nil
}

// closeSession closes cs, which watch watched, once it has taken it out
// of use with why as the reason: calls made while it closes (closing
// waits for the calls in flight) then find the server down, with why,
// rather than a session that refuses them; and one that got it before
// is refused by the closing connection before its request is written,
// which delivered tells by s.closing.
func (s *server) closeSession(cs *mcp.ClientSession, why error) error {
	why = s.clean(why)
	s.mu.Lock()
	s.closing = cs
	if s.session == cs {
		s.session, s.lastErr = nil, why
	}
	s.mu.Unlock()
	return cs.Close()
}

func (s *server) setDown(err error) {
	s.mu.Lock()
	s.session, s.lastErr = nil, err
	s.mu.Unlock()
	s.markReady()
}

func (s *server) markReady() { s.readyOnce.Do(func() { close(s.ready) }) }

// fail records that a call found cs unusable and wakes the supervisor.
func (s *server) fail(cs *mcp.ClientSession, err error) {
	err = s.clean(err)
	s.mu.Lock()
	if s.session != cs {
		s.mu.Unlock()
		return
	}
	s.session, s.lastErr = nil, err
	s.mu.Unlock()
	select {
	case s.broken <- cs:
	default:
	}
}

// abandon gives cs up after a request on it was abandoned (see await):
// cs is failed with err, and a stdio server's process group is killed,
// which ends the write the request is stuck in (the pipe's reader gone,
// it fails), frees the session's write lock for the requests queued
// behind it, and lets the session close so that the server is started
// again.
func (s *server) abandon(cs *mcp.ClientSession, err error) {
	s.fail(cs, err)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && s.procSession == cs {
		s.log.Warn("killing the mcp server's process group: a request to it could not be sent", "err", s.clean(err))
		killGroup(s.proc)
	}
}

// outcome is what a function run by await returned.
type outcome[T any] struct {
	v   T
	err error
}

// await runs f, a request on a session made with ctx, in a goroutine of
// the manager's (Close waits for it) and returns what f returns, or, if f
// has not returned abandonAfter once ctx has ended, abandoned. The SDK
// watches ctx while it waits for an answer but not while it writes a
// request to a stdio server: a server that stops reading its input
// leaves the write blocked in the pipe once the pipe is full (64 KiB of a
// call's arguments), holding the session's write lock, for which every
// later request (the pings too) waits, whatever its context. The caller
// of an abandoned request abandons its session (see abandon), which ends
// f. The caller must be a goroutine of the manager's, or hold a count of
// its WaitGroup, so that the count is not zero while Close may wait.
func await[T any](m *Manager, ctx context.Context, f func() (T, error)) (v T, abandoned bool, err error) {
	done := make(chan outcome[T], 1)
	m.wg.Go(func() {
		v, err := f()
		done <- outcome[T]{v, err}
	})
	select {
	case o := <-done:
		return o.v, false, o.err
	case <-ctx.Done():
	}
	t := time.NewTimer(m.opts.abandonAfter)
	defer t.Stop()
	select {
	case o := <-done:
		return o.v, false, o.err
	case <-t.C:
		return v, true, ctx.Err()
	}
}

// codeRejected is what the SDK calls a request the transport rejected
// (an error code it does not export). Over HTTP it tags with it every
// failure of the request (a connection cut after the request was written
// too) and every answer it counts as transient (429, 500, 502, 503, 504,
// which may come from a proxy after the server ran the call), so it
// proves neither that the request did not reach the server nor that the
// connection is broken.
const codeRejected = -32005

// isTransportError reports whether err means the server could not be
// reached, as opposed to the server answering with a JSON-RPC error. The
// SDK wraps a server's error before any transport code, so the first
// JSON-RPC error in the chain tells which. (The SDK's errors for a
// closing connection, its client or its server closing, are
// [mcp.ErrConnectionClosed] with no JSON-RPC error in their chain.)
func isTransportError(err error) bool {
	werr, ok := errors.AsType[*jsonrpc.Error](err)
	return !ok || werr.Code == codeRejected
}

// maxTools bounds how many tools one server may list.
const maxTools = 1000

// syncBounded is sync within the connect timeout: a server that never
// answers the list (or pages it forever) neither holds up the bot's start
// nor stalls the session's watch.
func (s *server) syncBounded(ctx context.Context, cs *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, s.m.opts.connectTimeout)
	defer cancel()
	err := s.sync(ctx, cs)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("no complete answer within %s: %w", s.m.opts.connectTimeout, err)
	}
	return err
}

// sync lists the server's tools and replaces its tools in the registry.
// A configured preview tool that is missing or not read-only fails it: the
// server's tools stay out rather than run a tool with effects as a preview.
func (s *server) sync(ctx context.Context, cs *mcp.ClientSession) error {
	var listed []*mcp.Tool
	byName := map[string]*mcp.Tool{}
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		if len(listed) == maxTools {
			return fmt.Errorf("the server lists more than %d tools", maxTools)
		}
		listed = append(listed, t)
		byName[t.Name] = t
	}
	for target, name := range s.cfg.Preview {
		p, ok := byName[name]
		switch {
		case !ok:
			return s.refuse(fmt.Errorf("preview tool %q of %q: the server has no such tool: %w", name, target, errPreviewRefused))
		case p.Annotations == nil || !p.Annotations.ReadOnlyHint:
			return s.refuse(fmt.Errorf("preview tool %q of %q: it is not annotated readOnlyHint: %w", name, target, errPreviewRefused))
		}
		if _, ok := byName[target]; !ok {
			return s.refuse(fmt.Errorf("preview tool %q: the server has no tool %q to preview: %w", name, target, errPreviewRefused))
		}
	}
	// A listing like the last one registered changes nothing (a server
	// without sessions is listed at every ping).
	digest := listingDigest(listed)
	s.mu.Lock()
	same := digest != "" && digest == s.listed && s.refused == nil
	s.mu.Unlock()
	if same {
		return nil
	}
	// Tools whose names become one (repos.delete and repos_delete) are all
	// left out: which one a name called would depend on the order the
	// server lists them in, and a rule or a standing approval for one
	// would apply to the other after a restart.
	var tools []agent.Tool
	seen := map[string][]string{}
	for _, t := range listed {
		tool, err := s.convert(t, digest)
		if err != nil {
			s.log.Warn("skipping mcp tool", "tool", t.Name, "err", err)
			continue
		}
		if p, ok := s.cfg.Preview[t.Name]; ok {
			tool.Preview = s.previewer(p, digest)
		}
		tool = redactedTool(s.m.output, tool)
		seen[tool.Name] = append(seen[tool.Name], t.Name)
		tools = append(tools, tool)
	}
	tools = slices.DeleteFunc(tools, func(tool agent.Tool) bool {
		if names := seen[tool.Name]; len(names) > 1 {
			s.log.Warn("skipping mcp tool", "tool", tool.Name, "err", fmt.Sprintf("tools %q all take the name %s", names, tool.Name))
			return true
		}
		return false
	})
	// The listing is the server's from now on: the handlers of the
	// tools registered from an earlier one refuse to call (see handler),
	// before these replace them.
	s.mu.Lock()
	s.listed = digest
	s.mu.Unlock()
	if err := s.m.reg.Replace(func(name string) bool { return strings.HasPrefix(name, s.prefix) }, tools); err != nil {
		s.mu.Lock()
		s.listed = "" // registered again at the next listing
		s.mu.Unlock()
		return fmt.Errorf("register tools: %w", err)
	}
	s.mu.Lock()
	s.toolCount, s.refused = len(tools), nil
	s.mu.Unlock()
	return nil
}

// listingDigest is a digest of a server's listed tools, or "" if they
// cannot be encoded.
func listingDigest(listed []*mcp.Tool) string {
	b, err := json.Marshal(listed)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// refuse records err as why the tool list was refused and returns it.
func (s *server) refuse(err error) error {
	s.mu.Lock()
	s.refused = err
	s.mu.Unlock()
	return err
}

// previewer calls the read-only MCP tool name with a call's arguments and
// returns its text as the call's preview. A tool error, an unavailable
// server or ctx's end (the agent bounds previews) is an error: the card
// then says the preview is unavailable.
func (s *server) previewer(name, listing string) agent.PreviewFunc {
	call := s.handler(name, approvals.Hints{ReadOnly: true}, listing)
	return func(ctx context.Context, args json.RawMessage) (string, error) {
		res, err := call(ctx, args)
		if err != nil {
			return "", err
		}
		if res.IsError {
			return "", errors.New(res.Content)
		}
		return res.Content, nil
	}
}

// convert turns an MCP tool, of the listing whose digest is listing, into
// an agent tool calling it through s.
func (s *server) convert(t *mcp.Tool, listing string) (agent.Tool, error) {
	var schema json.RawMessage
	if t.InputSchema != nil {
		b, err := json.Marshal(t.InputSchema)
		if err != nil {
			return agent.Tool{}, fmt.Errorf("input schema: %w", err)
		}
		schema = b
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	h := hints(t.Annotations)
	tool := agent.Tool{
		Name:        toolName(s.prefix, t.Name),
		Description: desc,
		Schema:      schema,
		Annotations: h,
		Handler:     s.handler(t.Name, h, listing),
		Origin:      s.origin(),
	}
	// Check it alone so that one bad tool does not keep the others out.
	if err := agent.NewRegistry().Register(tool); err != nil {
		return agent.Tool{}, err
	}
	return tool, nil
}

// origin is where the server's tools' calls go, as configured (see
// agent.Tool.Origin): its name and its URL's scheme, host and path, or
// its program and directory. Credentials a URL or a command's arguments
// carry are left out: rotating a token does not make the same server's
// tools others, which would refuse every approved call of theirs.
func (s *server) origin() string {
	if s.cfg.URL != "" {
		if u, err := url.Parse(s.cfg.URL); err == nil {
			return "mcp " + s.cfg.Name + " " + u.Scheme + "://" + u.Host + u.Path
		}
		return "mcp " + s.cfg.Name
	}
	program := ""
	if len(s.cfg.Command) > 0 {
		program = s.cfg.Command[0]
	}
	return "mcp " + s.cfg.Name + " " + program + " in " + s.cfg.Dir
}

func hints(a *mcp.ToolAnnotations) approvals.Hints {
	if a == nil {
		return approvals.Hints{}
	}
	h := approvals.Hints{ReadOnly: a.ReadOnlyHint, Idempotent: a.IdempotentHint}
	if a.DestructiveHint != nil {
		h.Destructive = ptr(*a.DestructiveHint)
	}
	return h
}

var invalidNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// toolName is prefix+name with characters OpenAI refuses replaced by "_"
// and cut to 64 characters.
func toolName(prefix, name string) string {
	n := prefix + invalidNameChars.ReplaceAllString(name, "_")
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// breaks reports whether err, the failure of a request made with probe
// (nil for a stdio server), means that the session is unusable: a
// transport error, unless an HTTP status the SDK counts as transient (a
// 429 or a 503 of a busy server or its proxy) answered the request, which
// leaves the session as it was.
func breaks(err error, probe *callProbe) bool {
	return isTransportError(err) && !probe.transient()
}

// notSentRelisted is the result of a call not sent because its server
// listed its tools again, or said they changed, since it was checked.
const notSentRelisted = "not performed: MCP server %s listed its tools again, or said they changed, since this call was checked (redeployed, or its tools changed), so the call was not sent: call the tool again, for a new approval if it needs one, if it is still needed."

// handler calls the MCP tool name, with hints h, on the server's current
// session. Registered from the listing whose digest is listing (if set),
// it calls only while that listing is the server's: a call checked
// against the tool as that listing gave it (its arguments, with the
// defaults its schema fills in, the policy's verdict on its hints) is
// never sent to a server that listed the tool otherwise since (a
// redeploy, a tools/list_changed), which could run it with a default no
// card showed.
func (s *server) handler(name string, h approvals.Hints, listing string) agent.Handler {
	return func(ctx context.Context, args json.RawMessage) (agent.Result, error) {
		s.mu.Lock()
		if listing != "" && s.listed != listing {
			s.mu.Unlock()
			return agent.NotSentResult(fmt.Sprintf(notSentRelisted, s.cfg.Name)), nil
		}
		cs, lastErr := s.session, s.lastErr
		if cs != nil {
			// Held until the handler returns, for await: while cs is
			// the session, its run has not ended, so the count is not
			// zero.
			s.m.wg.Add(1)
		}
		s.mu.Unlock()
		if cs == nil {
			return s.unavailable(lastErr), nil
		}
		defer s.m.wg.Done()
		if listing != "" && !h.ReadOnly && s.http != nil && cs.ID() == "" {
			// A server that keeps no session (stateless HTTP) tells of
			// no redeploy, and is listed again only at each ping: a
			// call with effects is sent only once its tools are listed
			// as they were when it was checked.
			if err := s.syncBounded(ctx, cs); err != nil {
				return s.unavailable(fmt.Errorf("list its tools before the call: %w", err)), nil
			}
			s.mu.Lock()
			relisted := s.listed != listing
			s.mu.Unlock()
			if relisted {
				return agent.NotSentResult(fmt.Sprintf(notSentRelisted, s.cfg.Name)), nil
			}
		}
		params := &mcp.CallToolParams{Name: name}
		if len(bytes.TrimSpace(args)) > 0 {
			params.Arguments = args
		}
		cctx, probe := s.probe(ctx)
		res, abandoned, err := await(s.m, ctx, func() (*mcp.CallToolResult, error) {
			return cs.CallTool(cctx, params)
		})
		if abandoned {
			// Stuck writing the request: part of it may have reached
			// the server. The agent tells the model that the call
			// timed out, and that its outcome is unknown unless the
			// tool is read-only or idempotent.
			s.abandon(cs, fmt.Errorf("the server takes no more input: the call to %s could not be sent before its deadline", name))
			return agent.Result{}, fmt.Errorf("call %s on mcp server %s: %w (the server took no more input; it is being restarted)", name, s.cfg.Name, ctx.Err())
		}
		if err != nil {
			if ctx.Err() != nil {
				return agent.Result{}, fmt.Errorf("call %s on mcp server %s: %w", name, s.cfg.Name, ctx.Err())
			}
			if !isTransportError(err) {
				return capResult(s.answeredError(name, h, err), s.maxOutput), nil
			}
			kept := !breaks(err, probe)
			if !kept {
				s.fail(cs, err)
			}
			closing := s.wasClosing(cs)
			sent := delivered(err, probe, closing)
			if !sent || h.ReadOnly || h.Idempotent {
				if kept {
					return s.busy(err), nil
				}
				if closing {
					// Refused by the session being closed: why it
					// was closed says more.
					err = s.downReason(err)
				}
				if sent {
					// The server may have run it: safe to call again
					// (read-only or idempotent), but not "not sent".
					return s.mayHaveRun(name, err), nil
				}
				return s.unavailable(err), nil
			}
			return capResult(agent.UnknownOutcomeResult(fmt.Sprintf("MCP server %s gave no answer to the call to %s (%v): %s", s.cfg.Name, name, s.clean(err), agent.UnknownOutcome)), s.maxOutput), nil
		}
		return capResult(toResult(res), s.maxOutput), nil
	}
}

// answeredError is the result of a call to the tool name, with hints h,
// that the server answered with the JSON-RPC error err. The SDKs answer
// with one for a tool they do not know or arguments they refuse
// (-32601, -32602), before running anything: the call was refused. But
// the Go SDK answers with one, code 0, for a tool handler's error too,
// and a handler may fail after it has had effects: unless the tool is
// read-only or idempotent, that call's outcome is unknown, and the model
// must not read "refused" and try it again.
func (s *server) answeredError(name string, h approvals.Hints, err error) agent.Result {
	if werr, ok := errors.AsType[*jsonrpc.Error](err); ok {
		switch werr.Code {
		case jsonrpc.CodeMethodNotFound, jsonrpc.CodeInvalidParams:
			return errorResult("MCP server %s refused the call to %s: %v", s.cfg.Name, name, s.clean(err))
		}
	}
	if h.ReadOnly || h.Idempotent {
		return errorResult("MCP server %s failed the call to %s: %v", s.cfg.Name, name, s.clean(err))
	}
	// The server's message, which may be long, comes last, so that a cut
	// result still says the outcome is unknown.
	return agent.UnknownOutcomeResult(fmt.Sprintf("MCP server %s failed the call to %s: %s The server's error: %v", s.cfg.Name, name, agent.UnknownOutcome, s.clean(err)))
}

// wasClosing reports whether cs is the session watch closed last (or is
// closing).
func (s *server) wasClosing(cs *mcp.ClientSession) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing == cs
}

// downReason is why the server is down, if it is and says why, or err.
func (s *server) downReason(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.session == nil && s.lastErr != nil {
		return s.lastErr
	}
	return err
}

// delivered reports whether a call that failed with the transport error
// err, its request followed by probe (nil for a stdio server), may have
// reached the server: all but a call the connection refused to send, a
// request that never got a connection (the server's address not found,
// the connection refused) and one the server answered 404, as a server
// that restarted answers for a session it no longer knows without running
// the call. The SDK's "rejected by transport" is no proof (see
// codeRejected): it tags a proxy's 504 and a connection cut after the
// request was written too.
//
// closing says that the call's session is one this process was closing:
// the connection then refuses new requests, before writing them, with
// [mcp.ErrConnectionClosed], while the requests it wrote before end with
// an answer or with the connection's end, another error. (An answer with
// the error code of a closing server, -32004, is taken for the same; a
// server of the Go SDK sends it for a request it refuses, unrun, while it
// closes.) Out of that, the error is no proof: the SDK's refusal of a
// request on a connection that broke and such an answer look the same.
func delivered(err error, probe *callProbe, closing bool) bool {
	if probe != nil {
		probe.mu.Lock()
		sent, status := probe.sent, probe.status
		probe.mu.Unlock()
		if !sent || status == http.StatusNotFound {
			return false
		}
	}
	if closing && errors.Is(err, mcp.ErrConnectionClosed) {
		return false
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return false
	}
	return true
}

// StandInName is the name of the stand-in tool of the MCP server named
// server (see standIn).
func StandInName(server string) string { return server + "__unavailable" }

// standIn is the tool registered for a server that has not listed its
// tools yet (it is starting, or failed to start): calling it answers that
// the server is unavailable and why. The server's tools replace it once it
// connects. It is read-only, so no one is asked to approve it.
func (s *server) standIn() agent.Tool {
	return agent.Tool{
		Name:        StandInName(s.cfg.Name),
		Description: fmt.Sprintf("The MCP server %s is not connected, so its tools are not available yet. Call this to learn why.", s.cfg.Name),
		Schema:      json.RawMessage(`{"type":"object","properties":{}}`),
		Annotations: approvals.Hints{ReadOnly: true},
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			s.mu.Lock()
			err := s.lastErr
			s.mu.Unlock()
			if err == nil {
				err = errors.New("its tools are being listed")
			}
			return s.unavailable(err), nil
		},
	}
}

func (s *server) unavailable(err error) agent.Result {
	return agent.NotSentResult(fmt.Sprintf("MCP server %s is unavailable, so the call was not sent: %v. It is being reconnected; try again later or do without it.", s.cfg.Name, s.clean(err)))
}

// mayHaveRun is what a call of the read-only or idempotent tool name is
// told when the server got it and gave no answer (err): it may have run,
// and calling it again is safe.
func (s *server) mayHaveRun(name string, err error) agent.Result {
	return errorResult("MCP server %s gave no answer to the call to %s (%v): it may have run; the tool is read-only or idempotent, so it is safe to call again once the server is back. It is being reconnected.", s.cfg.Name, name, s.clean(err))
}

// busy is what a call that may be tried again is told when the server (or
// its proxy) answered with a transient status: the session stays.
func (s *server) busy(err error) agent.Result {
	return errorResult("MCP server %s is unavailable for now: %v. Try again later or do without it.", s.cfg.Name, s.clean(err))
}

// capResult truncates r's content to at most max bytes, not cutting a
// character, and says how much was left out.
func capResult(r agent.Result, max int64) agent.Result {
	if int64(len(r.Content)) <= max {
		return r
	}
	kept := r.Content[:max]
	for len(kept) > 0 && !utf8.ValidString(kept) {
		kept = kept[:len(kept)-1]
	}
	r.Content = fmt.Sprintf("%s\n[output truncated: %d more bytes not shown]\n", kept, len(r.Content)-len(kept))
	return r
}

// toResult turns an MCP tool result into text for the model: text content
// as is, other content summarized, and structured content as JSON unless the
// text already says the same.
func toResult(r *mcp.CallToolResult) agent.Result {
	var parts []string
	for _, c := range r.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image: %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio: %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s: %s]", c.Name, c.URI))
		case *mcp.EmbeddedResource:
			switch {
			case c.Resource == nil:
			case c.Resource.Text != "":
				parts = append(parts, c.Resource.Text)
			default:
				parts = append(parts, fmt.Sprintf("[resource %s: %s, %d bytes]", c.Resource.URI, c.Resource.MIMEType, len(c.Resource.Blob)))
			}
		default:
			if b, err := json.Marshal(c); err == nil {
				parts = append(parts, string(b))
			}
		}
	}
	text := strings.Join(parts, "\n")
	if r.StructuredContent != nil {
		if b, err := json.Marshal(r.StructuredContent); err == nil && !sameJSON(text, b) {
			if text != "" {
				text += "\n"
			}
			text += string(b)
		}
	}
	if r.IsError {
		// The model reads only the text: it must say that the tool failed,
		// or a failure may be reported as done.
		if strings.TrimSpace(text) == "" {
			text = "the tool reported an error, with no message"
		} else {
			text = "the tool reported an error: " + text
		}
	}
	return agent.Result{Content: text, IsError: r.IsError}
}

// sameJSON reports whether text is JSON equal to b.
func sameJSON(text string, b []byte) bool {
	var x, y any
	if json.Unmarshal([]byte(text), &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// headerTransport adds configured headers to the requests to origin (the
// endpoint's scheme://host:port), and only to them: a redirect to another
// host does not get them.
type headerTransport struct {
	base    http.RoundTripper
	origin  string
	headers map[string]string
}

// maxMessageBytes bounds one message from an HTTP server, as the SDK
// bounds a stdio line and an event of a stream: a response to a request
// (a tool call, the tool list) is read whole before anything of it is
// used, so a server could otherwise fill the bot's memory.
const maxMessageBytes = 16 << 20

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	probe, _ := r.Context().Value(probeKey{}).(*callProbe)
	if r.Method != http.MethodPost {
		// The stream of events a call's answer may come on is read with
		// the call's context too; only its request counts.
		probe = nil
	}
	first := false
	if probe != nil {
		r, first = probe.follow(r)
	}
	if len(t.headers) > 0 && t.origin != "" && urlOrigin(r.URL) == t.origin {
		r = r.Clone(r.Context())
		for k, v := range t.headers {
			r.Header.Set(k, v)
		}
	}
	resp, err := t.base.RoundTrip(r)
	if probe != nil && err == nil {
		probe.answered(first, resp.StatusCode)
	}
	if err == nil && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// A stream is read event by event, each bounded by the SDK.
		resp.Body = &bodylimit.Body{ReadCloser: resp.Body, Total: maxMessageBytes, TooLarge: func(bool) error {
			return fmt.Errorf("the server's response is larger than %d MiB", maxMessageBytes>>20)
		}}
	}
	return resp, err
}

// callProbe follows the HTTP requests of one call (or ping, or tool list)
// to an HTTP server, to tell what became of them where the SDK's errors do
// not (see codeRejected). Its first POST is the call's own request; a
// later one (a tool list's next page) is another request of the same
// work.
type callProbe struct {
	mu    sync.Mutex
	posts int
	// sent says that the first request got a connection: from then on its
	// bytes may reach the server. (httptrace's WroteRequest is no later
	// proof: an HTTP/1 request is flushed after it, and it may come after
	// the round trip has failed.)
	sent bool
	// status answered the first request, 0 if none did; lastStatus the
	// last one.
	status, lastStatus int
}

type probeKey struct{}

// probe returns ctx with a new probe for the requests made with it, or ctx
// and nil for a stdio server.
func (s *server) probe(ctx context.Context) (context.Context, *callProbe) {
	if s.http == nil {
		return ctx, nil
	}
	p := &callProbe{}
	return context.WithValue(ctx, probeKey{}, p), p
}

// follow counts the POST r and reports whether it is the first; it
// returns the first with a trace that marks it sent once it gets a
// connection.
func (p *callProbe) follow(r *http.Request) (*http.Request, bool) {
	p.mu.Lock()
	p.posts++
	first := p.posts == 1
	p.mu.Unlock()
	if !first {
		return r, false
	}
	return r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			p.mu.Lock()
			p.sent = true
			p.mu.Unlock()
		},
	})), true
}

// answered records the status that answered one of the probe's requests,
// the first or a later one.
func (p *callProbe) answered(first bool, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if first {
		p.status = status
	}
	p.lastStatus = status
}

// transient reports whether the last request was answered with a status
// the SDK counts as transient, keeping the session: 429, 500, 502, 503 or
// 504. A nil probe (a stdio server) has none.
func (p *callProbe) transient() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.lastStatus {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// logWriter logs each line a stdio server writes to stderr and keeps the
// last one. A line is logged whole, so that the log's redaction sees every
// secret in it at once: a line longer than maxLogLine is left out (its
// length is logged), never logged in pieces that could each hold part of
// a secret.
type logWriter struct {
	log *slog.Logger
	// redact hides the configuration's secrets in each line, before it is
	// logged or kept: the last line is quoted in an error, where escaping
	// could change how a secret is written.
	redact redact.Redactor
	mu     sync.Mutex
	buf    []byte
	last   string
	// cut counts the bytes of a line too long to log, left out so far.
	cut int
}

func (w *logWriter) lastLine() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

const maxLogLine = 16 << 10

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			if len(w.buf) > maxLogLine {
				w.cut += len(w.buf)
				w.buf = w.buf[:0]
			}
			break
		}
		if w.cut > 0 {
			w.log.Warn("mcp server stderr: a line too long to log left out", "bytes", w.cut+i, "limit", maxLogLine)
			w.cut = 0
		} else {
			w.emit(w.buf[:i])
		}
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) emit(line []byte) {
	if l := strings.TrimSpace(w.redact.String(string(line))); l != "" {
		w.last = l
		w.log.Info("mcp server stderr", "line", l)
	}
}

// urlOrigin is u's scheme, host and port, lower case and with the default
// port filled in, to tell whether two URLs reach the same server.
func urlOrigin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = defaultPort(scheme)
	}
	return scheme + "://" + net.JoinHostPort(normalizeHost(u.Hostname()), port)
}

// safeURL is raw without user information, path, query and fragment:
// scheme://host[:port], which is all errors and statuses show of a URL.
func safeURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		if scheme, _, ok := strings.Cut(raw, "://"); ok {
			return scheme + "://[url hidden]"
		}
		return "[url hidden]"
	}
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

var urlInText = regexp.MustCompile(`(?i)\bhttps?://[^\s"'<>]+`)

// sessionIDInText matches the session ids the SDK's errors quote ("failed
// to connect (session ID: ...)", "mismatching session IDs "..." and
// "..."").
var sessionIDInText = regexp.MustCompile(`(session ID: )[^\s)]+|(session IDs )"(?:[^"\\]|\\.)*" and "(?:[^"\\]|\\.)*"`)

// cleanError returns err with every http or https URL in its message cut
// to scheme://host[:port], so that a key in a URL's user information, path
// or query stays out of statuses, logs and the model's view, and with the
// MCP session ids it quotes hidden: with one, whoever reaches the server
// could act in the bot's session. errors.Is and errors.As still see err.
func cleanError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := urlInText.ReplaceAllStringFunc(msg, func(u string) string {
		// Keep punctuation that ends a sentence out of the URL.
		trimmed := strings.TrimRight(u, ".,;:)]}")
		return safeURL(trimmed) + u[len(trimmed):]
	})
	clean = sessionIDInText.ReplaceAllString(clean, "${1}${2}[hidden]")
	if clean == msg {
		return err
	}
	return &cleanedError{msg: clean, err: err}
}

// clean is cleanError with the configuration's secrets hidden too.
func (s *server) clean(err error) error {
	return s.m.redact.Error(cleanError(err))
}

type cleanedError struct {
	msg string
	err error
}

func (e *cleanedError) Error() string { return e.msg }

func (e *cleanedError) Unwrap() error { return e.err }
