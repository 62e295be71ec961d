package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store"
)

// starvedStore is the store as a live process sees it while it is starved
// of CPU (see teststore.Starvation). Everything else goes through.
type starvedStore struct {
	agent.Store
	*teststore.Starvation
}

func newStarvedStore(st agent.Store) *starvedStore {
	return &starvedStore{Store: st, Starvation: teststore.NewStarvation()}
}

func (s *starvedStore) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if lost, err := s.Renewal(ctx, false); lost || err != nil {
		return false, err
	}
	return s.Store.RenewLease(ctx, key, owner, ttl)
}

func (s *starvedStore) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	if lost, err := s.Renewal(ctx, true); lost || err != nil {
		return false, err
	}
	return s.Store.RenewClaim(ctx, runID, owner, lease)
}

// heldModel makes the model's first answer wait until the test releases
// it (the process asking has stopped by then) and its later answers
// say answer, each held until next is closed when next is not nil.
func heldModel(t *testing.T, w *world, answer string, next <-chan struct{}) (first <-chan struct{}, later <-chan struct{}) {
	t.Helper()
	entered, enteredLater := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var n atomic.Int64
	w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
		switch n.Add(1) {
		case 1:
			close(entered)
			<-release
			return fakeopenai.Text("the stopped process's answer")
		case 2:
			close(enteredLater)
			if next != nil {
				<-next
			}
		}
		return fakeopenai.Text(answer)
	})
	return entered, enteredLater
}

// resumeAsync runs a.Resume and returns its error on the channel.
func resumeAsync(a *agent.Agent, runID string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := a.Resume(context.Background(), runID)
		done <- err
	}()
	return done
}

// checkHandedOver checks what the thread and the tool saw once a resume
// that lost its claim or lease was carried on by another process: the
// approved call ran once, the survivor gave the model its saved result
// and answered once, the stopped process said and updated nothing after
// it stopped, and nothing is left to take over.
func checkHandedOver(t *testing.T, w *world, survivor *agent.Agent, stopped *recorder, p agent.PendingCall, answer string) {
	t.Helper()
	if n := w.deploys.n.Load(); n != 1 {
		t.Errorf("deploy ran %d times, want once", n)
	}
	if got := toolResults(t, w.model); !slices.Equal(got, []string{"c1: deployed"}) {
		t.Errorf("tool results the survivor sent = %q, want the saved result", got)
	}
	if got := w.rec.Answers(); !slices.Equal(got, []string{answer}) {
		t.Errorf("survivor's answers = %q, want %q once", got, answer)
	}
	if got := stopped.Answers(); len(got) != 0 {
		t.Errorf("the stopped process answered %q, want nothing", got)
	}
	for _, u := range stopped.Updates() {
		if u.Phase != agent.PhaseDecided && u.Phase != agent.PhaseExecuted {
			t.Errorf("the stopped process updated the card with %s (%s), want only the decision and the execution", u.Phase, u.Note)
		}
	}
	keys, err := survivor.Unanswered(t.Context(), 0, 0)
	must(t, err)
	if len(keys) != 0 {
		t.Errorf("Unanswered after the takeover = %q, want nothing", keys)
	}
	if out, err := survivor.Resume(t.Context(), p.RunID); err != nil || out.Status != agent.Idle {
		t.Errorf("Resume after the takeover = %+v, %v; want Idle", out, err)
	}
}

