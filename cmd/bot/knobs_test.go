package main

import (
	"strings"
	"testing"
	"time"
)

func TestOpsSettings(t *testing.T) {
	setEnv(t, validEnv(t))
	c, err := loadConfig()
	if err != nil {
		t.Fatalf("loadConfig: %v", err)
	}
	type knobs struct {
		modelTimeout, toolTimeout, grace, retention time.Duration
		retries, maxTokens, maxTools, budget        int
		apiVersion                                  string
	}
	want := knobs{modelTimeout: 2 * time.Minute, toolTimeout: 2 * time.Minute, grace: 30 * time.Second, retention: 7 * 24 * time.Hour,
		retries: 3, maxTools: 128, budget: 64000}
	got := knobs{c.ModelTimeout, c.ToolTimeout, c.ShutdownGrace, c.RunRetention, c.ModelRetries, c.ModelMaxTokens, c.ModelMaxTools, c.ContextBudget, c.OpenAIAPIVersion}
	if got != want {
		t.Errorf("defaults %+v, want %+v", got, want)
	}

	errs := []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"MODEL_TIMEOUT": "0s"}, "MODEL_TIMEOUT: 0s is not positive"},
		{map[string]string{"TOOL_TIMEOUT": "-1m"}, "TOOL_TIMEOUT: -1m0s is not positive"},
		{map[string]string{"SHUTDOWN_GRACE": "soon"}, `SHUTDOWN_GRACE: "soon" is not a duration`},
		{map[string]string{"RUN_RETENTION": "0"}, "RUN_RETENTION: 0s is not positive"},
		{map[string]string{"RUN_RETENTION": "10m"}, "RUN_RETENTION: 10m0s is under 1h0m0s"},
		{map[string]string{"AUDIT_MAX_ENTRIES": "0"}, "AUDIT_MAX_ENTRIES: 0 is not positive"},
		{map[string]string{"MODEL_RETRIES": "-1"}, "MODEL_RETRIES: -1 is negative"},
		{map[string]string{"MODEL_MAX_TOKENS": "-5"}, "MODEL_MAX_TOKENS: -5 is negative"},
		{map[string]string{"MODEL_MAX_TOOLS": "-1"}, "MODEL_MAX_TOOLS: -1 is negative; 0 means no limit"},
		{map[string]string{"MODEL_MAX_TOOLS": "many"}, `MODEL_MAX_TOOLS: "many" is not a whole number`},
		{map[string]string{"CONTEXT_BUDGET": "10"}, "CONTEXT_BUDGET: 10 is below 1000 tokens"},
		{map[string]string{"OPENAI_API_KEY": "", "OPENAI_BASE_URL": "https://acme.openai.azure.com"}, "OPENAI_API_KEY is required for Azure OpenAI"},
	}
	for _, tt := range errs {
		t.Run(tt.want, func(t *testing.T) {
			env := validEnv(t)
			for k, v := range tt.set {
				env[k] = v
			}
			setEnv(t, env)
			_, err := loadConfig()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("loadConfig with %v: error %v, want %q", tt.set, err, tt.want)
			}
			if code := exitCode(err); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
		})
	}
}

func TestAzureAPIVersion(t *testing.T) {
	tests := []struct {
		url, version, want string
	}{
		{"https://api.openai.com/v1", "", ""},
		{"http://localhost:11434/v1", "", ""},
		{"https://acme.openai.azure.com", "", defaultAzureAPIVersion},
		{"https://ACME.OpenAI.Azure.com/", "", defaultAzureAPIVersion},
		{"https://acme.openai.azure.com", "2025-01-01-preview", "2025-01-01-preview"},
		{"https://gateway.example.com/azure", "2024-06-01", "2024-06-01"},
		{"https://openai.azure.com.evil.example", "", ""},
	}
	for _, tt := range tests {
		c := config{OpenAIBaseURL: tt.url, OpenAIAPIVersion: tt.version}
		if got := c.azureAPIVersion(); got != tt.want {
			t.Errorf("azureAPIVersion(%q, %q) = %q, want %q", tt.url, tt.version, got, tt.want)
		}
	}
}

func TestHelpListsOpsSettings(t *testing.T) {
	setEnv(t, nil)
	var stdout, stderr strings.Builder
	if err := run(t.Context(), []string{"--help"}, &stdout, &stderr); err != nil {
		t.Fatalf("run --help: %v", err)
	}
	for _, line := range [][]string{
		{"OPENAI_API_VERSION", "-", "Azure"},
		{"MODEL_TIMEOUT", "2m"},
		{"MODEL_RETRIES", "3"},
		{"MODEL_MAX_TOKENS", "0"},
		{"MODEL_MAX_TOOLS", "128", "OpenAI's limit"},
		{"CONTEXT_BUDGET", "64000"},
		{"TOOL_TIMEOUT", "2m"},
		{"SHUTDOWN_GRACE", "30s"},
		{"RUN_RETENTION", "168h"},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "-", "no tracing"},
		{"OTEL_CAPTURE_CONTENT", "false"},
	} {
		found := false
		for l := range strings.Lines(stdout.String()) {
			if f := strings.Fields(l); len(f) > 2 && f[0] == line[0] && f[1] == line[1] && (len(line) < 3 || strings.Contains(l, line[2])) {
				found = true
			}
		}
		if !found {
			t.Errorf("--help has no line %q:\n%s", line, stdout.String())
		}
	}
}
