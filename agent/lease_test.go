package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
)

// holdLease holds the lease on conversation through l until release is
// closed; it returns once the lease is held, and a channel that receives
// run's result.
func holdLease(t *testing.T, l *leases, conversation string, release <-chan struct{}) <-chan error {
	t.Helper()
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- l.run(t.Context(), conversation, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("the first holder did not get the lease: %v", err)
	}
	return done
}

// A waiter learns of a release at once, not at its next re-check (an hour
// away here): from the same process directly, from another process through
// the store's announcements.
func TestLeaseWaiterWakesOnRelease(t *testing.T) {
	const ttl = 3 * time.Hour // re-checks every hour
	for _, k := range teststore.Kinds(t) {
		for _, remote := range []bool{false, true} {
			name := k.Name + "/same-process"
			if remote {
				if k.Name == "bolt" {
					continue // the embedded store serves one process
				}
				name = k.Name + "/other-process"
			}
			t.Run(name, func(t *testing.T) {
				st := k.Open(t)()
				watcher, ok := any(st).(LeaseWatcher)
				if remote && !ok {
					t.Fatalf("the %s store does not announce lease releases", k.Name)
				}
				holder := newLeases(st, "holder", ttl, time.Hour, slog.Default())
				waiter := holder
				if remote {
					waiter = newLeases(st, "waiter", ttl, time.Hour, slog.Default())
					waiter.watcher = watcher
				}
				conversation := "T1/C1/" + t.Name()
				release := make(chan struct{})
				held := holdLease(t, holder, conversation, release)

				got := make(chan error, 1)
				go func() {
					got <- waiter.run(t.Context(), conversation, func(context.Context) error { return nil })
				}()
				for waiter.waiting.Load() == 0 {
					select {
					case err := <-got:
						t.Fatalf("the waiter ended while the lease was held: %v", err)
					case <-time.After(time.Millisecond):
					}
				}
				close(release)
				if err := <-held; err != nil {
					t.Fatalf("holder: %v", err)
				}
				select {
				case err := <-got:
					if err != nil {
						t.Fatalf("waiter: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the waiter did not learn of the release")
				}
			})
		}
	}
}

// A waiter gives up after the lease wait with ErrLeaseTimeout.
func TestLeaseWaitTimesOut(t *testing.T) {
	st := teststore.Kinds(t)[0].Open(t)()
	holder := newLeases(st, "holder", time.Hour, time.Hour, slog.Default())
	release := make(chan struct{})
	held := holdLease(t, holder, "T1/C1/1.2", release)
	waiter := newLeases(st, "waiter", time.Hour, 10*time.Millisecond, slog.Default())
	err := waiter.run(t.Context(), "T1/C1/1.2", func(context.Context) error {
		t.Error("ran without the lease")
		return nil
	})
	if !errors.Is(err, ErrLeaseTimeout) {
		t.Errorf("run on a held lease = %v, want ErrLeaseTimeout", err)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
}

// askingStore holds the first AcquireLease until answer is closed,
// closing asking when it arrives.
type askingStore struct {
	leaseStore
	once           sync.Once
	asking, answer chan struct{}
}

func (s *askingStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.asking)
		<-s.answer
	}
	return s.leaseStore.AcquireLease(ctx, key, owner, ttl)
}

