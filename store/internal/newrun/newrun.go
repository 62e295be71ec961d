package newrun

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/toolgate/toolgate/store"
)

// Prepare validates r and calls for CreateRun and returns copies with the
// derived fields filled in:
//
//   - r.CallIDs is set from calls when empty, and must otherwise list the
//     calls' ids in order;
//   - every call id must be made by store.CallID from r.ID;
//   - every call gets RunID, and Conversation, Requester and Channel from
//     the run when it has none, Status Pending, no decision, not executing,
//     no reminder claimed (Reminded 0);
//   - CreatedAt defaults to now (the run's for its calls);
//   - r.ExpiresAt becomes the latest ExpiresAt of the calls.
func Prepare(r store.Run, calls []store.Call, now time.Time) (store.Run, []store.Call, error) {
	if r.ID == "" {
		return r, nil, errors.New("run has no id")
	}
	if strings.ContainsAny(r.ID, ".{}") {
		return r, nil, fmt.Errorf("run id %q contains '.', '{' or '}'", r.ID)
	}
	if len(calls) == 0 {
		return r, nil, fmt.Errorf("run %s has no calls", r.ID)
	}
	if len(r.CallIDs) != 0 && len(r.CallIDs) != len(calls) {
		return r, nil, fmt.Errorf("run %s lists %d call ids for %d calls", r.ID, len(r.CallIDs), len(calls))
	}
	if r.CreatedAt.IsZero() {
		r.CreatedAt = now
	}
	r.ExpiresAt = time.Time{}
	ids := make([]string, len(calls))
	out := make([]store.Call, len(calls))
	for i, c := range calls {
		if store.RunOf(c.ID) != r.ID {
			return r, nil, fmt.Errorf("call id %q does not belong to run %s", c.ID, r.ID)
		}
		if want := store.CallID(r.ID, i); c.ID != want {
			// Stores find a run's calls by their numbers.
			return r, nil, fmt.Errorf("call %d of run %s has id %s, want %s", i, r.ID, c.ID, want)
		}
		if len(r.CallIDs) != 0 && r.CallIDs[i] != c.ID {
			return r, nil, fmt.Errorf("run %s lists call id %s at %d, got call %s", r.ID, r.CallIDs[i], i, c.ID)
		}
		if c.RunID != "" && c.RunID != r.ID {
			return r, nil, fmt.Errorf("call %s names run %s, want %s", c.ID, c.RunID, r.ID)
		}
		if c.ExpiresAt.IsZero() {
			return r, nil, fmt.Errorf("call %s has no expiry", c.ID)
		}
		c.RunID = r.ID
		if c.Conversation == "" {
			c.Conversation = r.Conversation
		}
		if c.Requester == "" {
			c.Requester = r.Requester
		}
		if c.Channel == "" {
			c.Channel = r.Channel
		}
		if c.CreatedAt.IsZero() {
			c.CreatedAt = r.CreatedAt
		}
		c.Status = store.Pending
		c.Decision = nil
		c.Executing, c.ExecAttempt = false, ""
		c.Reminded = 0
		c.Approvals, c.Edit, c.Result = nil, nil, nil
		// Deadlines are whole microseconds, which every store compares
		// exactly (Redis keeps microseconds); so is the start, so that the
		// wait between them is the one asked for.
		c.CreatedAt, c.ExpiresAt = c.CreatedAt.Truncate(time.Microsecond), c.ExpiresAt.Truncate(time.Microsecond)
		if c.ExpiresAt.After(r.ExpiresAt) {
			r.ExpiresAt = c.ExpiresAt
		}
		ids[i] = c.ID
		out[i] = c
	}
	r.CallIDs = ids
	return r, out, nil
}

// Outcome returns the status a decision of kind sets.
func Outcome(kind string) store.Status {
	switch kind {
	case "expire":
		return store.Expired
	case "cancel":
		return store.Cancelled
	default:
		return store.Decided
	}
}

// CheckNotes checks that every note of a commit belongs to one of its
// calls.
func CheckNotes(calls []store.Call, notes map[string][]byte) error {
	for id := range notes {
		if !slices.ContainsFunc(calls, func(c store.Call) bool { return c.ID == id }) {
			return fmt.Errorf("note for call %s, which the commit does not create", id)
		}
	}
	return nil
}
