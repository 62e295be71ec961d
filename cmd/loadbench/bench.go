package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/store/redisstore"
)

const (
	requester = "U0REQUEST1"
	approver  = "U0APPROVE1"
	// rttEvery is how often the websocket round trip is sampled during the
	// load phase.
	rttEvery = 20 * time.Millisecond
	// quietFor and quietMax: the bots count as quiet once their store
	// counters stay unchanged for quietFor (checked every quietStep), or
	// after quietMax.
	quietStep = 50 * time.Millisecond
	quietFor  = 200 * time.Millisecond
	quietMax  = 5 * time.Second
	// pausedInflight bounds the mentions waiting for their card while runs
	// are parked.
	pausedInflight = 64
	// stepTimeout bounds each wait of the probe and paused phases.
	stepTimeout = 60 * time.Second
)

// policyFile is the bot's CONFIG_FILE: http_get to the bench's tool server,
// asked when the URL says so and allowed otherwise.
const policyFile = `builtin_tools:
  http_request:
    allowed_hosts: ["127.0.0.1:*"]
    read_only: true
policy:
  default: ask
  rules:
    - id: bench-ask
      tool: http_get
      when: 'args.url.contains("/ask/")'
      verdict: ask
      reason: the load bench asks for this call
    - id: bench-allow
      tool: http_get
      verdict: allow
`

// env is everything one bench run sets up: the fakes, the tool server and
// the bot processes.
type env struct {
	o      options
	slack  *fakeslack.Server
	llm    *fakeopenai.Server
	model  *model
	tools  *httptest.Server
	t      *tracker
	bots   []*botProc
	client *http.Client
	dir    string // DATA_DIR of the embedded store
	prefix string // Redis key prefix
	redis  redis.UniversalClient
	log    io.Writer

	ctx      context.Context
	clicks   sync.WaitGroup // the scheduled clicks
	stopping atomic.Bool    // set once the run ends: no more clicks are scheduled
}

