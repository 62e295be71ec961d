package redisstore_test

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// scriptOn reports whether cmd is a script (EVAL or EVALSHA) given a key
// ending in suffix among its KEYS.
func scriptOn(cmd redis.Cmder, suffix string) bool {
	args := cmd.Args()
	if len(args) < 4 || !strings.HasPrefix(fmt.Sprint(args[0]), "eval") {
		return false
	}
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil {
		return false
	}
	return slices.ContainsFunc(args[3:min(len(args), 3+n)], func(k any) bool { return strings.HasSuffix(fmt.Sprint(k), suffix) })
}

// convSuffix is how the key of conversation conv ends (its prefix aside).
func convSuffix(conv string) string { return ":conv:{conv:" + conv + "}" }

// A commit applied (its lease released) whose reply is lost, sent again
// by the client after another owner took the conversation and committed
// in between, is answered as applied: the other owner's commit does not
// hide that the first sending was applied, so the commit is not refused
// as not held (its writer would take back a turn that is saved, and write
// its audit entries a second time), and the sending is not applied twice
// over the other owner's state, nor its audit entries written twice. On
// a single node the plain commit takes
// the general path and the others their own scripts; on a Cluster each
// takes the general path.
func TestCommitSentAgainAfterAnotherOwnersCommit(t *testing.T) {
	for _, topo := range topologies(t) {
		for _, kind := range []string{"answer", "pause", "finish"} {
			t.Run(topo.name+"/"+kind, func(t *testing.T) {
				c, s, other := hookedPair(t, topo.url)
				ctx := t.Context()
				// Loads the scripts, so that those under test are sent
				// by their SHA.
				_, warm := pausedOnOneCall(t, s, "fpw")
				if err := s.CommitTurn(ctx, store.Commit{Key: "C1:" + store.NewRunID(), Conversation: &store.Conversation{State: []byte(`{}`)}, Finish: store.RunOf(warm[0].ID)}); err != nil {
					t.Fatal(err)
				}
				conv, calls := pausedOnOneCall(t, s, "fp0")
				m, _, err := s.AcceptMessage(ctx, conv, store.Inbound{User: "U1", Channel: "C1", Text: "go on"}, false)
				if err != nil {
					t.Fatal(err)
				}
				if b, err := s.BeginTurn(ctx, conv, "a", time.Minute); err != nil || !b.Acquired {
					t.Fatalf("BeginTurn by a = %v, %v", b.Acquired, err)
				}
				mine := store.Commit{Key: conv, Conversation: &store.Conversation{State: []byte(`{"by":"a"}`)}, Answer: true, AnswerUpTo: m.Seq, Holder: "a", Release: "a",
					Audit: []store.AuditEntry{{Actor: "U1", Action: "execute", Tool: "t", CallID: "x.0", Outcome: "ok", Detail: "the commit's " + conv, At: time.Now()}}}
				var r store.Run
				switch kind {
				case "pause":
					r = store.Run{ID: store.NewRunID(), Conversation: conv, Requester: "U1", Channel: "C1"}
					mine.Run = &r
					mine.Calls = []store.Call{{ID: store.CallID(r.ID, 0), Tool: "t", Fingerprint: "fp1", Requester: "U1", Conversation: conv, ExpiresAt: time.Now().Add(time.Hour)}}
					mine.Conversation.PausedRun = r.ID
				case "finish":
					mine.Finish = store.RunOf(calls[0].ID)
				}
				theirs := []byte(`{"by":"b"}`)
				armed := true
				c.AddHook(resendAfterHook{armed: &armed, on: func(cmd redis.Cmder) bool { return scriptOn(cmd, convSuffix(conv)) }, between: func() {
					// The first sending released a's lease: b takes the
					// conversation and commits.
					if b, err := other.BeginTurn(ctx, conv, "b", time.Minute); err != nil || !b.Acquired {
						t.Errorf("BeginTurn by b between the sendings = %v, %v; want it acquired", b.Acquired, err)
						return
					}
					if err := other.CommitTurn(ctx, store.Commit{Key: conv, Conversation: &store.Conversation{State: theirs}, Holder: "b", Release: "b"}); err != nil {
						t.Errorf("b's commit between the sendings: %v", err)
					}
				}})
				err = s.CommitTurn(ctx, mine)
				if armed {
					t.Fatal("the commit was not sent again")
				}
				if err != nil {
					t.Errorf("a's commit sent again after b's = %v, want it answered as applied", err)
				}
				if got, err := s.LoadConversation(ctx, conv); err != nil || string(got.State) != string(theirs) {
					t.Errorf("the conversation after both commits = %s, %v; want b's (the later)", got.State, err)
				}
				log, err := s.AuditLog(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if n := len(slices.DeleteFunc(log, func(e store.AuditEntry) bool { return e.Detail != mine.Audit[0].Detail })); n != 1 {
					t.Errorf("the commit's audit entry is in the log %d times, want once", n)
				}
				if kind == "pause" {
					if _, _, err := s.LoadRun(ctx, r.ID); err != nil {
						t.Errorf("LoadRun(%s) of the pause applied = %v, want it kept", r.ID, err)
					}
				}
			})
		}
	}
}
