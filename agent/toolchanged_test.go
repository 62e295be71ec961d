package agent_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// replaceDeploy swaps the deploy tool for one with schema and the same
// handler, as an MCP server's tools/list_changed or a reconnect does.
func replaceDeploy(t *testing.T, w *world, schema string) {
	t.Helper()
	changeDeploy(t, w, func(deploy *agent.Tool) { deploy.Schema = json.RawMessage(schema) })
}

// changeDeploy registers the deploy tool again, as change leaves it, with
// the same handler.
func changeDeploy(t *testing.T, w *world, change func(*agent.Tool)) {
	t.Helper()
	deploy, ok := w.reg.Lookup("deploy")
	if !ok {
		t.Fatal("no deploy tool")
	}
	change(&deploy)
	must(t, w.reg.Replace(func(n string) bool { return n == "deploy" }, []agent.Tool{deploy}))
}

// skippedNotes returns the notes of the calls reported skipped.
func skippedNotes(w *world) []string {
	var out []string
	for _, u := range w.rec.Updates() {
		if u.Phase == agent.PhaseSkipped {
			out = append(out, u.Note)
		}
	}
	return out
}

// An approved call whose tool changed between the pause and the run (its
// MCP server's schema now refuses the approved arguments, or fills in a
// default the card never showed and the policy never judged) does not
// run: the model and the card are told why, and the store keeps why. Nor
// does one whose tool's name has come to mean another tool: described
// otherwise, with other hints, or of another server.
func TestApprovedCallDoesNotRunWhenItsToolChanged(t *testing.T) {
	const meaning = "its description, hints or server are not those it had when this call was asked"
	const server = "mcp deployer https://deployer.example/mcp"
	ofServer := func(d *agent.Tool) { d.Origin = server }
	cases := []struct {
		name, schema string
		before       func(*agent.Tool) // the tool as the call pauses, if set
		change       func(*agent.Tool) // instead of the schema, if set
		edit         string            // edited arguments approved instead, if set
		why          string            // in what the model reads
	}{
		{name: "a server's, described otherwise", before: ofServer, change: func(d *agent.Tool) { d.Description = "Deploy a service to production, skipping the canaries" }, why: meaning},
		{name: "now destructive", change: func(d *agent.Tool) { d.Annotations.Destructive = new(true) }, why: meaning},
		{name: "of another server", before: ofServer, change: func(d *agent.Tool) { d.Origin = "mcp deployer https://other.example/mcp" }, why: meaning},
		{name: "now a server's", change: ofServer, why: meaning},
		{name: "requires a new property",
			schema: `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"},"region":{"type":"string"}},"required":["service","version","region"]}`,
			why:    "region"},
		{name: "adds a property with a default",
			schema: `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"},"force":{"type":"boolean","default":true}},"required":["service","version"]}`,
			why:    `"force":true`},
		{name: "edited arguments, a default added",
			schema: `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"},"force":{"type":"boolean","default":true}},"required":["service","version"]}`,
			edit:   `{"service":"api","version":"3"}`,
			why:    `"force":true`},
		{name: "a type narrowed",
			schema: `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"integer"}},"required":["service","version"]}`,
			why:    "version"},
	}
	for _, b := range backends(t) {
		for _, tc := range cases {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				if tc.before != nil {
					changeDeploy(t, w, tc.before)
				}
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
				d := approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"}
				if tc.edit != "" {
					d.Kind, d.Args = approvals.Edit, json.RawMessage(tc.edit)
				}
				res, err := a.Decide(ctx, d)
				must(t, err)
				if !res.Complete {
					t.Fatalf("the decision left the call %s, want it decided", res.Call.Status)
				}
				if tc.change != nil {
					changeDeploy(t, w, tc.change)
				} else {
					replaceDeploy(t, w, tc.schema)
				}
				w.model.Reply(fakeopenai.Text("not deployed"))
				if _, err := a.Resume(ctx, p.RunID); err != nil {
					t.Fatal(err)
				}
				if n := w.deploys.n.Load(); n != 0 {
					t.Fatalf("deploy ran %d times with %q, want never: its tool changed since the approval", n, w.deploys.Args())
				}
				got := toolResults(t, w.model)
				if len(got) != 1 || !strings.Contains(got[0], "not performed: the definition of tool deploy changed since this call was approved") ||
					!strings.Contains(got[0], tc.why) || !strings.Contains(got[0], "ask again") {
					t.Errorf("the model read %q, want the call not performed because the tool changed (%s)", got, tc.why)
				}
				if notes := skippedNotes(w); len(notes) != 1 || notes[0] != agent.NoteToolChanged {
					t.Errorf("the card's notes are %q, want %q", notes, agent.NoteToolChanged)
				}
				if got := toolExecutions(t, w.store, "deploy"); len(got) != 0 {
					t.Errorf("audited executions of deploy: %q, want none", got)
				}
				news, err := a.News(ctx, p.ID)
				must(t, err)
				if news.Phase != agent.PhaseSkipped || news.Note != agent.NoteToolChanged || !strings.Contains(news.Result.Content, "not performed") {
					t.Errorf("the call as stored is %s (%q, %q), want skipped because its tool changed", news.Phase, news.Note, news.Result.Content)
				}
			})
		}
	}
}

// An approved call whose tool is registered again unchanged (a reconnect),
// or changed in ways that leave the approved arguments as they are, runs
// once, with the approved arguments; so do arguments that a store's JSON
// may spell otherwise.
func TestApprovedCallRunsWhenItsToolIsUnchanged(t *testing.T) {
	cases := []struct {
		name, schema, args string
		change             func(*agent.Tool) // instead of the schema, if set
	}{
		{name: "same registration", args: `{"service":"api","version":"2"}`},
		// A built-in's description is written from its settings: more
		// hosts or programs allowed leave what the call does as it was.
		{name: "a built-in described otherwise", args: `{"service":"api","version":"2"}`, change: func(d *agent.Tool) { d.Description = "Deploy a service. Allowed services: api, web." }},
		{name: "registered again", schema: deploySchema, args: `{"service":"api","version":"2"}`},
		{name: "an optional property added",
			schema: `{"type":"object","properties":{"service":{"type":"string"},"version":{"type":"string"},"region":{"type":"string"}},"required":["service","version"]}`,
			args:   `{"service":"api","version":"2"}`},
		{name: "characters a store may escape", schema: deploySchema, args: `{"service":"a<b>&c","version":"2\u2028"}`},
	}
	for _, b := range backends(t) {
		for _, tc := range cases {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				ctx := t.Context()
				w := newWorld(t, b)
				a := w.agent()
				p := pauseOne(t, w, a, call("c1", "deploy", tc.args))
				_, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
				must(t, err)
				switch {
				case tc.change != nil:
					changeDeploy(t, w, tc.change)
				case tc.schema != "":
					replaceDeploy(t, w, tc.schema)
				}
				w.model.Reply(fakeopenai.Text("deployed"))
				if _, err := a.Resume(ctx, p.RunID); err != nil {
					t.Fatal(err)
				}
				if got := w.deploys.Args(); len(got) != 1 || got[0] != string(p.Args) {
					t.Fatalf("deploy ran with %q, want once with the approved %s", got, p.Args)
				}
				if notes := skippedNotes(w); len(notes) != 0 {
					t.Errorf("calls skipped with %q, want none", notes)
				}
				if got := toolResults(t, w.model); len(got) != 1 || !strings.HasSuffix(got[0], ": deployed") {
					t.Errorf("the model read %q, want the tool's output", got)
				}
			})
		}
	}
}
