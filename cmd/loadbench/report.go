package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one bench run measured. Times are in milliseconds,
// sizes in bytes. Every field is always present in the JSON.
type Report struct {
	Settings Settings `json:"settings"`
	Machine  Machine  `json:"machine"`
	// Acks are the times from an envelope's delivery to its ack, over
	// every envelope of the run acked at its first delivery (see
	// Accounting.RedeliveredEnvelopes).
	Acks Dist `json:"acks_ms"`
	// AckToRoundTripP99 is Acks.P99 / Load.RoundTrip.P99.
	AckToRoundTripP99 float64        `json:"ack_p99_over_round_trip_p99"`
	Load              LoadResult     `json:"load"`
	StoreCalls        StoreCalls     `json:"store_calls"`
	Paused            []PausedSample `json:"paused"`
	Accounting        Accounting     `json:"accounting"`
	// BotsDied counts bot processes that were not running at the end.
	BotsDied   int      `json:"bots_died"`
	StopErrors []string `json:"stop_errors"`
}

// Settings are the flags of the run.
type Settings struct {
	Conversations  int      `json:"conversations"`
	Rate           float64  `json:"rate_per_second"`
	ModelLatencyMS float64  `json:"model_latency_ms"`
	ClickDelayMS   float64  `json:"click_delay_ms"`
	AskShare       float64  `json:"ask_share"`
	Store          string   `json:"store"`
	Replicas       int      `json:"replicas"`
	Probe          int      `json:"probe_conversations"`
	Paused         []int    `json:"paused_levels"`
	PausedWarmup   int      `json:"paused_warmup"`
	Channels       int      `json:"channels"`
	MentionBytes   int      `json:"mention_bytes"`
	Env            []string `json:"bot_env"`
}

