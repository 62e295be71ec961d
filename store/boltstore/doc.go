// Package boltstore implements the store in one bbolt file, for a single
// bot process without Redis.
//
// Every method is one bbolt transaction, and the writing ones run one at
// a time, which makes Decide, ClaimResume and the other compare-and-set
// operations atomic within the process. A write that arrives while the
// store is idle commits at once; the writes that arrive while a commit is
// running wait for it and are committed together in the next one, in one
// fsync, so that writers do not queue one fsync each. AcceptMessage (the
// ack of a message waits for it), Decide and Approve go ahead of the other
// queued writes, so that a burst of turns writing does not hold up acks
// and clicks. A method returns only once its write is committed. bbolt
// locks the file, so a second process (or a second Open in the same
// process) fails after Options.LockTimeout instead of sharing it.
//
// The calls with a reminder to send are kept in a bucket ordered by
// reminder time, which DueReminders and NextReminder read from the start;
// Decide, Approve, ClaimReminder and FinishRun update it in the
// transaction that changes the call. The pending calls are indexed the
// same way, by expiry (for Due and NextExpiry), by creation, and by
// conversation, requester and approver (for Pending, oldest first, which
// stops at a Filter's Limit); the transactions that make a call pending or
// take it out of Pending write the indexes, and Open builds them for a
// file that has none.
//
// Leases, resume claims and event ids store their expiry time and are
// judged against time.Now. Runs are deleted Options.Retention after they
// expired or finished, conversations Options.ConversationTTL after their
// last save, and lapsed leases and event ids soon after they lapse: a
// goroutine prunes the file every Options.PruneInterval until Close,
// finding what has lapsed in a read transaction so that writes do not wait
// for the scan, and deleting it a few hundred keys to a write, queued with
// the others, so that they do not wait for a long deletion either (a prune
// that fails is logged on Options.Logger, and tried again). A conversation
// or inbox record that cannot be read (a damaged file) is deleted
// Options.ConversationTTL after a prune first found it so, and a run record
// Options.Retention after (its calls, which nothing can decide, are no
// longer listed as pending from then); the prune logs what it found. The
// audit log
// keeps the newest Options.AuditMax entries,
// those younger than Options.AuditRetention (older ones are trimmed when
// an entry is added and by every prune); records are kept until deleted.
//
// Everything written before Close is there again after Open on the same
// path. Open reads every page of the file's branches and leaves before it
// opens it for writing, and refuses a file with a page it cannot read (a
// damaged file) with an error naming it: opening such a file for writing,
// bbolt would end the process (see checkPages).
package boltstore