// bench runs every phase and returns the report.
func bench(ctx context.Context, o options, log io.Writer) (*Report, error) {
	tmp, err := os.MkdirTemp("", "loadbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin := o.bot
	if bin == "" {
		fmt.Fprintln(log, "loadbench: building cmd/bot")
		if bin, err = buildBot(ctx, tmp); err != nil {
			return nil, err
		}
	}

	e := &env{o: o, t: newTracker(), client: &http.Client{Timeout: 10 * time.Second}, log: log, ctx: ctx}
	e.t.onCard = e.scheduleClick
	e.slack = fakeslack.Start(fakeslack.WithAPIObserver(e.t.observe))
	defer e.slack.Close()
	e.llm = fakeopenai.Start()
	defer e.llm.Close()
	m := &model{t: e.t}
	m.latency.Store(int64(o.modelLatency))
	e.model = m
	e.llm.Handle(m.answer)
	e.tools = httptest.NewServer(http.HandlerFunc(e.serveTool))
	defer e.tools.Close()
	m.toolURL = e.tools.URL + "/exec"

	e.slack.AddUser(fakeslack.User{ID: requester, Name: "requester"})
	e.slack.AddUser(fakeslack.User{ID: approver, Name: "approver"})
	for i := range o.channels {
		e.slack.AddChannel(fakeslack.Channel{ID: channelID(i), Members: []string{e.slack.BotUserID(), requester, approver}})
	}

	cfgPath := filepath.Join(tmp, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(policyFile), 0o600); err != nil {
		return nil, err
	}
	botEnv := []string{
		"SLACK_APP_TOKEN=" + e.slack.AppToken(),
		"SLACK_BOT_TOKEN=" + e.slack.BotToken(),
		"SLACK_API_URL=" + e.slack.APIURL(),
		"OPENAI_BASE_URL=" + e.llm.URL(),
		"OPENAI_API_KEY=loadbench",
		"CONFIG_FILE=" + cfgPath,
		"LOG_LEVEL=" + o.logLevel,
		"LOG_FORMAT=json",
	}
	if o.botProfile != "" || o.botTrace != "" || o.botHeap != "" {
		botEnv = append(botEnv, "PPROF=true")
	}
	if o.store == "redis" {
		e.prefix = "loadbench-" + randomHex(6)
		botEnv = append(botEnv, "REDIS_URL="+o.redisURL, "REDIS_PREFIX="+e.prefix)
		if c, err := redisstore.NewClient(o.redisURL); err == nil {
			e.redis = c
			defer e.redis.Close()
			defer e.cleanRedis()
		} else {
			fmt.Fprintf(log, "loadbench: %v: stored bytes are not measured and keys with prefix %s are left behind\n", err, e.prefix)
		}
	} else {
		e.dir = filepath.Join(tmp, "data")
		botEnv = append(botEnv, "DATA_DIR="+e.dir)
	}
	botEnv = append(botEnv, o.env...)

	var verbose io.Writer
	if o.verbose {
		verbose = log
	}
	defer e.stopBots()
	for i := range o.replicas {
		p, err := startBot(ctx, fmt.Sprintf("bot%d", i+1), bin, botEnv, verbose)
		if err != nil {
			return nil, err
		}
		e.bots = append(e.bots, p)
	}
	if err := e.slack.WaitConnected(o.replicas, startTimeout); err != nil {
		return nil, fmt.Errorf("the bots did not connect to Socket Mode: %w", err)
	}
	defer e.clicks.Wait()

	empty := func() StorePhase { return StorePhase{ByMethod: map[string]float64{}} }
	rep := &Report{
		Settings: settingsOf(o), Machine: machine(),
		StoreCalls: StoreCalls{Pause: empty(), Decide: empty(), HomeRefresh: empty(), Resume: empty()},
		Paused:     []PausedSample{}, StopErrors: []string{},
	}
	if o.probe > 0 {
		if rep.StoreCalls, err = e.probePhase(); err != nil {
			return nil, fmt.Errorf("probe phase: %w", err)
		}
	}
	if o.conversations > 0 {
		if err := e.loadPhase(rep); err != nil {
			return nil, fmt.Errorf("load phase: %w", err)
		}
	}
	if len(o.paused) > 0 {
		if rep.Paused, err = e.pausedPhase(); err != nil {
			return nil, fmt.Errorf("paused phase: %w", err)
		}
	}
	e.finish(rep)
	return rep, nil
}

// finish ends the run and fills the report's accounting. The bots are
// stopped first, gracefully, so that the accounting sees every execution
// they make, however late (a takeover after a lease ran out, a resume the
// sweep found): once they have exited, nothing runs a tool any more.
//
// Cards posted from then on are not clicked: every conversation that was
// to be clicked was clicked, so such a card is a turn that ran again.
func (e *env) finish(rep *Report) {
	e.stopping.Store(true)
	e.clicks.Wait()
	rep.Machine.LoadEnd = loadAverage()
	for _, b := range e.bots {
		if !b.alive() {
			rep.BotsDied++
		}
	}
	if err := e.stopBots(); err != nil {
		rep.StopErrors = append(rep.StopErrors, err.Error())
	}
	e.accountAll(rep)
}

func channelID(i int) string { return fmt.Sprintf("CLOAD%05d", i) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// stopBots stops every bot once and returns the first failure.
func (e *env) stopBots() error {
	var errs []error
	for _, b := range e.bots {
		if err := b.stop(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", b.name, err))
		}
	}
	e.bots = nil
	return errors.Join(errs...)
}

// cleanRedis deletes the keys of this run's prefix.
func (e *env) cleanRedis() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := e.scanKeys(ctx, func(ctx context.Context, c *redis.Client, keys []string) error {
		// One key a command: a Cluster refuses keys of several hash slots.
		pipe := c.Pipeline()
		for _, k := range keys {
			pipe.Unlink(ctx, k)
		}
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		fmt.Fprintf(e.log, "loadbench: delete keys %s:*: %v\n", e.prefix, err)
	}
}

// eachNode calls fn with a client of each node that holds keys (see
// redisstore.EachPrimary).
func (e *env) eachNode(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	return redisstore.EachPrimary(ctx, e.redis, fn)
}

// scanKeys calls fn with the keys of this run's prefix, at most 1,000 at a
// time, each time with the client of the node that holds them (nodes at
// once, see eachNode).
func (e *env) scanKeys(ctx context.Context, fn func(ctx context.Context, c *redis.Client, keys []string) error) error {
	return e.eachNode(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, e.prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
			if len(keys) == 1000 {
				if err := fn(ctx, c, keys); err != nil {
					return err
				}
				keys = keys[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return fmt.Errorf("scan %s:*: %w", e.prefix, err)
		}
		if len(keys) == 0 {
			return nil
		}
		return fn(ctx, c, keys)
	})
}

// serveTool is the tool the model calls (http_get on /exec/MODE/conv-N):
// it records the execution and, for a held conversation, waits for its
// release before answering.
func (e *env) serveTool(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	id := -1
	if sm := convMarker.FindStringSubmatch(r.URL.Path); sm != nil {
		id, _ = strconv.Atoi(sm[1])
	}
	c, hold := e.t.executedCall(id, at)
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}
	if c != nil {
		e.t.toolAnswered(c, time.Now())
	}
	_, _ = io.WriteString(w, "ok")
}

// scheduleClick approves a card after the click delay, unless the
// conversation is parked or held (the probe clicks those itself), or the
// run is ending.
func (e *env) scheduleClick(c *conv) {
	if c.noClick || c.hold != nil || e.stopping.Load() {
		return
	}
	e.clicks.Add(1)
	time.AfterFunc(e.o.clickDelay, func() {
		defer e.clicks.Done()
		if e.ctx.Err() != nil {
			return
		}
		_ = e.click(c) // counted in the accounting
	})
}

// click presses Approve on the conversation's card. Only a click the fake
// accepted is recorded as one; a refused click never reached a bot, and is
// counted as a failure (and returned).
func (e *env) click(c *conv) error {
	e.t.mu.Lock()
	ts := c.cardTS
	e.t.mu.Unlock()
	at := time.Now()
	id, err := e.slack.Click(approver, c.channel, ts, approveAction, "")
	if err != nil {
		e.t.clickFailed(c)
		fmt.Fprintf(e.log, "loadbench: click conv-%d: %v\n", c.id, err)
		return fmt.Errorf("click conv-%d: %w", c.id, err)
	}
	// The call counts as approved, and the bot's time starts, once the
	// fake has built the click (its payload carries the whole card) and
	// sent its envelope, as an ack's does. The fake sends it within Click
	// when a bot is connected; otherwise it is looked up later (see
	// snapshot).
	var sent time.Time
	if env, ok := e.slack.Envelope(id); ok {
		sent = env.SentAt
	}
	e.t.clicked(c, at, id, sent)
	return nil
}

// snapshot returns copies of the conversations from index from on, with
// the time each click's envelope was sent filled in where it was not
// known at the click: the envelope waited for a connection. The fake
// keeps the latest delivery's time, so it is taken only from an envelope
// delivered once (after more, the click's own time stands in); a click
// whose envelope was never delivered reached no bot, and approved
// nothing.
func (e *env) snapshot(from int) []conv {
	convs := e.t.snapshot(from)
	for i := range convs {
		c := &convs[i]
		if c.clickEnv == "" || !c.clickSent.IsZero() {
			continue
		}
		if env, ok := e.slack.Envelope(c.clickEnv); ok {
			switch env.Deliveries {
			case 0:
				c.clickAt = time.Time{}
			case 1:
				c.clickSent = env.SentAt
			}
		}
	}
	return convs
}

// maxMentionBytes bounds -mention-bytes within a Slack message's 40,000
// characters, the request included.
const maxMentionBytes = 39000

// pastedLine is what a mention's pasted text repeats: a line of kubectl
// output.
const pastedLine = "api-7d9f8b6c5d-x2x4q   1/1   Running   3 (2m ago)   3d\n"

// pasted is n bytes of pasted output, after a line break.
func pasted(n int) string {
	if n == 0 {
		return ""
	}
	return "\n" + strings.Repeat(pastedLine, n/len(pastedLine)+1)[:n-1]
}

// mention starts a conversation.
func (e *env) mention(k convKind) *conv {
	c := e.t.add(k, e.o.channels)
	at := time.Now()
	ts := e.slack.Mention(c.channel, requester, fmt.Sprintf("conv-%d please fetch the status", c.id)+pasted(e.o.mentionBytes))
	e.t.mentioned(c, ts, at)
	return c
}

// scrapeAll sums the bots' metrics.
func (e *env) scrapeAll() (metricSet, error) {
	sum := metricSet{}
	for _, b := range e.bots {
		m, err := b.scrape(e.ctx, e.client)
		if err != nil {
			return nil, err
		}
		for k, v := range m {
			sum[k] += v
		}
	}
	return sum, nil
}

// storeCalls returns the bots' store calls by method.
func (e *env) storeCalls() (map[string]float64, error) {
	m, err := e.scrapeAll()
	if err != nil {
		return nil, err
	}
	calls := m.storeCalls()
	if len(calls) == 0 {
		return nil, errStoreCountMissing
	}
	return calls, nil
}

// quiet waits until the bots' store counters stop moving and returns them.
func (e *env) quiet() (map[string]float64, error) {
	deadline := time.Now().Add(quietMax)
	last, err := e.storeCalls()
	if err != nil {
		return nil, err
	}
	stable := time.Now()
	for time.Now().Before(deadline) && time.Since(stable) < quietFor {
		select {
		case <-time.After(quietStep):
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		}
		cur, err := e.storeCalls()
		if err != nil {
			return nil, err
		}
		if !maps.Equal(cur, last) {
			last, stable = cur, time.Now()
		}
	}
	return last, nil
}

// wait waits for ch or fails after stepTimeout.
func (e *env) wait(ch <-chan struct{}, what string) error {
	timer := time.NewTimer(stepTimeout)
	defer timer.Stop()
	select {
	case <-ch:
		return nil
	case <-timer.C:
		return fmt.Errorf("%s: nothing after %v", what, stepTimeout)
	case <-e.ctx.Done():
		return e.ctx.Err()
	}
}

// periodic are the store methods that, in a probe, only the bots' periodic
// passes call: the health probes (Ping), the takeover scan (Unanswered,
// every TAKEOVER_INTERVAL), the sweep of stalled resumes (Stalled and Due,
// every SWEEP_INTERVAL) and the expiry pass (Due, DueReminders, NextExpiry
// and NextReminder, at the next deadline and at least every
// SWEEP_INTERVAL). They fall into whichever step is open, and are no
// step's work.
var periodic = map[string]bool{
	"Ping": true, "Unanswered": true, "Stalled": true,
	"Due": true, "DueReminders": true, "NextExpiry": true, "NextReminder": true,
}

// oneTrip are the periodic methods that take one Redis round trip each
// (one command on one key); the others' vary.
var oneTrip = map[string]bool{"Ping": true, "Unanswered": true}

// homeMethods are the store methods of the Home tabs' round (the pending
// calls and the standing rules listed): in a probe nothing else calls them
// (slash commands do, and, on Redis, the recall of the pending calls when
// the bot reconnects to the announcements of pauses).
var homeMethods = map[string]bool{"Pending": true, "Records": true}

// homeWait bounds the wait for the Home tabs' round a card and its
// decision set off: the bot gathers changes for 2 s before a round
// (slackapp's HomeRefreshDelay).
const homeWait = 5 * time.Second

// stepCalls sums one probe step's store calls over the conversations.
type stepCalls struct {
	calls map[string]float64
	// trips sums the round trips of the windows whose round trips are
	// all the step's own (tripWindows of them); allTrips those of every
	// window, less those of the periodic calls that take one each.
	trips, allTrips float64
	tripWindows     int
}

// probePhase runs o.probe conversations one at a time and counts the store
// calls of each step, split by what the bench sees:
//
//   - pause: from the mention until the card is posted and the bots are
//     quiet;
//   - decide: from the click until the tool starts (the tool is held) and
//     the bots are quiet: the decision and the resume's start;
//   - home refresh: with the tool still held, until the bots have listed
//     the pending calls for the Home tabs' round that the card and the
//     decision set off (2 s after the card) and are quiet;
//   - resume: from the tool's release until the answer is posted and the
//     bots are quiet.
//
// Each conversation's counts are averaged, and so are the Redis round
// trips of each step. The periodic passes' calls (see periodic) are left
// out of every step, with their round trips: subtracted where each takes
// one, and otherwise by leaving the window out of the step's mean round
// trips (-1 if that leaves none). The Home round's calls (see
// homeMethods) count in the home refresh wherever they fall (on a slow
// machine the round may come before the decide step is over), and a
// step's window they fell into likewise gives no round trips.
func (e *env) probePhase() (StoreCalls, error) {
	steps := map[string]*stepCalls{}
	for _, name := range []string{"pause", "decide", "home", "resume"} {
		steps[name] = &stepCalls{calls: map[string]float64{}}
	}
	add := func(step string, before, after map[string]float64) {
		own := true // the window's round trips are all the step's
		// Round trips are counted on Redis only.
		trips, counted := after[roundTripsKey]
		trips -= before[roundTripsKey]
		for k, v := range after {
			d := v - before[k]
			switch {
			case d == 0 || k == roundTripsKey:
			case periodic[k] && oneTrip[k]:
				if counted {
					trips -= d
				}
			case periodic[k]:
				own = false
			case homeMethods[k] && step != "home":
				steps["home"].calls[k] += d
				own = false
			default:
				steps[step].calls[k] += d
			}
		}
		st := steps[step]
		st.allTrips += trips
		if own {
			st.trips += trips
			st.tripWindows++
		}
	}
	// A warm-up conversation first, outside the counts, so per-channel
	// lookups and the policy cache are not counted as per-call work. It
	// also tells whether the bots refresh Home tabs: if no round follows
	// its card, the later conversations do not wait for one.
	waitHome := true
	for i := -1; i < e.o.probe; i++ {
		start, err := e.quiet()
		if err != nil {
			return StoreCalls{}, err
		}
		c := e.mention(convKind{ask: true, hold: true})
		if err := e.wait(c.card, fmt.Sprintf("probe conv-%d: card", c.id)); err != nil {
			return StoreCalls{}, err
		}
		paused, err := e.quiet()
		if err != nil {
			return StoreCalls{}, err
		}
		if err := e.click(c); err != nil {
			return StoreCalls{}, err
		}
		if err := e.wait(c.executed, fmt.Sprintf("probe conv-%d: tool run", c.id)); err != nil {
			return StoreCalls{}, err
		}
		decided, err := e.quiet()
		if err != nil {
			return StoreCalls{}, err
		}
		homed := decided
		if waitHome {
			if homed, err = e.homeRound(decided); err != nil {
				return StoreCalls{}, err
			}
		}
		close(c.hold)
		if err := e.wait(c.answered, fmt.Sprintf("probe conv-%d: answer", c.id)); err != nil {
			return StoreCalls{}, err
		}
		resumed, err := e.quiet()
		if err != nil {
			return StoreCalls{}, err
		}
		if i < 0 {
			waitHome = resumed["Pending"] > start["Pending"]
			continue
		}
		add("pause", start, paused)
		add("decide", paused, decided)
		add("home", decided, homed)
		add("resume", homed, resumed)
	}
	n := float64(e.o.probe)
	phase := func(st *stepCalls) StorePhase {
		p := StorePhase{ByMethod: map[string]float64{}}
		for k, v := range st.calls {
			p.ByMethod[k] = v / n
			p.Total += v / n
		}
		switch {
		case st.tripWindows > 0:
			p.RoundTrips = st.trips / float64(st.tripWindows)
		case st.allTrips > 0:
			p.RoundTrips = -1 // every window held other work's round trips
		}
		return p
	}
	return StoreCalls{
		Conversations: e.o.probe,
		Pause:         phase(steps["pause"]),
		Decide:        phase(steps["decide"]),
		HomeRefresh:   phase(steps["home"]),
		Resume:        phase(steps["resume"]),
	}, nil
}

// homeRound waits, from the store counts before, for the Home tabs' round:
// until the bots list the pending calls or homeWait has passed, and then
// until they are quiet. It returns the counts then.
func (e *env) homeRound(before map[string]float64) (map[string]float64, error) {
	deadline := time.Now().Add(homeWait)
	for time.Now().Before(deadline) {
		cur, err := e.storeCalls()
		if err != nil {
			return nil, err
		}
		if cur["Pending"] > before["Pending"] {
			break
		}
		select {
		case <-time.After(quietStep):
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		}
	}
	return e.quiet()
}

// loadPhase offers o.conversations mentions at o.rate and waits for them
// to finish, sampling the websocket round trip meanwhile.
func (e *env) loadPhase(rep *Report) error {
	o := e.o
	first := e.t.count()
	var rtts []time.Duration
	var rttMu sync.Mutex
	stopRTT := make(chan struct{})
	var rttWG sync.WaitGroup
	rttWG.Go(func() {
		tick := time.NewTicker(rttEvery)
		defer tick.Stop()
		for {
			select {
			case <-stopRTT:
				return
			case <-tick.C:
			}
			if d, err := e.slack.RoundTrip(time.Second); err == nil {
				rttMu.Lock()
				rtts = append(rtts, d)
				rttMu.Unlock()
			}
		}
	})

	botCPU0, benchCPU0, redisCPU0 := e.cpuSeconds()
	api0 := e.t.apiCounts()
	start := time.Now()
	profiled := make(chan error, 1)
	if o.botProfile != "" || o.botTrace != "" {
		secs := max(1, int(float64(o.conversations)/o.rate))
		kind, path := "profile", o.botProfile
		if o.botTrace != "" {
			kind, path = "trace", o.botTrace
		}
		go func() {
			profiled <- e.bots[0].fetch(e.ctx, fmt.Sprintf("/debug/pprof/%s?seconds=%d", kind, secs), path)
		}()
	} else {
		profiled <- nil
	}
	var convs []*conv
	for i := range o.conversations {
		at := start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-e.ctx.Done():
			}
		}
		if e.ctx.Err() != nil {
			break
		}
		// Spread asks evenly: conversation i asks when the running share
		// crosses a whole number.
		ask := int(float64(i+1)*o.askShare) > int(float64(i)*o.askShare)
		convs = append(convs, e.mention(convKind{ask: ask}))
	}
	offered := time.Since(start)
	deadline := time.NewTimer(o.timeout)
	defer deadline.Stop()
	for _, c := range convs {
		select {
		case <-c.answered:
			continue
		case <-deadline.C:
		case <-e.ctx.Done():
		}
		break
	}
	close(stopRTT)
	rttWG.Wait()
	e.clicks.Wait()
	if err := <-profiled; err != nil {
		return fmt.Errorf("bot cpu profile: %w", err)
	}
	if _, err := e.quiet(); err != nil {
		return err
	}

	botCPU1, benchCPU1, redisCPU1 := e.cpuSeconds()
	rep.Load = loadResult(e.snapshot(first)[:len(convs)], o, start, offered)
	if done := rep.Load.Cycles + rep.Load.Allowed; done > 0 && botCPU0 >= 0 && botCPU1 >= 0 {
		rep.Load.BotCPUPerConversation = (botCPU1 - botCPU0) * 1000 / float64(done)
		rep.Load.BenchCPUPerConversation = (benchCPU1 - benchCPU0) * 1000 / float64(done)
	}
	if done := rep.Load.Cycles + rep.Load.Allowed; done > 0 && redisCPU0 >= 0 && redisCPU1 >= 0 {
		rep.Load.RedisCPUPerConversation = (redisCPU1 - redisCPU0) * 1000 / float64(done)
	}
	if done := rep.Load.Cycles + rep.Load.Allowed; done > 0 {
		rep.Load.SlackCalls = perConversation(api0, e.t.apiCounts(), done)
	}
	rttMu.Lock()
	rep.Load.RoundTrip = summarize(rtts)
	rttMu.Unlock()
	return nil
}

