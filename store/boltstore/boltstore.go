package boltstore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/internal/newrun"
)

// Defaults for the zero fields of Options.
const (
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultConversationTTL = 30 * 24 * time.Hour
	DefaultAuditMax        = 10000
	DefaultPruneInterval   = 10 * time.Minute
	DefaultLockTimeout     = time.Second
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Retention is how long a run and its calls are kept after the run
	// expired (its latest call's ExpiresAt) or was finished, whichever
	// comes first. Default DefaultRetention.
	Retention time.Duration
	// ConversationTTL is how long a conversation is kept after it was last
	// saved. Default DefaultConversationTTL.
	ConversationTTL time.Duration
	// AuditMax is how many audit entries are kept; older ones are dropped.
	// Default DefaultAuditMax.
	AuditMax int
	// AuditRetention is how long an audit entry is kept after its At;
	// older entries are trimmed when entries are added and by every
	// prune, and never listed. Default store.DefaultAuditRetention.
	AuditRetention time.Duration
	// PruneInterval is how often expired runs, conversations, leases,
	// event ids and audit entries are deleted from the file. Default
	// DefaultPruneInterval.
	PruneInterval time.Duration
	// LockTimeout is how long Open waits for the file lock held by another
	// process before it fails. Default DefaultLockTimeout.
	LockTimeout time.Duration
	// Logger receives operational logs: a prune that failed, at warn
	// level (default slog.Default()).
	Logger *slog.Logger
}

// Store keeps the bot's state in one bbolt file. It is safe for concurrent
// use by many goroutines of one process; the file lock keeps other
// processes out.
type Store struct {
	db        *bolt.DB
	commits   committer
	retention time.Duration
	convTTL   time.Duration
	auditMax  uint64
	auditTTL  time.Duration
	log       *slog.Logger

	stop      chan struct{}
	done      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	// afterChunk, if set (by tests, before the store is used), is
	// called by prune after each chunk it commits, between two write
	// transactions.
	afterChunk func()
}

// Bucket names.
var (
	bucketRuns    = []byte("runs")       // run id -> runRecord, without the run's state
	bucketStates  = []byte("states")     // run id -> the run's state (store.Run.State), written once (see putRun)
	bucketCalls   = []byte("calls")      // call id -> store.Call
	bucketPending = []byte("pending")    // call id -> nothing: pending calls of unfinished runs
	bucketDecided = []byte("decided")    // run id -> nothing: unfinished runs with no call pending, whose resume is due (see Stalled)
	bucketConvs   = []byte("convs")      // key -> convRecord
	bucketLeases  = []byte("leases")     // key -> leaseRecord
	bucketSeen    = []byte("seen")       // event id -> expiry (Unix ns, big endian)
	bucketAudit   = []byte("audit")      // sequence (big endian) -> store.AuditEntry
	bucketRecords = []byte("records")    // kind -> bucket: id -> store.Record
	bucketInbox   = []byte("inbox")      // conversation -> inboxRecord
	bucketUnans   = []byte("unanswered") // conversation -> listing time (Unix ns, big endian)
	bucketRemind  = []byte("remind")     // RemindAt (Unix ns, big endian) + call id -> nothing: pending calls with a reminder to send
	bucketNotes   = []byte("notes")      // call id -> the call's note (see PutCallNote)
	// bucketUnreadable notes the run, conversation and inbox records
	// that a prune found it could not read (see lifeRule).
	bucketUnreadable = []byte("unreadable") // bucket name + 0 + key -> when a prune first found it so (Unix ns, big endian)
)

var allBuckets = [][]byte{
	bucketRuns, bucketStates, bucketCalls, bucketPending, bucketDecided, bucketConvs,
	bucketLeases, bucketSeen, bucketAudit, bucketRecords, bucketInbox, bucketUnans, bucketRemind, bucketNotes,
	bucketUnreadable,
}

// runRecord is a run with its bookkeeping.
type runRecord struct {
	// DeleteAt comes first, for prune (see deleteAtOf).
	DeleteAt   time.Time `json:"delete_at"`
	Run        store.Run `json:"run"`
	Pending    int       `json:"pending"` // calls still pending
	Finished   bool      `json:"finished,omitempty"`
	ClaimOwner string    `json:"claim_owner,omitempty"`
	ClaimUntil time.Time `json:"claim_until,omitzero"`
	// ClaimNonce and ClaimStarted are the attempt that took the claim
	// (store.ResumeBegin.Nonce) and the call it marked as executing.
	ClaimNonce   string `json:"claim_nonce,omitempty"`
	ClaimStarted string `json:"claim_started,omitempty"`
	// ClaimPriorNonce and ClaimPriorStarted are those of the claim before
	// it, as the attempt found them: answered again to it when it is
	// asked again.
	ClaimPriorNonce   string `json:"claim_prior_nonce,omitempty"`
	ClaimPriorStarted string `json:"claim_prior_started,omitempty"`
}

// convRecord is a conversation and when it is deleted.
type convRecord struct {
	// DeleteAt comes first, for prune (see deleteAtOf).
	DeleteAt     time.Time          `json:"delete_at"`
	Conversation store.Conversation `json:"conversation"`
}

// leaseRecord is a held lease.
type leaseRecord struct {
	Owner string    `json:"owner"`
	Until time.Time `json:"until"`
}

