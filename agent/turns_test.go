package agent_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/storetest"
)

// turnLog is a store that records the agent's calls that start and record
// turns, write audit entries or hold leases, in order, and can hold a
// commit until it is let through.
type turnLog struct {
	storetest.Store
	mu      sync.Mutex
	calls   []string
	commits []store.Commit
	// hold, if set, receives each commit before it is made, and the
	// commit waits for a value on resume.
	hold   chan store.Commit
	resume chan struct{}
	// order, if set, gets "commit" as a commit begins.
	order *eventLog
}

// eventLog is what the fakes of a test saw, in the order they saw it.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(event string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event)
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// loggedAgent returns an agent of w's on a turnLog of w's store.
func loggedAgent(w *world) (*agent.Agent, *turnLog) {
	log := &turnLog{Store: w.store.(storetest.Store)}
	w.store = log
	return w.agent(), log
}

func (l *turnLog) add(call string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, call)
}

// take returns the calls recorded since the last take.
func (l *turnLog) take() ([]string, []store.Commit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	calls, commits := l.calls, l.commits
	l.calls, l.commits = nil, nil
	return calls, commits
}

func (l *turnLog) BeginTurn(ctx context.Context, conv, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	l.add("BeginTurn")
	return l.Store.BeginTurn(ctx, conv, owner, ttl, kinds...)
}

func (l *turnLog) RecordsOf(ctx context.Context, kinds ...string) (map[string][]store.Record, error) {
	l.add("RecordsOf")
	return l.Store.RecordsOf(ctx, kinds...)
}

func (l *turnLog) CommitTurn(ctx context.Context, c store.Commit) error {
	l.order.add("commit")
	if l.hold != nil {
		l.hold <- c
		<-l.resume
	}
	l.mu.Lock()
	l.calls = append(l.calls, "CommitTurn")
	l.commits = append(l.commits, c)
	l.mu.Unlock()
	return l.Store.CommitTurn(ctx, c)
}

func (l *turnLog) Audit(ctx context.Context, e store.AuditEntry) error {
	l.add("Audit")
	return l.Store.Audit(ctx, e)
}

func (l *turnLog) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	l.add("AcquireLease")
	return l.Store.AcquireLease(ctx, key, owner, ttl)
}

func (l *turnLog) ReleaseLease(ctx context.Context, key, owner string) error {
	l.add("ReleaseLease")
	return l.Store.ReleaseLease(ctx, key, owner)
}

func (l *turnLog) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	l.add("BeginResume")
	return l.Store.BeginResume(ctx, runID, r)
}

func (l *turnLog) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	l.add("BeginExecution")
	return l.Store.BeginExecution(ctx, id, attempt)
}

func (l *turnLog) AbandonExecution(ctx context.Context, id, attempt string) error {
	l.add("AbandonExecution")
	return l.Store.AbandonExecution(ctx, id, attempt)
}

func (l *turnLog) SaveResult(ctx context.Context, id string, r []byte, e store.AuditEntry) error {
	l.add("SaveResult")
	return l.Store.SaveResult(ctx, id, r, e)
}

func actions(es []store.AuditEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Action)
	}
	return out
}

func auditLog(t *testing.T, st agent.Store) []string {
	t.Helper()
	log, err := st.(storetest.Store).AuditLog(t.Context(), 0)
	must(t, err)
	var out []string
	for _, e := range log {
		out = append(out, e.Action+" "+e.Tool)
	}
	return out
}

// Every audit entry of a call names it by one id: the model's tool call
// id for a call that runs or is denied without pausing, the paused call's
// own id (that of its card and decisions) for one that pauses, from its
// request on.
func TestAuditEntriesNameTheCall(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	a := w.agent()
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_file", `{"path":"a"}`), call("c2", "drop_db", `{}`), call("c3", "deploy", `{"service":"api","version":"2"}`)))
	out, err := a.Run(t.Context(), request("read a, drop the db, deploy api 2"))
	must(t, err)
	if out.Status != agent.Paused || len(out.Pending) != 1 {
		t.Fatalf("Run = %s with %d pending, want the deploy paused", out.Status, len(out.Pending))
	}
	log, err := w.store.(storetest.Store).AuditLog(t.Context(), 0)
	must(t, err)
	got := map[string]string{}
	for _, e := range log {
		got[e.Action+" "+e.Tool] = e.CallID
	}
	want := map[string]string{
		"request read_file": "c1", "execute read_file": "c1",
		"request drop_db": "c2",
		"request deploy":  out.Pending[0].ID, "pause deploy": out.Pending[0].ID,
	}
	if !maps.Equal(got, want) {
		t.Errorf("call ids of the audit entries = %q, want %q", got, want)
	}
}

