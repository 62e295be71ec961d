// Command playground tries Toolgate out in a terminal, with no Slack
// workspace and no model API key:
//
//	go run ./cmd/playground
//
// It runs the real bot (the Slack app, the agent, the policy engine and the
// embedded store, in a temporary directory) against an in-process fake
// Slack and a small scripted model, and lets you play the people of the
// fake workspace: you, who asks the bot to do things; alice, who approves
// restarts; and bob. All of them are in #ops with the bot.
//
// The bot has four demo tools that only pretend to act: get_status,
// restart_service, scale_service and drop_database, plus ask_human. The
// policy (print it with /policy) allows reads, denies drops, asks alice to
// approve restarts (never the person who asked: four eyes) and asks anyone
// to approve scaling above five replicas.
//
// A line you type is posted as the current person: the first one mentions
// the bot in #ops and starts a thread, the next ones are replies in that
// thread. Commands play the rest of Slack: /as switches person; /approve,
// /deny, /always, /cancel, /reject REASON, /edit JSON and /reply ANSWER
// press the buttons of the latest pending approval card (or of card #N) and
// fill in their forms; /pending, /policy and /approvals run the bot's slash
// command. /help lists them all. After each command the playground waits
// until the bot is idle and prints what changed in the thread: new
// messages, cards that were updated, and messages only one person sees.
// A card's buttons are shown as [Approve] [Deny] and so on.
//
// The scripted model understands "status api", "restart api", "scale api 8",
// "drop users" and "ask QUESTION", several of them joined with "and" (they
// become parallel tool calls), and answers tool results by quoting them. With
// OPENAI_API_KEY set (and optionally OPENAI_BASE_URL and OPENAI_MODEL), the
// playground talks to that model instead; -scripted keeps the scripted one.
//
// Commands are read from standard input, which may be a file or a pipe, or
// from the file named by -script; the playground stops at the end of the
// input, at /quit or on Ctrl-C, and then stops the bot, closes the store and
// removes its temporary directory. The bot's warnings go to standard error;
// -v shows all of its logs.
package main
