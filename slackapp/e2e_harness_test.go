package slackapp_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// Users and channels of the test workspace.
const (
	requester = "UREQUESTER"
	approver  = "UAPPROVER1"
	other     = "UOTHER0001"
	stranger  = "USTRANGER1"
	channel   = "CGENERAL01"
)

// fullStore is what the bot keeps: agent state and the Slack app's own.
type fullStore interface {
	agent.Store
	slackapp.Store
	approvals.RecordStore
	Close() error
}

// storeKind opens stores of one kind; each open models a process start on
// the same data.
type storeKind struct {
	name string
	open func(t *testing.T) func() fullStore
}

func storeKinds(t *testing.T) []storeKind {
	var kinds []storeKind
	for _, k := range teststore.Kinds(t) {
		kinds = append(kinds, storeKind{name: k.Name, open: func(t *testing.T) func() fullStore {
			open := k.Open(t)
			return func() fullStore { return open() }
		}})
	}
	return kinds
}

// sharedKinds are the store kinds several processes can share: the
// embedded store serves one process.
func sharedKinds(t *testing.T) []storeKind {
	return slices.DeleteFunc(storeKinds(t), func(k storeKind) bool { return k.name == "bolt" })
}

const e2ePolicy = `
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
      reason: Deploys need review.
      approvers: [UAPPROVER1, UOTHER0001]
      four_eyes: true
`

// bot is one running bot process against the fakes.
type bot struct {
	st     fullStore
	app    *slackapp.App
	cancel context.CancelFunc
	done   chan error
}

// env is the world of one end-to-end test: a fake Slack, a fake model,
// tools that count their runs, and the bot.
type env struct {
	t      *testing.T
	slack  *fakeslack.Server
	model  *fakeopenai.Server
	open   func() fullStore
	reg    *agent.Registry
	deploy atomic.Int64
	reads  atomic.Int64
	mu     sync.Mutex
	args   []string
	bot    *bot
	// shared is the store of the replicas replicas runs.
	shared fullStore
	cfg    slackapp.Config
	// policy is the policy file the bot starts with; empty means e2ePolicy.
	policy string
	// reminderAfter is the agent's ReminderAfter (zero: no reminders).
	reminderAfter time.Duration
	// leaseWait is the agent's LeaseWait (zero: its default).
	leaseWait time.Duration
	// leaseTTL is the agent's LeaseTTL (default 2 s, so that a stopped
	// bot's conversations are taken over soon).
	leaseTTL time.Duration
	// toolTimeout is the agent's ToolTimeout (zero: its default).
	toolTimeout time.Duration
	// maxSteps is the agent's MaxSteps (zero: its default).
	maxSteps int
}

// newEnvWith starts a bot whose store is the one newEnv opens, wrapped by
// wrap (a store that fails, holds or counts some calls).
func newEnvWith(t *testing.T, kind storeKind, wrap func(fullStore) fullStore) *env {
	t.Helper()
	e := newEnv(t, kind)
	open := e.open
	e.open = func() fullStore { return wrap(open()) }
	e.start()
	return e
}

