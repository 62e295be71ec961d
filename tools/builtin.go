package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// Builtins returns the built-in tools cfg enables, in a stable order:
// ask_human, http_get, http_request, run_command, then the workspace tools.
// It fails if an enabled tool's settings are invalid (for example a
// workspace root that does not exist).
func Builtins(cfg Config) ([]agent.Tool, error) {
	var out []agent.Tool
	b := cfg.Builtins
	if b.AskHuman != nil {
		out = append(out, AskHuman())
	}
	if b.HTTPRequest != nil {
		ts, err := HTTPTools(*b.HTTPRequest)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	if b.RunCommand != nil {
		t, err := RunCommand(*b.RunCommand)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if b.Workspace != nil {
		ts, err := WorkspaceTools(*b.Workspace)
		if err != nil {
			return nil, err
		}
		out = append(out, ts...)
	}
	return out, nil
}

func ptr[T any](v T) *T { return &v }

// timeLimit is how long a call given ctx can run under the tool's own
// timeout d: d, or the time left before ctx's deadline (the bot's bound
// on one tool call) when that is shorter. A call that timed out says it,
// rounded to 10ms, not d.
func timeLimit(ctx context.Context, d time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0).Round(10 * time.Millisecond)
}

// errorResult is a failure the model reads and may recover from.
func errorResult(format string, args ...any) agent.Result {
	return agent.Result{Content: fmt.Sprintf(format, args...), IsError: true}
}

// decodeArgs unmarshals a tool's arguments strictly. The registry has
// already checked them against the schema; this catches a handler called
// directly with arguments that never went through it.
func decodeArgs(args json.RawMessage, v any) error {
	if len(bytes.TrimSpace(args)) == 0 {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid arguments: %w", err)
	}
	return nil
}
