package tools

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/conntest"
)

// httpTestServer serves a few paths on 127.0.0.1.
func httpTestServer(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Secret-Internal", "hidden")
		io.WriteString(w, "hello")
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		io.WriteString(w, r.Method+" "+r.Header.Get("X-Test")+" "+string(body))
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("a", 100))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	mux.HandleFunc("/moved", func(w http.ResponseWriter, r *http.Request) {
		// A 307 keeps the method and the body.
		http.Redirect(w, r, "/echo", http.StatusTemporaryRedirect)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ok", http.StatusFound)
	})
	mux.HandleFunc("/away", func(w http.ResponseWriter, r *http.Request) {
		// localhost is the same machine but not an allowed host.
		u := "http://localhost:" + r.URL.Port() + "/ok"
		if _, port, ok := strings.Cut(r.Host, ":"); ok {
			u = "http://localhost:" + port + "/ok"
		}
		http.Redirect(w, r, u, http.StatusFound)
	})
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nope", http.StatusNotFound)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func httpTools(t *testing.T, c HTTPConfig) map[string]agent.Tool {
	t.Helper()
	ts, err := HTTPTools(c)
	if err != nil {
		t.Fatalf("HTTPTools: %v", err)
	}
	reg := agent.NewRegistry()
	out := map[string]agent.Tool{}
	for _, tool := range ts {
		if err := reg.Register(tool); err != nil {
			t.Fatalf("Register(%s): %v", tool.Name, err)
		}
		out[tool.Name] = tool
	}
	return out
}

func runTool(t *testing.T, tool agent.Tool, args any) agent.Result {
	t.Helper()
	raw, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	res, err := tool.Handler(ctx, raw)
	if err != nil {
		t.Fatalf("%s(%s): unexpected error %v", tool.Name, raw, err)
	}
	return res
}