func newEnv(t *testing.T, kind storeKind, opts ...fakeslack.Option) *env {
	t.Helper()
	e := &env{t: t, slack: fakeslack.New(t, opts...), model: fakeopenai.New(t), open: kind.open(t)}
	for _, u := range []string{requester, approver, other, stranger} {
		e.slack.AddUser(fakeslack.User{ID: u, Name: strings.ToLower(u)})
	}
	e.slack.AddChannel(fakeslack.Channel{ID: channel, Name: "general", Members: []string{requester, approver, other, stranger, e.slack.BotUserID()}})
	e.reg = agent.NewRegistry()
	must(t, e.reg.Register(agent.Tool{Name: "read_file", Schema: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}`),
		Annotations: approvals.Hints{ReadOnly: true}, Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			e.reads.Add(1)
			return agent.Result{Content: "file contents"}, nil
		}}))
	must(t, e.reg.Register(agent.Tool{Name: "drop_db", Schema: json.RawMessage(`{"type":"object"}`), Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
		t.Error("drop_db ran although the policy denies it")
		return agent.Result{}, nil
	}}))
	must(t, e.reg.Register(agent.Tool{Name: "deploy", Schema: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"}},"required":["service","version"],"additionalProperties":false}`),
		Handler: func(_ context.Context, args json.RawMessage) (agent.Result, error) {
			e.deploy.Add(1)
			e.mu.Lock()
			e.args = append(e.args, string(args))
			e.mu.Unlock()
			return agent.Result{Content: "deployed " + string(args)}, nil
		}}))
	must(t, e.reg.Register(agent.Tool{Name: "ask_human", Human: true, Schema: json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"]}`)}))
	e.cfg = slackapp.Config{BotToken: e.slack.BotToken(), AppToken: e.slack.AppToken(), APIURL: e.slack.APIURL(), SweepInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))}
	t.Cleanup(func() { e.stop() })
	return e
}

// start runs a bot process on a fresh store handle.
func (e *env) start() *bot {
	e.t.Helper()
	b := e.run(e.open())
	e.bot = b
	return b
}

// run runs a bot process on st and waits until it is connected. The caller
// stops it.
func (e *env) run(st fullStore) *bot {
	e.t.Helper()
	b := e.launch(st)
	deadline := time.Now().Add(10 * time.Second)
	for !b.app.Connected() {
		if time.Now().After(deadline) {
			e.t.Fatal("the bot did not connect to Socket Mode")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return b
}

// launch starts a bot process on st; Run's result goes to its done.
func (e *env) launch(st fullStore) *bot {
	e.t.Helper()
	policy := e.policy
	if policy == "" {
		policy = e2ePolicy
	}
	p, err := approvals.ParseConfig([]byte(policy))
	must(e.t, err)
	// As the bot does (see botsetup): a standing rule's maker is checked
	// by the app's look-ups.
	var app *slackapp.App
	engine := approvals.NewEngine(p, st, approvals.WithMakerCheck(func(ctx context.Context, ask approvals.Verdict, maker, channel string) error {
		return approvals.MakersUnder(app.Groups(), app.Audience().CanSee)(ctx, ask, maker, channel)
	}))
	app, err = slackapp.New(e.cfg, st, engine)
	must(e.t, err)
	model := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: e.model.URL(), APIKey: "k", Model: "m", Timeout: 20 * time.Second})
	ag := agent.New(model, e.reg, engine, st, app.Reporter, agent.Config{Groups: app.Groups(), Audience: app.Audience(), ShownInFull: slackapp.ArgsShownInFull, LeaseTTL: cmp.Or(e.leaseTTL, 2*time.Second), LeaseWait: e.leaseWait, Logger: e.cfg.Logger, ReminderAfter: e.reminderAfter, ToolTimeout: e.toolTimeout, MaxSteps: e.maxSteps})
	ctx, cancel := context.WithCancel(context.Background())
	b := &bot{st: st, app: app, cancel: cancel, done: make(chan error, 1)}
	go func() { b.done <- app.Run(ctx, ag) }()
	return b
}

// stop stops the running bot, as a shutdown would.
func (e *env) stop() {
	if e.bot == nil {
		return
	}
	e.bot.cancel()
	select {
	case err := <-e.bot.done:
		if err != nil {
			e.t.Errorf("bot stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		e.t.Error("the bot did not stop")
	}
	_ = e.bot.st.Close()
	e.bot = nil
}

// restart stops the bot and starts a new process on the same data.
func (e *env) restart() {
	e.stop()
	e.start()
}

func (e *env) deployArgs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.args...)
}

// waitThread waits for a message in the thread that satisfies pred.
func (e *env) waitThread(thread string, what string, pred func(m fakeslack.Message) bool) fakeslack.Message {
	e.t.Helper()
	return e.waitIn(channel, thread, what, pred)
}

