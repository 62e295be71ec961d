package slackapp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/store"
)

// A Home tab whose publish Slack refuses (a rate limit it names, its own
// failure, a 429 past the client's retries) is published again by a later
// round, as one the store could not read is: it would otherwise keep
// showing a decided call, with live buttons.
func TestHomePublishRefusedIsPublishedLater(t *testing.T) {
	for _, code := range []string{"ratelimited", "service_unavailable", "internal_error", "429"} {
		t.Run(code, func(t *testing.T) {
			fs, pc := homeHashWorld(t)
			listed := &listedAgent{}
			listed.list(pc)
			a := homeReplicas(t, fs, listed, 1)[0]
			a.publishRound(t.Context(), []string{"UAPP"}, nil)
			if !listsCall(fs, "UAPP") {
				t.Fatal("the tab does not list the pending call")
			}
			listed.list() // the call was decided
			if code == "429" {
				fs.RateLimit("views.publish", maxWebRetries+1, 1)
			} else {
				fs.ErrorNext("views.publish", code)
			}
			a.publishRound(t.Context(), []string{"UAPP"}, nil)
			if _, later := a.homes.take(); !slices.Contains(later, "UAPP") {
				t.Errorf("publish refused (%s): no later round publishes the tab (left for later: %q)", code, later)
			}
		})
	}
}

// A tab whose reading could not check who may decide a call (Slack failed
// to list the channel's members for a moment) is published again in the
// next round, which lists the call once Slack answers; a channel Slack
// will never list (gone) freezes no tab and repeats nothing.
func TestHomeWhoseCheckFailedIsPublishedAgain(t *testing.T) {
	fs, pc := homeHashWorld(t)
	pc.Approvers = nil // open to anyone in C1
	listed := &listedAgent{}
	listed.list(pc)
	a := homeReplicas(t, fs, listed, 1)[0]
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	if !listsCall(fs, "UAPP") {
		t.Fatal("the tab does not list the pending call")
	}
	a.audience.forget("C1") // someone left C1: its members are read again
	fs.ErrorNext("conversations.members", "internal_error")
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	_, later := a.homes.take()
	if !slices.Contains(later, "UAPP") {
		t.Fatalf("after a failed check no later round publishes the tab (left for later: %q)", later)
	}
	a.publishRound(t.Context(), later, nil)
	if !listsCall(fs, "UAPP") {
		t.Error("the next round, Slack answering, does not list the pending call")
	}
	if _, again := a.homes.take(); len(again) != 0 {
		t.Errorf("a round that checked everything left %q for later", again)
	}
	a.audience.forget("C1")
	fs.ErrorNext("conversations.members", "channel_not_found")
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	if _, again := a.homes.take(); len(again) != 0 {
		t.Errorf("a check Slack refuses for good left %q for later: it would be made every round", again)
	}
}

// A publish Slack refuses for good (the user is gone) is not made again
// every round.
func TestHomePublishRefusedForGoodIsNotMadeAgain(t *testing.T) {
	fs, pc := homeHashWorld(t)
	listed := &listedAgent{}
	listed.list(pc)
	a := homeReplicas(t, fs, listed, 1)[0]
	fs.ErrorNext("views.publish", "user_not_found")
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	if _, later := a.homes.take(); len(later) != 0 {
		t.Errorf("a publish refused with user_not_found is left for later: %q", later)
	}
}

// failingOwn lists calls as listedAgent does, but fails a listing of one
// requester's calls (the store failing for a moment).
type failingOwn struct{ *listedAgent }

func (f failingOwn) Pending(ctx context.Context, fl store.Filter) ([]agent.PendingCall, error) {
	if fl.Requester != "" {
		return nil, errors.New("redis: connection reset")
	}
	return f.listedAgent.Pending(ctx, fl)
}

