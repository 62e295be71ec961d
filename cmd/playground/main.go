package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store/boltstore"
)

const (
	// connectTimeout bounds the bot's start, up to its Socket Mode
	// connection.
	connectTimeout = 15 * time.Second
	// stopTimeout bounds the bot's graceful stop.
	stopTimeout = 15 * time.Second
	// defaultModel is the model asked when OPENAI_MODEL is not set.
	defaultModel = "gpt-4o-mini"
)

// systemPrompt is given to a real model; the scripted one ignores it.
const systemPrompt = "You are Toolgate, an operations assistant in a Slack channel. " +
	"Use the tools to check, restart and scale services when asked. " +
	"Some calls wait for a human approval; when a call was refused or rejected, say so plainly and quote the reason. " +
	"Keep answers short."

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Stdin, os.Stdout, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "playground: %v\n", err)
		os.Exit(1)
	}
}

// options are the command-line flags.
type options struct {
	script   string
	verbose  bool
	scripted bool
	wait     time.Duration
	quiet    time.Duration
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.script, "script", "", "read commands from `file` instead of standard input and exit at its end")
	fs.BoolVar(&o.verbose, "v", false, "show the bot's logs (on standard error)")
	fs.BoolVar(&o.scripted, "scripted", false, "use the scripted model even when OPENAI_API_KEY is set")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "how long to wait at most for the bot after each action")
	fs.DurationVar(&o.quiet, "quiet", 400*time.Millisecond, "how long the bot must be idle before its output is shown")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./cmd/playground [flags]\n\n"+
			"Runs the Toolgate bot against an in-process fake Slack workspace and a scripted\n"+
			"model, and lets you play the workspace's people from the terminal.\n"+
			"Set OPENAI_API_KEY (and optionally OPENAI_BASE_URL, OPENAI_MODEL) to talk to a real model.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (use -script to read commands from a file)", fs.Arg(0))
	}
	return o, nil
}

// run is the whole program: it starts the fake workspace, the model and
// the bot, plays the commands read from stdin (or the -script file) and
// shuts everything down at /quit, at the end of the input or when ctx
// ends. The transcript goes to stdout; the bot's warnings and errors (all
// of its logs with -v) go to standard error.
func run(ctx context.Context, stdin io.Reader, stdout io.Writer, args []string) error {
	opts, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}

	in, interactive := stdin, isTerminal(stdin)
	if opts.script != "" {
		f, err := os.Open(opts.script)
		if err != nil {
			return err
		}
		defer f.Close()
		in, interactive = f, false
	}

	level := slog.LevelWarn
	if opts.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	pg, err := start(ctx, opts, log)
	if err != nil {
		return err
	}
	defer pg.close()

	s := newSession(pg, stdout, opts)
	s.intro()
	return s.loop(ctx, in, interactive)
}

// isTerminal reports whether r is a character device, such as a terminal.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// playground is everything that runs: the fakes, the store and the bot.
type playground struct {
	dir       string
	slack     *fakeslack.Server
	fakeModel *fakeopenai.Server // nil with a real model
	modelName string
	modelSeen atomic.Int64 // requests the scripted model answered
	store     *boltstore.Store
	app       *slackapp.App
	stopBot   context.CancelFunc
	botDone   chan error
	log       *slog.Logger
}

