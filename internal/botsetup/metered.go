package botsetup

import (
	"context"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/slackapp"
)

// meteredModel is an agent.Model that records the latency and result of
// every request in the bot's metrics.
type meteredModel struct {
	model   agent.Model
	metrics *slackapp.Metrics
}

var _ agent.Model = meteredModel{}

// Complete calls the wrapped model and records how long it took.
func (m meteredModel) Complete(ctx context.Context, req agent.ModelRequest, onDelta func(text string)) (openai.ChatCompletionMessage, error) {
	start := time.Now()
	msg, err := m.model.Complete(ctx, req, onDelta)
	m.metrics.Model(time.Since(start), err)
	return msg, err
}
