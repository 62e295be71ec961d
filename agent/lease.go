package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/store"
)

// LeaseWatcher is offered by stores shared by several processes (Redis): it
// announces lease releases, so a waiter in another process learns of one
// at once. Without it, waiters in other processes re-check every LeaseTTL/3.
type LeaseWatcher interface {
	WatchLease(ctx context.Context, key string) (store.LeaseWatch, error)
}

// leases serialises work on conversations across goroutines and processes:
// one holder per conversation at a time, with a lease in the store that the
// holder renews, and that lapses if the holder dies.
//
// A waiter learns that a lease it waits for was released at once: from
// this process directly (a channel per held key, closed on release), from
// other processes through the store's LeaseWatcher when it has one. In
// case a release is missed (the holder died, or an announcement was lost)
// the waiter re-checks every ttl/3.
type leases struct {
	store   leaseStore
	watcher LeaseWatcher // nil if the store has none
	owner   string
	// holds numbers this process's holds (see newHolder).
	holds atomic.Uint64
	ttl   time.Duration
	wait  time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// held has an entry per key this process claims: from before it asks
	// the store for the lease until it releases it (or the store refused
	// it).
	held map[string]*leaseClaim
	// waiting counts the waits in progress.
	waiting atomic.Int64
}

// leaseClaim is a key this process claims: done is closed when the claim
// ends; taken is set once the store gave the lease (a claim whose turn is
// still asking the store for it holds nothing yet).
type leaseClaim struct {
	done  chan struct{}
	taken bool
	// sent is when the request that took the lease was sent: the lease
	// lasts ttl from no earlier than that.
	sent time.Time
	// holder names the claim in the store (see newHolder).
	holder string
}

// newHolder returns a name for one hold of this process, for the store to
// tell holders apart by: the process's owner and a number of its own. A
// request of an earlier hold that the store executes late (a release or
// commit a client sent again after a time-out while the first copy was
// still on its way) then matches no later hold of this process on the same
// key, and cannot free a lease another turn holds now.
func (l *leases) newHolder() string {
	return l.owner + "#" + strconv.FormatUint(l.holds.Add(1), 10)
}

// leaseStore is what leases needs of the store: the leases, and BeginTurn,
// which takes one and reads what a turn starts from.
type leaseStore interface {
	Leases
	BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error)
}

func newLeases(st leaseStore, owner string, ttl, wait time.Duration, log *slog.Logger) *leases {
	l := &leases{store: st, owner: owner, ttl: ttl, wait: wait, log: log, held: map[string]*leaseClaim{}}
	l.watcher, _ = st.(LeaseWatcher)
	return l
}

// run runs fn while holding the lease on the conversation. It waits for
// another holder up to the lease wait (then ErrLeaseTimeout), renews the
// lease every ttl/3 while fn runs, and cancels fn's context with
// ErrLeaseLost as its cause if the lease is taken or cannot be renewed in
// time; then fn's error is joined with ErrLeaseLost. The lease is released
// when fn returns, even if ctx has ended.
func (l *leases) run(ctx context.Context, conversation string, fn func(ctx context.Context) error) error {
	return l.runWaiting(ctx, conversation, true, l.acquireLease(conversation), fn)
}

// runTaking is run with take in place of the store's AcquireLease: take
// takes the lease on key for holder (as AcquireLease does) together with
// other work, atomically, and reports held false if another process holds
// it. An error of take ends the wait and is returned (wrapped), fn unrun.
func (l *leases) runTaking(ctx context.Context, conversation string, take func(ctx context.Context, key, holder string) (held bool, err error), fn func(ctx context.Context) error) error {
	key := store.TurnLease(conversation)
	return l.runWaiting(ctx, conversation, true, func(ctx context.Context, holder string) (bool, error) { return take(ctx, key, holder) }, fn)
}

