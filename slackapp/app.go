package slackapp

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Config configures an App. Zero values get the defaults noted.
type Config struct {
	// BotToken (xoxb-) and AppToken (xapp-, for Socket Mode) are required.
	BotToken string
	AppToken string
	// APIURL is the Web API base URL, with a trailing slash (default
	// Slack's). Tests and the playground point it at a fake.
	APIURL string
	// AdminUsers may change policies with /approvals, as may workspace
	// admins and owners.
	AdminUsers []string
	// ApprovalsChannel, when set, receives a copy of each card whose
	// approvers cannot see the conversation, instead of DMs to them.
	ApprovalsChannel string
	// Workers is how many turns run at once (default 8). Work on one
	// conversation always runs in order on the same worker.
	Workers int
	// QueueSize bounds the work waiting per worker (default 256); when a
	// queue is full the user is told to retry, nothing is dropped silently.
	QueueSize int
	// SweepInterval is how often due approvals are expired and lost
	// resumes recovered (default 30s).
	SweepInterval time.Duration
	// TakeoverInterval is how often the app looks for conversations with
	// recorded messages that no turn answered (their process died, or
	// their turn never started) and takes them over (default 5s). With
	// the agent's defaults a turn that died with its process is taken over
	// within LeaseTTL + TakeoverInterval (15 s) of the crash.
	TakeoverInterval time.Duration
	// ShutdownGrace bounds how long in-flight work may take to finish on
	// shutdown (default 30s). Notes about work cut short may take a few
	// seconds more (see noteAllowance); Run returns within about
	// ShutdownGrace plus that.
	ShutdownGrace time.Duration
	// MaxHandlers bounds the interactive handlers (slash commands, clicks,
	// modal submissions, Home tabs) running at once (default 128). Past it
	// an envelope is answered with "busy" at once (a slash command or a
	// modal submission), a click is dropped and the clicker told so
	// privately (through a small bounded queue; if that is full too, the
	// click is dropped with a log line and a metric), and a Home tab is
	// dropped with a log line, so a burst never starts unbounded goroutines
	// nor slows the reading of envelopes.
	MaxHandlers int
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Metrics, if set, is updated as envelopes, turns and decisions go by.
	Metrics *Metrics
	// HTTPClient is used for the Web API (default a client with a 30s
	// timeout).
	HTTPClient *http.Client
	// Debug logs every Socket Mode message (never tokens).
	Debug bool
}

// Store is what the Slack app keeps itself, beside the agent's state.
type Store interface {
	SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error)
	PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error)
	Records(ctx context.Context, kind string) ([]store.Record, error)
	DeleteRecord(ctx context.Context, kind, id string) error
	AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)
	Ping(ctx context.Context) error
}

// App is the Slack side of the bot: it turns Socket Mode envelopes into
// agent turns and decisions, and renders what the agent reports.
type App struct {
	cfg      Config
	api      *slack.Client
	sm       *socketmode.Client
	st       *storeGate
	policy   *approvals.Engine
	log      *slog.Logger
	m        *Metrics
	groups   *groupCache
	audience *audienceCache

	ag atomic.Pointer[agent.Agent]

	teamID    string
	botUserID string
	botID     string

	connected atomic.Bool
	sweeping  atomic.Bool
	// takingOver is set while a takeover scan runs.
	takingOver atomic.Bool
	// spawnSlots bounds the goroutines spawn starts.
	spawnSlots chan struct{}
	shards     []chan job
	closing    atomic.Bool
	workers    sync.WaitGroup
	spawned    sync.WaitGroup
	sweeps     sync.WaitGroup
	workCtx    context.Context
	stopWork   context.CancelFunc
	// notesCtx ends at the shutdown deadline: the end of the grace period
	// plus noteAllowance. Every note, clean-up and card update made with
	// noteContext ends with it.
	notesCtx  context.Context
	stopNotes context.CancelFunc
	// notices feeds the notifier, which tells people privately that their
	// click was not handled.
	notices     chan notice
	noticesDone chan struct{}
	cards       *cardUpdater
	mu          sync.Mutex
	admins      map[string]bool
}