// A process whose turn is still asking the store for a conversation's
// lease does not hold it (another process may), so AwaitTurn must not take
// the end of that ask for the end of the holder's turn: heldHere reports a
// hold only once the store gave the lease, until it is released.
func TestHeldHereOnlyOnceTheLeaseIsTaken(t *testing.T) {
	st := teststore.Kinds(t)[0].Open(t)()
	const conversation = "T1/C1/1.2"
	holder := newLeases(st, "holder", time.Hour, time.Hour, slog.Default())
	release := make(chan struct{})
	held := holdLease(t, holder, conversation, release)

	ask := &askingStore{leaseStore: st, asking: make(chan struct{}), answer: make(chan struct{})}
	// Re-checks every 100ms: the wrapper announces no releases.
	waiter := newLeases(ask, "waiter", 300*time.Millisecond, time.Minute, slog.Default())
	inside := make(chan bool, 1)
	got := make(chan error, 1)
	go func() {
		got <- waiter.run(t.Context(), conversation, func(context.Context) error {
			inside <- waiter.heldHere(conversation) != nil
			return nil
		})
	}()
	<-ask.asking
	if waiter.heldHere(conversation) != nil {
		t.Error("heldHere reports a hold while the process is still asking the store for the lease, which another holds")
	}
	close(ask.answer)
	close(release)
	if err := <-held; err != nil {
		t.Fatalf("holder: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if !<-inside {
		t.Error("heldHere reports no hold while the process holds the lease")
	}
	if waiter.heldHere(conversation) != nil {
		t.Error("heldHere reports a hold after the lease was released")
	}
}

// panickyStore panics on the first AcquireLease, as a bug in the store's
// client would.
type panickyStore struct {
	leaseStore
	once sync.Once
}

func (s *panickyStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	s.once.Do(func() { panic("a bug in the store's client") })
	return s.leaseStore.AcquireLease(ctx, key, owner, ttl)
}

// A panic while the store is asked for a lease lets this process's claim
// on the conversation go: the next turn of the conversation takes the
// lease at once instead of waiting for a turn that will never end. So does
// a panic in take's store step.
func TestPanicWhileTakingLeaseLetsClaimGo(t *testing.T) {
	st := teststore.Kinds(t)[0].Open(t)()
	l := newLeases(&panickyStore{leaseStore: st}, "owner", time.Hour, 10*time.Millisecond, slog.Default())
	func() {
		defer func() { _ = recover() }()
		_ = l.run(t.Context(), "T1/C1/1.3", func(context.Context) error { return nil })
		t.Error("the store's panic did not reach the caller")
	}()
	ran := false
	if err := l.run(t.Context(), "T1/C1/1.3", func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("run after a panic = %v, ran %v; want the lease taken at once", err, ran)
	}
	func() {
		defer func() { _ = recover() }()
		_, _, _ = l.take("T1/C1/1.4", func(string) (bool, error) { panic("a bug in the store's client") })
	}()
	if _, ok, err := l.take("T1/C1/1.4", func(string) (bool, error) { return true, nil }); err != nil || !ok {
		t.Errorf("take after a panic = %v, %v; want the lease taken", ok, err)
	}
}

// A hold taken well before its work started (the store step that took it
// was slow) is renewed at once when its first renewal is already due, not
// ttl/3 after the work started; and a renewal that fails when the hold may
// have run out since it was taken gives the work up at once.
func TestRenewalCountsFromWhenHoldWasTaken(t *testing.T) {
	const ttl = time.Hour // a renewal ttl/3 after the start would come at 50m
	ctx, cancel := context.WithCancel(t.Context())
	clk := newStepClock(ttl / 2)
	renewOn(ctx, clk, ttl, func(context.Context, int) (bool, error) { return true, nil })
	clk.expect(t, "wait 20m0s", "deadline 40m0s", "renew 30m0s", "wait 50m0s")
	cancel()
	clk.expect(t, "returned")

	clk = newStepClock(ttl * 3 / 4)
	renewOn(t.Context(), clk, ttl, func(context.Context, int) (bool, error) {
		return false, errors.New("the store is unreachable")
	})
	clk.expect(t, "wait 20m0s", "deadline 1h0m0s", "renew 45m0s", "lost 45m0s", "returned")
}

// renewSignal reports each RenewLease.
type renewSignal struct {
	leaseStore
	renewed chan struct{}
}

func (s *renewSignal) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	select {
	case s.renewed <- struct{}{}:
	default:
	}
	return s.leaseStore.RenewLease(ctx, key, owner, ttl)
}

// A turn that runs under a lease taken by a slow store step (AcceptBegin)
// renews it counting from when that step was sent.
func TestRunHeldRenewsFromTake(t *testing.T) {
	st := teststore.Kinds(t)[0].Open(t)()
	s := &renewSignal{leaseStore: st, renewed: make(chan struct{}, 1)}
	const ttl = time.Hour
	l := newLeases(s, "owner", ttl, time.Minute, slog.Default())
	conv := "T1/C1/1.5"
	holder, ok, err := l.take(conv, func(holder string) (bool, error) {
		return st.AcquireLease(t.Context(), store.TurnLease(conv), holder, ttl)
	})
	if err != nil || !ok {
		t.Fatalf("take = %v, %v", ok, err)
	}
	// The step that took it was sent half a TTL ago.
	l.mu.Lock()
	l.held[store.TurnLease(conv)].sent = time.Now().Add(-ttl / 2)
	l.mu.Unlock()
	err = l.runHeld(t.Context(), conv, holder, func(context.Context) error {
		select {
		case <-s.renewed:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("the lease, taken half a TTL ago, was not renewed at once")
		}
	})
	if err != nil {
		t.Error(err)
	}
}

// stepClock is a clock that stands still until the test moves it (set),
// for tests of keepRenewed's schedule. What keepRenewed asks of it, each
// wait and each renewal's deadline, is an event, and so are the renewals,
// the loss and the return of keepRenewed run by renewOn: one sequence in
// the order they happen, with times given since the hold was taken.
type stepClock struct {
	taken  time.Time
	events chan string

	mu     sync.Mutex
	now    time.Time
	timers []stepTimer
}