// start builds the fake workspace and starts the bot on it.
func start(ctx context.Context, opts options, log *slog.Logger) (_ *playground, err error) {
	pg := &playground{log: log}
	defer func() {
		if err != nil {
			pg.close()
		}
	}()
	if pg.dir, err = os.MkdirTemp("", "toolgate-playground-"); err != nil {
		return nil, err
	}

	pg.slack = fakeslack.Start()
	for _, p := range people {
		pg.slack.AddUser(fakeslack.User{ID: p.id, Name: p.name, RealName: strings.ToUpper(p.name[:1]) + p.name[1:], TZ: "Europe/Berlin"})
	}
	pg.slack.AddChannel(fakeslack.Channel{ID: channelOps, Name: "ops", Members: []string{userYou, userAlice, userBob, pg.slack.BotUserID()}})

	var model agent.Model
	if key := os.Getenv("OPENAI_API_KEY"); key != "" && !opts.scripted {
		pg.modelName = cmp.Or(os.Getenv("OPENAI_MODEL"), defaultModel)
		model = agent.NewOpenAIModel(agent.ModelConfig{BaseURL: os.Getenv("OPENAI_BASE_URL"), APIKey: key, Model: pg.modelName, Timeout: 2 * time.Minute})
	} else {
		pg.fakeModel = fakeopenai.Start()
		pg.fakeModel.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
			pg.modelSeen.Add(1)
			return scriptedModel(req)
		})
		model = agent.NewOpenAIModel(agent.ModelConfig{BaseURL: pg.fakeModel.URL(), APIKey: "playground", Model: "scripted", Timeout: 30 * time.Second})
	}

	if pg.store, err = boltstore.Open(filepath.Join(pg.dir, "toolgate.db"), boltstore.Options{}); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	policy, err := approvals.ParseConfig([]byte(policyYAML))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	engine := approvals.NewEngine(policy, pg.store)
	pg.app, err = slackapp.New(slackapp.Config{
		BotToken:      pg.slack.BotToken(),
		AppToken:      pg.slack.AppToken(),
		APIURL:        pg.slack.APIURL(),
		AdminUsers:    []string{userYou, userAlice},
		ShutdownGrace: 5 * time.Second,
		Logger:        log,
	}, pg.store, engine)
	if err != nil {
		return nil, err
	}
	reg := agent.NewRegistry()
	for _, t := range demoTools() {
		if err := reg.Register(t); err != nil {
			return nil, fmt.Errorf("register %s: %w", t.Name, err)
		}
	}
	ag := agent.New(model, reg, engine, pg.store, pg.app.Reporter, agent.Config{
		SystemPrompt: systemPrompt,
		ApprovalTTL:  time.Hour,
		Groups:       pg.app.Groups(),
		Audience:     pg.app.Audience(),
		Logger:       log,
	})

	botCtx, cancel := context.WithCancel(context.Background())
	pg.stopBot, pg.botDone = cancel, make(chan error, 1)
	go func() { pg.botDone <- pg.app.Run(botCtx, ag) }()

	deadline := time.NewTimer(connectTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !pg.app.Connected() {
		select {
		case err := <-pg.botDone:
			pg.botDone <- err // for close
			return nil, fmt.Errorf("the bot stopped at start: %w", err)
		case <-deadline.C:
			return nil, errors.New("the bot did not connect to the fake Slack")
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	return pg, nil
}

// close stops the bot and lets in-flight work finish, then closes the
// store and the fakes and removes the temporary directory. It is safe on a
// partly started playground.
func (pg *playground) close() {
	if pg.stopBot != nil {
		pg.stopBot()
		select {
		case err := <-pg.botDone:
			if err != nil {
				pg.log.Error("bot stopped with an error", "err", err)
			}
		case <-time.After(stopTimeout):
			pg.log.Error("the bot did not stop in time")
		}
	}
	if pg.store != nil {
		if err := pg.store.Close(); err != nil {
			pg.log.Error("close store", "err", err)
		}
	}
	if pg.fakeModel != nil {
		pg.fakeModel.Close()
	}
	if pg.slack != nil {
		pg.slack.Close()
	}
	if pg.dir != "" {
		_ = os.RemoveAll(pg.dir)
	}
}

// activity is a counter that grows with everything the bot does that the
// playground can see: Web API calls and model requests.
func (pg *playground) activity() int64 {
	return int64(len(pg.slack.Calls(""))) + pg.modelSeen.Load()
}

// lines reads r line by line into a channel, closed at the end of input.
// It stops sending when done is closed; a read already waiting on a
// terminal only returns with the next line.
func lines(r io.Reader, done <-chan struct{}) <-chan string {
	ch := make(chan string)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64*1024), 1<<20)
		for sc.Scan() {
			select {
			case ch <- sc.Text():
			case <-done:
				return
			}
		}
	}()
	return ch
}