// job is a piece of work for one conversation.
type job struct {
	key string
	run func(ctx context.Context)
}

// New returns an App. It does not connect: Run does.
func New(cfg Config, st Store, policy *approvals.Engine) (*App, error) {
	if !strings.HasPrefix(cfg.BotToken, "xoxb-") {
		return nil, errors.New("slack bot token must start with xoxb-")
	}
	if !strings.HasPrefix(cfg.AppToken, "xapp-") {
		return nil, errors.New("slack app token must start with xapp-")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 256
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 30 * time.Second
	}
	if cfg.TakeoverInterval <= 0 {
		cfg.TakeoverInterval = 5 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.MaxHandlers <= 0 {
		cfg.MaxHandlers = 128
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	opts := []slack.Option{
		slack.OptionAppLevelToken(cfg.AppToken),
		slack.OptionHTTPClient(cfg.HTTPClient),
		slack.OptionRetryConfig(retryConfig()),
	}
	if cfg.APIURL != "" {
		u := cfg.APIURL
		if !strings.HasSuffix(u, "/") {
			u += "/"
		}
		opts = append(opts, slack.OptionAPIURL(u))
	}
	api := slack.New(cfg.BotToken, opts...)
	a := &App{cfg: cfg, api: api, st: &storeGate{s: st}, policy: policy, log: cfg.Logger, m: cfg.Metrics, admins: map[string]bool{}}
	for _, u := range cfg.AdminUsers {
		a.admins[strings.TrimSpace(u)] = true
	}
	a.groups = newGroupCache(api, time.Minute)
	a.audience = newAudienceCache(api, time.Minute)
	smOpts := []socketmode.Option{}
	if cfg.Debug {
		smOpts = append(smOpts, socketmode.OptionDebug(true), socketmode.OptionLog(slogLogger{a.log}))
	}
	a.sm = socketmode.New(api, smOpts...)
	a.workCtx, a.stopWork = context.WithCancel(context.Background())
	a.notesCtx, a.stopNotes = context.WithCancel(context.Background())
	a.spawnSlots = make(chan struct{}, cfg.MaxHandlers)
	a.notices = make(chan notice, noticeQueueSize)
	a.noticesDone = make(chan struct{})
	a.cards = &cardUpdater{a: a}
	return a, nil
}

// retryConfig retries rate-limited calls after Retry-After and server
// errors with backoff. Connection errors are not retried: a post whose
// answer was lost may have been made, and posting it twice is worse.
func retryConfig() slack.RetryConfig {
	c := slack.DefaultRetryConfig()
	c.MaxRetries = 4
	c.BackoffMax = 10 * time.Second
	c.RetryAfterDuration = 5 * time.Second
	c.Handlers = []slack.RetryHandler{slack.NewRateLimitErrorRetryHandler(c), slack.NewServerErrorRetryHandler(c)}
	return c
}

// Groups resolves Slack user groups for approver checks.
func (a *App) Groups() approvals.GroupResolver { return a.groups }

// Connected reports whether Socket Mode is connected.
func (a *App) Connected() bool { return a.connected.Load() }

// Ready reports whether the app can serve: Socket Mode connected and the
// store reachable.
func (a *App) Ready(ctx context.Context) error {
	if !a.connected.Load() {
		return errors.New("socket mode is not connected")
	}
	if err := a.st.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Run connects to Slack and serves until ctx ends, then stops taking
// work, lets in-flight work finish (up to ShutdownGrace) and returns (see
// shutdown). A bad token is returned as an error at once.
func (a *App) Run(ctx context.Context, ag *agent.Agent) error {
	a.ag.Store(ag)
	auth, err := a.api.AuthTestContext(ctx)
	if err != nil {
		return fmt.Errorf("slack auth.test: %w", err)
	}
	a.teamID, a.botUserID, a.botID = auth.TeamID, auth.UserID, auth.BotID
	a.log.Info("connected to slack", "team", auth.Team, "bot_user", auth.UserID)

	a.shards = make([]chan job, a.cfg.Workers)
	for i := range a.shards {
		a.shards[i] = make(chan job, a.cfg.QueueSize)
		a.workers.Add(1)
		go a.worker(a.shards[i])
	}
	go a.notifier()
	a.cards.start()

	// Socket Mode outlives ctx a little: work still answering envelopes
	// when shutdown starts needs the connection to send its acks.
	smCtx, stopSM := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSM()
	smErr := make(chan error, 1)
	smDone := make(chan struct{})
	go func() {
		defer close(smDone)
		smErr <- a.sm.RunContext(smCtx)
	}()

	sweep := time.NewTicker(a.cfg.SweepInterval)
	defer sweep.Stop()
	a.sweep()
	takeover := time.NewTicker(a.cfg.TakeoverInterval)
	defer takeover.Stop()
	a.takeover()

	var runErr error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-smErr:
			if err != nil && !errors.Is(err, context.Canceled) {
				runErr = fmt.Errorf("socket mode: %w", err)
			}
			break loop
		case <-sweep.C:
			a.sweep()
		case <-takeover.C:
			a.takeover()
		case evt, ok := <-a.sm.Events:
			if !ok {
				break loop
			}
			a.handle(ctx, evt)
		}
	}
	a.shutdown(smErr, func() {
		stopSM()
		if !wait(smDone, 5*time.Second) {
			a.log.Warn("socket mode did not stop in time")
		}
	})
	return runErr
}

// noteAllowance is how long past the end of the shutdown grace period
// notes about work cut short (a message not started, a click not
// recorded, a turn interrupted) and card updates may take.
const noteAllowance = 5 * time.Second

// finalWait is how long past the shutdown deadline shutdown waits for
// goroutines to notice it before Run returns anyway.
const finalWait = time.Second

// shutdown stops the app once the event loop has ended.
//
//  1. Handlers already running get up to ShutdownGrace/2 to finish while
//     Socket Mode is still up, so that their acks go out. Envelopes are
//     still read meanwhile, but no new work starts: Events API envelopes
//     are left unacked, so Slack delivers them again (with retry_attempt
//     increased, to another connection of the app, or to this app once it
//     is back); a slash command is answered that the bot is restarting, a
//     modal submission gets the same as an error under its input (the
//     modal stays open), and a click is acked and the clicker told that
//     nothing changed. Slack does not redeliver interactions, so those
//     must be answered.
//  2. Socket Mode stops. Envelopes sent after this go to another
//     connection of the app if there is one; if not, Slack retries events
//     later, while an interaction fails in the user's Slack client.
//  3. The queues close and the workers drain them until ShutdownGrace
//     after the start of the shutdown; then the work context is cancelled.
//     A turn cut short keeps its conversation, a message not started gets
//     a note that it will be answered after the restart (it is recorded,
//     so it is taken over then or by another replica; one the store could
//     not record gets a note asking to send it again), and a click not
//     recorded is told so.
//  4. Notes, clean-ups and card updates made from then on share one
//     deadline, noteAllowance after the end of the grace period (see
//     noteContext); past it they are skipped and logged.
//  5. Handlers, workers, the sweep, the notifier and the card updater are
//     waited for until finalWait after that deadline. Everything of this
//     app that can outlast the grace period runs under the deadline, so
//     they normally end in time. If one does not (a call that ignores its
//     context), Run returns anyway rather than hang, and closes the gate
//     in front of the store: from then on every store call of this app
//     fails without reaching the store. A call already in flight at that
//     moment is not stopped by the gate; its context ended at the
//     deadline. Work the agent does on its own (saving a turn cut short)
//     is bounded by the agent's timeouts, not by this one.
func (a *App) shutdown(smErr <-chan error, stopSM func()) {
	begin := time.Now()
	graceEnd := begin.Add(a.cfg.ShutdownGrace)
	handlers := doneWhen(&a.spawned)
	if !a.drain(handlers, smErr, begin.Add(a.cfg.ShutdownGrace/2)) {
		a.log.Warn("handlers still running at shutdown; their acks may be lost")
	}
	stopSM()
	a.connected.Store(false)
	// Only the event loop and drain send notices, and both are over.
	close(a.notices)

	a.mu.Lock()
	a.closing.Store(true)
	for _, s := range a.shards {
		close(s)
	}
	a.mu.Unlock()
	workers := doneWhen(&a.workers)
	if !waitUntil(workers, graceEnd) {
		a.log.Warn("shutdown grace period over: cancelling in-flight work")
	}
	deadline := graceEnd
	if now := time.Now(); now.After(deadline) {
		deadline = now
	}
	deadline = deadline.Add(noteAllowance)
	notesTimer := time.AfterFunc(time.Until(deadline), a.stopNotes)
	defer notesTimer.Stop()
	a.stopWork()

	final := deadline.Add(finalWait)
	late := false
	for _, w := range []struct {
		what string
		done <-chan struct{}
	}{{"workers", workers}, {"handlers", handlers}, {"sweep", doneWhen(&a.sweeps)}} {
		if !waitUntil(w.done, final) {
			a.log.Error("still running past the shutdown deadline; stopping anyway", "what", w.what)
			late = true
		}
	}
	// The card updater's producers (turns, decisions, the sweep) are done,
	// unless one is late; a late one updates its card inline.
	if !a.cards.stop(final) {
		a.log.Error("card updates still running past the shutdown deadline; stopping anyway")
		late = true
	}
	if !waitUntil(a.noticesDone, final) {
		a.log.Error("notices still being sent past the shutdown deadline; stopping anyway")
		late = true
	}
	if late {
		a.m.error("shutdown_late")
	}
	a.stopNotes()
	a.st.close()
}

// drain reads envelopes while handlers finish, until handlers is closed
// or the deadline; it reports whether handlers finished. Nothing it does
// starts a handler or touches the store (see shutdown).
func (a *App) drain(handlers <-chan struct{}, smErr <-chan error, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	events := a.sm.Events
	for {
		select {
		case <-handlers:
			return true
		case <-t.C:
			return false
		case <-smErr:
			// Socket Mode has stopped: nothing more to read.
			events = nil
		case evt, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			a.refuse(evt)
		}
	}
}

// doneWhen returns a channel closed once wg is done. No Add may follow.
// The goroutine behind it ends with wg, so waiting on the channel also
// waits for it.
func doneWhen(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	return done
}

// waitUntil waits for done until the deadline; it reports whether done was
// closed.
func waitUntil(done <-chan struct{}, deadline time.Time) bool {
	return wait(done, time.Until(deadline))
}

// wait waits for done, at most d; it reports whether done was closed.
func wait(done <-chan struct{}, d time.Duration) bool {
	select {
	case <-done:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (a *App) worker(q chan job) {
	defer a.workers.Done()
	for j := range q {
		func() {
			defer func() {
				if r := recover(); r != nil {
					a.log.Error("work panicked", "conversation", j.key, "panic", r)
					a.m.error("panic")
				}
			}()
			j.run(a.workCtx)
		}()
	}
}

// enqueue queues work for a conversation on its worker. It reports false
// when the queue is full or the app is shutting down.
func (a *App) enqueue(key string, run func(ctx context.Context)) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closing.Load() || len(a.shards) == 0 {
		return false
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	q := a.shards[int(h.Sum32()%uint32(len(a.shards)))]
	select {
	case q <- job{key: key, run: run}:
		return true
	default:
		a.m.error("queue_full")
		return false
	}
}

// spawn runs short interactive work (opening a modal, answering a click,
// recording a message before its ack) in its own goroutine, waited for on
// shutdown. It is called from the Socket Mode loop, and by the recording
// of a message for its "too busy" note.
//
// At most Config.MaxHandlers run at once. Past that, busy runs instead of
// fn, in the caller: it must be quick and not call the Web API (an ack is
// fine: it is bounded by a timeout), and touch the store only to record a
// message before its ack (onMessage), which slows the reading of envelopes
// rather than ack one it has not recorded. A nil busy drops the work.
func (a *App) spawn(fn func(ctx context.Context), busy func()) {
	select {
	case a.spawnSlots <- struct{}{}:
	default:
		a.m.error("spawn_saturated")
		if busy != nil {
			busy()
		}
		return
	}
	a.spawned.Add(1)
	go func() {
		defer func() { <-a.spawnSlots }()
		defer a.spawned.Done()
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("handler panicked", "panic", r)
				a.m.error("panic")
			}
		}()
		fn(a.workCtx)
	}()
}

// sweep expires due approvals and recovers lost resumes, on its own
// goroutine so neither the event loop nor conversations wait behind it; a
// tick is skipped while the previous sweep still runs. Each resume goes to
// its conversation's worker.
func (a *App) sweep() {
	ag := a.ag.Load()
	if ag == nil || !a.sweeping.CompareAndSwap(false, true) {
		return
	}
	a.sweeps.Add(1)
	go func() {
		defer a.sweeps.Done()
		defer a.sweeping.Store(false)
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("sweep panicked", "panic", r)
				a.m.error("panic")
			}
		}()
		err := ag.Sweep(a.workCtx, func(runID, conversation string) {
			if !a.enqueue(conversation, func(ctx context.Context) { a.resumeQueued(ctx, runID) }) {
				a.log.Warn("could not queue a resume; the next sweep retries", "run", runID)
			}
		})
		if err != nil && a.workCtx.Err() == nil {
			a.log.Warn("sweep", "err", err)
			a.m.error("sweep")
		}
	}()
}