// A turn that pauses reads with one BeginTurn (the policy judges by the
// records it read, with no read of its own) and writes with one
// CommitTurn: the run, the audit entries of the request and the pause, the
// inbox answered and the lease released. The entries are written with the
// commit, not before it.
func TestPauseIsOneBeginAndOneCommit(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			log := &turnLog{Store: w.store.(storetest.Store), hold: make(chan store.Commit), resume: make(chan struct{})}
			w.store = log
			a := w.agent()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
			done := make(chan error, 1)
			go func() {
				_, err := a.Run(ctx, request("deploy api 2"))
				done <- err
			}()
			held := <-log.hold
			if got := auditLog(t, w.store); len(got) != 0 {
				t.Errorf("audit log while the commit is held = %q, want nothing yet", got)
			}
			close(log.resume)
			must(t, <-done)
			calls, commits := log.take()
			if !slices.Equal(calls, []string{"AcceptMessage", "BeginTurn", "CommitTurn"}) {
				t.Errorf("store calls of the message and its turn = %q, want AcceptMessage (Run records it), BeginTurn, CommitTurn and no RecordsOf", calls)
			}
			c := commits[0]
			if c.Run == nil || len(c.Calls) != 1 || c.Conversation == nil || c.Conversation.PausedRun != c.Run.ID || !c.Answer || c.Release == "" || c.Key != held.Key {
				t.Errorf("the commit = %+v, want the run, the conversation paused on it, the inbox answered and the lease released", c)
			}
			if got := actions(c.Audit); !slices.Equal(got, []string{"request", "pause"}) {
				t.Errorf("audit entries of the commit = %q, want request, pause", got)
			}
			if got := auditLog(t, w.store); !slices.Equal(got, []string{"pause deploy", "request deploy"}) {
				t.Errorf("audit log after the commit = %q, want the pause and the request", got)
			}
			// The lease is free: another process takes the conversation at once.
			b, err := log.Store.BeginTurn(ctx, request("").Conversation, "other", time.Minute)
			if err != nil || !b.Acquired {
				t.Errorf("BeginTurn by another owner after the pause = %v, %v; want the lease", b.Acquired, err)
			}
		})
	}
}

// A call that the records read when the turn began allow is judged again
// before it runs: a deny rule an admin added while the model was thinking
// stops it, and the pause of a gated call beside it still reads nothing.
func TestAllowedCallIsJudgedByThePolicyOfItsTime(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			log := &turnLog{Store: w.store.(storetest.Store)}
			w.store = log
			a := w.agent()
			w.model.Handle(func(openaiRequest) fakeopenai.Response {
				// The model answers once the admin's rule is in.
				if _, err := w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "frozen", Tool: "read_file", Verdict: approvals.Deny, Reason: "reads are frozen"}); err != nil {
					t.Errorf("AddRule: %v", err)
				}
				w.model.Handle(nil)
				return fakeopenai.ToolCalls(call("c1", "read_file", `{"path":"/etc/motd"}`), call("c2", "deploy", `{"service":"api","version":"2"}`))
			})
			out, err := a.Run(ctx, request("read the motd and deploy api 2"))
			must(t, err)
			if out.Status != agent.Paused {
				t.Fatalf("got %s, want the deploy paused", out.Status)
			}
			if n := w.reads.n.Load(); n != 0 {
				t.Errorf("read_file ran %d times, want never: the rule added before the call denies it", n)
			}
			calls, _ := log.take()
			if got := slices.DeleteFunc(calls, func(c string) bool { return c != "RecordsOf" }); len(got) != 1 {
				t.Errorf("RecordsOf calls of the turn = %d, want one, for the call the turn's records allowed", len(got))
			}
		})
	}
}

