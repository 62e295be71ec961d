package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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

type openaiRequest = openai.ChatCompletionRequest

// backend opens a store; reopen models a process restart on the same data.
type backend struct {
	name string
	open func(t *testing.T) (st agent.Store, reopen func() agent.Store)
}

func backends(t *testing.T) []backend {
	t.Helper()
	var bs []backend
	for _, k := range teststore.Kinds(t) {
		bs = append(bs, backend{name: k.Name, open: func(t *testing.T) (agent.Store, func() agent.Store) {
			open := k.Open(t)
			reopen := func() agent.Store { return open() }
			return reopen(), reopen
		}})
	}
	return bs
}

// recorder is a Reporter that keeps everything it is told.
type recorder struct {
	mu      sync.Mutex
	answers []string
	paused  [][]agent.PendingCall
	updates []agent.CallUpdate
	deltas  strings.Builder
	stopped int
}

func (r *recorder) Status(context.Context, string) {}
func (r *recorder) Delta(_ context.Context, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deltas.WriteString(s)
}
func (r *recorder) Answer(_ context.Context, s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers = append(r.answers, s)
}
func (r *recorder) Stopped(context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped++
}
func (r *recorder) Paused(_ context.Context, c []agent.PendingCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.paused = append(r.paused, c)
}
func (r *recorder) Updated(_ context.Context, u agent.CallUpdate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.updates = append(r.updates, u)
}

func (r *recorder) Answers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.answers...)
}

func (r *recorder) Updates() []agent.CallUpdate {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]agent.CallUpdate(nil), r.updates...)
}

// counter counts the runs of a tool handler and the arguments it got.
type counter struct {
	n    atomic.Int64
	mu   sync.Mutex
	args []string
}

func (c *counter) handler(out string) agent.Handler {
	return func(_ context.Context, args json.RawMessage) (agent.Result, error) {
		c.n.Add(1)
		c.mu.Lock()
		c.args = append(c.args, string(args))
		c.mu.Unlock()
		return agent.Result{Content: out}, nil
	}
}

func (c *counter) Args() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.args...)
}

const testPolicy = `
policy:
  default: ask
  rules:
    - id: reads
      tool: "read_*"
      verdict: allow
    - id: no-drop
      tool: drop_db
      verdict: deny
      reason: Dropping databases is never allowed from chat.
    - id: deploys
      tool: deploy
      verdict: ask
      reason: Deploys need a second pair of eyes.
      approvers: [UAPPROVER1, UOTHER2]
      four_eyes: true
    - id: deploy-prod
      tool: restart
      when: 'args.env == "prod"'
      verdict: deny
      reason: No restarts in prod.
`

const pathSchema = `{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`
const deploySchema = `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"}},"required":["service","version"]}`
const envSchema = `{"type":"object","properties":{"env":{"type":"string"}},"required":["env"]}`

// world is one test's agent, model, tools and store.
type world struct {
	t        *testing.T
	model    *fakeopenai.Server
	store    agent.Store
	reopen   func() agent.Store
	reg      *agent.Registry
	rec      *recorder
	now      time.Time
	mu       sync.Mutex
	reads    *counter
	deploys  *counter
	restarts *counter
	cfg      agent.Config
	policy   string            // the config file's YAML; testPolicy unless a test sets it
	engine   *approvals.Engine // the latest agent's policy engine
	// modelTimeout bounds a model call of the agents built next; 10s
	// unless a test sets it.
	modelTimeout time.Duration
}