// Open opens or creates the store file at path, creating its directory.
// It fails after Options.LockTimeout if another process has the file open.
// Everything saved before a Close is there again after Open. Expired data
// is pruned at Open and every PruneInterval until Close.
func Open(path string, opts Options) (*Store, error) {
	if opts.Retention < 0 || opts.ConversationTTL < 0 || opts.AuditMax < 0 || opts.AuditRetention < 0 ||
		opts.PruneInterval < 0 || opts.LockTimeout < 0 {
		return nil, errors.New("boltstore: negative option")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	timeout := cmp.Or(opts.LockTimeout, DefaultLockTimeout)
	if discarded, err := discardUnfinished(path); err != nil {
		return nil, openError(path, err)
	} else if discarded {
		cmp.Or(opts.Logger, slog.Default()).Warn("the store file's creation was cut short (a full disk?); it holds nothing and is created again", "path", path)
	}
	if err := checkPages(path, timeout); err != nil {
		return nil, openError(path, err)
	}
	db, err := openFile(path, &bolt.Options{
		Timeout: timeout,
		// The free pages are not written at each commit (with tens of
		// thousands of them, as in a file that has aged, that doubled a
		// commit's time) but found again at Open, by a walk of the file,
		// and kept in a map, whose allocations do not scan them. That
		// walk runs in a goroutine of bbolt's, where a damaged page ends
		// the process (see checkPages).
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if err != nil {
		return nil, openError(path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		// Every version before the pending-call indexes lists its runs in
		// bucketActive, which moveDecided deletes: where it is, such a
		// version used the file since this one last did, and paused calls
		// that are in no index (never listed as pending, never expired).
		earlier := tx.Bucket(bucketActive) != nil
		if err := moveDecided(tx); err != nil {
			return err
		}
		return ensureIndexes(tx, earlier)
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s := &Store{
		db:        db,
		commits:   committer{db: db},
		retention: cmp.Or(opts.Retention, DefaultRetention),
		convTTL:   cmp.Or(opts.ConversationTTL, DefaultConversationTTL),
		auditMax:  uint64(cmp.Or(opts.AuditMax, DefaultAuditMax)),
		auditTTL:  cmp.Or(opts.AuditRetention, store.DefaultAuditRetention),
		log:       opts.Logger,
		stop:      make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if err := s.prune(time.Now()); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	s.done.Add(1)
	go s.pruneLoop(cmp.Or(opts.PruneInterval, DefaultPruneInterval))
	return s, nil
}

// errDamaged is a file that cannot be opened, for a page or record bbolt
// cannot read (see checkPages).
var errDamaged = errors.New("the file is damaged")

// openError is the error of Open of the file at path that failed with err.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return fmt.Errorf("open store %s: file is locked, is another process using it: %w", path, err)
	case errors.Is(err, errDamaged):
		return fmt.Errorf("open store %s: %w: restore it from a backup, or move it aside to start empty", path, err)
	}
	return fmt.Errorf("open store %s: %w", path, err)
}

// damaged is errDamaged for what bbolt panicked with, or a fault made a
// panic (see checkPages).
func damaged(p any) error {
	if _, ok := p.(interface{ Addr() uintptr }); ok {
		p = fmt.Sprintf("a read past the pages of the file: %v", p)
	}
	return fmt.Errorf("%w (%v)", errDamaged, p)
}

// openFile is bolt.Open, with a panic of bbolt's in this goroutine (as
// its walk for the free pages reports, here, a page that two pages point
// to, or one past the end of the file) returned as errDamaged. The walk
// may be left blocked in its goroutine and the file open, and locked,
// until the process ends.
func openFile(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer func() {
		if p := recover(); p != nil {
			db, err = nil, damaged(p)
		}
	}()
	return bolt.Open(path, 0o600, opts)
}

// checkPages reads, read-only, every page of the branches and leaves of
// the file at path, if it exists and is not empty, and returns errDamaged
// if one of them cannot be read, or holds its keys out of order: a damaged
// file. The write-mode bolt.Open that follows walks those pages for the
// free ones (see Open) in a goroutine of its own, where bbolt panics on
// such a page (a page header of no known type, or one that names another
// page) or faults on one past the end of the file, which ends the process
// with no word of the file. Here they are read in the caller's goroutine,
// which recovers, with faults made panics. A read-only bolt.Open does not
// walk for the free pages; it waits up to timeout for the lock of a
// process that has the file open, and fails with bolterrors.ErrTimeout.
//
// It is a second walk of the file at each start, which takes about half
// the time of bbolt's: in the file of 793 MiB of BenchmarkOpenAfterChurn,
// with its pages in the OS's cache, 0.085 s against 0.16 s, and Open took
// 0.18 to 0.22 s without it, 0.24 to 0.28 s with it. No read at Open can
// stand for it: they all come after the write-mode bolt.Open.
func checkPages(path string, timeout time.Duration) (err error) {
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil // bolt.Open creates the file, or reports why it cannot
	}
	db, err := openFile(path, &bolt.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	return db.View(func(tx *bolt.Tx) (err error) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() {
			if p := recover(); p != nil {
				err = damaged(p)
			}
		}()
		return walkBucket(tx.Cursor(), "", func(name []byte) *bolt.Bucket { return tx.Bucket(name) })
	})
}

// walkBucket reads every key of the bucket that c is a cursor of, named
// path, and of the buckets in it, through every page of their branches and
// leaves; child opens the bucket of a key. It returns errDamaged if the
// keys of a bucket are out of order.
func walkBucket(c *bolt.Cursor, path string, child func(name []byte) *bolt.Bucket) error {
	var prev []byte
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("%w (bucket %q: keys out of order)", errDamaged, path)
		}
		prev = k
		if v != nil {
			continue
		}
		if b := child(k); b != nil {
			if err := walkBucket(b.Cursor(), path+"/"+string(k), b.Bucket); err != nil {
				return err
			}
		}
	}
	return nil
}

// bucketActive is where earlier versions listed every unfinished run, paused
// ones included, all of which Stalled read; moveDecided takes it out.
var bucketActive = []byte("active")

// moveDecided lists in bucketDecided the runs of a file written by an
// earlier version that are decided and not finished, and deletes that
// version's list of unfinished runs.
func moveDecided(tx *bolt.Tx) error {
	active := tx.Bucket(bucketActive)
	if active == nil {
		return nil
	}
	decided := tx.Bucket(bucketDecided)
	err := active.ForEach(func(k, _ []byte) error {
		var rec runRecord
		// A run that cannot be read (a damaged record) is not listed:
		// Stalled would pass it over, and failing here would keep the
		// store from opening.
		ok, err := getRun(tx, string(k), &rec)
		if err != nil || !ok || rec.Finished || rec.Pending > 0 {
			return nil
		}
		return decided.Put(k, nil)
	})
	if err != nil {
		return fmt.Errorf("list decided runs: %w", err)
	}
	return tx.DeleteBucket(bucketActive)
}

// Close stops pruning and closes the file. Calling it again does nothing.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.done.Wait()
		if err := s.db.Close(); err != nil {
			s.closeErr = fmt.Errorf("close store: %w", err)
		}
	})
	return s.closeErr
}

// Ping checks that the store is open.
func (s *Store) Ping(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(func(*bolt.Tx) error { return nil })
}

// committer commits write transactions in groups: a write that arrives
// while no commit is running commits at once, alone; writes that arrive
// during a commit wait for it and then commit together, in one
// transaction and one fsync, up to maxGroup at a time. So an idle store
// commits each write at once, and a busy one does not queue its writers
// one fsync each. The writes someone waits on at once (updateFirst:
// recording a message before its ack, deciding a call) go ahead of the
// others in the queue, so that they wait for at most the commit running
// and their own, however many writes of turns are queued.
//
// The writes of a group run in arrival order in one transaction. If one
// returns an error, the transaction is rolled back, the others run again
// without it and it runs again alone, its error then being its answer
// (as in bbolt's DB.Batch): a write function may run more than once, so it
// must set everything it returns on each run and change nothing outside
// the transaction. A write whose function panics is taken out of the group
// as one that failed, without running again, and its caller panics with
// the same value: the panic comes out in the caller's goroutine, not in
// that of whichever write leads the group, and the others are committed
// without it.
type committer struct {
	db    *bolt.DB
	mu    sync.Mutex
	queue []*write // waiting for the next commit, in arrival order
	first int      // how many at the front of queue came by updateFirst
	busy  bool     // a commit is running or its leader is about to start it
}

// maxGroup bounds the writes of one group, and so how long a running
// commit holds up the next.
const maxGroup = 128

// write is one queued write transaction. Its goroutine waits for done (its
// group was committed or failed, err says which) or for lead (it was first
// in the queue when the last commit ended, and commits the next group).
type write struct {
	fn  func(*bolt.Tx) error
	err error
	// panicked is what fn panicked with, if it did; the write's caller
	// panics with it again.
	panicked any
	// answered is set when done is closed, by the write leading the
	// group, which alone reads it.
	answered bool
	done     chan struct{}
	lead     chan struct{}
}

// errPanicked fails the transaction of a write whose function panicked.
var errPanicked = errors.New("write panicked")

// run runs fn in tx. A panic of fn is kept in panicked and fails the
// transaction as an error would, so that the leader of the group answers
// every write and hands the lead on.
func (w *write) run(tx *bolt.Tx) (err error) {
	defer func() {
		if p := recover(); p != nil {
			w.panicked, err = p, errPanicked
		}
	}()
	return w.fn(tx)
}

// answer tells the write's caller its outcome.
func (w *write) answer(err error) {
	w.err, w.answered = err, true
	close(w.done)
}

// update runs fn in a write transaction, committed with the writes that
// arrive while the previous commit runs, and returns fn's error or the
// commit's. fn may run more than once: see committer.
func (c *committer) update(fn func(*bolt.Tx) error) error { return c.enqueue(fn, false) }

// updateFirst is update for a write someone waits on at once: it goes in
// the queue ahead of the update writes, behind the other updateFirst ones.
func (c *committer) updateFirst(fn func(*bolt.Tx) error) error { return c.enqueue(fn, true) }

