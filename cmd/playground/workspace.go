package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// The fake workspace: three people and one channel the bot is in.
const (
	userYou    = "U0YOU00001"
	userAlice  = "U0ALICE001"
	userBob    = "U0BOB00001"
	channelOps = "C0OPS00001"
)

// person is a member of the fake workspace the REPL can act as.
type person struct {
	id, name, role string
}

var people = []person{
	{userYou, "you", "asks the bot to do things"},
	{userAlice, "alice", "on-call; approves restarts"},
	{userBob, "bob", "a teammate"},
}

// personByName finds a person by handle, with or without a leading @.
func personByName(name string) (person, bool) {
	if len(name) > 0 && name[0] == '@' {
		name = name[1:]
	}
	for _, p := range people {
		if p.name == name {
			return p, true
		}
	}
	return person{}, false
}

// nameOf returns the handle of a user id, or the id itself.
func nameOf(id string) string {
	if id == fakeslack.DefaultBotUserID {
		return "toolgate"
	}
	for _, p := range people {
		if p.id == id {
			return p.name
		}
	}
	return id
}

// policyYAML is the playground's policy, in the format of the bot's config
// file. /policy prints it.
const policyYAML = `policy:
  default: ask
  rules:
    - id: reads
      tool: "get_*"
      verdict: allow
    - id: no-drops
      tool: "drop_*"
      verdict: deny
      reason: Dropping databases from chat is never allowed. Ask a DBA.
    - id: restarts
      tool: restart_service
      verdict: ask
      approvers: [U0ALICE001]
      four_eyes: true
      reason: Restarts need a second person
    - id: big-scale
      tool: scale_service
      when: 'args.replicas > 5'
      verdict: ask
      reason: Scaling above 5 replicas costs money
    - id: small-scale
      tool: scale_service
      verdict: allow
`

// services are the services the demo tools know.
var services = map[string]string{
	"api":     "healthy, 3 pods",
	"web":     "healthy, 2 pods",
	"worker":  "degraded, 1 of 2 pods ready",
	"billing": "healthy, 1 pod",
}

// Argument schemas of the demo tools.
var (
	serviceSchema = json.RawMessage(`{"type":"object","properties":{"service":{"type":"string","description":"service name, e.g. api"}},"required":["service"],"additionalProperties":false}`)
	scaleSchema   = json.RawMessage(`{"type":"object","properties":{"service":{"type":"string","description":"service name, e.g. api"},"replicas":{"type":"integer","minimum":1,"maximum":20}},"required":["service","replicas"],"additionalProperties":false}`)
	dropSchema    = json.RawMessage(`{"type":"object","properties":{"name":{"type":"string","description":"database name"}},"required":["name"],"additionalProperties":false}`)
	askSchema     = json.RawMessage(`{"type":"object","properties":{"question":{"type":"string"}},"required":["question"],"additionalProperties":false}`)
)

// demoTools are the tools the bot offers. They only pretend: nothing on
// this machine is touched.
func demoTools() []agent.Tool {
	type svcArgs struct {
		Service  string `json:"service"`
		Replicas int    `json:"replicas"`
	}
	parse := func(raw json.RawMessage) (svcArgs, error) {
		var a svcArgs
		err := json.Unmarshal(raw, &a)
		return a, err
	}
	return []agent.Tool{
		{
			Name:        "get_status",
			Description: "Show the health of a service.",
			Schema:      serviceSchema,
			Annotations: approvals.Hints{ReadOnly: true},
			Handler: func(_ context.Context, raw json.RawMessage) (agent.Result, error) {
				a, err := parse(raw)
				if err != nil {
					return agent.Result{}, err
				}
				status, ok := services[a.Service]
				if !ok {
					return agent.Result{Content: "no service named " + a.Service, IsError: true}, nil
				}
				return agent.Result{Content: a.Service + ": " + status}, nil
			},
		},
		{
			Name:        "restart_service",
			Description: "Restart all pods of a service.",
			Schema:      serviceSchema,
			Handler: func(_ context.Context, raw json.RawMessage) (agent.Result, error) {
				a, err := parse(raw)
				if err != nil {
					return agent.Result{}, err
				}
				return agent.Result{Content: "restarted " + a.Service}, nil
			},
		},
		{
			Name:        "scale_service",
			Description: "Set the number of replicas of a service.",
			Schema:      scaleSchema,
			Handler: func(_ context.Context, raw json.RawMessage) (agent.Result, error) {
				a, err := parse(raw)
				if err != nil {
					return agent.Result{}, err
				}
				return agent.Result{Content: fmt.Sprintf("scaled %s to %d replicas", a.Service, a.Replicas)}, nil
			},
		},
		{
			Name:        "drop_database",
			Description: "Drop a database.",
			Schema:      dropSchema,
			Handler: func(_ context.Context, raw json.RawMessage) (agent.Result, error) {
				// The policy denies every call; this only runs if someone
				// adds a rule that allows it.
				var a struct{ Name string }
				_ = json.Unmarshal(raw, &a)
				return agent.Result{Content: "pretended to drop database " + a.Name + " (nothing was touched)"}, nil
			},
		},
		{
			Name:        "ask_human",
			Description: "Ask the people in the thread a question and wait for their answer.",
			Schema:      askSchema,
			Human:       true,
		},
	}
}
