package slackapp

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// scriptedNotices is a store whose FollowNotices goes live, hears the
// notices of its script, and goes live again, as after a reconnection;
// each step first runs check with what it is about to do.
type scriptedNotices struct {
	Store
	steps []string
	check func(step string)
}

func (s scriptedNotices) Notify(context.Context, []byte) error { return nil }

func (s scriptedNotices) FollowNotices(_ context.Context, live func(), fn func([]byte)) error {
	for _, step := range s.steps {
		s.check(step)
		if step == "live" {
			live()
		} else {
			fn([]byte(step))
		}
	}
	s.check("end")
	return nil
}

// A notice drops the members it names; the subscription coming back after
// a reconnection, when notices may have been missed, drops every member
// kept; the first time it is live drops nothing.
func TestNoticesDropTheMembersKept(t *testing.T) {
	a := &App{
		audience: newAudienceCache(nil, time.Minute),
		groups:   newGroupCache(nil, time.Minute),
		log:      slog.New(slog.DiscardHandler),
	}
	keep := func() {
		now := time.Now()
		for _, ch := range []string{"C1", "C2"} {
			a.audience.members[ch] = memberEntry{members: map[string]bool{"U1": true}, at: now}
		}
		for _, g := range []string{"S1", "S2"} {
			a.groups.entries[g] = groupEntry{members: []string{"U1"}, at: now}
		}
	}
	kept := func() (channels, groups int) { return len(a.audience.members), len(a.groups.entries) }
	keep()
	want := map[string][2]int{
		// before each step: channels and groups kept
		"live":           {2, 2},
		`{"left":"C1"}`:  {2, 2},
		`{"group":"S2"}`: {1, 2},
		`not a notice`:   {1, 1},
		"end":            {0, 0},
	}
	seen := 0
	a.st = scriptedNotices{
		steps: []string{"live", `{"left":"C1"}`, `{"group":"S2"}`, `not a notice`, "live", "end"},
		check: func(step string) {
			seen++
			if step == "live" && seen > 1 {
				if c, g := kept(); c != 1 || g != 1 {
					t.Errorf("before the reconnection: %d channels and %d groups kept, want 1 and 1", c, g)
				}
				return
			}
			if w, ok := want[step]; ok {
				if c, g := kept(); c != w[0] || g != w[1] {
					t.Errorf("before %s: %d channels and %d groups kept, want %d and %d", step, c, g, w[0], w[1])
				}
			}
		},
	}
	a.followNotices(t.Context())
	if seen != 7 {
		t.Errorf("%d steps checked, want 7", seen)
	}
}
