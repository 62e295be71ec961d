package slackapp

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// Metrics are the bot's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	envelopes    *prometheus.CounterVec
	duplicates   prometheus.Counter
	ackSeconds   prometheus.Histogram
	turns        *prometheus.CounterVec
	toolCalls    *prometheus.CounterVec
	decisions    *prometheus.CounterVec
	decisionWait prometheus.Histogram
	modelSeconds *prometheus.HistogramVec
	errors       *prometheus.CounterVec
	turnsQueued  prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		envelopes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_envelopes_total", Help: "Socket Mode envelopes received, by type.",
		}, []string{"type"}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_duplicate_events_total", Help: "Events dropped as redeliveries or duplicates.",
		}),
		ackSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "toolgate_ack_seconds", Help: "Time from receiving an envelope to acking it.",
			Buckets: []float64{.001, .005, .01, .05, .1, .25, .5, 1, 2, 3},
		}),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_turns_total", Help: "Agent turns, by outcome.",
		}, []string{"outcome"}),
		toolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_tool_calls_total", Help: "Tool calls the model made, each counted once, by how the policy judged it.",
		}, []string{"verdict"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_decisions_total", Help: "Decisions on paused calls, by kind and result (ok or the refusal).",
		}, []string{"kind", "result"}),
		decisionWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "toolgate_time_to_decision_seconds", Help: "Time from a call's pause to its decision.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		modelSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "toolgate_model_seconds", Help: "Model request latency, by result (ok, error, interrupted).",
			Buckets: prometheus.ExponentialBuckets(0.1, 2, 10),
		}, []string{"result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_errors_total", Help: "Errors, by where they happened.",
		}, []string{"where"}),
		turnsQueued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "toolgate_turns_queued_total", Help: "Turns that waited for a slot, MAX_TURNS running.",
		}),
	}
	reg.MustRegister(m.envelopes, m.duplicates, m.ackSeconds, m.turns, m.toolCalls, m.decisions, m.decisionWait, m.modelSeconds, m.errors, m.turnsQueued)
	return m
}

func (m *Metrics) envelope(typ string) {
	if m != nil {
		m.envelopes.WithLabelValues(typ).Inc()
	}
}

func (m *Metrics) duplicate() {
	if m != nil {
		m.duplicates.Inc()
	}
}

func (m *Metrics) ackLatency(d time.Duration) {
	if m != nil {
		m.ackSeconds.Observe(d.Seconds())
	}
}

func (m *Metrics) turn(outcome string, err error) {
	if m == nil {
		return
	}
	switch {
	case agent.Interrupted(err) || errors.Is(err, agent.ErrLeaseLost):
		// Not a failure: it goes on after the restart, or where the
		// conversation is taken over.
		outcome = "interrupted"
	case errors.Is(err, agent.ErrLeaseTimeout):
		// Not a failure either: the conversation was held elsewhere all
		// along, and what the turn was for is carried on once it is free.
		outcome = "busy"
	case err != nil:
		outcome = "error"
	}
	m.turns.WithLabelValues(outcome).Inc()
}

func (m *Metrics) decision(kind, result string, wait time.Duration) {
	if m == nil {
		return
	}
	m.decisions.WithLabelValues(kind, result).Inc()
	if result == "ok" && wait > 0 {
		m.decisionWait.Observe(wait.Seconds())
	}
}

func (m *Metrics) turnQueued() {
	if m != nil {
		m.turnsQueued.Inc()
	}
}

func (m *Metrics) error(where string) {
	if m != nil {
		m.errors.WithLabelValues(where).Inc()
	}
}

// Expired counts a call the agent expired as a decision of kind expire,
// with its wait (see agent.Config.Expired).
func (m *Metrics) Expired(c agent.Call) {
	m.decision(string(approvals.Expire), "ok", decidedAfter(c))
}

// ToolCall counts a call the model made by how it was judged (see
// agent.Config.Judged).
func (m *Metrics) ToolCall(verdict string) {
	if m != nil {
		m.toolCalls.WithLabelValues(verdict).Inc()
	}
}

// Model records the latency of one model request, by result: ok, error,
// or interrupted for a request the bot cut (a shutdown, a lost lease),
// which is no failure of the model.
func (m *Metrics) Model(d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	switch {
	case agent.Interrupted(err):
		result = "interrupted"
	case err != nil:
		result = "error"
	}
	m.modelSeconds.WithLabelValues(result).Observe(d.Seconds())
}
