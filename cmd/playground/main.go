package main

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

const (
	// connectTimeout bounds the bot's start, up to its Socket Mode
	// connection.
	connectTimeout = 15 * time.Second
	// stopTimeout bounds the bot's graceful stop.
	stopTimeout = 15 * time.Second
	// defaultModel is the model asked when OPENAI_MODEL is not set.
	defaultModel = "gpt-4o-mini"
	// defaultBaseURL is OpenAI's endpoint, used when only OPENAI_API_KEY
	// is set.
	defaultBaseURL = "https://api.openai.com/v1"
	// toolTimeout bounds one tool call: the bot's default TOOL_TIMEOUT,
	// which the playground does not read.
	toolTimeout = 2 * time.Minute
)

// systemPrompt is given to a real model; the scripted one ignores it.
const systemPrompt = "You are Toolgate, an operations assistant in a Slack channel. " +
	"Use the tools to look at and change the files of the workspace and to run commands when asked. " +
	"Some calls wait for a human approval; when a call was refused or rejected, say so plainly and quote the reason. " +
	"Keep answers short."

func main() {
	// The programs the playground starts must not read its model key
	// from /proc/PID/environ.
	if err := botsetup.Harden(); err != nil {
		fmt.Fprintf(os.Stderr, "playground: %v\n", err)
		os.Exit(1)
	}
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
	addr     string
	config   string
	noOpen   bool
	script   string
	tty      bool
	verbose  bool
	scripted bool
	wait     time.Duration
	quiet    time.Duration
	// logSecrets, if set, is the log's redactor, which start completes
	// with the tools' secrets once it has read the config file.
	logSecrets *redactorRef
}

// terminal reports whether the playground runs in the terminal rather
// than in a browser.
func (o options) terminal() bool { return o.script != "" || o.tty }

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "`address` of the web page; port 0 picks a free one")
	fs.StringVar(&o.config, "config", "", "run your own config `file` (policy, builtin_tools, mcp_servers; the format of the bot's CONFIG_FILE) instead of the demo one")
	fs.BoolVar(&o.noOpen, "no-open", false, "do not open the page in a browser")
	fs.StringVar(&o.script, "script", "", "play in the terminal: read commands from `file` (- for standard input) and exit at its end, with status 1 if any could not be carried out")
	fs.BoolVar(&o.tty, "tty", false, "play in the terminal, reading commands from standard input")
	fs.BoolVar(&o.verbose, "v", false, "show the bot's logs (on standard error)")
	fs.BoolVar(&o.scripted, "scripted", false, "use the scripted model even when OPENAI_API_KEY or OPENAI_BASE_URL is set")
	fs.DurationVar(&o.wait, "wait", 30*time.Second, "terminal mode: how long to wait at most for the bot after each action")
	fs.DurationVar(&o.quiet, "quiet", 400*time.Millisecond, "terminal mode: how long the bot must be idle before its output is shown")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./cmd/playground [flags]\n\n"+
			"Runs the Toolgate bot against an in-process fake Slack workspace and a scripted\n"+
			"model, and shows the workspace as a web page where you play its people.\n"+
			"With -script or -tty it plays in the terminal instead.\n"+
			"Set OPENAI_API_KEY or OPENAI_BASE_URL (and OPENAI_MODEL) to talk to a real\n"+
			"OpenAI-compatible model (not Azure OpenAI: its settings are refused; the bot's\n"+
			"MODEL_* settings are not read).\n"+
			"The bot's state is in a temporary directory, removed at the end (REDIS_URL is not\n"+
			"used: the playground never touches a bot's Redis).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (use -script to read commands from a file)", fs.Arg(0))
	}
	if o.script != "" && o.tty {
		return o, errors.New("-script and -tty both read commands: give one of them")
	}
	if o.wait <= 0 {
		return o, fmt.Errorf("-wait %s: want a positive duration, such as 30s: how long to wait at most for the bot after each action", o.wait)
	}
	if o.quiet < 0 {
		return o, fmt.Errorf("-quiet %s: want a duration of 0 or more, such as 400ms: how long the bot must be idle before its output is shown", o.quiet)
	}
	if err := loopback(o.addr); err != nil {
		return o, fmt.Errorf("-addr %s: %w", o.addr, err)
	}
	return o, nil
}

// loopback refuses an address that is not on this machine's loopback
// interface: the page has no login and lets whoever reaches it act as
// anyone in the workspace, approvers included, and run the demo's tools.
func loopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return errors.New("the page has no login and lets anyone who reaches it act as anyone, so it is served on a loopback address only (127.0.0.1, ::1 or localhost); from another machine, reach it through an SSH tunnel")
}