// The end of a resumed step is one commit after the tool's result is
// saved with the execution's audit entry: the conversation, the run
// finished and the lease released.
func TestResumeEndsWithOneCommit(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	log := &turnLog{Store: w.store.(storetest.Store)}
	w.store = log
	a := w.agent()
	p := approvedDeploy(t, w, a)
	log.take()
	w.model.Reply(fakeopenai.Text("deployed"))
	out, err := a.Resume(ctx, p.RunID)
	must(t, err)
	if out.Status != agent.Answered {
		t.Fatalf("got %s, want the resume answered", out.Status)
	}
	calls, commits := log.take()
	i := slices.Index(calls, "SaveResult")
	if i < 0 || !slices.Equal(calls[i:], []string{"SaveResult", "CommitTurn"}) {
		t.Errorf("store calls of the resume = %q, want SaveResult then one CommitTurn at the end", calls)
	}
	if slices.Contains(calls, "Audit") || slices.Contains(calls, "ReleaseLease") {
		t.Errorf("store calls of the resume = %q, want the audit entry and the release in the commit", calls)
	}
	c := commits[len(commits)-1]
	if c.Finish != p.RunID || c.Conversation == nil || c.Conversation.PausedRun != "" || c.Release == "" || !c.Answer {
		t.Errorf("the commit = %+v, want the run finished, the conversation moved on and the lease released", c)
	}
	if got := actions(c.Audit); len(got) != 0 {
		t.Errorf("audit entries of the commit = %q, want none: the execution's goes with its result", got)
	}
	if got := auditLog(t, w.store); !slices.Contains(got, "execute deploy") {
		t.Errorf("audit log = %q, want the execution's entry", got)
	}
}

// heldSave holds SaveResult until release is closed, closing saving when
// it arrives, and notes a CommitTurn made before the save ended.
type heldSave struct {
	storetest.Store
	saving, release chan struct{}
	saved, early    atomic.Bool
}

func (s *heldSave) SaveResult(ctx context.Context, id string, r []byte, e store.AuditEntry) error {
	close(s.saving)
	<-s.release
	err := s.Store.SaveResult(ctx, id, r, e)
	s.saved.Store(true)
	return err
}

func (s *heldSave) CommitTurn(ctx context.Context, c store.Commit) error {
	if !s.saved.Load() {
		s.early.Store(true)
	}
	return s.Store.CommitTurn(ctx, c)
}

// The model is asked with a tool's result while the result is still being
// saved with its call (a round trip, or a disk sync, less before the
// answer); the turn's write waits for the save, so the result is on the
// call before the run is finished.
func TestModelIsAskedWhileTheResultIsSaved(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, backends(t)[0])
	p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
	hs := &heldSave{Store: w.store.(storetest.Store), saving: make(chan struct{}), release: make(chan struct{})}
	a := w.agentWith(hs, w.rec)
	_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
	must(t, err)
	asked := make(chan struct{})
	w.model.Handle(func(openaiRequest) fakeopenai.Response {
		close(asked)
		return fakeopenai.Text("deployed")
	})
	type outcome struct {
		out agent.Outcome
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := a.Resume(ctx, p.RunID)
		done <- outcome{out, err}
	}()
	<-hs.saving
	select {
	case <-asked:
	case r := <-done:
		t.Fatalf("the resume ended (%s, %v) while its tool's result was being saved", r.out.Status, r.err)
	case <-time.After(10 * time.Second):
		close(hs.release)
		t.Fatal("the model was not asked while the tool's result was being saved")
	}
	close(hs.release)
	r := <-done
	must(t, r.err)
	if r.out.Status != agent.Answered {
		t.Fatalf("got %s, want the resume answered", r.out.Status)
	}
	if hs.early.Load() {
		t.Error("the turn was recorded before its tool's result was saved")
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	c, err := hs.GetCall(ctx, p.ID)
	must(t, err)
	if !strings.Contains(string(c.Result), "deployed") {
		t.Errorf("saved result = %s, want the tool's", c.Result)
	}
}

