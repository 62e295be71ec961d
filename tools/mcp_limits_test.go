package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tool result over SSE larger than the 16 MiB bound on one message from
// an HTTP server fails the call, as one in a JSON answer does, rather than
// being read whole into memory.
func TestSSEAnswerOverTheBoundFailsTheCall(t *testing.T) {
	srv := newTestServer()
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if method, id := jsonRPCMethod(t, r); method == "tools/call" {
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"", id)
				chunk := bytes.Repeat([]byte("a"), 1<<20)
				for range 18 {
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
				io.WriteString(w, "\"}]}}\n\n")
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	defer ts.Close()
	defer ts.CloseClientConnections()
	reg, m := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
	tool, _ := reg.Lookup("srv__delete_item")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := tool.Handler(ctx, json.RawMessage(`{"id":"1"}`))
	if err != nil || !res.IsError || len(res.Content) > 1<<20 {
		t.Errorf("an 18 MiB SSE event, after %s: a result of %d bytes (error %v, %v; status %+v); want the call failed", time.Since(start), len(res.Content), res.IsError, err, m.Status()[0])
	}
}
