package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// release is one release of an MCP server over HTTP: in v1 the tool op is
// read-only; in v2 it is not, and the server has one more tool.
func release(v2, stateless bool) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "rel", Version: "v"}, nil)
	answer := "ran v1"
	if v2 {
		answer = "ran v2"
	}
	ran := func(text string) mcp.ToolHandlerFor[idIn, any] {
		return func(context.Context, *mcp.CallToolRequest, idIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "op", Description: "op", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: !v2}}, ran(answer))
	if v2 {
		mcp.AddTool(srv, &mcp.Tool{Name: "extra", Description: "extra"}, ran("extra"))
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: stateless})
}

// A server that keeps no session (stateless HTTP) redeployed as a new
// version tells of no restart and sends no list_changed: its tools are
// listed again at each ping, so the new version's tools and annotations
// (op no longer read-only) are the ones the policy reads. A stateful
// server's restart ends the session, and its tools are listed on
// reconnecting.
func TestRedeployedHTTPServerIsListedAgain(t *testing.T) {
	for _, stateless := range []bool{false, true} {
		t.Run(map[bool]string{false: "stateful", true: "stateless"}[stateless], func(t *testing.T) {
			var cur atomic.Value
			cur.Store(release(false, stateless))
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				cur.Load().(http.Handler).ServeHTTP(w, r)
			}))
			defer ts.Close()
			reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
			if op, _ := reg.Lookup("srv__op"); !op.Annotations.ReadOnly {
				t.Fatal("v1's op is not read-only")
			}
			cur.Store(release(true, stateless))
			ts.CloseClientConnections()
			waitFor(t, "v2's tools are registered", func() bool {
				op, _ := reg.Lookup("srv__op")
				_, extra := reg.Lookup("srv__extra")
				return !op.Annotations.ReadOnly && extra
			})
		})
	}
}

// A stateless server's listing that has not changed registers nothing
// again: the registry is not replaced (nor its tools' schemas compiled
// again) at every ping.
func TestUnchangedListingRegistersNothing(t *testing.T) {
	var lists atomic.Int64
	h := release(false, true)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Method string `json:"method"`
		}
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(b))
			if json.Unmarshal(b, &body) == nil && body.Method == "tools/list" {
				lists.Add(1)
			}
		}
		h.ServeHTTP(w, r)
	}))
	defer ts.Close()
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
	var changes atomic.Int64
	reg.OnChange(func() { changes.Add(1) })
	from := lists.Load()
	waitFor(t, "three more listings", func() bool { return lists.Load() >= from+3 })
	if n := changes.Load(); n != 0 {
		t.Errorf("the registry changed %d times over listings that were all the same, want 0", n)
	}
}

// A tool whose schema holds a pattern Go's regexp cannot compile (an
// ECMA-262 lookahead, as Zod writes for an email) is registered, its
// pattern left to the server: the whole tool was left out.
func TestToolWithAnECMAPatternIsKept(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "users", Version: "v1"}, nil)
	schema := json.RawMessage(`{"type":"object","properties":{"email":{"type":"string","pattern":"^(?!\\.)(?!.*\\.\\.)([A-Za-z0-9_'+\\-\\.]*)[A-Za-z0-9_+-]@([A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},"team":{"type":"string","pattern":"^[a-z]+$"}},"required":["email"]}`)
	srv.AddTool(&mcp.Tool{Name: "invite_user", Description: "Invite a user.", InputSchema: schema},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "invited"}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: users\n    url: "+ts.URL+"\n", testOptions())
	if _, ok := reg.Lookup("users__invite_user"); !ok {
		t.Fatal("users__invite_user is not registered: its schema's pattern uses a lookahead")
	}
	if res := call(t, reg, "users__invite_user", `{"email":"a@example.com"}`); res.Content != "invited" {
		t.Errorf("invite_user = %+v, want invited", res)
	}
	// The patterns Go's regexp compiles are still checked.
	if err := reg.Validate("users__invite_user", json.RawMessage(`{"email":"a@example.com","team":"Ops 1"}`)); err == nil {
		t.Error("a team that does not match ^[a-z]+$ was accepted")
	}
}

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

type nsIn struct {
	NS string `json:"ns,omitempty"`
}

// nsRelease is a release of an MCP server over HTTP whose tool deploy has
// no default for ns (v1), or defaults it to "production" (v2: the SDK's
// server fills it in before the handler runs).
func nsRelease(v2 bool) http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "rel", Version: "v"}, nil)
	prop := &jsonschema.Schema{Type: "string"}
	if v2 {
		prop.Default = json.RawMessage(`"production"`)
	}
	schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ns": prop}}
	mcp.AddTool(srv, &mcp.Tool{Name: "deploy", Description: "deploy", InputSchema: schema},
		func(_ context.Context, _ *mcp.CallToolRequest, in nsIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed to ns=" + in.NS}}}, nil, nil
		})
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
}

