package slackapp

import (
	"context"
	"fmt"
	"github.com/slack-go/slack"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// Work of one key runs in order, one at a time; work of another key does
// not wait for it; a queue's goroutine ends once its queue is empty.
func TestQueuesRunInOrderAndApart(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	release := make(chan struct{})
	var got []string
	done := make(chan struct{})
	a.active.Add(1) // as Run's loop would: the count stays positive
	a.enqueue(ctx, "A", func(context.Context) {
		<-release
		got = append(got, "A1")
	})
	a.enqueue(ctx, "A", func(context.Context) {
		got = append(got, "A2")
		close(done)
	})
	ranB := make(chan struct{})
	a.enqueue(ctx, "B", func(context.Context) { close(ranB) })
	select {
	case <-ranB:
	case <-done:
		t.Fatal("A's second job ran before its first was released")
	}
	close(release)
	<-done
	a.active.Add(-1)
	a.wg.Wait()
	if want := []string{"A1", "A2"}; !slices.Equal(got, want) {
		t.Errorf("A's jobs ran as %v, want %v", got, want)
	}
	a.mu.Lock()
	n := len(a.queues)
	a.mu.Unlock()
	if n != 0 {
		t.Errorf("%d queues are left after their work ended, want none", n)
	}
}

func TestRefusalTextPolicyDenied(t *testing.T) {
	err := fmt.Errorf("decide r.0: %w", &agent.DetailError{Err: approvals.ErrPolicyDenied, Detail: "Deploys are frozen"})
	text, result := refusalText(agent.Call{}, "U1", err)
	if result != "policy_denied" || text != "The policy now denies this call: Deploys are frozen. Nothing ran." {
		t.Errorf("refusalText = %q, %q", text, result)
	}
}

// A decision refused because the policy kept changing while it was
// checked is told so, not as a failure of the bot's store; so is an
// approval refused because others kept being counted meanwhile.
func TestRefusalTextRecordsChanged(t *testing.T) {
	err := fmt.Errorf("decide r.0: the policy changed while the decision was checked, 3 times: %w", store.ErrStale)
	text, result := refusalText(agent.Call{}, "U1", err)
	if result != "changed" || text != ChangedWhileCheckedText() {
		t.Errorf("refusalText = %q, %q; want ChangedWhileCheckedText, changed", text, result)
	}
	err = fmt.Errorf("decide r.0: 50 times: %w", agent.ErrCountedMeanwhile)
	text, result = refusalText(agent.Call{}, "U1", err)
	if result != "changed" || text != CountedWhileCheckedText() {
		t.Errorf("refusalText = %q, %q; want CountedWhileCheckedText, changed", text, result)
	}
}

// An audit line writes out the hidden characters of every field that came
// from the model, the tool's name as the call id.
func TestAuditLineRevealsHiddenCharacters(t *testing.T) {
	e := store.AuditEntry{At: time.Now(), Action: "request", Actor: "U1", Tool: "read_file\u202egol.tset\u200b", CallID: "c\u202e1", Outcome: "invalid", Detail: "no such tool"}
	if line := auditLine(e); strings.ContainsRune(line, '\u202e') || strings.ContainsRune(line, '\u200b') {
		t.Errorf("the audit line shows a hidden character as it is: %q", line)
	}
}

// A card's approver whom the rule the call falls under now leaves out is
// told which rule that is and who it lets approve, not the card's
// approvers (themself among them); a requester under its four eyes is told
// that someone else must approve.
func TestRefusalTextRuleApprovers(t *testing.T) {
	card := agent.Call{Requester: "UREQUESTER", Approvers: []string{"UAPPROVER1", "UOTHER0001"}}
	for _, tt := range []struct {
		name, decider string
		err           *agent.RuleError
		want          string
	}{
		{"edit", "UAPPROVER1", &agent.RuleError{RuleID: "billing", Approvers: []string{"UOTHER0001"}, Edit: true},
			"The edited arguments fall under rule `billing`, which only <@UOTHER0001> may approve, so nothing changed."},
		{"moved", "UAPPROVER1", &agent.RuleError{RuleID: "ops", Approvers: []string{"UOTHER0001", "S0SRE00001"}},
			"This call now falls under rule `ops`, which only <@UOTHER0001> or <!subteam^S0SRE00001> may approve, so nothing changed."},
		{"conversation", "UAPPROVER1", &agent.RuleError{RuleID: "open"},
			"This call now falls under rule `open`, which leaves the call to people in the conversation, so nothing changed."},
		{"four eyes", "UREQUESTER", &agent.RuleError{RuleID: "fe", Approvers: []string{"UREQUESTER", "UOTHER0001"}, FourEyes: true},
			RequesterCannotApproveText()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.err.Err = approvals.ErrNotApprover
			text, result := refusalText(card, tt.decider, fmt.Errorf("decide r.0: %w", tt.err))
			if result != "not_approver" || text != tt.want {
				t.Errorf("refusalText = %q, %q; want %q", text, result, tt.want)
			}
		})
	}
}

