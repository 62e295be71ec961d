package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// defaultAzureAPIVersion is the Azure OpenAI API version used when
// OPENAI_BASE_URL is an Azure endpoint and OPENAI_API_VERSION is not set.
const defaultAzureAPIVersion = "2024-10-21"

// minRunRetention is the least RUN_RETENTION taken.
const minRunRetention = time.Hour

// validateOps checks the timing and sizing settings.
func (c *config) validateOps() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"MODEL_TIMEOUT", c.ModelTimeout},
		{"TOOL_TIMEOUT", c.ToolTimeout},
		{"SHUTDOWN_GRACE", c.ShutdownGrace},
		{"RUN_RETENTION", c.RunRetention},
	} {
		if d.v <= 0 {
			return fmt.Errorf("%s: %s is not positive", d.name, d.v)
		}
	}
	switch {
	case c.RunRetention < minRunRetention:
		// A run approved at its deadline is resumed after it: its
		// resume (the model, the tools) must not outlast the run.
		return fmt.Errorf("RUN_RETENTION: %s is under %s: a run approved just before its deadline could be deleted while its resume runs", c.RunRetention, minRunRetention)
	case c.ModelRetries < 0:
		return fmt.Errorf("MODEL_RETRIES: %d is negative", c.ModelRetries)
	case c.ModelMaxTokens < 0:
		return fmt.Errorf("MODEL_MAX_TOKENS: %d is negative", c.ModelMaxTokens)
	case c.ModelMaxTools < 0:
		return fmt.Errorf("MODEL_MAX_TOOLS: %d is negative; 0 means no limit", c.ModelMaxTools)
	case c.ContextBudget < 1000:
		return fmt.Errorf("CONTEXT_BUDGET: %d is below 1000 tokens", c.ContextBudget)
	case c.azureAPIVersion() != "" && c.OpenAIAPIKey == "":
		return errors.New("OPENAI_API_KEY is required for Azure OpenAI")
	}
	return nil
}

// azureAPIVersion is the Azure OpenAI API version to use, or "" when the
// model endpoint is not Azure: OPENAI_API_VERSION when set, else the
// default version when OPENAI_BASE_URL's host is *.openai.azure.com.
func (c *config) azureAPIVersion() string {
	if c.OpenAIAPIVersion != "" {
		return c.OpenAIAPIVersion
	}
	if u, err := url.Parse(c.OpenAIBaseURL); err == nil && strings.HasSuffix(strings.ToLower(u.Hostname()), ".openai.azure.com") {
		return defaultAzureAPIVersion
	}
	return ""
}

// logRetry returns the model's OnRetry hook: a warning per retry.
func logRetry(log *slog.Logger) func(context.Context, int, time.Duration, *agent.ModelError) {
	return func(ctx context.Context, retry int, wait time.Duration, err *agent.ModelError) {
		log.WarnContext(ctx, "model request failed, retrying", "retry", retry, "wait", wait.String(), "err", err)
	}
}
