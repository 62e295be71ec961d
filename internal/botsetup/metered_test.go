package botsetup

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
)

// counterValue returns the value of the counter name with label=value, or
// -1 when there is none.
func counterValue(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}

// TestMeteredPolicyRemembers checks that "Always allow here" still reaches
// the engine through the wrapper: the agent finds the Rememberer by a type
// assertion on its policy.
func TestMeteredPolicyRemembers(t *testing.T) {
	st, err := boltstore.Open(filepath.Join(t.TempDir(), "toolgate.db"), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	var policy agent.Policy = meteredPolicy{engine: approvals.NewEngine(nil, st), metrics: slackapp.NewMetrics(reg)}
	ctx := t.Context()
	in := approvals.Input{Tool: "files__delete", Args: json.RawMessage(`{}`), User: "UREQUEST1", Channel: "COPS00001"}

	v, err := policy.Evaluate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != approvals.Ask {
		t.Fatalf("before Remember: verdict %q, want ask", v.Action)
	}
	rem, ok := policy.(agent.Rememberer)
	if !ok {
		t.Fatal("the metered policy is not an agent.Rememberer")
	}
	if _, err := rem.Remember(ctx, "UAPPROVER", approvals.StandingRule{Tool: in.Tool, Channel: in.Channel}); err != nil {
		t.Fatalf("Remember: %v", err)
	}
	v, err = policy.Evaluate(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if v.Action != approvals.Allow {
		t.Errorf("after Remember: verdict %q, want allow", v.Action)
	}
	for _, want := range []struct {
		verdict string
		n       float64
	}{{"ask", 1}, {"allow", 1}} {
		if got := counterValue(t, reg, "toolgate_tool_calls_total", "verdict", want.verdict); got != want.n {
			t.Errorf("toolgate_tool_calls_total{verdict=%q} = %v, want %v", want.verdict, got, want.n)
		}
	}
}

type failingEngine struct{}

func (failingEngine) Evaluate(context.Context, approvals.Input) (approvals.Verdict, error) {
	return approvals.Verdict{}, errors.New("store unreachable")
}

func (failingEngine) RecordKinds() []string { return []string{"policy_rule"} }

func (failingEngine) EvaluateRecords(context.Context, approvals.Input, map[string][]store.Record) (approvals.Verdict, error) {
	return approvals.Verdict{}, errors.New("store unreachable")
}

func (failingEngine) Remember(context.Context, string, approvals.StandingRule) (approvals.StandingRule, error) {
	return approvals.StandingRule{}, errors.New("store unreachable")
}

func TestMeteredPolicyCountsErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := meteredPolicy{engine: failingEngine{}, metrics: slackapp.NewMetrics(reg)}
	if _, err := p.Evaluate(t.Context(), approvals.Input{Tool: "x"}); err == nil {
		t.Fatal("Evaluate hid the engine's error")
	}
	if _, err := p.EvaluateRecords(t.Context(), approvals.Input{Tool: "x"}, nil); err == nil {
		t.Fatal("EvaluateRecords hid the engine's error")
	}
	if got := counterValue(t, reg, "toolgate_tool_calls_total", "verdict", "error"); got != 2 {
		t.Errorf(`toolgate_tool_calls_total{verdict="error"} = %v, want 2`, got)
	}
}

type modelFunc func(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error)

func (f modelFunc) Complete(ctx context.Context, req agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
	return f(ctx, req, onDelta)
}

func TestMeteredModel(t *testing.T) {
	reg := prometheus.NewRegistry()
	fail := false
	m := meteredModel{
		model: modelFunc(func(_ context.Context, _ agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
			if fail {
				return openai.ChatCompletionMessage{}, errors.New("timeout")
			}
			onDelta("hi")
			return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: "hi"}, nil
		}),
		metrics: slackapp.NewMetrics(reg),
	}
	var deltas []string
	msg, err := m.Complete(t.Context(), agent.ModelRequest{}, func(s string) { deltas = append(deltas, s) })
	if err != nil || msg.Content != "hi" || strings.Join(deltas, "") != "hi" {
		t.Errorf("Complete = %+v, %v with deltas %q; want the model's answer passed through", msg, err, deltas)
	}
	fail = true
	if _, err := m.Complete(t.Context(), agent.ModelRequest{}, func(string) {}); err == nil {
		t.Error("Complete hid the model's error")
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var samples uint64
	for _, mf := range mfs {
		if mf.GetName() == "toolgate_model_seconds" {
			for _, mm := range mf.GetMetric() {
				samples += mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if samples != 2 {
		t.Errorf("toolgate_model_seconds has %d samples, want 2", samples)
	}
}
