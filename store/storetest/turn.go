package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// Turns are the composite operations of a turn: what it reads when it
// starts and what it writes when it records its result, each one atomic
// step (a store that needs several applies them in an order that a later
// turn can carry on from, as its doc says).
type Turns interface {
	// BeginTurn takes or renews the lease store.TurnLease(conversation)
	// for owner for ttl, as AcquireLease does, and in the same step reads
	// the conversation (as LoadConversation) and its inbox (as Inbox).
	// When it takes the lease it also lists the records of kinds, as
	// RecordsOf lists them, in Records (nil if they cannot be read: the
	// rest stands). When another owner holds the lease it returns
	// Acquired false and reads nothing.
	BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error)
	// CommitTurn applies c in one step: it creates c.Run with c.Calls (as
	// CreateRun), saves c.Conversation (as SaveConversation), finishes
	// the run c.Finish (as FinishRun; an unknown run is left alone),
	// appends c.Audit (as Audit, in order), answers the inbox up to
	// c.AnswerUpTo when c.Answer (as AnswerInbox) and releases the lease
	// store.TurnLease(c.Key) held by c.Release (as ReleaseLease). Each
	// part is skipped when its field is empty. Invalid run input or
	// store.ErrRunExists fail the commit with nothing written. With
	// c.Holder set, a lease held by another owner fails it with
	// store.ErrNotHolder: the conversation, its inbox and lease and the
	// run c.Finish are left as they are (a store that creates the run or
	// appends the audit entries in a step before the conversation's says
	// so in its doc).
	CommitTurn(ctx context.Context, c store.Commit) error
}

// turnConversation returns a fresh conversation key with two accepted
// messages, and the messages.
func turnConversation(t *testing.T, s Store) (string, []store.Inbound) {
	t.Helper()
	conv := "C7:" + store.NewRunID()
	now := time.Now().Truncate(time.Millisecond)
	m1 := accept(t, s, conv, inbound("E1", "M1", "first", now), false, store.Accepted)
	m2 := accept(t, s, conv, inbound("E2", "M2", "second", now.Add(time.Millisecond)), false, store.Accepted)
	return conv, []store.Inbound{m1, m2}
}

func begin(t *testing.T, s Store, conv, owner string, ttl time.Duration, want bool) store.Begun {
	t.Helper()
	b, err := s.BeginTurn(t.Context(), conv, owner, ttl)
	if err != nil || b.Acquired != want {
		t.Fatalf("BeginTurn(%s, %s) = acquired %v, %v; want %v, nil", conv, owner, b.Acquired, err, want)
	}
	return b
}

func commitTurn(t *testing.T, s Store, c store.Commit) {
	t.Helper()
	if err := s.CommitTurn(t.Context(), c); err != nil {
		t.Fatalf("CommitTurn(%s): %v", c.Key, err)
	}
}

func auditActions(t *testing.T, s Store) []string {
	t.Helper()
	log, err := s.AuditLog(t.Context(), 0)
	if err != nil {
		t.Fatalf("AuditLog: %v", err)
	}
	var out []string
	for _, e := range log {
		out = append(out, e.Action+" "+e.CallID)
	}
	return out
}

func inboxSeqs(ms []store.Inbound) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.Seq)
	}
	return out
}