// turn is run for a turn: the lease is taken with BeginTurn, with the
// records of kinds, and fn gets what it read. Without wait, if the
// conversation is held, it returns errBusy at once and fn does not run.
func (l *leases) turn(ctx context.Context, conversation string, wait bool, kinds []string, fn func(ctx context.Context, b store.Begun) error) error {
	var b store.Begun
	take := func(ctx context.Context, holder string) (bool, error) {
		var err error
		b, err = l.store.BeginTurn(ctx, conversation, holder, l.ttl, kinds...)
		return b.Acquired, err
	}
	return l.runWaiting(ctx, conversation, wait, take, func(ctx context.Context) error { return fn(ctx, b) })
}

// acquireLease returns the taker of the conversation's lease that only
// takes it.
func (l *leases) acquireLease(conversation string) func(ctx context.Context, holder string) (bool, error) {
	return func(ctx context.Context, holder string) (bool, error) {
		return l.store.AcquireLease(ctx, store.TurnLease(conversation), holder, l.ttl)
	}
}

// errBusy is returned by turn without wait when another turn, of this
// process or another, holds the conversation.
var errBusy = errors.New("conversation is busy")

// hold is a lease held by this process while fn runs; fn finds it in its
// context (holdOf) to release the lease with its last write.
type hold struct {
	conversation string
	// holder names the hold in the store (see newHolder).
	holder   string
	stopOnce sync.Once
	stop     func()
	// lose ends the work with a cause, as the renewer does when it finds
	// the lease lost (a write the store refused finds it first).
	lose func(error)
	// released is set once the lease was released by the holder's last
	// write; release then only wakes this process's waiters.
	released bool
	// confirmed is when the lease was last taken or renewed.
	confirmed confirmation
}

// confirmation is when a hold in the store (a conversation's lease, a
// resume claim) was last taken or renewed: by the request sent at the
// latest time given to confirm, base at first. The hold is this process's
// for its TTL from then at least.
type confirmation struct {
	base time.Time
	// at is the nanoseconds after base of the latest confirmation.
	at atomic.Int64
}

// holdClock is the clock of confirmations (see confirmation.age): the
// wall clock, with its monotonic reading, but in tests of a stall.
var holdClock = time.Now

// confirm records that a request sent at sent took or renewed the hold.
func (c *confirmation) confirm(sent time.Time) {
	d := int64(sent.Sub(c.base))
	for {
		old := c.at.Load()
		if d <= old || c.at.CompareAndSwap(old, d) {
			return
		}
	}
}

// age is how long ago the hold was last confirmed.
func (c *confirmation) age() time.Duration {
	return holdClock().Sub(c.base) - time.Duration(c.at.Load())
}

type holdKey struct{}

// holdOf returns the hold on conversation that ctx runs under, or nil.
func holdOf(ctx context.Context, conversation string) *hold {
	h, _ := ctx.Value(holdKey{}).(*hold)
	if h == nil || h.conversation != conversation {
		return nil
	}
	return h
}

// stopRenewing stops renewing the lease (and waits for the renewer), so
// that a write may release it: nothing may renew it afterwards.
func (h *hold) stopRenewing() { h.stopOnce.Do(h.stop) }

func (l *leases) runWaiting(ctx context.Context, conversation string, wait bool, take func(ctx context.Context, holder string) (bool, error), fn func(ctx context.Context) error) error {
	key := store.TurnLease(conversation)
	holder, err := l.acquire(ctx, key, conversation, wait, take)
	if err != nil {
		return err
	}
	// The work holds the lease: a wait of its own keeps what it holds.
	return l.runHeld(context.WithValue(ctx, yieldKey{}, (*LeaseWaitYield)(nil)), conversation, holder, fn)
}

// LeaseWaitYield is what work that waits for a conversation's lease gives
// back while it waits, and takes again before it tries the lease again (a
// turn slot of its caller's): work waiting on another's lease holds none
// of it, so that work which can run is never kept waiting behind work
// that cannot.
type LeaseWaitYield struct {
	// Release gives it back; Retake takes it again, waiting its turn, or
	// returns ctx's error.
	Release func()
	Retake  func(ctx context.Context) error
}