func TestHTTPTools(t *testing.T) {
	srv := httpTestServer(t)
	u, _ := url.Parse(srv.URL)
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*", "*.example.com"}, MaxResponseBytes: 10, Timeout: 300 * time.Millisecond})
	get, req := tools["http_get"], tools["http_request"]

	for _, tc := range []struct {
		name      string
		tool      agent.Tool
		args      map[string]any
		want      []string // substrings of the content
		notWant   string
		wantError bool
	}{
		{"get", get, map[string]any{"url": srv.URL + "/ok"}, []string{"HTTP 200 OK\n", "Content-Type: text/plain\n", "\n\nhello"}, "hidden", false},
		{"head", get, map[string]any{"url": srv.URL + "/ok", "method": "HEAD"}, []string{"HTTP 200 OK\n"}, "hello", false},
		{"not found is a result", get, map[string]any{"url": srv.URL + "/missing"}, []string{"HTTP 404 Not Found\n", "nope"}, "", false},
		{"post with headers", req, map[string]any{"method": "POST", "url": srv.URL + "/echo", "headers": map[string]string{"X-Test": "v"}, "body": "b"}, []string{"POST v b"}, "", false},
		{"redirect to an allowed host", get, map[string]any{"url": srv.URL + "/hop"}, []string{"Final-URL: " + srv.URL + "/ok\n", "hello"}, "", false},
		{"a write is not redirected", req, map[string]any{"method": "DELETE", "url": srv.URL + "/moved", "headers": map[string]string{"X-Test": "v"}, "body": "b"}, []string{"HTTP 307 Temporary Redirect\n", "Location: /echo\n", "[redirect not followed: a DELETE is sent only to the url it was approved for]"}, "DELETE v b", false},
		{"a read is redirected", req, map[string]any{"method": "GET", "url": srv.URL + "/moved"}, []string{"Final-URL: " + srv.URL + "/echo\n", "GET"}, "not followed", false},
		{"truncated", get, map[string]any{"url": srv.URL + "/big"}, []string{"\n\naaaaaaaaaa\n[body truncated: only the first 10 bytes are shown]"}, "aaaaaaaaaaa", false},
		{"disallowed host", get, map[string]any{"url": "http://localhost:" + u.Port() + "/ok"}, []string{`host "localhost:` + u.Port() + `" is not in the allowed hosts (127.0.0.1:*, *.example.com)`}, "", true},
		{"bare domain of a glob", get, map[string]any{"url": "https://example.com/"}, []string{`host "example.com" is not in the allowed hosts`}, "", true},
		{"userinfo", get, map[string]any{"url": "http://user:pw@127.0.0.1:" + u.Port() + "/ok"}, []string{"user info"}, "pw", true},
		{"userinfo trick", get, map[string]any{"url": "http://127.0.0.1@localhost:" + u.Port() + "/ok"}, []string{"refused"}, "", true},
		{"scheme", get, map[string]any{"url": "file:///etc/passwd"}, []string{`scheme "file" is not allowed`}, "", true},
		{"redirect to a disallowed host", get, map[string]any{"url": srv.URL + "/away"}, []string{"redirect to http://localhost:" + u.Port() + "/ok refused", `host "localhost:` + u.Port() + `" is not in the allowed hosts`}, "", true},
		{"timeout", get, map[string]any{"url": srv.URL + "/slow"}, []string{"timed out after 300ms"}, "", true},
		{"method not allowed", get, map[string]any{"url": srv.URL + "/echo", "method": "POST"}, []string{`method "POST" is not allowed here; use one of GET, HEAD`}, "", true},
		{"host header", req, map[string]any{"method": "GET", "url": srv.URL + "/ok", "headers": map[string]string{"Host": "evil"}}, []string{"Host header cannot be set"}, "", true},
		{"host header lower case", get, map[string]any{"url": srv.URL + "/ok", "headers": map[string]string{"host": "evil"}}, []string{"Host header cannot be set"}, "", true},
		{"proxy header", get, map[string]any{"url": srv.URL + "/ok", "headers": map[string]string{"Proxy-Authorization": "Basic eA=="}}, []string{`header "Proxy-Authorization" cannot be set`}, "hello", true},
		{"proxy header lower case", req, map[string]any{"method": "GET", "url": srv.URL + "/ok", "headers": map[string]string{"proxy-connection": "keep-alive"}}, []string{`header "proxy-connection" cannot be set`}, "hello", true},
		{"port not allowed", get, map[string]any{"url": "http://api.example.com:8200/"}, []string{`host "api.example.com:8200" is not in the allowed hosts`}, "", true},
		// A URL is written plainly, so that a rule on args.url sees where
		// the request goes.
		{"upper-case scheme", get, map[string]any{"url": "HTTP" + strings.TrimPrefix(srv.URL, "http") + "/ok"}, []string{"write it plainly (the scheme in lower case)"}, "hello", true},
		{"upper-case host", get, map[string]any{"url": "https://API.example.com/"}, []string{"write it plainly (the host in lower case)"}, "", true},
		{"trailing dot", get, map[string]any{"url": "https://api.example.com./"}, []string{"write it plainly (no dot at the end of the host)"}, "", true},
		{"default port", get, map[string]any{"url": "https://api.example.com:443/"}, []string{"write it plainly (no port 443 for https)"}, "", true},
		{"needless escape", get, map[string]any{"url": srv.URL + "/%6Fk"}, []string{`write it plainly ("%6F" unescaped: it is "o")`}, "hello", true},
		{"escaped dot", get, map[string]any{"url": srv.URL + "/x/%2E%2E/ok"}, []string{`"%2E" unescaped`}, "hello", true},
		{"dot segment", get, map[string]any{"url": srv.URL + "/x/../ok"}, []string{"write it plainly (no . or .. in the path)"}, "hello", true},
		{"escaped slash is plain", get, map[string]any{"url": srv.URL + "/a%2Fb"}, []string{"HTTP 404"}, "plainly", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := runTool(t, tc.tool, tc.args)
			if got.IsError != tc.wantError {
				t.Errorf("%s %v: got IsError %v, want %v (content %q)", tc.tool.Name, tc.args, got.IsError, tc.wantError, got.Content)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Content, w) {
					t.Errorf("%s %v: got %q, want it to contain %q", tc.tool.Name, tc.args, got.Content, w)
				}
			}
			if tc.notWant != "" && strings.Contains(got.Content, tc.notWant) {
				t.Errorf("%s %v: got %q, want no %q", tc.tool.Name, tc.args, got.Content, tc.notWant)
			}
		})
	}
}

