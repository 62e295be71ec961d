package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

func testRenewClaim(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 1, nil)
	decideAll(t, s, calls)
	for {
		start := time.Now()
		if ok, err := s.ClaimResume(ctx, r.ID, "a", short); err != nil || !ok {
			t.Fatalf("ClaimResume(%s) = %v, %v; want true, nil", r.ID, ok, err)
		}
		if ok, err := s.RenewClaim(ctx, r.ID, "b", time.Minute); err != nil || ok {
			t.Errorf("RenewClaim(%s) by a non-holder = %v, %v; want false, nil", r.ID, ok, err)
		}
		ok, err := s.RenewClaim(ctx, r.ID, "a", time.Minute)
		if err != nil {
			t.Fatalf("RenewClaim(%s) by the holder: %v", r.ID, err)
		}
		if ok {
			break
		}
		if time.Since(start) < short {
			t.Fatalf("RenewClaim(%s) by the holder = false within its claim's time", r.ID)
		}
		// The claim ran out before its renewal on a machine this slow:
		// taken again.
	}
	// Past the first lease the renewed claim still holds.
	time.Sleep(2 * short)
	if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Minute); err != nil || ok {
		t.Errorf("ClaimResume(%s) after the holder renewed = %v, %v; want false, nil", r.ID, ok, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s while its renewed claim is live", r.ID)
	}
	// A claim that ran out is not renewed: the run is someone else's to take.
	if ok, err := s.RenewClaim(ctx, r.ID, "a", short); err != nil || !ok {
		t.Fatalf("RenewClaim(%s, short) = %v, %v; want true, nil", r.ID, ok, err)
	}
	eventually(t, "Stalled lists the run after the renewed claim ran out", func() (bool, error) {
		return stalled(t, s, r.ID), nil
	})
	if ok, err := s.RenewClaim(ctx, r.ID, "a", time.Minute); err != nil || ok {
		t.Errorf("RenewClaim(%s) after the claim ran out = %v, %v; want false, nil", r.ID, ok, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Minute); err != nil || !ok {
		t.Fatalf("ClaimResume(%s) after the claim ran out = %v, %v; want true, nil", r.ID, ok, err)
	}
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", r.ID, err)
	}
	if ok, err := s.RenewClaim(ctx, r.ID, "b", time.Minute); err != nil || ok {
		t.Errorf("RenewClaim(%s) after FinishRun = %v, %v; want false, nil", r.ID, ok, err)
	}
	if _, err := s.RenewClaim(ctx, store.NewRunID(), "a", time.Minute); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("RenewClaim(unknown run) error = %v, want ErrNotFound", err)
	}
}