type yieldKey struct{}

// WithLeaseWaitYield returns ctx for work (Run, Resume) that gives back y
// while it waits for a conversation's lease held by others, and takes it
// again before it tries the lease again. The work itself, once it holds
// the lease, does not give it back.
func WithLeaseWaitYield(ctx context.Context, y LeaseWaitYield) context.Context {
	return context.WithValue(ctx, yieldKey{}, &y)
}

// sleepYielding is sleep, giving back ctx's LeaseWaitYield while it waits.
func (l *leases) sleepYielding(ctx context.Context, conversation string, deadline time.Time, local, announced <-chan struct{}) error {
	y, _ := ctx.Value(yieldKey{}).(*LeaseWaitYield)
	if y == nil || !time.Now().Before(deadline) {
		return l.sleep(ctx, conversation, deadline, local, announced)
	}
	y.Release()
	err := l.sleep(ctx, conversation, deadline, local, announced)
	if rerr := y.Retake(ctx); err == nil {
		err = rerr
	}
	return err
}

// take takes the lease on conversation for work that starts later, with
// begin, which takes it in the store for holder (as BeginTurn does,
// together with other work) and reports whether it did. It returns false,
// having taken nothing, if a turn of this process holds the conversation,
// begin fails or another process holds it. Once it returns true the
// caller runs the work with runHeld, or gives the lease back with release,
// naming the holder it returned.
func (l *leases) take(conversation string, begin func(holder string) (bool, error)) (holder string, ok bool, err error) {
	key := store.TurnLease(conversation)
	busy, holder := l.claim(key)
	if busy != nil {
		return "", false, nil
	}
	ok, err = l.begin(key, holder, func() (bool, error) { return begin(holder) })
	return holder, ok, err
}

// begin runs take for key, which this process has claimed as holder: if
// take took the lease, the claim becomes the lease held; otherwise (it
// failed, was refused or panicked) the claim is let go, and a lease that
// a take which failed may have taken is given back (see giveBack).
func (l *leases) begin(key, holder string, take func() (bool, error)) (ok bool, err error) {
	sent := time.Now()
	defer func() {
		switch {
		case ok:
			l.taken(key, holder, sent)
		case err != nil && !errors.Is(err, errNoResume):
			l.giveBack(key, holder)
			l.unclaim(key, holder)
		default:
			l.unclaim(key, holder)
		}
	}()
	ok, err = take()
	return ok && err == nil, err
}

// giveBack releases the lease on key that a take which failed may have
// taken for holder (the store took it, and the answer was lost): no one
// holds it by that name any more, and this process's next turn on the
// conversation, as any other, would wait for it to run out. A store that
// does not answer at once is left to the lease's ttl: the caller, which
// may have an envelope to acknowledge, has waited for the store already.
func (l *leases) giveBack(key, holder string) {
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	if err := l.store.ReleaseLease(ctx, key, holder); err != nil {
		l.log.Warn("release a lease a failed step may have taken; it lapses within the lease TTL", "lease", key, "err", err)
	}
}

// runHeld is run for a lease this process holds already as holder (see
// take): it renews the lease while fn runs, and releases it when fn
// returns.
func (l *leases) runHeld(ctx context.Context, conversation, holder string, fn func(ctx context.Context) error) error {
	key := store.TurnLease(conversation)
	h := &hold{conversation: conversation, holder: holder}
	defer func() { l.release(ctx, key, conversation, holder, h.released) }()
	// fn runs under a context that ends if the lease is lost: work on a
	// conversation someone else now holds must stop, not overwrite theirs.
	workCtx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	renewCtx, stop := context.WithCancel(workCtx)
	done := make(chan struct{})
	since := l.takenAt(key, holder)
	h.confirmed.base = since
	go func() {
		defer close(done)
		l.renew(renewCtx, h, key, since, lost)
	}()
	h.stop = func() {
		stop()
		<-done
	}
	h.lose = lost
	// Renewing stops before the lease is released, even if fn panics.
	defer h.stopRenewing()
	err := fn(context.WithValue(workCtx, holdKey{}, h))
	h.stopRenewing()
	if cause := context.Cause(workCtx); err != nil && errors.Is(cause, ErrLeaseLost) {
		err = errors.Join(err, cause)
	}
	return err
}

