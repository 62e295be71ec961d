package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/botsetup"
	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/tools"
)

const (
	// httpShutdownTimeout bounds the graceful stop of the HTTP server.
	httpShutdownTimeout = 5 * time.Second
)

func main() {
	// The programs the bot starts must not read its tokens from
	// /proc/PID/environ.
	if err := botsetup.Harden(); err != nil {
		fmt.Fprintf(os.Stderr, "bot: %v\n", err)
		os.Exit(1)
	}
	// As a container's init (the tools image), the bot waits for what the
	// programs it starts leave behind.
	ctx, stopReaping := context.WithCancel(context.Background())
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		if os.Getpid() == 1 {
			tools.ReapOrphans(ctx)
		}
	}()
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	stopReaping()
	<-reaped
	var se *statusError
	if err != nil && !errors.As(err, &se) {
		fmt.Fprintf(os.Stderr, "bot: %v\n", err)
	}
	os.Exit(exitCode(err))
}

// exitCode is the process exit status for run's result.
func exitCode(err error) int {
	var ce *configError
	var se *statusError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &se):
		return se.code
	case errors.As(err, &ce):
		return 2
	default:
		return 1
	}
}

// run is the whole program: it reads the configuration from the process
// environment (and args, which only know --help), wires the parts together
// and serves until ctx ends or SIGINT or SIGTERM arrives. It returns nil
// after a clean stop, a *configError for a bad configuration, and any other
// error that stopped the bot. Logs go to stderr, --help to stdout. No token
// appears in the logs or the returned error. With args "policy ...", it runs
// the offline policy commands instead (see runPolicy).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "policy" {
		return runPolicy(ctx, args[1:], stdout)
	}
	fs := flag.NewFlagSet("bot", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return printUsage(stdout)
		}
		return configErrorf("command line: %w", err)
	}
	if fs.NArg() > 0 {
		return configErrorf("unexpected argument %q: bot is configured by environment variables, see bot --help", fs.Arg(0))
	}

	secrets := envSecrets(os.Getenv)
	red := newRedactor(secrets...)
	cfg, err := loadConfig()
	if err != nil {
		return red.Error(err)
	}
	file, err := botsetup.LoadFile("CONFIG_FILE", cfg.ConfigFile)
	if err != nil {
		return red.Error(err)
	}
	if err := file.Tools.Builtins.CheckTimeouts(cfg.ToolTimeout, "TOOL_TIMEOUT"); err != nil {
		return red.Error(configErrorf("config file %s: %w", cfg.ConfigFile, err))
	}
	if err := botsetup.CheckToolReach(file.Tools.Builtins, cfg.RedisURL, "DATA_DIR", cfg.DataDir, "CONFIG_FILE", cfg.ConfigFile); err != nil {
		return red.Error(configErrorf("config file %s: %w", cfg.ConfigFile, err))
	}
	// The tools' headers, env values and URL parts from ${VAR} references.
	red = newRedactor(append(secrets, file.Tools.Secrets()...)...)
	return red.Error(serve(ctx, cfg, file, red, stderr))
}

// serve runs the bot with a checked configuration until ctx ends or SIGINT
// or SIGTERM arrives, and returns nil after such a stop, whichever step of
// the start-up or the serving it came in.
func serve(ctx context.Context, cfg config, file botsetup.File, red redactor, logOut io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, a second one kills the process at once instead
	// of waiting for in-flight work.
	context.AfterFunc(ctx, stop)

	log := newLogger(logOut, cfg, red)
	err := serveBot(ctx, cfg, file, red, log)
	// The stop cancels what is under way: dialling the store, connecting
	// the MCP servers, serving. Each step then fails with
	// context.Canceled, which is the stop asked for and no failure, so the
	// exit is clean from each of them (an orchestrator that stops a pod
	// still starting would otherwise see a bad setting, status 2). The
	// same error while ctx is live is a failure of its own.
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil
	}
	err = tokenAdvice(err)
	if err == nil {
		log.Info("stopped")
	}
	return err
}

// tokenAdvice makes a token Slack refused for good (see
// slackapp.TokenRefusedError) a configuration error that names its
// setting and says what to do; it returns any other err as it is.
func tokenAdvice(err error) error {
	tr, ok := errors.AsType[*slackapp.TokenRefusedError](err)
	if !ok {
		return err
	}
	name := "SLACK_BOT_TOKEN"
	if tr.App {
		name = "SLACK_APP_TOKEN"
	}
	return configErrorf("%s: %w; %s", name, err, cmp.Or(tr.Hint, "paste the token again from the Slack app's settings"))
}