// A request the bot's bound on one tool call (the handler's context) cuts
// before the tool's own timeout says how long it had, not the timeout.
func TestHTTPCutByTheCallersDeadline(t *testing.T) {
	srv := httpTestServer(t)
	get := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}, Timeout: 10 * time.Minute})["http_get"]
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	got, err := get.Handler(ctx, json.RawMessage(`{"url":"`+srv.URL+`/slow"}`))
	if err != nil {
		t.Fatalf("http_get /slow: %v", err)
	}
	if !got.IsError || !cutWithin(got.Content, "request to "+srv.URL+"/slow ", 300*time.Millisecond) || strings.Contains(got.Content, ";") {
		t.Errorf("http_get /slow, cut after 300ms with a 10m timeout: got %+v, want the error that it timed out after at most 300ms", got)
	}
}

// A server that switches protocols (101) holds the connection open with
// nothing more to read: the call ends at once, saying so, instead of
// waiting on a body neither its time-out nor the caller's deadline ends.
func TestHTTPSwitchingProtocolsEndsTheCall(t *testing.T) {
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		buf.Flush()
		<-hold
	}))
	defer srv.Close()
	defer close(hold)
	get := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}, Timeout: time.Minute})["http_get"]
	done := make(chan agent.Result)
	go func() {
		got, _ := get.Handler(t.Context(), json.RawMessage(`{"url":"`+srv.URL+`/ws"}`))
		done <- got
	}()
	select {
	case got := <-done:
		if !got.IsError || !strings.Contains(got.Content, "switched protocols") {
			t.Errorf("http_get answered 101: got %+v, want an error saying the server switched protocols", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("http_get still waits 30s after a 101 answer")
	}
}

func TestHTTPToolsHints(t *testing.T) {
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"a.com"}})
	if h := tools["http_get"].Annotations; !h.ReadOnly || h.Destructive == nil || *h.Destructive {
		t.Errorf("http_get hints: got %+v, want read-only and not destructive", h)
	}
	if h := tools["http_request"].Annotations; h.ReadOnly || h.Destructive == nil || !*h.Destructive {
		t.Errorf("http_request hints: got %+v, want destructive", h)
	}
	ro := httpTools(t, HTTPConfig{AllowedHosts: []string{"a.com"}, ReadOnly: true})
	if _, ok := ro["http_request"]; ok || len(ro) != 1 {
		t.Errorf("read_only: got tools %v, want only http_get", ro)
	}
	reg := agent.NewRegistry()
	reg.Register(tools["http_get"])
	if err := reg.Validate("http_get", json.RawMessage(`{"url": "https://a.com", "method": "DELETE"}`)); err == nil {
		t.Errorf("http_get schema: DELETE accepted, want refused")
	}
}