// A call checked against a tool as one listing gave it (the agent checks
// approved arguments against the registration it looks up, then runs its
// handler) is not sent once the server listed the tool otherwise: after a
// redeploy whose schema fills in a default, the handler of the earlier
// registration refuses, and the new one runs.
func TestHandlerOfAnEarlierListingDoesNotCall(t *testing.T) {
	var cur atomic.Value
	cur.Store(nsRelease(false))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur.Load().(http.Handler).ServeHTTP(w, r)
	}))
	defer ts.Close()
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
	approved := json.RawMessage(`{}`)
	old, ok := reg.Lookup("srv__deploy")
	if !ok {
		t.Fatal("no srv__deploy")
	}
	if res, err := old.Handler(t.Context(), approved); err != nil || res.IsError || res.Content != "deployed to ns=" {
		t.Fatalf("v1's deploy = %+v, %v; want it run with no ns", res, err)
	}
	cur.Store(nsRelease(true))
	ts.CloseClientConnections()
	waitFor(t, "v2 registered", func() bool {
		f, err := reg.Filled("srv__deploy", approved)
		return err == nil && strings.Contains(string(f), "production")
	})
	res, err := old.Handler(t.Context(), approved)
	if err != nil || !res.IsError || !res.NotSent() || !strings.HasPrefix(res.Content, "not performed") {
		t.Errorf("the handler of v1's registration, after v2 was listed = %+v, %v; want it refused, nothing sent", res, err)
	}
	now, _ := reg.Lookup("srv__deploy")
	if res, err := now.Handler(t.Context(), approved); err != nil || res.Content != "deployed to ns=production" {
		t.Errorf("v2's deploy = %+v, %v; want it run with its default", res, err)
	}
}

// A stateless HTTP server redeployed while a call with effects waited
// for its approval (no session ended, no list_changed sent, the next ping
// far) does not run it with a default its new schema fills in and no card
// showed: the call lists the tools first, and is not sent.
func TestStatelessServerRedeployedBeforeACallIsListedFirst(t *testing.T) {
	stateless := func(v2 bool) http.Handler {
		srv := mcp.NewServer(&mcp.Implementation{Name: "rel", Version: "v"}, nil)
		prop := &jsonschema.Schema{Type: "string"}
		if v2 {
			prop.Default = json.RawMessage(`"production"`)
		}
		schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ns": prop}}
		mcp.AddTool(srv, &mcp.Tool{Name: "deploy", Description: "deploy", InputSchema: schema},
			func(_ context.Context, _ *mcp.CallToolRequest, in nsIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed to ns=" + in.NS}}}, nil, nil
			})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	}
	var cur atomic.Value
	cur.Store(stateless(false))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cur.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after the manager is closed
	opts := testOptions()
	opts.pingInterval = time.Hour // the redeploy falls between two pings
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", opts)
	approved := json.RawMessage(`{}`) // what the card showed, as Filled returned it under v1
	cur.Store(stateless(true))        // redeployed while the call waited for approval
	ts.CloseClientConnections()
	// The agent's resume: look the tool up, check the approved arguments
	// against it (changedArgs: Filled must return them unchanged), run it.
	filled, err := reg.Filled("srv__deploy", approved)
	if err != nil || string(filled) != string(approved) {
		t.Fatalf("the tool changed before the call: %s, %v", filled, err)
	}
	tool, _ := reg.Lookup("srv__deploy")
	res, err := tool.Handler(t.Context(), approved)
	if err == nil && res.Content == "deployed to ns=production" {
		t.Errorf("the call approved as %s ran on the redeployed server as %q: a default no card showed", approved, res.Content)
	}
}

// A server says its tools changed (tools/list_changed: op is destructive
// now) but its listing fails (-32603, busy). Until a listing is made, the
// registry keeps op as read-only, which the policy allows unasked, and its
// handler still sends calls: the destructive op runs without approval.
// The handlers of a listing the server has said is out of date should
// not call (not sent, try again) until the server is listed again.

