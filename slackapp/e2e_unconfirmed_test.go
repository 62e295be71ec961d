package slackapp_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// lostDecisionStore makes the store apply one DecideBegin and lose its
// answer, then stay unreachable for every BeginResume while down is set:
// the click's decision cannot be confirmed in time.
type lostDecisionStore struct {
	fullStore
	lose atomic.Int32
	down atomic.Bool
	// err is what the store answers meanwhile: errOutage when nil.
	err error
}

func (s *lostDecisionStore) failure() error {
	if s.err != nil {
		return s.err
	}
	return errOutage
}

func (s *lostDecisionStore) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, complete, rs, err := s.fullStore.DecideBegin(ctx, id, fp, d, fx, r)
	if err == nil && s.lose.Add(-1) >= 0 {
		s.down.Store(true)
		return store.Call{}, false, store.ResumeStart{}, s.failure()
	}
	return c, complete, rs, err
}

func (s *lostDecisionStore) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if s.down.Load() {
		return store.ResumeStart{}, s.failure()
	}
	return s.fullStore.BeginResume(ctx, runID, r)
}

// A click whose decision the store made but could not confirm in time is
// told so; once the store answers again, what the decision's step took
// (the resume's claim, the approved call's mark) is given back, so the
// sweep's resume runs the call, once, instead of reporting its outcome as
// unknown: the same process resumes it at once (the stalled-resume sweep,
// an hour away here, is not needed). The click is on the card's copy in
// the approver's DM (the approver cannot see the private channel), whose
// decision always begins the resume (see decideFast). A decision the
// store made but whose replicas did not confirm it (REDIS_WAIT_REPLICAS)
// is told so, and carried out the same way once they do.
func TestUnconfirmedClickIsRecoveredOnceTheStoreAnswers(t *testing.T) {
	for _, tt := range []struct {
		name, told string
		err        error
	}{
		{"store unreachable", "could not confirm your decision", nil},
		{"not replicated", "Your decision is recorded, but my state store could not yet confirm it on its replicas", fmt.Errorf("decide: %w", store.ErrNotReplicated)},
	} {
		t.Run(tt.name, func(t *testing.T) { testUnconfirmedClickIsRecovered(t, tt.err, tt.told) })
	}
}

func testUnconfirmedClickIsRecovered(t *testing.T, failure error, tell string) {
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	lost := &lostDecisionStore{err: failure}
	open := e.open
	e.open = func() fullStore {
		lost.fullStore = open()
		return lost
	}
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`)), fakeopenai.Text("deployed after all"))
	ts := e.slack.Mention(private, requester, "deploy")
	e.cardIn(private, ts, "deploy")
	dm := e.slack.DMChannel(approver)
	copied, err := e.slack.WaitMessage(dm, isCard, 10*time.Second)
	if err != nil {
		t.Fatalf("no copy of the card in the approver's DM: %v", err)
	}

	// The turn that paused is over (a decision made while it holds the
	// conversation begins no resume).
	key := e.slack.TeamID() + "/" + private + "/" + ts
	waitUntil(t, "the turn that paused is over", func() bool { return !e.bot.app.Serving(key) })
	lost.lose.Store(1)
	_, err = e.slack.Click(approver, dm, copied.TS, slackapp.ActionApprove, "")
	must(t, err)
	told := func() bool {
		for _, m := range e.slack.Ephemerals(approver) {
			if strings.Contains(m.Text, tell) {
				return true
			}
		}
		for _, m := range e.slack.Messages(dm) {
			if strings.Contains(m.Text, tell) {
				return true
			}
		}
		return false
	}
	waitUntil(t, "the approver told the decision is not confirmed", told)
	if n := e.deploy.Load(); n != 0 {
		t.Fatalf("deploy ran %d times while the store was unreachable", n)
	}

	lost.down.Store(false)
	e.answerIn(private, ts, "deployed after all")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	for _, req := range e.model.Requests() {
		for _, m := range req.Messages {
			if strings.Contains(m.Content, "outcome unknown") {
				t.Errorf("the model was told %q, want the deploy's result", m.Content)
			}
		}
	}
}