func TestHostPattern(t *testing.T) {
	for _, tc := range []struct {
		pattern, url string
		want         bool
	}{
		{"api.github.com", "https://api.github.com/x", true},
		{"api.github.com", "https://API.GitHub.com./x", true},
		{"api.github.com", "https://api.github.com:8443/x", false},
		{"api.github.com", "http://api.github.com/x", true},
		{"api.github.com", "http://api.github.com:443/x", false},
		{"api.github.com", "https://api.github.com:443/x", true},
		{"api.example", "http://api.example:8200/", false},
		{"api.example:*", "http://api.example:8200/", true},
		{"api.example:*", "https://api.example/", true},
		{"api.example:*", "https://other.example/", false},
		{"*.internal.example:*", "http://a.internal.example:9000/", true},
		{"*.internal.example", "http://a.internal.example:9000/", false},
		{"[::1]:*", "http://[::1]:9000/", true},
		{"api.github.com", "https://github.com/x", false},
		{"api.github.com", "https://api.github.com.evil.com/x", false},
		{"*.internal.example", "http://a.internal.example/", true},
		{"*.internal.example", "http://a.b.internal.example/", true},
		{"*.internal.example", "http://internal.example/", false},
		{"*.internal.example", "http://evilinternal.example/", false},
		{"127.0.0.1:8080", "http://127.0.0.1:8080/", true},
		{"127.0.0.1:8080", "http://127.0.0.1:8081/", false},
		{"example.com:443", "https://example.com/", true},
		{"example.com:443", "http://example.com/", false},
		{"[::1]:80", "http://[::1]/", true},
		{"::1", "http://[::1]:9000/", false},
		{"::1", "http://[::1]/", true},
		// "İ" lower-cases to "i", but connects as IDNA's "i̇": another name.
		{"api.github.com", "http://api.g\u0130thub.com/", false},
		{"*.internal.io", "http://x.\u0130nternal.io/", false},
		{"*.xn--bcher-kva.example", "http://a.xn--bcher-kva.example/", true},
		{"*.xn--bcher-kva.example", "http://a.b\u00fccher.example/", false},
	} {
		h := &httpTool{cfg: HTTPConfig{AllowedHosts: []string{tc.pattern}}, hosts: []hostPattern{parseHostPattern(tc.pattern)}}
		if err := checkHostPattern(tc.pattern); err != nil {
			t.Errorf("checkHostPattern(%q): %v", tc.pattern, err)
		}
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.check(u) == nil; got != tc.want {
			t.Errorf("pattern %q, url %q: got allowed=%v, want %v", tc.pattern, tc.url, got, tc.want)
		}
	}
}

// An allowed_hosts port is taken only in its plain decimal form: the check
// compares ports as written, so "08080" or "+8080" would be accepted and
// then match no url, not even one on port 8080.
func TestAllowedHostPortOnlyInItsPlainForm(t *testing.T) {
	for _, tc := range []struct{ entry, want string }{
		{"127.0.0.1:08080", `"127.0.0.1:08080": invalid port "08080": write it as 8080`},
		{"127.0.0.1:+8080", `"127.0.0.1:+8080": invalid port "+8080": write it as 8080`},
		{"api.example:0443", `write it as 443`},
		{"api.example:0", `invalid port "0"`},
		{"api.example:65536", `invalid port "65536"`},
		{"api.example:-1", `invalid port "-1"`},
	} {
		data := "builtin_tools:\n  http_request:\n    allowed_hosts: [\"" + tc.entry + "\"]\n"
		if _, err := ParseConfig([]byte(data)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseConfig with allowed_hosts %q: got %v, want an error with %q", tc.entry, err, tc.want)
		}
		if _, err := HTTPTools(HTTPConfig{AllowedHosts: []string{tc.entry}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("HTTPTools with allowed_hosts %q: got %v, want an error with %q", tc.entry, err, tc.want)
		}
	}
	if _, err := ParseConfig([]byte("builtin_tools:\n  http_request:\n    allowed_hosts: [\"127.0.0.1:8080\", \"api.example:65535\"]\n")); err != nil {
		t.Errorf("ParseConfig with plain ports: %v", err)
	}
}

// Two header names that differ only in case are one header: only one value
// could be sent, while the card and the policy see both. They are refused
// with the schema's checks, before any card, and by the handler too.
func TestHTTPHeadersThatAreOneHeaderAreRefused(t *testing.T) {
	srv := httpTestServer(t)
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}})
	reg := agent.NewRegistry()
	for _, name := range []string{"http_get", "http_request"} {
		if err := reg.Register(tools[name]); err != nil {
			t.Fatal(err)
		}
	}
	args := map[string]any{"method": "POST", "url": srv.URL + "/echo", "headers": map[string]string{"X-Env": "staging", "x-env": "production"}}
	raw, _ := json.Marshal(args)
	err := reg.Validate("http_request", raw)
	if err == nil || !strings.Contains(err.Error(), `headers "X-Env" and "x-env" are the same header`) {
		t.Errorf("Validate(%s) = %v, want the two names refused as one header", raw, err)
	}
	get, _ := json.Marshal(map[string]any{"url": srv.URL + "/ok", "headers": map[string]string{"HOST": "evil"}})
	if err := reg.Validate("http_get", get); err == nil || !strings.Contains(err.Error(), "Host header cannot be set") {
		t.Errorf("Validate(%s) = %v, want the Host header refused", get, err)
	}
	ok, _ := json.Marshal(map[string]any{"method": "POST", "url": srv.URL + "/echo", "headers": map[string]string{"X-Test": "v", "X-Other": "w"}})
	if err := reg.Validate("http_request", ok); err != nil {
		t.Errorf("Validate(%s) = %v, want distinct headers accepted", ok, err)
	}
	if got := runTool(t, tools["http_request"], args); !got.IsError || !strings.Contains(got.Content, "are the same header") {
		t.Errorf("handler: got %q (error %v), want the two names refused and nothing sent", got.Content, got.IsError)
	}
}

