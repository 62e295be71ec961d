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
