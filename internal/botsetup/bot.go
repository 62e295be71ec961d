package botsetup

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/tools"
)

// Parts is what Build assembles a bot from.
type Parts struct {
	// Store keeps the bot's state; the caller opens and closes it.
	Store Store
	// File gives the policy and the tools.
	File File
	// Model is the model client; Build records its requests in Metrics.
	Model agent.Model
	// Slack configures the Slack app; Build sets its Logger and Metrics.
	Slack slackapp.Config
	// Agent configures the agent; Build sets its Groups, Audience and
	// Logger.
	Agent agent.Config
	// Metrics, if set, counts the Slack app's envelopes, turns and
	// decisions, the policy's verdicts and the model's requests.
	Metrics *slackapp.Metrics
	// Logger gets the logs of every part and the audit log of the policy
	// engine.
	Logger *slog.Logger
	// MaxTools, if positive, is how many tools the model may be offered
	// (OpenAI refuses a request offering more than OpenAIMaxTools): Build
	// fails when the tools loaded at start are more, and an error is
	// logged whenever they become more later (an MCP server that
	// connects late or lists more tools). Zero means no limit.
	MaxTools int
	// MaxToolsSetting names the setting of MaxTools in errors and logs
	// (such as MODEL_MAX_TOOLS).
	MaxToolsSetting string
}

// Bot is a bot built on a store, ready to run: b.App.Run(ctx, b.Agent)
// serves Slack until ctx ends.
type Bot struct {
	App   *slackapp.App
	Agent *agent.Agent
	// Tools are the loaded tools; their Status reports the MCP servers.
	Tools *tools.Manager
}

// Build loads the tools of p.File (connecting its MCP servers, see
// tools.Load), then builds on p.Store the policy engine for p.File.Policy,
// the Slack app and the agent, whose model requests and judged tool calls
// are metered in p.Metrics. It fails, with nothing left running, when a
// tool cannot be set up (a *ConfigError naming the file as p.File.Setting
// does), when the model would be offered more than p.MaxTools tools (a
// *ConfigError naming p.MaxToolsSetting, saying where the tools come from)
// or the Slack app's configuration is refused ("set up slack app:
// ..."). A built bot's policy file rules that do nothing (never reached,
// never reminding, matching none of the tools) are logged as warnings
// (see warnPolicy). The caller closes the Bot after App.Run has returned,
// before the store.
func Build(ctx context.Context, p Parts) (*Bot, error) {
	reg := agent.NewRegistry()
	limit := newToolLimit(p, reg)
	if limit != nil {
		// Set before the tools load, so that no change after the check
		// goes unseen; the changes before it are the check's.
		reg.OnChange(limit.changed)
	}
	mgr, err := tools.Load(ctx, p.File.Tools, reg, p.Logger)
	if err != nil {
		if ctx.Err() == nil {
			// A tool of the file that cannot be set up (a directory
			// that does not exist, a preview tool the server lacks),
			// named as the caller names the file.
			err = &ConfigError{Err: fmt.Errorf("%s: %w", cmp.Or(p.File.Setting, "config file"), err)}
		}
		return nil, err
	}
	if limit != nil {
		if err := limit.check(mgr.Status); err != nil {
			reg.OnChange(nil)
			if cerr := mgr.Close(); cerr != nil {
				p.Logger.Warn("close tools", "err", cerr)
			}
			return nil, &ConfigError{Err: err}
		}
	}
	defaults := approvals.Defaults{TTL: p.Agent.ApprovalTTL, RemindAfter: p.Agent.ReminderAfter}
	// A standing rule's maker is checked by the Slack app's (cached)
	// look-ups of user groups and of who can see a conversation; the app
	// is made with the engine, and judges nothing before it is.
	var app *slackapp.App
	makers := func(ctx context.Context, ask approvals.Verdict, maker, channel string) error {
		return approvals.MakersUnder(app.Groups(), app.Audience().CanSee)(ctx, ask, maker, channel)
	}
	engine := approvals.NewEngine(p.File.Policy, p.Store, approvals.WithAuditLog(p.Logger), approvals.WithDefaults(defaults), approvals.WithMakerCheck(makers))
	sc := p.Slack
	sc.Logger, sc.Metrics = p.Logger, p.Metrics
	app, err = slackapp.New(sc, p.Store, engine)
	if err != nil {
		if cerr := mgr.Close(); cerr != nil {
			p.Logger.Warn("close tools", "err", cerr)
		}
		return nil, fmt.Errorf("set up slack app: %w", err)
	}
	ac := p.Agent
	ac.Groups, ac.Audience, ac.Logger, ac.Judged, ac.Expired = app.Groups(), app.Audience(), p.Logger, p.Metrics.ToolCall, p.Metrics.Expired
	ac.ShownInFull = slackapp.ArgsShownInFull
	ag := agent.New(meteredModel{model: p.Model, metrics: p.Metrics}, reg, engine, p.Store, app.Reporter, ac)
	if p.Logger != nil {
		// Once the servers reachable at start have listed their tools,
		// so that a rule for one of them is judged by its tools.
		warnPolicy(p.Logger, p.File.Policy, defaults, p.File.Tools.Servers, mgr.Status(), reg)
	}
	return &Bot{App: app, Agent: ag, Tools: mgr}, nil
}

// Close disconnects the MCP servers and stops the tools' background work.
func (b *Bot) Close() error { return b.Tools.Close() }