// takeover queues a TakeOver on the worker of each conversation with
// recorded messages that no turn answered in time, on its own goroutine
// (waited for with the sweep); a tick is skipped while the previous scan
// still runs. Where a live process holds the conversation, or its own
// turn ran first, TakeOver does nothing.
func (a *App) takeover() {
	ag := a.ag.Load()
	if ag == nil || !a.takingOver.CompareAndSwap(false, true) {
		return
	}
	a.sweeps.Add(1)
	go func() {
		defer a.sweeps.Done()
		defer a.takingOver.Store(false)
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("takeover scan panicked", "panic", r)
				a.m.error("panic")
			}
		}()
		keys, err := ag.Unanswered(a.workCtx, 100)
		if err != nil {
			if a.workCtx.Err() == nil {
				a.log.Warn("takeover scan", "err", err)
				a.m.error("takeover")
			}
			return
		}
		for _, key := range keys {
			if !a.enqueue(key, func(ctx context.Context) { a.takeOverTurn(ctx, key) }) {
				a.log.Warn("could not queue a takeover; the next scan retries", "conversation", key)
			}
		}
	}()
}

// noteContext returns a context for a note or a clean-up that must not
// end with ctx (a note in a thread after a turn was cut short, the lookup
// that decides whether to send it, a card update): it keeps ctx's values
// but not its cancellation, and ends after d or at the shutdown deadline,
// whichever comes first. ok is false, and the note must be skipped, once
// the shutdown deadline has passed.
func (a *App) noteContext(ctx context.Context, d time.Duration) (_ context.Context, cancel context.CancelFunc, ok bool) {
	if a.notesCtx.Err() != nil {
		return nil, func() {}, false
	}
	nctx, cancelNote := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(a.notesCtx, cancelNote)
	return nctx, func() {
		stop()
		cancelNote()
	}, true
}