func testReleaseClaim(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	r, calls := create(t, s, 1, nil)
	decideAll(t, s, calls)
	if ok, err := s.ClaimResume(ctx, r.ID, "a", time.Hour); err != nil || !ok {
		t.Fatalf("ClaimResume(%s) = %v, %v; want true, nil", r.ID, ok, err)
	}
	// Only the holder releases the claim.
	if err := s.ReleaseClaim(ctx, r.ID, "b"); err != nil {
		t.Fatalf("ReleaseClaim(%s) by a non-holder: %v", r.ID, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Hour); err != nil || ok {
		t.Errorf("ClaimResume(%s) after a non-holder released = %v, %v; want false, nil", r.ID, ok, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists %s while its claim is live", r.ID)
	}
	// Released by its holder, the claim is gone at once, long before it
	// would have run out.
	if err := s.ReleaseClaim(ctx, r.ID, "a"); err != nil {
		t.Fatalf("ReleaseClaim(%s) by the holder: %v", r.ID, err)
	}
	if !stalled(t, s, r.ID) {
		t.Errorf("Stalled does not list %s after its claim was released", r.ID)
	}
	if ok, err := s.RenewClaim(ctx, r.ID, "a", time.Hour); err != nil || ok {
		t.Errorf("RenewClaim(%s) after the release = %v, %v; want false, nil", r.ID, ok, err)
	}
	if ok, err := s.ClaimResume(ctx, r.ID, "b", time.Hour); err != nil || !ok {
		t.Fatalf("ClaimResume(%s) after the release = %v, %v; want true, nil", r.ID, ok, err)
	}
	// The former holder's late release leaves the new claim alone.
	if err := s.ReleaseClaim(ctx, r.ID, "a"); err != nil {
		t.Fatalf("ReleaseClaim(%s) by the former holder: %v", r.ID, err)
	}
	if ok, err := s.RenewClaim(ctx, r.ID, "b", time.Hour); err != nil || !ok {
		t.Errorf("RenewClaim(%s) by the new holder after a stale release = %v, %v; want true, nil", r.ID, ok, err)
	}
	// A finished run and an unknown one: nothing to release.
	if err := s.FinishRun(ctx, r.ID); err != nil {
		t.Fatalf("FinishRun(%s): %v", r.ID, err)
	}
	if err := s.ReleaseClaim(ctx, r.ID, "b"); err != nil {
		t.Errorf("ReleaseClaim(%s) after FinishRun: %v", r.ID, err)
	}
	if stalled(t, s, r.ID) {
		t.Errorf("Stalled lists the finished run %s after a release", r.ID)
	}
	if err := s.ReleaseClaim(ctx, store.NewRunID(), "a"); err != nil {
		t.Errorf("ReleaseClaim(unknown run): %v", err)
	}
}

// inbound is a message of user U1 with the given ids, at the given time.
func inbound(event, msg, text string, at time.Time) store.Inbound {
	return store.Inbound{EventID: event, MsgID: msg, User: "U1", Channel: "C1", Text: text, At: at}
}

func accept(t *testing.T, s Store, conv string, m store.Inbound, requireKnown bool, want store.Acceptance) store.Inbound {
	t.Helper()
	got, a, err := s.AcceptMessage(t.Context(), conv, m, requireKnown)
	if err != nil || a != want {
		t.Fatalf("AcceptMessage(%s, event %q, msg %q, known %v) = %q, %v; want %q, nil", conv, m.EventID, m.MsgID, requireKnown, a, err, want)
	}
	return got
}

// A message accepted with AcceptBegin takes the conversation's lease and
// reads what BeginTurn reads, itself in the inbox; a duplicate or an
// unknown thread reply takes nothing; another owner's lease is left alone
// with the message recorded all the same.
func testAcceptBegin(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	conv := "C9:" + store.NewRunID()
	if _, err := s.PutRecord(ctx, store.Record{Kind: "rule", ID: "r1", Data: json.RawMessage(`{"tool":"x"}`)}, 0); err != nil {
		t.Fatalf("PutRecord: %v", err)
	}
	now := time.Now().Truncate(time.Millisecond)
	m, acc, b, err := s.AcceptBegin(ctx, conv, inbound("E1", "M1", "first", now), false, "a", time.Minute, "rule")
	if err != nil || acc != store.Accepted || !b.Acquired {
		t.Fatalf("AcceptBegin(first) = %q, acquired %v, %v; want accepted and acquired", acc, b.Acquired, err)
	}
	if b.Found || len(b.Inbox) != 1 || b.Inbox[0].Text != "first" || b.Inbox[0].Seq != m.Seq || m.Seq == 0 {
		t.Errorf("AcceptBegin(first) read found %v, inbox %+v; want no record and the message (seq %d)", b.Found, b.Inbox, m.Seq)
	}
	if len(b.Records["rule"]) != 1 || b.Records["rule"][0].ID != "r1" {
		t.Errorf("AcceptBegin records = %+v, want the rule r1", b.Records)
	}
	if got := unanswered(t, s, time.Now().Add(time.Hour)); !slices.Contains(got, conv) {
		t.Errorf("Unanswered = %v, want %s listed", got, conv)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(conv), "b", time.Minute); err != nil || ok {
		t.Errorf("AcquireLease by b after AcceptBegin by a = %v, %v; want false, nil", ok, err)
	}
	// The other copy of the same message: nothing is taken or read.
	if _, acc, b, err := s.AcceptBegin(ctx, conv, inbound("E2", "M1", "first", now), false, "b", time.Minute); err != nil || acc != store.Duplicate || b.Acquired || b.Inbox != nil {
		t.Errorf("AcceptBegin(copy) by b = %q, %+v, %v; want duplicate with nothing begun", acc, b, err)
	}
	// A new message while a holds the lease: recorded, not begun.
	if m2, acc, b, err := s.AcceptBegin(ctx, conv, inbound("E3", "M3", "second", now), false, "b", time.Minute); err != nil || acc != store.Accepted || b.Acquired || m2.Seq <= m.Seq {
		t.Errorf("AcceptBegin(second) by b while a holds the lease = %q, acquired %v, seq %d, %v; want accepted, not acquired, seq after %d", acc, b.Acquired, m2.Seq, err, m.Seq)
	}
	if got := inboxTexts(t, s, conv); !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("inbox = %q, want [first second]", got)
	}
	// The holder itself begins again (a renewal) and reads both.
	if _, acc, b, err := s.AcceptBegin(ctx, conv, inbound("E4", "M4", "third", now), false, "a", time.Minute); err != nil || acc != store.Accepted || !b.Acquired || len(b.Inbox) != 3 || b.Records != nil {
		t.Errorf("AcceptBegin(third) by a = %q, acquired %v, inbox %d, records %v, %v; want accepted, acquired, 3 messages, no records", acc, b.Acquired, len(b.Inbox), b.Records, err)
	}
	// A thread reply in a conversation nobody knows: nothing.
	other := "C9:" + store.NewRunID()
	if _, acc, b, err := s.AcceptBegin(ctx, other, inbound("E5", "M5", "reply", now), true, "a", time.Minute); err != nil || acc != store.Unknown || b.Acquired {
		t.Errorf("AcceptBegin(unknown reply) = %q, acquired %v, %v; want unknown, nothing begun", acc, b.Acquired, err)
	}
	if ok, err := s.AcquireLease(ctx, store.TurnLease(other), "b", time.Minute); err != nil || !ok {
		t.Errorf("AcquireLease of the unknown conversation = %v, %v; want true: no lease was taken", ok, err)
	}
	if _, _, _, err := s.AcceptBegin(ctx, conv, inbound("E6", "M6", "x", now), false, "a", 0); err == nil {
		t.Error("AcceptBegin with a zero ttl succeeded, want an error")
	}
}

func inboxTexts(t *testing.T, s Store, conv string) []string {
	t.Helper()
	ms, err := s.Inbox(t.Context(), conv)
	if err != nil {
		t.Fatalf("Inbox(%s): %v", conv, err)
	}
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

func unanswered(t *testing.T, s Store, before time.Time) []string {
	t.Helper()
	got, err := s.Unanswered(t.Context(), before, 0, 0)
	if err != nil {
		t.Fatalf("Unanswered: %v", err)
	}
	return got
}

func testAcceptMessage(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	now := time.Now().Truncate(time.Millisecond)
	conv := "T1/C1/" + store.NewRunID()
	first := accept(t, s, conv, inbound("Ev1", "C1:1.1", "deploy", now.Add(-time.Hour)), false, store.Accepted)
	if first.Seq <= 0 {
		t.Fatalf("AcceptMessage Seq = %d, want > 0", first.Seq)
	}
	// The same event again, and the other event of the same message.
	accept(t, s, conv, inbound("Ev1", "C1:1.1", "deploy", now), false, store.Duplicate)
	accept(t, s, conv, inbound("Ev2", "C1:1.1", "deploy", now), false, store.Duplicate)
	second := accept(t, s, conv, inbound("Ev3", "C1:1.2", "and then?", now), false, store.Accepted)
	if second.Seq <= first.Seq {
		t.Errorf("second Seq = %d, want more than the first's %d", second.Seq, first.Seq)
	}
	// Messages without ids are not de-duplicated.
	accept(t, s, conv, inbound("", "", "no ids", now), false, store.Accepted)
	accept(t, s, conv, inbound("", "", "no ids", now), false, store.Accepted)
	if got, want := inboxTexts(t, s, conv), []string{"deploy", "and then?", "no ids", "no ids"}; !slices.Equal(got, want) {
		t.Errorf("Inbox = %q, want %q", got, want)
	}
	ms, err := s.Inbox(ctx, conv)
	if err != nil {
		t.Fatalf("Inbox: %v", err)
	}
	if m := ms[0]; m.EventID != "Ev1" || m.MsgID != "C1:1.1" || m.User != "U1" || m.Channel != "C1" || !m.At.Equal(now.Add(-time.Hour)) || m.Seq != first.Seq {
		t.Errorf("Inbox[0] = %+v, want the first message as accepted (Seq %d)", m, first.Seq)
	}
	// Ids are per conversation: another thread has its own.
	other := "T1/C1/" + store.NewRunID()
	accept(t, s, other, inbound("Ev9", "C1:1.1", "elsewhere", now), false, store.Accepted)
	// Listed from the first message's time.
	if got := unanswered(t, s, now.Add(-30*time.Minute)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered(30 min ago) = %q, want [%s]", got, conv)
	}
	if got := unanswered(t, s, now.Add(time.Second)); !slices.Equal(got, []string{conv, other}) {
		t.Errorf("Unanswered(now) = %q, want [%s %s], oldest first", got, conv, other)
	}
	if got, err := s.Unanswered(ctx, now.Add(time.Second), 0, 1); err != nil || !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered(now, limit 1) = %q, %v; want [%s]", got, err, conv)
	}
	if got, err := s.Unanswered(ctx, now.Add(time.Second), 1, 1); err != nil || !slices.Equal(got, []string{other}) {
		t.Errorf("Unanswered(now, offset 1, limit 1) = %q, %v; want [%s]", got, err, other)
	}
	if got, err := s.Unanswered(ctx, now.Add(time.Second), 1, 0); err != nil || !slices.Equal(got, []string{other}) {
		t.Errorf("Unanswered(now, offset 1, no limit) = %q, %v; want [%s]", got, err, other)
	}
	if got, err := s.Unanswered(ctx, now.Add(time.Second), 2, 1); err != nil || len(got) != 0 {
		t.Errorf("Unanswered(now, offset 2, limit 1) = %q, %v; want nothing", got, err)
	}
	if got := inboxTexts(t, s, "T1/C1/unknown"); len(got) != 0 {
		t.Errorf("Inbox(unknown) = %q, want nothing", got)
	}
}

func testAcceptMessageConcurrent(t *testing.T, open Opener) {
	s, _ := open(t)
	conv := "T1/C1/" + store.NewRunID()
	const n = 8
	var wg sync.WaitGroup
	results := make([]store.Acceptance, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Two copies of one message, each delivered n/2 times.
			m := inbound(fmt.Sprintf("Ev%d", i%2), "C1:5.5", "hello", time.Now())
			_, a, err := s.AcceptMessage(t.Context(), conv, m, false)
			if err != nil {
				t.Errorf("AcceptMessage #%d: %v", i, err)
			}
			results[i] = a
		}()
	}
	wg.Wait()
	accepted := 0
	for _, a := range results {
		if a == store.Accepted {
			accepted++
		}
	}
	if accepted != 1 {
		t.Errorf("%d concurrent deliveries of one message: %d accepted (%q), want exactly 1", n, accepted, results)
	}
	if got := inboxTexts(t, s, conv); len(got) != 1 {
		t.Errorf("Inbox = %q, want the message once", got)
	}
}