func testBeginTurn(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	if b := begin(t, s, "C7:new", "a", time.Minute, true); b.Found || len(b.Inbox) != 0 {
		t.Errorf("BeginTurn(unknown) = %+v, want no record and no inbox", b)
	}
	conv, msgs := turnConversation(t, s)
	at := time.Now().Truncate(time.Millisecond).UTC()
	saved := store.Conversation{Key: conv, State: json.RawMessage(`{"turns":1}`), PausedRun: "abc", UpdatedAt: at}
	if err := s.SaveConversation(ctx, saved); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	b := begin(t, s, conv, "a", short, true)
	b.Conversation.UpdatedAt = b.Conversation.UpdatedAt.UTC()
	if !b.Found || !reflect.DeepEqual(b.Conversation, saved) {
		t.Errorf("BeginTurn(%s).Conversation = %+v (found %v), want %+v", conv, b.Conversation, b.Found, saved)
	}
	if got, want := inboxSeqs(b.Inbox), inboxSeqs(msgs); !slices.Equal(got, want) || b.Inbox[0].Text != "first" {
		t.Errorf("BeginTurn(%s).Inbox = %+v, want %+v", conv, b.Inbox, msgs)
	}
	if b.Records != nil {
		t.Errorf("BeginTurn(%s) with no kinds: Records = %+v, want nil", conv, b.Records)
	}
	putRecord(t, s, "rules", "r1")
	putRecord(t, s, "rules", "r2")
	b, err := s.BeginTurn(ctx, conv, "a", short, "rules", "none")
	if err != nil || !b.Acquired {
		t.Fatalf("BeginTurn(%s, rules, none) = acquired %v, %v; want the lease", conv, b.Acquired, err)
	}
	if recs := b.Records; len(recs) != 2 || len(recs["rules"]) != 2 || recs["rules"][0].ID != "r1" || recs["rules"][1].Version != 1 || len(recs["none"]) != 0 {
		t.Errorf("BeginTurn(%s, rules, none).Records = %+v, want rules [r1 r2] and none []", conv, recs)
	}
	if !b.Found || len(b.Inbox) != len(msgs) {
		t.Errorf("BeginTurn(%s, rules, none) = %+v, want the conversation and its inbox with the records", conv, b)
	}
	if b, err := s.BeginTurn(ctx, conv, "b", time.Minute, "rules"); err != nil || b.Acquired || b.Found || b.Inbox != nil || b.Records != nil {
		t.Errorf("BeginTurn by a non-holder = %+v, %v; want nothing read", b, err)
	}
	// The lease is the one AcquireLease and ReleaseLease know.
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease(TurnLease) by b while a holds it = %v, %v; want false, nil", ok, err)
	}
	begin(t, s, conv, "a", short, true) // renew
	eventually(t, "b begins a turn once a's lease ran out", func() (bool, error) {
		b, err := s.BeginTurn(ctx, conv, "b", time.Minute)
		return b.Acquired, err
	})
	if err := s.ReleaseLease(ctx, store.TurnLease(conv), "b"); err != nil {
		t.Fatalf("ReleaseLease: %v", err)
	}
	begin(t, s, conv, "a", time.Minute, true)
}

// A commit that pauses the turn: the run, the conversation paused on it,
// the audit entries, the inbox answered and the lease released.
func testCommitTurnPause(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	conv, msgs := turnConversation(t, s)
	begin(t, s, conv, "a", time.Minute, true)
	r, calls := fixture(2)
	r.Conversation = conv
	for i := range calls {
		calls[i].Conversation = conv
	}
	saved := store.Conversation{State: json.RawMessage(`{"queued":[]}`), PausedRun: r.ID}
	audit := []store.AuditEntry{
		{Actor: "U1", Action: "request", Thread: conv, Tool: "files__delete_file"},
		{Actor: "U1", Action: "pause", Thread: conv, CallID: calls[0].ID},
		{Actor: "U1", Action: "pause", Thread: conv, CallID: calls[1].ID},
	}
	note := `{"refs":[{"channel":"C1","ts":"1.2"}]}`
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &saved, Run: &r, Calls: calls, Notes: map[string][]byte{calls[0].ID: []byte(note)},
		Audit: audit, Answer: true, AnswerUpTo: msgs[0].Seq, Release: "a"})

	check := func(s Store) {
		t.Helper()
		if got, err := s.CallNote(ctx, calls[0].ID); err != nil || string(got) != note {
			t.Errorf("CallNote(%s) = %q, %v; want the note committed with it, %s", calls[0].ID, got, err, note)
		}
		if got, err := s.CallNote(ctx, calls[1].ID); err != nil || len(got) != 0 {
			t.Errorf("CallNote(%s) = %q, %v; want none: the commit gave it none", calls[1].ID, got, err)
		}
		got, gotCalls, err := s.LoadRun(ctx, r.ID)
		if err != nil || got.Finished || !slices.Equal(callIDs(gotCalls), r.CallIDs) {
			t.Fatalf("LoadRun(%s) = calls %v, finished %v, %v; want the created run", r.ID, callIDs(gotCalls), got.Finished, err)
		}
		pending, err := s.Pending(ctx, store.Filter{Conversation: conv})
		if err != nil || !slices.Equal(callIDs(pending), r.CallIDs) {
			t.Errorf("Pending(%s) = %v, %v; want %v", conv, callIDs(pending), err, r.CallIDs)
		}
		c, err := s.LoadConversation(ctx, conv)
		if err != nil || c.PausedRun != r.ID || string(c.State) != string(saved.State) || c.UpdatedAt.IsZero() {
			t.Errorf("LoadConversation(%s) = %+v, %v; want the saved state paused on %s", conv, c, err, r.ID)
		}
		want := []string{"pause " + calls[1].ID, "pause " + calls[0].ID, "request "}
		if got := auditActions(t, s); !slices.Equal(got, want) {
			t.Errorf("AuditLog = %q, want %q", got, want)
		}
		if got := inboxTexts(t, s, conv); !slices.Equal(got, []string{"second"}) {
			t.Errorf("inbox after answering the first message = %q, want [second]", got)
		}
		if got := unanswered(t, s, time.Now().Add(time.Hour)); !slices.Contains(got, conv) {
			t.Errorf("Unanswered = %v, want %s listed: a message is left", got, conv)
		}
		if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || !ok {
			t.Errorf("AcquireLease by b after the commit released it = %v, %v; want true, nil", ok, err)
		}
		_ = s.ReleaseLease(ctx, store.TurnLease(conv), "b")
	}
	check(s)
	check(reopen())
}

