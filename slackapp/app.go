package slackapp

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"golang.org/x/sync/semaphore"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/internal/redact"
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
	// MaxTurns bounds the turns (a message's turn or a resume) running at
	// once (default 1000). Past it, new turns wait in arrival order. Clicks,
	// forms, commands and Home tabs are never bounded by it.
	MaxTurns int
	// QueuedNoticeAfter is how long the turn of a person's message, or the
	// resume of a person's decision, waits for a slot before its thread is
	// told that it is queued (default 2s). A conversation is told at most
	// once while it has work. A takeover, or a resume that the sweep or
	// the expiry started, waits untold: nobody in the thread asked this
	// process for it. Once a person's message or decision is queued behind
	// such work, the person waits as long as it does, so the thread is
	// told as soon as that work has waited QueuedNoticeAfter.
	QueuedNoticeAfter time.Duration
	// SweepInterval is how often decided runs whose resume was lost (its
	// process died) are recovered, and the longest the expiry timer sleeps
	// (default 30s). Calls paused in this process expire on time whatever
	// the interval; one paused by another replica that died expires within
	// it.
	SweepInterval time.Duration
	// HomeRefreshDelay gathers changes to pending calls before the Home
	// tabs of the people concerned are republished, so a burst of changes
	// republishes each tab once (default 2s).
	HomeRefreshDelay time.Duration
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
	// Logger receives operational logs (default slog.Default()).
	Logger *slog.Logger
	// Redact, if set, takes the secrets the bot knows out of text from
	// outside it that it posts: a model server's own words when it
	// refuses a request, which a proxy may write the credential into.
	Redact func(string) string
	// Metrics, if set, is updated as envelopes, turns and decisions go by.
	Metrics *Metrics
	// HTTPClient is used for the Web API (default a client with a 30s
	// timeout keeping webIdleConns idle connections).
	HTTPClient *http.Client
	// Debug logs every Socket Mode message (never tokens).
	Debug bool
	// SocketSilence is how long a Socket Mode connection may go without
	// any frame before it is taken for dead and replaced (default 30s;
	// Slack pings every few seconds).
	SocketSilence time.Duration
}

// Store is what the Slack app keeps itself, beside the agent's state.
type Store interface {
	SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error)
	// AcquireLease and ReleaseLease keep one Why? of a call at a time
	// across replicas.
	AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error)
	ReleaseLease(ctx context.Context, key, owner string) error
	// PutCallNote and CallNote keep where a call's card is, with the
	// call, for as long as the call is kept.
	PutCallNote(ctx context.Context, callID string, note []byte) error
	CallNote(ctx context.Context, callID string) ([]byte, error)
	AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error)
	Ping(ctx context.Context) error
}

// Turns records messages, and runs, resumes and takes over the turns of
// conversations.
type Turns interface {
	Accept(ctx context.Context, req agent.Request, requireKnown bool) (agent.Request, store.Acceptance, error)
	AcceptTaking(ctx context.Context, req agent.Request, requireKnown bool) (agent.Request, store.Acceptance, *agent.Taken, error)
	Run(ctx context.Context, req agent.Request) (agent.Outcome, error)
	RunTaken(ctx context.Context, req agent.Request, t *agent.Taken) (agent.Outcome, error)
	ReleaseTaken(ctx context.Context, t *agent.Taken)
	Resume(ctx context.Context, runID string) (agent.Outcome, error)
	TakeOver(ctx context.Context, conversation string) (agent.Outcome, error)
	// TakenIn reports whether the conversation answered (or queued
	// behind a pause) the message of req.
	TakenIn(ctx context.Context, req agent.Request) (bool, error)
}

// Decisions records decisions on paused calls.
type Decisions interface {
	Decide(ctx context.Context, d approvals.Decision) (agent.DecideResult, error)
	DecideTaking(ctx context.Context, d approvals.Decision) (agent.DecideResult, *agent.Taken, error)
	ResumeTaken(ctx context.Context, t *agent.Taken) (agent.Outcome, error)
	Cancel(ctx context.Context, runID, user string) (agent.DecideResult, error)
	// AwaitTurn returns once no turn holds the conversation: a card is
	// posted before its pause is saved, by a turn that holds the
	// conversation until then.
	AwaitTurn(ctx context.Context, conversation string) error
	// HoldsHere reports whether a turn or resume of this process holds
	// the conversation.
	HoldsHere(conversation string) bool
}

// Calls looks paused calls up, for cards, forms and inboxes.
type Calls interface {
	Call(ctx context.Context, callID string) (agent.PendingCall, error)
	// News is the news about a call as stored now (see agent.Agent.News).
	News(ctx context.Context, callID string) (agent.CallUpdate, error)
	Pending(ctx context.Context, f store.Filter) ([]agent.PendingCall, error)
	Tools() *agent.Registry
	// StillApprovers returns those of approvers whom the policy as it
	// is now lets approve c (see agent.Agent.StillApprovers).
	StillApprovers(ctx context.Context, c agent.Call, approvers []string) []string
}

// Upkeep expires due calls, recovers lost resumes and lists the
// conversations a dead process left unanswered.
type Upkeep interface {
	// Expire expires the calls due now, sends the reminders due (through
	// the Reporter, which implements agent.Reminder), and returns the next
	// deadline of a pending call or reminder (zero if none).
	Expire(ctx context.Context, resume func(runID, conversation string)) (time.Time, error)
	Sweep(ctx context.Context, resume func(runID, conversation string)) error
	Unanswered(ctx context.Context, offset, limit int) ([]string, error)
	// FollowPauses remembers the calls other replicas pause, until ctx
	// ends, so that a click here on one of their cards is decided in one
	// store step, and tells due when each of their pauses is first due,
	// so that the expiry timer acts on it should they stop first.
	FollowPauses(ctx context.Context, ready func(), due func(time.Time)) error
}