func testAcceptMessageKnown(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	now := time.Now()
	conv := "T1/C1/" + store.NewRunID()
	accept(t, s, conv, inbound("Ev1", "C1:1.1", "a stranger's thread", now), true, store.Unknown)
	if got := inboxTexts(t, s, conv); len(got) != 0 {
		t.Errorf("Inbox after an unknown follow-up = %q, want nothing", got)
	}
	if got := unanswered(t, s, now.Add(time.Minute)); len(got) != 0 {
		t.Errorf("Unanswered after an unknown follow-up = %q, want nothing", got)
	}
	// Neither id was recorded: Slack's next delivery of an event left
	// unacked records it.
	accept(t, s, conv, inbound("Ev1", "C1:1.1", "again", now), false, store.Accepted)
	accept(t, s, conv, inbound("Ev2", "C1:1.1", "mention", now), false, store.Duplicate)
	// Known once a message was accepted, before any turn saved it.
	accept(t, s, conv, inbound("Ev3", "C1:1.2", "follow-up", now), true, store.Accepted)

	saved := "T1/C1/" + store.NewRunID()
	if err := s.SaveConversation(ctx, store.Conversation{Key: saved, State: []byte(`{}`)}); err != nil {
		t.Fatalf("SaveConversation: %v", err)
	}
	accept(t, s, saved, inbound("Ev4", "C1:2.1", "follow-up", now), true, store.Accepted)
}

