package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolgate/toolgate/agent"
)

// With an Azure API version, requests go to the deployment's path with the
// api-version query and the key in the api-key header.
func TestModelAzure(t *testing.T) {
	type seen struct{ path, version, key, auth string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.Query().Get("api-version"), r.Header.Get("api-key"), r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: srv.URL, APIKey: "azure-key", Model: "my-gpt4o", AzureAPIVersion: "2024-10-21"})
	msg, err := m.Complete(context.Background(), userMessage("hello"), nil)
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if msg.Content != "hi" {
		t.Errorf("content %q, want hi", msg.Content)
	}
	want := seen{path: "/openai/deployments/my-gpt4o/chat/completions", version: "2024-10-21", key: "azure-key"}
	if s := <-got; s != want {
		t.Errorf("request %+v, want %+v", s, want)
	}
}

// Without an Azure API version, requests go to BaseURL's chat completions
// with the key as a bearer token, asking for an event stream.
func TestModelRequestHeaders(t *testing.T) {
	type seen struct{ method, path, auth, key, accept, ctype string }
	got := make(chan seen, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Method, r.URL.String(), r.Header.Get("Authorization"), r.Header.Get("api-key"), r.Header.Get("Accept"), r.Header.Get("Content-Type")}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	for _, tt := range []struct {
		key, base string
		want      seen
	}{
		{"sk-1", srv.URL + "/v1/", seen{"POST", "/v1/chat/completions", "Bearer sk-1", "", "text/event-stream", "application/json"}},
		{"", srv.URL + "/api/v1", seen{"POST", "/api/v1/chat/completions", "", "", "text/event-stream", "application/json"}},
	} {
		m := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: tt.base, APIKey: tt.key, Model: "m"})
		if _, err := m.Complete(context.Background(), userMessage("hello"), nil); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if s := <-got; s != tt.want {
			t.Errorf("request %+v, want %+v", s, tt.want)
		}
	}
}