// run is the whole program: it starts the fake workspace, the model and
// the bot, then serves the web page until ctx ends or, in terminal mode,
// plays the commands read from stdin (or the -script file) until /quit,
// the end of the input or ctx's end. Either way it then shuts everything
// down. Output goes to stdout; the bot's warnings and errors (all of its
// logs with -v) go to standard error.
func run(ctx context.Context, stdin io.Reader, stdout io.Writer, args []string) error {
	opts, err := parseFlags(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}

	in, interactive := stdin, isTerminal(stdin)
	if opts.script != "" && opts.script != "-" {
		f, err := os.Open(opts.script)
		if err != nil {
			return err
		}
		defer f.Close()
		in, interactive = f, false
	} else if opts.script == "-" {
		interactive = false
	}

	// The model's API key is kept out of the log and of the errors
	// returned, as the bot keeps its secrets: a model server's answer may
	// quote it.
	red := newRedactorRef(redact.New(os.Getenv("OPENAI_API_KEY")))
	opts.logSecrets = red
	pg, err := start(ctx, opts, newLogger(os.Stderr, opts.verbose, red))
	if err != nil {
		return red.get().Error(err)
	}
	defer pg.close()
	return red.get().Error(pg.serve(ctx, opts, in, interactive, stdout))
}

// redactorRef is a redactor that can be completed once more secrets are
// known (the config file's), for a log made before.
type redactorRef struct {
	p atomic.Pointer[redact.Redactor]
}

func newRedactorRef(red redact.Redactor) *redactorRef {
	r := &redactorRef{}
	r.set(red)
	return r
}

func (r *redactorRef) get() redact.Redactor    { return *r.p.Load() }
func (r *redactorRef) set(red redact.Redactor) { r.p.Store(&red) }

// newLogger returns the bot's logger, writing text lines on w with red's
// secrets redacted (as red holds them at each line): its warnings and
// errors, or with verbose all of its lines, the audit lines included.
func newLogger(w io.Writer, verbose bool, red *redactorRef) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	var logs slog.Handler = slog.NewTextHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		return red.get().ReplaceAttr(groups, store.NameAuditLevel(groups, a))
	}})
	if !verbose {
		logs = withoutAudit{logs} // the session shows what they say
	}
	return slog.New(logs)
}

