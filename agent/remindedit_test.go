package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// remindEditPolicy asks two approvers for a restart, reminding them 150m
// after it paused and again with a quarter of its 4h left; edited into
// prod, the call waits no longer than the prod rule's ttl (%s).
const remindEditPolicy = `
policy:
  rules:
    - {id: prod, tool: restart, when: 'args.env == "prod"', verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2, ttl: %s, remind_after: 150m}
    - {id: staging, tool: restart, verdict: ask, approvers: [UONE000001, UTWO000002], min_approvals: 2, ttl: 4h, remind_after: 150m}
`

// expiryLoop runs expiry passes as the edge's timer does, and checks what
// they send and the deadlines they return.
type expiryLoop struct {
	t     *testing.T
	w     *world
	a     *agent.Agent
	rep   *reminded
	start time.Time
	sent  map[string]time.Duration // reminder -> when it was sent, from start
}

func newExpiryLoop(t *testing.T, w *world, a *agent.Agent, rep *reminded) *expiryLoop {
	return &expiryLoop{t: t, w: w, a: a, rep: rep, start: w.clock(), sent: map[string]time.Duration{}}
}

// pass runs one expiry pass: it fails the test if the pass returns a next
// deadline that is not after now (the timer would run the next pass at
// once, and again, until something else changes) or sends a reminder
// sent before.
func (l *expiryLoop) pass() time.Time {
	l.t.Helper()
	next, err := l.a.Expire(context.Background(), func(string, string) {})
	must(l.t, err)
	now := l.w.clock()
	if !next.IsZero() && !next.After(now) {
		l.t.Fatalf("Expire at %v: next deadline %v, want one after now (or none)", now.Sub(l.start), next.Sub(l.start))
	}
	for _, s := range l.rep.take() {
		if at, ok := l.sent[s]; ok {
			l.t.Errorf("reminder %s sent again at %v, first at %v", s, now.Sub(l.start), at)
			continue
		}
		l.sent[s] = now.Sub(l.start)
	}
	return next
}

// at moves the clock to d after start.
func (l *expiryLoop) at(d time.Duration) { l.w.advance(l.start.Add(d).Sub(l.w.clock())) }

// until runs passes as the timer would, each at the deadline the last
// one returned (and at least every 10m, as the timer wakes up at the
// sweep interval), until d after start.
func (l *expiryLoop) until(d time.Duration) {
	l.t.Helper()
	end := l.start.Add(d)
	for i := 0; ; i++ {
		if i == 100 {
			l.t.Fatalf("expiry passes still running at %v", l.w.clock().Sub(l.start))
		}
		next := l.pass()
		now := l.w.clock()
		if !now.Before(end) {
			return
		}
		step := now.Add(10 * time.Minute)
		if end.Before(step) {
			step = end
		}
		if !next.IsZero() && next.Before(step) {
			step = next
		}
		l.w.advance(step.Sub(now))
	}
}

// wantSent fails the test unless exactly the reminders of want (reminder
// number -> when it was sent, from start) were sent for id.
func (l *expiryLoop) wantSent(id string, want map[int]time.Duration) {
	l.t.Helper()
	wantS := map[string]time.Duration{}
	for n, at := range want {
		wantS[fmt.Sprintf("%s #%d", id, n)] = at
	}
	if fmt.Sprint(l.sent) != fmt.Sprint(wantS) {
		l.t.Errorf("reminders sent (at, from the pause) %v, want %v", l.sent, wantS)
	}
}