// A decision that does not fit the call is explained in the words the
// agent gives for a person, as a sentence, never with the error's chain;
// one that carries no words gets general ones.
func TestRefusalTextBadDecision(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("decide r.0: %w", &agent.DetailError{Err: agent.ErrBadDecision, Detail: "a rejection needs a reason"}), "A rejection needs a reason. Nothing changed."},
		{fmt.Errorf("decide r.0: %w: something internal", agent.ErrBadDecision), "This decision does not fit the call. Nothing changed."},
	} {
		text, result := refusalText(agent.Call{}, "U1", tt.err)
		if result != "invalid" || text != tt.want {
			t.Errorf("refusalText(%v) = %q, %q; want %q", tt.err, text, result, tt.want)
		}
	}
}

func TestRequireAdmin(t *testing.T) {
	// Nothing listens on the API URL: every look-up fails.
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: "http://127.0.0.1:1/", AdminUsers: []string{"UADMIN"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "UADMIN", adminChange); !ok || refusal != "" {
		t.Errorf("requireAdmin(an admin) = %q, %v", refusal, ok)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "USOMEONE", adminChange); ok || !strings.Contains(refusal, "nothing changed") {
		t.Errorf("requireAdmin(someone, no Web API) = %q, %v", refusal, ok)
	}
}

// Workspace admins and owners are admins of the bot's workspace, or of its
// Enterprise Grid organisation (from any of its workspaces); not those of
// another organisation, nor deactivated accounts or bots.
func TestAdminOfThisWorkspace(t *testing.T) {
	a := &App{teamID: "T1", enterpriseID: "E1"}
	grid := func(admin bool, teams ...string) slack.EnterpriseUser {
		return slack.EnterpriseUser{EnterpriseID: "E1", IsAdmin: admin, Teams: teams}
	}
	for _, tt := range []struct {
		name string
		u    slack.User
		want bool
	}{
		{"an admin of this workspace", slack.User{TeamID: "T1", IsAdmin: true}, true},
		{"an owner of this workspace", slack.User{TeamID: "T1", IsOwner: true}, true},
		{"a member of this workspace", slack.User{TeamID: "T1"}, false},
		{"a deactivated admin", slack.User{TeamID: "T1", IsAdmin: true, Deleted: true}, false},
		{"a bot flagged admin", slack.User{TeamID: "T1", IsAdmin: true, IsBot: true}, false},
		{"an admin of another organisation", slack.User{TeamID: "T9", IsAdmin: true}, false},
		{"an organisation admin from another workspace of the organisation", slack.User{TeamID: "T2", Enterprise: grid(true)}, true},
		{"an admin of this workspace whose home is another of the organisation", slack.User{TeamID: "T2", IsAdmin: true, Enterprise: grid(false, "T2", "T1")}, true},
		{"an admin of another workspace of the organisation", slack.User{TeamID: "T2", IsAdmin: true, Enterprise: grid(false, "T2")}, false},
		{"an organisation admin of another organisation", slack.User{TeamID: "T9", Enterprise: slack.EnterpriseUser{EnterpriseID: "E9", IsAdmin: true}}, false},
	} {
		if got := a.adminOfThisWorkspace(&tt.u); got != tt.want {
			t.Errorf("%s: adminOfThisWorkspace = %v, want %v", tt.name, got, tt.want)
		}
	}
	// Outside Enterprise Grid no organisation admits anyone.
	a.enterpriseID = ""
	if u := (slack.User{TeamID: "T2", Enterprise: slack.EnterpriseUser{IsAdmin: true}}); a.adminOfThisWorkspace(&u) {
		t.Error("an organisation admin was admitted by a workspace outside Enterprise Grid")
	}
}