// serve serves the page, or the terminal session reading in, until ctx
// ends or the session quits. A bot that stops on its own (its Socket Mode
// client gave up) ends it with the bot's error: the page or the prompt
// would otherwise take messages no one answers.
func (pg *playground) serve(ctx context.Context, opts options, in io.Reader, interactive bool, stdout io.Writer) (err error) {
	ctx, stop := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	defer func() {
		stop(nil)
		<-watched
	}()
	go func() {
		defer close(watched)
		select {
		case err := <-pg.botDone:
			pg.botDone <- err // for close
			stop(fmt.Errorf("the bot stopped: %w", cmp.Or(err, errors.New("it gave no reason"))))
		case <-ctx.Done():
		}
	}()
	if !opts.terminal() {
		err = serveWeb(ctx, pg, opts, stdout)
	} else {
		s := newSession(pg, stdout, opts)
		s.intro()
		err = s.loop(ctx, in, interactive)
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
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

// withoutAudit is a log handler that leaves out the audit lines.
type withoutAudit struct{ slog.Handler }

func (h withoutAudit) Enabled(ctx context.Context, l slog.Level) bool {
	return l != store.LevelAudit && h.Handler.Enabled(ctx, l)
}

func (h withoutAudit) WithAttrs(attrs []slog.Attr) slog.Handler {
	return withoutAudit{h.Handler.WithAttrs(attrs)}
}

func (h withoutAudit) WithGroup(name string) slog.Handler {
	return withoutAudit{h.Handler.WithGroup(name)}
}

// typed is text as Slack sends what a person typed: with &, < and >
// escaped, which the bot decodes.
func typed(text string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(text)
}

// playground is everything that runs: the fakes, the store and the bot.
type playground struct {
	dir       string
	workspace string // the demo workspace's root; empty with -config
	config    string // the config file's text
	slack     *fakeslack.Server
	fakeModel *fakeopenai.Server // nil with a real model
	modelName string
	modelSeen atomic.Int64 // requests the scripted model answered
	storeName string
	store     botsetup.Store
	bot       *botsetup.Bot
	stopBot   context.CancelFunc
	botDone   chan error
	log       *slog.Logger
	// red takes the secrets out of a model server's words the bot posts:
	// the model's API key and the -config tools' values from ${VAR}, as
	// the bot's own redactor does.
	red redact.Redactor
}

// start builds the fake workspace and starts the bot on it: the demo
// configuration on a seeded workspace in a temporary directory, or the
// -config file; the embedded store in the temporary directory; the
// scripted model, or the one OPENAI_* names.
func start(ctx context.Context, opts options, log *slog.Logger) (_ *playground, err error) {
	pg := &playground{log: log}
	defer func() {
		if err != nil {
			pg.close()
		}
	}()
	if realModel(opts) {
		if err := notAzure(os.Getenv("OPENAI_API_VERSION"), os.Getenv("OPENAI_BASE_URL")); err != nil {
			return nil, err
		}
	}
	if pg.dir, err = os.MkdirTemp("", "toolgate-playground-"); err != nil {
		return nil, err
	}
	configFile := opts.config
	if configFile == "" {
		pg.workspace = filepath.Join(pg.dir, "workspace")
		configFile = filepath.Join(pg.dir, "config.yaml")
		if err := seedWorkspace(pg.workspace, filepath.Join(pg.dir, "commands"), configFile); err != nil {
			return nil, err
		}
	}
	file, err := botsetup.LoadFile("-config", configFile)
	if err != nil {
		return nil, err
	}
	// A tool of the file that cannot be set up is the -config file's
	// fault (the bot's CONFIG_FILE is not read here), or the demo's.
	setting := "the demo config file"
	if opts.config != "" {
		setting = "-config"
	}
	file.Setting = setting + " " + configFile
	// What the bot refuses at start is refused here too, by the same
	// checks: a tool's timeout longer than the one that bounds its calls,
	// and a tool's directory that holds the config file or the store,
	// which the model could then read or rewrite.
	if err := file.Tools.Builtins.CheckTimeouts(toolTimeout, "TOOL_TIMEOUT"); err != nil {
		return nil, fmt.Errorf("%s: the playground keeps TOOL_TIMEOUT at the bot's default, %s: %w", file.Setting, toolTimeout, err)
	}
	if err := botsetup.CheckToolReach(file.Tools.Builtins, "", "the playground's store directory", pg.dir, setting, configFile); err != nil {
		return nil, fmt.Errorf("%s: %w", file.Setting, err)
	}
	pg.config = string(file.Data)
	pg.red = redact.New(append([]string{os.Getenv("OPENAI_API_KEY")}, file.Tools.Secrets()...)...)
	if opts.logSecrets != nil {
		opts.logSecrets.set(pg.red) // the log keeps them out too
	}

	// Tokens of its own: the fake Slack takes a token in a form post,
	// which any web page may send to 127.0.0.1, so the default ones (in
	// this repository for all to read) would let a page post as the bot.
	pg.slack = fakeslack.Start(fakeslack.WithTokens("xoxb-"+rand.Text(), "xapp-"+rand.Text()))
	for _, p := range people {
		pg.slack.AddUser(fakeslack.User{ID: p.id, Name: p.name, RealName: strings.ToUpper(p.name[:1]) + p.name[1:], TZ: "Europe/Berlin"})
	}
	ops, approv := []string{pg.slack.BotUserID()}, []string{pg.slack.BotUserID()}
	for _, p := range people {
		if p.inOps {
			ops = append(ops, p.id)
		}
		if p.inApprovals {
			approv = append(approv, p.id)
		}
	}
	pg.slack.AddChannel(fakeslack.Channel{ID: channelOps, Name: "ops", Members: ops})
	pg.slack.AddChannel(fakeslack.Channel{ID: channelApprov, Name: "approvals", Members: approv})

	model := pg.startModel(opts)
	if pg.store, err = pg.openStore(ctx); err != nil {
		return nil, err
	}
	if err := pg.startBot(ctx, model, file); err != nil {
		return nil, err
	}
	return pg, nil
}

// realModel reports whether the bot talks to the model OPENAI_* names:
// OPENAI_API_KEY or OPENAI_BASE_URL is set and -scripted is not given.
func realModel(opts options) bool {
	return (os.Getenv("OPENAI_API_KEY") != "" || os.Getenv("OPENAI_BASE_URL") != "") && !opts.scripted
}

// notAzure refuses the settings by which the bot talks to Azure OpenAI
// (OPENAI_API_VERSION, or an OPENAI_BASE_URL on *.openai.azure.com): the
// playground's client speaks the plain OpenAI protocol only, which Azure's
// deployments do not, and would fail at the first message with an error
// from Azure that does not say why.
func notAzure(version, baseURL string) error {
	const only = "the playground talks to OpenAI-compatible endpoints only, not to Azure OpenAI as the bot does"
	if version != "" {
		return errors.New("OPENAI_API_VERSION is set, which means Azure OpenAI: " + only + ": unset it and point OPENAI_BASE_URL at an OpenAI-compatible endpoint, or give -scripted")
	}
	if u, err := url.Parse(baseURL); err == nil && strings.HasSuffix(strings.ToLower(u.Hostname()), ".openai.azure.com") {
		return errors.New("OPENAI_BASE_URL is an Azure OpenAI endpoint (*.openai.azure.com): " + only + ": point it at an OpenAI-compatible endpoint, or give -scripted")
	}
	return nil
}

// startModel returns the model the bot talks to: the endpoint OPENAI_*
// names when OPENAI_API_KEY or OPENAI_BASE_URL is set (unless -scripted),
// otherwise the scripted model, served by a fake OpenAI-compatible server.
func (pg *playground) startModel(opts options) agent.Model {
	key, base := os.Getenv("OPENAI_API_KEY"), os.Getenv("OPENAI_BASE_URL")
	if realModel(opts) {
		pg.modelName = cmp.Or(os.Getenv("OPENAI_MODEL"), defaultModel)
		return agent.NewOpenAIModel(agent.ModelConfig{BaseURL: cmp.Or(base, defaultBaseURL), APIKey: key, Model: pg.modelName, Timeout: 2 * time.Minute})
	}
	pg.fakeModel = fakeopenai.Start()
	pg.fakeModel.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		pg.modelSeen.Add(1)
		return scriptedModel(req)
	})
	return agent.NewOpenAIModel(agent.ModelConfig{BaseURL: pg.fakeModel.URL(), APIKey: "playground", Model: "scripted", Timeout: 30 * time.Second})
}