// handle acks an envelope at once and routes it.
func (a *App) handle(ctx context.Context, evt socketmode.Event) {
	if a.connection(evt) || evt.Request == nil {
		return
	}
	start := time.Now()
	a.m.envelope(string(evt.Type))
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		var once sync.Once
		a.onEventsAPI(ctx, evt, func() { once.Do(func() { a.ack(evt.Request, nil, start) }) })
	case socketmode.EventTypeInteractive:
		a.onInteractive(ctx, evt, start)
	case socketmode.EventTypeSlashCommand:
		a.onSlash(ctx, evt, start)
	default:
		a.ack(evt.Request, nil, start)
	}
}

// Answers to envelopes that arrive while the bot shuts down.
const (
	restartingCommandText = "I'm restarting; try again in a minute."
	restartingSubmitText  = "I'm restarting, so nothing was recorded; please submit again in a minute."
	restartingClickText   = "I'm restarting, so nothing changed; please click again in a minute."
)

// refuse answers an envelope read during shutdown without starting any
// work (see shutdown). It runs in the loop.
func (a *App) refuse(evt socketmode.Event) {
	if a.connection(evt) || evt.Request == nil {
		return
	}
	start := time.Now()
	a.m.envelope(string(evt.Type))
	req := evt.Request
	switch evt.Type {
	case socketmode.EventTypeEventsAPI:
		// Left unacked on purpose: Slack delivers it again.
		a.log.Info("shutting down: leaving an event unacked for Slack to deliver again", "envelope", req.EnvelopeID)
	case socketmode.EventTypeSlashCommand:
		a.ack(req, ephemeral(restartingCommandText), start)
	case socketmode.EventTypeInteractive:
		cb, ok := evt.Data.(slack.InteractionCallback)
		switch {
		case ok && cb.Type == slack.InteractionTypeViewSubmission:
			a.ack(req, viewError(cb.View.CallbackID, restartingSubmitText), start)
		case ok && cb.Type == slack.InteractionTypeBlockActions:
			a.ack(req, nil, start)
			a.notify(cb.User.ID, cb.Channel.ID, restartingClickText)
		default:
			a.ack(req, nil, start)
		}
	default:
		a.ack(req, nil, start)
	}
}