// perConversation is the calls counted from before to after, by method,
// per conversation of done.
func perConversation(before, after map[string]int, done int) Calls {
	p := Calls{ByMethod: map[string]float64{}}
	for m, n := range after {
		if d := n - before[m]; d > 0 {
			p.ByMethod[m] = float64(d) / float64(done)
			p.Total += float64(d) / float64(done)
		}
	}
	return p
}

// cpuSeconds returns the CPU time the bots have used, summed
// (process_cpu_seconds_total; -1 if a scrape fails), that of this
// process, and that of the Redis server (of every primary of a Cluster;
// -1 on the embedded store or if it cannot be read).
func (e *env) cpuSeconds() (bots, bench, redisCPU float64) {
	m, err := e.scrapeAll()
	bots = m["process_cpu_seconds_total"]
	if err != nil {
		bots = -1
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		bench = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	redisCPU = -1
	if e.redis != nil {
		var mu sync.Mutex
		var sum float64
		err := e.eachNode(e.ctx, func(ctx context.Context, c *redis.Client) error {
			info, err := c.Info(ctx, "cpu").Result()
			if err != nil {
				return err
			}
			s, err := redisCPUSeconds(info)
			mu.Lock()
			sum += s
			mu.Unlock()
			return err
		})
		if err != nil {
			fmt.Fprintf(e.log, "loadbench: Redis CPU time: %v\n", err)
		} else {
			redisCPU = sum
		}
	}
	return bots, bench, redisCPU
}

// redisCPUSeconds is the CPU time of the Redis server in the answer to
// INFO cpu: used_cpu_user plus used_cpu_sys, in seconds.
func redisCPUSeconds(info string) (float64, error) {
	var sum float64
	found := 0
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (k != "used_cpu_user" && k != "used_cpu_sys") {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s: %w", k, err)
		}
		sum += f
		found++
	}
	if found != 2 {
		return 0, errors.New("INFO cpu has no used_cpu_user and used_cpu_sys")
	}
	return sum, nil
}