// A resume whose claim renewal finds the claim lost (it ran out while the
// process was starved) stops in the model call, after the approved call
// ran, and hands the run over: it returns ErrLeaseLost having answered
// nothing, it releases the claim, and the conversation is still listed,
// so the first TakeOver of another process resumes the run at once (not
// after the claim would have lapsed), from the call's saved result.
func TestLostClaimHandsResumeOver(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 3 * time.Second // the claim outlives the test unless released
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			entered, _ := heldModel(t, w, "resumed by the survivor", nil)
			st := newStarvedStore(w.store)
			stopped := &recorder{}
			a := w.agentWith(st, stopped)
			if _, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatal(err)
			}
			done := resumeAsync(a, p.RunID)
			<-entered
			st.LoseClaims()
			if err := <-done; !errors.Is(err, agent.ErrLeaseLost) {
				t.Fatalf("Resume after its claim was lost = %v, want ErrLeaseLost", err)
			}

			b := w.restart()
			w.advance(time.Minute) // past Config.TakeoverAfter
			keys, err := b.Unanswered(t.Context(), 0, 0)
			must(t, err)
			if !slices.Contains(keys, p.Conversation) {
				t.Fatalf("Unanswered = %q after the resume stopped, want %s listed", keys, p.Conversation)
			}
			out, err := b.TakeOver(t.Context(), p.Conversation)
			if err != nil || out.Status != agent.Answered || out.Answer != "resumed by the survivor" {
				t.Fatalf("first TakeOver = %+v, %v; want the resumed answer", out, err)
			}
			checkHandedOver(t, w, b, stopped, p, "resumed by the survivor")
		})
	}
}

// A resume starved of CPU long enough for its lease and claim to run out
// (modelled by releasing them for it) is taken over by another process;
// when the starved process gets to renew, it finds the lease taken, stops
// without a word in the thread, and leaves the survivor's claim alone.
func TestResumeStarvedAndTakenOver(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 600 * time.Millisecond
			w.cfg.Owner = "starved"
			p := pauseOne(t, w, w.agent(), call("c1", "deploy", `{"service":"api","version":"2"}`))
			survivorAsks := make(chan struct{})
			entered, survivorEntered := heldModel(t, w, "resumed by the survivor", survivorAsks)
			holds := newHoldLog(w.store)
			st := newStarvedStore(holds)
			stopped := &recorder{}
			a := w.agentWith(st, stopped)
			if _, err := a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatal(err)
			}
			done := resumeAsync(a, p.RunID)
			<-entered
			st.Starve()
			<-st.Renewed()
			// Its lease and claim run out while it is starved.
			holds.lapse(t, p.Conversation, p.RunID)

			w.cfg.Owner = "survivor"
			b := w.agent() // another process on the same store
			w.advance(time.Minute)
			taken := make(chan agent.Outcome, 1)
			go func() {
				out, err := b.TakeOver(context.Background(), p.Conversation)
				if err != nil {
					t.Errorf("TakeOver: %v", err)
				}
				taken <- out
			}()
			<-survivorEntered
			st.Unstarve()
			if err := <-done; !errors.Is(err, agent.ErrLeaseLost) {
				t.Fatalf("the starved resume = %v, want ErrLeaseLost", err)
			}
			close(survivorAsks)
			if out := <-taken; out.Status != agent.Answered || out.Answer != "resumed by the survivor" {
				t.Fatalf("TakeOver = %+v, want the resumed answer", out)
			}
			checkHandedOver(t, w, b, stopped, p, "resumed by the survivor")
		})
	}
}