// Explainer asks the model why it wants a pending call (the Why? button).
type Explainer interface {
	Explain(ctx context.Context, callID, asker string) (string, error)
}

// Agent is everything the app needs of the agent; *agent.Agent implements
// it.
type Agent interface {
	Turns
	Decisions
	Calls
	Upkeep
	Explainer
}

var _ Agent = (*agent.Agent)(nil)

// App is the Slack side of the bot: it turns Socket Mode envelopes into
// agent turns and decisions, and renders what the agent reports.
//
// Each conversation has a queue and a goroutine while it has work; one
// semaphore bounds running turns; one WaitGroup owned by Run waits for them
// all. Clicks, forms, commands and Home tabs each run in their own
// goroutine, never behind a turn (see the package doc for the turns and
// resumes that start at once, with the store step that records them).
type App struct {
	cfg      Config
	api      *slack.Client
	web      webClient // the HTTP client of api, for the calls made without it
	apiURL   string
	sock     *socket
	st       Store
	policy   *approvals.Engine
	log      *slog.Logger
	m        *Metrics
	groups   *groupCache
	audience *audienceCache
	// outsiders are the people of another organisation met in shared
	// channels.
	outsiders outsiders

	// ag is set by Run before anything that uses it starts.
	ag Agent

	teamID string
	// enterpriseID is the Enterprise Grid organisation of teamID, if any.
	enterpriseID string
	botUserID    string
	botID        string

	// running is set while Run serves; card updates reported outside it
	// are made inline.
	running atomic.Bool
	// draining is set once Run stops taking new work, as its shutdown
	// starts (see Draining).
	draining atomic.Bool
	// wg counts every goroutine the app starts; Run waits for it.
	wg sync.WaitGroup
	// active counts the same goroutines, and quiet is signalled when it
	// drops to zero, so that the shutdown knows when to stop answering
	// envelopes.
	active atomic.Int64
	quiet  chan struct{}
	// checks is the context of checks made in the background that no
	// one waits on (see tellUndecidableLater): it ends as the shutdown
	// starts. Set by Run before it takes any work.
	checks context.Context
	// slots bounds the turns running at once.
	slots *semaphore.Weighted

	mu     sync.Mutex
	queues map[string]*queue
	// cards remembers where this process posted cards.
	cards cardMemory
	// statuses are the thread status calls in flight.
	statuses threadStatuses
	// recent spares the store the second copy of a message (see
	// recentMessages).
	recent recentMessages
	// explaining holds the calls whose Why? this process is answering.
	explaining map[string]bool
	admins     map[string]bool
	homes      homeRefresh
	expiry     expiryClock
}

// New returns an App. It does not connect: Run does. Reporter, Groups and
// Audience work from here on, so the agent can be built with them before
// Run.
func New(cfg Config, st Store, policy *approvals.Engine) (*App, error) {
	if !strings.HasPrefix(cfg.BotToken, "xoxb-") {
		return nil, errors.New("slack bot token must start with xoxb-")
	}
	if !strings.HasPrefix(cfg.AppToken, "xapp-") {
		return nil, errors.New("slack app token must start with xapp-")
	}
	if cfg.MaxTurns <= 0 {
		cfg.MaxTurns = 1000
	}
	if cfg.QueuedNoticeAfter <= 0 {
		cfg.QueuedNoticeAfter = 2 * time.Second
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 30 * time.Second
	}
	if cfg.TakeoverInterval <= 0 {
		cfg.TakeoverInterval = 5 * time.Second
	}
	if cfg.HomeRefreshDelay <= 0 {
		cfg.HomeRefreshDelay = 2 * time.Second
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second, Transport: webTransport()}
	}
	web := webClient{client: cfg.HTTPClient}
	apiURL := slack.APIURL
	if cfg.APIURL != "" {
		apiURL = cfg.APIURL
		if !strings.HasSuffix(apiURL, "/") {
			apiURL += "/"
		}
	}
	api := slack.New(cfg.BotToken, slack.OptionAppLevelToken(cfg.AppToken), slack.OptionHTTPClient(web), slack.OptionAPIURL(apiURL))
	a := &App{
		cfg: cfg, api: api, web: web, apiURL: apiURL, st: st, policy: policy, log: cfg.Logger, m: cfg.Metrics,
		quiet: make(chan struct{}, 1), slots: semaphore.NewWeighted(int64(cfg.MaxTurns)),
		queues: map[string]*queue{}, explaining: map[string]bool{}, homes: newHomeRefresh(), admins: map[string]bool{},
		expiry: expiryClock{wake: make(chan struct{}, 1)},
	}
	for _, u := range cfg.AdminUsers {
		a.admins[strings.TrimSpace(u)] = true
	}
	a.groups = newGroupCache(api, time.Minute)
	a.audience = newAudienceCache(api, time.Minute)
	open := func(ctx context.Context) (string, error) {
		_, url, err := api.StartSocketModeContext(ctx)
		return url, err
	}
	a.sock = newSocket(open, a.log, cfg.Debug, cfg.SocketSilence)
	return a, nil
}