// acquire takes the lease on key, waiting for its holder to release it
// (or, without wait, returning errBusy at once), and returns the name it
// holds it by. Within this process the lease is exclusive too: a second
// turn of the same conversation waits for the first without asking the
// store.
func (l *leases) acquire(ctx context.Context, key, conversation string, wait bool, take func(ctx context.Context, holder string) (bool, error)) (string, error) {
	deadline := time.Now().Add(l.wait)
	var watch store.LeaseWatch
	watchTried := false
	defer func() {
		if watch != nil {
			_ = watch.Close()
		}
	}()
	for {
		busy, holder := l.claim(key)
		if busy != nil {
			// Another turn of this process holds it.
			if !wait {
				return "", errBusy
			}
			if err := l.sleepYielding(ctx, conversation, deadline, busy, nil); err != nil {
				return "", err
			}
			continue
		}
		ok, err := l.begin(key, holder, func() (bool, error) { return take(ctx, holder) })
		if ok {
			return holder, nil
		}
		if err != nil {
			return "", fmt.Errorf("lease conversation: %w", err)
		}
		if !wait {
			return "", errBusy
		}
		// Another process holds it. Subscribe to its releases, then try
		// again: a release between the failed try and the subscription
		// would otherwise be missed.
		if watch == nil && l.watcher != nil && !watchTried {
			// Tried once, and waited for no longer than a re-check
			// would: a store that cannot subscribe leaves the waiter
			// re-checking, not waiting on the subscription.
			watchTried = true
			wctx, cancel := context.WithTimeout(ctx, min(time.Until(deadline), l.ttl/3))
			w, err := l.watcher.WatchLease(wctx, key)
			cancel()
			if err == nil {
				watch = w
				continue
			}
			l.log.Warn("watch conversation lease; re-checking instead", "conversation", conversation, "err", err)
		}
		var announced <-chan struct{}
		if watch != nil {
			announced = watch.Released()
		}
		if err := l.sleepYielding(ctx, conversation, deadline, nil, announced); err != nil {
			return "", err
		}
	}
}

// sleep waits until local is closed, a release is announced, ttl/3 has
// passed (a re-check, in case a release was missed) or ctx ends. Past the
// deadline it returns ErrLeaseTimeout.
func (l *leases) sleep(ctx context.Context, conversation string, deadline time.Time, local, announced <-chan struct{}) error {
	remaining := time.Until(deadline)
	if remaining <= 0 {
		return fmt.Errorf("lease conversation %s: %w", conversation, ErrLeaseTimeout)
	}
	l.waiting.Add(1)
	defer l.waiting.Add(-1)
	t := time.NewTimer(min(l.ttl/3, remaining))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-local:
	case <-announced:
	case <-t.C:
	}
	return nil
}

// claim marks key as claimed by this process and returns nil and the
// claim's holder name, or, if a turn of this process claims it already,
// returns the channel closed when that claim ends.
func (l *leases) claim(key string) (busy <-chan struct{}, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.held[key]; ok {
		return c.done, ""
	}
	c := &leaseClaim{done: make(chan struct{}), holder: l.newHolder()}
	l.held[key] = c
	return nil, c.holder
}

// claimOf returns this process's claim on key if holder names it, or nil.
// l.mu is held.
func (l *leases) claimOf(key, holder string) *leaseClaim {
	if c, ok := l.held[key]; ok && c.holder == holder {
		return c
	}
	return nil
}