// A message's turn whose lease renewal finds the lease lost stops in the
// model call with ErrLeaseLost, answering nothing; its message is still
// listed, and another process's first TakeOver answers it once. The
// model's time-out is an hour and its first answer an hour away, so only
// the refused renewal can end that call: the model sees its request
// given up by the client.
func TestLostLeaseHandsTurnOver(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			w.modelTimeout = time.Hour
			entered, givenUp := make(chan struct{}), make(chan struct{})
			var asked atomic.Int64
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				if asked.Add(1) > 1 {
					return fakeopenai.Text("answered by the survivor")
				}
				close(entered)
				// Served comes before the hour only when the client
				// goes away (or the server closes, after the test).
				return fakeopenai.Response{Text: "the stopped process's answer", Delay: time.Hour, Served: func(time.Duration) { close(givenUp) }}
			})
			st := newStarvedStore(w.store)
			stopped := &recorder{}
			a := w.agentWith(st, stopped)
			req := request("what changed in prod?")
			done := make(chan error, 1)
			go func() {
				_, err := a.Run(context.Background(), req)
				done <- err
			}()
			<-entered
			st.LoseLeases()
			select {
			case err := <-done:
				if !errors.Is(err, agent.ErrLeaseLost) {
					t.Fatalf("Run after its lease was lost = %v, want ErrLeaseLost", err)
				}
				if me := (*agent.ModelError)(nil); errors.As(err, &me) && me.Kind == agent.ErrKindTimeout {
					t.Errorf("Run after its lease was lost = %v, want it stopped by the lost lease, not a model time-out", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the turn did not stop when its lease renewal was refused")
			}
			select {
			case <-givenUp:
			case <-time.After(10 * time.Second):
				t.Fatal("the model never saw the stopped turn's request given up")
			}

			b := w.restart()
			w.advance(time.Minute)
			out, err := b.TakeOver(t.Context(), req.Conversation)
			if err != nil || out.Status != agent.Answered || out.Answer != "answered by the survivor" {
				t.Fatalf("first TakeOver = %+v, %v; want the answer", out, err)
			}
			if got := w.rec.Answers(); !slices.Equal(got, []string{"answered by the survivor"}) {
				t.Errorf("survivor's answers = %q, want one", got)
			}
			if got := stopped.Answers(); len(got) != 0 {
				t.Errorf("the stopped process answered %q, want nothing", got)
			}
			keys, err := b.Unanswered(t.Context(), 0, 0)
			must(t, err)
			if len(keys) != 0 {
				t.Errorf("Unanswered after the takeover = %q, want nothing", keys)
			}
		})
	}
}

// A TakeOver that finds the decided run still claimed by a resumer that
// died a moment ago (its claim not yet lapsed) does nothing, and leaves
// the conversation listed, so the next try resumes the run once the claim
// is free, instead of leaving it to the stalled-resume sweep.
func TestTakeOverKeepsClaimedRunListed(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			ctx := t.Context()
			if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatal(err)
			}
			// The resumer claimed the run and died.
			if ok, err := w.store.(interface {
				ClaimResume(context.Context, string, string, time.Duration) (bool, error)
			}).ClaimResume(ctx, p.RunID, "dead", time.Hour); err != nil || !ok {
				t.Fatalf("ClaimResume = %v, %v; want true, nil", ok, err)
			}
			w.advance(time.Minute)
			if out, err := a.TakeOver(ctx, p.Conversation); err != nil || out.Status != agent.Idle {
				t.Fatalf("TakeOver of a claimed run = %+v, %v; want Idle", out, err)
			}
			keys, err := a.Unanswered(ctx, 0, 0)
			must(t, err)
			if !slices.Contains(keys, p.Conversation) {
				t.Fatalf("Unanswered = %q after a TakeOver found the run claimed, want %s listed", keys, p.Conversation)
			}
			// The claim lapses.
			must(t, w.store.ReleaseClaim(ctx, p.RunID, "dead"))
			w.model.Reply(fakeopenai.Text("resumed"))
			if out, err := a.TakeOver(ctx, p.Conversation); err != nil || out.Status != agent.Answered {
				t.Fatalf("TakeOver once the claim is free = %+v, %v; want Answered", out, err)
			}
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// finishedClaimStore tells when a renewal of a resume claim was refused
// (refused is closed then): after the resume finished its run, say.
type finishedClaimStore struct {
	agent.Store
	refused chan struct{}
	once    sync.Once
}

func (s *finishedClaimStore) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	ok, err := s.Store.RenewClaim(ctx, runID, owner, lease)
	if err == nil && !ok {
		s.once.Do(func() { close(s.refused) })
	}
	return ok, err
}

// A resume that finished its run goes on to answer the messages queued
// while it was paused; the claim it no longer needs is not renewed, and
// its refused renewal does not stop that answer.
func TestFinishedRunsClaimDoesNotStopQueuedAnswer(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.LeaseTTL = 300 * time.Millisecond
			st := &finishedClaimStore{Store: w.store, refused: make(chan struct{})}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			ctx := t.Context()
			if out, err := a.Run(ctx, request("also, what time is it?")); err != nil || out.Status != agent.Waiting {
				t.Fatalf("Run while paused = %+v, %v; want Waiting", out, err)
			}
			var n atomic.Int64
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				if n.Add(1) == 1 {
					return fakeopenai.Text("deployed")
				}
				<-st.refused // a renewal after the run was finished
				return fakeopenai.Text("noon")
			})
			if _, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}); err != nil {
				t.Fatal(err)
			}
			out, err := a.Resume(ctx, p.RunID)
			if err != nil || out.Answer != "noon" {
				t.Fatalf("Resume = %+v, %v; want the queued message answered", out, err)
			}
			if got := w.rec.Answers(); !slices.Equal(got, []string{"deployed", "noon"}) {
				t.Errorf("answers = %q, want both", got)
			}
		})
	}
}