func testAnswerInbox(t *testing.T, open Opener) {
	s, _ := open(t)
	ctx := t.Context()
	now := time.Now()
	conv := "T1/C1/" + store.NewRunID()
	answer := func(upTo int64) {
		t.Helper()
		if err := s.AnswerInbox(ctx, conv, upTo); err != nil {
			t.Fatalf("AnswerInbox(%d): %v", upTo, err)
		}
	}
	listed := func() bool {
		t.Helper()
		return slices.Contains(unanswered(t, s, time.Now().Add(time.Minute)), conv)
	}
	answer(5) // nothing there yet: nothing happens
	a := accept(t, s, conv, inbound("Ev1", "m1", "one", now), false, store.Accepted)
	b := accept(t, s, conv, inbound("Ev2", "m2", "two", now), false, store.Accepted)
	answer(a.Seq)
	if got := inboxTexts(t, s, conv); !slices.Equal(got, []string{"two"}) {
		t.Errorf("Inbox after answering the first = %q, want [two]", got)
	}
	if !listed() {
		t.Errorf("Unanswered does not list %s with a message left", conv)
	}
	answer(a.Seq) // again: nothing happens
	answer(b.Seq)
	if got := inboxTexts(t, s, conv); len(got) != 0 {
		t.Errorf("Inbox after answering all = %q, want nothing", got)
	}
	if listed() {
		t.Errorf("Unanswered lists %s with nothing left", conv)
	}
	// A redelivery of an answered message changes nothing.
	accept(t, s, conv, inbound("Ev2", "m2", "two", now), false, store.Duplicate)
	if listed() {
		t.Errorf("Unanswered lists %s after a duplicate of an answered message", conv)
	}
	c := accept(t, s, conv, inbound("Ev3", "m3", "three", now), false, store.Accepted)
	if c.Seq <= b.Seq {
		t.Errorf("Seq after the inbox was emptied = %d, want more than %d", c.Seq, b.Seq)
	}
	if !listed() {
		t.Errorf("Unanswered does not list %s after a new message", conv)
	}
	answer(b.Seq) // an older turn's answer does not drop the new message
	if got := inboxTexts(t, s, conv); !slices.Equal(got, []string{"three"}) {
		t.Errorf("Inbox = %q, want [three]", got)
	}
}

