package agent

import (
	"context"
	"errors"
	"log/slog"
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
		_, _ = l.take("T1/C1/1.4", func() (bool, error) { panic("a bug in the store's client") })
	}()
	if ok, err := l.take("T1/C1/1.4", func() (bool, error) { return true, nil }); err != nil || !ok {
		t.Errorf("take after a panic = %v, %v; want the lease taken", ok, err)
	}
}

// A hold taken well before its work started (the store step that took it
// was slow) is renewed at once when its first renewal is already due, not
// ttl/3 after the work started; and a renewal that fails when the hold may
// have run out since it was taken gives the work up at once.
func TestRenewalCountsFromWhenHoldWasTaken(t *testing.T) {
	const ttl = time.Hour // a renewal ttl/3 after the start would take 20 minutes
	renewed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(ctx, ttl, time.Now().Add(-ttl/2), slog.Default(), func(error) { t.Error("a renewed hold was given up") }, func(context.Context) (bool, error) {
			select {
			case renewed <- struct{}{}:
			default:
			}
			return true, nil
		}, "test hold")
	}()
	select {
	case <-renewed:
	case <-time.After(10 * time.Second):
		t.Fatal("a hold taken ttl/2 ago was not renewed at once")
	}
	cancel()
	<-done

	lost := make(chan error, 1)
	go keepRenewed(t.Context(), ttl, time.Now().Add(-ttl*3/4), slog.Default(), func(err error) { lost <- err }, func(context.Context) (bool, error) {
		return false, errors.New("the store is unreachable")
	}, "test hold")
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseLost) {
			t.Errorf("lost with %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a hold taken 3/4 ttl ago whose renewal failed was not given up at once")
	}
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
	if ok, err := l.take(conv, func() (bool, error) {
		return st.AcquireLease(t.Context(), store.TurnLease(conv), "owner", ttl)
	}); err != nil || !ok {
		t.Fatalf("take = %v, %v", ok, err)
	}
	// The step that took it was sent half a TTL ago.
	l.mu.Lock()
	l.held[store.TurnLease(conv)].sent = time.Now().Add(-ttl / 2)
	l.mu.Unlock()
	err := l.runHeld(t.Context(), conv, func(context.Context) error {
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

// A renewal that fails while the hold cannot have run out yet keeps the
// work going: the next renewal is tried, and one that succeeds carries the
// hold on. Only failures for ttl*2/3 since the last renewal give it up.
func TestFailedRenewalWithinTheHoldIsTriedAgain(t *testing.T) {
	// The blip comes at ttl/3; the hold is given up only past ttl*2/3, a
	// margin of half a second for a slow machine.
	const ttl = 1500 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := make(chan int, 10)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(ctx, ttl, time.Now(), slog.Default(), func(err error) { t.Errorf("the hold was given up after one failed renewal: %v", err) }, func(context.Context) (bool, error) {
			n++
			calls <- n
			if n == 1 {
				return false, errors.New("i/o timeout") // a blip
			}
			return true, nil
		}, "test hold")
	}()
	for want := 1; want <= 3; want++ {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("renewal %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("renewal %d never came", want)
		}
	}
	cancel()
	<-done
}

// A renewal the store neither answers nor fails is abandoned when the hold
// must be given up: the work under it is stopped (lost with ErrLeaseLost)
// while the renewal still hangs, before the hold can have run out.
func TestHangingRenewalGivesTheHoldUp(t *testing.T) {
	const ttl = 900 * time.Millisecond
	lost := make(chan error, 1)
	abandoned := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		keepRenewed(t.Context(), ttl, time.Now(), slog.Default(), func(err error) { lost <- err }, func(ctx context.Context) (bool, error) {
			<-ctx.Done() // hangs until abandoned
			close(abandoned)
			return false, ctx.Err()
		}, "test hold")
	}()
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("a hanging renewal was never abandoned")
	}
	select {
	case err := <-lost:
		if !errors.Is(err, ErrLeaseLost) {
			t.Errorf("lost with %v, want ErrLeaseLost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hold was not given up after its renewal hung")
	}
	<-done
}

// A renewal that fails, then a retry that hangs: the hold is given up
// ttl*2/3 after the last good renewal, before it can run out in the store,
// not when the retry has waited as long as a first renewal may.
func TestRetryThatHangsGivesTheHoldUpInTime(t *testing.T) {
	const ttl = 3 * time.Second
	since := time.Now()
	lost := make(chan time.Time, 1)
	var n atomic.Int32
	go keepRenewed(t.Context(), ttl, since, slog.Default(), func(error) { lost <- time.Now() }, func(ctx context.Context) (bool, error) {
		if n.Add(1) == 1 {
			return false, errors.New("i/o timeout")
		}
		<-ctx.Done() // the retry hangs
		return false, ctx.Err()
	}, "test hold")
	select {
	case at := <-lost:
		if n.Load() < 2 {
			t.Errorf("given up after %d renewal(s), want the failed one tried again", n.Load())
		}
		if after := at.Sub(since); after >= ttl {
			t.Errorf("hold given up %v after the last renewal; it lasts %v", after, ttl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never given up")
	}
}

// A late first renewal (the work started late) that hangs is abandoned at
// the hold's end, not a full LEASE_TTL/3 after it was sent.
func TestLateFirstRenewalThatHangsStopsAtTheHoldsEnd(t *testing.T) {
	const ttl = 3 * time.Second
	since := time.Now().Add(-ttl * 9 / 10)
	lost := make(chan time.Time, 1)
	go keepRenewed(t.Context(), ttl, since, slog.Default(), func(error) { lost <- time.Now() }, func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		return false, ctx.Err()
	}, "test hold")
	select {
	case at := <-lost:
		// Sent at 0.9 ttl, it would wait until 1.23 ttl.
		if late := at.Sub(since.Add(ttl)); late > 500*time.Millisecond {
			t.Errorf("work given up %v after the hold ran out", late)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never given up")
	}
}

// A renewal that fails just before LEASE_TTL*2/3 is not retried past it:
// the hold is given up then, not a retry's interval later.
func TestRetryNeverPassesTwoThirds(t *testing.T) {
	const ttl = 3 * time.Second
	since := time.Now()
	lost := make(chan time.Time, 1)
	var n atomic.Int32
	go keepRenewed(t.Context(), ttl, since, slog.Default(), func(error) { lost <- time.Now() }, func(ctx context.Context) (bool, error) {
		if n.Add(1) == 1 { // sent at ttl/3, fails 50ms before 2/3 ttl
			select {
			case <-ctx.Done():
			case <-time.After(ttl/3 - 50*time.Millisecond):
			}
		}
		return false, errors.New("i/o timeout")
	}, "test hold")
	select {
	case at := <-lost:
		// Retried a LEASE_TTL/6 later, it would be given up at 2.45 s.
		if d := at.Sub(since); d > ttl*2/3+300*time.Millisecond {
			t.Errorf("given up %v after the last renewal, want at %v", d, ttl*2/3)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never given up")
	}
}
