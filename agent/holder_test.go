package agent_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// releaseLog is a store that notes the name of every hold released: of a
// lease (ReleaseLease, or a turn's last commit) and of a resume claim.
type releaseLog struct {
	agent.Store
	mu     sync.Mutex
	leases []string
	claims []string
}

func (s *releaseLog) ReleaseLease(ctx context.Context, key, owner string) error {
	s.note(&s.leases, owner)
	return s.Store.ReleaseLease(ctx, key, owner)
}

func (s *releaseLog) CommitTurn(ctx context.Context, c store.Commit) error {
	if c.Release != "" {
		s.note(&s.leases, c.Release)
	}
	return s.Store.CommitTurn(ctx, c)
}

func (s *releaseLog) ReleaseClaim(ctx context.Context, runID, owner string) error {
	s.note(&s.claims, owner)
	return s.Store.ReleaseClaim(ctx, runID, owner)
}

func (s *releaseLog) note(to *[]string, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	*to = append(*to, owner)
}

func (s *releaseLog) released() (leases, claims []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.leases), slices.Clone(s.claims)
}

// A release that the store executes late (a client sent it again after a
// time-out while the first copy was still on its way) frees nothing held
// since: not the lease of a later turn of the same process on the same
// conversation, nor a later resume claim of the same run. Otherwise
// another process could take the conversation, or the run, over while
// this one still works on it.
func TestLateReleaseFreesNoLaterHoldOfTheSameProcess(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.LeaseTTL = time.Minute // nothing lapses during the test
			log := &releaseLog{Store: w.store}
			a := w.agentWith(log, w.rec)

			// A turn that paused (its commit released the lease), a
			// decision whose resume was given back (the claim and the
			// lease released), then a resume that holds both.
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			_, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			if taken == nil {
				t.Fatal("DecideTaking began no resume")
			}
			a.ReleaseTaken(ctx, taken)
			leases, claims := log.released()
			if len(leases) < 2 || len(claims) < 1 {
				t.Fatalf("released leases %q and claims %q, want the pause's and the given-back resume's", leases, claims)
			}

			entered, release := make(chan struct{}), make(chan struct{})
			w.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response {
				close(entered)
				<-release
				return fakeopenai.Text("deployed")
			})
			done := make(chan error, 1)
			go func() {
				_, err := a.Resume(context.Background(), p.RunID)
				done <- err
			}()
			<-entered // the resume holds the lease and the claim

			// The earlier releases, executed again now.
			key := store.TurnLease(p.Conversation)
			for _, owner := range leases {
				must(t, w.store.ReleaseLease(ctx, key, owner))
			}
			for _, owner := range claims {
				must(t, w.store.ReleaseClaim(ctx, p.RunID, owner))
			}

			if ok, err := w.store.AcquireLease(ctx, key, "another-process", time.Minute); err != nil || ok {
				t.Errorf("another process's AcquireLease during the resume = %v, %v; want false: the resume holds the lease", ok, err)
			}
			claimer := w.store.(interface {
				ClaimResume(context.Context, string, string, time.Duration) (bool, error)
			})
			if ok, err := claimer.ClaimResume(ctx, p.RunID, "another-process", time.Minute); err != nil || ok {
				t.Errorf("another process's ClaimResume during the resume = %v, %v; want false: the resume holds the claim", ok, err)
			}
			close(release)
			must(t, <-done)
			if n := w.deploys.n.Load(); n != 1 {
				t.Errorf("deploy ran %d times, want once", n)
			}
		})
	}
}

// lostAcceptAnswer is a store whose AcceptBegin is made, message recorded
// and lease taken, but answers an error: its reply was lost.
type lostAcceptAnswer struct {
	agent.Store
	lost bool
}

func (s *lostAcceptAnswer) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	got, acc, b, err := s.Store.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
	if err == nil && !s.lost {
		s.lost = true
		return got, acc, b, errors.New("read tcp: i/o timeout")
	}
	return got, acc, b, err
}

// A step that may have taken the conversation's lease but whose answer
// was lost gives the lease back: the next turn on the conversation, of
// this process or another, takes it at once instead of waiting for it to
// run out, no one holding it by the name it was taken by.
func TestLeaseOfAStepWhoseAnswerWasLostIsGivenBack(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.LeaseTTL = time.Hour
			w.cfg.LeaseWait = 100 * time.Millisecond
			a := w.agentWith(&lostAcceptAnswer{Store: w.store}, w.rec)
			req := request("what changed?")
			if _, _, taken, err := a.AcceptTaking(ctx, req, false); err == nil || taken != nil {
				t.Fatalf("AcceptTaking with its answer lost = taken %v, %v; want an error", taken != nil, err)
			}
			w.model.Reply(fakeopenai.Text("nothing"))
			out, err := a.Run(ctx, request("and now?"))
			if err != nil || out.Status != agent.Answered {
				t.Fatalf("the next turn = %+v, %v; want it answered at once", out, err)
			}
		})
	}
}

// lostDecisionAnswer is a store whose DecideBegin is made but answers an
// error (its reply lost), and that answers no BeginResume until the test
// lets it, so that the decision's step cannot be asked about again.
type lostDecisionAnswer struct {
	agent.Store
	mu   sync.Mutex
	down bool
}

func (s *lostDecisionAnswer) DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, complete, rs, err := s.Store.DecideBegin(ctx, callID, fingerprint, d, fx, r)
	if err == nil {
		s.mu.Lock()
		s.down = true
		s.mu.Unlock()
		return c, complete, rs, errors.New("read tcp: i/o timeout")
	}
	return c, complete, rs, err
}

func (s *lostDecisionAnswer) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	s.mu.Lock()
	down := s.down
	s.mu.Unlock()
	if down {
		return store.ResumeStart{}, errors.New("dial tcp: connection refused")
	}
	return s.Store.BeginResume(ctx, runID, r)
}

func (s *lostDecisionAnswer) up() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = false
}

// A decision whose step may have taken the conversation's lease, its
// answer lost and not to be had again in time (the clicker is told it is
// not confirmed), gives the lease back: the conversation's next turn
// does not wait for it to run out.
func TestLeaseOfADecisionNotConfirmedIsGivenBack(t *testing.T) {
	defer agent.SetLostDecisionWait(50 * time.Millisecond)()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			w := newWorld(t, b)
			w.cfg.LeaseTTL = time.Hour
			w.cfg.LeaseWait = 100 * time.Millisecond
			st := &lostDecisionAnswer{Store: w.store}
			a := w.agentWith(st, w.rec)
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			_, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			if !errors.Is(err, agent.ErrUnconfirmed) || taken != nil {
				t.Fatalf("DecideTaking with its answer lost = taken %v, %v; want ErrUnconfirmed", taken != nil, err)
			}
			st.up()
			w.model.Reply(fakeopenai.Text("noted"))
			if _, err := a.Run(ctx, request("anything else?")); errors.Is(err, agent.ErrLeaseTimeout) {
				t.Errorf("the next turn = %v; want the conversation's lease free", err)
			}
		})
	}
}