// waitIn waits for a message in a thread of ch that satisfies pred.
func (e *env) waitIn(ch, thread string, what string, pred func(m fakeslack.Message) bool) fakeslack.Message {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range e.slack.Thread(ch, thread) {
			if pred(m) {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("no message in the thread %s; thread has:\n%s%s", what, dumpThread(e.slack.Thread(ch, thread)), e.ephemeralsIn(ch))
	return fakeslack.Message{}
}

// ephemeralsIn lists the ephemeral messages the test's users got in ch,
// for failure messages: a refused click is told there, not in the thread.
func (e *env) ephemeralsIn(ch string) string {
	var b strings.Builder
	for _, u := range []string{requester, approver, other, stranger} {
		for _, m := range e.slack.Ephemerals(u) {
			if m.Channel == ch {
				fmt.Fprintf(&b, "  ephemeral to %s: %s\n", u, m.Text)
			}
		}
	}
	if b.Len() == 0 {
		return "  (no ephemeral messages in the channel)\n"
	}
	return b.String()
}

// card waits for the approval card of tool in the thread.
func (e *env) card(thread, tool string) fakeslack.Message {
	e.t.Helper()
	return e.cardIn(channel, thread, tool)
}

// cardIn waits for the approval card of tool in a thread of ch, and for
// its pause to be saved (the card is posted just before).
func (e *env) cardIn(ch, thread, tool string) fakeslack.Message {
	e.t.Helper()
	forTool := func(m fakeslack.Message) bool { return isCard(m) && strings.Contains(m.Text, tool) }
	if e.bot == nil && e.shared != nil {
		// Of several replicas, one whose turn lost its lease (a replica
		// starved of CPU) before it saved its pause leaves a card that
		// nothing decides, and the replica that takes the conversation
		// over posts another: the card whose call is saved.
		return e.waitIn(ch, thread, "with a card for "+tool+" whose call is saved", func(m fakeslack.Message) bool {
			return forTool(m) && e.saved(e.shared, m)
		})
	}
	m := e.waitIn(ch, thread, "with a card for "+tool, forTool)
	if e.bot != nil {
		waitUntil(e.t, "the card's call is saved", func() bool { return e.saved(e.bot.st, m) })
	}
	return m
}

// saved reports whether st has the call of card, and, while it is
// pending, lists it.
func (e *env) saved(st fullStore, card fakeslack.Message) bool {
	callID, _, _ := strings.Cut(buttonValue(e.t, card, slackapp.ActionApprove), "~")
	c, err := st.GetCall(e.t.Context(), callID)
	if err != nil {
		return false
	}
	if c.Status != store.Pending {
		return true
	}
	// A pending call is listed too: on Redis Cluster its listings are
	// written in a step after its run's.
	listed, err := st.Pending(e.t.Context(), store.Filter{})
	return err == nil && slices.ContainsFunc(listed, func(l store.Call) bool { return l.ID == callID })
}

// isCard reports whether m is a pending approval card.
func isCard(m fakeslack.Message) bool {
	return strings.Contains(string(m.Blocks), `"action_id":"approve"`)
}

// answer waits for a bot message containing text.
func (e *env) answer(thread, text string) fakeslack.Message {
	e.t.Helper()
	return e.answerIn(channel, thread, text)
}

// answerIn waits for a bot message containing text in a thread of ch.
func (e *env) answerIn(ch, thread, text string) fakeslack.Message {
	e.t.Helper()
	return e.waitIn(ch, thread, "containing "+text, func(m fakeslack.Message) bool {
		return m.BotID != "" && (strings.Contains(m.Text, text) || strings.Contains(blocksText(m), text))
	})
}

// request waits for the model's nth request (counting from 1) and returns
// it.
func (e *env) request(n int) openai.ChatCompletionRequest {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	reqs, err := e.model.WaitRequests(ctx, n)
	if err != nil {
		e.t.Fatalf("the model was not asked a %d. time: %v", n, err)
	}
	return reqs[n-1]
}

// toolResults returns the tool messages of a model request, in order.
func toolResults(req openai.ChatCompletionRequest) []openai.ChatCompletionMessage {
	var out []openai.ChatCompletionMessage
	for _, m := range req.Messages {
		if m.Role == openai.ChatMessageRoleTool {
			out = append(out, m)
		}
	}
	return out
}

// modal waits for user's open modal with the callback id.
func (e *env) modal(user, callbackID string) fakeslack.View {
	e.t.Helper()
	var found fakeslack.View
	waitUntil(e.t, "a "+callbackID+" modal is open for "+user, func() bool {
		for _, v := range e.slack.OpenModals(user) {
			if v.CallbackID == callbackID {
				found = v
				return true
			}
		}
		return false
	})
	return found
}

// ephemeral waits for an ephemeral message to user containing text.
func (e *env) ephemeral(user, text string) fakeslack.Ephemeral {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range e.slack.Ephemerals(user) {
			if strings.Contains(m.Text, text) {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	var got []string
	for _, m := range e.slack.Ephemerals(user) {
		got = append(got, m.Text)
	}
	e.t.Fatalf("%s was not told %q; ephemerals: %q", user, text, got)
	return fakeslack.Ephemeral{}
}

// cards returns the pending approval cards in a thread.
func (e *env) cards(ch, thread string) []fakeslack.Message {
	var out []fakeslack.Message
	for _, m := range e.slack.Thread(ch, thread) {
		if isCard(m) {
			out = append(out, m)
		}
	}
	return out
}

// blocksText is a message's blocks as JSON with <, > and & unescaped.
func blocksText(m fakeslack.Message) string {
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(m.Blocks))
}

// buttonValue returns the value of a card's button.
func buttonValue(t *testing.T, m fakeslack.Message, actionID string) string {
	t.Helper()
	var blocks []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"elements"`
	}
	must(t, json.Unmarshal(m.Blocks, &blocks))
	for _, b := range blocks {
		for _, el := range b.Elements {
			if el.ActionID == actionID {
				return el.Value
			}
		}
	}
	t.Fatalf("no %s button on the card: %s", actionID, m.Blocks)
	return ""
}

// audit returns /approvals audit as admin reads it once it lists an entry
// containing want: a turn's entries are stored with the write that
// records its result, which the thread's answer does not wait for.
func (e *env) audit(admin, want string) string {
	e.t.Helper()
	var audit string
	waitUntil(e.t, "the audit log lists "+want, func() bool {
		audit = e.slash(admin, "audit")
		return strings.Contains(audit, want)
	})
	return audit
}

// reject has user reject the call of the card at ts in ch with reason,
// through the Reject button and its form, and returns the form's ack.
func (e *env) reject(user, ch, ts, reason string) json.RawMessage {
	e.t.Helper()
	_, err := e.slack.Click(user, ch, ts, slackapp.ActionReject, "")
	must(e.t, err)
	form := e.modal(user, slackapp.CallbackReject)
	ack, err := e.slack.SubmitView(user, form.ID, map[string]map[string]string{slackapp.BlockRejectReason: {slackapp.ActionRejectReason: reason}}, "")
	must(e.t, err)
	return ack
}

// waitUntil polls cond until it holds or the time is up.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func dumpThread(msgs []fakeslack.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("  [" + m.User + m.BotID + "] " + m.Text + "\n")
	}
	return b.String()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testWriter writes to a test's log until the test ends; what a goroutine
// still running writes after that is dropped (testing forbids it).
type testWriter struct {
	t    *testing.T
	mu   *sync.Mutex
	done *bool
}

func newTestWriter(t *testing.T) testWriter {
	w := testWriter{t: t, mu: new(sync.Mutex), done: new(bool)}
	t.Cleanup(func() {
		w.mu.Lock()
		*w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !*w.done {
		w.t.Log(strings.TrimSpace(string(p)))
	}
	return len(p), nil
}

func tc(id, name, args string) fakeopenai.ToolCall {
	return fakeopenai.ToolCall{ID: id, Name: name, Arguments: args}
}
