package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

func nop(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{}, nil }

func TestRegistryRejectsBadTools(t *testing.T) {
	tests := []struct {
		name string
		tool agent.Tool
		want string
	}{
		{"empty name", agent.Tool{Name: "", Handler: nop}, "name must be"},
		{"space in name", agent.Tool{Name: "read file", Handler: nop}, "name must be"},
		{"dot in name", agent.Tool{Name: "files.read", Handler: nop}, "name must be"},
		{"too long", agent.Tool{Name: strings.Repeat("a", 65), Handler: nop}, "name must be"},
		{"no handler", agent.Tool{Name: "x"}, "no handler"},
		{"schema not JSON", agent.Tool{Name: "x", Handler: nop, Schema: json.RawMessage(`{"type":`)}, "schema is not JSON"},
		{"schema invalid", agent.Tool{Name: "x", Handler: nop, Schema: json.RawMessage(`{"type":"nonsense"}`)}, "schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := agent.NewRegistry().Register(tt.tool)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("duplicate", func(t *testing.T) {
		r := agent.NewRegistry()
		if err := r.Register(agent.Tool{Name: "x", Handler: nop}); err != nil {
			t.Fatal(err)
		}
		if err := r.Register(agent.Tool{Name: "x", Handler: nop}); err == nil || !strings.Contains(err.Error(), "already registered") {
			t.Errorf("got %v registering a name twice, want already registered", err)
		}
	})
	t.Run("human tools need no handler", func(t *testing.T) {
		if err := agent.NewRegistry().Register(agent.Tool{Name: "ask_human", Human: true}); err != nil {
			t.Errorf("got %v, want a human tool accepted without a handler", err)
		}
	})
}

