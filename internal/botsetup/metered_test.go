package botsetup

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/slackapp"
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
