package botsetup

import (
	"context"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// meteredModel is an agent.Model that records the latency and result of
// every request in the bot's metrics.
type meteredModel struct {
	model   agent.Model
	metrics *slackapp.Metrics
}

var _ agent.Model = meteredModel{}

// Complete calls the wrapped model and records how long it took.
func (m meteredModel) Complete(ctx context.Context, req agent.ModelRequest, onDelta func(text string)) (openai.ChatCompletionMessage, error) {
	start := time.Now()
	msg, err := m.model.Complete(ctx, req, onDelta)
	m.metrics.Model(time.Since(start), err)
	return msg, err
}

// policyEngine is what meteredPolicy needs of an approvals.Engine.
type policyEngine interface {
	Evaluate(ctx context.Context, in approvals.Input) (approvals.Verdict, error)
	agent.RecordPolicy
	Remember(ctx context.Context, actor string, r approvals.StandingRule) (approvals.StandingRule, error)
}

// meteredPolicy is the agent's policy: the approvals engine, with every
// verdict counted in the bot's metrics. It is also an agent.Rememberer, so
// "Always allow here" decisions still reach the engine through it.
type meteredPolicy struct {
	engine  policyEngine
	metrics *slackapp.Metrics
}

var (
	_ agent.Policy       = meteredPolicy{}
	_ agent.RecordPolicy = meteredPolicy{}
	_ agent.Rememberer   = meteredPolicy{}
	_ policyEngine       = (*approvals.Engine)(nil)
)

// Evaluate judges a call with the engine and counts the verdict ("error"
// when the engine failed).
func (p meteredPolicy) Evaluate(ctx context.Context, in approvals.Input) (approvals.Verdict, error) {
	return p.count(p.engine.Evaluate(ctx, in))
}

// RecordKinds are the engine's record kinds.
func (p meteredPolicy) RecordKinds() []string { return p.engine.RecordKinds() }

// EvaluateRecords judges a call with the engine by records the caller
// read, and counts the verdict as Evaluate does.
func (p meteredPolicy) EvaluateRecords(ctx context.Context, in approvals.Input, recs map[string][]store.Record) (approvals.Verdict, error) {
	return p.count(p.engine.EvaluateRecords(ctx, in, recs))
}

// count counts a verdict of the engine.
func (p meteredPolicy) count(v approvals.Verdict, err error) (approvals.Verdict, error) {
	if err != nil {
		p.metrics.ToolCall("error")
		return v, err
	}
	p.metrics.ToolCall(string(v.Action))
	return v, nil
}

// Remember stores a standing rule with the engine.
func (p meteredPolicy) Remember(ctx context.Context, actor string, r approvals.StandingRule) (approvals.StandingRule, error) {
	return p.engine.Remember(ctx, actor, r)
}