// A resume whose process stalls while the first call of its step runs
// (a VM paused, starved of CPU) loses its lease and claim; another
// process resumes the run meanwhile, reports that call interrupted and
// runs the next one. When the stalled tool returns, the stalled resume
// goes on to that next call before its renewer has run again, so nothing
// has told it yet that the run is someone else's: the lease TTL is an
// hour here, for the renewer not to notice first, and the lease and claim
// running out are modelled by releasing them. Only the call's execution
// mark, taken already by the other process, stops it: the next call runs
// once, by the process that holds the run; the stalled one takes its
// outcome for unknown, but the other's result is saved, so its own save is
// refused and it tells the card what the store holds: the other's run.
func TestStalledResumeDoesNotRunACallAnotherProcessStarted(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = "policy:\n  default: ask\n"
			w.cfg.LeaseTTL = time.Hour
			w.cfg.Owner = "stalled"
			entered, release := make(chan struct{}), make(chan struct{})
			var releaseOnce sync.Once
			t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
			var mu sync.Mutex
			runs := map[string]int{}
			must(t, w.reg.Register(agent.Tool{
				Name: "migrate", Schema: json.RawMessage(`{"type":"object","properties":{"db":{"type":"string"}}}`),
				Handler: func(_ context.Context, args json.RawMessage) (agent.Result, error) {
					var in struct{ DB string }
					_ = json.Unmarshal(args, &in)
					mu.Lock()
					runs[in.DB]++
					first := in.DB == "a" && runs["a"] == 1
					mu.Unlock()
					if first {
						close(entered)
						<-release // the process stalls while it runs
					}
					return agent.Result{Content: "migrated " + in.DB}, nil
				},
			}))
			stalled := &recorder{}
			holds := newHoldLog(w.store)
			a := w.agentWith(holds, stalled)
			req := request("migrate both databases")
			out := pauseApproved(t, w, a, req, call("c1", "migrate", `{"db":"a"}`), call("c2", "migrate", `{"db":"b"}`))
			c2 := out.Pending[1]

			survivorAsking, survivorGoOn := make(chan struct{}), make(chan struct{})
			var goOnce sync.Once
			goOn := func() { goOnce.Do(func() { close(survivorGoOn) }) }
			t.Cleanup(goOn)
			var asked atomic.Int64
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				if asked.Add(1) == 1 {
					close(survivorAsking)
					<-survivorGoOn
					return fakeopenai.Text("resumed by the survivor")
				}
				return fakeopenai.Text("the stalled process's answer")
			})
			done := resumeAsync(a, out.RunID)
			<-entered
			// Its lease and claim run out while it is stalled.
			holds.lapse(t, req.Conversation, out.RunID)

			w.cfg.Owner = "survivor"
			saved := make(chan struct{})
			survivor := w.agentWith(savedOf{Store: w.store, id: c2.ID, saved: saved}, w.rec) // another process on the same store
			resumed := make(chan agent.Outcome, 1)
			go func() {
				out, err := survivor.Resume(context.Background(), c2.RunID)
				if err != nil {
					t.Errorf("the survivor's Resume: %v", err)
				}
				resumed <- out
			}()
			<-survivorAsking // c1 reported interrupted, c2 run
			<-saved
			releaseOnce.Do(func() { close(release) })
			if err := <-done; !errors.Is(err, agent.ErrLeaseLost) {
				t.Errorf("the stalled resume = %v, want ErrLeaseLost (its write refused)", err)
			}
			goOn()
			if o := <-resumed; o.Status != agent.Answered || o.Answer != "resumed by the survivor" {
				t.Fatalf("the survivor's Resume = %+v, want its answer", o)
			}

			mu.Lock()
			onA, onB := runs["a"], runs["b"]
			mu.Unlock()
			if onA != 1 || onB != 1 {
				t.Errorf("migrate ran %d times on a and %d on b, want each once", onA, onB)
			}
			var got []string
			for _, u := range stalled.Updates() {
				if u.Call.ID == c2.ID {
					got = append(got, fmt.Sprintf("%s (%s) %s", u.Phase, u.Note, u.Result.Content))
				}
			}
			want := []string{fmt.Sprintf("%s () ", agent.PhaseDecided), fmt.Sprintf("%s () migrated b", agent.PhaseExecuted)}
			if !slices.Equal(got, want) {
				t.Errorf("the stalled process's updates of the second call = %q, want %q: decided, then the other process's run, as stored", got, want)
			}
		})
	}
}

