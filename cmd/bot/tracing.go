package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/telemetry"
)

// traceFlushTimeout bounds the export of the last spans at shutdown.
const traceFlushTimeout = 5 * time.Second

// newModel returns the model client and, when tracing is on (tr not nil),
// wraps it in model-call spans and returns the agent's tracer. With tr nil
// the tracer is a nil interface: the agent traces nothing.
func newModel(cfg config, log *slog.Logger, tr *telemetry.Tracer) (agent.Model, agent.Tracer) {
	onRetry := logRetry(log)
	if tr != nil {
		onRetry = func(ctx context.Context, retry int, wait time.Duration, err *agent.ModelError) {
			logRetry(log)(ctx, retry, wait, err)
			telemetry.RecordRetry(ctx, retry, wait, err)
		}
	}
	m := agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL:         cfg.OpenAIBaseURL,
		APIKey:          cfg.OpenAIAPIKey,
		Model:           cfg.OpenAIModel,
		Timeout:         cfg.ModelTimeout,
		MaxTokens:       cfg.ModelMaxTokens,
		AzureAPIVersion: cfg.azureAPIVersion(),
		Retries:         cfg.ModelRetries,
		OnRetry:         onRetry,
		// Token counts are asked for only where something records them.
		StreamUsage: tr != nil,
	})
	if tr == nil {
		return m, nil
	}
	return tr.Model(m, cfg.OpenAIModel), tr
}

// startTracing starts the trace exporter when the OTEL_* variables of the
// process ask for it (see telemetry.Start), or returns nil. Its spans go
// through red, as the logs do: with OTEL_CAPTURE_CONTENT they carry what
// tools printed and the model said, and error texts may quote a URL with
// its password, any of which can hold a token.
func startTracing(ctx context.Context, cfg config, log *slog.Logger, red redactor) (*telemetry.Provider, error) {
	p, err := telemetry.Start(ctx, os.Getenv, "", cfg.OTELCapture, log, telemetry.WithRedaction(red.String))
	if err != nil {
		return nil, fmt.Errorf("start tracing: %w", err)
	}
	return p, nil
}

// flushTraces exports the spans not sent yet; a failure is logged.
func flushTraces(log *slog.Logger, p *telemetry.Provider) {
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		log.Warn("flush traces", "err", err)
	}
}
