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
