package slackapp

import (
	"context"
	"fmt"
	"testing"
)

func TestRecentMessages(t *testing.T) {
	var r recentMessages
	rec, first := r.begin("C1:1")
	if !first {
		t.Fatal("the first copy was not first")
	}
	second, first := r.begin("C1:1")
	if first || second != rec {
		t.Fatal("a second copy while the first records did not wait for it")
	}
	r.finish("C1:1", rec, true)
	if !second.wait(context.Background()) {
		t.Error("the second copy did not learn that the first recorded the message")
	}
	if later, first := r.begin("C1:1"); first || !later.wait(context.Background()) {
		t.Error("a copy arriving after the first recorded the message did not learn that it was recorded")
	}

	// A copy that did not record (store error, unknown thread) is
	// forgotten: the next copy records for itself.
	rec, _ = r.begin("C1:2")
	waiting, _ := r.begin("C1:2")
	r.finish("C1:2", rec, false)
	if waiting.wait(context.Background()) {
		t.Error("a waiting copy took an unrecorded message as recorded")
	}
	if _, first := r.begin("C1:2"); !first {
		t.Error("after an unrecorded first copy, the next copy was not first")
	}

	// A copy whose context ends stops waiting.
	rec, _ = r.begin("C1:3")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rec.wait(ctx) {
		t.Error("a wait whose context ended reported the message recorded")
	}

	// Past the bound the oldest are forgotten.
	for i := range maxRecentMessages {
		rec, _ := r.begin(fmt.Sprintf("C2:%d", i))
		r.finish(fmt.Sprintf("C2:%d", i), rec, true)
	}
	if len(r.byID) != maxRecentMessages {
		t.Errorf("remembered %d, want at most %d", len(r.byID), maxRecentMessages)
	}
	if _, first := r.begin("C1:1"); !first {
		t.Error("the oldest message was not forgotten past the bound")
	}

	// An id longer than a key is not remembered: each copy records it,
	// and the store de-duplicates.
	long := "C0123456789ABCDEFGHIJ:1700000000.000100"
	rec, _ = r.begin(long)
	r.finish(long, rec, true)
	if _, first := r.begin(long); !first {
		t.Error("a copy of a message with a long id waited for another instead of recording it")
	}
}

// A message that was not recorded leaves no trace in the ring: a later
// copy, recorded in a slot of its own, is remembered for as long as any
// other recording, not forgotten when the first copy's slot comes round.
func TestRecentMessagesUnrecordedLeavesNoSlot(t *testing.T) {
	var r recentMessages
	rec, _ := r.begin("C1:1")
	r.finish("C1:1", rec, false)
	rec, first := r.begin("C1:1")
	if !first {
		t.Fatal("the copy after an unrecorded one did not record for itself")
	}
	r.finish("C1:1", rec, true)
	// Come round to the first copy's slot, and short of the second's.
	for i := range maxRecentMessages - 1 {
		other := fmt.Sprintf("C2:%d", i)
		rec, _ := r.begin(other)
		r.finish(other, rec, true)
	}
	if _, first := r.begin("C1:1"); first {
		t.Error("the recorded message was forgotten before its own slot came round")
	}
}

// A mention of the bot is <@ID> or <@ID|name>; a user whose id starts with
// the bot's is someone else.
func TestMentionsBotMatchesWholeIDs(t *testing.T) {
	a := &App{botUserID: "U1234567A"}
	for text, want := range map[string]bool{
		"<@U1234567A> deploy":        true,
		"hey <@U1234567A|toolgate>":  true,
		"<@U1234567AB> deploy":       false,
		"<@U1234567AB|bob> and more": false,
		"U1234567A without brackets": false,
	} {
		if got := a.mentionsBot(text); got != want {
			t.Errorf("mentionsBot(%q) = %v, want %v", text, got, want)
		}
	}
	if got := a.cleanText("<@U1234567A> ask <@U1234567AB> about it"); got != "ask <@U1234567AB> about it" {
		t.Errorf("cleanText kept %q, want the bot's mention stripped and the other user's kept", got)
	}
	// What Slack sends for "run a && b > out <now>, then type &lt; literally".
	if got, want := a.cleanText("<@U1234567A> run a &amp;&amp; b &gt; out &lt;now&gt;, then type &amp;lt; literally"), "run a && b > out <now>, then type &lt; literally"; got != want {
		t.Errorf("cleanText = %q, want %q", got, want)
	}
}