// The resume marks the approved call as started with the claim it takes
// (no BeginExecution of its own); a call so marked that the policy now
// denies does not run, and its outcome is saved with the mark, in the
// one store step that would have taken the mark back (see
// TestCallNotRunIsToldSoWhenItsResumeIsClaimedAgain).
func TestResumeStartsItsFirstCallWithItsClaim(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			log := &turnLog{Store: w.store.(storetest.Store)}
			w.store = log
			a := w.agent()
			p := approvedDeploy(t, w, a)
			log.take()
			w.model.Reply(fakeopenai.Text("deployed"))
			_, err := a.Resume(ctx, p.RunID)
			must(t, err)
			calls, _ := log.take()
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
			if !slices.Contains(calls, "BeginResume") || slices.Contains(calls, "BeginExecution") || slices.Contains(calls, "AbandonExecution") {
				t.Errorf("store calls of the resume = %q, want BeginResume and no BeginExecution or AbandonExecution", calls)
			}

			p = pauseOne(t, w, a, call("c2", "restart", `{"env":"staging"}`))
			_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOTHER2"})
			must(t, err)
			_, err = w.engine.AddRule(ctx, "UADMIN0001", approvals.Rule{ID: "banned", Tool: "restart", Verdict: approvals.Deny, Reason: "frozen"})
			must(t, err)
			log.take()
			w.model.Reply(fakeopenai.Text("not restarted"))
			_, err = a.Resume(ctx, p.RunID)
			must(t, err)
			calls, _ = log.take()
			if n := w.restarts.n.Load(); n != 0 {
				t.Errorf("restart ran %d times, want never: the policy now denies it", n)
			}
			if !slices.Contains(calls, "SaveResult") || slices.Contains(calls, "BeginExecution") || slices.Contains(calls, "AbandonExecution") {
				t.Errorf("store calls of the denied resume = %q, want its outcome saved with the mark, and no other step on the call", calls)
			}
			news, err := a.News(ctx, p.ID)
			must(t, err)
			if news.Phase != agent.PhaseSkipped || !strings.HasPrefix(news.Note, "policy now denies") {
				t.Errorf("the call as stored is %s (%q), want skipped because the policy now denies it", news.Phase, news.Note)
			}
		})
	}
}