// openStore opens the embedded store in the temporary directory. REDIS_URL
// is not read: exported for a real bot, it would let the playground's
// people (an admin among them) change that bot's policy and decide its
// calls, under the same key prefix.
func (pg *playground) openStore(ctx context.Context) (botsetup.Store, error) {
	st, err := botsetup.OpenStore(ctx, botsetup.StoreConfig{Dir: pg.dir}, pg.log)
	if err != nil {
		return nil, err
	}
	pg.storeName = "an embedded store in a temporary directory, removed at the end"
	return st, nil
}

// startBot builds the bot the way cmd/bot does, on the fake workspace,
// runs it and waits until its Socket Mode connection is up.
func (pg *playground) startBot(ctx context.Context, model agent.Model, file botsetup.File) error {
	bot, err := botsetup.Build(ctx, botsetup.Parts{
		Store: pg.store,
		File:  file,
		Model: model,
		Slack: slackapp.Config{
			BotToken:         pg.slack.BotToken(),
			AppToken:         pg.slack.AppToken(),
			APIURL:           pg.slack.APIURL(),
			AdminUsers:       []string{userCarol},
			ApprovalsChannel: channelApprov,
			ShutdownGrace:    5 * time.Second,
			Redact:           pg.red.String,
		},
		Agent: agent.Config{
			SystemPrompt: systemPrompt,
			ToolTimeout:  toolTimeout,
			ApprovalTTL:  time.Hour,
		},
		Logger: pg.log,
	})
	if err != nil {
		return err
	}
	pg.bot = bot

	botCtx, cancel := context.WithCancel(context.Background())
	pg.stopBot, pg.botDone = cancel, make(chan error, 1)
	go func() { pg.botDone <- bot.App.Run(botCtx, bot.Agent) }()

	deadline := time.NewTimer(connectTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !bot.App.Connected() {
		select {
		case err := <-pg.botDone:
			pg.botDone <- err // for close
			return fmt.Errorf("the bot stopped at start: %w", err)
		case <-deadline.C:
			return errors.New("the bot did not connect to the fake Slack")
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// close stops the bot and lets in-flight work finish, then closes the
// tools, the store and the fakes and removes the temporary directory. It
// is safe on a partly started playground.
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
	if pg.bot != nil {
		if err := pg.bot.Close(); err != nil {
			pg.log.Error("close tools", "err", err)
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
