package slackapp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/store"
)

// An expiry is a decision: counted by kind, with its wait.
func TestExpiredCountsAsADecision(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.Expired(agent.Call{ID: "c1", Status: agent.CallExpired, CreatedAt: time.Now().Add(-time.Hour)})
	var nilMetrics *Metrics
	nilMetrics.Expired(agent.Call{}) // records nothing, and does not fail
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var decisions float64
	var waits uint64
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			switch mf.GetName() {
			case "toolgate_decisions_total":
				labels := map[string]string{}
				for _, lp := range mm.GetLabel() {
					labels[lp.GetName()] = lp.GetValue()
				}
				if labels["kind"] == "expire" && labels["result"] == "ok" {
					decisions += mm.GetCounter().GetValue()
				}
			case "toolgate_time_to_decision_seconds":
				waits += mm.GetHistogram().GetSampleCount()
			}
		}
	}
	if decisions != 1 || waits != 1 {
		t.Errorf(`toolgate_decisions_total{kind="expire",result="ok"} = %v and %d waits observed, want 1 and 1`, decisions, waits)
	}
}

// A turn that lost its conversation's lease, found by a refused write, is
// interrupted, as one whose renewal found it: the conversation is taken
// over, not failed. A turn that waited for a slot is no error.
func TestTurnOutcomes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	m.turn("answered", fmt.Errorf("commit turn: %w: %w", agent.ErrLeaseLost, store.ErrNotHolder))
	m.turn("answered", context.Canceled)
	m.turn("answered", errors.New("store unreachable"))
	m.turnQueued()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range mm.GetLabel() {
				name += "/" + lp.GetValue()
			}
			got[name] += mm.GetCounter().GetValue()
		}
	}
	want := map[string]float64{"toolgate_turns_total/interrupted": 2, "toolgate_turns_total/error": 1, "toolgate_turns_queued_total": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	for k := range got {
		if strings.HasPrefix(k, "toolgate_errors_total") {
			t.Errorf("%s counted", k)
		}
	}
}