// When the pause cannot be recorded, its audit entries are not written
// (the run does not exist); the request is, with the turn's result.
func TestFailedPauseWritesNoPauseEntries(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	flaky := &flakyStore{Store: w.store.(storetest.Store)}
	w.store = flaky
	a := w.agent()
	flaky.failCreate.Store(1)
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"a","version":"1"}`)))
	if _, err := a.Run(ctx, request("deploy")); err == nil {
		t.Fatal("the failed pause was not reported")
	}
	if got := auditLog(t, w.store); !slices.Equal(got, []string{"request deploy"}) {
		t.Errorf("audit log = %q, want only the request", got)
	}
}

// Each started execution has one audit entry, written with its saved
// result: a resume claimed again after its runner died with the result
// saved writes none; one that finds the call started without a result
// (its runner died while the tool ran) writes the entry of its unknown
// outcome with the result it saves, and a resume claimed after that one
// died too writes none.
func TestReclaimedResumeAuditsAnExecutionOnce(t *testing.T) {
	for _, saved := range []bool{true, false} {
		t.Run(map[bool]string{true: "saved", false: "interrupted"}[saved], func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, backends(t)[0])
			w.cfg.LeaseTTL = 300 * time.Millisecond
			a := w.agent()
			p := approvedDeploy(t, w, a)
			ok, err := w.store.BeginExecution(ctx, p.ID, "")
			must(t, err)
			if !ok {
				t.Fatal("BeginExecution refused")
			}
			want := "ok"
			if saved {
				entry := store.AuditEntry{Actor: "UAPPROVER1", Action: "execute", Tool: "deploy", CallID: p.ID, Outcome: "ok"}
				must(t, w.store.SaveResult(ctx, p.ID, []byte(`{"content":"deployed by the first resumer"}`), entry))
				w.model.Reply(fakeopenai.Text("done"))
				_, err = w.restart().Resume(ctx, p.RunID)
				must(t, err)
			} else {
				// The second resumer finds the outcome unknown and dies
				// while the model is asked.
				want = "unknown"
				entered, release := heldAt(w, 1, func(int64) fakeopenai.Response { return fakeopenai.Text("done") })
				second, d := w.doomed()
				done := make(chan error, 1)
				go func() {
					_, err := second.Resume(ctx, p.RunID)
					done <- err
				}()
				<-entered
				<-d.saved
				d.kill()
				close(release)
				<-done
				if out := takeOver(t, w, w.restart(), p.Conversation); out.Status != agent.Answered {
					t.Fatalf("TakeOver = %+v, want the resume answered", out)
				}
				if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "outcome unknown") {
					t.Errorf("tool results of the takeover = %q, want the outcome unknown", got)
				}
			}
			if n := w.deploys.n.Load(); n != 0 {
				t.Errorf("deploy ran %d times, want never again", n)
			}
			log, err := w.store.(storetest.Store).AuditLog(ctx, 0)
			must(t, err)
			var executes []store.AuditEntry
			for _, e := range log {
				if e.Action == "execute" {
					executes = append(executes, e)
				}
			}
			if len(executes) != 1 || executes[0].CallID != p.ID || executes[0].Actor != "UAPPROVER1" || executes[0].Outcome != want {
				t.Errorf("execute entries = %+v, want one for %s by UAPPROVER1 with the outcome %s", executes, p.ID, want)
			}
		})
	}
}

func (l *turnLog) AcceptBegin(ctx context.Context, conv string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	l.add("AcceptBegin")
	return l.Store.AcceptBegin(ctx, conv, m, requireKnown, owner, ttl, kinds...)
}

func (l *turnLog) AcceptMessage(ctx context.Context, conv string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	l.add("AcceptMessage")
	return l.Store.AcceptMessage(ctx, conv, m, requireKnown)
}

// A message recorded with AcceptTaking takes the conversation's lease in
// the same store step, and its turn (RunTaken) starts from what that step
// read: the pause is AcceptBegin and CommitTurn, with no BeginTurn. While
// a turn of this process holds the conversation, AcceptTaking only records
// the message; a Taken given back frees the lease, and runs once at most.
func TestAcceptTakingStartsTheTurnInTheSameStep(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a, log := loggedAgent(w)
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`)))
			req, acc, taken, err := a.AcceptTaking(ctx, request("deploy api 2"), false)
			must(t, err)
			if acc != store.Accepted || taken == nil || req.Seq == 0 {
				t.Fatalf("AcceptTaking = %q, taken %v, seq %d; want accepted, taken, a seq", acc, taken != nil, req.Seq)
			}
			out, err := a.RunTaken(ctx, req, taken)
			must(t, err)
			if out.Status != agent.Paused {
				t.Fatalf("RunTaken = %s, want paused", out.Status)
			}
			if calls, _ := log.take(); !slices.Equal(calls, []string{"AcceptBegin", "CommitTurn"}) {
				t.Errorf("store calls of the message and its turn = %q, want AcceptBegin, CommitTurn", calls)
			}
			if _, err := a.RunTaken(ctx, req, taken); err == nil {
				t.Error("RunTaken of a Taken that ran succeeded, want an error")
			}

			// A second conversation, held by a turn of this process (its
			// model call held): the message is only recorded.
			held := make(chan struct{})
			w.model.Handle(func(openaiRequest) fakeopenai.Response {
				<-held
				return fakeopenai.Text("done")
			})
			busy := request("what is up")
			busy.Conversation = "T1/C1/busy"
			done := make(chan error, 1)
			started := make(chan struct{})
			go func() {
				r, _, tk, err := a.AcceptTaking(ctx, busy, false)
				if err != nil || tk == nil {
					close(started)
					done <- fmt.Errorf("AcceptTaking of the first message = taken %v, %v", tk != nil, err)
					return
				}
				close(started)
				_, err = a.RunTaken(ctx, r, tk)
				done <- err
			}()
			<-started
			// The first request was the first conversation's.
			if _, err := w.model.WaitRequests(ctx, 2); err != nil {
				close(held)
				t.Fatal(err)
			}
			log.take()
			second := busy
			second.Text, second.MsgID, second.EventID = "and now?", "M2", "E2"
			_, acc, tk, err := a.AcceptTaking(ctx, second, false)
			must(t, err)
			if acc != store.Accepted || tk != nil {
				t.Errorf("AcceptTaking while a turn holds the conversation = %q, taken %v; want accepted, not taken", acc, tk != nil)
			}
			if calls, _ := log.take(); !slices.Equal(calls, []string{"AcceptMessage"}) {
				t.Errorf("store calls of the message = %q, want AcceptMessage only", calls)
			}
			close(held)
			must(t, <-done)

			// A Taken given back: another owner takes the lease at once.
			third := request("later")
			third.Conversation = "T1/C1/released"
			_, _, tk, err = a.AcceptTaking(ctx, third, false)
			must(t, err)
			if tk == nil {
				t.Fatal("AcceptTaking of an idle conversation took nothing")
			}
			a.ReleaseTaken(ctx, tk)
			if ok, err := log.Store.AcquireLease(ctx, store.TurnLease(third.Conversation), "other", time.Minute); err != nil || !ok {
				t.Errorf("AcquireLease by another owner after ReleaseTaken = %v, %v; want the lease", ok, err)
			}
			if _, err := a.RunTaken(ctx, third, tk); err == nil {
				t.Error("RunTaken of a released Taken succeeded, want an error")
			}
		})
	}
}

