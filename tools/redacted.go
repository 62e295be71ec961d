package tools

import (
	"context"
	"encoding/json"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/redact"
)

// redactedTool returns t with the configuration's secrets (see
// Config.Secrets) replaced by r in its results, its errors and its
// previews, cut short ones included (see redact.Redactor.Output): a server
// or a program may quote what it was given (an "invalid key" error quoting
// the header, a program printing its environment), and the model, the
// conversation's history and the card would carry it on.
func redactedTool(r redact.Redactor, t agent.Tool) agent.Tool {
	if h := t.Handler; h != nil {
		t.Handler = func(ctx context.Context, args json.RawMessage) (agent.Result, error) {
			res, err := h(ctx, args)
			res.Content = r.Output(res.Content)
			return res, r.Error(err)
		}
	}
	if p := t.Preview; p != nil {
		t.Preview = func(ctx context.Context, args json.RawMessage) (string, error) {
			text, err := p(ctx, args)
			return r.Output(text), r.Error(err)
		}
	}
	return t
}
