package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadbench: %v\n", err)
		if errors.Is(err, errFlags) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// errFlags marks a bad command line.
var errFlags = errors.New("bad command line")

// options are the command-line flags.
type options struct {
	conversations int
	duration      time.Duration
	rate          float64
	modelLatency  time.Duration
	clickDelay    time.Duration
	askShare      float64
	store         string
	redisURL      string
	replicas      int
	timeout       time.Duration
	jsonFile      string
	bot           string
	probe         int
	paused        []int
	pausedRate    float64
	pausedWarmup  int
	settle        time.Duration
	settleAfter   time.Duration
	channels      int
	mentionBytes  int
	env           []string
	logLevel      string
	verbose       bool
	cpuProfile    string
	botProfile    string
	botTrace      string
	botHeap       string
}

// envFlags collects repeated -env KEY=VALUE flags.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }

func (e *envFlags) Set(v string) error {
	if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", v)
	}
	*e = append(*e, v)
	return nil
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var env envFlags
	var paused string
	fs := flag.NewFlagSet("loadbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: loadbench [flags]

Runs the real bot (cmd/bot, as processes) against a fake Slack and a fake
model in this process, offers conversations (mention -> card -> click ->
answer) and reports what the bot costs: ack times next to the websocket
round trip, the time the bot adds, cycles per second, store calls, memory
with many paused runs, and lost, duplicated or unapproved executions.

`)
		fs.PrintDefaults()
	}
	fs.IntVar(&o.conversations, "conversations", 200, "conversations offered in the load phase")
	fs.DurationVar(&o.duration, "duration", 0, "if positive, offer rate x duration conversations instead of -conversations")
	fs.Float64Var(&o.rate, "rate", 50, "mentions offered per second")
	fs.DurationVar(&o.modelLatency, "model-latency", 200*time.Millisecond, "time the fake model takes for each answer")
	fs.DurationVar(&o.clickDelay, "click-delay", 500*time.Millisecond, "time between a card appearing and its Approve click")
	fs.IntVar(&o.mentionBytes, "mention-bytes", 0, fmt.Sprintf("text each mention carries besides its request, as logs pasted into it (at most %d bytes): the history the paused run keeps, and the click reads back, has that size", maxMentionBytes))
	fs.Float64Var(&o.askShare, "ask", 1, "share of tool calls the policy asks about (0..1); the rest it allows")
	fs.StringVar(&o.store, "store", "embedded", "embedded (bbolt in a temporary DATA_DIR) or redis (-redis-url)")
	fs.StringVar(&o.redisURL, "redis-url", os.Getenv("REDIS_URL"), "Redis URL for -store redis (default $REDIS_URL); keys get a fresh prefix, deleted at the end")
	fs.IntVar(&o.replicas, "replicas", 1, "bot processes (more than 1 only with -store redis)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long the load phase may take to finish after the last mention")
	fs.StringVar(&o.jsonFile, "json", "", "write the report as JSON to this file")
	fs.StringVar(&o.bot, "bot", "", "bot binary to run; empty: build cmd/bot into a temporary directory")
	fs.IntVar(&o.probe, "probe", 3, "conversations run one at a time, before the load, to count store calls per pause, decide and resume, and of the Home tabs' round each sets off, without the bots' periodic passes (0: skip)")
	fs.StringVar(&paused, "paused", "", "comma-separated counts of paused runs at which to sample memory and stored bytes, e.g. 100,10000,100000 (empty: skip)")
	fs.Float64Var(&o.pausedRate, "paused-rate", 500, "mentions per second while parking paused runs")
	fs.IntVar(&o.pausedWarmup, "paused-warmup", 5000, "with -paused, conversations whose call is allowed answered at -paused-rate before the first count, so that every count is sampled after a burst like the one that parks the runs (0: none)")
	fs.DurationVar(&o.settle, "settle", 5*time.Minute, "after each -paused count, how long to wait at most, past -settle-after, for the bots' memory once the burst is over: the peak over one whole garbage collection cycle of each bot's own, from its first collection at least -settle-after after the burst to the next (the Go runtime collects at least every 2 minutes); memory is reported right after the burst and settled (0: right after the burst only)")
	fs.DurationVar(&o.settleAfter, "settle-after", 100*time.Second, "with -settle, how long after each burst the settled reading's collection cycle may begin at the earliest, the same for every count: by default past the 90 s after which the bots close the HTTP connections the burst left idle (0: with the first collection after the burst)")
	fs.IntVar(&o.channels, "channels", 100, "channels the conversations are spread over")
	fs.Var(&env, "env", "extra KEY=VALUE for the bot's environment (repeatable), e.g. -env MAX_TURNS=256")
	fs.StringVar(&o.logLevel, "log-level", "info", "the bot's LOG_LEVEL")
	fs.BoolVar(&o.verbose, "v", false, "copy the bots' logs to stderr")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench itself (the fakes) to this file")
	fs.StringVar(&o.botHeap, "bot-heapprofile", "", "write heap profiles of the first bot, taken after each -paused count is parked and its memory read, to this file for the last count and to this file with .COUNT appended for the others (runs the bots with PPROF=true; the profile's collection comes after the reading)")
	fs.StringVar(&o.botProfile, "bot-cpuprofile", "", "write a CPU profile of the first bot, taken while the load phase offers mentions, to this file (runs the bots with PPROF=true)")
	fs.StringVar(&o.botTrace, "bot-trace", "", "write a Go execution trace of the first bot, taken while the load phase offers mentions, to this file (go tool trace; runs the bots with PPROF=true; not with -bot-cpuprofile)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%w: %w", errFlags, err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("%w: unexpected argument %q", errFlags, fs.Arg(0))
	}
	o.env = env
	for _, p := range strings.Split(paused, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 {
			return o, fmt.Errorf("%w: -paused: %q is not a positive count", errFlags, p)
		}
		if len(o.paused) > 0 && n <= o.paused[len(o.paused)-1] {
			return o, fmt.Errorf("%w: -paused: counts must increase, %d after %d", errFlags, n, o.paused[len(o.paused)-1])
		}
		o.paused = append(o.paused, n)
	}
	// NaN and Inf have no JSON, and pass comparisons they should fail:
	// refuse them before anything is computed from them.
	for _, f := range []struct {
		name string
		v    float64
	}{{"-rate", o.rate}, {"-paused-rate", o.pausedRate}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return o, fmt.Errorf("%w: %s: %v is not a finite number", errFlags, f.name, f.v)
		}
	}
	if o.duration < 0 {
		return o, fmt.Errorf("%w: -duration must not be negative", errFlags)
	}
	if o.duration > 0 && o.rate > 0 {
		n := o.rate * o.duration.Seconds()
		if n >= math.MaxInt {
			return o, fmt.Errorf("%w: -rate %v x -duration %v is too many conversations (%g)", errFlags, o.rate, o.duration, n)
		}
		o.conversations = int(n)
	}
	switch {
	case o.conversations < 0:
		return o, fmt.Errorf("%w: -conversations: %d is negative", errFlags, o.conversations)
	case o.rate <= 0 || o.pausedRate <= 0:
		return o, fmt.Errorf("%w: -rate and -paused-rate must be positive", errFlags)
	case !(o.askShare >= 0 && o.askShare <= 1): // NaN too
		return o, fmt.Errorf("%w: -ask: %v is not between 0 and 1", errFlags, o.askShare)
	case o.modelLatency < 0 || o.clickDelay < 0:
		return o, fmt.Errorf("%w: -model-latency and -click-delay must not be negative", errFlags)
	case o.store != "embedded" && o.store != "redis":
		return o, fmt.Errorf("%w: -store: %q is not embedded or redis", errFlags, o.store)
	case o.store == "redis" && o.redisURL == "":
		return o, fmt.Errorf("%w: -store redis needs -redis-url or REDIS_URL", errFlags)
	case o.replicas < 1:
		return o, fmt.Errorf("%w: -replicas: %d is not at least 1", errFlags, o.replicas)
	case o.replicas > 1 && o.store != "redis":
		return o, fmt.Errorf("%w: -replicas %d needs -store redis: the embedded store belongs to one process", errFlags, o.replicas)
	case o.probe < 0:
		return o, fmt.Errorf("%w: -probe: %d is negative", errFlags, o.probe)
	case o.mentionBytes < 0 || o.mentionBytes > maxMentionBytes:
		return o, fmt.Errorf("%w: -mention-bytes: %d is not between 0 and %d (a Slack message holds at most 40,000 characters)", errFlags, o.mentionBytes, maxMentionBytes)
	case o.channels < 1:
		return o, fmt.Errorf("%w: -channels: %d is not at least 1", errFlags, o.channels)
	case o.timeout <= 0:
		return o, fmt.Errorf("%w: -timeout must be positive", errFlags)
	case o.pausedWarmup < 0:
		return o, fmt.Errorf("%w: -paused-warmup must not be negative", errFlags)
	case o.settle < 0:
		return o, fmt.Errorf("%w: -settle must not be negative", errFlags)
	case o.settleAfter < 0:
		return o, fmt.Errorf("%w: -settle-after must not be negative", errFlags)
	case o.botProfile != "" && o.botTrace != "":
		return o, fmt.Errorf("%w: -bot-cpuprofile and -bot-trace are taken over the same time: give one", errFlags)
	}
	return o, nil
}

// run parses the flags, runs the bench and writes the report: a table on
// stdout and, with -json, a JSON file. It fails when the bench could not
// run (bad flags, the bot did not start); a bench that ran but lost or
// duplicated work still reports, and returns an error saying so.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start the cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := bench(ctx, o, stderr)
	if err != nil {
		return err
	}
	writeTable(stdout, rep)
	if o.jsonFile != "" {
		if err := writeJSON(o.jsonFile, rep); err != nil {
			return err
		}
	}
	return rep.Problems()
}