// connection tracks connection events; it reports whether evt was one.
func (a *App) connection(evt socketmode.Event) bool {
	switch evt.Type {
	case socketmode.EventTypeConnected:
		a.connected.Store(true)
		a.log.Info("socket mode connected")
	case socketmode.EventTypeConnecting:
	case socketmode.EventTypeDisconnect, socketmode.EventTypeConnectionError, socketmode.EventTypeIncomingError:
		a.connected.Store(false)
		a.log.Warn("socket mode connection lost", "type", evt.Type)
	case socketmode.EventTypeInvalidAuth:
		a.connected.Store(false)
		a.log.Error("socket mode: invalid auth")
	case socketmode.EventTypeHello:
		a.connected.Store(true)
	default:
		return false
	}
	return true
}

// ephemeral is the ack payload of a slash command answered privately.
func ephemeral(text string) map[string]any {
	return map[string]any{"response_type": "ephemeral", "text": clip(text, 3900)}
}

// viewError is the ack payload of a decision modal's submission that keeps
// the modal open with text under its input; nil (closing the modal) for a
// view without one.
func viewError(callbackID, text string) any {
	if block := submitBlock(callbackID); block != "" {
		return slack.NewErrorsViewSubmissionResponse(map[string]string{block: clip(text, 1000)})
	}
	return nil
}

