package boltstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// held is a committer whose first write holds its commit open until
// release is called, so that the writes started meanwhile queue up.
type held struct {
	t       *testing.T
	c       *committer
	release func()
	done    chan error
}

func holdCommit(t *testing.T) *held {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "test.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("b"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &held{t: t, c: &committer{db: db}, done: make(chan error, 1)}
	started, release := make(chan struct{}), make(chan struct{})
	h.release = sync.OnceFunc(func() { close(release) })
	t.Cleanup(h.release)
	go func() {
		h.done <- h.c.update(func(tx *bolt.Tx) error {
			close(started)
			<-release
			return tx.Bucket([]byte("b")).Put([]byte("first"), nil)
		})
	}()
	<-started
	return h
}

// start runs fn as a write of its own (by updateFirst if first) and
// returns once it is queued behind the held commit.
func (h *held) start(fn func(*bolt.Tx) error, first ...bool) <-chan error {
	done := make(chan error, 1)
	update := h.c.update
	if len(first) > 0 && first[0] {
		update = h.c.updateFirst
	}
	h.queue(func() { done <- update(fn) })
	return done
}

// queue runs call, which makes one write, in a goroutine of its own and
// returns once the write is queued behind the held commit.
func (h *held) queue(call func()) {
	h.c.mu.Lock()
	n := len(h.c.queue) + 1
	h.c.mu.Unlock()
	go call()
	for {
		h.c.mu.Lock()
		queued := len(h.c.queue)
		h.c.mu.Unlock()
		if queued == n {
			return
		}
		runtime.Gosched()
	}
}

// keys lists the keys of the test bucket.
func (h *held) keys() []string {
	var out []string
	err := h.c.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("b")).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// The writes that arrive during a commit are committed together, in one
// transaction after it, in arrival order.
func TestCommitterGroupsWritesDuringACommit(t *testing.T) {
	h := holdCommit(t)
	var mu sync.Mutex
	var order []string
	txs := map[int]bool{}
	var done []<-chan error
	for _, k := range []string{"a", "b", "c", "d"} {
		done = append(done, h.start(func(tx *bolt.Tx) error {
			mu.Lock()
			order = append(order, k)
			txs[tx.ID()] = true
			mu.Unlock()
			return tx.Bucket([]byte("b")).Put([]byte(k), nil)
		}))
	}
	h.release()
	if err := <-h.done; err != nil {
		t.Fatalf("held write: %v", err)
	}
	for i, d := range done {
		if err := <-d; err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(order, want) {
		t.Errorf("writes ran in order %v, want %v", order, want)
	}
	if len(txs) != 1 {
		t.Errorf("the 4 writes queued during a commit ran in %d transactions, want 1", len(txs))
	}
	if got, want := h.keys(), []string{"a", "b", "c", "d", "first"}; !slices.Equal(got, want) {
		t.Errorf("keys after the commits = %v, want %v", got, want)
	}
}

// A write that fails in a group changes nothing and gets its own error;
// the others of the group are committed. A failing write that ran after
// others runs again alone; one that ran first does not run again.
func TestCommitterFailedWriteFailsAlone(t *testing.T) {
	h := holdCommit(t)
	errNo := errors.New("no")
	var mu sync.Mutex
	runs := map[string]int{}
	write := func(k string, fail bool) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error {
			mu.Lock()
			runs[k]++
			mu.Unlock()
			if err := tx.Bucket([]byte("b")).Put([]byte(k), nil); err != nil {
				return err
			}
			if fail {
				return errNo
			}
			return nil
		}
	}
	failFirst := h.start(write("fail-first", true))
	ok1 := h.start(write("ok1", false))
	failLater := h.start(write("fail-later", true))
	ok2 := h.start(write("ok2", false))
	h.release()
	if err := <-h.done; err != nil {
		t.Fatalf("held write: %v", err)
	}
	for name, c := range map[string]<-chan error{"fail-first": failFirst, "fail-later": failLater} {
		if err := <-c; !errors.Is(err, errNo) {
			t.Errorf("%s: error = %v, want its own", name, err)
		}
	}
	for name, c := range map[string]<-chan error{"ok1": ok1, "ok2": ok2} {
		if err := <-c; err != nil {
			t.Errorf("%s: error = %v, want nil", name, err)
		}
	}
	if got, want := h.keys(), []string{"first", "ok1", "ok2"}; !slices.Equal(got, want) {
		t.Errorf("keys after the commits = %v, want %v", got, want)
	}
	// fail-first fails the group's first transaction; ok1 and fail-later
	// run in the second, which fail-later fails after ok1; fail-later runs
	// again alone; ok1 and ok2 commit in the third.
	if want := map[string]int{"fail-first": 1, "ok1": 2, "fail-later": 2, "ok2": 1}; !maps.Equal(runs, want) {
		t.Errorf("runs of each write = %v, want %v", runs, want)
	}
}

// recorder is a write that notes its key and transaction, in run order.
type recorder struct {
	mu   sync.Mutex
	keys []string
	txs  []int
}

func (r *recorder) write(k string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error {
		r.mu.Lock()
		r.keys = append(r.keys, k)
		r.txs = append(r.txs, tx.ID())
		r.mu.Unlock()
		return tx.Bucket([]byte("b")).Put([]byte(k), nil)
	}
}

