// Package storetest is the conformance suite every store implementation
// passes: call Run with a function that opens the implementation on a given
// place, so that reopening the same place models a process restart.
//
// Store, below, is the contract. Where it says nothing about an input:
// a zero time that the store records (Decision.At, AuditEntry.At,
// Record.UpdatedAt, Conversation.UpdatedAt) is set to now, and a limit <= 0
// means no limit.
package storetest
