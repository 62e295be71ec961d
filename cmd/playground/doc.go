// Command playground tries Toolgate out with no Slack workspace and no
// model API key:
//
//	go run ./cmd/playground
//
// It runs the real bot (the Slack app, the agent, the policy engine and a
// store, built by internal/botsetup as cmd/bot builds them) connected over the real Socket Mode protocol and Web API to an
// in-process fake Slack (internal/fakeslack), with a small scripted model
// served by a fake OpenAI-compatible server, and serves a web page on
// 127.0.0.1 (-addr; a free port by default) that shows the fake workspace
// like a Slack client: #ops, #approvals, the DM with the bot and its Home
// tab; threads, the bot's status and streamed answers; Block Kit cards with
// their buttons and confirm dialogs, modals with inline errors, messages
// only one person sees. A switcher at the top picks the person acting: you
// (the requester), alice (the approver), bob (in #ops and named by no
// rule, so decides only what anyone in the channel may), carol (an admin)
// and dave (not in #ops). The page's URL is printed, and
// opened in a browser where a desktop is present (DISPLAY or
// WAYLAND_DISPLAY, or macOS) unless -no-open is given.
//
// The page is rendered on the server (html.go): Block Kit, Slack mrkdwn and
// the Markdown of streamed answers become HTML whose every string from the
// bot is escaped text; links are made for http, https and mailto only. The
// page's script (static/app.js) follows the server's change notices on a
// WebSocket, fetches the rendered panes and posts clicks, form submissions
// and messages, which the server turns into the envelopes Slack would send
// (block_actions, view_submission, view_closed, slash commands,
// app_home_opened, message and app_mention events). Messages in #ops
// mention the bot.
//
// The demo configuration (workspace.go) enables the tools package's
// built-ins on a seeded temporary workspace: workspace_list/read/write/
// delete, run_command and ask_human, with a policy that allows reads,
// denies anything under secrets/ and rm, asks alice to approve deletes
// (never the requester: four eyes), allows writes under tmp/ and harmless
// commands (ls, df and uptime with flags only, a bare date: CEL conditions)
// and asks anyone for other writes and commands. -config FILE
// runs your own config file instead, parsed by the bot's own parsers and
// refused where the bot refuses it at start (a tool's timeout longer than
// the bot's default TOOL_TIMEOUT, or a tool's directory that holds the
// file or the playground's store). The
// store is an embedded one in the temporary directory (never REDIS_URL's,
// which may be a real bot's). With OPENAI_API_KEY or OPENAI_BASE_URL set (and
// optionally OPENAI_MODEL) the bot talks to that model, an OpenAI-compatible
// one (the bot's Azure OpenAI settings, OPENAI_API_VERSION or a
// *.openai.azure.com OPENAI_BASE_URL, are refused at start, and its MODEL_*
// settings are not read); -scripted keeps the scripted one, which understands "list files", "read FILE", "delete FILE",
// "write TEXT to FILE", "run COMMAND" and "ask QUESTION", joined with "and".
//
// In a terminal, -tty reads commands from standard input and -script FILE
// (- for standard input) from a file, ending at its end: a line is posted
// as the current person, unless they are not in #ops (the first one
// mentions the bot in #ops and starts a thread), and commands play the
// rest of Slack: /as NAME switches person; /approve, /deny, /always,
// /cancel, /reject REASON, /edit JSON and /reply ANSWER press the buttons
// of the latest pending card (or of card #N) and fill in their forms;
// /pending, /policy and /approvals run the slash command, in #ops, for
// people in it. After each
// command it waits until the bot is idle and prints what changed: the
// bot's messages in the thread and in people's DMs with it, and what only
// one person sees. A -script runs to its end and then exits with status 1
// if any command could not be carried out (an unknown person, command or
// card, a post by someone outside #ops, a failed click, a bot that did not
// react or was still busy when -wait ran out), naming their lines; what
// the bot answers, a denied call or a refused click included, is no
// failure. -wait must be positive and -quiet not negative.
//
// Either way the playground stops on Ctrl-C (or at /quit or the end of the
// input in a terminal): it stops the bot, closes the store and removes its
// temporary directory. The bot's warnings go to standard error; -v shows
// all of its logs.
package main
