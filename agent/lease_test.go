package agent

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/teststore"
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