type stepTimer struct {
	at   time.Time
	fire func()
}

// newStepClock returns a clock that reads now after the hold was taken.
func newStepClock(now time.Duration) *stepClock {
	taken := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	return &stepClock{taken: taken, now: taken.Add(now), events: make(chan string, 100)}
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// since is how long after the hold was taken tm is.
func (c *stepClock) since(tm time.Time) time.Duration { return tm.Sub(c.taken) }

func (c *stepClock) note(format string, args ...any) { c.events <- fmt.Sprintf(format, args...) }

func (c *stepClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	at := c.Now().Add(d)
	c.note("wait %v", c.since(at))
	c.at(at, func() { ch <- at })
	return ch
}

func (c *stepClock) WithDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	c.note("deadline %v", c.since(d))
	c.at(d, func() { cancel(context.DeadlineExceeded) })
	return ctx, func() { cancel(context.Canceled) }
}

// at runs fire when the clock reaches tm, at once if it has.
func (c *stepClock) at(tm time.Time, fire func()) {
	c.mu.Lock()
	if tm.After(c.now) {
		c.timers = append(c.timers, stepTimer{at: tm, fire: fire})
		fire = nil
	}
	c.mu.Unlock()
	if fire != nil {
		fire()
	}
}

// set moves the clock to at after the hold was taken, and fires what is
// due by then.
func (c *stepClock) set(at time.Duration) {
	c.mu.Lock()
	c.now = c.taken.Add(at)
	var due []func()
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
		} else {
			due = append(due, tm.fire)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, fire := range due {
		fire()
	}
}

