package slackapp

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
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
