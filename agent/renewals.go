package agent

import (
	"context"
	"sync"
	"time"

	"github.com/toolgate/toolgate/store"
)

// HoldRenewer is offered by stores that renew several leases and resume
// claims in one round trip (Redis), on connections kept for renewals. The
// renewals of this process's turns and resumes that fall due while one is
// on its way then go together in the next: however many turns run, and
// however busy the store's other connections are, renewing costs a round
// trip or two per LeaseTTL/3, and a lease does not lapse while its holder
// is alive because its renewal waited behind the holders' other work.
type HoldRenewer interface {
	// RenewHolds renews each of holds as RenewLease or RenewClaim would,
	// with one result per hold.
	RenewHolds(ctx context.Context, ttl time.Duration, holds []store.Hold) []store.Renewed
}

// maxRenewalBatch bounds the holds sent in one round trip.
const maxRenewalBatch = 1024

// renewals renews holds: in batches through the store's HoldRenewer when
// it has one, one by one otherwise. A batch is sent as soon as one is
// asked for; the renewals asked for while it is on its way wait for it
// to come back and go in the next. The goroutine that sends them exists
// while there are renewals to send.
type renewals struct {
	batch HoldRenewer // nil: one by one
	ttl   time.Duration

	mu      sync.Mutex
	queue   []*renewal
	sending bool
}

// renewal is one hold's renewal waiting for its batch.
type renewal struct {
	ctx  context.Context
	hold store.Hold
	done chan store.Renewed // buffered: the sender never waits for a caller gone
}

// newRenewals returns the renewals of holds that last ttl, kept in st.
func newRenewals(st any, ttl time.Duration) *renewals {
	r := &renewals{ttl: ttl}
	r.batch, _ = st.(HoldRenewer)
	return r
}

// renew renews h for ttl, and returns what RenewLease or RenewClaim would:
// in a batch, or with alone, the store's own call for h, if the store
// renews one by one. It returns ctx's error once ctx ends, whether or not
// the batch it went in was sent.
func (r *renewals) renew(ctx context.Context, h store.Hold, alone func(context.Context) (bool, error)) (bool, error) {
	if r.batch == nil {
		return alone(ctx)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	q := &renewal{ctx: ctx, hold: h, done: make(chan store.Renewed, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, q)
	start := !r.sending
	r.sending = true
	r.mu.Unlock()
	if start {
		go r.send()
	}
	select {
	case res := <-q.done:
		return res.OK, res.Err
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// send sends the queued renewals in batches until none are left.
func (r *renewals) send() {
	for {
		r.mu.Lock()
		n := min(len(r.queue), maxRenewalBatch)
		if n == 0 {
			r.queue, r.sending = nil, false
			r.mu.Unlock()
			return
		}
		batch := r.queue[:n:n]
		r.queue = r.queue[n:]
		r.mu.Unlock()
		r.sendBatch(batch)
	}
}

// sendBatch sends one batch, leaving out the renewals whose callers are
// gone, and gives each caller its result. The round trip lasts no longer
// than the latest of the callers' deadlines, and at most ttl/3 (a renewal
// that hangs for longer is given up by its caller anyway): it is the
// callers', and does not end when one of them gives up.
func (r *renewals) sendBatch(batch []*renewal) {
	deadline := time.Now().Add(r.ttl / 3)
	var latest time.Time
	live := batch[:0]
	for _, q := range batch {
		if q.ctx.Err() != nil {
			continue
		}
		live = append(live, q)
		d, ok := q.ctx.Deadline()
		if !ok {
			d = deadline
		}
		if d.After(latest) {
			latest = d
		}
	}
	if len(live) == 0 {
		return
	}
	if latest.Before(deadline) {
		deadline = latest
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	holds := make([]store.Hold, len(live))
	for i, q := range live {
		holds[i] = q.hold
	}
	res := r.batch.RenewHolds(ctx, r.ttl, holds)
	for i, q := range live {
		q.done <- res[i]
	}
}