// A header the request could not send (a value with a line break, which a
// card shows as two headers, or a control character; a name that is not an
// HTTP token) is refused with the schema's checks, before any card, as a
// server's configured headers are, rather than failing once approved. The
// handler refuses it too, and nothing is sent.
func TestHTTPHeaderThatCannotBeSentIsRefused(t *testing.T) {
	srv := newRecorder(t, nil)
	tools := httpTools(t, HTTPConfig{AllowedHosts: []string{"127.0.0.1:*"}})
	reg := registered(t, tools)
	for _, tc := range []struct {
		headers map[string]string
		want    string
	}{
		{map[string]string{"X-Env": "staging\r\nX-Force: true"}, "X-Env: the value has a line break"},
		{map[string]string{"X-Env": "staging\n"}, "X-Env: the value has a line break"},
		{map[string]string{"X-Env": "a\x00b"}, "X-Env: the value has a control character"},
		{map[string]string{"X Env": "staging"}, `"X Env" is not a valid header name`},
		{map[string]string{"X-Env:": "staging"}, `"X-Env:" is not a valid header name`},
		{map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, `header "Connection" cannot be set`},
		{map[string]string{"sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ=="}, `header "sec-websocket-key" cannot be set`},
	} {
		args := map[string]any{"method": "POST", "url": srv.URL + "/deploy", "headers": tc.headers}
		raw, _ := json.Marshal(args)
		if err := reg.Validate("http_request", raw); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%s) = %v, want it refused, saying %q", raw, err, tc.want)
		}
		if got := runTool(t, tools["http_request"], args); !got.IsError || !strings.Contains(got.Content, tc.want) {
			t.Errorf("http_request %s: got %q (error %v), want it refused, saying %q", raw, got.Content, got.IsError, tc.want)
		}
	}
	if sent, _ := srv.got(); len(sent) > 0 {
		t.Errorf("refused headers reached the server: %q", sent)
	}
	ok, _ := json.Marshal(map[string]any{"url": srv.URL + "/ok", "headers": map[string]string{"X-Env": "staging\tand more"}})
	if err := reg.Validate("http_get", ok); err != nil {
		t.Errorf("Validate(%s) = %v, want a tab in a value accepted", ok, err)
	}
}

func TestHTTPTransportUsesNoProxy(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	if newHTTPTransport().Proxy != nil {
		t.Error("the HTTP tools' transport uses a proxy, want none")
	}
}

// TestHTTPToolsReuseConnections checks that the transport of the HTTP
// tools keeps the connections of calls made at once for the next calls.
func TestHTTPToolsReuseConnections(t *testing.T) {
	const n = 8
	srv := conntest.Start(t, n, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok"))
	})
	c := &http.Client{Transport: newHTTPTransport()}
	first, later := srv.Rounds(t, n, 2, func() error {
		resp, err := c.Get(srv.URL)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	})
	if first != n || later != 0 {
		t.Fatalf("connections: %d in the first round, %d new later; want %d and 0", first, later, n)
	}
}
