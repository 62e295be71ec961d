package tools

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
)

// recorder is a server that records what it got: each request's method
// and request-URI as they came on the wire, and its headers.
type recorder struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
	headers  []http.Header
}

func newRecorder(t *testing.T, h http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.requests = append(r.requests, req.Method+" "+req.RequestURI)
		r.headers = append(r.headers, req.Header.Clone())
		r.mu.Unlock()
		if h != nil {
			h(w, req)
		}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) got() ([]string, []http.Header) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests), slices.Clone(r.headers)
}

// registered registers tools in a new registry, for its checks.
func registered(t *testing.T, tools map[string]agent.Tool) *agent.Registry {
	t.Helper()
	reg := agent.NewRegistry()
	for _, tool := range tools {
		if err := reg.Register(tool); err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

// The request-URI the server gets is the url's path and query as written,
// byte for byte. A url that would be sent otherwise is refused before any
// card, and by the handler, and nothing is sent: with a character that
// must be escaped (a space, a non-ASCII letter, {, |) in its path, Go
// escapes the whole path anew, decoding %2F and the other reserved
// escapes, so the server would get another path than the one the policy
// judged; one in the query, or a % that starts no escape, is sent as it
// is, and each server reads it its own way.
func TestHTTPSendsTheURLAsWritten(t *testing.T) {
	srv := newRecorder(t, nil)
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}})
	reg := registered(t, tools)

	for _, tc := range []struct{ name, path, want string }{
		{"space in a path with escaped slashes", "/api/v4/projects/team%2Fsandbox/repository/files/notes%2Fto do.md", `(" " percent-encoded, as %20)`},
		{"non-ASCII letter", "/files/caf\u00e9%2Fmenu", `("é" percent-encoded, as %C3%A9)`},
		{"brace", "/a%3Bb%3Dc/{id}", `("{" percent-encoded, as %7B)`},
		{"pipe", "/a%26b%2Bc%40d%3Ae|f", `("|" percent-encoded, as %7C)`},
		{"space in the query", "/q?name=a b", `(" " percent-encoded, as %20)`},
		{"percent starting no escape", "/q?discount=50%", `("%" percent-encoded, as %25)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := map[string]any{"method": "DELETE", "url": srv.URL + tc.path}
			raw, _ := json.Marshal(args)
			if err := reg.Validate("http_request", raw); err == nil || !strings.Contains(err.Error(), "write it plainly "+tc.want) {
				t.Errorf("Validate(%s) = %v, want it refused, saying %s", raw, err, tc.want)
			}
			if got := runTool(t, tools["http_request"], args); !got.IsError || !strings.Contains(got.Content, tc.want) {
				t.Errorf("http_request %v: got %+v, want it refused, saying %s", args, got, tc.want)
			}
		})
	}
	if sent, _ := srv.got(); len(sent) > 0 {
		t.Fatalf("refused urls reached the server: %q", sent)
	}

	var want []string
	for _, path := range []string{
		"/api/v4/projects/team%2Fsandbox/repository/files/notes%2Fto%20do.md",
		"/a%3Bb%3Dc%26d%2Be%40f%3Ag%2F/caf%C3%A9/%7Bid%7D%7C",
		"/keep/(a)!*',;=:@$&+/x[1]",
		"/q?name=a%20b&path=/x?y&filter[a]=b&discount=50%25",
		"/trailing/?",
	} {
		args := map[string]any{"method": "DELETE", "url": srv.URL + path}
		raw, _ := json.Marshal(args)
		if err := reg.Validate("http_request", raw); err != nil {
			t.Errorf("Validate(%s) = %v, want it accepted", raw, err)
			continue
		}
		if got := runTool(t, tools["http_request"], args); got.IsError {
			t.Errorf("http_request %v: got %+v, want it sent", args, got)
			continue
		}
		want = append(want, "DELETE "+path)
	}
	if sent, _ := srv.got(); strings.Join(sent, "\n") != strings.Join(want, "\n") {
		t.Errorf("the server got\n%s\nwant the urls as written:\n%s", strings.Join(sent, "\n"), strings.Join(want, "\n"))
	}
}

// A redirect to another origin (another scheme, host or port), even an
// allowed one, gets none of the headers the model set, as the MCP
// servers' configured headers go only to their endpoint's origin: Go
// itself drops only Authorization, Cookie and WWW-Authenticate, and only
// for another domain, so X-Vault-Token or PRIVATE-TOKEN would follow. Nor
// does it get a Referer, which would carry the first url, token in its
// query and all. A redirect within the origin keeps them.
func TestHTTPRedirectToAnotherOriginGetsNoHeaders(t *testing.T) {
	other := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
		}
	})
	origin := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/landed", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/landed", http.StatusFound)
		case "/there-and-back":
			http.Redirect(w, r, other.URL+"/back?to=http://"+r.Host+"/landed", http.StatusFound)
		}
	})
	get := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}})["http_get"]
	secrets := map[string]string{
		"X-Vault-Token": "vault-secret",
		"PRIVATE-TOKEN": "gitlab-secret",
		"X-API-Key":     "api-secret",
		"Authorization": "Bearer bearer-secret",
		"Cookie":        "session=cookie-secret",
		"Accept":        "application/json",
	}

	got := runTool(t, get, map[string]any{"url": origin.URL + "/away?private_token=query-secret", "headers": secrets})
	if got.IsError || !strings.Contains(got.Content, "Final-URL: "+other.URL+"/landed\n") {
		t.Fatalf("http_get /away: got %+v, want the redirect followed", got)
	}
	if !strings.Contains(got.Content, "[the headers were not sent to "+other.URL+", another origin than the url's]") {
		t.Errorf("http_get /away: got %q, want it to say the headers were not sent to the other origin", got.Content)
	}
	_, headers := other.got()
	if len(headers) != 1 {
		t.Fatalf("the other origin got %d requests, want 1", len(headers))
	}
	for k := range secrets {
		if v := headers[0].Get(k); v != "" {
			t.Errorf("the other origin got %s: %s, want none of the model's headers", k, v)
		}
	}
	if v := headers[0].Get("Referer"); v != "" {
		t.Errorf("the other origin got Referer: %s, want none", v)
	}

	runTool(t, get, map[string]any{"url": origin.URL + "/here", "headers": secrets})
	runTool(t, get, map[string]any{"url": origin.URL + "/there-and-back", "headers": secrets})
	sent, headers := origin.got()
	for i, h := range headers {
		if sent[i] == "GET /landed" && h.Get("X-Vault-Token") != "vault-secret" {
			t.Errorf("request %d (%s) to the url's own origin: got headers %v, want the model's", i, sent[i], h)
		}
	}
	if n := strings.Count(strings.Join(sent, "\n"), "GET /landed"); n != 2 {
		t.Errorf("the origin got %q, want /landed twice", sent)
	}
	if _, headers := other.got(); len(headers) != 2 || headers[1].Get("X-Vault-Token") != "" {
		t.Errorf("the other origin, on the way back: got headers %v, want none of the model's", headers)
	}
}

// A GET or HEAD with a body (http_request allows one) answered with a 307
// or 308 to another origin is not followed, as a write is not: the
// redirect would carry the approved body to a url the card did not show.
// A 307 within the origin keeps the body, and a 302, which drops it, is
// followed.
func TestHTTPBodyIsNotRedirectedToAnotherOrigin(t *testing.T) {
	var mu sync.Mutex
	var bodies []string
	other := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		io.WriteString(w, "other got "+string(b))
	})
	origin := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/away":
			http.Redirect(w, r, other.URL+"/elsewhere", http.StatusTemporaryRedirect)
		case "/away-permanently":
			http.Redirect(w, r, other.URL+"/elsewhere", http.StatusPermanentRedirect)
		case "/found":
			http.Redirect(w, r, other.URL+"/elsewhere", http.StatusFound)
		case "/here":
			http.Redirect(w, r, "/landed", http.StatusTemporaryRedirect)
		case "/landed":
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, "landed with "+string(b))
		}
	})
	req := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}})["http_request"]
	const body = `{"query":"secret-payload"}`

	for _, tc := range []struct{ method, path, status string }{
		{"GET", "/away", "HTTP 307 Temporary Redirect\n"},
		{"GET", "/away-permanently", "HTTP 308 Permanent Redirect\n"},
		{"HEAD", "/away", "HTTP 307 Temporary Redirect\n"},
	} {
		got := runTool(t, req, map[string]any{"method": tc.method, "url": origin.URL + tc.path, "body": body})
		want := "[redirect not followed: the request's body is sent only to the origin of the url it was approved for, not to " + other.URL + "]"
		if got.IsError || !strings.HasPrefix(got.Content, tc.status) || !strings.Contains(got.Content, "Location: "+other.URL+"/elsewhere\n") || !strings.Contains(got.Content, want) {
			t.Errorf("http_request %s %s with a body: got %q, want the redirect as the result, saying %q", tc.method, tc.path, got.Content, want)
		}
	}
	if sent, _ := other.got(); len(sent) > 0 {
		t.Fatalf("the other origin got %q, want nothing", sent)
	}

	got := runTool(t, req, map[string]any{"method": "GET", "url": origin.URL + "/here", "body": body})
	if got.IsError || !strings.Contains(got.Content, "landed with "+body) {
		t.Errorf("http_request GET /here with a body: got %q, want the redirect within the origin followed, body and all", got.Content)
	}
	got = runTool(t, req, map[string]any{"method": "GET", "url": origin.URL + "/found", "body": body})
	if got.IsError || !strings.Contains(got.Content, "Final-URL: "+other.URL+"/elsewhere\n") || strings.Contains(got.Content, "secret-payload") {
		t.Errorf("http_request GET /found with a body: got %q, want the 302 followed without the body", got.Content)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 || bodies[0] != "" {
		t.Errorf("the other origin got bodies %q, want one empty one (the 302's)", bodies)
	}
}

// A write that timed out once it may have reached the server says that
// its outcome is unknown and that it must not be sent again unchecked, as
// the agent says of a call cut by TOOL_TIMEOUT (the tool's own timeout,
// at most that, comes first); so does one whose connection broke before
// an answer whole. A read that timed out, and a write that never got a
// connection, are plain failures.
func TestHTTPWriteCutAfterItWasSentHasAnUnknownOutcome(t *testing.T) {
	srv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/slow-body":
			io.WriteString(w, "started")
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		case "/hangup":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}
	})
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + closed.Addr().String() + "/x"
	closed.Close()
	req := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}, Timeout: 200 * time.Millisecond})["http_request"]

	const unknown = ": whether the call took effect is unknown. Do not call it again before checking whether it did; tell the user."
	for _, tc := range []struct {
		method, url, want string
		unknown           bool
	}{
		{"DELETE", srv.URL + "/slow", "request to " + srv.URL + "/slow timed out after 200ms", true},
		{"POST", srv.URL + "/slow", "timed out after 200ms", true},
		{"PUT", srv.URL + "/slow-body", "the server answered HTTP 200 OK, but reading the response from " + srv.URL + "/slow-body failed", true},
		{"PATCH", srv.URL + "/hangup", "request to " + srv.URL + "/hangup failed", true},
		{"GET", srv.URL + "/slow-body", "the server answered HTTP 200 OK, but reading", false},
		{"GET", srv.URL + "/slow", "timed out after 200ms", false},
		{"OPTIONS", srv.URL + "/slow", "timed out after 200ms", false},
		{"DELETE", refused, "request to " + refused + " failed", false},
	} {
		got := runTool(t, req, map[string]any{"method": tc.method, "url": tc.url})
		if !got.IsError || !strings.Contains(got.Content, tc.want) || strings.Contains(got.Content, unknown) != tc.unknown || got.OutcomeUnknown() != tc.unknown {
			t.Errorf("http_request %s %s: got %q (outcome unknown: %v), want an error saying %q, with the unknown outcome %v", tc.method, tc.url, got.Content, got.OutcomeUnknown(), tc.want, tc.unknown)
		}
	}
}