// enqueue queues the write, and waits until it is committed, leading the
// commits that the queue's order puts before it. A write told to lead takes
// the next group from the front of the queue (up to maxGroup writes, and
// every updateFirst one), commits it, and tells the write then first in
// the queue to lead, which may be itself.
func (c *committer) enqueue(fn func(*bolt.Tx) error, first bool) error {
	w := &write{fn: fn, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	c.mu.Lock()
	if first {
		c.queue = slices.Insert(c.queue, c.first, w)
		c.first++
	} else {
		c.queue = append(c.queue, w)
	}
	if !c.busy {
		c.busy = true
		c.queue[0].lead <- struct{}{}
	}
	c.mu.Unlock()
	for {
		select {
		case <-w.done:
			if w.panicked != nil {
				panic(w.panicked)
			}
			return w.err
		case <-w.lead:
		}
		c.lead()
	}
}

// lead takes the next group from the front of the queue, commits it, and
// tells the write then first in the queue to lead. However the commit
// ends, the writes of the group are answered and the lead is handed on:
// a write left unanswered would wait for good, and so would every later
// one, with busy left set.
func (c *committer) lead() {
	c.mu.Lock()
	n := max(c.first, min(len(c.queue), maxGroup))
	group := slices.Clone(c.queue[:n])
	c.queue = slices.Delete(c.queue, 0, n)
	c.first = 0
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if len(c.queue) > 0 {
			c.queue[0].lead <- struct{}{}
		} else {
			c.busy = false
		}
		c.mu.Unlock()
	}()
	ended := false
	defer func() {
		if ended {
			return
		}
		// The commit stopped short, by a panic outside the writes'
		// functions (in bbolt) or by a function that ended its
		// goroutine: each write not answered yet gets an error.
		err := errors.New("commit did not complete")
		if p := recover(); p != nil {
			err = fmt.Errorf("commit panicked: %v", p)
		}
		for _, w := range group {
			// commit deletes the writes it answered alone from its
			// slice, which shares this one's array, leaving nils at
			// its end.
			if w != nil && !w.answered {
				w.answer(err)
			}
		}
	}()
	c.commit(group)
	ended = true
}

// commit runs the group in one transaction and tells each write its
// outcome; a write that fails runs again alone, unless it panicked.
func (c *committer) commit(group []*write) {
	for len(group) > 0 {
		failed := -1
		err := c.db.Update(func(tx *bolt.Tx) error {
			for i, w := range group {
				if err := w.run(tx); err != nil {
					failed = i
					return err
				}
			}
			return nil
		})
		if failed < 0 {
			for _, w := range group {
				w.answer(err)
			}
			return
		}
		w := group[failed]
		group = slices.Delete(group, failed, failed+1)
		if failed > 0 && w.panicked == nil { // it ran after others: run it again alone
			err = c.db.Update(w.run)
		}
		w.answer(err)
	}
}

func (s *Store) pruneLoop(every time.Duration) {
	defer s.done.Done()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.prunePass(now)
		}
	}
}

// prunePass prunes, and logs a prune that failed: it is tried again on the
// next tick and nothing is lost, but a file whose prunes keep failing
// keeps what has lapsed, and grows.
func (s *Store) prunePass(now time.Time) {
	if err := s.prune(now); err != nil {
		s.log.Warn("prune the embedded store; retried at the next prune", "err", err)
	}
}

// pruneChunk bounds the keys one write transaction of a prune acts on, so
// that a prune with much to delete (after a downtime, or with the
// retention made shorter: tens of thousands of runs) holds up the other
// writes for one chunk at a time, not for all of it.
const pruneChunk = 500