// Groups resolves Slack user groups for approver checks.
func (a *App) Groups() approvals.GroupResolver { return membersOrNone{a.groups} }

// Connected reports whether Socket Mode is connected.
func (a *App) Connected() bool { return a.sock.connected.Load() }

// Draining reports whether the app is shutting down: it takes no new work
// (events are left for Slack to deliver again, clicks are answered that it
// is restarting) while the work it has finishes.
func (a *App) Draining() bool { return a.draining.Load() }

// Ready reports whether the app can serve: not shutting down, Socket Mode
// connected and the store reachable.
func (a *App) Ready(ctx context.Context) error {
	if a.draining.Load() {
		return errors.New("shutting down")
	}
	if !a.sock.connected.Load() {
		return errors.New("socket mode is not connected")
	}
	if err := a.st.Ping(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// authTest asks Slack who the bot is, again and again with backoff while
// Slack cannot be reached or answers with a server error (a network or a
// sidecar not ready yet as the bot starts, an outage during a rollout):
// a start that gave up there would restart the process in a loop, where
// the same outage once connected is ridden out. An answer that will not
// change (a refused token, any other error Slack names, a client error
// such as a 404 for a wrong SLACK_API_URL or a proxy's 403, a web page
// answered with 200) is returned at once, and so is ctx's end.
func (a *App) authTest(ctx context.Context) (*slack.AuthTestResponse, error) {
	for attempt := 0; ; attempt++ {
		auth, err := a.api.AuthTestContext(ctx)
		if err != nil && ctx.Err() != nil {
			// The stop came as the attempt failed: whatever it met (Slack
			// out of reach as the bot starts), the stop is what happened.
			return nil, ctx.Err()
		}
		if err == nil || finalAnswer(err) {
			return auth, err
		}
		wait := backoff(attempt)
		a.log.Warn("slack cannot be reached; asking again", "method", "auth.test", "in", wait.Round(time.Millisecond), "err", err)
		if err := ctxtime.Sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// finalAnswer reports whether err is an answer of Slack (or of what stands
// in front of it) that asking again will not change: an error Slack names
// but a failure of its own that passes (passingErrors) or a rate limit
// (rateLimitedCodes), or an HTTP client error but a time-out or a rate
// limit.
func finalAnswer(err error) bool {
	if e, named := errors.AsType[slack.SlackErrorResponse](err); named {
		return !passingErrors[e.Err] && !rateLimitedCodes[e.Err]
	}
	if notSlacks(err) {
		return true
	}
	if e, ok := errors.AsType[slack.StatusCodeError](err); ok {
		return e.Code >= 400 && e.Code < 500 && e.Code != http.StatusRequestTimeout && e.Code != http.StatusTooManyRequests
	}
	return false
}

// notSlacks reports whether err is an answer that is not Slack's JSON: a
// web page (a proxy's login, a web server's fallback page) answered with
// 200 at a wrong SLACK_API_URL.
func notSlacks(err error) bool {
	_, syntax := errors.AsType[*json.SyntaxError](err)
	return syntax
}

// checkApprovalsChannel logs an error when the bot cannot post in
// Config.ApprovalsChannel: it posts only where it is a member, so a card
// for approvers who cannot see a conversation would fail there, and they
// would never hear of it.
func (a *App) checkApprovalsChannel(ctx context.Context) {
	ch := a.cfg.ApprovalsChannel
	if ch == "" {
		return
	}
	info, err := a.api.GetConversationInfoContext(ctx, &slack.GetConversationInfoInput{ChannelID: ch})
	switch {
	case err != nil:
		a.log.Error("APPROVALS_CHANNEL cannot be read: cards for approvers who cannot see a conversation will fail there until the bot is invited to it (or the id is corrected)", "channel", ch, "err", err)
	case info.IsArchived:
		a.log.Error("APPROVALS_CHANNEL is archived: cards for approvers who cannot see a conversation will fail there until it is unarchived (or another is set)", "channel", ch)
	case !info.IsMember:
		a.log.Error("the bot is not a member of APPROVALS_CHANNEL: cards for approvers who cannot see a conversation will fail there until it is invited (/invite the bot in that channel)", "channel", ch)
	}
}

// Run connects to Slack and serves with ag until ctx ends, then stops
// taking work, lets in-flight work finish (up to ShutdownGrace) and
// returns (see shutdown). A bad token is returned as an error at once;
// Slack out of reach is waited for (see authTest). Run may be called once.
func (a *App) Run(ctx context.Context, ag Agent) error {
	a.ag = ag
	auth, err := a.authTest(ctx)
	if tokenRefused(err) {
		return &TokenRefusedError{Err: fmt.Errorf("auth.test: %w", err)}
	}
	if notSlacks(err) {
		return fmt.Errorf("slack auth.test: the answer is not Slack's (is SLACK_API_URL %s right?): %w", redact.SafeURL(cmp.Or(a.cfg.APIURL, slack.APIURL)), err)
	}
	if err != nil {
		return fmt.Errorf("slack auth.test: %w", err)
	}
	a.teamID, a.enterpriseID, a.botUserID, a.botID = auth.TeamID, auth.EnterpriseID, auth.UserID, auth.BotID
	a.log.Info("connected to slack", "team", auth.Team, "bot_user", auth.UserID)
	a.checkApprovalsChannel(ctx)

	// Work runs under workCtx, which ends at the end of the shutdown grace
	// period; notes about work cut short run under notesCtx (see
	// noteContext), which ends a little later.
	notesCtx, stopNotes := context.WithCancel(context.WithoutCancel(ctx))
	defer stopNotes()
	workCtx, stopWork := context.WithCancel(context.WithValue(notesCtx, notesKey{}, notesCtx))
	defer stopWork()

	// Socket Mode outlives ctx a little: work still answering envelopes
	// when shutdown starts needs the connection to send its acks.
	smCtx, stopSM := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSM()
	smErr := make(chan error, 1)
	smDone := make(chan struct{})
	go func() {
		defer close(smDone)
		smErr <- a.sock.Run(smCtx)
	}()

	a.running.Store(true)
	// The expiry timer and the sweep stop when the shutdown starts.
	stopping := make(chan struct{})
	a.spawn(workCtx, "expiry", func(ctx context.Context) { a.expire(ctx, stopping) })
	a.spawn(workCtx, "sweep", func(ctx context.Context) { a.sweep(ctx, stopping) })
	a.spawn(workCtx, "takeover", func(ctx context.Context) { a.takeover(ctx, stopping) })
	a.spawn(workCtx, "homes", func(ctx context.Context) { a.refreshHomes(ctx, stopping) })
	following, stopFollowing := context.WithCancel(workCtx)
	defer stopFollowing()
	a.checks = following
	a.spawn(workCtx, "pauses", func(context.Context) {
		if err := a.ag.FollowPauses(following, nil, a.expiry.at); err != nil {
			a.log.Warn("not following other replicas' pauses: a click on their cards reads the call first, and their deadlines wait for the next sweep if they stop", "err", err)
		}
	})
	a.spawn(workCtx, "notices", func(context.Context) { a.followNotices(following) })
	// The check of the policy's approvers may wait on Slack: it ends as
	// the shutdown starts, like the following.
	a.spawn(workCtx, "approvers", func(context.Context) { a.checkApprovers(following) })

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
		case env := <-a.sock.envelopes:
			a.handle(workCtx, env)
		}
	}
	a.draining.Store(true)
	close(stopping)
	stopFollowing()
	a.shutdown(workCtx, stopWork, stopNotes, smErr)
	a.groups.close()
	a.audience.close()
	stopSM()
	if !wait(smDone, 5*time.Second) {
		a.log.Warn("socket mode did not stop in time")
	}
	a.running.Store(false)
	return runErr
}

// notesKey carries the context of notes (see noteContext) in the work
// context.
type notesKey struct{}

// noteAllowance is how long past the end of the shutdown grace period
// notes about work cut short (a message not started, a click not
// recorded, a turn interrupted) and card updates may take.
const noteAllowance = 5 * time.Second

// finalWait is how long past the shutdown deadline shutdown waits for
// goroutines to notice it before Run returns anyway.
const finalWait = time.Second

// shutdown stops the app once the event loop has ended. No new work starts:
// envelopes are still read and answered without starting any (see refuse):
// events are left unacked for Slack to deliver again, and interactions are
// told the bot is restarting. Work already started (turns, queued
// messages and resumes, clicks, forms) goes on until it is done or
// ShutdownGrace has passed; then the work context ends: a turn cut short
// keeps its conversation, a queued message not started gets a note asking
// to send it again, and a queued resume is left to the sweep of the next
// process. Notes and card updates made from then on end at the shutdown
// deadline, noteAllowance later. Run returns once every goroutine has
// ended, or finalWait after that deadline if one ignores its context.
func (a *App) shutdown(ctx context.Context, stopWork, stopNotes context.CancelFunc, smErr <-chan error) {
	graceEnd := time.Now().Add(a.cfg.ShutdownGrace)
	if !a.drain(ctx, smErr, graceEnd) {
		a.log.Warn("shutdown grace period over: cancelling in-flight work")
	}
	stopWork()
	deadline := time.Now().Add(noteAllowance)
	notesTimer := time.AfterFunc(time.Until(deadline), stopNotes)
	defer notesTimer.Stop()
	a.drain(ctx, smErr, deadline)
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	if !waitUntil(done, deadline.Add(finalWait)) {
		a.log.Error("work still running past the shutdown deadline; stopping anyway")
		a.m.error("shutdown_late")
	}
	stopNotes()
}

// drain answers envelopes without starting work (see refuse) until the
// app's goroutines have all ended or the deadline; it reports whether they
// ended. The answers it starts count as the app's goroutines.
func (a *App) drain(ctx context.Context, smErr <-chan error, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	envelopes := a.sock.envelopes
	for a.active.Load() > 0 {
		select {
		case <-a.quiet:
		case <-t.C:
			return false
		case <-smErr:
			// Socket Mode has stopped: nothing more to read.
			envelopes = nil
		case env := <-envelopes:
			a.refuse(ctx, env)
		}
	}
	return true
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

// spawn runs fn in a goroutine of the app's, waited for by Run. It must be
// called from Run or from a goroutine spawn started (so the count never
// drops to zero while Run may still wait for it). A panic in fn is logged.
func (a *App) spawn(ctx context.Context, what string, fn func(ctx context.Context)) {
	a.active.Add(1)
	a.wg.Go(func() {
		defer func() {
			if a.active.Add(-1) == 0 {
				select {
				case a.quiet <- struct{}{}:
				default:
				}
			}
		}()
		defer func() {
			if r := recover(); r != nil {
				a.log.Error("panic", "in", what, "panic", r)
				a.m.error("panic")
			}
		}()
		fn(ctx)
	})
}

// queue is the work waiting on one key (a conversation, or a card), run in
// order by one goroutine that exists while there is work.
type queue struct {
	jobs []queuedJob
	// asked counts the jobs in jobs that someone in the thread waits for
	// (see enqueueAsked).
	asked int
	// overdue is set while work nobody asked for waits for a turn slot
	// past QueuedNoticeAfter: work someone asked for that is queued behind
	// it waits as long, so its thread is told at once (see turnSlot).
	overdue bool
	// told is set once the conversation's thread was told that a turn of
	// it is queued (see turnSlot).
	told bool
	// restartTold is set once the conversation's thread was promised an
	// answer after the restart (see firstRestartNote).
	restartTold bool
}

// queuedJob is one piece of work on a queue.
type queuedJob struct {
	run func(ctx context.Context)
	// asked is set when someone in the conversation's thread waits for
	// the work (see enqueueAsked).
	asked bool
}

// enqueue adds work to key's queue and starts the queue's goroutine if it
// has none. Work of one key runs in the order it was queued, one at a
// time; work of different keys never waits on each other. It must be
// called where spawn may be. Nobody in the conversation's thread waits for
// this work; see enqueueAsked for work someone does.
func (a *App) enqueue(ctx context.Context, key string, job func(ctx context.Context)) {
	a.enqueueJob(ctx, key, queuedJob{run: job})
}

// enqueueAsked is enqueue for work that someone in the conversation's
// thread waits for: a person's message, or the resume of a person's
// decision. Work ahead of it that waits for a turn slot untold keeps the
// person waiting too, so that wait tells the thread on its behalf (see
// turnSlot).
func (a *App) enqueueAsked(ctx context.Context, key string, job func(ctx context.Context)) {
	a.enqueueJob(ctx, key, queuedJob{run: job, asked: true})
}

// enqueueJob is enqueue and enqueueAsked, with job.asked telling which.
func (a *App) enqueueJob(ctx context.Context, key string, job queuedJob) {
	a.mu.Lock()
	if q, ok := a.queues[key]; ok {
		q.jobs = append(q.jobs, job)
		notice := false
		if job.asked {
			q.asked++
			// The work ahead has waited past QueuedNoticeAfter already,
			// so the load is no blip: the person is told now rather
			// than after a wait of their own.
			notice = q.overdue && !q.told
			q.told = q.told || notice
		}
		a.mu.Unlock()
		if notice {
			a.postQueuedNotice(ctx, key)
		}
		return
	}
	q := &queue{jobs: []queuedJob{job}}
	if job.asked {
		q.asked = 1
	}
	a.queues[key] = q
	a.mu.Unlock()
	a.spawn(ctx, "queue", func(ctx context.Context) { a.serve(ctx, key, q) })
}

// reserve makes the caller the server of key's queue, with a turn slot,
// when key has no queue in this process and a slot is free; otherwise it
// returns nil. The caller runs its work, calls release, then serve(q) for
// the work queued behind it meanwhile.
func (a *App) reserve(key string) (q *queue, s *slot) {
	if !a.slots.TryAcquire(1) {
		return nil, nil
	}
	if q = a.claimQueue(key); q == nil {
		a.slots.Release(1)
		return nil, nil
	}
	return q, a.heldSlot()
}

// claimQueue makes the caller the server of key's queue when key has no
// queue in this process; otherwise it returns nil.
func (a *App) claimQueue(key string) *queue {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.queues[key]; ok {
		return nil
	}
	q := &queue{}
	a.queues[key] = q
	return q
}

// serve runs q's work until it is empty, then forgets q.
func (a *App) serve(ctx context.Context, key string, q *queue) {
	for {
		a.mu.Lock()
		if len(q.jobs) == 0 {
			delete(a.queues, key)
			if len(a.queues) == 0 {
				// A map keeps the size a burst gave it.
				a.queues = map[string]*queue{}
			}
			a.mu.Unlock()
			return
		}
		job := q.jobs[0]
		q.jobs[0] = queuedJob{}
		q.jobs = q.jobs[1:]
		if job.asked {
			q.asked--
		}
		a.mu.Unlock()
		func() {
			defer func() {
				if r := recover(); r != nil {
					a.log.Error("work panicked", "key", key, "panic", r)
					a.m.error("panic")
				}
			}()
			job.run(ctx)
		}()
	}
}

// queuedText tells a thread its turn waits for a free slot.
const queuedText = "I'm working on many conversations right now; yours is queued and starts as soon as one finishes."

// turnSlot waits for a slot to run a turn of the conversation, from the
// conversation's queue. With tell set (someone in the thread waits on this
// process: a person's message, or the resume of a person's decision), a
// turn that waits longer than QueuedNoticeAfter has its thread told that it
// is queued, unless the thread was told already while the conversation has
// had work: while the bot is saturated, each waiting conversation costs
// Slack one post at most. Work nobody in the thread asked this process for
// (a takeover, which may find another process answering the conversation,
// or a resume found by the sweep or the expiry) waits untold, unless work
// someone asked for is queued behind it (see enqueueAsked): that person
// waits for it as well, and its own wait starts only after this one, so
// this wait tells the thread on their behalf. It returns a release func,
// or an error if ctx ended first.
func (a *App) turnSlot(ctx context.Context, conversation string, tell bool) (s *slot, err error) {
	if a.slots.TryAcquire(1) {
		return a.heldSlot(), nil
	}
	a.m.turnQueued()
	// The timer hands the notice to a goroutine of the app's; this one
	// waits for the hand-off, so that the notice is counted before the
	// queue's goroutine may end.
	handed := make(chan struct{})
	notice := time.AfterFunc(a.cfg.QueuedNoticeAfter, func() {
		defer close(handed)
		if a.queuedNoticeDue(conversation, tell) {
			a.postQueuedNotice(ctx, conversation)
		}
	})
	err = a.slots.Acquire(ctx, 1)
	if !notice.Stop() {
		<-handed
	}
	if !tell {
		a.untoldWaitOver(conversation)
	}
	if err != nil {
		return nil, err
	}
	return a.heldSlot(), nil
}

// slot is a turn slot one piece of work holds. Its work gives it back
// while it waits for a conversation's lease another holds (see during),
// and takes it again, in arrival order, before it tries again.
type slot struct {
	a    *App
	mu   sync.Mutex
	held bool
}

// heldSlot is a slot the caller took from a.slots.
func (a *App) heldSlot() *slot { return &slot{a: a, held: true} }

// release gives the slot back, if it is held; the work's deferred release
// after a wait that could not take it again gives back nothing.
func (s *slot) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.held = false
		s.a.slots.Release(1)
	}
}

// retake takes the slot again, waiting in line, unless it is held.
func (s *slot) retake(ctx context.Context) error {
	s.mu.Lock()
	held := s.held
	s.mu.Unlock()
	if held {
		return nil
	}
	if err := s.a.slots.Acquire(ctx, 1); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held {
		s.a.slots.Release(1) // taken again meanwhile
	}
	s.held = true
	return nil
}

// during returns ctx for the slot's work: it gives the slot back while it
// waits for a lease another holds (see agent.WithLeaseWaitYield).
func (s *slot) during(ctx context.Context) context.Context {
	return agent.WithLeaseWaitYield(ctx, agent.LeaseWaitYield{Release: s.release, Retake: s.retake})
}

// queuedNoticeDue reports, once a turn of the conversation has waited
// QueuedNoticeAfter for a slot, whether its thread is to be told that it is
// queued: the first time while its queue has work, if someone waits for
// the turn (tell) or for work queued behind it. Otherwise the wait is
// marked overdue, so that work someone asked for queued behind it later
// tells the thread at once (see enqueueAsked).
func (a *App) queuedNoticeDue(conversation string, tell bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues[conversation]
	if q == nil || q.told {
		return false
	}
	if !tell && q.asked == 0 {
		q.overdue = true
		return false
	}
	q.told = true
	return true
}

// untoldWaitOver ends the wait of work nobody asked for: work someone asks
// for from now on waits for its own turn slot, and tells for itself.
func (a *App) untoldWaitOver(conversation string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if q := a.queues[conversation]; q != nil {
		q.overdue = false
	}
}

// postQueuedNotice tells the conversation's thread, from a goroutine of the
// app's, that its turn is queued. It must be called where spawn may be.
func (a *App) postQueuedNotice(ctx context.Context, conversation string) {
	a.spawn(ctx, "queued notice", func(ctx context.Context) {
		if _, channel, thread, ok := parseKey(conversation); ok {
			a.post(ctx, channel, thread, queuedText)
		}
	})
}

// firstRestartNote reports whether the conversation's thread is to be
// promised an answer after the restart (restartingRecordedText): the first
// time while its queue has work. The shutdown may cut a turn or a resume of
// the conversation and leave messages queued behind it not started; the
// next process answers them all in one turn, so the thread is told once.
func (a *App) firstRestartNote(conversation string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queues[conversation]
	if q == nil {
		return true
	}
	if q.restartTold {
		return false
	}
	q.restartTold = true
	return true
}

// sweep recovers lost resumes every SweepInterval until stopping is
// closed. Each resume goes on its conversation's queue. A conversation with
// work queued or running here is left to a later sweep, as takeover leaves
// it: that work may be the run's resume already (one queued behind a long
// turn would otherwise be queued again by every sweep until the turn
// ends), and a turn or a takeover resumes the decided run it finds its
// conversation paused on. The run stays listed until it is resumed, so a
// later sweep finds it otherwise.
func (a *App) sweep(ctx context.Context, stopping <-chan struct{}) {
	t := time.NewTicker(a.cfg.SweepInterval)
	defer t.Stop()
	for {
		err := a.ag.Sweep(ctx, func(runID, conversation string) {
			// Once the shutdown began, the next process's sweep resumes
			// it.
			if !closed(stopping) && !a.busy(conversation) {
				a.resumeFound(ctx, conversation, runID)
			}
		})
		if err != nil && ctx.Err() == nil {
			a.log.Warn("sweep", "err", err)
			a.m.error("sweep")
		}
		select {
		case <-stopping:
			return
		case <-t.C:
		}
	}
}

// takeover looks every TakeoverInterval, until stopping is closed, for
// conversations with recorded messages that no turn answered in time (their
// process died, or their turn never started), and queues a TakeOver on
// each one's queue. Where a live process holds the conversation, or its
// own turn ran first, TakeOver does nothing. A conversation with work
// queued or running here is left to a later scan: that work holds it (a
// TakeOver behind it would find it answered, or be listed again), and a
// long turn would otherwise gather a TakeOver every scan. While every turn
// slot is busy, a TakeOver waits for one in arrival order, as any turn
// does, rather than being left to a scan that finds a slot free: while
// turns wait for slots, each slot freed goes to them, never to a scan that
// only tries, so a dead process's conversations would wait for as long as
// the load lasts. It waits without telling the thread (see turnSlot): the
// conversation may be another process's, answering it in a turn that
// outlasts the lease's time. Each scan takes the next takeoverBatch of the
// listing, from its start again once one reaches its end: the oldest
// listed are held by live turns longer than the lease's time under load,
// and a scan of the same first ones would never reach a dead process's
// conversations listed after them.
func (a *App) takeover(ctx context.Context, stopping <-chan struct{}) {
	t := time.NewTicker(a.cfg.TakeoverInterval)
	defer t.Stop()
	offset := 0
	for {
		keys, err := a.ag.Unanswered(ctx, offset, takeoverBatch)
		if err != nil && ctx.Err() == nil {
			a.log.Warn("takeover scan", "err", err)
			a.m.error("takeover")
		}
		offset += len(keys)
		if len(keys) < takeoverBatch {
			offset = 0
		}
		for _, key := range keys {
			if closed(stopping) {
				break // a scan that ends in the shutdown starts nothing
			}
			if !a.busy(key) {
				a.takeOverLater(ctx, key)
			}
		}
		select {
		case <-stopping:
			return
		case <-t.C:
		}
	}
}

// busy reports whether key has work queued or running in this process.
func (a *App) busy(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.queues[key]
	return ok
}

// takeOverLater queues a TakeOver of the conversation on its queue.
func (a *App) takeOverLater(ctx context.Context, key string) {
	a.enqueue(ctx, key, func(ctx context.Context) {
		if ctx.Err() != nil {
			return // the next process takes it over
		}
		s, err := a.turnSlot(ctx, key, false)
		if err != nil {
			return
		}
		defer s.release()
		a.takeOverTurn(ctx, key)
	})
}

// closed reports whether c is closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// takeoverBatch bounds the conversations one takeover scan queues.
const takeoverBatch = 100

// noteContext returns a context for a note or a clean-up that must not
// end with ctx (a note in a thread after a turn was cut short, the lookup
// that decides whether to send it, a card update): it keeps ctx's values
// but not its cancellation, and ends after d or at the shutdown deadline,
// whichever comes first. ok is false, and the note must be skipped, once
// the shutdown deadline has passed.
func (a *App) noteContext(ctx context.Context, d time.Duration) (_ context.Context, cancel context.CancelFunc, ok bool) {
	notes, _ := ctx.Value(notesKey{}).(context.Context)
	if notes == nil {
		notes = context.Background()
	}
	if notes.Err() != nil {
		return nil, func() {}, false
	}
	nctx, cancelNote := context.WithTimeout(context.WithoutCancel(ctx), d)
	stop := context.AfterFunc(notes, cancelNote)
	return nctx, func() {
		stop()
		cancelNote()
	}, true
}

// eventFields are the fields the app reads of an Events API event.
type eventFields struct {
	Type        string `json:"type"`
	SubType     string `json:"subtype"`
	User        string `json:"user"`
	BotID       string `json:"bot_id"`
	Channel     string `json:"channel"`
	ChannelType string `json:"channel_type"`
	Text        string `json:"text"`
	TS          string `json:"ts"`
	ThreadTS    string `json:"thread_ts"`
	// Team is the author's workspace, and UserTeam too in a channel
	// shared with another organisation.
	Team      string `json:"team"`
	UserTeam  string `json:"user_team"`
	Tab       string `json:"tab"`
	SubteamID string `json:"subteam_id"`
	// RemovedUsers are those a subteam_members_changed event took out
	// of the group.
	RemovedUsers []string `json:"removed_users"`
	// Subteam is the user group a subteam_updated event is about.
	Subteam struct {
		ID    string   `json:"id"`
		Users []string `json:"users"`
		// DateDelete is set (a Unix time) on a group disabled.
		DateDelete int64 `json:"date_delete"`
	} `json:"subteam"`
	// Files are the files a message carries.
	Files []struct {
		ID    string `json:"id"`
		Name  string `json:"name"`
		Title string `json:"title"`
	} `json:"files"`
	// Edited is set on the app_mention Slack sends again when a
	// person edits a message mentioning the bot; only its presence is
	// read.
	Edited *struct{} `json:"edited"`
	// View is the Home tab as the user opened it (app_home_opened),
	// of which only its hash is read.
	View struct {
		Hash string `json:"hash"`
	} `json:"view"`
}

// fileNames names the files of a message: each by its title, name or id.
func (ev *eventFields) fileNames() []string {
	var out []string
	for _, f := range ev.Files {
		out = append(out, cmp.Or(f.Title, f.Name, f.ID))
	}
	return out
}

// payload is what the app reads of an envelope's payload to route it,
// decoded with the envelope in one pass: the fields of the events the app
// handles, and of clicks. The rest (blocks, the card or view a click came
// from) is skipped unread, so the echoes of the bot's own posts, most of
// the events, cost little. A view submission and a slash command are then
// decoded in full (envelope.decodePayload).
type payload struct {
	// Type is event_callback for an event, the interaction's type for an
	// interaction.
	Type string `json:"type"`

	// Events.
	TeamID  string      `json:"team_id"`
	EventID string      `json:"event_id"`
	Event   eventFields `json:"event"`

	// Interactions.
	Team      teamRef `json:"team"`
	Container struct {
		// ThreadTS is the thread of the message whose button was pressed.
		ThreadTS string `json:"thread_ts"`
	} `json:"container"`
	TriggerID string `json:"trigger_id"`
	User      struct {
		ID string `json:"id"`
		// TeamID is the clicker's own workspace (another organisation's
		// for a guest of a shared channel).
		TeamID string `json:"team_id"`
	} `json:"user"`
	Channel struct {
		ID string `json:"id"`
	} `json:"channel"`
	View struct {
		CallbackID string `json:"callback_id"`
	} `json:"view"`
	Actions []struct {
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	} `json:"actions"`
}

// teamRef is an interaction's team, {"id": ...}; anything else decodes to
// no id.
type teamRef struct{ ID string }

func (t *teamRef) UnmarshalJSON(b []byte) error {
	var o struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(b, &o) == nil {
		t.ID = o.ID
	}
	return nil
}

// handle acks an envelope at once and routes it. An envelope that did not
// decode is acked, so that Slack does not deliver it again, and logged
// unless it is an event the app does not handle (whose fields may have
// other shapes).
func (a *App) handle(ctx context.Context, env *envelope) {
	start := env.received
	a.m.envelope(env.Type)
	if env.bad != nil {
		if env.Type == envelopeEvents && !handledEvent(env.Payload.Event.Type) {
			a.ack(env, nil, start)
		} else {
			a.malformed(env, env.bad, start)
		}
		return
	}
	switch env.Type {
	case envelopeEvents:
		var once sync.Once
		a.onEventsAPI(ctx, env, func() { once.Do(func() { a.ack(env, nil, start) }) })
	case envelopeInteractive:
		a.onInteractive(ctx, env, start)
	case envelopeCommand:
		a.onSlash(ctx, env, start)
	default:
		a.ack(env, nil, start)
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
func (a *App) refuse(ctx context.Context, env *envelope) {
	start := env.received
	a.m.envelope(env.Type)
	switch env.Type {
	case envelopeEvents:
		// Left unacked on purpose: Slack delivers it again.
		a.log.Info("shutting down: leaving an event unacked for Slack to deliver again", "envelope", env.ID)
	case envelopeCommand:
		a.ack(env, ephemeral(restartingCommandText), start)
	case envelopeInteractive:
		p := &env.Payload
		switch slack.InteractionType(p.Type) {
		case slack.InteractionTypeViewSubmission:
			a.ack(env, viewError(p.View.CallbackID, restartingSubmitText), start)
		case slack.InteractionTypeBlockActions:
			a.ack(env, nil, start)
			a.spawn(ctx, "refuse", func(ctx context.Context) {
				a.tell(ctx, p.User.ID, p.Channel.ID, p.Container.ThreadTS, restartingClickText)
			})
		default:
			a.ack(env, nil, start)
		}
	default:
		a.ack(env, nil, start)
	}
}

// malformed logs an envelope whose payload did not decode, and acks it:
// a form's submission with an error under its input, so that the form
// stays open and its sender learns that nothing was recorded.
func (a *App) malformed(env *envelope, err error, start time.Time) {
	a.log.Warn("skipping a malformed envelope", "envelope", env.ID, "type", env.Type, "err", err)
	a.m.error("bad_envelope")
	var payload any
	if env.Type == envelopeInteractive && env.Payload.Type == string(slack.InteractionTypeViewSubmission) {
		payload = viewError(env.Payload.View.CallbackID, unreadableSubmitText)
	}
	a.ack(env, payload, start)
}

// unreadableSubmitText answers a form's submission that could not be read.
const unreadableSubmitText = "I couldn't read this submission, so nothing was recorded. The card's buttons still work."

// ephemeral is the ack payload of a slash command answered privately,
// within Slack's bounds on the text and on the encoded reply (characters
// JSON escapes, such as control characters, take six bytes each).
func ephemeral(text string) map[string]any {
	return map[string]any{"response_type": "ephemeral", "text": clipEncoded(clip(text, maxEphemeralChars), maxEphemeralBytes)}
}

// maxEphemeralChars bounds an ephemeral answer's text, in characters as
// textLen counts them.
const maxEphemeralChars = 3900

// maxEphemeralBytes bounds the JSON of an ephemeral answer's text, well
// within maxAckSize.
const maxEphemeralBytes = 12 * 1024

// clipEncoded cuts text until its JSON encoding takes at most max bytes.
func clipEncoded(text string, limit int) string {
	for {
		b, _ := json.Marshal(text)
		if len(b) <= limit {
			return text
		}
		n := utf8.RuneCountInString(text)
		text = clip(text, max(0, n*limit/len(b)-2))
	}
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
	env   *envelope
	start time.Time
	once  sync.Once
}

func (a *App) acker(env *envelope, start time.Time) *acker {
	return &acker{a: a, env: env, start: start}
}

// ack acks the envelope with payload unless it was acked already.
func (k *acker) ack(payload any) {
	k.once.Do(func() { k.a.ack(k.env, payload, k.start) })
}

// ack acks env with payload (nil for none) and records how long after its
// arrival it was acked.
func (a *App) ack(env *envelope, payload any, start time.Time) {
	// Past ackWindow Slack has given up on the envelope; do not wait
	// forever for a connection that is gone.
	ctx, cancel := context.WithTimeout(context.Background(), ackWindow)
	defer cancel()
	err := a.sock.ack(ctx, env, payload)
	if errors.Is(err, errAckTooLarge) {
		// Acked bare rather than not at all, which Slack would show as
		// a failure and deliver again.
		a.log.Warn("ack envelope without its reply", "envelope", env.ID, "err", err)
		err = a.sock.ack(ctx, env, nil)
	}
	if err != nil {
		a.log.Warn("ack envelope", "envelope", env.ID, "err", err)
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