// After a server says its tools changed (list_changed) and listing them
// fails, the tools as listed before are not called: one that became
// destructive would run unasked as read-only until a listing is made.
func TestToolsOfAListingChangedSinceAreNotCalled(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "p", Version: "v1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "op", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return text("read " + in.ID), nil, nil
		})
	var failedLists atomic.Int64
	var failLists atomic.Bool
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if method, id := jsonRPCMethod(t, r); method == "tools/list" && failLists.Load() {
				failedLists.Add(1)
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"busy, try again"}}`, id)
				return
			}
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close) // after the manager is closed
	opts := testOptions()
	opts.pingInterval = time.Hour
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", opts)
	failLists.Store(true)
	mcp.AddTool(srv, &mcp.Tool{Name: "op", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}},
		func(_ context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return text("DELETED " + in.ID), nil, nil
		})
	waitFor(t, "the listing after list_changed (failed)", func() bool { return failedLists.Load() > 0 })
	op, _ := reg.Lookup("srv__op")
	if !op.Annotations.ReadOnly {
		t.Fatal("op was listed again: nothing tested")
	}
	// The policy allows op unasked (read-only); the agent runs it.
	res, err := op.Handler(t.Context(), json.RawMessage(`{"id":"1"}`))
	if err == nil && res.Content == "DELETED 1" {
		t.Errorf("after the server said its tools changed (op now destructive) and the listing failed, op still ran unasked as read-only: %q", res.Content)
	}
}

// An approved call of an idempotent but destructive tool (scale: sets the
// replicas; idempotentHint, destructiveHint) reaches the server, which
// runs it, and its answer is lost (the connection is cut: a proxy or LB
// restarting). The result must not say that the call was not sent: the card shows NotSent results as "not
// sent: it did nothing" and the audit records "not_sent", for a call that
// changed production.

// A stateless server (new protocol) that gives its tools/list a cache TTL
// (SEP-2549 ttlMs), redeployed between a call's check and its run: the
// relist before the call must ask the server, not the SDK's cache.
func TestCachedListingOfARedeployedServerIsNotRead(t *testing.T) {
	stateless := func(v2 bool) http.Handler {
		srv := mcp.NewServer(&mcp.Implementation{Name: "rel", Version: "v"}, &mcp.ServerOptions{
			SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs = int(time.Hour / time.Millisecond) },
		})
		prop := &jsonschema.Schema{Type: "string"}
		if v2 {
			prop.Default = json.RawMessage(`"production"`)
		}
		schema := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{"ns": prop}}
		mcp.AddTool(srv, &mcp.Tool{Name: "deploy", Description: "deploy", InputSchema: schema},
			func(_ context.Context, _ *mcp.CallToolRequest, in nsIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed to ns=" + in.NS}}}, nil, nil
			})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	}
	var cur atomic.Value
	cur.Store(stateless(false))
	var lists atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if m, _ := jsonRPCMethod(t, r); m == "tools/list" {
				lists.Add(1)
			}
		}
		cur.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	opts := testOptions()
	opts.pingInterval = time.Hour
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", opts)
	approved := json.RawMessage(`{}`)
	cur.Store(stateless(true)) // redeployed while the call waited for approval
	before := lists.Load()
	tool, _ := reg.Lookup("srv__deploy")
	res, err := tool.Handler(t.Context(), approved)
	t.Logf("tools/list requests during the call: %d; result %+v, %v", lists.Load()-before, res, err)
	if err == nil && res.Content == "deployed to ns=production" {
		t.Errorf("the call approved as %s ran on the redeployed server as %q: a default no card showed", approved, res.Content)
	}
}

// A server redeployed so that op, read-only in v1, is destructive in v2:
// the listings made at each ping must see v2 (README: "listed again at
// each ping, every 30 s, so a new version's tools and annotations are the
// ones the policy reads"), whatever ttlMs the old release gave its list.
func TestNewAnnotationsAreListedWhateverTheListingsTTL(t *testing.T) {
	rel := func(v2 bool) http.Handler {
		srv := mcp.NewServer(&mcp.Implementation{Name: "rel", Version: "v"}, &mcp.ServerOptions{
			SetCacheable: func(_ context.Context, _ mcp.Request, c *mcp.Cacheable) { c.TTLMs = int(time.Hour / time.Millisecond) },
		})
		mcp.AddTool(srv, &mcp.Tool{Name: "op", Description: "op", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: !v2}},
			func(context.Context, *mcp.CallToolRequest, idIn) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ran"}}}, nil, nil
			})
		return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{Stateless: true})
	}
	var cur atomic.Value
	cur.Store(rel(false))
	var pings, lists atomic.Int64
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			switch m, _ := jsonRPCMethod(t, r); m {
			case "ping":
				pings.Add(1)
			case "tools/list":
				lists.Add(1)
			}
		}
		cur.Load().(http.Handler).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	reg, _ := loadYAML(t, "mcp_servers:\n  - name: srv\n    url: "+ts.URL+"\n", testOptions())
	if op, _ := reg.Lookup("srv__op"); !op.Annotations.ReadOnly {
		t.Fatal("v1's op is not read-only")
	}
	cur.Store(rel(true))
	ts.CloseClientConnections()
	from := pings.Load()
	waitFor(t, "five pings after the redeploy", func() bool { return pings.Load() >= from+5 })
	if op, _ := reg.Lookup("srv__op"); op.Annotations.ReadOnly {
		t.Errorf("five pings after the redeploy op is still read-only (tools/list requests sent: %d): the policy allows v2's destructive op unasked", lists.Load())
	}
}
