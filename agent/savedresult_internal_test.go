package agent

import (
	"encoding/json"
	"testing"
)

// A saved result keeps that its call timed out with an unknown outcome, so
// that a resume taken over after it was saved shows it so on the card.
func TestSavedResultKeepsATimedOutOutcome(t *testing.T) {
	res := Result{Content: "tool slow timed out after 1s", IsError: true, unknown: true}
	var saved savedResult
	if err := json.Unmarshal(mustJSON(savedOf(res)), &saved); err != nil {
		t.Fatal(err)
	}
	if got := saved.result(); !got.OutcomeUnknown() || got.Content != res.Content || !got.IsError {
		t.Errorf("the saved result read back is %+v, want %+v", got, res)
	}
}