// prune deletes runs, conversations, inboxes, leases and event ids whose
// time has passed, and the listings that nothing reads. It applies its
// rules one after the other: it finds the keys of a rule in a read
// transaction, which the writes of the bot do not wait for, and acts on
// them in write transactions of up to pruneChunk keys, which check each
// key again and are queued as every other write (see committer), so that
// neither a scan of a large file nor a long deletion holds up the writes.
// Then it trims the audit entries older than AuditRetention, pruneChunk at
// a time too, which Audit trims only when an entry is added: a log nothing
// is written to would keep them otherwise. That trim reads the oldest
// entries only, up to the first recent one. A prune that Close cuts short
// leaves the rest to the next.
func (s *Store) prune(now time.Time) error {
	for _, r := range s.pruneRules(now) {
		var found [][]byte
		err := s.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(r.bucket).ForEach(func(k, v []byte) error {
				if r.due(tx, k, v) {
					found = append(found, bytes.Clone(k))
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		for chunk := range slices.Chunk(found, pruneChunk) {
			if s.stopping() {
				return nil
			}
			var noted [][]byte
			err := s.commits.update(func(tx *bolt.Tx) (err error) {
				noted, err = r.apply(tx, chunk)
				return err
			})
			if err != nil {
				return err
			}
			for _, k := range noted {
				s.log.Warn("a record of the embedded store cannot be read (a damaged file): it is kept as it is until a prune deletes it",
					"bucket", string(r.bucket), "key", string(k), "deleted_after", now.Add(r.life))
			}
			s.chunkDone()
		}
	}
	cutoff := now.Add(-s.auditTTL)
	for more := true; more; {
		if s.stopping() {
			return nil
		}
		err := s.commits.update(func(tx *bolt.Tx) (err error) {
			b := tx.Bucket(bucketAudit)
			aged, err := trimAudit(b, cutoff, pruneChunk)
			if err != nil {
				return err
			}
			beyond, err := s.capAudit(b, pruneChunk)
			more = aged || beyond
			return err
		})
		if err != nil {
			return err
		}
		s.chunkDone()
	}
	return nil
}

// stopping reports whether Close was called.
func (s *Store) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// chunkDone tells a test that prune committed a chunk.
func (s *Store) chunkDone() {
	if s.afterChunk != nil {
		s.afterChunk()
	}
}

// pruneRule says which keys of a bucket prune acts on (due, asked in the
// read transaction that finds them and again in the write transaction
// that acts on them) and what it does with each (act; nil deletes the
// key). An act that noted its record as unreadable (see lifeRule) says so,
// and prune logs the note once it is committed, with the record's
// deletion time, life from then.
type pruneRule struct {
	bucket []byte
	due    func(tx *bolt.Tx, k, v []byte) bool
	act    func(tx *bolt.Tx, k, v []byte) (noted bool, err error)
	life   time.Duration
}

// apply acts on those of keys that are still due, in tx, and returns
// those it noted as unreadable.
func (r pruneRule) apply(tx *bolt.Tx, keys [][]byte) (noted [][]byte, err error) {
	b := tx.Bucket(r.bucket)
	for _, k := range keys {
		v := b.Get(k)
		if v == nil || !r.due(tx, k, v) {
			continue
		}
		if r.act == nil {
			if err := b.Delete(k); err != nil {
				return nil, err
			}
			continue
		}
		note, err := r.act(tx, k, v)
		if err != nil {
			return nil, err
		}
		if note {
			noted = append(noted, k)
		}
	}
	return noted, nil
}

// expiry is the deletion time of a run, conversation or inbox record.
type expiry struct {
	DeleteAt time.Time `json:"delete_at"`
}

// deleteAtOf reads the deletion time of a run, conversation or inbox
// record. Records written now have it first, where it is read without
// going through the rest (a conversation's history can be hundreds of
// KiB, and prune reads every record); others are decoded whole.
func deleteAtOf(v []byte) (time.Time, error) {
	const first = `{"delete_at":"`
	if rest, ok := bytes.CutPrefix(v, []byte(first)); ok {
		if end := bytes.IndexByte(rest, '"'); end >= 0 {
			if t, err := time.Parse(time.RFC3339Nano, string(rest[:end])); err == nil {
				return t, nil
			}
		}
	}
	var e expiry
	err := json.Unmarshal(v, &e)
	return e.DeleteAt, err
}

// pruneRules are the rules of a prune at now, in the order they apply: an
// inbox is deleted before the listing of its conversation, a run before
// the index entries its calls leave.
func (s *Store) pruneRules(now time.Time) []pruneRule {
	deleteAt := func(_ *bolt.Tx, _, v []byte) bool {
		at, err := deleteAtOf(v)
		return err == nil && !at.After(now)
	}
	rules := []pruneRule{
		// A run goes with its calls, found by their numbers (see
		// dropRun), whatever the rest of its record holds. One whose
		// deletion time cannot be read (a damaged record) is ended
		// when a prune first finds it, and deleted Retention after
		// that (see lifeRule); what reads runs passes it over
		// meanwhile.
		s.lifeRule(bucketRuns, now, s.retention, endRun, dropRun),
		// The state of a run that is gone, which an earlier version,
		// opening the file in between, deletes without it.
		{bucket: bucketStates, due: func(tx *bolt.Tx, k, _ []byte) bool {
			return tx.Bucket(bucketRuns).Get(k) == nil
		}},
		s.lifeRule(bucketConvs, now, s.convTTL, nil, nil),
		{bucket: bucketLeases, due: func(_ *bolt.Tx, _, v []byte) bool {
			var l leaseRecord
			return json.Unmarshal(v, &l) == nil && !l.Until.After(now)
		}},
		{bucket: bucketSeen, due: func(_ *bolt.Tx, _, v []byte) bool {
			return !decodeTime(v).After(now)
		}},
		s.lifeRule(bucketInbox, now, s.convTTL, nil, nil),
		// The listing of a run finished or gone, which an earlier
		// version, opening the file in between, may have left.
		{bucket: bucketDecided, due: func(tx *bolt.Tx, k, _ []byte) bool {
			var rec runRecord
			ok, err := getRun(tx, string(k), &rec)
			return err == nil && (!ok || rec.Finished)
		}},
		// The listing of a conversation with no inbox left, older than a
		// conversation lives.
		{bucket: bucketUnans, due: func(tx *bolt.Tx, k, v []byte) bool {
			if !decodeTime(v).Add(s.convTTL).Before(now) {
				return false
			}
			inbox := tx.Bucket(bucketInbox).Get(k)
			return inbox == nil || deleteAt(tx, k, inbox)
		}},
	}
	// The entries of the pending-call and reminder indexes of a call that
	// is not pending, which unlistPending leaves when it cannot read the
	// call (a damaged record): no listing reads them (each passes over a
	// call not in bucketPending), and nothing else would delete them.
	for _, b := range [][]byte{bucketByExpiry, bucketByCreated, bucketByField, bucketRemind} {
		rules = append(rules, pruneRule{bucket: b, due: func(tx *bolt.Tx, k, _ []byte) bool {
			id, ok := indexedCall(b, k)
			return !ok || tx.Bucket(bucketPending).Get(id) == nil
		}})
	}
	// The note of a record found unreadable (see lifeRule) that is gone,
	// or that can be read again (saved since).
	return append(rules, pruneRule{bucket: bucketUnreadable, due: func(tx *bolt.Tx, k, _ []byte) bool {
		var v []byte
		if name, key, ok := bytes.Cut(k, []byte{0}); ok {
			if b := tx.Bucket(name); b != nil {
				v = b.Get(key)
			}
		}
		if v == nil {
			return true
		}
		_, err := deleteAtOf(v)
		return err == nil
	}})
}

// lifeRule is the rule of a bucket of records that hold their deletion
// time (see deleteAtOf): runs (life is Retention), and conversation
// records, conversations and inboxes, which live ConversationTTL from
// their last save (life is ConversationTTL). A record is deleted once its
// deletion time passes, after drop, if not nil, deleted what goes with
// it. One whose deletion time cannot be read (a damaged record) is noted
// in bucketUnreadable by the first prune that finds it, after end, if not
// nil, ended what it stands for, and deleted (after drop) life after
// that; the prune logs the note. A conversation record was saved before
// then, so it is past its life by then, and a person may look at it
// meanwhile; kept for good, it would stop its conversation for good:
// every turn and every message of the conversation reads it. A run that
// cannot be read cannot go on (deciding its calls and resuming it read
// it), so it is ended then, as finishing it would end it (see endRun),
// and kept Retention after that, as a finished run is; kept for good, its
// calls would be listed for good, and the expiry sweep, which cannot
// expire them, would be handed them again and again.
func (s *Store) lifeRule(bucket []byte, now time.Time, life time.Duration, end, drop func(tx *bolt.Tx, k []byte) error) pruneRule {
	// judge says whether the record k, v is to be deleted, or noted as
	// unreadable.
	judge := func(tx *bolt.Tx, k, v []byte) (del, note bool) {
		if at, err := deleteAtOf(v); err == nil {
			return !at.After(now), false
		}
		since := tx.Bucket(bucketUnreadable).Get(unreadableKey(bucket, k))
		if since == nil {
			return false, true
		}
		return !decodeTime(since).Add(life).After(now), false
	}
	return pruneRule{
		bucket: bucket,
		life:   life,
		due: func(tx *bolt.Tx, k, v []byte) bool {
			del, note := judge(tx, k, v)
			return del || note
		},
		act: func(tx *bolt.Tx, k, v []byte) (bool, error) {
			notes := tx.Bucket(bucketUnreadable)
			if _, note := judge(tx, k, v); note {
				if end != nil {
					if err := end(tx, k); err != nil {
						return false, err
					}
				}
				return true, notes.Put(unreadableKey(bucket, k), encodeTime(now))
			}
			if drop != nil {
				if err := drop(tx, k); err != nil {
					return false, err
				}
			}
			if err := notes.Delete(unreadableKey(bucket, k)); err != nil {
				return false, err
			}
			return false, tx.Bucket(bucket).Delete(k)
		},
	}
}

// unreadableKey is the bucketUnreadable key of the record k of bucket: the
// bucket's name, a zero byte (which no bucket name holds) and k.
func unreadableKey(bucket, k []byte) []byte {
	return slices.Concat(bucket, []byte{0}, k)
}

// errUnreadable is a record that cannot be read (a damaged one). What
// meets one passes it over where it can, so that it stops no more than
// what needs it: finishing a run takes the run's calls out of Pending
// whatever they hold.
var errUnreadable = errors.New("unreadable record")

// dropRun deletes the calls of the run k, with their notes and listings,
// and takes the run out of the decided runs. It finds the calls by their
// numbers, store.CallID(k, 0), (k, 1) and on up to the first missing,
// without reading the run's record, which holds the run's state (a
// conversation's history, large) and may be damaged: CreateRun takes a
// run's calls numbered so only (see newrun.Prepare; the bot always
// numbered them so), and they are deleted with the run only. A call it
// cannot read is deleted all the same: nothing could read it later
// either (prune deletes the index entries unlistPending cannot find
// without it).
func dropRun(tx *bolt.Tx, k []byte) error {
	err := runCalls(tx, k, func(id []byte) error {
		if err := tx.Bucket(bucketCalls).Delete(id); err != nil {
			return err
		}
		return tx.Bucket(bucketNotes).Delete(id)
	})
	if err != nil {
		return err
	}
	return tx.Bucket(bucketStates).Delete(k)
}

// endRun ends the run k, whose record cannot be read, as finishRun ends a
// run, without reading the record: its calls, found by their numbers (see
// dropRun), are taken out of the pending calls and their indexes, and the
// run out of the decided runs. The records are left as they are.
func endRun(tx *bolt.Tx, k []byte) error {
	return runCalls(tx, k, func([]byte) error { return nil })
}

// runCalls takes the calls of the run k, found by their numbers (see
// dropRun), out of the pending calls and their indexes, and calls fn with
// each id, and takes the run out of the decided runs.
func runCalls(tx *bolt.Tx, k []byte, fn func(id []byte) error) error {
	calls := tx.Bucket(bucketCalls)
	for i := 0; ; i++ {
		id := []byte(store.CallID(string(k), i))
		if calls.Get(id) == nil {
			break
		}
		if err := unlistPending(tx, string(id)); err != nil && !errors.Is(err, errUnreadable) {
			return err
		}
		if err := fn(id); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketDecided).Delete(k)
}

// remindKey is the bucketRemind key of a call reminded at t: in time
// order, then by id.
func remindKey(t time.Time, callID string) []byte {
	return append(encodeTime(t), callID...)
}

func encodeTime(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }
func decodeTime(b []byte) time.Time {
	if len(b) != 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}

// get decodes the JSON value of key in b into v; false if absent.
func get(b *bolt.Bucket, key string, v any) (bool, error) {
	raw := b.Get([]byte(key))
	if raw == nil {
		return false, nil
	}
	if err := fastjson.Unmarshal(raw, v); err != nil {
		return false, fmt.Errorf("decode %s: %w", key, err)
	}
	return true, nil
}

// put encodes v as the JSON value of key in b.
func put(b *bolt.Bucket, key string, v any) error {
	raw, err := store.EncodeJSON(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return b.Put([]byte(key), raw)
}

// stateApart stands in a run's record for its state, kept in bucketStates
// (see putRun). It is a JSON string, which no state is: an earlier
// version, reading the record, fails to decode the state and resumes
// nothing, where a null or an empty state would resume the run with no
// history and replace its conversation's.
var stateApart = json.RawMessage(`"state kept apart"`)

// getRun decodes run runID's record into rec, its state left out (see
// putRun) unless the record is an earlier version's, which held it; false
// if absent.
func getRun(tx *bolt.Tx, runID string, rec *runRecord) (bool, error) {
	ok, err := get(tx.Bucket(bucketRuns), runID, rec)
	if ok && bytes.Equal(rec.Run.State, stateApart) {
		rec.Run.State = nil
	}
	return ok, err
}

// putRun writes run runID's record rec without the run's state, which is
// written once, at the run's creation, in bucketStates: the record
// changes with each decision, claim and renewal, and a conversation's
// history, which the state holds, can be hundreds of KiB that each
// would write again (a 256 KiB state made a decision and its resume's
// bookkeeping 9 to 28 ms of encoding and page writes, every other
// conversation's writes waiting behind them). A record of an earlier
// version, which held its state, has it moved there.
func putRun(tx *bolt.Tx, runID string, rec runRecord) error {
	states := tx.Bucket(bucketStates)
	if st := rec.Run.State; len(st) > 0 && states.Get([]byte(runID)) == nil {
		if err := states.Put([]byte(runID), st); err != nil {
			return err
		}
	}
	rec.Run.State = stateApart
	return put(tx.Bucket(bucketRuns), runID, rec)
}

// runState returns the state of run runID, whose record is rec (see
// putRun).
func runState(tx *bolt.Tx, runID string, rec runRecord) json.RawMessage {
	if st := tx.Bucket(bucketStates).Get([]byte(runID)); st != nil {
		return bytes.Clone(st)
	}
	return rec.Run.State
}

// SaveConversation replaces the conversation record; it is kept for
// ConversationTTL after the last save. A zero UpdatedAt is set to now.
func (s *Store) SaveConversation(ctx context.Context, c store.Conversation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = now
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return s.saveConversation(tx, c, now) })
	if err != nil {
		return fmt.Errorf("save conversation %s: %w", c.Key, err)
	}
	return nil
}

func (s *Store) saveConversation(tx *bolt.Tx, c store.Conversation, now time.Time) error {
	return put(tx.Bucket(bucketConvs), c.Key, convRecord{Conversation: c, DeleteAt: now.Add(s.convTTL)})
}

// LoadConversation returns the conversation, or store.ErrNotFound.
func (s *Store) LoadConversation(ctx context.Context, key string) (store.Conversation, error) {
	if err := ctx.Err(); err != nil {
		return store.Conversation{}, err
	}
	var rec convRecord
	var ok bool
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		ok, err = get(tx.Bucket(bucketConvs), key, &rec)
		return err
	})
	if err != nil {
		return store.Conversation{}, fmt.Errorf("load conversation %s: %w", key, err)
	}
	if !ok {
		return store.Conversation{}, fmt.Errorf("load conversation %s: %w", key, store.ErrNotFound)
	}
	return rec.Conversation, nil
}