// The updateFirst writes queued during a commit run first in the next one,
// in their arrival order, ahead of the update writes queued before them.
func TestCommitterFirstWritesGoAhead(t *testing.T) {
	h := holdCommit(t)
	var r recorder
	var done []<-chan error
	for _, w := range []struct {
		key   string
		first bool
	}{{"a", false}, {"x", true}, {"b", false}, {"y", true}} {
		done = append(done, h.start(r.write(w.key), w.first))
	}
	h.release()
	for i, d := range append(done, h.done) {
		if err := <-d; err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if want := []string{"x", "y", "a", "b"}; !slices.Equal(r.keys, want) {
		t.Errorf("writes ran in order %v, want %v", r.keys, want)
	}
	if !slices.Equal(r.txs, []int{r.txs[0], r.txs[0], r.txs[0], r.txs[0]}) {
		t.Errorf("the writes ran in transactions %v, want one", r.txs)
	}
}

// No more than maxGroup writes share a commit.
func TestCommitterBoundsAGroup(t *testing.T) {
	h := holdCommit(t)
	var r recorder
	var done []<-chan error
	for i := range maxGroup + 1 {
		done = append(done, h.start(r.write(fmt.Sprint(i))))
	}
	h.release()
	for i, d := range append(done, h.done) {
		if err := <-d; err != nil {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if got := slices.Compact(slices.Clone(r.txs)); len(got) != 2 || slices.Index(r.txs, got[1]) != maxGroup {
		t.Errorf("%d writes queued during a commit ran in transactions %v, want %d in one and 1 in the next", maxGroup+1, got, maxGroup)
	}
}

// A write whose function panics panics in its own caller's goroutine, not
// in that of the write leading its group: the leader commits without it,
// as a group commits without a write that failed, and the writes that
// come after are not held up.
func TestCommitterPanicInAWrite(t *testing.T) {
	h := holdCommit(t)
	type outcome struct {
		err      error
		panicked any
	}
	run := func(fn func(*bolt.Tx) error, out chan<- outcome) {
		var o outcome
		defer func() {
			o.panicked = recover()
			out <- o
		}()
		o.err = h.c.update(fn)
	}
	call := func(fn func(*bolt.Tx) error) <-chan outcome {
		out := make(chan outcome, 1)
		h.queue(func() { run(fn, out) })
		return out
	}
	wait := func(name string, c <-chan outcome) outcome {
		t.Helper()
		select {
		case o := <-c:
			return o
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer after 10s", name)
			return outcome{}
		}
	}
	// ok is first in the queue, so it leads the group that boom is in.
	ok := call(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("ok"), nil) })
	boom := call(func(tx *bolt.Tx) error {
		if err := tx.Bucket([]byte("b")).Put([]byte("boom"), nil); err != nil {
			return err
		}
		panic("boom")
	})
	h.release()
	if err := <-h.done; err != nil {
		t.Fatalf("held write: %v", err)
	}
	if o := wait("boom", boom); o.panicked != "boom" {
		t.Errorf("the panicking write's caller: panic %v, error %v; want the panic boom", o.panicked, o.err)
	}
	if o := wait("ok", ok); o.panicked != nil || o.err != nil {
		t.Errorf("the write leading the group: panic %v, error %v; want neither", o.panicked, o.err)
	}
	later := make(chan outcome, 1)
	go run(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("later"), nil) }, later)
	if o := wait("later", later); o.panicked != nil || o.err != nil {
		t.Errorf("a write after the panic: panic %v, error %v; want neither", o.panicked, o.err)
	}
	if got, want := h.keys(), []string{"first", "later", "ok"}; !slices.Equal(got, want) {
		t.Errorf("keys after the commits = %v, want %v", got, want)
	}
}

// A commit that stops short outside the group's error handling (here a
// write function that ends its goroutine, the leader's, after another
// write of the group failed and was answered alone) answers every write
// of the group not answered yet with an error, and hands the lead on.
func TestCommitterStoppedShortAnswersTheGroup(t *testing.T) {
	h := holdCommit(t)
	failed := h.start(func(*bolt.Tx) error { return errors.New("refused") })
	stopped := h.start(func(*bolt.Tx) error {
		runtime.Goexit()
		return nil
	})
	h.release()
	if err := <-h.done; err != nil {
		t.Fatalf("held write: %v", err)
	}
	select {
	case err := <-stopped:
		if err == nil {
			t.Error("the write whose function ended the commit's goroutine succeeded, want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write whose function ended the commit's goroutine got no answer in 10s")
	}
	// The leader's caller (the failed write's) never returns: its
	// goroutine ended.
	select {
	case err := <-failed:
		t.Errorf("the leader's caller returned %v after its goroutine ended", err)
	default:
	}
	later := make(chan error, 1)
	go func() {
		later <- h.c.update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("later"), nil) })
	}()
	select {
	case err := <-later:
		if err != nil {
			t.Errorf("a write after the stop: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write after the stop got no answer in 10s")
	}
}

// A commit made for a lease's holder judges the lease when the write runs:
// a lease that ran out while the write waited behind another commit is
// refused, as a lease that ran out before the commit was asked is.
func TestCommitJudgesTheLeaseWhenItRuns(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "s.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	const ttl = 100 * time.Millisecond
	if ok, err := s.AcquireLease(ctx, store.TurnLease("c1"), "a", ttl); err != nil || !ok {
		t.Fatalf("AcquireLease = %v, %v", ok, err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_ = s.commits.update(func(*bolt.Tx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	done := make(chan error, 1)
	asked := time.Now()
	go func() { done <- s.CommitTurn(ctx, store.Commit{Key: "c1", Holder: "a", Release: "a"}) }()
	for {
		s.commits.mu.Lock()
		queued := len(s.commits.queue)
		s.commits.mu.Unlock()
		if queued == 1 {
			break
		}
		runtime.Gosched()
	}
	time.Sleep(time.Until(asked.Add(2 * ttl))) // the lease runs out while the commit waits
	close(release)
	if err := <-done; !errors.Is(err, store.ErrNotHolder) {
		t.Errorf("CommitTurn after the lease ran out in the queue = %v, want ErrNotHolder", err)
	}
}
