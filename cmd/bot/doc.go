// Command bot runs Toolgate: a Slack bot, connected over Socket Mode, that
// runs an LLM agent whose every tool call is judged by a policy; risky calls
// wait for a human to approve them on a Block Kit card.
//
// It is configured by environment variables; `bot --help` lists them with
// their defaults. It serves /healthz, /readyz and /metrics on HTTP_ADDR and
// stops gracefully on SIGINT or SIGTERM, letting in-flight work finish.
//
// Exit status: 0 after a clean stop or --help, 2 when the configuration is
// missing or malformed, 1 on any other failure.
package main