func (l *turnLog) GetCallWith(ctx context.Context, id string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	l.add("GetCallWith")
	return l.Store.GetCallWith(ctx, id, kinds...)
}

func (l *turnLog) DecideBegin(ctx context.Context, id, fp string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if fx.IfRecords != 0 {
		l.add("DecideBegin if records")
	} else {
		l.add("DecideBegin")
	}
	return l.Store.DecideBegin(ctx, id, fp, d, fx, r)
}

func (l *turnLog) DecideAudited(ctx context.Context, id, fp string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	l.add("DecideAudited")
	return l.Store.DecideAudited(ctx, id, fp, d, fx)
}

func (l *turnLog) ApproveAudited(ctx context.Context, id, fp string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	l.add("ApproveAudited")
	return l.Store.ApproveAudited(ctx, id, fp, a, drop, edit, need, d, fx)
}

// heldAnswer is a recorder whose first answer closes answering, waits
// until release is closed and then tells order it was released.
type heldAnswer struct {
	*recorder
	answering, release chan struct{}
	order              *eventLog
	once               sync.Once
}

func (r *heldAnswer) Answer(ctx context.Context, s string) {
	r.once.Do(func() {
		close(r.answering)
		<-r.release
		r.order.add("answer released")
	})
	r.recorder.Answer(ctx, s)
}

// A turn's answer is shown before the write that records it is made: until
// the thread has it, the conversation stays listed and leased, so that a
// crash meanwhile leaves it to a takeover (an answer shown twice, never
// one recorded and not shown), and a reply another replica answers next is
// answered after it. The turn ends once the write is done.
func TestAnswerIsShownBeforeTheTurnIsRecorded(t *testing.T) {
	ctx := t.Context()
	w := newWorld(t, backends(t)[0])
	order := &eventLog{}
	log := &turnLog{Store: w.store.(storetest.Store), hold: make(chan store.Commit, 1), resume: make(chan struct{}), order: order}
	rep := &heldAnswer{recorder: &recorder{}, answering: make(chan struct{}), release: make(chan struct{}), order: order}
	a := w.agentWith(log, rep)
	w.model.Reply(fakeopenai.Text("all good"))
	type outcome struct {
		out agent.Outcome
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		out, err := a.Run(ctx, request("how are things?"))
		done <- outcome{out, err}
	}()
	select {
	case <-rep.answering:
	case c := <-log.hold:
		t.Fatalf("the turn was recorded (%+v) before its answer was shown", c)
	case <-time.After(10 * time.Second):
		t.Fatal("the answer was not shown")
	}
	close(rep.release)
	var c store.Commit
	select {
	case c = <-log.hold:
	case <-time.After(10 * time.Second):
		t.Fatal("the turn was not recorded once its answer was shown")
	}
	if !c.Answer {
		t.Fatalf("the held commit = %+v, want the one that records the answer", c)
	}
	if got, want := order.list(), []string{"answer released", "commit"}; !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q: the turn is recorded once its answer is shown", got, want)
	}
	select {
	case r := <-done:
		t.Fatalf("the turn ended (%s, %v) before its answer was recorded", r.out.Status, r.err)
	default:
	}
	close(log.resume)
	r := <-done
	must(t, r.err)
	if r.out.Status != agent.Answered || !slices.Equal(rep.Answers(), []string{"all good"}) {
		t.Fatalf("got %s with answers %q, want the turn answered once with the model's text", r.out.Status, rep.Answers())
	}
	conv, err := log.LoadConversation(ctx, request("").Conversation)
	must(t, err)
	if !strings.Contains(string(conv.State), "all good") {
		t.Errorf("the conversation recorded = %s, want the answer in it", conv.State)
	}
}

