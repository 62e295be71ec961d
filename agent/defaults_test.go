package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// A tool's server fills in the defaults of its schema (the MCP Go SDK's,
// FastMCP's and zod's validation do): the arguments the tool runs with,
// the policy judges and an approver sees have them, wherever the schema
// says which schema a value meets.
func TestFilledHasTheSchemasDefaults(t *testing.T) {
	tests := []struct {
		name, schema, args, want string
	}{
		{"top level", `{"type":"object","properties":{"deployment":{"type":"string"},"namespace":{"type":"string","default":"production"},"replicas":{"type":"integer","default":0}}}`,
			`{"deployment":"api"}`, `{"deployment":"api","namespace":"production","replicas":0}`},
		{"given values stay", `{"type":"object","properties":{"namespace":{"type":"string","default":"production"}}}`,
			`{"namespace":"staging"}`, `{"namespace":"staging"}`},
		{"null is given", `{"type":"object","properties":{"namespace":{"type":["string","null"],"default":"production"}}}`,
			`{"namespace":null}`, `{"namespace":null}`},
		{"nothing to fill is left as written", `{"type":"object","properties":{"a":{"type":"number"}}}`,
			`{"a": 1.50}`, `{"a": 1.50}`},
		{"numbers and text as written", `{"type":"object","properties":{"a":{"type":"number"},"b":{"default":"<&>"}}}`,
			`{"a":1.50}`, `{"a":1.50,"b":"<&>"}`},
		{"nested through $ref", `{"type":"object","$defs":{"Opts":{"type":"object","properties":{"force":{"type":"boolean","default":true}}}},"properties":{"opts":{"$ref":"#/$defs/Opts"}}}`,
			`{"opts":{}}`, `{"opts":{"force":true}}`},
		{"default beside a $ref", `{"type":"object","$defs":{"Opts":{"type":"object"}},"properties":{"opts":{"$ref":"#/$defs/Opts","default":{"force":true}}}}`,
			`{}`, `{"opts":{"force":true}}`},
		{"optional object (anyOf with null)", `{"type":"object","$defs":{"Opts":{"type":"object","properties":{"force":{"type":"boolean","default":true}}}},"properties":{"opts":{"anyOf":[{"$ref":"#/$defs/Opts"},{"type":"null"}],"default":null}}}`,
			`{"opts":{}}`, `{"opts":{"force":true}}`},
		{"two object branches: the server's choice", `{"type":"object","properties":{"opts":{"oneOf":[{"type":"object","properties":{"a":{"default":1}},"required":["x"]},{"type":"object","properties":{"b":{"default":2}},"required":["y"]}]}}}`,
			`{"opts":{"x":0}}`, `{"opts":{"x":0}}`},
		{"array items", `{"type":"object","properties":{"steps":{"type":"array","items":{"type":"object","properties":{"wait":{"type":"integer","default":30}}}}}}`,
			`{"steps":[{},{"wait":5}]}`, `{"steps":[{"wait":30},{"wait":5}]}`},
		{"allOf", `{"type":"object","allOf":[{"properties":{"a":{"default":"x"}}},{"properties":{"b":{"default":"y"}}}]}`,
			`{}`, `{"a":"x","b":"y"}`},
		{"a default its schema refuses is left out", `{"type":"object","properties":{"label":{"type":"string","default":null},"n":{"type":"integer","default":1}}}`,
			`{}`, `{"n":1}`},
		{"a schema that refers to itself", `{"type":"object","properties":{"a":{"default":1},"child":{"$ref":"#"}}}`,
			`{"child":{"child":{}}}`, `{"a":1,"child":{"a":1,"child":{"a":1}}}`},
		// pydantic writes dict[str, Model] as additionalProperties.
		{"additionalProperties", `{"type":"object","$defs":{"Target":{"type":"object","properties":{"replicas":{"type":"integer"},"namespace":{"type":"string","default":"production"}}}},"properties":{"targets":{"type":"object","additionalProperties":{"$ref":"#/$defs/Target"}}}}`,
			`{"targets":{"web":{"replicas":0}}}`, `{"targets":{"web":{"namespace":"production","replicas":0}}}`},
		{"patternProperties, not additionalProperties", `{"type":"object","patternProperties":{"^x_":{"type":"object","properties":{"p":{"default":1}}}},"additionalProperties":{"type":"object","properties":{"a":{"default":2}}}}`,
			`{"x_1":{},"y":{}}`, `{"x_1":{"p":1},"y":{"a":2}}`},
		{"prefixItems, then items", `{"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"object","properties":{"first":{"default":true}}}],"items":{"type":"object","properties":{"rest":{"default":true}}}}}}`,
			`{"t":[{},{}]}`, `{"t":[{"first":true},{"rest":true}]}`},
		{"a tuple, then additionalItems", `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"t":{"type":"array","items":[{"type":"object","properties":{"first":{"default":true}}}],"additionalItems":{"type":"object","properties":{"rest":{"default":true}}}}}}`,
			`{"t":[{},{}]}`, `{"t":[{"first":true},{"rest":true}]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := agent.NewRegistry()
			must(t, r.Register(agent.Tool{Name: "x", Handler: nop, Schema: json.RawMessage(tt.schema)}))
			got, err := r.Filled("x", json.RawMessage(tt.args))
			if err != nil || string(got) != tt.want {
				t.Errorf("Filled(%s) = %s, %v; want %s", tt.args, got, err, tt.want)
			}
		})
	}
}

// A default filled in beside a key that looks like its own is refused,
// as the two written out are: the policy would judge the default and a
// tool that reads keys without regard to case the other.
func TestFilledDefaultBesideALookAlikeKeyIsRefused(t *testing.T) {
	for _, b := range backends(t)[:1] {
		w := newWorld(t, b)
		schema := `{"type":"object","properties":{"path":{"type":"string","default":"/tmp/safe"}}}`
		must(t, w.reg.Register(agent.Tool{Name: "read_any", Schema: json.RawMessage(schema), Handler: nop}))
		w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_any", `{"Path":"/etc/passwd"}`)), fakeopenai.Text("refused"))
		if _, err := w.agent().Run(context.Background(), request("read it")); err != nil {
			t.Fatal(err)
		}
		if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "differ only by case") {
			t.Errorf("the model read %q, want the look-alike keys refused", got)
		}
	}
}

// Half a surrogate pair is refused for a tool whose schema fills in a
// default too, although filling it in decodes the arguments, which would
// make it U+FFFD before the canonical form could refuse it.
func TestDefaultsFilledAfterHalfASurrogatePairIsRefused(t *testing.T) {
	for _, b := range backends(t)[:1] {
		w := newWorld(t, b)
		var ran atomic.Int64
		schema := `{"type":"object","properties":{"path":{"type":"string"},"mode":{"type":"string","default":"ro"}}}`
		must(t, w.reg.Register(agent.Tool{Name: "read_any", Schema: json.RawMessage(schema), Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			ran.Add(1)
			return agent.Result{Content: "read"}, nil
		}}))
		w.model.Reply(fakeopenai.ToolCalls(call("c1", "read_any", `{"path":"/a\ud800"}`)), fakeopenai.Text("refused"))
		if _, err := w.agent().Run(context.Background(), request("read it")); err != nil {
			t.Fatal(err)
		}
		if got := toolResults(t, w.model); len(got) != 1 || !strings.Contains(got[0], "unpaired surrogate escape") {
			t.Errorf("the model read %q, want half a surrogate pair refused", got)
		}
		if n := ran.Load(); n != 0 {
			t.Errorf("read_any ran %d times", n)
		}
	}
}

// A default that is an object is copied into each call's arguments: a
// later fill of one call's value never changes the schema's default.
func TestFilledDefaultIsNotShared(t *testing.T) {
	r := agent.NewRegistry()
	schema := `{"type":"object","allOf":[{"properties":{"opts":{"default":{}}}},{"properties":{"opts":{"properties":{"force":{"default":true}}}}}]}`
	must(t, r.Register(agent.Tool{Name: "x", Handler: nop, Schema: json.RawMessage(schema)}))
	for range 2 {
		got, err := r.Filled("x", json.RawMessage(`{}`))
		if err != nil || string(got) != `{"opts":{"force":true}}` {
			t.Fatalf("Filled = %s, %v", got, err)
		}
	}
	got, err := r.Filled("x", json.RawMessage(`{"opts":{"force":false}}`))
	if err != nil || string(got) != `{"opts":{"force":false}}` {
		t.Errorf("Filled = %s, %v", got, err)
	}
}

// A call that leaves out an argument whose default a rule denies is
// judged with the default, as the tool would run it: the model cannot
// reach what the rule stops by saying nothing. An allowed call runs with
// the default written out.
func TestPolicyJudgesTheDefaults(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			ran := &counter{}
			schema := `{"type":"object","properties":{"deployment":{"type":"string"},"namespace":{"type":"string","default":"production"}},"required":["deployment"]}`
			must(t, w.reg.Register(agent.Tool{Name: "scale_down", Schema: json.RawMessage(schema), Handler: ran.handler("scaled")}))
			w.policy = `
policy:
  default: allow
  rules:
    - id: no-prod
      tool: scale_down
      when: 'args.namespace == "production"'
      verdict: deny
      reason: Not in production.
    - id: elsewhere
      tool: scale_down
      verdict: allow
`
			w.model.Reply(fakeopenai.ToolCalls(call("c1", "scale_down", `{"deployment":"api"}`)), fakeopenai.Text("refused"))
			out, err := w.agent().Run(context.Background(), request("scale api down"))
			must(t, err)
			if out.Status != agent.Answered || ran.n.Load() != 0 {
				t.Fatalf("got %s, the tool ran %d times; want it denied", out.Status, ran.n.Load())
			}
			if got := toolResults(t, w.model); len(got) != 1 || got[0] != "c1: Not in production." {
				t.Errorf("the model read %q, want the rule's reason", got)
			}
			w.model.Reply(fakeopenai.ToolCalls(call("c2", "scale_down", `{"deployment":"api","namespace":"staging"}`)), fakeopenai.Text("done"))
			w.model.Reply(fakeopenai.ToolCalls(call("c3", "scale_down", `{"deployment":"web"}`)), fakeopenai.Text("done"))
			for _, text := range []string{"staging", "web"} {
				if _, err := w.agent().Run(context.Background(), request(text)); err != nil {
					t.Fatal(err)
				}
				// Production allowed too, from the second call on.
				w.policy = "policy:\n  rules:\n    - id: all\n      tool: scale_down\n      verdict: allow\n"
			}
			want := []string{`{"deployment":"api","namespace":"staging"}`, `{"deployment":"web","namespace":"production"}`}
			if got := ran.Args(); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("the tool ran with %q, want %q", got, want)
			}
		})
	}
}

// Every item of a long list gets its default, and a value after it too:
// how many values the arguments hold does not decide which are filled
// (the server fills them all).
func TestDefaultsFilledWhateverTheArgumentsSize(t *testing.T) {
	r := agent.NewRegistry()
	schema := `{"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"}},"targets":{"type":"array","items":{"type":"object","properties":{"namespace":{"type":"string","default":"production"}}}},"opts":{"type":"object","properties":{"namespace":{"type":"string","default":"production"}}}}}`
	must(t, r.Register(agent.Tool{Name: "scale", Handler: nop, Schema: json.RawMessage(schema)}))
	items := strings.Repeat(`{},`, 12000) + `{}`
	tags := strings.Repeat(`"a",`, 12000) + `"a"`
	got, err := r.Filled("scale", json.RawMessage(`{"tags":[`+tags+`],"targets":[`+items+`],"opts":{}}`))
	must(t, err)
	var v struct {
		Targets []map[string]any `json:"targets"`
		Opts    map[string]any   `json:"opts"`
	}
	must(t, json.Unmarshal(got, &v))
	missing := 0
	for _, x := range v.Targets {
		if x["namespace"] != "production" {
			missing++
		}
	}
	if missing > 0 || v.Opts["namespace"] != "production" {
		t.Errorf("%d of %d targets left without their default, opts %v", missing, len(v.Targets), v.Opts)
	}
}
