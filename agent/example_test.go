package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store/boltstore"
)

const examplePolicy = `
policy:
  default: ask
  rules:
    - id: restarts
      tool: restart_service
      verdict: ask
      approvers: [UOPS]
      four_eyes: true
      reason: Restarts drop open connections.
`

// A turn whose tool call needs approval pauses; the approval resumes it,
// the tool runs once, and the model answers with its result.
func Example() {
	ctx := context.Background()

	// The tool the model may call, counting its runs.
	var restarts atomic.Int64
	tools := agent.NewRegistry()
	err := tools.Register(agent.Tool{
		Name:        "restart_service",
		Description: "Restart a service",
		Schema:      json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"}},"required":["service"]}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			restarts.Add(1)
			return agent.Result{Content: "restarted"}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}

	// An embedded store and the policy, which keeps its changes there.
	dir, err := os.MkdirTemp("", "toolgate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := boltstore.Open(filepath.Join(dir, "toolgate.db"), boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	policy, err := approvals.ParseConfig([]byte(examplePolicy))
	if err != nil {
		log.Fatal(err)
	}
	engine := approvals.NewEngine(policy, st)

	// A scripted model: it calls the tool, then answers.
	server := fakeopenai.Start()
	defer server.Close()
	server.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "restart_service", Arguments: `{ "service": "api" }`}),
		fakeopenai.Text("I restarted api."),
	)
	model := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: server.URL(), APIKey: "key", Model: "fake-model"})

	a := agent.New(model, tools, engine, st, nil, agent.Config{})
	out, err := a.Run(ctx, agent.Request{Conversation: "T1/C1/1700000000.000100", User: "UDEV", Channel: "C1", Text: "restart api please"})
	if err != nil {
		log.Fatal(err)
	}
	p := out.Pending[0]
	fmt.Println(out.Status+":", p.Tool, string(p.Args))
	fmt.Println("runs before the decision:", restarts.Load())

	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOPS"})
	if err != nil {
		log.Fatal(err)
	}
	if res.Complete {
		out, err = a.Resume(ctx, res.Call.RunID)
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(out.Status+":", out.Answer)
	fmt.Println("runs after the decision:", restarts.Load())

	// The step resumes once; a second Resume has nothing to do.
	again, err := a.Resume(ctx, res.Call.RunID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("second resume:", again.Status, "runs:", restarts.Load())
	// Output:
	// paused: restart_service {"service":"api"}
	// runs before the decision: 0
	// answered: I restarted api.
	// runs after the decision: 1
	// second resume: idle runs: 1
}

// A decision is refused when the decider saw other arguments (its
// fingerprint does not match) or may not decide; a rejection with a reason
// is passed to the model word for word, and the tool does not run.
func ExampleAgent_Decide() {
	ctx := context.Background()

	var restarts atomic.Int64
	tools := agent.NewRegistry()
	err := tools.Register(agent.Tool{
		Name:   "restart_service",
		Schema: json.RawMessage(`{"type":"object","properties":{"service":{"type":"string"}},"required":["service"]}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			restarts.Add(1)
			return agent.Result{Content: "restarted"}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "toolgate-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	st, err := boltstore.Open(filepath.Join(dir, "toolgate.db"), boltstore.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	policy, err := approvals.ParseConfig([]byte(examplePolicy))
	if err != nil {
		log.Fatal(err)
	}
	server := fakeopenai.Start()
	defer server.Close()
	server.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "restart_service", Arguments: `{"service":"db"}`}),
		fakeopenai.Text("The restart of db was rejected: it is peak hour."),
	)
	model := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: server.URL(), APIKey: "key", Model: "fake-model"})
	a := agent.New(model, tools, approvals.NewEngine(policy, st), st, nil, agent.Config{})

	out, err := a.Run(ctx, agent.Request{Conversation: "T1/C1/1700000000.000200", User: "UDEV", Channel: "C1", Text: "restart db"})
	if err != nil {
		log.Fatal(err)
	}
	p := out.Pending[0]

	// The approver was shown other arguments.
	_, shown, _ := approvals.Fingerprint(json.RawMessage(`{"service":"api"}`))
	_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: shown, Kind: approvals.Approve, Decider: "UOPS"})
	fmt.Println("stale arguments refused:", errors.Is(err, approvals.ErrFingerprintMismatch))

	// The requester may not approve a four-eyes call.
	_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UDEV"})
	fmt.Println("own call refused:", errors.Is(err, approvals.ErrNotApprover))

	res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Reject, Decider: "UOPS", Reason: "it is peak hour"})
	if err != nil {
		log.Fatal(err)
	}
	out, err = a.Resume(ctx, res.Call.RunID)
	if err != nil {
		log.Fatal(err)
	}

	// What the model read as the call's result.
	reqs := server.Requests()
	msgs := reqs[len(reqs)-1].Messages
	fmt.Println("model read:", msgs[len(msgs)-1].Content)
	fmt.Println(out.Status+":", out.Answer)
	fmt.Println("runs:", restarts.Load())

	// A later decision on the same call is refused.
	_, err = a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UOPS"})
	fmt.Println("second decision refused:", errors.Is(err, approvals.ErrAlreadyDecided))
	// Output:
	// stale arguments refused: true
	// own call refused: true
	// model read: not performed: user UOPS rejected this call with the reason: it is peak hour
	// answered: The restart of db was rejected: it is peak hour.
	// runs: 0
	// second decision refused: true
}
