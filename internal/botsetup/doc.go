// Package botsetup is the start-up wiring that the bot (cmd/bot) and the
// playground (cmd/playground) share, so that the playground runs the bot the
// way the bot runs itself: the store (Redis at a URL, checked up front, or
// the embedded store in a directory: OpenStore), the config file (the
// policy and the tools, parsed by the packages that own each section:
// LoadFile), and the tools, policy engine, Slack app and agent built on
// them, with the model and the verdicts metered (Build). What differs
// stays with each command: the bot reads its environment, counts store
// calls, traces and serves its HTTP endpoints; the playground runs the
// fakes and picks its model.
//
// Errors that come from a bad configuration (an unreachable or malformed
// Redis URL, a config file that cannot be read or does not parse) are
// *ConfigError values, folded onto one line; the bot exits with status 2 on
// them.
package botsetup
