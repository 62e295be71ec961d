package boltstore

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/toolgate/toolgate/store"
)

// damage overwrites the records of keys in bucket with bytes that are not
// JSON, as a damaged file holds them.
func damage(tb testing.TB, s *Store, bucket []byte, keys ...string) {
	tb.Helper()
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, k := range keys {
			if err := tx.Bucket(bucket).Put([]byte(k), []byte("not json")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// raw returns the stored bytes of key in bucket, nil if it is absent.
func raw(tb testing.TB, s *Store, bucket []byte, key string) []byte {
	tb.Helper()
	var v []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		v = slices.Clone(tx.Bucket(bucket).Get([]byte(key)))
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// A call record that cannot be read (a damaged file) fails neither the
// finish of its run, by FinishRun or by a turn's commit, nor the prune
// that drops the run once its retention ends, at Open or later: the call
// and its note are dropped with the run.
func TestDamagedCallIsDroppedWithItsRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	opts := Options{Retention: time.Millisecond, PruneInterval: time.Hour}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	runs := pause(t, s, 4, 2)
	done, finished, committed, pending := runs[0], runs[1], runs[2], runs[3]
	// done is finished before its call is damaged; its retention ends
	// before the next Open.
	if err := s.FinishRun(ctx, done.ID); err != nil {
		t.Fatal(err)
	}
	var damaged []string
	for _, r := range runs {
		if err := s.PutCallNote(ctx, r.CallIDs[0], []byte("note")); err != nil {
			t.Fatal(err)
		}
		damaged = append(damaged, r.CallIDs[0])
	}
	// The calls had reminders to send, which the damage hides with the
	// rest of their records.
	err = s.db.Update(func(tx *bolt.Tx) error {
		for _, id := range damaged {
			if err := tx.Bucket(bucketRemind).Put(remindKey(time.Now().Add(30*time.Minute), id), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	damage(t, s, bucketCalls, damaged...)
	if err := s.FinishRun(ctx, finished.ID); err != nil {
		t.Errorf("FinishRun of a run with a damaged call = %v, want nil", err)
	}
	if err := s.CommitTurn(ctx, store.Commit{Key: committed.Conversation, Finish: committed.ID}); err != nil {
		t.Errorf("CommitTurn finishing a run with a damaged call = %v, want nil", err)
	}
	if got, want := keys(t, s, bucketPending), slices.Sorted(slices.Values(pending.CallIDs)); !slices.Equal(got, want) {
		t.Errorf("pending calls = %v, want %v", got, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the retention of the finished runs ends
	s, err = Open(path, opts)
	if err != nil {
		t.Fatalf("Open with a damaged call in a run past its retention: %v", err)
	}
	defer s.Close()
	if got := keys(t, s, bucketRuns); !slices.Equal(got, []string{pending.ID}) {
		t.Errorf("runs after Open = %v, want only %s", got, pending.ID)
	}
	later := time.Now().Add(2 * time.Hour) // the calls expire in an hour
	if err := s.prune(later); err != nil {
		t.Errorf("prune of a run with a damaged pending call = %v, want nil", err)
	}
	// The index entries of the damaged calls, which could not be found
	// from the calls, went too.
	for _, b := range [][]byte{bucketRuns, bucketCalls, bucketNotes, bucketPending, bucketDecided, bucketByExpiry, bucketByCreated, bucketByField, bucketRemind} {
		if got := keys(t, s, b); len(got) != 0 {
			t.Errorf("%s after the runs were dropped = %q, want nothing", b, got)
		}
	}
}

// A conversation record that cannot be read (a damaged file) is taken
// for one paused on no run and waiting on no step, as a run that cannot
// be read is taken for one whose step waits on nothing: a run of the
// conversation is finished, by FinishRun or by a turn's commit, and the
// conversation's answered inbox unlists it, whatever the record held.
// Prune deletes a conversation or inbox record it cannot read once the
// record is past its life, ConversationTTL from when a prune first found
// it so (it was saved before then), and the conversation takes messages
// and turns again.
func TestDamagedConversationStopsNothingAndIsPruned(t *testing.T) {
	// The damaged run, noted by the same prunes (see
	// TestDamagedRunIsNotedThenDropped), is deleted with them.
	opts := Options{ConversationTTL: time.Hour, Retention: time.Hour, PruneInterval: time.Hour}
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	runs := pause(t, s, 4, 1)
	finished, committed, answered, onDamagedRun := runs[0], runs[1], runs[2], runs[3]
	for _, r := range runs {
		decide(t, s, r.CallIDs[0]) // each step is decided, its resume due
	}
	accept := func(conv, id string) int64 {
		t.Helper()
		m := store.Inbound{EventID: "Ev" + id, MsgID: "M" + id, User: "U1", Channel: "C1", Text: "hello"}
		m, got, err := s.AcceptMessage(ctx, conv, m, false)
		if err != nil || got != store.Accepted {
			t.Fatalf("AcceptMessage in %s = %q, %v; want accepted", conv, got, err)
		}
		return m.Seq
	}
	seqs := map[string]int64{}
	for _, r := range []store.Run{answered, onDamagedRun} {
		seqs[r.Conversation] = accept(r.Conversation, r.ID)
	}
	const brokenInbox = "T1/C1/broken-inbox"
	accept(brokenInbox, "1")
	damage(t, s, bucketConvs, finished.Conversation, committed.Conversation, answered.Conversation)
	damage(t, s, bucketInbox, brokenInbox)
	damage(t, s, bucketRuns, onDamagedRun.ID)

	if err := s.FinishRun(ctx, finished.ID); err != nil {
		t.Errorf("FinishRun of a run whose conversation is damaged = %v, want nil", err)
	}
	if err := s.CommitTurn(ctx, store.Commit{Key: committed.Conversation, Finish: committed.ID}); err != nil {
		t.Errorf("CommitTurn finishing a run whose conversation is damaged = %v, want nil", err)
	}
	for _, r := range []store.Run{finished, committed} {
		if run, _, err := s.LoadRun(ctx, r.ID); err != nil || !run.Finished {
			t.Errorf("LoadRun(%s) after it was finished = finished %v, %v; want finished", r.ID, run.Finished, err)
		}
	}
	for _, r := range []store.Run{answered, onDamagedRun} {
		if err := s.CommitTurn(ctx, store.Commit{Key: r.Conversation, Answer: true, AnswerUpTo: seqs[r.Conversation]}); err != nil {
			t.Errorf("CommitTurn answering %s, paused on a decided step that cannot be read = %v, want nil", r.Conversation, err)
		}
	}
	if got, err := s.Unanswered(ctx, time.Now(), 0, 0); err != nil || !slices.Equal(got, []string{brokenInbox}) {
		t.Errorf("Unanswered after the answers = %v, %v; want only %s, whose inbox cannot be read", got, err, brokenInbox)
	}

	brokenConvs := []string{finished.Conversation, committed.Conversation, answered.Conversation}
	// One more is saved again after a prune found it damaged: it is
	// readable again, and no longer noted as unreadable.
	const saved = "T1/C1/saved-again"
	if err := s.SaveConversation(ctx, store.Conversation{Key: saved}); err != nil {
		t.Fatal(err)
	}
	damage(t, s, bucketConvs, saved)
	now := time.Now()
	if err := s.prune(now); err != nil {
		t.Fatal(err)
	}
	note := string(unreadableKey(bucketConvs, []byte(saved)))
	if raw(t, s, bucketUnreadable, note) == nil {
		t.Errorf("a damaged conversation is not noted as unreadable after a prune found it")
	}
	if err := s.SaveConversation(ctx, store.Conversation{Key: saved}); err != nil {
		t.Fatal(err)
	}
	if err := s.prune(now); err != nil {
		t.Fatal(err)
	}
	if v := raw(t, s, bucketUnreadable, note); v != nil {
		t.Errorf("a damaged conversation saved again is still noted as unreadable after a prune")
	}
	for _, k := range brokenConvs {
		if v := raw(t, s, bucketConvs, k); string(v) != "not json" {
			t.Errorf("damaged conversation %s after a prune found it = %q, want it kept as it is for its life", k, v)
		}
	}
	if v := raw(t, s, bucketInbox, brokenInbox); string(v) != "not json" {
		t.Errorf("damaged inbox after a prune found it = %q, want it kept as it is for its life", v)
	}
	later := now.Add(2 * time.Hour)
	if err := s.prune(later); err != nil {
		t.Fatal(err)
	}
	for _, k := range brokenConvs {
		if v := raw(t, s, bucketConvs, k); v != nil {
			t.Errorf("damaged conversation %s a life after a prune found it = %q, want it deleted", k, v)
		}
	}
	if v := raw(t, s, bucketInbox, brokenInbox); v != nil {
		t.Errorf("damaged inbox a life after a prune found it = %q, want it deleted", v)
	}
	if got, err := s.Unanswered(ctx, later, 0, 0); err != nil || len(got) != 0 {
		t.Errorf("Unanswered once the damaged inbox is deleted = %v, %v; want none", got, err)
	}
	if got := keys(t, s, bucketUnreadable); len(got) != 0 {
		t.Errorf("records noted as unreadable after they were deleted = %q, want none", got)
	}
	accept(brokenInbox, "2")
	if b, err := s.BeginTurn(ctx, answered.Conversation, "a", time.Minute); err != nil || !b.Acquired || b.Found {
		t.Errorf("BeginTurn of a conversation whose damaged record was deleted = acquired %v, found %v, %v; want acquired, a new conversation", b.Acquired, b.Found, err)
	}
}

// A file written by an earlier version, whose decided runs Open lists and
// whose pending-call indexes Open builds, opens with a damaged run or call
// record: the record is passed over, and the others are listed. (The
// prune at Open then ends the damaged run, whose call is no longer
// pending: see TestDamagedRunIsNotedThenDropped.)
func TestOpenPassesOverDamagedRecordsOfAnEarlierFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "toolgate.db")
	s, err := Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runs := pause(t, s, 3, 1)
	brokenRun, brokenCall, whole := runs[0], runs[1], runs[2]
	damage(t, s, bucketRuns, brokenRun.ID)
	damage(t, s, bucketCalls, brokenCall.CallIDs[0])
	// As an earlier version left it: its unfinished runs in "active", and
	// no pending-call indexes.
	err = s.db.Update(func(tx *bolt.Tx) error {
		active, err := tx.CreateBucket(bucketActive)
		if err != nil {
			return err
		}
		for _, r := range runs {
			if err := active.Put([]byte(r.ID), nil); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Delete(metaIndexVersion)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatalf("Open an earlier file with damaged records: %v", err)
	}
	defer s.Close()
	if got := keys(t, s, bucketActive); got != nil {
		t.Errorf("the earlier list of unfinished runs after Open = %v, want it gone", got)
	}
	want := []string{whole.CallIDs[0]}
	got, err := s.Pending(t.Context(), store.Filter{})
	if got := slices.Sorted(slices.Values(ids(got))); err != nil || !slices.Equal(got, want) {
		t.Errorf("Pending after Open = %v, %v; want %v", got, err, want)
	}
}

// ids lists the ids of calls.
func ids(cs []store.Call) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

// A message accepted with AcceptBegin stays recorded when what its turn
// would begin with cannot be read (a damaged conversation or lease
// record): the Begun is zero, with no error and no lease taken, and the
// caller begins the turn itself.
func TestAcceptBeginKeepsAMessageItCannotBegin(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for i, bucket := range [][]byte{bucketConvs, bucketLeases} {
		conv := fmt.Sprint("C1:", i)
		lease := store.TurnLease(conv)
		if i == 0 {
			damage(t, s, bucket, conv)
		} else {
			damage(t, s, bucket, lease)
		}
		was := raw(t, s, bucketLeases, lease)
		m := store.Inbound{EventID: fmt.Sprint("Ev", i), MsgID: fmt.Sprint("M", i), User: "U1", Channel: "C1", Text: "hello"}
		m, got, b, err := s.AcceptBegin(ctx, conv, m, false, "a", time.Minute)
		if err != nil || got != store.Accepted || !reflect.DeepEqual(b, store.Begun{}) {
			t.Errorf("AcceptBegin with a damaged %s record = %q, %+v, %v; want accepted, a zero Begun, nil", bucket, got, b, err)
		}
		if inbox, err := s.Inbox(ctx, conv); err != nil || len(inbox) != 1 || inbox[0].Seq != m.Seq {
			t.Errorf("inbox after AcceptBegin with a damaged %s record = %+v, %v; want the message", bucket, inbox, err)
		}
		if now := raw(t, s, bucketLeases, lease); !slices.Equal(now, was) {
			t.Errorf("lease after AcceptBegin with a damaged %s record = %q, want %q as it was", bucket, now, was)
		}
	}
}

// A decision that completes its step stays recorded when the resume it
// would begin cannot be read (a damaged conversation or lease record):
// the ResumeStart is zero, with no error, and neither the lease nor the
// run's resume claim is taken.
func TestDecideBeginKeepsADecisionItCannotBegin(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "toolgate.db"), Options{PruneInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	runs := pause(t, s, 4, 1)
	for i, r := range runs {
		bucket, approve := bucketConvs, i >= 2
		lease := store.TurnLease(r.Conversation)
		if i%2 == 0 {
			damage(t, s, bucket, r.Conversation)
		} else {
			bucket = bucketLeases
			damage(t, s, bucket, lease)
		}
		was := raw(t, s, bucketLeases, lease)
		rb := store.ResumeBegin{Conversation: r.Conversation, Lease: lease, Owner: "a", TTL: time.Minute, Start: []string{"approve"}}
		d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now()}
		name := "DecideBegin"
		var c store.Call
		var complete bool
		var rs store.ResumeStart
		if approve {
			name = "ApproveBegin"
			c, complete, rs, err = s.ApproveBegin(ctx, r.CallIDs[0], "fp", store.Approval{Approver: "U2"}, nil, nil, 1, d, store.Effects{}, rb)
		} else {
			c, complete, rs, err = s.DecideBegin(ctx, r.CallIDs[0], "fp", d, store.Effects{}, rb)
		}
		if err != nil || !complete || c.Status != store.Decided || !reflect.DeepEqual(rs, store.ResumeStart{}) {
			t.Errorf("%s with a damaged %s record = %q, complete %v, %+v, %v; want decided, complete, a zero ResumeStart, nil", name, bucket, c.Status, complete, rs, err)
		}
		if got, err := s.GetCall(ctx, r.CallIDs[0]); err != nil || got.Status != store.Decided || got.Executing {
			t.Errorf("call after %s with a damaged %s record = %q, executing %v, %v; want decided, not executing", name, bucket, got.Status, got.Executing, err)
		}
		if now := raw(t, s, bucketLeases, lease); !slices.Equal(now, was) {
			t.Errorf("lease after %s with a damaged %s record = %q, want %q as it was", name, bucket, now, was)
		}
		if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Minute); err != nil || !ok {
			t.Errorf("ClaimResume after %s with a damaged %s record = %v, %v; want true: no claim was taken", name, bucket, ok, err)
		}
	}
}
