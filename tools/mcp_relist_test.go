package tools

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A tools/list_changed whose listing the server answers with a JSON-RPC
// error (a busy server, a rolling update: -32603) is listed again at the
// next ping: here the tool op stops being read-only, and the policy, which
// reads its annotations, must not keep allowing it unasked.
func TestFailedListingAfterListChangedIsMadeAgain(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "p", Version: "v1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "op", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return text("op " + in.ID), nil, nil
		})
	var lists, pings atomic.Int64
	var failNext atomic.Bool
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			method, id := jsonRPCMethod(t, r)
			switch method {
			case "ping":
				pings.Add(1)
			case "tools/list":
				lists.Add(1)
				if failNext.CompareAndSwap(true, false) {
					w.Header().Set("Content-Type", "application/json")
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"busy, try again"}}`, id)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	reg, m := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
	if op, _ := reg.Lookup("srv__op"); !op.Annotations.ReadOnly {
		t.Fatal("op is not read-only at first")
	}
	failNext.Store(true)
	before := lists.Load()
	// A new version of op: not read-only any more.
	mcp.AddTool(srv, &mcp.Tool{Name: "op", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return text("op " + in.ID), nil, nil
		})
	waitFor(t, "the listing after list_changed (answered with an error)", func() bool { return lists.Load() > before && !failNext.Load() })
	p := pings.Load()
	waitFor(t, "ten more pings", func() bool { return pings.Load() >= p+10 })
	if st := m.Status()[0]; !st.Connected {
		t.Fatalf("status %+v, want the session kept", st)
	}
	if op, _ := reg.Lookup("srv__op"); op.Annotations.ReadOnly {
		t.Errorf("after list_changed and ten pings, srv__op is still registered read-only (listings: %d, one failed), though the server says it is destructive", lists.Load())
	}
}