// taken records that the store gave holder the lease it claims, by a
// request sent at sent.
func (l *leases) taken(key, holder string, sent time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.claimOf(key, holder); c != nil {
		c.taken, c.sent = true, sent
	}
}

// takenAt returns when the request that took holder's lease on key was
// sent; now if holder is not this process's claim on key.
func (l *leases) takenAt(key, holder string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.claimOf(key, holder); c != nil && c.taken {
		return c.sent
	}
	return time.Now()
}

// heldHere returns the channel closed when this process's hold on the
// conversation ends, or nil if this process does not hold its lease: a
// turn of this process still asking the store for it, which another
// process may hold, does not count.
func (l *leases) heldHere(conversation string) <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c, ok := l.held[store.TurnLease(conversation)]; ok && c.taken {
		return c.done
	}
	return nil
}

// unclaim forgets holder's claim on key and wakes its waiters; a claim on
// key of another holder stays.
func (l *leases) unclaim(key, holder string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.claimOf(key, holder); c != nil {
		close(c.done)
		delete(l.held, key)
		if len(l.held) == 0 {
			// A map keeps the size a burst gave it.
			l.held = map[string]*leaseClaim{}
		}
	}
}

// release frees the lease that holder holds, unless the holder's last
// write released it already, and wakes this process's waiters for it. It
// is made even if ctx was cancelled: a lease left behind only delays the
// next turn by the ttl, but there is no reason to wait.
func (l *leases) release(ctx context.Context, key, conversation, holder string, released bool) {
	if !released {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := l.store.ReleaseLease(relCtx, key, holder); err != nil {
			l.log.Warn("release conversation lease", "conversation", conversation, "err", err)
		}
	}
	l.unclaim(key, holder)
}

// renew renews the lease, taken by a request sent at since, every ttl/3
// until ctx ends. If another process holds it, or renewing fails until the
// lease may have run out in the store, it calls lost with ErrLeaseLost and
// returns.
func (l *leases) renew(ctx context.Context, h *hold, key string, since time.Time, lost context.CancelCauseFunc) {
	keepRenewed(ctx, wallClock{}, l.ttl, since, l.log, lost, func(ctx context.Context) (bool, error) {
		// Never taken back once it ran out: whoever held it since may
		// have done this work's work.
		sent := holdClock()
		ok, err := l.store.RenewLease(ctx, key, h.holder, l.ttl)
		if ok && err == nil {
			h.confirmed.confirm(sent)
		}
		return ok, err
	}, "conversation lease", "conversation", h.conversation)
}

// confirm checks, before work that writes nothing first and that another
// process must not do after taking the conversation over (an allowed call
// of a tool that may run again), that the lease on conversation that ctx
// runs under is still this process's. A lease confirmed less than ttl/2
// ago is (it lasts ttl); an older one (the process stalled, or renewals
// failed) is renewed first: if that is refused, the work under the hold
// stops with ErrLeaseLost, as the renewer would stop it. A context ended
// otherwise (a shutdown) is left to the caller.
func (l *leases) confirm(ctx context.Context, conversation string) error {
	if leaseLost(ctx) {
		return context.Cause(ctx)
	}
	h := holdOf(ctx, conversation)
	if h == nil || ctx.Err() != nil || h.confirmed.age() < l.ttl/2 {
		return nil
	}
	sent := holdClock()
	ok, err := l.store.RenewLease(ctx, store.TurnLease(conversation), h.holder, l.ttl)
	switch {
	case err != nil && leaseLost(ctx):
		return context.Cause(ctx)
	case err != nil && ctx.Err() != nil:
		return nil // a shutdown, as above
	case err != nil:
		return fmt.Errorf("renew the conversation's lease: %w", err)
	case !ok:
		l.log.Error("conversation lease lost; stopping the work under it for another process to carry on", "conversation", conversation)
		h.lose(ErrLeaseLost)
		return ErrLeaseLost
	}
	h.confirmed.confirm(sent)
	return nil
}

