package approvals_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

func ExampleParseConfig() {
	config := []byte(`
mcp_servers:
  - name: files
    command: ["./files-mcp", "--root", "/srv/scratch"]
policy:
  default: ask
  rules:
    - tool: "files__read_*"
      verdict: allow
    - id: delete-outside-tmp
      tool: "files__delete_*"
      when: '!args.path.startsWith("/srv/scratch/tmp/")'
      verdict: ask
      approvers: ["U024BE7LH", "S0614TZR7"]
      four_eyes: true
      reason: Deleting outside tmp needs review
`)
	p, err := approvals.ParseConfig(config)
	if err != nil {
		log.Fatal(err)
	}
	for _, in := range []approvals.Input{
		{Tool: "files__read_file", Args: json.RawMessage(`{"path": "/srv/scratch/a"}`)},
		{Tool: "files__delete_file", Args: json.RawMessage(`{"path": "/srv/scratch/a"}`)},
		{Tool: "files__delete_file", Args: json.RawMessage(`{"name": "a"}`)},
		{Tool: "files__delete_file", Args: json.RawMessage(`{"path": "/srv/scratch/tmp/a"}`)},
	} {
		v := p.Evaluate(in)
		fmt.Printf("%s %s: %s by %s\n", in.Tool, in.Args, v.Action, v.RuleID)
	}
	// Output:
	// files__read_file {"path": "/srv/scratch/a"}: allow by rule-1
	// files__delete_file {"path": "/srv/scratch/a"}: ask by delete-outside-tmp
	// files__delete_file {"name": "a"}: ask by delete-outside-tmp
	// files__delete_file {"path": "/srv/scratch/tmp/a"}: ask by annotations
}

func ExampleParseConfig_error() {
	_, err := approvals.ParseConfig([]byte(`
policy:
  rules:
    - tool: "files__*"
      verdict: sometimes
`))
	fmt.Println(err)
	// Output:
	// policy rule 1 (line 4, id rule-1): verdict (line 5): unknown verdict "sometimes": want allow, ask or deny
}

func ExampleFingerprint() {
	a, fpA, _ := approvals.Fingerprint(json.RawMessage(`{"path": "/tmp/x", "force": true}`))
	b, fpB, _ := approvals.Fingerprint(json.RawMessage(`{"force":true,"path":"\u002ftmp/x"}`))
	fmt.Println(string(a))
	fmt.Println(string(b))
	fmt.Println(fpA == fpB)
	// Output:
	// {"force":true,"path":"/tmp/x"}
	// {"force":true,"path":"/tmp/x"}
	// true
}

// staticGroups resolves Slack user groups from a map.
type staticGroups map[string][]string

func (g staticGroups) Members(_ context.Context, id string) ([]string, error) {
	return g[id], nil
}

func ExampleAuthorize() {
	ctx := context.Background()
	call := approvals.Approvable{
		Approvers: []string{"U024BE7LH", "S0614TZR7"},
		FourEyes:  true,
		Requester: "U024BE7LH",
	}
	groups := staticGroups{"S0614TZR7": {"U0G9QF9C6"}}
	for _, decider := range []string{"U0G9QF9C6", "U024BE7LH", "U061F7AUR"} {
		err := approvals.Authorize(ctx, call, decider, groups)
		fmt.Printf("%s: %v (not approver: %v)\n", decider, err, errors.Is(err, approvals.ErrNotApprover))
	}
	// Output:
	// U0G9QF9C6: <nil> (not approver: false)
	// U024BE7LH: U024BE7LH asked for this call and it needs a second person: you are not an approver for this (not approver: true)
	// U061F7AUR: U061F7AUR is not among the approvers U024BE7LH, S0614TZR7: you are not an approver for this (not approver: true)
}

func ExampleParseRule() {
	r, err := approvals.ParseRule(`tool=files__delete_* verdict=ask when='args.path.startsWith("/tmp")' approvers=U1,S2 four_eyes=true ttl=2h reason="Deleting needs review"`)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Tool, r.Verdict, r.When, r.Approvers, r.FourEyes, r.TTL)
	fmt.Println(r)
	// Output:
	// files__delete_* ask args.path.startsWith("/tmp") [U1 S2] true 2h0m0s
	// tool=files__delete_* verdict=ask when='args.path.startsWith("/tmp")' approvers=U1,S2 four_eyes=true ttl=2h reason='Deleting needs review'
}

// records is a minimal in-memory approvals.RecordStore.
type records struct {
	mu sync.Mutex
	m  map[string]store.Record
}

func (r *records) PutRecord(_ context.Context, rec store.Record, expect int64) (store.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.m[rec.Kind+"/"+rec.ID]
	if expect >= 0 && old.Version != expect {
		return store.Record{}, store.ErrConflict
	}
	rec.Version = old.Version + 1
	r.m[rec.Kind+"/"+rec.ID] = rec
	return rec, nil
}

func (r *records) Records(_ context.Context, kind string) ([]store.Record, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []store.Record
	for _, rec := range r.m {
		if rec.Kind == kind {
			out = append(out, rec)
		}
	}
	return out, nil
}

func (r *records) DeleteRecord(_ context.Context, kind, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[kind+"/"+id]; !ok {
		return store.ErrNotFound
	}
	delete(r.m, kind+"/"+id)
	return nil
}

func ExampleEngine() {
	ctx := context.Background()
	p, err := approvals.ParseConfig([]byte(`
policy:
  rules:
    - {id: delete, tool: "files__delete", verdict: ask}
`))
	if err != nil {
		log.Fatal(err)
	}
	e := approvals.NewEngine(p, &records{m: map[string]store.Record{}})
	in := approvals.Input{Tool: "files__delete", Args: json.RawMessage(`{"path": "/tmp/a"}`), User: "U1", Channel: "C1"}
	show := func() {
		v, err := e.Evaluate(ctx, in)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(v.Action, v.RuleID)
	}
	show()

	// An approver chose "Always allow here" for calls under /tmp.
	if _, err := e.Remember(ctx, "U2", approvals.StandingRule{
		ID: "tmp-deletes", Tool: "files__delete", Channel: "C1", When: `args.path.startsWith("/tmp/")`,
	}); err != nil {
		log.Fatal(err)
	}
	show()

	// An admin freezes deletes: deny wins over the standing rule.
	freeze, err := approvals.ParseRule(`id=freeze tool=files__* verdict=deny reason="change freeze"`)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := e.AddRule(ctx, "U3", freeze); err != nil {
		log.Fatal(err)
	}
	show()
	// Output:
	// ask delete
	// allow standing:tmp-deletes
	// deny freeze
}