// expect checks that the next events are want.
func (c *stepClock) expect(t *testing.T, want ...string) {
	t.Helper()
	var got []string
	for len(got) < len(want) {
		select {
		case e := <-c.events:
			got = append(got, e)
		case <-time.After(10 * time.Second):
			t.Fatalf("events %q, then none; want %q", got, want)
		}
		if !slices.Equal(got, want[:len(got)]) {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

// renewOn runs keepRenewed on clk, for a hold of ttl taken at clk's
// start, until ctx ends; renew answers the nth renewal. A hold lost with
// ErrLeaseLost is the event "lost <when>".
func renewOn(ctx context.Context, clk *stepClock, ttl time.Duration, renew func(ctx context.Context, n int) (bool, error)) {
	n := 0
	go func() {
		keepRenewed(ctx, clk, ttl, clk.taken, slog.Default(), func(err error) {
			if !errors.Is(err, ErrLeaseLost) {
				clk.note("lost %v with %v, not ErrLeaseLost", clk.since(clk.Now()), err)
				return
			}
			clk.note("lost %v", clk.since(clk.Now()))
		}, func(ctx context.Context) (bool, error) {
			n++
			clk.note("renew %v", clk.since(clk.Now()))
			return renew(ctx, n)
		}, "test hold")
		clk.note("returned")
	}()
}

// hang is a renewal the store neither answers nor fails: it ends when
// keepRenewed abandons it, an event.
func hang(ctx context.Context, clk *stepClock) (bool, error) {
	<-ctx.Done()
	clk.note("abandoned %v", clk.since(clk.Now()))
	return false, ctx.Err()
}

var errBlip = errors.New("i/o timeout")

// A renewal that fails while the hold cannot have run out yet keeps the
// work going: it is tried again ttl/6 later, and one that succeeds carries
// the hold on. Only failures for ttl*2/3 since the last renewal give it up.
func TestFailedRenewalWithinTheHoldIsTriedAgain(t *testing.T) {
	const ttl = 3 * time.Second
	ctx, cancel := context.WithCancel(t.Context())
	clk := newStepClock(0)
	renewOn(ctx, clk, ttl, func(_ context.Context, n int) (bool, error) {
		if n == 1 {
			return false, errBlip
		}
		return true, nil
	})
	clk.expect(t, "wait 1s")
	clk.set(time.Second)
	clk.expect(t, "deadline 2s", "renew 1s", "wait 1.5s")
	clk.set(1500 * time.Millisecond)
	clk.expect(t, "deadline 2s", "renew 1.5s", "wait 2.5s")
	clk.set(2500 * time.Millisecond)
	clk.expect(t, "deadline 3.5s", "renew 2.5s", "wait 3.5s")
	cancel()
	clk.expect(t, "returned")
}

// A renewal the store neither answers nor fails is abandoned when the hold
// must be given up, ttl*2/3 after it was taken: the work under it is
// stopped (lost with ErrLeaseLost) before the hold can have run out.
func TestHangingRenewalGivesTheHoldUp(t *testing.T) {
	const ttl = 900 * time.Millisecond
	clk := newStepClock(0)
	renewOn(t.Context(), clk, ttl, func(ctx context.Context, _ int) (bool, error) { return hang(ctx, clk) })
	clk.expect(t, "wait 300ms")
	clk.set(300 * time.Millisecond)
	clk.expect(t, "deadline 600ms", "renew 300ms")
	clk.set(600 * time.Millisecond)
	clk.expect(t, "abandoned 600ms", "lost 600ms", "returned")
}

// A renewal that fails, then a retry that hangs: the hold is given up
// ttl*2/3 after the last good renewal, before it can run out in the store,
// not when the retry has waited as long as a first renewal may.
func TestRetryThatHangsGivesTheHoldUpInTime(t *testing.T) {
	const ttl = 3 * time.Second
	clk := newStepClock(0)
	renewOn(t.Context(), clk, ttl, func(ctx context.Context, n int) (bool, error) {
		if n == 1 {
			return false, errBlip
		}
		return hang(ctx, clk)
	})
	clk.expect(t, "wait 1s")
	clk.set(time.Second)
	clk.expect(t, "deadline 2s", "renew 1s", "wait 1.5s")
	clk.set(1500 * time.Millisecond)
	clk.expect(t, "deadline 2s", "renew 1.5s")
	clk.set(2 * time.Second)
	clk.expect(t, "abandoned 2s", "lost 2s", "returned")
}

// A late first renewal (the work started late) that hangs is abandoned at
// the hold's end, not a full LEASE_TTL/3 after it was sent.
func TestLateFirstRenewalThatHangsStopsAtTheHoldsEnd(t *testing.T) {
	const ttl = 3 * time.Second
	clk := newStepClock(ttl * 9 / 10)
	renewOn(t.Context(), clk, ttl, func(ctx context.Context, _ int) (bool, error) { return hang(ctx, clk) })
	// Due at ttl/3, long past: sent at once, and waited for until the
	// hold's end, not until 3.7s.
	clk.expect(t, "wait 1s", "deadline 3s", "renew 2.7s")
	clk.set(ttl)
	clk.expect(t, "abandoned 3s", "lost 3s", "returned")
}

// A renewal that fails just before LEASE_TTL*2/3 is not retried past it:
// the hold is given up then, not a retry's interval later.
func TestRetryNeverPassesTwoThirds(t *testing.T) {
	const ttl = 3 * time.Second
	clk := newStepClock(0)
	renewOn(t.Context(), clk, ttl, func(context.Context, int) (bool, error) {
		clk.set(1950 * time.Millisecond) // it takes the store until 50ms before 2s
		return false, errBlip
	})
	clk.expect(t, "wait 1s")
	clk.set(time.Second)
	clk.expect(t, "deadline 2s", "renew 1s", "wait 2s")
	clk.set(2 * time.Second)
	clk.expect(t, "lost 2s", "returned")
}

// hangingWatcher is a store whose lease watches never start: WatchLease
// waits until its context ends (a Redis whose subscriptions go
// unanswered), telling watching when it is called.
type hangingWatcher struct {
	leaseStore
	watching chan struct{}
	calls    atomic.Int64
}

func (s *hangingWatcher) WatchLease(ctx context.Context, key string) (store.LeaseWatch, error) {
	s.calls.Add(1)
	select {
	case s.watching <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A waiter whose subscription to releases does not start waits for it no
// longer than a re-check would, then re-checks the lease every ttl/3: a
// lease released meanwhile (its announcement unheard) is taken, not
// waited for until the lease wait runs out. The subscription is tried
// once per wait.
func TestWaiterWhoseWatchHangsStillTakesTheLease(t *testing.T) {
	st := teststore.Kinds(t)[0].Open(t)()
	const conv = "T1/C1/1.7"
	key := store.TurnLease(conv)
	if ok, err := st.AcquireLease(t.Context(), key, "another-process", time.Hour); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	s := &hangingWatcher{leaseStore: st, watching: make(chan struct{}, 1)}
	l := newLeases(s, "waiter", 300*time.Millisecond, time.Hour, slog.Default())
	ran := make(chan error, 1)
	go func() {
		ran <- l.run(context.Background(), conv, func(context.Context) error { return nil })
	}()
	<-s.watching
	if err := st.ReleaseLease(t.Context(), key, "another-process"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("run = %v, want the lease taken once it was released", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiter did not take the released lease within 30s (a re-check is due every 100ms; its lease wait is an hour)")
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("WatchLease called %d times in one wait, want once", n)
	}
}