func testMarkUnanswered(t *testing.T, open Opener) {
	s, reopen := open(t)
	ctx := t.Context()
	now := time.Now()
	conv := "T1/C1/" + store.NewRunID()
	if err := s.MarkUnanswered(ctx, conv, now.Add(-time.Hour)); err != nil {
		t.Fatalf("MarkUnanswered: %v", err)
	}
	if err := s.MarkUnanswered(ctx, conv, now); err != nil { // keeps the earlier time
		t.Fatalf("MarkUnanswered again: %v", err)
	}
	if got := unanswered(t, s, now.Add(-30*time.Minute)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered(30 min ago) after MarkUnanswered = %q, want [%s]", got, conv)
	}
	s = reopen()
	if got := unanswered(t, s, now.Add(time.Minute)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered after restart = %q, want [%s]", got, conv)
	}
	// With nothing in the inbox, answering unlists it.
	if err := s.AnswerInbox(ctx, conv, 0); err != nil {
		t.Fatalf("AnswerInbox: %v", err)
	}
	if got := unanswered(t, s, now.Add(time.Minute)); len(got) != 0 {
		t.Errorf("Unanswered after AnswerInbox = %q, want nothing", got)
	}
	// With a message in the inbox, answering what came before keeps it.
	a := accept(t, s, conv, inbound("Ev1", "m1", "hi", now), false, store.Accepted)
	if err := s.AnswerInbox(ctx, conv, a.Seq); err != nil {
		t.Fatalf("AnswerInbox: %v", err)
	}
	if err := s.MarkUnanswered(ctx, conv, now); err != nil {
		t.Fatalf("MarkUnanswered: %v", err)
	}
	b := accept(t, s, conv, inbound("Ev2", "m2", "again", now), false, store.Accepted)
	if err := s.AnswerInbox(ctx, conv, a.Seq); err != nil {
		t.Fatalf("AnswerInbox: %v", err)
	}
	if got := unanswered(t, s, now.Add(time.Minute)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered with a message left = %q, want [%s]", got, conv)
	}
	if err := s.AnswerInbox(ctx, conv, b.Seq); err != nil {
		t.Fatalf("AnswerInbox: %v", err)
	}
	if got := unanswered(t, s, now.Add(time.Minute)); len(got) != 0 {
		t.Errorf("Unanswered after answering all = %q, want nothing", got)
	}
}

func testInboxAfterRestart(t *testing.T, open Opener) {
	s, reopen := open(t)
	now := time.Now()
	conv := "T1/C1/" + store.NewRunID()
	a := accept(t, s, conv, inbound("Ev1", "m1", "before the crash", now), false, store.Accepted)
	s = reopen()
	if got := inboxTexts(t, s, conv); !slices.Equal(got, []string{"before the crash"}) {
		t.Errorf("Inbox after restart = %q, want [before the crash]", got)
	}
	if got := unanswered(t, s, now.Add(time.Minute)); !slices.Equal(got, []string{conv}) {
		t.Errorf("Unanswered after restart = %q, want [%s]", got, conv)
	}
	accept(t, s, conv, inbound("Ev1", "m1", "before the crash", now), false, store.Duplicate)
	b := accept(t, s, conv, inbound("Ev2", "m2", "after", now), false, store.Accepted)
	if b.Seq <= a.Seq {
		t.Errorf("Seq after restart = %d, want more than %d", b.Seq, a.Seq)
	}
}