// A turn that answers every message unlists the conversation; a message
// accepted after it lists the conversation again.
func testCommitTurnAnswerAll(t *testing.T, open Opener) {
	s, reopen := open(t)
	conv, msgs := turnConversation(t, s)
	later := time.Now().Add(time.Hour)
	if got := unanswered(t, s, later); !slices.Contains(got, conv) {
		t.Fatalf("Unanswered before the turn = %v, want %s listed", got, conv)
	}
	begin(t, s, conv, "a", time.Minute, true)
	saved := store.Conversation{State: json.RawMessage(`{"messages":[]}`)}
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &saved, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a"})
	if got := unanswered(t, s, later); slices.Contains(got, conv) {
		t.Errorf("Unanswered after answering every message = %v, want %s no longer listed", got, conv)
	}
	s = reopen()
	if got := unanswered(t, s, later); slices.Contains(got, conv) {
		t.Errorf("Unanswered after answering every message and a restart = %v, want %s no longer listed", got, conv)
	}
	accept(t, s, conv, inbound("E3", "M3", "third", time.Now()), false, store.Accepted)
	if got := unanswered(t, s, later); !slices.Contains(got, conv) {
		t.Errorf("Unanswered after a new message = %v, want %s listed again", got, conv)
	}
}

// A commit that answers every message of a conversation paused on a step
// that was decided meanwhile (its turn read the run while a call was
// pending) keeps the conversation listed: the step's resume has not saved
// its result, and a takeover must find it if the decider's process dies.
func testCommitTurnKeepsADecidedStepListed(t *testing.T, open Opener) {
	s, reopen := open(t)
	conv, msgs := turnConversation(t, s)
	later := time.Now().Add(time.Hour)
	r, calls := fixture(1)
	r.Conversation, calls[0].Conversation = conv, conv
	begin(t, s, conv, "a", time.Minute, true)
	paused := store.Conversation{State: json.RawMessage(`{"messages":[]}`), PausedRun: r.ID}
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &paused, Run: &r, Calls: calls, Answer: true, AnswerUpTo: msgs[0].Seq, Release: "a"})
	decideAll(t, s, calls)
	begin(t, s, conv, "a", time.Minute, true)
	commitTurn(t, s, store.Commit{Key: conv, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a"})
	if got := inboxTexts(t, s, conv); len(got) != 0 {
		t.Fatalf("inbox after answering everything = %q, want empty", got)
	}
	if got := unanswered(t, s, later); !slices.Contains(got, conv) {
		t.Errorf("Unanswered after a commit drained the inbox of a conversation whose step is decided = %v, want %s still listed", got, conv)
	}
	s = reopen()
	if got := unanswered(t, s, later); !slices.Contains(got, conv) {
		t.Errorf("Unanswered after a restart = %v, want %s still listed", got, conv)
	}
	// AnswerInbox, the same.
	m3 := accept(t, s, conv, inbound("E3", "M3", "third", time.Now()), false, store.Accepted)
	if err := s.AnswerInbox(t.Context(), conv, m3.Seq); err != nil {
		t.Fatal(err)
	}
	if got := unanswered(t, s, later); !slices.Contains(got, conv) {
		t.Errorf("Unanswered after AnswerInbox drained the inbox of a conversation whose step is decided = %v, want %s still listed", got, conv)
	}
}

// A commit that ends a resumed step: the run finished, the conversation
// moved on, the inbox empty and unlisted.
func testCommitTurnFinish(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv, msgs := turnConversation(t, s)
	r, calls := decidedRunOf(t, s, conv)
	begin(t, s, conv, "a", time.Minute, true)
	saved := store.Conversation{State: json.RawMessage(`{"messages":[]}`)}
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &saved, Finish: r.ID, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a",
		Audit: []store.AuditEntry{{Actor: "U2", Action: "execute", CallID: calls[0].ID}}})
	if got, _, err := s.LoadRun(ctx, r.ID); err != nil || !got.Finished {
		t.Errorf("LoadRun(%s) = finished %v, %v; want finished", r.ID, got.Finished, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s after the commit finished it", r.ID)
	}
	if c, err := s.LoadConversation(ctx, conv); err != nil || c.PausedRun != "" || string(c.State) != string(saved.State) {
		t.Errorf("LoadConversation(%s) = %+v, %v; want the saved state, not paused", conv, c, err)
	}
	if got := inboxTexts(t, s, conv); len(got) != 0 {
		t.Errorf("inbox after answering everything = %q, want empty", got)
	}
	if got := unanswered(t, s, time.Now().Add(time.Hour)); slices.Contains(got, conv) {
		t.Errorf("Unanswered = %v, want %s no longer listed", got, conv)
	}
	if got := auditActions(t, s); !slices.Equal(got, []string{"execute " + calls[0].ID}) {
		t.Errorf("AuditLog = %q, want the execute entry", got)
	}
	// Finishing again, or a run that is unknown, changes nothing.
	commitTurn(t, s, store.Commit{Key: conv, Finish: r.ID})
	commitTurn(t, s, store.Commit{Key: conv, Finish: store.NewRunID()})
}