// serveBot is serve's work, which ctx's end stops: it opens the store,
// builds the bot and serves Slack and HTTP until ctx ends or a part fails,
// then closes everything it opened.
func serveBot(ctx context.Context, cfg config, file botsetup.File, red redactor, log *slog.Logger) error {
	// The Redis client's own lines (a pool that cannot dial) go through
	// the same log, redacted and in its format.
	redis.SetLogger(redisLog{log})
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	st, err := botsetup.OpenStore(ctx, botsetup.StoreConfig{
		RedisURL:       cfg.RedisURL,
		RedisPrefix:    cfg.RedisPrefix,
		Dir:            cfg.DataDir,
		Retention:      cfg.RunRetention,
		AuditRetention: cfg.AuditRetention,
		AuditMax:       cfg.AuditMaxEntries,
		WaitReplicas:   cfg.RedisWaitReplicas,
		WaitTimeout:    cfg.RedisWaitTimeout,
	}, log)
	if err != nil {
		return err
	}
	st = countStore(st, promReg)
	defer closeLogged(log, "store", st)

	traces, err := startTracing(ctx, cfg, log, red)
	if err != nil {
		return err
	}
	defer flushTraces(log, traces)
	model, tracer := newModel(cfg, log, traces.Tracer())
	bot, err := botsetup.Build(ctx, botsetup.Parts{
		Store: st,
		File:  file,
		Model: model,
		Slack: slackapp.Config{
			BotToken:         cfg.SlackBotToken,
			AppToken:         cfg.SlackAppToken,
			APIURL:           cfg.SlackAPIURL,
			AdminUsers:       cfg.AdminUsers,
			ApprovalsChannel: cfg.ApprovalsChannel,
			MaxTurns:         cfg.MaxTurns,
			SweepInterval:    cfg.SweepInterval,
			ShutdownGrace:    cfg.ShutdownGrace,
			TakeoverInterval: cfg.TakeoverInterval,
			Redact:           red.String,
		},
		Agent: agent.Config{
			SystemPrompt:  cfg.SystemPrompt,
			MaxSteps:      cfg.MaxSteps,
			MaxCalls:      cfg.MaxCallsPerStep,
			MaxToolOutput: cfg.MaxToolResult,
			ContextBudget: cfg.ContextBudget,
			ToolTimeout:   cfg.ToolTimeout,
			ApprovalTTL:   cfg.ApprovalTTL,
			RememberTTL:   cfg.RememberTTL,
			ReminderAfter: cfg.ReminderAfter,
			Tracer:        tracer,
			LeaseTTL:      cfg.LeaseTTL,
		},
		Metrics:         slackapp.NewMetrics(promReg),
		Logger:          log,
		MaxTools:        cfg.ModelMaxTools,
		MaxToolsSetting: "MODEL_MAX_TOOLS",
	})
	if err != nil {
		return err
	}
	// Deferred after the store's Close, so it runs first.
	defer closeLogged(log, "tools", bot)

	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("listen on HTTP_ADDR: %w", err)
	}
	srv := &http.Server{
		Handler: probes{
			app:      bot.App,
			store:    st,
			mcp:      bot.Tools.Status,
			gatherer: promReg,
			redact:   red,
			pprof:    cfg.Pprof,
		}.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	log.Info("starting",
		"model", cfg.OpenAIModel,
		"model_url", redact.SafeURL(cfg.OpenAIBaseURL),
		"http_addr", ln.Addr().String(),
		"max_turns", cfg.MaxTurns,
		"mcp_servers", len(file.Tools.Servers),
		"builtin_tools", builtinNames(file.Tools.Builtins),
		"approvals_channel", cfg.ApprovalsChannel,
	)

	g, gctx := errgroup.WithContext(ctx)
	appDone := make(chan struct{})
	g.Go(func() error {
		defer close(appDone)
		err := bot.App.Run(gctx, bot.Agent)
		if err == nil && gctx.Err() == nil {
			err = errors.New("slack app stopped unexpectedly")
		}
		return err
	})
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		// Keep /healthz and /readyz answering while the app drains.
		<-appDone
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			// A request still running after the grace (a CPU profile
			// with PPROF=true, a scrape of a slow registry) is cut
			// rather than waited for: the requests of the probes and
			// the profiler are no work of the bot's, and the stop was
			// asked for, so it stays clean. Close's own error can only
			// be the listener's, which Shutdown has closed already.
			_ = srv.Close()
			log.Warn("stop http server: requests still running were cut", "grace", httpShutdownTimeout.String(), "err", err)
		}
		return nil
	})
	return g.Wait()
}

// redisLog writes the Redis client's lines to a slog.Logger.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client: "+strings.TrimSpace(fmt.Sprintf(format, v...)))
}

// newLogger returns the bot's logger: JSON or text on w, at LOG_LEVEL, with
// secrets redacted.
func newLogger(w io.Writer, cfg config, red redactor) *slog.Logger {
	level, _ := parseLevel(cfg.LogLevel) // checked by validate
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		return red.ReplaceAttr(groups, store.NameAuditLevel(groups, a))
	}}
	if cfg.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// closeLogged closes c and logs a failure.
func closeLogged(log *slog.Logger, what string, c io.Closer) {
	if err := c.Close(); err != nil {
		log.Warn("close "+what, "err", err)
	}
}

// builtinNames lists the enabled built-in tool groups, for the start-up log.
func builtinNames(b tools.BuiltinConfig) []string {
	var names []string
	if b.AskHuman != nil {
		names = append(names, "ask_human")
	}
	if b.HTTPRequest != nil {
		names = append(names, "http_request")
	}
	if b.RunCommand != nil {
		names = append(names, "run_command")
	}
	if b.Workspace != nil {
		names = append(names, "workspace")
	}
	return names
}
