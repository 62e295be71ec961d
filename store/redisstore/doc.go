// Package redisstore implements the store on Redis, for one or many bot
// replicas sharing a single node, a Sentinel-managed primary or a Cluster
// (see NewClient for the URL forms). It needs Redis 7.0 or later (it uses
// the NX, GT and LT options of PEXPIRE).
//
// # Atomicity
//
// Every key of a run lives under the hash tag {runID} and every key of a
// conversation, the lease of its turns included, under {conv:key}, so the
// scripts that must be atomic touch one hash slot and run on Redis
// Cluster. Decide, Approve, ClaimResume, BeginExecution, AbandonExecution,
// PutCallNote and BeginTurn are each one Lua script, that is one round
// trip (BeginTurn pipelines the records asked for with it). CreateRun writes the run
// and its calls in one script, then the indexes in one pipeline.
// CommitTurn, which spans a run and a conversation, writes the run first,
// then the run's indexes, the audit entries and the conversation's part
// (its record, inbox and lease: one script) in one pipeline, then what
// finishing a run and unlisting an answered conversation need. On one
// node (or a Sentinel-managed primary), DecideAudited and ApproveAudited
// also write the audit entry, the takeover listing and the run's listing
// for Stalled in their script, and
// BeginResume takes the lease and the claim and loads the run and the
// conversation in one script, and DecideBegin and ApproveBegin send their
// script with BeginResume's in one pipeline; on a Cluster, where those
// keys are in other hash slots, each takes one more round trip (see
// their docs).
//
// # Indexes
//
// Pending, Due, DueReminders and Stalled read global sorted sets (due
// calls, calls by reminder time, pending calls by approver, requester and
// conversation, and runs, by the time from which Stalled reads them: on
// one node those whose resume is due, listed by the script of the decision
// that left none of their calls pending; on a Cluster every run, by its
// expiry, moved to the time of a decision sent on it beside its script).
// Those keys are in other hash slots than the runs, so scripts that run on
// a Cluster cannot update them together: they are hints. Readers check
// every entry against the call or run it names and remove entries whose
// call is decided, expired, cancelled, finished or gone. A call never
// becomes pending again, so this never drops a pending call. A call's
// reminder time lives in its hash (ClaimReminder moves it in one script,
// and so does an edit that moves the call's deadline earlier);
// the reminder index entry follows in a second command, and a reader that
// finds it behind the call's time moves it.
//
// # Lifetimes
//
// Run and call keys expire Options.Retention after the run's ExpiresAt, or
// after FinishRun if that is sooner; conversations Options.ConversationTTL
// after their last save; leases, resume claims and event ids with their
// TTL; index keys with the latest run they list. The audit log is capped at
// Options.AuditMax entries, and its entries older than
// Options.AuditRetention are trimmed when an entry is added and by Stalled
// (the agent's periodic sweep). Records are configuration and are kept
// until deleted.
//
// # Failures
//
// Every method returns the client's error, wrapped, when Redis cannot be
// reached, and each atomic step either happens whole or not at all: a
// Decide that fails leaves the call pending.
//
// # Counting round trips
//
// NewFromClient takes any redis.UniversalClient. Add a hook with
// client.AddHook before passing it in to observe every command, pipeline
// and script the store sends, for instance to count round trips in a
// benchmark.
package redisstore
