package tools

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/agent"
)

// deliveryFixture is an HTTP MCP server whose tools count their runs,
// behind a proxy that hands the first tools/call to answer (with the
// server's handler, which runs the tool if answer serves the request
// through it) and passes every other request on.
type deliveryFixture struct {
	reg *agent.Registry
	m   *Manager
	// runs counts the runs of the destructive drop and the read-only look.
	runs atomic.Int32
	// inits counts the sessions the bot started (initialize requests).
	inits atomic.Int32
	// sessionID is the Mcp-Session-Id of the first tools/call.
	sessionID atomic.Value
}

func newDeliveryFixture(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, server http.Handler)) *deliveryFixture {
	t.Helper()
	f := &deliveryFixture{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "counting", Version: "v1"}, nil)
	run := func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		f.runs.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil, nil
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "drop", Description: "Drop a table.", Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true)}}, run)
	mcp.AddTool(srv, &mcp.Tool{Name: "look", Description: "Look at a table.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, run)
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	var once sync.Once
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			switch method, _ := jsonRPCMethod(t, r); method {
			case "initialize":
				f.inits.Add(1)
			case "tools/call":
				first := false
				once.Do(func() { first = true })
				if first {
					f.sessionID.Store(r.Header.Get("Mcp-Session-Id"))
					answer(w, r, handler)
					return
				}
			}
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(ts.CloseClientConnections)
	opts := testOptions()
	opts.pingInterval = time.Hour // only the calls meet the proxy
	f.reg, f.m = loadYAML(t, fmt.Sprintf("mcp_servers:\n  - name: srv\n    url: %s/mcp\n", ts.URL), opts)
	if st := f.m.Status()[0]; !st.Connected {
		t.Fatalf("status: got %+v, want connected", st)
	}
	return f
}

// runThenAnswer serves r through the server, so that the tool runs, and
// throws its answer away; then it answers status instead, or, with status
// 0, closes the connection without any answer.
func runThenAnswer(status int) func(http.ResponseWriter, *http.Request, http.Handler) {
	return func(w http.ResponseWriter, r *http.Request, server http.Handler) {
		server.ServeHTTP(httptest.NewRecorder(), r)
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	}
}

// A call whose request reached the server, which ran it, but whose answer
// never came back (a proxy's 504, a connection cut once the request was
// written) is of unknown outcome: the model must not be told to try it
// again, although the SDK tags these failures as requests the transport
// rejected. It ran once.
func TestHTTPCallThatRanWithoutAnAnswerIsOfUnknownOutcome(t *testing.T) {
	for _, tt := range []struct {
		name   string
		status int
	}{
		{"gateway timeout", http.StatusGatewayTimeout},
		{"bad gateway", http.StatusBadGateway},
		{"connection cut", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newDeliveryFixture(t, runThenAnswer(tt.status))
			got := call(t, f.reg, "srv__drop", `{}`)
			if n := f.runs.Load(); n != 1 {
				t.Errorf("the tool ran %d times, want once", n)
			}
			if !got.IsError || !strings.Contains(got.Content, "whether the call took effect is unknown. Do not call it again") || strings.Contains(got.Content, "try again later") || !got.OutcomeUnknown() {
				t.Errorf("result = %+v; want its outcome unknown, not an invitation to try again", got)
			}
		})
	}
}

// A read-only call may be tried again whatever became of it: the same
// failures say that the server is unavailable.
func TestHTTPReadOnlyCallWithoutAnAnswerMayBeTriedAgain(t *testing.T) {
	f := newDeliveryFixture(t, runThenAnswer(http.StatusGatewayTimeout))
	got := call(t, f.reg, "srv__look", `{}`)
	if !got.IsError || !strings.Contains(got.Content, "is unavailable") || strings.Contains(got.Content, "unknown") || got.OutcomeUnknown() {
		t.Errorf("result = %+v; want the server unavailable", got)
	}
}

// A 429 or a 503 (or another status the SDK counts as transient) leaves
// the session as it is: the next call goes through on it, without a new
// handshake. Whether the server took the call that met it is not known,
// so a destructive call is of unknown outcome.
func TestHTTPTransientStatusKeepsTheSession(t *testing.T) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			f := newDeliveryFixture(t, func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
				w.WriteHeader(status)
			})
			got := call(t, f.reg, "srv__drop", `{}`)
			if !got.IsError || !strings.Contains(got.Content, "whether the call took effect is unknown") {
				t.Errorf("result = %+v; want its outcome unknown", got)
			}
			if st := f.m.Status()[0]; !st.Connected {
				t.Errorf("status after a %d: got %+v, want still connected", status, st)
			}
			if got := call(t, f.reg, "srv__look", `{}`); got.IsError || got.Content != "done" {
				t.Errorf("the next call: got %+v, want done", got)
			}
			if n := f.inits.Load(); n != 1 {
				t.Errorf("sessions started: %d, want 1 (the session kept)", n)
			}
		})
	}
}