// accountAll fills the report's ack and accounting sections over every
// envelope and conversation of the run. An envelope the fake had to
// deliver again (the bot it was sent to closed its connection without
// acking it, and another replica, or the same bot reconnected, acked it)
// counts as redelivered, not as acked: its ack time would be from the
// last delivery, hiding the wait.
func (e *env) accountAll(rep *Report) {
	var acks []time.Duration
	for _, env := range e.slack.Envelopes() {
		switch {
		case !env.Acked:
			rep.Accounting.UnackedEnvelopes++
		case env.RetryAttempt > 0 || env.Deliveries > 1:
			rep.Accounting.RedeliveredEnvelopes++
		default:
			acks = append(acks, env.AckedAt.Sub(env.SentAt))
		}
	}
	rep.Acks = summarize(acks)
	rep.Acks.Count = len(acks)
	if rep.Load.RoundTrip.P99 > 0 {
		rep.AckToRoundTripP99 = rep.Acks.P99 / rep.Load.RoundTrip.P99
	}
	rep.Accounting.account(e.snapshot(0))
	e.t.mu.Lock()
	rep.Accounting.UnknownExecutions = e.t.unknown
	rep.Accounting.OtherReplySample = e.t.otherSample
	e.t.mu.Unlock()
	rep.Accounting.Unapproved += rep.Accounting.UnknownExecutions
}

