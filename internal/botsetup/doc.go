// Package botsetup is the start-up wiring that the bot (cmd/bot) and the
// playground (cmd/playground) share, so that the playground runs the bot the
// way the bot runs itself: the store (Redis at a URL, checked up front, or
// the embedded store in a directory), the config file (the policy and the
// tools, parsed by the packages that own each section), and the policy
// engine, Slack app, model and agent built on them.
//
// Errors that come from a bad configuration (an unreachable or malformed
// Redis URL, a config file that cannot be read or does not parse) are
// *ConfigError values, folded onto one line; the bot exits with status 2 on
// them.
package botsetup
