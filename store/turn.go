package store

// TurnLease is the lease key that serialises the turns of a conversation:
// BeginTurn takes it, Commit releases it, and AcquireLease, RenewLease and
// ReleaseLease take, renew and release it under this key.
func TurnLease(conversation string) string { return "conv:" + conversation }

// Begun is what BeginTurn found when it took a conversation's lease.
type Begun struct {
	// Acquired is false when another owner holds the lease; then nothing
	// else is set.
	Acquired bool
	// Found is false for a conversation with no record; Conversation is
	// then the zero value.
	Found        bool
	Conversation Conversation
	// Inbox is the conversation's unanswered messages, in Seq order.
	Inbox []Inbound
	// Records are the records of the kinds asked for, by kind, read with
	// the rest when Acquired; nil if none were asked for or they could
	// not be read.
	Records map[string][]Record
	// RecordsVersion is the version of every record at the time Records
	// were read: a number that any later change of a record makes
	// different (see Condition.IfRecords). Zero from a store that keeps
	// none (Redis Cluster).
	RecordsVersion int64
}

// Commit is what a turn writes when it records its result, applied by
// one store operation (see storetest.Store.CommitTurn). Empty fields
// write nothing.
type Commit struct {
	// Key is the conversation's key.
	Key string
	// Conversation, if set, replaces the conversation's record (its Key
	// is set to Key).
	Conversation *Conversation
	// Run and Calls, if Run is set, are a paused run created as CreateRun
	// creates one.
	Run   *Run
	Calls []Call
	// Notes are the notes of calls among Calls, by call id, written with
	// them as PutCallNote writes one (a caller that knows where a call's
	// card is before the call is saved saves both in one step).
	Notes map[string][]byte
	// Finish names a run to finish as FinishRun does; an unknown or
	// finished run is left as it is.
	Finish string
	// Audit entries are appended to the audit log, in order.
	Audit []AuditEntry
	// Answer removes the inbox's messages up to Seq AnswerUpTo as
	// AnswerInbox does (once the inbox is empty the conversation is no
	// longer listed by Unanswered).
	Answer     bool
	AnswerUpTo int64
	// Release, if set, is the owner whose lease on the conversation
	// (TurnLease) is released, if that owner holds it.
	Release string
	// Holder, if set, is the owner the commit is made for: if another
	// owner holds the conversation's lease (TurnLease), as when the
	// holder's lease ran out while it was stalled and another process
	// took the conversation over, the commit fails with ErrNotHolder and
	// leaves the conversation, its inbox and lease, and the run to finish
	// as they are. So does a lease that ran out and is free: another
	// process may have taken the conversation over, finished and released
	// it meanwhile, and what the holder would write is older than that.
	Holder string
	// Announce, if set, is published to the processes that follow the
	// store's pauses once the commit is made (a store shared by several
	// processes: see redisstore.Store.FollowPauses); opaque to the store.
	// A store of one process, or one that cannot publish it with the
	// commit's step, ignores it.
	Announce []byte
}