// A call waits at most approvals.MaxTTL, whatever the configuration (or a
// rule stored before that bound) asks: its conversation must outlive it.
func TestApprovalWaitIsBoundedByTheConversationsLife(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	w.cfg.ApprovalTTL = 1000 * time.Hour
	p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
	if got := p.ExpiresAt.Sub(p.CreatedAt); got != approvals.MaxTTL {
		t.Errorf("the call waits %s, want %s (approvals.MaxTTL)", got, approvals.MaxTTL)
	}
}

// failedSave fails SaveResult: with effects, after saving the result
// without its audit entry (a store that appends it in a second step).
type failedSave struct {
	storetest.Store
	effects bool
	// pause fails the next commit that pauses on a run, once.
	pause atomic.Bool
}

func (s *failedSave) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Run != nil && s.pause.CompareAndSwap(true, false) {
		return errInjected
	}
	return s.Store.CommitTurn(ctx, c)
}

func (s *failedSave) SaveResult(ctx context.Context, id string, r []byte, _ store.AuditEntry) error {
	if !s.effects {
		return errInjected
	}
	if err := s.Store.SaveResult(ctx, id, r, store.AuditEntry{}); err != nil {
		return err
	}
	return fmt.Errorf("%w: %w", store.ErrEffects, errInjected)
}

// An execution whose audit entry the store did not append with its result
// has it written by the turn's commit, once.
func TestExecutionAuditedByTheTurnWhenItsSaveFails(t *testing.T) {
	for _, effects := range []bool{false, true} {
		t.Run(map[bool]string{false: "nothing saved", true: "result saved"}[effects], func(t *testing.T) {
			ctx := context.Background()
			w := newWorld(t, backends(t)[0])
			w.store = &failedSave{Store: w.store.(storetest.Store), effects: effects}
			a := w.agent()
			p := approvedDeploy(t, w, a)
			w.model.Reply(fakeopenai.Text("deployed"))
			if out, err := a.Resume(ctx, p.RunID); err != nil || out.Status != agent.Answered {
				t.Fatalf("Resume = %+v, %v; want answered", out, err)
			}
			if got := executions(t, w.store); !slices.Equal(got, []string{"deploy ok"}) {
				t.Errorf("execute entries = %q, want the one the turn wrote", got)
			}
		})
	}
}

// failingWrites fails the next saves SaveResult and commits CommitTurn
// calls before they reach the store.
type failingWrites struct {
	storetest.Store
	saves, commits atomic.Int32
}

func (s *failingWrites) SaveResult(ctx context.Context, id string, r []byte, e store.AuditEntry) error {
	if s.saves.Add(-1) >= 0 {
		return errInjected
	}
	return s.Store.SaveResult(ctx, id, r, e)
}

func (s *failingWrites) CommitTurn(ctx context.Context, c store.Commit) error {
	if s.commits.Add(-1) >= 0 {
		return errInjected
	}
	return s.Store.CommitTurn(ctx, c)
}