func newWorld(t *testing.T, b backend) *world {
	t.Helper()
	w := &world{t: t, model: fakeopenai.New(t), rec: &recorder{}, now: time.Now().UTC().Truncate(time.Second),
		reads: &counter{}, deploys: &counter{}, restarts: &counter{}}
	w.store, w.reopen = b.open(t)
	w.reg = agent.NewRegistry()
	must(t, w.reg.Register(agent.Tool{Name: "read_file", Description: "Read a file", Schema: json.RawMessage(pathSchema),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: w.reads.handler("file contents")}))
	must(t, w.reg.Register(agent.Tool{Name: "drop_db", Description: "Drop a database", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			t.Error("drop_db ran although policy denies it")
			return agent.Result{}, nil
		}}))
	must(t, w.reg.Register(agent.Tool{Name: "deploy", Description: "Deploy a service", Schema: json.RawMessage(deploySchema),
		Handler: w.deploys.handler("deployed")}))
	must(t, w.reg.Register(agent.Tool{Name: "restart", Description: "Restart", Schema: json.RawMessage(envSchema),
		Handler: w.restarts.handler("restarted")}))
	must(t, w.reg.Register(agent.Tool{Name: "ask_human", Description: "Ask the people in the thread", Human: true,
		Schema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`)}))
	w.cfg = agent.Config{Now: w.clock, LeaseTTL: 2 * time.Second}
	return w
}

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) advance(d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.now = w.now.Add(d)
}

// agent builds an agent on the current store, as a fresh process would.
func (w *world) agent() *agent.Agent {
	w.t.Helper()
	return w.agentWith(w.store, w.rec)
}

// agentWith builds an agent, as a fresh process would, on st (the current
// store, or a wrapper of it) that reports to rep.
func (w *world) agentWith(st agent.Store, rep agent.Reporter) *agent.Agent {
	w.t.Helper()
	policy := w.policy
	if policy == "" {
		policy = testPolicy
	}
	p, err := approvals.ParseConfig([]byte(policy))
	must(w.t, err)
	var canSee func(ctx context.Context, channel, user string) (bool, error)
	if w.cfg.Audience != nil {
		canSee = w.cfg.Audience.CanSee
	}
	engine := approvals.NewEngine(p, w.store.(approvals.RecordStore), approvals.WithClock(w.clock),
		approvals.WithMakerCheck(approvals.MakersUnder(w.cfg.Groups, canSee)),
		approvals.WithDefaults(approvals.Defaults{TTL: w.cfg.ApprovalTTL, RemindAfter: w.cfg.ReminderAfter}))
	w.engine = engine
	timeout := w.modelTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	model := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: w.model.URL(), APIKey: "test-key", Model: "fake-model", Timeout: timeout})
	return agent.New(model, w.reg, engine, st, func(string) agent.Reporter { return rep }, w.cfg)
}

// restart models a process restart: a new store handle on the same data.
func (w *world) restart() *agent.Agent {
	w.store = w.reopen()
	return w.agent()
}

// resumeTakenOr resumes the step a decision completed: the resume it
// began, with taken; otherwise run runID's, as a later Resume does.
func resumeTakenOr(ctx context.Context, a *agent.Agent, taken *agent.Taken, runID string) (agent.Outcome, error) {
	if taken != nil {
		return a.ResumeTaken(ctx, taken)
	}
	return a.Resume(ctx, runID)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func call(id, name, args string) fakeopenai.ToolCall {
	return fakeopenai.ToolCall{ID: id, Name: name, Arguments: args}
}

func request(text string) agent.Request {
	return agent.Request{Conversation: "T1/C1/1700000000.000100", User: "UREQUESTER", Channel: "C1", Text: text}
}

// toolResults returns the tool messages of the last request the model got,
// as "id: content".
func toolResults(t *testing.T, m *fakeopenai.Server) []string {
	t.Helper()
	reqs := m.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model got no request")
	}
	last := reqs[len(reqs)-1]
	var out []string
	// Only the tool messages after the last assistant message with calls.
	start := 0
	for i, msg := range last.Messages {
		if msg.Role == "assistant" && len(msg.ToolCalls) > 0 {
			start = i + 1
		}
	}
	for _, msg := range last.Messages[start:] {
		if msg.Role == "tool" {
			out = append(out, fmt.Sprintf("%s: %s", msg.ToolCallID, msg.Content))
		}
	}
	return out
}

// holdLog is a store that notes, for each conversation and run, the name
// of the last hold taken on its lease and its resume claim, so that a
// test can model a hold running out by releasing it (lapse).
type holdLog struct {
	agent.Store
	mu     sync.Mutex
	leases map[string]string // by lease key
	claims map[string]string // by run
}

func newHoldLog(st agent.Store) *holdLog {
	return &holdLog{Store: st, leases: map[string]string{}, claims: map[string]string{}}
}

func (s *holdLog) took(lease, run, owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if lease != "" {
		s.leases[lease] = owner
	}
	if run != "" {
		s.claims[run] = owner
	}
}

func (s *holdLog) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	b, err := s.Store.BeginTurn(ctx, conversation, owner, ttl, kinds...)
	if err == nil && b.Acquired {
		s.took(store.TurnLease(conversation), "", owner)
	}
	return b, err
}

func (s *holdLog) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	got, acc, b, err := s.Store.AcceptBegin(ctx, conversation, m, requireKnown, owner, ttl, kinds...)
	if err == nil && b.Acquired {
		s.took(store.TurnLease(conversation), "", owner)
	}
	return got, acc, b, err
}

func (s *holdLog) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	ok, err := s.Store.AcquireLease(ctx, key, owner, ttl)
	if err == nil && ok {
		s.took(key, "", owner)
	}
	return ok, err
}

func (s *holdLog) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := s.Store.BeginResume(ctx, runID, r)
	s.resumed(runID, r, rs, err)
	return rs, err
}

func (s *holdLog) DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, complete, rs, err := s.Store.DecideBegin(ctx, callID, fingerprint, d, fx, r)
	s.resumed(c.RunID, r, rs, err)
	return c, complete, rs, err
}

func (s *holdLog) ApproveBegin(ctx context.Context, callID, fingerprint string, ap store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	c, complete, rs, err := s.Store.ApproveBegin(ctx, callID, fingerprint, ap, drop, edit, need, d, fx, r)
	s.resumed(c.RunID, r, rs, err)
	return c, complete, rs, err
}

// resumed notes the claim, and the lease, a step that begins a resume took.
func (s *holdLog) resumed(runID string, r store.ResumeBegin, rs store.ResumeStart, err error) {
	if err == nil && rs.Claimed {
		s.took(r.Lease, runID, r.Owner)
	}
}

// lapse releases the last holds taken on the conversation's lease and on
// run's resume claim (unless run is empty), as if they ran out.
func (s *holdLog) lapse(t *testing.T, conversation, run string) {
	t.Helper()
	s.mu.Lock()
	lease, claim := s.leases[store.TurnLease(conversation)], s.claims[run]
	s.mu.Unlock()
	must(t, s.Store.ReleaseLease(t.Context(), store.TurnLease(conversation), lease))
	if run != "" {
		must(t, s.Store.ReleaseClaim(t.Context(), run, claim))
	}
}
