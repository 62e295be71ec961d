package agent

import "time"

// SetLostDecisionWait sets lostDecisionWait for a test and returns what
// restores it.
func SetLostDecisionWait(d time.Duration) (restore func()) {
	old := lostDecisionWait
	lostDecisionWait = d
	return func() { lostDecisionWait = old }
}

// PersonText is personText, for tests of what a person reads.
var PersonText = personText

// MergeUsers is mergeUsers, for tests of what a server that refuses two
// user messages in a row is sent.
var MergeUsers = mergeUsers

// JudgeTries and CountTries are judgeTries and countTries.
const JudgeTries, CountTries = judgeTries, countTries

// ShiftHoldClock moves the clock of the conversation leases' confirmations
// by d, as a stall of d would, and returns what restores it.
func ShiftHoldClock(d time.Duration) (restore func()) {
	old := holdClock
	holdClock = func() time.Time { return old().Add(d) }
	return func() { holdClock = old }
}