// CreateRun saves the run and its calls, and marks the conversation as
// paused on the run, in one transaction. See storetest.Store for the
// contract.
func (s *Store) CreateRun(ctx context.Context, r store.Run, calls []store.Call) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	r, calls, err := newrun.Prepare(r, calls, now)
	if err != nil {
		return fmt.Errorf("create run: %w", err)
	}
	err = s.commits.update(func(tx *bolt.Tx) error { return s.createRun(tx, r, calls, now) })
	if err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return nil
}

// createRun writes a run prepared by newrun.Prepare and its calls.
func (s *Store) createRun(tx *bolt.Tx, r store.Run, calls []store.Call, now time.Time) error {
	if tx.Bucket(bucketRuns).Get([]byte(r.ID)) != nil {
		return store.ErrRunExists
	}
	rec := runRecord{Run: r, Pending: len(calls), DeleteAt: r.ExpiresAt.Add(s.retention)}
	if err := putRun(tx, r.ID, rec); err != nil {
		return err
	}
	for _, c := range calls {
		if err := put(tx.Bucket(bucketCalls), c.ID, c); err != nil {
			return err
		}
		if err := listPending(tx, c); err != nil {
			return err
		}
	}
	if r.Conversation == "" {
		return nil
	}
	convs := tx.Bucket(bucketConvs)
	var conv convRecord
	if _, err := get(convs, r.Conversation, &conv); err != nil {
		return err
	}
	conv.Conversation.Key = r.Conversation
	conv.Conversation.PausedRun = r.ID
	conv.DeleteAt = now.Add(s.convTTL)
	return put(convs, r.Conversation, conv)
}

// LoadRun returns the run and its calls in CallIDs order, or
// store.ErrNotFound.
func (s *Store) LoadRun(ctx context.Context, runID string) (store.Run, []store.Call, error) {
	if err := ctx.Err(); err != nil {
		return store.Run{}, nil, err
	}
	var rec runRecord
	var calls []store.Call
	err := s.db.View(func(tx *bolt.Tx) error {
		ok, err := getRun(tx, runID, &rec)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		rec.Run.State = runState(tx, runID, rec)
		for _, id := range rec.Run.CallIDs {
			var c store.Call
			ok, err := get(tx.Bucket(bucketCalls), id, &c)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("call %s: %w", id, store.ErrNotFound)
			}
			calls = append(calls, c)
		}
		return nil
	})
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	rec.Run.Finished = rec.Finished
	return rec.Run, calls, nil
}