// An outsider is someone whose clicks come from another team than the
// bot's workspace, outside Enterprise Grid; at most maxOutsiders are kept.
func TestNoteTeam(t *testing.T) {
	a := &App{teamID: "T1"}
	a.noteTeam("UIN", "T1")
	a.noteTeam("UNONE", "")
	a.noteTeam("UOUT", "T9")
	if a.outsiders.has("UIN") || a.outsiders.has("UNONE") || !a.outsiders.has("UOUT") {
		t.Errorf("outsiders: in %v, no team %v, other team %v; want only the other team's",
			a.outsiders.has("UIN"), a.outsiders.has("UNONE"), a.outsiders.has("UOUT"))
	}
	grid := &App{teamID: "T1", enterpriseID: "E1"}
	grid.noteTeam("UOUT", "T9")
	if grid.outsiders.has("UOUT") {
		t.Error("on Enterprise Grid a click from another team made an outsider")
	}
	for i := range maxOutsiders + 10 {
		a.outsiders.note(fmt.Sprint("U", i), "T0OTHER001")
	}
	if n := len(a.outsiders.teams); n != maxOutsiders {
		t.Errorf("%d outsiders kept, want %d", n, maxOutsiders)
	}
}

// expiryAgent records expiry passes and answers each with the next deadline
// it is given.
type expiryAgent struct {
	Agent
	passes chan struct{}
	next   chan time.Time
}

func (f *expiryAgent) Expire(context.Context, func(runID, conversation string)) (time.Time, error) {
	f.passes <- struct{}{}
	return <-f.next, nil
}

// The expiry timer sleeps until the next deadline it knows: one the store
// reports after a pass, or one a call paused in this process sets; never a
// fixed tick (SweepInterval is an hour here).
func TestExpiryTimerFollowsDeadlines(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", SweepInterval: time.Hour}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &expiryAgent{passes: make(chan struct{}), next: make(chan time.Time)}
	a.ag = f
	stopping := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.expire(t.Context(), stopping)
	}()
	pass := func(what string, next time.Time) {
		t.Helper()
		select {
		case <-f.passes:
		case <-time.After(10 * time.Second):
			t.Fatalf("no expiry pass %s", what)
		}
		f.next <- next
	}
	pass("at start", time.Time{})
	// A call paused here wakes the timer.
	a.expiry.at(time.Now().Add(20 * time.Millisecond))
	pass("at a deadline set by a pause", time.Now().Add(20*time.Millisecond))
	pass("at the deadline the store reported", time.Time{})
	close(stopping)
	<-done
}

// panicAgent panics while it records a message and takes its
// conversation (a bug in the store's client, say); everything else works.
type panicAgent struct {
	Agent
	ran atomic.Int64
}

func (f *panicAgent) AcceptTaking(context.Context, agent.Request, bool) (agent.Request, store.Acceptance, *agent.Taken, error) {
	panic("a bug while recording")
}

func (f *panicAgent) Accept(_ context.Context, r agent.Request, _ bool) (agent.Request, store.Acceptance, error) {
	r.Seq = 1
	return r, store.Accepted, nil
}

func (f *panicAgent) Run(context.Context, agent.Request) (agent.Outcome, error) {
	f.ran.Add(1)
	return agent.Outcome{Status: agent.Answered}, nil
}

func (f *panicAgent) DecideTaking(context.Context, approvals.Decision) (agent.DecideResult, *agent.Taken, error) {
	panic("a bug while deciding")
}