// errNothingToRenew is returned by a renewal of keepRenewed when the work
// no longer needs its hold; renewing stops quietly.
var errNothingToRenew = errors.New("nothing left to renew")

// keepRenewed calls renew every ttl/3 until ctx ends, to keep a hold in
// the store that lasts ttl (a lease, a resume claim) taken or last renewed
// by a request sent at since, or until renew returns errNothingToRenew.
// The first renewal is due ttl/3 after since, at once if that is past
// (the work may have started well after the hold was taken); each next
// one ttl/3 after the request of the last renewal was sent, and one that
// failed is tried again ttl/6 later. If renew reports the hold lost
// (another process holds it, or it ran out), or fails or goes unanswered
// until ttl*2/3 after the last renewal, it logs that and calls lost with
// ErrLeaseLost, so the work under the hold stops before anyone else can
// have started on it, and returns. Only a first renewal that comes later
// than that (the work started late) is sent then, and waited for ttl/3 at
// most, never past the hold's end: the store extends only a hold that has
// not run out. Time is clk's (wallClock, but in tests). name and the
// key/value pairs in attrs name the hold in the log.
func keepRenewed(ctx context.Context, clk clock, ttl time.Duration, since time.Time, log *slog.Logger, lost context.CancelCauseFunc, renew func(context.Context) (bool, error), name string, attrs ...any) {
	renewed := since
	due := clk.After(since.Add(ttl / 3).Sub(clk.Now()))
	for first := true; ; first = false {
		select {
		case <-ctx.Done():
			return
		case <-due:
		}
		// A renewal that hangs (a store that neither answers nor fails)
		// is abandoned when the hold must be given up.
		sent := clk.Now()
		deadline := renewed.Add(ttl * 2 / 3)
		if !sent.Before(deadline) {
			if !first || !sent.Before(renewed.Add(ttl)) {
				log.Warn("renew "+name+": no renewal succeeded in time", attrs...)
				lost(fmt.Errorf("%w: not renewed within %s", ErrLeaseLost, ttl*2/3))
				return
			}
			// Never past the hold's end.
			deadline = sent.Add(min(ttl/3, renewed.Add(ttl).Sub(sent)))
		}
		rctx, cancel := clk.WithDeadline(ctx, deadline)
		ok, err := renew(rctx)
		cancel()
		switch {
		case ctx.Err() != nil, errors.Is(err, errNothingToRenew):
			return
		case err == nil && ok:
			renewed = sent
			due = clk.After(sent.Add(ttl / 3).Sub(clk.Now()))
		case err == nil:
			log.Error(name+" lost; stopping the work under it for another process to carry on", attrs...)
			lost(ErrLeaseLost)
			return
		default:
			log.Warn("renew "+name, append(attrs, "err", err)...)
			// Give up before the hold can have run out in the store, so
			// no one else is working on it yet.
			if clk.Now().Sub(renewed) >= ttl*2/3 {
				lost(fmt.Errorf("%w: %w", ErrLeaseLost, err))
				return
			}
			due = clk.After(min(ttl/6, renewed.Add(ttl*2/3).Sub(clk.Now())))
		}
	}
}

// clock is the time keepRenewed goes by: wallClock, but in tests of its
// schedule.
type clock interface {
	Now() time.Time
	// After sends the time on the channel once d has passed (at once if
	// d is not positive).
	After(d time.Duration) <-chan time.Time
	// WithDeadline is context.WithDeadline by this clock.
	WithDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc)
}

// wallClock is the real time.
type wallClock struct{}

func (wallClock) Now() time.Time                         { return time.Now() }
func (wallClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (wallClock) WithDeadline(ctx context.Context, d time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(ctx, d)
}