// GetCall returns one call or store.ErrNotFound.
func (s *Store) GetCall(ctx context.Context, callID string) (store.Call, error) {
	if err := ctx.Err(); err != nil {
		return store.Call{}, err
	}
	var c store.Call
	err := s.db.View(func(tx *bolt.Tx) error {
		ok, err := get(tx.Bucket(bucketCalls), callID, &c)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Call{}, fmt.Errorf("get call %s: %w", callID, err)
	}
	return c, nil
}

// Approve is ApproveAudited with no effects.
func (s *Store) Approve(ctx context.Context, callID, fingerprint string, a store.Approval, edit *store.Proposal, need int, d store.Decision) (store.Call, bool, error) {
	return s.ApproveAudited(ctx, callID, fingerprint, a, nil, edit, need, d, store.Effects{})
}

// Decide is DecideAudited with no effects.
func (s *Store) Decide(ctx context.Context, callID, fingerprint string, d store.Decision) (store.Call, bool, error) {
	return s.DecideAudited(ctx, callID, fingerprint, d, store.Effects{})
}

// ClaimResume is one transaction: see storetest.Store for the contract.
func (s *Store) ClaimResume(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if lease <= 0 {
		return false, fmt.Errorf("claim resume of run %s: lease %v is not positive", runID, lease)
	}
	var claimed bool
	err := s.commits.update(func(tx *bolt.Tx) error {
		claimed = false
		var rec runRecord
		ok, err := getRun(tx, runID, &rec)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		now := time.Now()
		if rec.Finished || rec.Pending > 0 || rec.ClaimUntil.After(now) {
			return nil
		}
		rec.ClaimOwner, rec.ClaimUntil = owner, now.Add(lease)
		rec.ClaimNonce, rec.ClaimStarted = "", ""
		claimed = true
		return putRun(tx, runID, rec)
	})
	if err != nil {
		return false, fmt.Errorf("claim resume of run %s: %w", runID, err)
	}
	return claimed, nil
}

// BeginExecution is one transaction: see storetest.Store for the contract.
func (s *Store) BeginExecution(ctx context.Context, callID, attempt string) (bool, error) {
	var begun bool
	err := s.updateCall(ctx, callID, func(c *store.Call) (bool, error) {
		if c.Executing {
			// Asked again by the sending that set it (see the contract).
			begun = attempt != "" && c.ExecAttempt == attempt
			return false, nil
		}
		begun = c.Status == store.Decided
		c.Executing, c.ExecAttempt = true, attempt
		return begun, nil
	})
	if err != nil {
		return false, fmt.Errorf("begin execution of call %s: %w", callID, err)
	}
	return begun, nil
}

// updateCall reads the call callID, lets edit change it, and writes it if
// edit says so, in one transaction (a commit that may run edit again);
// store.ErrNotFound if there is no such call.
func (s *Store) updateCall(ctx context.Context, callID string, edit func(c *store.Call) (write bool, err error)) error {
	return s.updateCallAudited(ctx, callID, store.AuditEntry{}, edit)
}

// updateCallAudited is updateCall that also appends e, if it has an
// Action, to the audit log when the call is written.
func (s *Store) updateCallAudited(ctx context.Context, callID string, e store.AuditEntry, edit func(c *store.Call) (write bool, err error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.commits.update(func(tx *bolt.Tx) error {
		var c store.Call
		ok, err := get(tx.Bucket(bucketCalls), callID, &c)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		write, err := edit(&c)
		if err != nil || !write {
			return err
		}
		if e.Action != "" {
			if err := s.audit(tx, e); err != nil {
				return err
			}
		}
		return put(tx.Bucket(bucketCalls), callID, c)
	})
}

// PutCallNote is one transaction; the note is deleted with the call's
// run. See storetest.Store for the contract.
func (s *Store) PutCallNote(ctx context.Context, callID string, note []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketCalls).Get([]byte(callID)) == nil {
			return store.ErrNotFound
		}
		return tx.Bucket(bucketNotes).Put([]byte(callID), slices.Clone(note))
	})
	if err != nil {
		return fmt.Errorf("put note of call %s: %w", callID, err)
	}
	return nil
}

// CallNote is one read transaction: see storetest.Store for the contract.
func (s *Store) CallNote(ctx context.Context, callID string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var note []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketCalls).Get([]byte(callID)) == nil {
			return store.ErrNotFound
		}
		note = slices.Clone(tx.Bucket(bucketNotes).Get([]byte(callID)))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("get note of call %s: %w", callID, err)
	}
	return note, nil
}

// AbandonExecution is one transaction: see storetest.Store for the
// contract.
func (s *Store) AbandonExecution(ctx context.Context, callID, attempt string) error {
	err := s.updateCall(ctx, callID, func(c *store.Call) (bool, error) {
		if !c.Executing || len(c.Result) > 0 || attempt == "" || c.ExecAttempt != attempt {
			return false, nil
		}
		c.Executing, c.ExecAttempt = false, ""
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("abandon execution of call %s: %w", callID, err)
	}
	return nil
}

// SaveResult keeps the result of an executing call and appends its audit
// entry, in one transaction.
func (s *Store) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	if len(result) == 0 {
		return fmt.Errorf("save result of call %s: empty result", callID)
	}
	err := s.updateCallAudited(ctx, callID, e, func(c *store.Call) (bool, error) {
		switch {
		case !c.Executing:
			return false, fmt.Errorf("not executing: %w", store.ErrConflict)
		case len(c.Result) > 0 && sameJSON(c.Result, result):
			return false, nil // saved already
		case len(c.Result) > 0:
			return false, fmt.Errorf("another result is saved: %w", store.ErrConflict)
		}
		c.Result = append(json.RawMessage(nil), result...)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("save result of call %s: %w", callID, err)
	}
	return nil
}

// SkipExecution marks a decided call started and keeps result with it,
// in one transaction: see storetest.Store for the contract.
func (s *Store) SkipExecution(ctx context.Context, callID string, result []byte) error {
	if len(result) == 0 {
		return fmt.Errorf("skip execution of call %s: empty result", callID)
	}
	err := s.updateCall(ctx, callID, func(c *store.Call) (bool, error) {
		switch {
		case c.Executing && len(c.Result) > 0 && sameJSON(c.Result, result):
			return false, nil // saved already
		case c.Executing:
			return false, fmt.Errorf("started already: %w", store.ErrConflict)
		case c.Status != store.Decided:
			return false, fmt.Errorf("not decided: %w", store.ErrConflict)
		}
		c.Executing, c.ExecAttempt = true, ""
		c.Result = append(json.RawMessage(nil), result...)
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("skip execution of call %s: %w", callID, err)
	}
	return nil
}

// sameJSON reports whether the results a and b are one once compacted, as
// a call's record keeps its result (encoding a json.RawMessage compacts
// it).
func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	return json.Compact(&ca, a) == nil && json.Compact(&cb, b) == nil && bytes.Equal(ca.Bytes(), cb.Bytes())
}

// FinishRun marks the run finished, takes it and its calls out of every
// listing, shortens its life to the retention time and clears the
// conversation's PausedRun if it names the run, in one transaction.
// Finishing a finished run does nothing.
func (s *Store) FinishRun(ctx context.Context, runID string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return s.finishRun(tx, runID, time.Now()) })
	if err != nil {
		return fmt.Errorf("finish run %s: %w", runID, err)
	}
	return nil
}

// finishRun finishes a run: store.ErrNotFound if it is unknown, nothing if
// it is finished.
func (s *Store) finishRun(tx *bolt.Tx, runID string, now time.Time) error {
	var rec runRecord
	ok, err := getRun(tx, runID, &rec)
	if err != nil {
		return err
	}
	if !ok {
		return store.ErrNotFound
	}
	if rec.Finished {
		return nil
	}
	rec.Finished = true
	rec.ClaimOwner, rec.ClaimUntil = "", time.Time{}
	if t := now.Add(s.retention); t.Before(rec.DeleteAt) {
		rec.DeleteAt = t
	}
	if err := putRun(tx, runID, rec); err != nil {
		return err
	}
	if err := tx.Bucket(bucketDecided).Delete([]byte(runID)); err != nil {
		return err
	}
	for _, id := range rec.Run.CallIDs {
		// A call that cannot be read is no longer pending all the same:
		// a run is finished whatever its calls hold.
		if err := unlistPending(tx, id); err != nil && !errors.Is(err, errUnreadable) {
			return err
		}
	}
	if rec.Run.Conversation == "" {
		return nil
	}
	convs := tx.Bucket(bucketConvs)
	var conv convRecord
	ok, err = get(convs, rec.Run.Conversation, &conv)
	// A conversation that cannot be read (a damaged record) is paused on
	// no run that anyone can tell: the run is finished all the same, as it
	// is whatever its calls hold, and prune deletes the record in time
	// (see lifeRule).
	if err != nil || !ok || conv.Conversation.PausedRun != runID {
		return nil
	}
	conv.Conversation.PausedRun = ""
	return put(convs, rec.Run.Conversation, conv)
}