// A panic while a message is recorded under a turn slot it reserved gives
// the slot back and leaves no queue that nothing serves: the next message
// of the conversation gets its turn, and every slot is free after.
func TestPanicWhileRecordingFreesSlotAndQueue(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", MaxTurns: 2}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &panicAgent{}
	a.ag = f
	ctx := t.Context()
	a.active.Add(1) // as Run's loop would: the count stays positive
	m := message{team: "T", channel: "C", user: "U", text: "hi", ts: "1.1"}
	a.onMessage(ctx, m, "E1", false, func() {})
	a.active.Add(-1)
	a.wg.Wait() // the message's goroutine panicked and ended
	a.mu.Lock()
	q := a.queues[m.key()]
	a.mu.Unlock()
	if q != nil {
		t.Fatalf("the conversation's queue is left after a panic, with %d jobs nothing runs", len(q.jobs))
	}
	if !a.slots.TryAcquire(2) {
		t.Fatal("a turn slot was not given back after a panic")
	}
	a.slots.Release(2)
	// A panic while a click is decided under a slot gives it back too.
	a.active.Add(1)
	func() {
		defer func() { _ = recover() }()
		a.decide(ctx, click{}, approvals.Decision{})
	}()
	a.active.Add(-1)
	if !a.slots.TryAcquire(2) {
		t.Fatal("a turn slot was not given back after a panic in a decision")
	}
	a.slots.Release(2)
}

// scanAgent holds each background pass (takeover scan, sweep, expiry)
// until released, then reports one piece of work; it counts the work
// started.
type scanAgent struct {
	Agent
	called, proceed chan struct{}
	started         atomic.Int64
}

func (f *scanAgent) Unanswered(context.Context, int, int) ([]string, error) {
	close(f.called)
	<-f.proceed
	return []string{"T/C/1.1"}, nil
}

func (f *scanAgent) Sweep(_ context.Context, resume func(runID, conversation string)) error {
	close(f.called)
	<-f.proceed
	resume("r1", "T/C/1.1")
	return nil
}

func (f *scanAgent) Expire(_ context.Context, resume func(runID, conversation string)) (time.Time, error) {
	close(f.called)
	<-f.proceed
	resume("r1", "T/C/1.1")
	return time.Time{}, nil
}

func (f *scanAgent) TakeOver(context.Context, string) (agent.Outcome, error) {
	f.started.Add(1)
	return agent.Outcome{Status: agent.Idle}, nil
}

func (f *scanAgent) Resume(context.Context, string) (agent.Outcome, error) {
	f.started.Add(1)
	return agent.Outcome{Status: agent.Idle}, nil
}

// A takeover scan, sweep or expiry pass still running when the shutdown
// begins starts no turn or resume when it ends: the next process's passes
// find that work again.
func TestPassEndingInShutdownStartsNothing(t *testing.T) {
	for name, pass := range map[string]func(a *App, ctx context.Context, stopping <-chan struct{}){
		"takeover": (*App).takeover,
		"sweep":    (*App).sweep,
		"expiry":   (*App).expire,
	} {
		t.Run(name, func(t *testing.T) {
			a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test"}, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			f := &scanAgent{called: make(chan struct{}), proceed: make(chan struct{})}
			a.ag = f
			stopping := make(chan struct{})
			a.spawn(t.Context(), name, func(ctx context.Context) { pass(a, ctx, stopping) })
			<-f.called
			close(stopping) // the shutdown begins (Run closes stopping first)
			close(f.proceed)
			a.wg.Wait()
			if n := f.started.Load(); n != 0 {
				t.Errorf("%d turns or resumes started after the shutdown began, want none", n)
			}
		})
	}
}