// An HTTP server that restarted answers 404 for the session it no longer
// knows: the call provably did not run, so the model is told the server is
// unavailable, to try again later, and the session is started again. The
// session's id, which would let anyone who reaches the server act in the
// session, is not shown.
func TestHTTPSessionMissingIsNotDelivered(t *testing.T) {
	f := newDeliveryFixture(t, func(w http.ResponseWriter, _ *http.Request, _ http.Handler) {
		http.Error(w, "session not found", http.StatusNotFound)
	})
	got := call(t, f.reg, "srv__drop", `{}`)
	if n := f.runs.Load(); n != 0 {
		t.Errorf("the tool ran %d times, want never", n)
	}
	if !got.IsError || !strings.Contains(got.Content, "is unavailable") || !strings.Contains(got.Content, "try again later") || strings.Contains(got.Content, "unknown") {
		t.Errorf("result = %+v; want the server unavailable, to be tried again", got)
	}
	id, _ := f.sessionID.Load().(string)
	if id == "" {
		t.Fatal("the call carried no session id")
	}
	if strings.Contains(got.Content, id) {
		t.Errorf("result = %+v; it shows the session id %s", got, id)
	}
	waitFor(t, "a new session", func() bool { return f.inits.Load() == 2 && f.m.Status()[0].Connected })
	if st := f.m.Status()[0]; strings.Contains(st.LastError, id) {
		t.Errorf("status %+v shows the session id %s", st, id)
	}
	if got := call(t, f.reg, "srv__drop", `{}`); got.IsError || got.Content != "done" || f.runs.Load() != 1 {
		t.Errorf("the call again, on the new session: got %+v (ran %d times), want done once", got, f.runs.Load())
	}
}

// delivered counts a call as not delivered only on proof: over HTTP, that
// its request never got a connection, or that the server answered it 404;
// over either, that the session this process was closing refused to send
// it.
func TestDelivered(t *testing.T) {
	rejected := fmt.Errorf("calling %q: %w", "tools/call", &jsonrpc.Error{Code: codeRejected, Message: "rejected by transport"})
	// As the SDK words a request refused by a closing connection.
	closed := fmt.Errorf("%w: calling %q: %v", mcp.ErrConnectionClosed, "tools/call", "client is closing")
	for _, tt := range []struct {
		name    string
		err     error
		probe   *callProbe
		closing bool
		want    bool
	}{
		{"http: no connection", rejected, &callProbe{posts: 1}, false, false},
		{"http: never sent", rejected, &callProbe{}, false, false},
		{"http: sent, no answer", rejected, &callProbe{posts: 1, sent: true}, false, true},
		{"http: sent, 504", rejected, &callProbe{posts: 1, sent: true, status: 504, lastStatus: 504}, false, true},
		{"http: sent, 503", rejected, &callProbe{posts: 1, sent: true, status: 503, lastStatus: 503}, false, true},
		{"http: sent, 404", fmt.Errorf("failed to connect: %w", mcp.ErrSessionMissing), &callProbe{posts: 1, sent: true, status: 404, lastStatus: 404}, false, false},
		{"http: another request's 404", fmt.Errorf("failed to connect: %w", mcp.ErrSessionMissing), &callProbe{posts: 1, sent: true, status: 200, lastStatus: 200}, false, true},
		{"stdio: rejected", rejected, nil, false, true},
		{"stdio: cut", errors.New("EOF"), nil, false, true},
		{"stdio: cut while closing", errors.New("EOF"), nil, true, true},
		{"stdio: closed by this process", closed, nil, true, false},
		{"stdio: closed, not by this process", closed, nil, false, true},
		{"http: closed by this process", closed, &callProbe{posts: 1, sent: true, status: 200, lastStatus: 200}, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := delivered(tt.err, tt.probe, tt.closing); got != tt.want {
				t.Errorf("delivered(%v, %+v, %v) = %v, want %v", tt.err, tt.probe, tt.closing, got, tt.want)
			}
		})
	}
}

// The session ids the SDK's errors quote are hidden wherever the error is
// shown.
func TestCleanErrorHidesSessionIDs(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`sending "tools/call": failed to connect (session ID: SBHZSAEUGX34VVQMT2UH6ASV5I): session not found`, `sending "tools/call": failed to connect (session ID: [hidden]): session not found`},
		{`mismatching session IDs "ab\"c" and "d)e"`, `mismatching session IDs [hidden]`},
	} {
		if got := cleanError(errors.New(tt.in)).Error(); got != tt.want {
			t.Errorf("cleanError(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// A call of an idempotent tool with effects that the server ran, its
// answer lost as the connection was cut, is not reported as not sent (its
// card would say it did nothing, and its audit not_sent): it may have run.
func TestIdempotentCallTheServerGotIsNotReportedNotSent(t *testing.T) {
	var runs atomic.Int32
	srv := mcp.NewServer(&mcp.Implementation{Name: "k8s", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "scale", Description: "Set the replicas.", Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: ptr(true)}},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "scaled"}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	answer := runThenAnswer(0) // the server runs it; the connection is cut before its answer
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if method, _ := jsonRPCMethod(t, r); method == "tools/call" {
				answer(w, r, handler)
				return
			}
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	t.Cleanup(ts.CloseClientConnections)
	opts := testOptions()
	opts.pingInterval = time.Hour
	reg, _ := loadYAML(t, fmt.Sprintf("mcp_servers:\n  - name: srv\n    url: %s/mcp\n", ts.URL), opts)
	got := call(t, reg, "srv__scale", `{}`)
	if runs.Load() != 1 {
		t.Fatalf("scale ran %d times, want once", runs.Load())
	}
	if got.NotSent() || strings.Contains(got.Content, "not sent") {
		t.Errorf("a call the server ran is reported as not sent (card: \"not sent: it did nothing\", audit: not_sent): %+v", got)
	}
}