// pausedPhase parks runs (cards never clicked) up to each count of
// o.paused and samples the bots' memory and the stored bytes at each. The
// model answers without delay meanwhile. First, o.pausedWarmup
// conversations whose call is allowed are answered at the same pace, so
// that the bots meet the first count having run a burst like the later
// ones: connection pools, goroutines and code pages that any burst grows
// are then in every sample, and what differs is what the paused runs
// hold.
func (e *env) pausedPhase() ([]PausedSample, error) {
	// Parking measures memory, not latency: the model answers at once.
	e.model.latency.Store(0)
	if n := e.o.pausedWarmup; n > 0 {
		start := time.Now()
		if missed, err := e.burst(n, convKind{}, func(c *conv) <-chan struct{} { return c.answered }); err != nil {
			return nil, err
		} else if missed > 0 {
			return nil, fmt.Errorf("warm-up: %d of %d conversations got no answer within %v", missed, n, stepTimeout)
		}
		if _, err := e.quiet(); err != nil {
			return nil, err
		}
		fmt.Fprintf(e.log, "loadbench: %d warm-up conversations answered in %v\n", n, time.Since(start).Round(time.Millisecond))
	}
	baseBytes, err := e.storedBytes()
	if err != nil {
		return nil, err
	}
	var out []PausedSample
	parked := 0
	for _, level := range e.o.paused {
		start := time.Now()
		missed, err := e.burst(level-parked, convKind{ask: true, noClick: true}, func(c *conv) <-chan struct{} { return c.card })
		if err != nil {
			return out, err
		}
		if missed > 0 {
			return out, fmt.Errorf("%d of %d parked runs got no card within %v", missed, level-parked, stepTimeout)
		}
		parked = level
		if _, err := e.quiet(); err != nil {
			return out, err
		}
		parkedIn := time.Since(start)
		s := PausedSample{Runs: level}
		var gcs []int64
		if s.AfterBurst, gcs, err = e.memory(); err != nil {
			return out, err
		}
		if e.o.settle > 0 {
			settling := time.Now()
			var settled bool
			if s.Settled, settled, err = e.settle(gcs); err != nil {
				return out, err
			}
			s.SettleSeconds = time.Since(settling).Seconds()
			if !settled {
				fmt.Fprintf(e.log, "loadbench: %d paused runs: memory still falling or no collection after -settle %v\n", level, e.o.settle)
			}
		}
		bytes, err := e.storedBytes()
		if err != nil {
			return out, err
		}
		if bytes >= 0 && baseBytes >= 0 {
			s.StoredBytesPerRun = float64(bytes-baseBytes) / float64(level)
		} else {
			s.StoredBytesPerRun = -1
		}
		e.t.mu.Lock()
		if n := len(e.t.history); n > 0 {
			sum := 0
			for _, h := range e.t.history {
				sum += h
			}
			s.RawHistoryBytesPerRun = float64(sum) / float64(n)
		}
		e.t.mu.Unlock()
		fmt.Fprintf(e.log, "loadbench: %d paused runs parked in %v\n", level, parkedIn.Round(time.Millisecond))
		out = append(out, s)
		// Last: the profile's collection changes what the bot holds.
		if e.o.botHeap != "" {
			path := heapProfilePath(e.o.botHeap, level, e.o.paused[len(e.o.paused)-1])
			if err := e.bots[0].fetch(e.ctx, "/debug/pprof/heap?gc=1", path); err != nil {
				return out, fmt.Errorf("bot heap profile: %w", err)
			}
		}
	}
	return out, nil
}