// Pending lists pending calls matching f, oldest first, from the index of
// one of f's fields (or of every pending call); with f.Limit > 0 it stops
// after f.Limit.
func (s *Store) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Call
	bucket, prefix := pendingIndex(f)
	err := s.db.View(func(tx *bolt.Tx) error {
		return scanIndex(tx, bucket, prefix, func(_ time.Time, c store.Call) bool {
			if f.Match(c) {
				out = append(out, c)
			}
			return f.Limit > 0 && len(out) == f.Limit
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list pending calls: %w", err)
	}
	return out, nil
}

// Due lists up to limit pending calls whose ExpiresAt is at or before now,
// earliest expiry first, from the expiry index; limit <= 0 lists all.
func (s *Store) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Call
	err := s.db.View(func(tx *bolt.Tx) error {
		return scanIndex(tx, bucketByExpiry, nil, func(at time.Time, c store.Call) bool {
			if at.After(now) {
				return true
			}
			out = append(out, c)
			return limit > 0 && len(out) == limit
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list due calls: %w", err)
	}
	return out, nil
}

// NextExpiry returns the earliest ExpiresAt of a pending call, from the
// expiry index, or the zero time if none is pending.
func (s *Store) NextExpiry(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	var next time.Time
	err := s.db.View(func(tx *bolt.Tx) error {
		return scanIndex(tx, bucketByExpiry, nil, func(_ time.Time, c store.Call) bool {
			next = c.ExpiresAt
			return true
		})
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("next expiry: %w", err)
	}
	return next, nil
}

// DueReminders lists up to limit pending calls whose RemindAt is at or
// before now, earliest first, from the reminder index (limit <= 0: all).
// Decide, Approve and FinishRun take a call out of the index in the
// transaction that takes it out of Pending.
func (s *Store) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.Call
	err := s.db.View(func(tx *bolt.Tx) error {
		calls, pending := tx.Bucket(bucketCalls), tx.Bucket(bucketPending)
		cur := tx.Bucket(bucketRemind).Cursor()
		for k, _ := cur.First(); k != nil && len(k) > 8; k, _ = cur.Next() {
			if decodeTime(k[:8]).After(now) || (limit > 0 && len(out) == limit) {
				break
			}
			id := string(k[8:])
			if pending.Get([]byte(id)) == nil {
				continue
			}
			var c store.Call
			ok, err := get(calls, id, &c)
			if err != nil {
				return err
			}
			if ok {
				out = append(out, c)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list due reminders: %w", err)
	}
	return out, nil
}

// ClaimReminder is one transaction: see storetest.Store for the contract.
func (s *Store) ClaimReminder(ctx context.Context, callID string, n int, next time.Time) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if n < 1 {
		return false, fmt.Errorf("claim reminder %d of call %s: reminders count from 1", n, callID)
	}
	var claimed bool
	err := s.commits.update(func(tx *bolt.Tx) error {
		claimed = false
		var c store.Call
		ok, err := get(tx.Bucket(bucketCalls), callID, &c)
		if err != nil {
			return err
		}
		if !ok {
			return store.ErrNotFound
		}
		if c.Status != store.Pending || c.RemindAt.IsZero() || c.Reminded >= n || tx.Bucket(bucketPending).Get([]byte(callID)) == nil {
			return nil
		}
		idx := tx.Bucket(bucketRemind)
		if err := idx.Delete(remindKey(c.RemindAt, callID)); err != nil {
			return err
		}
		c.RemindAt, c.Reminded = next, n
		if !next.IsZero() {
			if err := idx.Put(remindKey(next, callID), nil); err != nil {
				return err
			}
		}
		claimed = true
		return put(tx.Bucket(bucketCalls), callID, c)
	})
	if err != nil {
		return false, fmt.Errorf("claim reminder %d of call %s: %w", n, callID, err)
	}
	return claimed, nil
}

// NextReminder returns the earliest RemindAt of a pending call, or the
// zero time if none has a reminder to send.
func (s *Store) NextReminder(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	var next time.Time
	err := s.db.View(func(tx *bolt.Tx) error {
		pending := tx.Bucket(bucketPending)
		cur := tx.Bucket(bucketRemind).Cursor()
		for k, _ := cur.First(); k != nil && len(k) > 8; k, _ = cur.Next() {
			if pending.Get(k[8:]) != nil {
				next = decodeTime(k[:8])
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("next reminder: %w", err)
	}
	return next, nil
}

// Stalled lists up to limit runs with no pending call, not finished and
// with no live resume claim, earliest expiry first; limit <= 0 lists all.
// It reads the decided runs only (bucketDecided), however many are paused.
func (s *Store) Stalled(ctx context.Context, limit int) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	var recs []runRecord
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketDecided).ForEach(func(k, _ []byte) error {
			var rec runRecord
			// A run that cannot be read (a damaged record) is passed
			// over: nothing could resume it, and the others still can.
			if ok, err := getRun(tx, string(k), &rec); err != nil || !ok {
				return nil
			}
			if !rec.Finished && rec.Pending == 0 && !rec.ClaimUntil.After(now) {
				recs = append(recs, rec)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("list stalled runs: %w", err)
	}
	slices.SortFunc(recs, func(a, b runRecord) int {
		return cmp.Or(a.Run.ExpiresAt.Compare(b.Run.ExpiresAt), cmp.Compare(a.Run.ID, b.Run.ID))
	})
	if limit > 0 && len(recs) > limit {
		recs = recs[:limit]
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.Run.ID
	}
	return out, nil
}

// AcquireLease takes the lease on key for owner for ttl, or renews it if
// owner holds it; false if someone else holds a lease that has not run out.
func (s *Store) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("acquire lease %s: ttl %v is not positive", key, ttl)
	}
	var got bool
	err := s.commits.update(func(tx *bolt.Tx) (err error) {
		got, err = acquireLease(tx, key, owner, ttl, time.Now())
		return err
	})
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", key, err)
	}
	return got, nil
}

// acquireLease takes or renews the lease on key for owner; false if
// someone else holds it.
func acquireLease(tx *bolt.Tx, key, owner string, ttl time.Duration, now time.Time) (bool, error) {
	b := tx.Bucket(bucketLeases)
	var rec leaseRecord
	ok, err := get(b, key, &rec)
	if err != nil {
		return false, err
	}
	if ok && rec.Owner != owner && rec.Until.After(now) {
		return false, nil
	}
	return true, put(b, key, leaseRecord{Owner: owner, Until: now.Add(ttl)})
}

// RenewLease extends owner's lease on key to ttl from now; false, changing
// nothing, if the lease ran out or is another owner's.
func (s *Store) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("renew lease %s: ttl %v is not positive", key, ttl)
	}
	var got bool
	err := s.commits.update(func(tx *bolt.Tx) error {
		got = false
		b := tx.Bucket(bucketLeases)
		var rec leaseRecord
		ok, err := get(b, key, &rec)
		now := time.Now()
		if err != nil || !ok || rec.Owner != owner || !rec.Until.After(now) {
			return err
		}
		got = true
		return put(b, key, leaseRecord{Owner: owner, Until: now.Add(ttl)})
	})
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", key, err)
	}
	return got, nil
}

// ReleaseLease frees the lease on key if owner holds it, and does nothing
// otherwise.
func (s *Store) ReleaseLease(ctx context.Context, key, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return releaseLease(tx, key, owner) })
	if err != nil {
		return fmt.Errorf("release lease %s: %w", key, err)
	}
	return nil
}

// releaseLease deletes the lease on key if owner holds it.
func releaseLease(tx *bolt.Tx, key, owner string) error {
	b := tx.Bucket(bucketLeases)
	var rec leaseRecord
	ok, err := get(b, key, &rec)
	if err != nil || !ok || rec.Owner != owner {
		return err
	}
	return b.Delete([]byte(key))
}

// Audit appends an entry and drops the oldest beyond AuditMax. A zero At
// is set to now.
func (s *Store) Audit(ctx context.Context, e store.AuditEntry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error { return s.audit(tx, e) })
	if err != nil {
		return fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return nil
}

// audit appends an entry (a zero At is set to now) and trims the log.
func (s *Store) audit(tx *bolt.Tx, e store.AuditEntry) error {
	if e.At.IsZero() {
		e.At = time.Now()
	}
	raw, err := store.EncodeJSON(e)
	if err != nil {
		return err
	}
	return s.appendAudit(tx, raw)
}

// appendAudit appends an encoded entry, trims the entries older than
// AuditRetention and drops the oldest beyond AuditMax.
func (s *Store) appendAudit(tx *bolt.Tx, raw []byte) error {
	b := tx.Bucket(bucketAudit)
	seq, err := b.NextSequence()
	if err != nil {
		return err
	}
	if err := b.Put(binary.BigEndian.AppendUint64(nil, seq), raw); err != nil {
		return err
	}
	// A write trims a bounded number of entries, so that a backlog (an
	// idle log aged, AUDIT_MAX_ENTRIES lowered) never holds up the write
	// a person waits on: prune works it off in chunks of its own.
	if _, err := trimAudit(b, time.Now().Add(-s.auditTTL), auditTrimPerWrite); err != nil {
		return err
	}
	_, err = s.capAudit(b, auditTrimPerWrite)
	return err
}

// auditTrimPerWrite bounds the audit entries one write trims, of each
// kind (aged, beyond AuditMax).
const auditTrimPerWrite = 100

// capAudit deletes the oldest audit entries beyond AuditMax, up to limit of
// them; more reports that it stopped at limit with such an entry left.
func (s *Store) capAudit(b *bolt.Bucket, limit int) (more bool, err error) {
	seq := b.Sequence()
	if seq <= s.auditMax {
		return false, nil
	}
	first := binary.BigEndian.AppendUint64(nil, seq-s.auditMax+1)
	return deleteFirst(b, limit, func(k, _ []byte) bool { return bytes.Compare(k, first) < 0 })
}

// deleteFirst deletes the first keys of b for which drop holds, up to
// limit of them (limit <= 0: all), stopping at the first it does not hold for; more reports
// that it stopped at limit. The keys are read first and deleted after: a
// cursor read again from the start after each deletion costs more the
// more were deleted in the transaction.
func deleteFirst(b *bolt.Bucket, limit int, drop func(k, v []byte) bool) (more bool, err error) {
	var keys [][]byte
	c := b.Cursor()
	for k, v := c.First(); k != nil && drop(k, v); k, v = c.Next() {
		if limit > 0 && len(keys) == limit {
			more = true
			break
		}
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return false, err
		}
	}
	return more, nil
}