// Past the scan limit, a tab whose user's own requests could not be read
// is not published saying none of them waits.
func TestHomeWhoseOwnRequestsWereNotReadIsNotPublished(t *testing.T) {
	fs, pc := homeHashWorld(t)
	var calls []agent.PendingCall
	for i := range homeScanLimit {
		c := pc
		c.ID = fmt.Sprintf("r%d.0", i)
		c.RunID = fmt.Sprintf("r%d", i)
		c.Approvers = []string{"UOTHER"}
		calls = append(calls, c)
	}
	listed := &listedAgent{}
	listed.list(calls...)
	a := homeReplicas(t, fs, listed, 1)[0]
	a.publishRound(t.Context(), []string{"UREQ"}, nil)
	if home, _ := fs.HomeView("UREQ"); !strings.Contains(string(home.JSON), ActionCancel) {
		t.Fatal("the requester's tab does not list their requests")
	}
	a.ag = failingOwn{listed}
	a.publishRound(t.Context(), []string{"UREQ"}, nil)
	home, _ := fs.HomeView("UREQ")
	_, later := a.homes.take()
	if strings.Contains(string(home.JSON), "None of your requests is waiting for approval") || !slices.Contains(later, "UREQ") {
		t.Errorf("a failed read of UREQ's own requests: tab published saying none waits: %v; left for later: %q", strings.Contains(string(home.JSON), "None of your requests"), later)
	}
}

// A round whose look-up of a channel's members fails takes the call again
// in the next round, whose members' tabs may list it still.
func TestHomeRoundWhoseMembersLookupFailedIsMadeAgain(t *testing.T) {
	fs, pc := homeHashWorld(t)
	pc.Approvers = nil // open to anyone in C1
	listed := &listedAgent{}
	listed.list(pc)
	a := homeReplicas(t, fs, listed, 1)[0]
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	a.audience.forget("C1")
	fs.ErrorNext("conversations.members", "internal_error")
	pc.Status = agent.CallDecided
	a.concerned(t.Context(), []agent.Call{pc.Call})
	calls, _ := a.homes.take()
	if len(calls) != 1 || calls[0].ID != pc.ID {
		t.Errorf("after a failed members look-up the round's call is not taken again: %v", calls)
	}
	if users := a.concerned(t.Context(), calls); !slices.Contains(users, "UAPP") {
		t.Errorf("the next round refreshes %q: not UAPP", users)
	}
	a.audience.forget("C1")
	fs.ErrorNext("conversations.members", "channel_not_found")
	a.concerned(t.Context(), []agent.Call{pc.Call})
	if calls, _ := a.homes.take(); len(calls) != 0 {
		t.Errorf("a call of a channel Slack will never list is taken again: %v", calls)
	}
}

// Two calls open to their channels: Slack fails C1's members for a moment
// (internal_error) and refuses C2's for good (channel_not_found). The
// tab, published without C1's call, must be published again.
func TestHomeWithOneCheckThatMayPassIsPublishedAgain(t *testing.T) {
	fs, pc := homeHashWorld(t)
	fs.AddChannel(fakeslack.Channel{ID: "C2", Name: "other", Members: []string{"UREQ", "UAPP", fs.BotUserID()}})
	pc.Approvers = nil
	pc2 := pc
	pc2.ID, pc2.RunID, pc2.Channel = "r2.0", "r2", "C2"
	listed := &listedAgent{}
	listed.list(pc, pc2)
	a := homeReplicas(t, fs, listed, 1)[0]
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	if !listsCall(fs, "UAPP") {
		t.Fatal("the tab does not list the pending call")
	}
	a.audience.forget("")
	fs.ErrorNext("conversations.members", "internal_error")    // C1: passes
	fs.ErrorNext("conversations.members", "channel_not_found") // C2: for good
	a.publishRound(t.Context(), []string{"UAPP"}, nil)
	if _, later := a.homes.take(); !slices.Contains(later, "UAPP") {
		t.Errorf("C1's members failed for a moment, yet no later round publishes UAPP's tab (left for later: %q)", later)
	}
}

// A round whose members look-up failed takes its call again: a newer
// change of that call, noted while the round ran, must not be replaced by
// the round's older copy.
func TestRetakenCallKeepsANewerChange(t *testing.T) {
	fs, pc := homeHashWorld(t)
	pc.Approvers = nil // open to anyone in C1
	listed := &listedAgent{}
	listed.list(pc)
	a := homeReplicas(t, fs, listed, 1)[0]
	a.audience.forget("")
	fs.ErrorNext("conversations.members", "internal_error")
	old := pc.Call
	newer := pc.Call
	newer.Approvers = []string{"UNEW"} // an edit moved it under another rule
	a.homes.changed(newer)             // noted after the round took its calls
	a.concerned(t.Context(), []agent.Call{old})
	calls, _ := a.homes.take()
	if len(calls) != 1 || !slices.Equal(calls[0].Approvers, []string{"UNEW"}) {
		t.Errorf("the next round takes %+v: the newer change (approvers UNEW) was replaced by the round's older copy", calls[0].Approvers)
	}
}