// burst offers n mentions of kind k at o.pausedRate, at most
// pausedInflight of them waiting at once for until(c) (so that the bot's
// queues never overflow), and waits for the last. It returns how many
// waited in vain for stepTimeout.
func (e *env) burst(n int, k convKind, until func(*conv) <-chan struct{}) (int64, error) {
	start := time.Now()
	slots := make(chan struct{}, pausedInflight)
	var waiting sync.WaitGroup
	var missed atomic.Int64
	for i := 0; i < n && e.ctx.Err() == nil; i++ {
		at := start.Add(time.Duration(float64(i) / e.o.pausedRate * float64(time.Second)))
		if d := time.Until(at); d > 0 {
			select {
			case <-time.After(d):
			case <-e.ctx.Done():
			}
		}
		select {
		case slots <- struct{}{}:
		case <-e.ctx.Done():
			continue
		}
		c := e.mention(k)
		waiting.Go(func() {
			defer func() { <-slots }()
			if e.wait(until(c), "") != nil {
				missed.Add(1)
			}
		})
	}
	waiting.Wait()
	return missed.Load(), e.ctx.Err()
}

// storedBytes is what the store holds: the sum of MEMORY USAGE over the
// run's Redis keys, or the embedded store's file size; -1 when it cannot
// be measured.
func (e *env) storedBytes() (int64, error) {
	if e.dir != "" {
		fi, err := os.Stat(filepath.Join(e.dir, "toolgate.db"))
		if err != nil {
			return 0, fmt.Errorf("size of the embedded store: %w", err)
		}
		return fi.Size(), nil
	}
	if e.redis == nil {
		return -1, nil
	}
	var total atomic.Int64
	err := e.scanKeys(e.ctx, func(ctx context.Context, c *redis.Client, keys []string) error {
		pipe := c.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = pipe.MemoryUsage(ctx, k, 0)
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("memory usage of %s:*: %w", e.prefix, err)
		}
		for _, c := range cmds {
			total.Add(c.Val())
		}
		return nil
	})
	return total.Load(), err
}

// machine describes the host: CPUs and model name.
func machine() Machine {
	m := Machine{CPUs: numCPU(), LoadStart: loadAverage()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}