// acker acks one envelope exactly once: with the handler's answer, or, when
// the handler ends without one (it panicked), with a fallback.
type acker struct {
	a     *App
	req   *socketmode.Request
	start time.Time
	once  sync.Once
}

func (a *App) acker(req *socketmode.Request, start time.Time) *acker {
	return &acker{a: a, req: req, start: start}
}

// ack acks the envelope with payload unless it was acked already.
func (k *acker) ack(payload any) {
	k.once.Do(func() { k.a.ack(k.req, payload, k.start) })
}

func (a *App) ack(req *socketmode.Request, payload any, start time.Time) {
	// Past 3 s Slack has given up on the envelope; do not wait forever
	// for a connection that is gone.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := a.sm.AckCtx(ctx, req.EnvelopeID, payload)
	if err != nil {
		a.log.Warn("ack envelope", "envelope", req.EnvelopeID, "err", err)
		a.m.error("ack")
	}
	a.m.ackLatency(time.Since(start))
}

// firstTime reports whether id has not been seen before, by any replica.
// A store failure lets the event through: running twice is prevented by
// the decision's compare-and-set, while dropping a message would lose it.
func (a *App) firstTime(ctx context.Context, id string) bool {
	ok, err := a.st.SeenEvent(ctx, id, 24*time.Hour)
	if err != nil {
		a.log.Warn("de-duplicate event", "id", id, "err", err)
		return true
	}
	return ok
}

// slogLogger adapts slog to the logger slack-go's debug output expects.
type slogLogger struct{ log *slog.Logger }

func (l slogLogger) Output(_ int, s string) error {
	l.log.Debug(strings.TrimSpace(s), "source", "slack")
	return nil
}
