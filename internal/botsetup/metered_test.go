package botsetup

import (
	"context"
	"errors"
	"maps"
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

// Each request is recorded by its result; one the bot cut (its turn's
// context ended: a shutdown) is interrupted, not a model error.
func TestMeteredModel(t *testing.T) {
	reg := prometheus.NewRegistry()
	var fail error
	m := meteredModel{
		model: modelFunc(func(_ context.Context, _ agent.ModelRequest, onDelta func(string)) (openai.ChatCompletionMessage, error) {
			if fail != nil {
				return openai.ChatCompletionMessage{}, fail
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
	for _, fail = range []error{
		errors.New("timeout"),
		&agent.ModelError{Kind: agent.ErrKindCanceled, Err: context.Canceled},
		&agent.ModelError{Kind: agent.ErrKindCanceled, Err: context.Canceled},
	} {
		if _, err := m.Complete(t.Context(), agent.ModelRequest{}, func(string) {}); err != fail {
			t.Errorf("Complete returned %v, want the model's error %v", err, fail)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	samples := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() == "toolgate_model_seconds" {
			for _, mm := range mf.GetMetric() {
				for _, lp := range mm.GetLabel() {
					if lp.GetName() == "result" {
						samples[lp.GetValue()] += mm.GetHistogram().GetSampleCount()
					}
				}
			}
		}
	}
	if want := map[string]uint64{"ok": 1, "error": 1, "interrupted": 2}; !maps.Equal(samples, want) {
		t.Errorf("toolgate_model_seconds samples by result = %v, want %v", samples, want)
	}
}