// A commit whose run cannot be created writes nothing; a release by an
// owner who does not hold the lease leaves it.
func testCommitTurnRefused(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv, msgs := turnConversation(t, s)
	r, calls := create(t, s, 1, nil)
	begin(t, s, conv, "a", time.Minute, true)
	saved := store.Conversation{State: json.RawMessage(`{"x":1}`), PausedRun: r.ID}
	err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &saved, Run: &r, Calls: calls, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a",
		Audit: []store.AuditEntry{{Actor: "U1", Action: "pause"}}})
	if !errors.Is(err, store.ErrRunExists) {
		t.Fatalf("CommitTurn with a taken run id = %v, want ErrRunExists", err)
	}
	if _, err := s.LoadConversation(ctx, conv); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadConversation after a refused commit = %v, want ErrNotFound", err)
	}
	if got := inboxTexts(t, s, conv); len(got) != 2 {
		t.Errorf("inbox after a refused commit = %q, want both messages", got)
	}
	if got := auditActions(t, s); len(got) != 0 {
		t.Errorf("AuditLog after a refused commit = %q, want none", got)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after a refused commit = %v, %v; want false: a still holds it", ok, err)
	}
	r2, calls2 := fixture(1)
	err = s.CommitTurn(ctx, store.Commit{Key: conv, Run: &r2, Calls: calls2, Notes: map[string][]byte{calls[0].ID: []byte("{}")}, Release: "a"})
	if err == nil || !strings.Contains(err.Error(), calls[0].ID) {
		t.Errorf("CommitTurn with a note for a call it does not create = %v, want an error naming %s", err, calls[0].ID)
	}
	if _, _, err := s.LoadRun(ctx, r2.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(%s) after a commit refused for its note = %v, want ErrNotFound", r2.ID, err)
	}
	commitTurn(t, s, store.Commit{Key: conv, Release: "b"})
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after b's release = %v, %v; want false: a still holds it", ok, err)
	}
	commitTurn(t, s, store.Commit{Key: conv, Release: "a"})
	begin(t, s, conv, "b", time.Minute, true)
}