func TestRegistryReplace(t *testing.T) {
	r := agent.NewRegistry()
	for _, n := range []string{"srv__a", "srv__b", "local"} {
		if err := r.Register(agent.Tool{Name: n, Handler: nop}); err != nil {
			t.Fatal(err)
		}
	}
	fromSrv := func(n string) bool { return strings.HasPrefix(n, "srv__") }
	if err := r.Replace(fromSrv, []agent.Tool{{Name: "srv__c", Handler: nop}}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range r.List() {
		names = append(names, tl.Name)
	}
	if got := strings.Join(names, ","); got != "local,srv__c" {
		t.Errorf("got tools %s after replace, want local,srv__c", got)
	}
	// A failed replace changes nothing.
	if err := r.Replace(fromSrv, []agent.Tool{{Name: "bad name", Handler: nop}}); err == nil {
		t.Fatal("replace with an invalid tool succeeded")
	}
	if _, ok := r.Lookup("srv__c"); !ok {
		t.Error("a failed replace removed tools")
	}
	if err := r.Replace(fromSrv, []agent.Tool{{Name: "local", Handler: nop}}); err == nil {
		t.Error("replace that collides with a kept tool succeeded")
	}
}

// OnChange's function is called after each change of the tools, with the
// change made, and after no failed one; nil stops the calls.
func TestRegistryOnChange(t *testing.T) {
	r := agent.NewRegistry()
	var seen []int
	r.OnChange(func() { seen = append(seen, len(r.List())) })
	if err := r.Register(agent.Tool{Name: "srv__a", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	fromSrv := func(n string) bool { return strings.HasPrefix(n, "srv__") }
	if err := r.Replace(fromSrv, []agent.Tool{{Name: "srv__b", Handler: nop}, {Name: "srv__c", Handler: nop}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(agent.Tool{Name: "srv__b", Handler: nop}); err == nil {
		t.Fatal("a name registered twice")
	}
	if err := r.Replace(fromSrv, []agent.Tool{{Name: "bad name", Handler: nop}}); err == nil {
		t.Fatal("replace with an invalid tool succeeded")
	}
	if got := fmt.Sprint(seen); got != "[1 2]" {
		t.Errorf("called with %s tools, want [1 2]: after the register and the replace, not after the failures", got)
	}
	r.OnChange(nil)
	if err := r.Register(agent.Tool{Name: "local", Handler: nop}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Errorf("called %d times after OnChange(nil), want no more", len(seen)-2)
	}
}

func TestRegistryValidate(t *testing.T) {
	r := agent.NewRegistry()
	schema := `{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"]}`
	if err := r.Register(agent.Tool{Name: "x", Handler: nop, Schema: json.RawMessage(schema)}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args string
		want string // "" for valid
	}{
		{`{"n": 3}`, ""},
		{`{"n": 0}`, "at /n"},
		{`{}`, "missing"},
		{`{"n": "3"}`, "at /n"},
		{`{"n": 3`, "not valid JSON"},
		{`"n"`, "must be a JSON object"},
	}
	for _, tt := range tests {
		err := r.Validate("x", json.RawMessage(tt.args))
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("Validate(%s): got %v, want nil", tt.args, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("Validate(%s): got %v, want an error containing %q", tt.args, err, tt.want)
		}
	}
	if err := r.Validate("nope", json.RawMessage(`{}`)); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("got %v for an unknown tool", err)
	}
}

// A tool's schema (an MCP server's, which may be remote) cannot $ref the
// bot's files: registering it fails, and nothing of the file reaches the
// model or the server through validation errors. A schema that names its
// metaschema, as many servers' do, still registers.
func TestSchemaRefsReachNoFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(path, []byte(`{"enum":["from-local-file"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := agent.NewRegistry()
	schema := `{"type":"object","properties":{"x":{"$ref":"file://` + filepath.ToSlash(path) + `"}}}`
	err := reg.Register(agent.Tool{Name: "peek", Schema: json.RawMessage(schema), Handler: nop})
	if err == nil {
		err = reg.Validate("peek", json.RawMessage(`{"x":"a"}`))
		t.Fatalf("a schema with a file $ref registered; validating gives %v", err)
	}
	if strings.Contains(err.Error(), "from-local-file") {
		t.Errorf("the error shows the file: %v", err)
	}
	for _, meta := range []string{"http://json-schema.org/draft-07/schema#", "https://json-schema.org/draft/2020-12/schema"} {
		err := agent.NewRegistry().Register(agent.Tool{Name: "meta", Schema: json.RawMessage(`{"$schema":"` + meta + `","type":"object"}`), Handler: nop})
		if err != nil {
			t.Errorf("a schema naming %s: %v", meta, err)
		}
	}
}

// CheckArgs refuses what the agent refuses before the policy, whatever the
// tool, and gives the canonical arguments, numbers as written.
func TestCheckArgs(t *testing.T) {
	tests := []struct {
		args, want, wantErr string
	}{
		{`{"b": 1, "a": "x"}`, `{"a":"x","b":1}`, ""},
		{"  ", `{}`, ""},
		{`{"n": 1e400}`, `{"n":1e400}`, ""},
		{`{"a": 1, "a": 2}`, "", `key "a" given twice`},
		{`{"x": {"a": 1, "a": 2}}`, "", `key "a" given twice`},
		{`{"path": 1, "Path": 2}`, "", `keys "path" and "Path" differ only by case`},
		{`[1]`, "", "arguments must be a JSON object"},
		{`{"a":`, "", "arguments are not valid JSON"},
		{`{} {}`, "", "arguments are not valid JSON"},
		{strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), "", "nested more than 64 levels deep"},
	}
	for _, tt := range tests {
		got, err := agent.CheckArgs(json.RawMessage(tt.args))
		switch {
		case tt.wantErr == "" && (err != nil || string(got) != tt.want):
			t.Errorf("CheckArgs(%s) = %s, %v; want %s", tt.args, got, err, tt.want)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("CheckArgs(%s) = %s, %v; want an error containing %q", tt.args, got, err, tt.wantErr)
		}
	}
}

// A key given twice is refused for a tool whose schema fills in a default
// too: decoded to fill it in, the last value won, and the arguments ran
// with it, while the history held both.
func TestKeyGivenTwiceRefusedWhenDefaultsAreFilled(t *testing.T) {
	w := newWorld(t, backends(t)[0])
	var ran atomic.Int64
	schema := `{"type":"object","properties":{"cmd":{"type":"string"},"mode":{"type":"string","default":"ro"}}}`
	must(t, w.reg.Register(agent.Tool{Name: "sh", Annotations: approvals.Hints{ReadOnly: true}, Schema: json.RawMessage(schema),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			ran.Add(1)
			return agent.Result{Content: "ran"}, nil
		}}))
	w.model.Reply(fakeopenai.ToolCalls(call("c1", "sh", `{"cmd":"ls","cmd":"rm -rf /"}`)), fakeopenai.Text("done"))
	if _, err := w.agent().Run(context.Background(), request("list")); err != nil {
		t.Fatal(err)
	}
	got := toolResults(t, w.model)
	if n := ran.Load(); n != 0 || len(got) != 1 || !strings.Contains(got[0], `key "cmd" given twice`) {
		t.Errorf("sh ran %d times; the model read %q; want the key given twice refused", n, got)
	}
}

// A patternProperties pattern Go's regexp cannot compile (a lookahead) is
// left to the server: its subschema is not applied to every property,
// which refused valid arguments, and additionalProperties or
// unevaluatedProperties do not refuse the properties it was for.
func TestUncompilablePatternPropertiesLeftToTheServer(t *testing.T) {
	reg := agent.NewRegistry()
	for name, schema := range map[string]string{
		"labels":            `{"type":"object","properties":{"_count":{"type":"integer"}},"patternProperties":{"^(?!_)":{"type":"string"}}}`,
		"closed":            `{"type":"object","properties":{"_count":{"type":"integer"}},"patternProperties":{"^(?!_)":{"type":"string"}},"additionalProperties":false}`,
		"unevaluated":       `{"type":"object","properties":{"_count":{"type":"integer"}},"patternProperties":{"^(?!_)":{"type":"string"}},"unevaluatedProperties":false}`,
		"unevaluated_above": `{"type":"object","allOf":[{"properties":{"_count":{"type":"integer"}},"patternProperties":{"^(?!_)":{"type":"string"}}}],"unevaluatedProperties":false}`,
	} {
		if err := reg.Register(agent.Tool{Name: name, Schema: json.RawMessage(schema),
			Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{}, nil }}); err != nil {
			t.Fatal(err)
		}
		if _, err := reg.Filled(name, json.RawMessage(`{"_count":5,"env":"prod"}`)); err != nil {
			t.Errorf("%s: valid arguments refused: %v", name, err)
		}
		if _, err := reg.Filled(name, json.RawMessage(`{"_count":"five"}`)); err == nil {
			t.Errorf("%s: a property its schema types was not checked", name)
		}
	}
}

// Values in a schema (enum, const, default, examples) are not schemas: an
// object among them that holds a patternProperties key is left as it is.
func TestPatternPropertiesInValuesAreLeftAlone(t *testing.T) {
	reg := agent.NewRegistry()
	schema := `{"type":"object","properties":{"opts":{"enum":[{"patternProperties":{"(?!x)":1}}]}}}`
	if err := reg.Register(agent.Tool{Name: "opts", Schema: json.RawMessage(schema),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) { return agent.Result{}, nil }}); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Filled("opts", json.RawMessage(`{"opts":{"patternProperties":{"(?!x)":1}}}`)); err != nil {
		t.Errorf("the enum's own value refused: %v", err)
	}
	if _, err := reg.Filled("opts", json.RawMessage(`{"opts":{"patternProperties":{}}}`)); err == nil {
		t.Error("a value not in the enum accepted")
	}
}
