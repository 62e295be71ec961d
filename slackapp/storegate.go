package slackapp

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/toolgate/toolgate/store"
)

// errStopped is what every store call of the app returns once Run has
// returned.
var errStopped = errors.New("slack app stopped: the store is no longer used")

// storeGate passes the app's store calls through until Run returns; then
// close makes every call fail with errStopped without reaching the store,
// so a goroutine that outlived the shutdown deadline cannot use a store
// its owner may have closed. A call already in flight when the gate closes
// is not interrupted by it.
type storeGate struct {
	s      Store
	closed atomic.Bool
}

func (g *storeGate) close() { g.closed.Store(true) }

func (g *storeGate) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if g.closed.Load() {
		return false, errStopped
	}
	return g.s.SeenEvent(ctx, id, ttl)
}

func (g *storeGate) PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	if g.closed.Load() {
		return store.Record{}, errStopped
	}
	return g.s.PutRecord(ctx, r, expectVersion)
}

func (g *storeGate) Records(ctx context.Context, kind string) ([]store.Record, error) {
	if g.closed.Load() {
		return nil, errStopped
	}
	return g.s.Records(ctx, kind)
}

func (g *storeGate) DeleteRecord(ctx context.Context, kind, id string) error {
	if g.closed.Load() {
		return errStopped
	}
	return g.s.DeleteRecord(ctx, kind, id)
}

func (g *storeGate) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	if g.closed.Load() {
		return nil, errStopped
	}
	return g.s.AuditLog(ctx, limit)
}

func (g *storeGate) Ping(ctx context.Context) error {
	if g.closed.Load() {
		return errStopped
	}
	return g.s.Ping(ctx)
}
