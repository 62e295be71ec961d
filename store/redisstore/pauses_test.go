package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// The follower of pauses is told each time its subscription is live: first,
// and again once it is back after its connection was killed (announcements
// made meanwhile are not replayed, so the follower recalls what it may
// have missed); it hears announcements again from then on.
func TestFollowPausesIsLiveAgainAfterAReconnection(t *testing.T) {
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	prefix := newPrefix(t, u)
	name := "toolgate-test-" + strings.ReplaceAll(prefix, ":", "-")
	opts.ClientName = name
	s := redisstore.NewFromClient(redis.NewClient(opts), redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	lives := make(chan struct{}, 10)
	heard := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- s.FollowPauses(ctx, func() { lives <- struct{}{} }, func(b []byte) { heard <- string(b) })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("FollowPauses ended with %v, want nil once its context ended", err)
		}
	})
	wait := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case err := <-done:
			t.Fatalf("FollowPauses ended before %s: %v", what, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("not %s within 10s", what)
		}
	}
	wait("live", lives)
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		if !strings.Contains(line, " name="+name+" ") || !strings.Contains(line, " sub=1 ") {
			continue
		}
		var id int64
		if _, err := fmt.Sscanf(line, "id=%d", &id); err != nil {
			t.Fatalf("client list line %q: %v", line, err)
		}
		if err := admin.ClientKillByFilter(ctx, "ID", fmt.Sprint(id)).Err(); err != nil {
			t.Fatal(err)
		}
		killed++
	}
	if killed != 1 {
		t.Fatalf("found %d subscriptions named %s to kill, want 1:\n%s", killed, name, list)
	}
	wait("live again after the connection was killed", lives)
	if err := admin.Publish(ctx, s.PausesChannel(), "after the reconnection").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if got != "after the reconnection" {
			t.Errorf("announcement heard = %q, want the one made after the reconnection", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no announcement heard within 10s of the reconnection")
	}
}

// A conditional approval that is counted publishes its announcement in the
// same step, as a pause does; one that decides the call, or is refused,
// publishes nothing.
func TestCountedApprovalPublishesItsAnnouncement(t *testing.T) {
	u := redisURL(t)
	if _, err := redis.ParseURL(u); err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	ctx := t.Context()
	s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	heard := followPauses(t, s)
	r, c, version := versionedRun(t, s)
	rb := store.ResumeBegin{Conversation: r.Conversation, Lease: store.TurnLease(r.Conversation), Owner: "a", TTL: time.Minute}
	approve := func(who string, judged []string, announce string) error {
		rb := rb
		rb.Announce = []byte(announce)
		fx := store.Effects{Condition: store.Condition{IfRecords: version, IfApprovers: judged}}
		_, _, _, err := s.ApproveBegin(ctx, c.ID, c.Fingerprint, store.Approval{Approver: who, At: time.Now()}, nil, nil, 2, store.Decision{Kind: "approve", Decider: who}, fx, rb)
		return err
	}
	if err := approve("U1", nil, "counted"); err != nil {
		t.Fatal(err)
	}
	if err := approve("U2", []string{"U9"}, "refused"); err == nil {
		t.Fatal("an approval judged with other approvals succeeded")
	}
	if err := approve("U2", []string{"U1"}, "decided"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseLease(ctx, rb.Lease, "a"); err != nil {
		t.Fatal(err)
	}
	// A pause's announcement, published after the approvals, is heard
	// right after the counted one.
	r2, calls2 := testRun()
	r2.Conversation = "C1:" + r2.ID
	if err := s.CommitTurn(ctx, store.Commit{Key: r2.Conversation, Run: &r2, Calls: calls2, Announce: []byte("pause")}); err != nil {
		t.Fatalf("CommitTurn: %v", err)
	}
	for _, want := range []string{"counted", "pause"} {
		select {
		case got := <-heard:
			if got != want {
				t.Fatalf("announcement heard = %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no announcement %q within 10s", want)
		}
	}
}

// versionedRun creates a run of one pending call in its own conversation,
// and returns them with the version of the records.
func versionedRun(t *testing.T, s *redisstore.Store) (store.Run, store.Call, int64) {
	t.Helper()
	_, version, err := s.VersionedRecords(t.Context(), "rules")
	if err != nil || version == 0 {
		t.Fatalf("VersionedRecords = %d, %v; want a version", version, err)
	}
	r, calls := testRun()
	r.Conversation = "C1:" + r.ID
	if err := s.CreateRun(t.Context(), r, calls); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	return r, calls[0], version
}

// A notice reaches every process that follows the notices of the same
// Redis, database and prefix, the one that sent it included, and no other.
func TestNoticeReachesEveryFollowerOfItsPrefix(t *testing.T) {
	for _, tp := range topologies(t) {
		t.Run(tp.name, func(t *testing.T) {
			prefix := newPrefix(t, tp.url)
			a := newStore(t, tp.url, redisstore.Options{Prefix: prefix})
			b := newStore(t, tp.url, redisstore.Options{Prefix: prefix})
			stranger := newStore(t, tp.url, redisstore.Options{Prefix: newPrefix(t, tp.url)})
			ctx, cancel := context.WithCancel(t.Context())
			type heard struct{ who, notice string }
			notices := make(chan heard, 10)
			lives := make(chan struct{}, 10)
			done := make(chan error, 3)
			for who, s := range map[string]*redisstore.Store{"a": a, "b": b, "stranger": stranger} {
				go func() {
					done <- s.FollowNotices(ctx, func() { lives <- struct{}{} }, func(n []byte) { notices <- heard{who, string(n)} })
				}()
			}
			t.Cleanup(func() {
				cancel()
				for range 3 {
					if err := <-done; err != nil {
						t.Errorf("FollowNotices ended with %v, want nil once its context ended", err)
					}
				}
				_ = a.Close()
				_ = b.Close()
				_ = stranger.Close()
			})
			for range 3 {
				select {
				case <-lives:
				case <-time.After(10 * time.Second):
					t.Fatal("the followers were not live within 10s")
				}
			}
			if err := a.Notify(ctx, []byte(`{"left":"C1"}`)); err != nil {
				t.Fatal(err)
			}
			if err := stranger.Notify(ctx, []byte(`{"left":"C2"}`)); err != nil {
				t.Fatal(err)
			}
			got := map[heard]int{}
			for range 3 {
				select {
				case h := <-notices:
					got[h]++
				case <-time.After(10 * time.Second):
					t.Fatalf("heard only %v within 10s", got)
				}
			}
			want := map[heard]int{{"a", `{"left":"C1"}`}: 1, {"b", `{"left":"C1"}`}: 1, {"stranger", `{"left":"C2"}`}: 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("notices heard = %v, want %v", got, want)
			}
		})
	}
}
