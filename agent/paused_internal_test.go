package agent

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/store"
)

// The remembered calls are bounded, one copy of the records is kept per
// version and dropped with the last call that uses it, and calls without
// a version of the records, or with large arguments, are not remembered.
func TestPausedCallsAreBounded(t *testing.T) {
	var p pausedCalls
	recs := func() map[string][]store.Record {
		return map[string][]store.Record{"rule": {{Kind: "rule", ID: "r1"}}}
	}
	call := func(id string) store.Call { return store.Call{ID: id, Args: json.RawMessage(`{}`)} }
	p.add([]store.Call{call("a.0")}, recs(), 0)
	p.add([]store.Call{call("b.0")}, nil, 3)
	p.add([]store.Call{{ID: "c.0", Args: json.RawMessage(`"` + strings.Repeat("x", maxPausedArgs) + `"`)}}, recs(), 3)
	if len(p.byID) != 0 {
		t.Fatalf("remembered %d calls without a version, records or with large arguments, want none", len(p.byID))
	}
	first := recs()
	p.add([]store.Call{call("d.0"), call("d.1")}, first, 7)
	p.add([]store.Call{call("e.0")}, recs(), 7)
	if got, ok := p.take("e.0"); !ok || got.version != 7 || &got.recs["rule"][0] != &first["rule"][0] {
		t.Errorf("take(e.0) = version %d, %v, records shared %v; want version 7 with the records first read at it", got.version, ok, ok && &got.recs["rule"][0] == &first["rule"][0])
	}
	if _, ok := p.take("e.0"); ok {
		t.Error("take(e.0) twice found it twice")
	}
	for i := range maxPausedCalls {
		p.add([]store.Call{call(store.CallID("f", i))}, recs(), 8)
	}
	if _, ok := p.take("d.0"); ok {
		t.Error("the oldest call is remembered past the bound")
	}
	if len(p.byID) != maxPausedCalls || len(p.recs) != 1 || p.recs[8].uses != maxPausedCalls {
		t.Errorf("remembered %d calls with %d record versions (uses %v), want %d calls, one version", len(p.byID), len(p.recs), p.recs[8], maxPausedCalls)
	}
}