// trimAudit deletes the audit entries from before cutoff, oldest first,
// up to limit of them (limit <= 0: all); more reports that it stopped at
// limit with such an entry left.
func trimAudit(b *bolt.Bucket, cutoff time.Time, limit int) (more bool, err error) {
	return deleteFirst(b, limit, func(_, v []byte) bool {
		// Not a recent entry, nor one to keep for a person to read.
		var e store.AuditEntry
		return json.Unmarshal(v, &e) == nil && e.At.Before(cutoff)
	})
}

// AuditLog returns the newest limit entries younger than AuditRetention,
// newest first; limit <= 0 returns all that are kept.
func (s *Store) AuditLog(ctx context.Context, limit int) ([]store.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []store.AuditEntry
	cutoff := time.Now().Add(-s.auditTTL)
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketAudit).Cursor()
		for k, v := c.Last(); k != nil && (limit <= 0 || len(out) < limit); k, v = c.Prev() {
			var e store.AuditEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decode audit entry: %w", err)
			}
			if e.At.Before(cutoff) {
				break // older entries come before
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read audit log: %w", err)
	}
	return out, nil
}

// PutRecord stores a record with a compare-and-set on its version. Records
// are configuration and never expire. A zero UpdatedAt is set to now.
func (s *Store) PutRecord(ctx context.Context, r store.Record, expectVersion int64) (store.Record, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, err
	}
	if r.UpdatedAt.IsZero() {
		r.UpdatedAt = time.Now()
	}
	err := s.commits.update(func(tx *bolt.Tx) error {
		b, err := tx.Bucket(bucketRecords).CreateBucketIfNotExists([]byte(r.Kind))
		if err != nil {
			return err
		}
		var cur store.Record
		if _, err := get(b, r.ID, &cur); err != nil {
			return err
		}
		if expectVersion >= 0 && expectVersion != cur.Version {
			return store.ErrConflict
		}
		r.Version = cur.Version + 1
		if err := put(b, r.ID, r); err != nil {
			return err
		}
		return bumpRecordsVersion(tx)
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("put record %s/%s: %w", r.Kind, r.ID, err)
	}
	return r, nil
}

// Records lists a kind's records by id.
func (s *Store) Records(ctx context.Context, kind string) ([]store.Record, error) {
	out, err := s.RecordsOf(ctx, kind)
	return out[kind], err
}

// RecordsOf lists the records of several kinds in one read transaction,
// each kind's as Records lists them (VersionedRecords, without the
// version).
func (s *Store) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	out, _, err := s.VersionedRecords(ctx, kinds...)
	return out, err
}

// VersionedRecords is RecordsOf with the version of the records, in the
// same read transaction.
func (s *Store) VersionedRecords(ctx context.Context, kinds ...string) (map[string][]store.Record, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	var out map[string][]store.Record
	var version int64
	err := s.db.View(func(tx *bolt.Tx) (err error) {
		out, err = recordsOf(tx, kinds)
		version = recordsVersion(tx)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list records %v: %w", kinds, err)
	}
	return out, version, nil
}

// recordsOf lists the records of each kind, as RecordsOf does; nil for
// no kinds.
func recordsOf(tx *bolt.Tx, kinds []string) (map[string][]store.Record, error) {
	if len(kinds) == 0 {
		return nil, nil
	}
	out := make(map[string][]store.Record, len(kinds))
	for _, kind := range kinds {
		var recs []store.Record
		if b := tx.Bucket(bucketRecords).Bucket([]byte(kind)); b != nil {
			err := b.ForEach(func(k, v []byte) error {
				var r store.Record
				if err := json.Unmarshal(v, &r); err != nil {
					return fmt.Errorf("decode record %s/%s: %w", kind, k, err)
				}
				recs = append(recs, r)
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		out[kind] = recs
	}
	return out, nil
}

// metaRecordsVersion counts the changes of records (PutRecord,
// DeleteRecord) in bucketMeta.
var metaRecordsVersion = []byte("records-version")

// recordsVersion is store.Begun.RecordsVersion: the count of record
// changes plus one, so that it is never zero.
func recordsVersion(tx *bolt.Tx) int64 {
	var n uint64
	if v := tx.Bucket(bucketMeta).Get(metaRecordsVersion); len(v) == 8 {
		n = binary.BigEndian.Uint64(v)
	}
	return int64(n) + 1
}

// bumpRecordsVersion counts a change of records.
func bumpRecordsVersion(tx *bolt.Tx) error {
	n := recordsVersion(tx) // the count plus one: the new count
	return tx.Bucket(bucketMeta).Put(metaRecordsVersion, binary.BigEndian.AppendUint64(nil, uint64(n)))
}

// DeleteRecord deletes a record, or returns store.ErrNotFound.
func (s *Store) DeleteRecord(ctx context.Context, kind, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := s.commits.update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords).Bucket([]byte(kind))
		if b == nil || b.Get([]byte(id)) == nil {
			return store.ErrNotFound
		}
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
		return bumpRecordsVersion(tx)
	})
	if err != nil {
		return fmt.Errorf("delete record %s/%s: %w", kind, id, err)
	}
	return nil
}

// SeenEvent records an event id for ttl; true if it was new or its
// previous record had run out.
func (s *Store) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, fmt.Errorf("record event %s: ttl %v is not positive", id, ttl)
	}
	var fresh bool
	err := s.commits.update(func(tx *bolt.Tx) error {
		fresh = false
		b := tx.Bucket(bucketSeen)
		now := time.Now()
		if v := b.Get([]byte(id)); v != nil && decodeTime(v).After(now) {
			return nil
		}
		fresh = true
		return b.Put([]byte(id), encodeTime(now.Add(ttl)))
	})
	if err != nil {
		return false, fmt.Errorf("record event %s: %w", id, err)
	}
	return fresh, nil
}