// An edit that brings a call's deadline forward brings its reminders with
// it: once the first reminder is sent, the next one is the one due under
// the new deadline, or none. Every expiry pass returns a next deadline
// after now (the timer never spins on a reminder that is already sent),
// no reminder is sent twice, and one due under the new deadline is sent
// then.
func TestEditEarlierDeadlineMovesTheReminders(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		ttl  string // the prod rule's
		// want are the reminders sent, by number, at their time from
		// the pause: the first at 2h30 (the quarter left of 4h, 3h,
		// was still to come when the edit came at 2h36).
		want     map[int]time.Duration
		deadline time.Duration // from the pause
	}{
		// The deadline moves to 3h06: a quarter of it left comes
		// before the first reminder, so none is left to send.
		{"none left", "30m", map[int]time.Duration{1: 150 * time.Minute}, 186 * time.Minute},
		// The deadline moves to 3h36: a quarter of it is left at
		// 2h42, before the 3h of the first deadline.
		{"the second sooner", "60m", map[int]time.Duration{1: 150 * time.Minute, 2: 162 * time.Minute}, 216 * time.Minute},
	}
	for _, tt := range tests {
		for _, b := range backends(t) {
			t.Run(tt.name+"/"+b.name, func(t *testing.T) {
				w := newWorld(t, b)
				w.policy = fmt.Sprintf(remindEditPolicy, tt.ttl)
				rep := &reminded{recorder: w.rec}
				a := w.agentWith(w.store, rep)
				p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
				l := newExpiryLoop(t, w, a, rep)
				if want := []time.Time{l.start.Add(150 * time.Minute), l.start.Add(3 * time.Hour)}; fmt.Sprint(p.RemindAt) != fmt.Sprint(want) {
					t.Fatalf("the call is reminded at %v, want %v", p.RemindAt, want)
				}
				l.until(150 * time.Minute)
				l.wantSent(p.ID, map[int]time.Duration{1: 150 * time.Minute})

				l.at(156 * time.Minute)
				res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
				if err != nil || res.Call.Status != agent.CallPending {
					t.Fatalf("the edit to prod: %+v, %v; want it pending", res.Call, err)
				}
				if want := l.start.Add(tt.deadline); !res.Call.ExpiresAt.Equal(want) {
					t.Fatalf("the edited call expires at %v, want %v", res.Call.ExpiresAt, want)
				}

				l.until(tt.deadline + time.Minute)
				l.wantSent(p.ID, tt.want)
				if c, err := w.store.(storetest.Store).GetCall(ctx, p.ID); err != nil || c.Status != store.Expired {
					t.Errorf("after the edited deadline the call is %s, %v; want expired", c.Status, err)
				}
			})
		}
	}
}

// claimHook is a store that runs a function once, before the first
// reminder claim it passes on.
type claimHook struct {
	agent.Store
	once   sync.Once
	before func()
}

func (s *claimHook) ClaimReminder(ctx context.Context, id string, n int, next time.Time) (bool, error) {
	s.once.Do(s.before)
	return s.Store.ClaimReminder(ctx, id, n, next)
}

// An edit that brings the deadline forward between an expiry pass's
// reading of a due reminder and its claim leaves the call with the next
// reminder that pass worked out from the first deadline, which the new
// deadline no longer has: the passes after it send nothing more and never
// return a past deadline.
func TestReminderClaimedAcrossAnEdit(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = fmt.Sprintf(remindEditPolicy, "40m")
			rep := &reminded{recorder: w.rec}
			other := w.agent() // another replica, where the edit is made
			st := &claimHook{Store: w.store}
			a := w.agentWith(st, rep)
			p := pauseOne(t, w, a, call("c1", "restart", `{"env":"staging"}`))
			l := newExpiryLoop(t, w, a, rep)
			st.before = func() {
				res, err := other.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Edit, Decider: "UONE000001", Args: json.RawMessage(`{"env":"prod"}`)})
				if err != nil || res.Call.Status != agent.CallPending {
					t.Errorf("the edit to prod: %+v, %v; want it pending", res.Call, err)
				}
			}
			// The edit at 2h30 moves the deadline to 3h10, when a
			// quarter of it is left at 2h22.5: the first reminder is
			// the last, but the claim moves the call to 3h.
			l.until(190*time.Minute + time.Minute)
			l.wantSent(p.ID, map[int]time.Duration{1: 150 * time.Minute})
			if c, err := w.store.(storetest.Store).GetCall(ctx, p.ID); err != nil || c.Status != store.Expired {
				t.Errorf("after the edited deadline the call is %s, %v; want expired", c.Status, err)
			}
		})
	}
}

// A call the reminder index lists before its first reminder is due (its
// reminder time is not one of its own) is not reminded early, and the
// passes meanwhile return a deadline after now; its reminders come at
// their own times.
func TestReminderListedBeforeItsTime(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			rep := &reminded{recorder: w.rec}
			a := w.agentWith(w.store, rep)
			l := newExpiryLoop(t, w, a, rep)
			r := store.Run{ID: store.NewRunID(), Conversation: request("").Conversation, Requester: "UREQUESTER", Channel: "C1",
				State: json.RawMessage(`{}`), CreatedAt: l.start}
			c := store.Call{ID: store.CallID(r.ID, 0), ToolCallID: "c1", Tool: "restart", Args: json.RawMessage(`{"env":"qa"}`), Fingerprint: "fp",
				Approvers: []string{"UONE000001"}, CreatedAt: l.start, ExpiresAt: l.start.Add(4 * time.Hour),
				RemindAfter: 2 * time.Hour, RemindAt: l.start.Add(time.Hour)}
			must(t, w.store.(storetest.Store).CreateRun(ctx, r, []store.Call{c}))
			l.until(4*time.Hour + time.Minute)
			l.wantSent(c.ID, map[int]time.Duration{1: 2 * time.Hour, 2: 3 * time.Hour})
		})
	}
}
