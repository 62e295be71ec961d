// Package charttest holds the tests of the Helm chart in ../toolgate: they
// render it with Helm's template engine and check the manifests. It is a
// module of its own so that Helm's dependencies stay out of the bot's
// go.mod; .ci/run runs its tests.
package charttest
