// Package teststore opens the bot's stores for tests in other packages: the
// embedded store in a temporary directory and, when REDIS_URL is set, Redis
// under a random key prefix. Without REDIS_URL the Redis kind is left out
// with a log line, except in CI (CI=true), where that fails the test.
package teststore
