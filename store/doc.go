// Package store holds the persistent state of the bot: paused runs and the
// tool calls they wait on, decisions, conversations, leases, the audit log
// and small versioned records.
//
// This package declares the data types and the errors shared by the
// implementations; the operations are specified by storetest.Store and
// implemented by redisstore (many replicas sharing Redis) and boltstore
// (one process, one file). Both pass the same conformance suite,
// storetest.Run. Consumers declare the few methods they need as their own
// interface and accept either implementation.
//
// The central guarantee is that deciding a call is one atomic
// compare-and-set from Pending to a final status: however many replicas,
// clicks and redelivered events race, a call is decided once, the run is
// reported complete once, and a tool is started at most once.
package store