func settingsOf(o options) Settings {
	return Settings{
		Conversations: o.conversations, Rate: o.rate, ModelLatencyMS: ms(o.modelLatency), ClickDelayMS: ms(o.clickDelay),
		AskShare: o.askShare, Store: o.store, Replicas: o.replicas, Probe: o.probe,
		Paused: nonNil(o.paused), PausedWarmup: o.pausedWarmup, Channels: o.channels, MentionBytes: o.mentionBytes, Env: nonNil(o.env),
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// Machine is the host the run was on.
type Machine struct {
	CPUs  int    `json:"cpus"`
	Model string `json:"cpu_model"`
	// LoadStart and LoadEnd are the one-minute load averages when the
	// bots had started and at the end: other work on the machine makes
	// the tails noisy.
	LoadStart float64 `json:"load_average_start"`
	LoadEnd   float64 `json:"load_average_end"`
}

// loadAverage is the one-minute load average, 0 if unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

func numCPU() int { return runtime.NumCPU() }

// Dist is a distribution of durations in milliseconds.
type Dist struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

// summarize returns the nearest-rank percentiles of ds.
func summarize(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Dist{Count: len(s), P50: ms(rank(0.50)), P99: ms(rank(0.99)), Max: ms(s[len(s)-1])}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// LoadResult is the load phase: conversations offered at a rate.
type LoadResult struct {
	Offered        int     `json:"offered"`
	OfferedSeconds float64 `json:"offered_seconds"`
	// Cycles counts asked conversations that completed: card, click, one
	// execution after the click, answer.
	Cycles int `json:"cycles"`
	// CyclesPerSecond is Cycles over the time from the first mention to
	// the last answer of a cycle.
	CyclesPerSecond float64 `json:"cycles_per_second"`
	// Allowed counts completed conversations whose call the policy
	// allowed.
	Allowed int `json:"allowed"`
	// RoundTrip is the websocket PING -> PONG time to the bots, sampled
	// during the phase.
	RoundTrip Dist `json:"round_trip_ms"`
	// BotCPUPerConversation is the CPU time (user and system) the bots
	// spent in the phase (process_cpu_seconds_total, summed), per
	// conversation completed; BenchCPUPerConversation is the same for
	// this process (the fakes, and the bench's own work). Milliseconds;
	// zero where unknown.
	BotCPUPerConversation   float64 `json:"bot_cpu_ms_per_conversation"`
	BenchCPUPerConversation float64 `json:"bench_cpu_ms_per_conversation"`
	// RedisCPUPerConversation is the same for the Redis server (INFO cpu:
	// used_cpu_user and used_cpu_sys): the whole server's, so the work of
	// its other clients counts too. Zero on the embedded store or where
	// unknown.
	RedisCPUPerConversation float64 `json:"redis_cpu_ms_per_conversation"`
	// SlackCalls are the Web API calls the bots made in the phase (every
	// one the fake Slack answered, failed ones included), per
	// conversation completed.
	SlackCalls Calls `json:"slack_calls_per_conversation"`
	// BotAdded is end to end minus the time spent in the fakes: for each
	// model call, the time the fake model spent on it (InModel), and the
	// tool's time.
	BotAdded BotAdded `json:"bot_added_ms"`
	// EndToEnd are the same spans, fakes included.
	EndToEnd BotAdded `json:"end_to_end_ms"`
	// InModel is the time the fake model spent on the first request of
	// each asked conversation, from the start of its body's read to its
	// answer written: the model latency, the fake's own work (reading and
	// decoding the request included), and how late its timer and its
	// writes were.
	InModel Dist `json:"in_model_ms"`
}

// BotAdded are the spans of a conversation.
type BotAdded struct {
	MentionToCard   Dist `json:"mention_to_card"`
	ClickToExecuted Dist `json:"click_to_executed"`
	ClickToAnswer   Dist `json:"click_to_answer"`
	// MentionToAnswerAllowed is for conversations whose call was allowed.
	MentionToAnswerAllowed Dist `json:"mention_to_answer_allowed"`
}

// loadResult computes the load phase's numbers from its conversations.
// Each span counts every conversation that reached its end, finished or
// not; cycles count only the finished ones.
func loadResult(convs []conv, o options, start time.Time, offered time.Duration) LoadResult {
	r := LoadResult{Offered: len(convs), OfferedSeconds: offered.Seconds()}
	var card, exec, answer, allowed []time.Duration
	var eCard, eExec, eAnswer, eAllowed, model []time.Duration
	var last time.Time
	// The time in the model is what the fake model spent on each request,
	// from the start of its body's read to its answer written: its
	// latency, its own work (decoding the request included), and how late
	// its timer and its writes were on a busy machine.
	inModel := func(c conv, step int) time.Duration {
		if c.inModel[step] > 0 {
			return c.inModel[step]
		}
		return o.modelLatency
	}
	for _, c := range convs {
		if c.ask && !c.cardAt.IsZero() {
			d := c.cardAt.Sub(c.mentionAt)
			eCard, card = append(eCard, d), append(card, d-inModel(c, 0))
			model = append(model, inModel(c, 0))
		}
		clicked := c.approvedAt()
		approved := c.ask && !clicked.IsZero() && len(c.execAt) > 0 && !c.execAt[0].Before(clicked)
		if approved {
			d := c.execAt[0].Sub(clicked)
			eExec, exec = append(eExec, d), append(exec, d)
		}
		if c.answerAt.IsZero() || len(c.execAt) != 1 || c.execEnd.IsZero() {
			continue
		}
		tool := c.execEnd.Sub(c.execAt[0])
		switch {
		case !c.ask:
			r.Allowed++
			d := c.answerAt.Sub(c.mentionAt)
			eAllowed, allowed = append(eAllowed, d), append(allowed, d-inModel(c, 0)-inModel(c, 1)-tool)
		case approved:
			r.Cycles++
			if c.answerAt.After(last) {
				last = c.answerAt
			}
			d := c.answerAt.Sub(clicked)
			eAnswer, answer = append(eAnswer, d), append(answer, d-inModel(c, 1)-tool)
		}
	}
	if r.Cycles > 0 {
		r.CyclesPerSecond = float64(r.Cycles) / last.Sub(start).Seconds()
	}
	r.BotAdded = BotAdded{summarize(card), summarize(exec), summarize(answer), summarize(allowed)}
	r.EndToEnd = BotAdded{summarize(eCard), summarize(eExec), summarize(eAnswer), summarize(eAllowed)}
	r.InModel = summarize(model)
	return r
}

// StoreCalls are the store calls per conversation of the probe phase,
// without those of the bots' periodic passes (health probes, takeover
// scans, sweeps and expiry passes), which fall into whichever step is
// open. HomeRefresh is the Home tabs' round that the card and the
// decision set off (gathered for 2 s after the card), wherever it fell.
type StoreCalls struct {
	Conversations int        `json:"conversations"`
	Pause         StorePhase `json:"pause"`
	Decide        StorePhase `json:"decide"`
	HomeRefresh   StorePhase `json:"home_refresh"`
	Resume        StorePhase `json:"resume"`
}

// StorePhase is the store calls of one step, in all and by method, and
// the round trips to Redis they took (zero on the embedded store, where
// each call is one transaction in the bot's process): the mean over the
// conversations whose window of the step held no call of the bots'
// periodic passes, or of another step, whose round trips are unknown; -1
// when every window held one.
type StorePhase struct {
	Total      float64            `json:"total"`
	ByMethod   map[string]float64 `json:"by_method"`
	RoundTrips float64            `json:"round_trips"`
}

// Calls are calls per conversation, in all and by method.
type Calls struct {
	Total    float64            `json:"total"`
	ByMethod map[string]float64 `json:"by_method"`
}

// PausedSample is measured with Runs paused runs parked.
type PausedSample struct {
	Runs int `json:"runs"`
	// AfterBurst is the bots' memory once parking is done and their store
	// calls have stopped: the garbage of the burst not yet collected, and
	// memory it freed not yet returned to the OS, still count.
	AfterBurst Memory `json:"after_burst"`
	// Settled is the bots' memory at its peak over one whole garbage
	// collection cycle of each after the burst (see settle), read up to
	// SettleSeconds later; zero with -settle 0.
	Settled       Memory  `json:"settled"`
	SettleSeconds float64 `json:"settle_seconds"`
	// StoredBytesPerRun is the growth of the store (Redis: MEMORY USAGE of
	// the run's keys; embedded: the file's size) per parked run; -1 when
	// it cannot be measured.
	StoredBytesPerRun float64 `json:"stored_bytes_per_run"`
	// RawHistoryBytesPerRun is the JSON of what the model was sent for
	// the paused step plus its tool call, on average.
	RawHistoryBytesPerRun float64 `json:"raw_history_bytes_per_run"`
}

// Accounting checks every conversation of the run, every phase included.
type Accounting struct {
	Conversations int `json:"conversations"`
	// Completed: answered once ("done conv-N" naming it, posted or
	// streamed to the end in its own thread), with exactly one execution,
	// after the click when the call asked, at most one card, and no other
	// conversation's answer in its thread.
	Completed int `json:"completed"`
	// Parked: conversations left paused on purpose, with their card and no
	// execution.
	Parked int `json:"parked"`
	// Lost: not answered in time (a stream stopped before the answer is no
	// answer), or (parked) no card.
	Lost int `json:"lost"`
	// Duplicated: conversations whose call ran more than once, or that got
	// more than one card or more than one answer (a turn that ran twice);
	// DuplicateExecutions, DuplicateCards and DuplicateAnswers count the
	// extra ones.
	Duplicated          int `json:"duplicated"`
	DuplicateExecutions int `json:"duplicate_executions"`
	DuplicateCards      int `json:"duplicate_cards"`
	DuplicateAnswers    int `json:"duplicate_answers"`
	// Unapproved: asked calls that ran before their click reached a bot
	// (its envelope was sent) or without one, and executions of no known
	// conversation.
	Unapproved        int `json:"unapproved"`
	UnknownExecutions int `json:"unknown_executions"`
	// FailedClicks counts clicks the fake Slack refused: they never
	// reached a bot, and approved nothing.
	FailedClicks int `json:"failed_clicks"`
	// MisdirectedAnswers counts answers posted in the thread of another
	// conversation than the one they name.
	MisdirectedAnswers int `json:"misdirected_answers"`
	// UnackedEnvelopes counts envelopes no bot acked; RedeliveredEnvelopes
	// those acked only once the fake delivered them again, when the bot
	// they were sent to closed its connection without acking them (an
	// ack of theirs has no ack time in Acks).
	UnackedEnvelopes     int `json:"unacked_envelopes"`
	RedeliveredEnvelopes int `json:"redelivered_envelopes"`
	// OtherReplies counts conversations that got a bot message that is
	// neither a card nor its answer (such as a busy notice, or a stream
	// stopped before the answer); OtherReplySample is the first such text.
	OtherReplies     int    `json:"other_replies"`
	OtherReplySample string `json:"other_reply_sample"`
}

func (a *Accounting) account(convs []conv) {
	for _, c := range convs {
		a.Conversations++
		if c.others > 0 {
			a.OtherReplies++
		}
		a.FailedClicks += c.failedClicks
		a.MisdirectedAnswers += c.misdirected
		n := len(c.execAt)
		extraCards, extraAnswers := max(c.cards-1, 0), max(c.answers-1, 0)
		if n > 1 || extraCards > 0 || extraAnswers > 0 {
			a.Duplicated++
		}
		a.DuplicateExecutions += max(n-1, 0)
		a.DuplicateCards += extraCards
		a.DuplicateAnswers += extraAnswers
		clicked := c.approvedAt()
		approved := n > 0 && !clicked.IsZero() && !c.execAt[0].Before(clicked)
		if c.ask && n > 0 && !approved {
			a.Unapproved++
		}
		switch {
		case c.noClick && c.cardTS == "":
			a.Lost++
		case c.noClick:
			a.Parked++
		case c.answerAt.IsZero() || n == 0:
			a.Lost++
		case n == 1 && extraCards == 0 && extraAnswers == 0 && c.misdirected == 0 && (!c.ask || approved):
			a.Completed++
		}
	}
}

// Problems returns an error naming what went wrong in the run, nil when
// nothing did.
func (r *Report) Problems() error {
	a := r.Accounting
	var errs []error
	if a.Lost > 0 {
		errs = append(errs, fmt.Errorf("%d conversations lost", a.Lost))
	}
	if a.Duplicated > 0 {
		errs = append(errs, fmt.Errorf("%d conversations ran their call, or got a card or an answer, more than once (%d executions, %d cards, %d answers more)",
			a.Duplicated, a.DuplicateExecutions, a.DuplicateCards, a.DuplicateAnswers))
	}
	if a.Unapproved > 0 {
		errs = append(errs, fmt.Errorf("%d executions without approval", a.Unapproved))
	}
	if a.FailedClicks > 0 {
		errs = append(errs, fmt.Errorf("%d clicks refused by the fake Slack, which never reached a bot", a.FailedClicks))
	}
	if a.MisdirectedAnswers > 0 {
		errs = append(errs, fmt.Errorf("%d answers posted in another conversation's thread", a.MisdirectedAnswers))
	}
	if a.UnackedEnvelopes > 0 {
		errs = append(errs, fmt.Errorf("%d envelopes never acked", a.UnackedEnvelopes))
	}
	if a.RedeliveredEnvelopes > 0 {
		errs = append(errs, fmt.Errorf("%d envelopes acked only when delivered again, not by the bot they were sent to", a.RedeliveredEnvelopes))
	}
	if r.BotsDied > 0 {
		errs = append(errs, fmt.Errorf("%d bot processes died", r.BotsDied))
	}
	for _, s := range r.StopErrors {
		errs = append(errs, errors.New(s))
	}
	return errors.Join(errs...)
}

// writeJSON writes the report to path.
func writeJSON(path string, r *Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	return nil
}

// writeTable prints the report for people.
func writeTable(w io.Writer, r *Report) {
	s := r.Settings
	fmt.Fprintf(w, "loadbench: %d conversations at %g/s, model %gms, click %gms, ask %g, mentions of %d bytes more, store %s, %d replica(s); %d CPUs (%s), load average %.1f -> %.1f\n\n",
		s.Conversations, s.Rate, s.ModelLatencyMS, s.ClickDelayMS, s.AskShare, s.MentionBytes, s.Store, s.Replicas, r.Machine.CPUs, r.Machine.Model, r.Machine.LoadStart, r.Machine.LoadEnd)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	dist := func(name string, d Dist) {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\n", name, d.Count, d.P50, d.P99, d.Max)
	}
	fmt.Fprintln(tw, "TIMES (ms)\tCOUNT\tP50\tP99\tMAX")
	dist("envelope ack", r.Acks)
	dist("websocket round trip", r.Load.RoundTrip)
	b, e := r.Load.BotAdded, r.Load.EndToEnd
	dist("bot adds: mention -> card", b.MentionToCard)
	dist("bot adds: click -> executed", b.ClickToExecuted)
	dist("bot adds: click -> answer", b.ClickToAnswer)
	dist("bot adds: mention -> answer (allowed)", b.MentionToAnswerAllowed)
	dist("end to end: mention -> card", e.MentionToCard)
	dist("in the fake model, first request", r.Load.InModel)
	dist("end to end: click -> answer", e.ClickToAnswer)
	tw.Flush()
	fmt.Fprintf(w, "\nack p99 / round trip p99: %.1f\n", r.AckToRoundTripP99)
	fmt.Fprintf(w, "approval cycles: %d in the load phase, %.1f per second (offered over %.1fs); allowed turns: %d\n",
		r.Load.Cycles, r.Load.CyclesPerSecond, r.Load.OfferedSeconds, r.Load.Allowed)
	if l := r.Load; l.BotCPUPerConversation > 0 {
		fmt.Fprintf(w, "CPU per completed conversation: bots %.2f ms, bench (fakes included) %.2f ms", l.BotCPUPerConversation, l.BenchCPUPerConversation)
		if l.RedisCPUPerConversation > 0 {
			fmt.Fprintf(w, ", Redis server %.2f ms", l.RedisCPUPerConversation)
		}
		fmt.Fprintln(w)
	}
	if l := r.Load; l.SlackCalls.Total > 0 {
		fmt.Fprintf(w, "Slack Web API calls per completed conversation: %.1f  %s\n", l.SlackCalls.Total, methods(l.SlackCalls.ByMethod))
	}

	if sc := r.StoreCalls; sc.Conversations > 0 {
		fmt.Fprintf(w, "\nstore calls per conversation (mean of %d, one at a time):\n", sc.Conversations)
		for _, p := range []struct {
			name string
			p    StorePhase
		}{{"pause (mention -> card)", sc.Pause}, {"decide (click -> tool starts)", sc.Decide}, {"resume (tool -> answer)", sc.Resume}, {"home refresh (Home tabs)", sc.HomeRefresh}} {
			trips := ""
			switch {
			case p.p.RoundTrips > 0:
				trips = fmt.Sprintf("  (Redis round trips %.1f)", p.p.RoundTrips)
			case p.p.RoundTrips < 0:
				trips = "  (Redis round trips unknown: a sweep or an expiry pass in every window)"
			}
			fmt.Fprintf(w, "  %-30s %5.1f  %s%s\n", p.name, p.p.Total, methods(p.p.ByMethod), trips)
		}
	}
	if len(r.Paused) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if s.Replicas > 1 {
			fmt.Fprintf(w, "memory summed over the %d bots:\n", s.Replicas)
		}
		fmt.Fprintln(tw, "PAUSED RUNS\tMEMORY\tRSS (MiB)\tOF FILES\tHEAP IN USE\tHEAP FREE\tHEAP GOAL\tSTACKS\tRUNTIME\tGOROUTINES\tOPEN FDS\tSTORED BYTES/RUN\tRAW HISTORY BYTES/RUN")
		for _, p := range r.Paused {
			row := func(when string, m Memory) {
				fmt.Fprintf(tw, "%d\t%s\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%.0f\t%.0f\n", p.Runs, when, mib(m.RSSBytes), mib(m.RSSFileBytes), mib(m.HeapInuseBytes),
					mib(m.HeapFreeBytes), mib(m.HeapGoalBytes), mib(m.StackInuseBytes), mib(m.RuntimeBytes), m.Goroutines, m.OpenFDs, p.StoredBytesPerRun, p.RawHistoryBytesPerRun)
			}
			row("after the burst", p.AfterBurst)
			if p.SettleSeconds > 0 {
				row(fmt.Sprintf("settled (+%.0fs)", p.SettleSeconds), p.Settled)
			}
		}
		tw.Flush()
	}
	a := r.Accounting
	fmt.Fprintf(w, "\naccounting: %d conversations, %d completed, %d parked; lost %d, duplicated %d, unapproved %d, unacked envelopes %d, redelivered envelopes %d, bots died %d, failed clicks %d, misdirected answers %d\n",
		a.Conversations, a.Completed, a.Parked, a.Lost, a.Duplicated, a.Unapproved, a.UnackedEnvelopes, a.RedeliveredEnvelopes, r.BotsDied, a.FailedClicks, a.MisdirectedAnswers)
	if a.Duplicated > 0 {
		fmt.Fprintf(w, "duplicated: %d executions, %d cards, %d answers more than one per conversation\n", a.DuplicateExecutions, a.DuplicateCards, a.DuplicateAnswers)
	}
	if a.OtherReplies > 0 {
		fmt.Fprintf(w, "%d conversations got other bot replies, such as %q\n", a.OtherReplies, a.OtherReplySample)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// methods formats per-method counts, largest first.
func methods(m map[string]float64) string {
	type kv struct {
		k string
		v float64
	}
	var list []kv
	for k, v := range m {
		list = append(list, kv{k, v})
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].v != list[j].v {
			return list[i].v > list[j].v
		}
		return list[i].k < list[j].k
	})
	parts := make([]string, len(list))
	for i, x := range list {
		parts[i] = fmt.Sprintf("%s %g", x.k, x.v)
	}
	return strings.Join(parts, ", ")
}
