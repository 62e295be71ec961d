package slackapp

import (
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// Changes of one call before a round count once, with its latest state,
// in the order the calls first changed.
func TestHomeRefreshFoldsChangesOfOneCall(t *testing.T) {
	h := newHomeRefresh()
	h.changed(agent.Call{ID: "r1/0", Status: agent.CallPending})
	h.changed(agent.Call{ID: "r2/0", Status: agent.CallPending})
	h.changed(agent.Call{ID: "r1/0", Status: agent.CallDecided})
	calls, _ := h.take()
	if len(calls) != 2 || calls[0].ID != "r1/0" || calls[1].ID != "r2/0" {
		t.Fatalf("take() = %+v; want r1/0 then r2/0", calls)
	}
	if calls[0].Status != agent.CallDecided {
		t.Errorf("r1/0 status = %v; want %v, its latest", calls[0].Status, agent.CallDecided)
	}
	h.changed(agent.Call{ID: "r1/0", Status: agent.CallDecided})
	if calls, _ := h.take(); len(calls) != 1 {
		t.Errorf("after a round, take() = %d calls; want the one changed since", len(calls))
	}
}