// markRefused is the store of a process whose conversation another
// process took over just before it marks a step's call as starting: once
// armed, its next CommitTurn is refused as the store refuses a write of
// a process that no longer holds the conversation's lease.
type markRefused struct {
	agent.Store
	armed atomic.Bool
}

func (s *markRefused) CommitTurn(ctx context.Context, c store.Commit) error {
	if s.armed.CompareAndSwap(true, false) {
		return fmt.Errorf("commit turn of %s: %w", c.Key, store.ErrNotHolder)
	}
	return s.Store.CommitTurn(ctx, c)
}

// A turn whose mark before an allowed call that may not run twice is
// refused because another process holds the conversation now stops there
// with ErrLeaseLost, for that process to carry the turn on: the call does
// not run, the model is not asked again, nothing is answered, and nothing
// after it in the step is judged, so no card is posted for a later call
// (a read here) and the audit log holds the refused call's request only.
func TestRefusedStepMarkStopsTheTurn(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.policy = takeoverPolicy
			var runs atomic.Int64
			must(t, w.reg.Register(agent.Tool{
				Name: "migrate", Schema: json.RawMessage(`{"type":"object"}`),
				Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
					runs.Add(1)
					return agent.Result{Content: "migrated"}, nil
				},
			}))
			st := &markRefused{Store: w.store}
			var asked atomic.Int64
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				if asked.Add(1) > 1 {
					return fakeopenai.Text("asked again")
				}
				st.armed.Store(true) // the next write is the mark before migrate
				return fakeopenai.ToolCalls(call("c1", "migrate", `{}`), call("c2", "read_file", `{"path":"/etc/hosts"}`))
			})
			cards := &announcer{st: w.store}
			a := w.agentWith(st, cards)
			if _, err := a.Run(t.Context(), request("migrate the schema")); !errors.Is(err, agent.ErrLeaseLost) {
				t.Fatalf("Run whose step mark was refused = %v, want ErrLeaseLost", err)
			}
			if n := runs.Load(); n != 0 {
				t.Errorf("migrate ran %d times after its mark was refused, want 0", n)
			}
			if n := w.reads.n.Load(); n != 0 {
				t.Errorf("read_file ran %d times after the step's mark was refused, want 0", n)
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("the model was asked %d times, want once (not again after the refused mark)", n)
			}
			if got := cards.Answers(); len(got) != 0 {
				t.Errorf("answered %q, want nothing", got)
			}
			if got := cards.Events(); len(got) != 0 {
				t.Errorf("card events %q after the refused mark, want none (the later call is not judged)", got)
			}
			if got := auditLog(t, w.store); !slices.Equal(got, []string{"request migrate"}) {
				t.Errorf("audit log = %q, want only the request of the call whose mark was refused", got)
			}
		})
	}
}

// savedOf is a store that closes saved once call id's result is saved.
type savedOf struct {
	agent.Store
	id    string
	saved chan struct{}
}

func (s savedOf) SaveResult(ctx context.Context, callID string, result []byte, e store.AuditEntry) error {
	err := s.Store.SaveResult(ctx, callID, result, e)
	if callID == s.id {
		close(s.saved)
	}
	return err
}