// answerPage puts whole entries on each page, each page within an
// ephemeral answer's bounds in characters and in encoded bytes (JSON
// writes < and > in six bytes each), and every entry on one page.
func TestAnswerPageKeepsEntriesWhole(t *testing.T) {
	for _, tt := range []struct {
		name  string
		entry func(i int) string
	}{
		{"plain", func(i int) string { return fmt.Sprintf("%d. %s", i, strings.Repeat("x", 90)) }},
		{"brackets", func(i int) string { return fmt.Sprintf("%d. %s", i, strings.Repeat("<>", 50)) }},
		{"wide", func(i int) string { return fmt.Sprintf("%d. %s", i, strings.Repeat("😀", 50)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var entries []string
			for i := range 300 {
				entries = append(entries, tt.entry(i))
			}
			seen := map[string]int{}
			_, pages := answerPage("head\n", entries, "tail\n", 1, func(p int) string { return fmt.Sprint("next ", p) })
			if pages < 2 {
				t.Fatalf("%d entries fit on %d page", len(entries), pages)
			}
			for p := 1; p <= pages; p++ {
				text, _ := answerPage("head\n", entries, "tail\n", p, func(p int) string { return fmt.Sprint("next ", p) })
				if n := textLen(text); n > maxEphemeralChars {
					t.Errorf("page %d is %d characters, want at most %d", p, n, maxEphemeralChars)
				}
				if n := encodedLen(text); n > maxEphemeralBytes {
					t.Errorf("page %d is %d bytes encoded, want at most %d", p, n, maxEphemeralBytes)
				}
				for _, line := range strings.Split(text, "\n") {
					seen[line]++
				}
				if got := ephemeral(text)["text"]; got != text {
					t.Errorf("page %d is cut by ephemeral", p)
				}
			}
			for _, e := range entries {
				if seen[e] != 1 {
					t.Errorf("entry %q is on %d pages, want 1", e, seen[e])
				}
			}
			if text, _ := answerPage("head\n", entries, "tail\n", pages+1, nil); text != "" {
				t.Errorf("page %d of %d: %q, want none", pages+1, pages, text)
			}
		})
	}
}

// A turn cut by the shutdown is told it is answered after the restart,
// whether the cut reached it as the context's end or as a model call
// canceled with it; a model that failed on its own is not, nor a message
// the cut kept from being recorded (it is asked again), nor a turn one of
// the bot's own deadlines ended (the bot is not restarting).
func TestFailureTextOfAShutdownCut(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"context canceled", fmt.Errorf("turn cut short before the model answered: %w", context.Canceled), restartingRecordedText},
		{"model call canceled", fmt.Errorf("model: %w", &agent.ModelError{Kind: agent.ErrKindCanceled, Err: context.Canceled}), restartingRecordedText},
		{"model server unreachable", fmt.Errorf("model: %w", &agent.ModelError{Kind: agent.ErrKindConnection}), "I couldn't get an answer from the model"},
		{"refused for its content", fmt.Errorf("model: %w", &agent.ModelError{Kind: agent.ErrKindContentRefused, StatusCode: 400, Message: "flagged"}), "The model provider refused this request because of its content (`flagged`)"},
		// Cut before the message was recorded: lost unless sent again.
		{"message not recorded", fmt.Errorf("%w: %w", agent.ErrNotRecorded, context.Canceled), "I was interrupted before finishing"},
		// A deadline of the bot's own (a store call's), not the shutdown.
		{"store call timed out", fmt.Errorf("save turn: %w", context.DeadlineExceeded), "Something went wrong while working on this"},
	} {
		if got := failureText(tt.err, nil); !strings.HasPrefix(got, tt.want) {
			t.Errorf("failureText(%s) = %q, want %q", tt.name, got, tt.want)
		}
		if got, want := agent.Interrupted(tt.err), tt.want == restartingRecordedText; got != want {
			t.Errorf("agent.Interrupted(%s) = %v, want %v", tt.name, got, want)
		}
	}
}

// The model server's words in a failure note are code with their hidden
// characters written out: a right-to-left override in them cannot reverse
// the bot's sentence after them.
func TestFailureTextWritesOutTheServersHiddenCharacters(t *testing.T) {
	for _, me := range []*agent.ModelError{
		{Kind: agent.ErrKindHTTP, StatusCode: 401, Message: "bad key \u202e.won rof enif si llA"},
		{Kind: agent.ErrKindContentRefused, StatusCode: 400, Message: "flagged \u202e.won rof enif si llA"},
	} {
		got := failureText(fmt.Errorf("model: %w", me), nil)
		if strings.ContainsRune(got, '\u202e') || !strings.Contains(got, " ⟦U+202E⟧.won rof enif si llA`") {
			t.Errorf("failureText(%s) = %q, want the server's U+202E written out in its code span", me.Kind, got)
		}
	}
}
