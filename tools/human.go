package tools

import (
	"encoding/json"

	"github.com/toolgate/toolgate/agent"
)

// AskHuman returns the ask_human tool: the model asks a question and a
// person answers it. It has no handler; the agent pauses the call and a
// person's Respond decision becomes its result. Its hints are left unset,
// which policies read as "ask", so that the question reaches a person
// unless a rule says otherwise.
// AskHumanTool is the name of the question tool: a call of it is a
// question for people, which one answer settles (see approvals.Input).
const AskHumanTool = "ask_human"

func AskHuman() agent.Tool {
	return agent.Tool{
		Name:        AskHumanTool,
		Description: "Ask a person a question and wait for their answer. Use it when you need information, a choice or a confirmation only a person can give.",
		Schema:      schemaAskHuman,
		Human:       true,
	}
}

// schemaAskHuman is the argument schema of ask_human.
var schemaAskHuman = json.RawMessage(`{
  "type": "object",
  "properties": {
    "question": {"type": "string", "minLength": 1, "description": "The question, complete enough to answer without other context."}
  },
  "required": ["question"],
  "additionalProperties": false
}`)
