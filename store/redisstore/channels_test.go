package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// Redis delivers a PUBLISH to the subscribers of every database of the
// server, so a store does not hear what a store on another database with
// the same prefix announces: its pauses (whose policy records are
// numbered by each database for itself) and its lease releases. The other
// store is never connected: what it would publish is published from this
// database, as PUBLISH is the same from any.
func TestAnnouncementsOfAnotherDatabaseAreNotHeard(t *testing.T) {
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL, with databases: %v", err)
	}
	prefix := newPrefix(t, u)
	s := newStore(t, u, redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = s.Close() })
	otherOpts := *opts
	otherOpts.DB = (opts.DB + 1) % 16
	other := redisstore.NewFromClient(redis.NewClient(&otherOpts), redisstore.Options{Prefix: prefix})
	t.Cleanup(func() { _ = other.Close() })
	pub := redis.NewClient(opts)
	t.Cleanup(func() { _ = pub.Close() })
	ctx := t.Context()
	heard := followPauses(t, s)
	// Published in this order, and heard in it if heard at all.
	if err := pub.Publish(ctx, other.PausesChannel(), "another database's").Err(); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, s.PausesChannel(), "this database's").Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-heard:
		if got != "this database's" {
			t.Errorf("first announcement heard = %q, want this database's own", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no announcement within 10s")
	}

	const key, mine = "conv:T1/C1/1.1", "conv:T1/C1/2.2"
	wOther, err := s.WatchLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer wOther.Close()
	wMine, err := s.WatchLease(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	defer wMine.Close()
	if err := pub.Publish(ctx, other.LeaseChannel(key), "1").Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.AcquireLease(ctx, mine, "a", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, mine, "a"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wMine.Released():
	case <-time.After(10 * time.Second):
		t.Fatal("no release announced within 10s of ReleaseLease")
	}
	// The releases are handed to the watches in the order published.
	select {
	case <-wOther.Released():
		t.Error("a release of the lease on another database woke this database's watch")
	default:
	}
}

// awaitRelease waits, for at most 10 s, for w to be told its lease may be
// free.
func awaitRelease(t *testing.T, w store.LeaseWatch, what string) {
	t.Helper()
	select {
	case <-w.Released():
	case <-time.After(10 * time.Second):
		t.Fatalf("no release heard within 10s: %s", what)
	}
}

// A prefix holding the characters of a subscription pattern (* ? [ ] \)
// still hears its own releases.
func TestLeaseReleasesHeardUnderAPrefixWithPatternCharacters(t *testing.T) {
	u := redisURL(t)
	s := newStore(t, u, redisstore.Options{Prefix: newPrefix(t, u) + `[1]?*\`})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	key := store.TurnLease("T1/C1/3.3")
	w, err := s.WatchLease(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if ok, err := s.AcquireLease(ctx, key, "b", time.Minute); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	if err := s.ReleaseLease(ctx, key, "b"); err != nil {
		t.Fatal(err)
	}
	awaitRelease(t, w, "the release of the lease")
}

// When the subscription's connection is lost, releases announced until
// it is made again are not heard: every watch is woken once it is, to
// try its lease again.
func TestLeaseWatchesWokenWhenTheSubscriptionIsMadeAgain(t *testing.T) {
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	name := "lease-watch-test-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	opts.ClientName = name
	c := redis.NewClient(opts)
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	w, err := s.WatchLease(ctx, store.TurnLease("T1/C1/4.4"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Cut this store's subscription only: other tests share the server.
	admin := redis.NewClient(opts)
	t.Cleanup(func() { _ = admin.Close() })
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				fields[k] = v
			}
		}
		if fields["name"] == name && fields["psub"] != "0" && fields["psub"] != "" {
			id, _ := strconv.ParseInt(fields["id"], 10, 64)
			if err := admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			killed++
		}
	}
	if killed != 1 {
		t.Fatalf("found %d subscriptions of the store to cut, want 1:\n%s", killed, list)
	}
	awaitRelease(t, w, "the watch was not woken once the subscription was made again")
}

// unansweredSubscriptions is a hook whose connections never send a
// (P)SUBSCRIBE: to the client, Redis never answers one, as a server that
// stalls. subscribing is told of each one held back.
type unansweredSubscriptions struct{ subscribing chan<- struct{} }

func (h unansweredSubscriptions) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return subscriptionEater{Conn: c, subscribing: h.subscribing}, nil
	}
}

func (unansweredSubscriptions) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (unansweredSubscriptions) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

type subscriptionEater struct {
	net.Conn
	subscribing chan<- struct{}
}

func (c subscriptionEater) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) {
		c.subscribing <- struct{}{}
		return len(b), nil
	}
	return c.Conn.Write(b)
}

// unansweredStore is a store on the single node of REDIS_URL whose
// subscriptions Redis never confirms (see unansweredSubscriptions), each
// attempt bounded by wait; each attempt is told on the channel returned.
func unansweredStore(t *testing.T, wait time.Duration) (*redisstore.Store, <-chan struct{}) {
	t.Helper()
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	subscribing := make(chan struct{}, 10)
	c.AddHook(unansweredSubscriptions{subscribing: subscribing})
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	s.SetLeaseSubscribeWait(wait)
	return s, subscribing
}

// A subscription to lease releases that Redis never confirms holds up no
// other watch: one whose context ends meanwhile returns at once, and the
// attempt itself gives up within its bound (the waiter then re-checks its
// lease now and then instead).
func TestUnansweredLeaseSubscriptionHoldsUpNoOtherWatch(t *testing.T) {
	s, subscribing := unansweredStore(t, 3*time.Second)

	first := make(chan error, 1)
	go func() {
		_, err := s.WatchLease(context.Background(), store.TurnLease("T1/C1/5.5"))
		first <- err
	}()
	<-subscribing // the first watch waits for Redis to confirm
	ctx, cancel := context.WithCancel(t.Context())
	second := make(chan error, 1)
	go func() {
		_, err := s.WatchLease(ctx, store.TurnLease("T1/C1/5.6"))
		second <- err
	}()
	cancel()
	select {
	case err := <-second:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the second watch, its context cancelled = %v, want context.Canceled", err)
		}
	case err := <-first:
		t.Fatalf("the first watch ended (%v) before the second, whose context was cancelled", err)
	}
	select {
	case err := <-first:
		if err == nil {
			t.Error("the unconfirmed subscription's watch succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the unconfirmed subscription's watch did not give up within 30s (its bound is 3s)")
	}
}

// Watches that wait for another's attempt to subscribe fail with it, each
// then re-checking its lease instead: they do not each make an attempt of
// their own in turn, the last waiting for all the others' bounds.
func TestWatchesWaitingForAFailedSubscriptionFailWithIt(t *testing.T) {
	// Long enough for the other watches to have come to wait for the
	// first one's attempt.
	s, subscribing := unansweredStore(t, 3*time.Second)
	const n = 4
	errs := make(chan error, n)
	watch := func(i int) {
		_, err := s.WatchLease(context.Background(), store.TurnLease("T1/C1/6."+strconv.Itoa(i)))
		errs <- err
	}
	go watch(0)
	<-subscribing
	for i := 1; i < n; i++ {
		go watch(i)
	}
	for range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Error("a watch succeeded on a subscription Redis never confirmed")
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the watches did not all fail within 30s")
		}
	}
	if extra := len(subscribing); extra != 0 {
		t.Errorf("%d more attempts to subscribe were made, want the first one alone", extra)
	}
}

// A watch waiting for another's attempt to subscribe, which that one gave
// up on when its own context ended, makes an attempt of its own rather
// than failing with the other's context.
func TestWatchOutlivingAnotherAttemptTriesItself(t *testing.T) {
	s, subscribing := unansweredStore(t, 2*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := s.WatchLease(ctx, store.TurnLease("T1/C1/7.1"))
		first <- err
	}()
	<-subscribing
	second := make(chan error, 1)
	go func() {
		_, err := s.WatchLease(context.Background(), store.TurnLease("T1/C1/7.2"))
		second <- err
	}()
	cancel()
	select {
	case <-subscribing:
		// The second watch's own attempt.
	case err := <-second:
		t.Fatalf("the second watch ended (%v) without an attempt of its own", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no second attempt within 30s")
	}
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Errorf("the first watch = %v, want context.Canceled", err)
	}
	if err := <-second; err == nil || errors.Is(err, context.Canceled) {
		t.Errorf("the second watch = %v, want its own attempt's failure", err)
	}
}