// A resume whose result save and commit both fail saves the result again,
// with its entry, as it ends: the resume that takes the run over reports
// that result, and the execution is audited once (not also as of unknown
// outcome).
func TestExecutionWhoseSaveAndCommitFailedIsAuditedOnce(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	st := &failingWrites{Store: w.store.(storetest.Store)}
	w.store = st
	a := w.agent()
	p := approvedDeploy(t, w, a)
	st.saves.Store(1)
	st.commits.Store(1)
	w.model.Reply(fakeopenai.Text("deployed"), fakeopenai.Text("deployed"))
	if _, err := a.Resume(ctx, p.RunID); err == nil {
		t.Fatal("Resume with its save and commit failed = nil error")
	}
	out := resumeOnceFree(t, a, p.RunID)
	if out.Status != agent.Answered {
		t.Fatalf("the resume that took the run over = %+v, want answered", out)
	}
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	if got := executions(t, w.store); !slices.Equal(got, []string{"deploy ok"}) {
		t.Errorf("execute entries = %q, want the execution once, with its outcome", got)
	}
	if got := toolResults(t, w.model); len(got) == 0 || strings.Contains(got[len(got)-1], "outcome unknown") {
		t.Errorf("the model read %q last, want the tool's result", got)
	}
}

// The same when the resume's next step asks for another approval whose
// pause cannot be saved: the execution is audited once, and the pause,
// which never existed, not at all.
func TestExecutionAuditedThroughAPauseThatFailed(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	st := &failedSave{Store: w.store.(storetest.Store)}
	w.store = st
	a := w.agent()
	p := approvedDeploy(t, w, a)
	st.pause.Store(true)
	w.model.Reply(fakeopenai.ToolCalls(call("c2", "deploy", `{"service":"api","version":"3"}`)))
	if _, err := a.Resume(ctx, p.RunID); err == nil || !strings.Contains(err.Error(), "save paused step") {
		t.Fatalf("Resume = %v; want the pause's save failed", err)
	}
	if st.pause.Load() {
		t.Fatal("the second deploy's pause was not tried")
	}
	log, err := st.AuditLog(ctx, 0)
	must(t, err)
	var got []string
	for _, e := range log {
		if e.Action == "execute" || e.Action == "pause" && e.CallID != p.ID {
			got = append(got, e.Action+" "+e.Tool)
		}
	}
	if !slices.Equal(got, []string{"execute deploy"}) {
		t.Errorf("audit entries = %q, want the execution once and no pause that failed", got)
	}
}

// saveOrder records, in order, the saves of call results as they end and
// the marks of calls' starts as they begin.
type saveOrder struct {
	storetest.Store
	mu     sync.Mutex
	events []string
}

func (s *saveOrder) note(e string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
}

func (s *saveOrder) SaveResult(ctx context.Context, id string, r []byte, e store.AuditEntry) error {
	err := s.Store.SaveResult(ctx, id, r, e)
	s.note("saved " + id)
	return err
}

func (s *saveOrder) BeginExecution(ctx context.Context, id, attempt string) (bool, error) {
	s.note("begin " + id)
	return s.Store.BeginExecution(ctx, id, attempt)
}

// Two approved calls of one step: the second (whose tool may not run
// twice) starts only once the first's result is saved, so that a crash
// while it runs does not report the first, which returned, as of unknown
// outcome.
func TestApprovedCallStartsOnceTheResultBeforeItIsSaved(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			a := w.agent()
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "deploy", `{"service":"api","version":"2"}`), call("c2", "restart", `{"env":"staging"}`)))
			out, err := a.Run(ctx, request("deploy and restart"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != 2 {
				t.Fatalf("got %s with %d pending, want two calls waiting", out.Status, len(out.Pending))
			}
			for _, p := range out.Pending {
				_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				must(t, err)
			}
			so := &saveOrder{Store: w.store.(storetest.Store)}
			w.model.Reply(fakeopenai.Text("done"))
			if _, err := w.agentWith(so, w.rec).Resume(ctx, out.RunID); err != nil {
				t.Fatal(err)
			}
			first, second := out.Pending[0].ID, out.Pending[1].ID
			saved, begun := slices.Index(so.events, "saved "+first), slices.Index(so.events, "begin "+second)
			if saved < 0 || begun < 0 || begun < saved {
				t.Errorf("store events = %q, want %s's result saved before %s is marked as started", so.events, first, second)
			}
		})
	}
}