// A commit made for a holder whose lease another owner holds now, or that
// nobody holds (the holder's ran out, or was released), writes nothing of
// the conversation, its inbox or its lease, and finishes no run; one made
// for the holder while it holds the lease writes.
func testCommitTurnHolder(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv, msgs := turnConversation(t, s)
	r, _ := decidedRunOf(t, s, conv)
	begin(t, s, conv, "b", time.Minute, true) // b took the conversation over from a
	before, beforeErr := s.LoadConversation(ctx, conv)
	saved := store.Conversation{State: json.RawMessage(`{"by":"a"}`)}
	audit := []store.AuditEntry{{At: time.Now().Truncate(time.Millisecond), Actor: "a", Action: "execute", CallID: "refused.0"}}
	for _, c := range []store.Commit{
		{Key: conv, Conversation: &saved, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a", Holder: "a", Audit: audit},
		{Key: conv, Conversation: &saved, Finish: r.ID, Answer: true, AnswerUpTo: msgs[1].Seq, Release: "a", Holder: "a", Audit: audit},
	} {
		if err := s.CommitTurn(ctx, c); !errors.Is(err, store.ErrNotHolder) {
			t.Errorf("CommitTurn for a while b holds the lease (finish %q) = %v, want ErrNotHolder", c.Finish, err)
		}
	}
	// Its writer keeps the audit entries of a refused commit, to write
	// them itself: none is written with it.
	if log, err := s.AuditLog(ctx, 0); err != nil || slices.ContainsFunc(log, func(e store.AuditEntry) bool { return e.CallID == "refused.0" }) {
		t.Errorf("AuditLog after commits refused = %v, %v; want none of their entries", log, err)
	}
	if after, err := s.LoadConversation(ctx, conv); !errors.Is(err, beforeErr) || string(after.State) != string(before.State) || after.PausedRun != before.PausedRun {
		t.Errorf("LoadConversation after commits refused = %+v, %v; want it as before: %+v, %v", after, err, before, beforeErr)
	}
	if got := inboxTexts(t, s, conv); len(got) != 2 {
		t.Errorf("inbox after commits refused = %q, want both messages", got)
	}
	if got, _, err := s.LoadRun(ctx, r.ID); err != nil || got.Finished {
		t.Errorf("LoadRun(%s) after a refused finish = finished %v, %v; want not finished", r.ID, got.Finished, err)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || !ok {
		t.Errorf("AcquireLease by b after commits refused = %v, %v; want b still holding it", ok, err)
	}
	// b's own commit writes, and releases the lease.
	mine := store.Conversation{State: json.RawMessage(`{"by":"b"}`)}
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &mine, Answer: true, AnswerUpTo: msgs[0].Seq, Release: "b", Holder: "b"})
	if c, err := s.LoadConversation(ctx, conv); err != nil || string(c.State) != string(mine.State) {
		t.Errorf("LoadConversation after the holder's commit = %+v, %v; want its state", c, err)
	}
	// With nobody holding the lease, a's commit is refused too: b may
	// have finished with the conversation, as here.
	if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &saved, Finish: r.ID, Answer: true, AnswerUpTo: msgs[1].Seq, Holder: "a"}); !errors.Is(err, store.ErrNotHolder) {
		t.Errorf("CommitTurn for a with the lease free = %v, want ErrNotHolder", err)
	}
	if c, err := s.LoadConversation(ctx, conv); err != nil || string(c.State) != string(mine.State) {
		t.Errorf("LoadConversation after a commit refused with the lease free = %+v, %v; want b's state", c, err)
	}
	if got, _, err := s.LoadRun(ctx, r.ID); err != nil || got.Finished {
		t.Errorf("LoadRun(%s) after a commit refused with the lease free = finished %v, %v; want not finished", r.ID, got.Finished, err)
	}
	// Once a holds the lease again, its commit writes.
	begin(t, s, conv, "a", time.Minute, true)
	commitTurn(t, s, store.Commit{Key: conv, Conversation: &saved, Finish: r.ID, Answer: true, AnswerUpTo: msgs[1].Seq, Holder: "a", Release: "a"})
	if c, err := s.LoadConversation(ctx, conv); err != nil || string(c.State) != string(saved.State) {
		t.Errorf("LoadConversation after a's commit under its lease = %+v, %v; want its state", c, err)
	}
	if got, _, err := s.LoadRun(ctx, r.ID); err != nil || !got.Finished {
		t.Errorf("LoadRun(%s) after a's commit under its lease = finished %v, %v; want finished", r.ID, got.Finished, err)
	}
	// A pause for a holder whose lease another owner holds is refused too.
	begin(t, s, conv, "b", time.Minute, true)
	r2, calls2 := fixture(1)
	r2.Conversation = conv
	paused := store.Conversation{State: json.RawMessage(`{"by":"a","paused":true}`), PausedRun: r2.ID}
	if err := s.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &paused, Run: &r2, Calls: calls2, Holder: "a"}); !errors.Is(err, store.ErrNotHolder) {
		t.Errorf("CommitTurn of a pause for a while b holds the lease = %v, want ErrNotHolder", err)
	}
	if c, err := s.LoadConversation(ctx, conv); err != nil || c.PausedRun != "" {
		t.Errorf("LoadConversation after a refused pause = %+v, %v; want it not paused", c, err)
	}
	if _, _, err := s.LoadRun(ctx, r2.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("LoadRun(%s) of a refused pause = %v, want ErrNotFound", r2.ID, err)
	}
}

// decidedRunOf creates a run of one call in conversation conv and decides
// the call.
func decidedRunOf(t *testing.T, s Store, conv string) (store.Run, []store.Call) {
	t.Helper()
	r, calls := create(t, s, 1, func(r *store.Run, cs []store.Call) {
		r.Conversation = conv
		cs[0].Conversation = conv
	})
	decideAll(t, s, calls)
	return r, calls
}
