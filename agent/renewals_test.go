package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// heldRenewer is a HoldRenewer that hands each batch to the test, which
// answers it.
type heldRenewer struct {
	batches chan renewBatch
}

type renewBatch struct {
	ctx    context.Context
	holds  []store.Hold
	answer chan []store.Renewed
}

func (h *heldRenewer) RenewHolds(ctx context.Context, ttl time.Duration, holds []store.Hold) []store.Renewed {
	b := renewBatch{ctx: ctx, holds: holds, answer: make(chan []store.Renewed)}
	h.batches <- b
	return <-b.answer
}

type renewResult struct {
	ok  bool
	err error
}

// The renewals asked for while a batch is on its way go together in the
// next one, each caller gets its own hold's result, and a caller that gave
// up is left out; no caller's giving up ends the round trip of the others.
func TestRenewalsAskedMeanwhileGoInOneBatch(t *testing.T) {
	st := &heldRenewer{batches: make(chan renewBatch)}
	r := newRenewals(st, 30*time.Second)
	alone := func(context.Context) (bool, error) {
		t.Error("a store that renews in batches was asked for one hold alone")
		return false, nil
	}
	renew := func(ctx context.Context, h store.Hold) <-chan renewResult {
		c := make(chan renewResult, 1)
		go func() {
			ok, err := r.renew(ctx, h, alone)
			c <- renewResult{ok, err}
		}()
		return c
	}

	first := renew(t.Context(), store.Hold{Lease: "conv:a", Owner: "o#1"})
	b1 := <-st.batches
	if !slices.Equal(b1.holds, []store.Hold{{Lease: "conv:a", Owner: "o#1"}}) {
		t.Fatalf("first batch = %+v, want the first renewal alone", b1.holds)
	}

	// While the first batch is out: three more, one of which gives up
	// before the batch goes, and one whose deadline is near.
	second := renew(t.Context(), store.Hold{Lease: "conv:b", Owner: "o#2"})
	gaveUpCtx, giveUp := context.WithCancel(t.Context())
	gaveUp := renew(gaveUpCtx, store.Hold{Lease: "conv:c", Owner: "o#3"})
	soonCtx, soonCancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer soonCancel()
	third := renew(soonCtx, store.Hold{Run: "run1", Owner: "o#4"})
	waitQueued(t, r, 3)
	giveUp()
	if res := <-gaveUp; !errors.Is(res.err, context.Canceled) {
		t.Errorf("renewal given up = %+v, want context.Canceled", res)
	}
	b1.answer <- []store.Renewed{{OK: true}}
	if res := <-first; !res.ok || res.err != nil {
		t.Errorf("first renewal = %+v, want held", res)
	}

	b2 := <-st.batches
	want := []store.Hold{{Lease: "conv:b", Owner: "o#2"}, {Run: "run1", Owner: "o#4"}}
	byOwner := func(a, b store.Hold) int { return strings.Compare(a.Owner, b.Owner) }
	if !slices.Equal(slices.SortedFunc(slices.Values(b2.holds), byOwner), want) {
		t.Fatalf("second batch = %+v, want %+v (the one given up left out)", b2.holds, want)
	}
	// Its round trip lasts as long as its latest caller's deadline, at
	// most ttl/3; the caller without one is not cut short by the other.
	soon, _ := soonCtx.Deadline()
	if d, ok := b2.ctx.Deadline(); !ok || time.Until(d) > 10*time.Second || !d.After(soon) {
		t.Errorf("second batch's deadline = %v, %v from now; want ttl/3 (10s), past the 5s of one caller's", ok, time.Until(d))
	}
	soonCancel()
	if res := <-third; !errors.Is(res.err, context.Canceled) && !errors.Is(res.err, context.DeadlineExceeded) {
		t.Errorf("renewal whose caller gave up while its batch was out = %+v, want context.Canceled", res)
	}
	if b2.ctx.Err() != nil {
		t.Errorf("the batch's round trip ended (%v) when one of its callers gave up", b2.ctx.Err())
	}
	lost := errors.New("refused")
	answers := make([]store.Renewed, len(b2.holds))
	for i, h := range b2.holds {
		if h.Run != "" {
			answers[i].Err = lost
		}
	}
	b2.answer <- answers
	if res := <-second; res.ok || res.err != nil {
		t.Errorf("second renewal = %+v, want not held, no error", res)
	}

	// Nothing left: the sender is gone, and the next renewal starts one.
	next := renew(t.Context(), store.Hold{Lease: "conv:d", Owner: "o#5"})
	b3 := <-st.batches
	if len(b3.holds) != 1 || b3.holds[0].Lease != "conv:d" {
		t.Fatalf("third batch = %+v, want the next renewal", b3.holds)
	}
	b3.answer <- []store.Renewed{{Err: lost}}
	if res := <-next; !errors.Is(res.err, lost) {
		t.Errorf("third renewal = %+v, want its error", res)
	}
}

// A store without batches renews each hold with its own call.
func TestRenewalsOneByOneWithoutBatches(t *testing.T) {
	r := newRenewals(struct{}{}, time.Minute)
	called := 0
	ok, err := r.renew(t.Context(), store.Hold{Lease: "conv:a", Owner: "o"}, func(context.Context) (bool, error) {
		called++
		return true, nil
	})
	if !ok || err != nil || called != 1 {
		t.Errorf("renew = %v, %v after %d calls; want true from one call of the store's own", ok, err, called)
	}
}

// waitQueued waits until n renewals wait for the next batch.
func waitQueued(t *testing.T, r *renewals, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		got := len(r.queue)
		r.mu.Unlock()
		if got == n {
			return
		}
	}
	t.Fatalf("%d renewals never waited for the next batch", n)
}
