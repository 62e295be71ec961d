package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
)

// maxRedirects is how many redirects a request follows, each to an allowed
// host.
const maxRedirects = 5

// shownHeaders are the response headers included in a result.
var shownHeaders = []string{"Content-Type", "Content-Length", "Location", "Retry-After", "ETag", "Last-Modified"}

// HTTPTools returns http_get (GET and HEAD; read-only, so policies allow
// it by default) and, unless c.ReadOnly, http_request (any method; marked
// destructive, so policies ask by default). They are two tools because
// annotations belong to a tool, not to a call.
//
// Both only reach c.AllowedHosts: the host is checked after the URL is
// parsed, URLs with user info are refused, and every redirect is checked
// the same way. The host name is checked, not the address it resolves to.
// Only a GET or HEAD is redirected, and not with its body to another
// origin (a 307 or 308 would send the body along): the redirect is then
// the result.
// Requests go straight to the host: HTTP_PROXY and HTTPS_PROXY are not
// used, and the model may not set the Host header or Proxy-* headers.
// Zero settings take their defaults.
func HTTPTools(c HTTPConfig) ([]agent.Tool, error) {
	c.MaxResponseBytes = orDefault(c.MaxResponseBytes, DefaultHTTPMaxResponseBytes)
	c.Timeout = orDefault(c.Timeout, DefaultHTTPTimeout)
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("http_request: %w", err)
	}
	h := &httpTool{cfg: c}
	for _, p := range c.AllowedHosts {
		h.hosts = append(h.hosts, parseHostPattern(p))
	}
	h.client = &http.Client{
		Transport: newHTTPTransport(),
		Timeout:   c.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if m := via[0].Method; m != http.MethodGet && m != http.MethodHead {
				// A 307 or 308 would send the approved write, body and
				// headers, to a URL the card did not show: the
				// redirect is the result.
				return http.ErrUseLastResponse
			}
			if carriesBody(req) && urlOrigin(req.URL) != urlOrigin(via[0].URL) {
				// A 307 or 308 of a GET or HEAD with a body (http_request
				// allows one) would send the approved body, where the
				// headers are not sent, to a URL the card did not show:
				// the redirect is the result, as it is for a write.
				return http.ErrUseLastResponse
			}
			if len(via) >= maxRedirects {
				return fmt.Errorf("stopped after %d redirects", maxRedirects)
			}
			if err := h.check(req.URL); err != nil {
				return &redirectError{url: req.URL.Redacted(), err: err}
			}
			if urlOrigin(req.URL) != urlOrigin(via[0].URL) {
				// The headers the model set go only to the origin of
				// the url approved, as an MCP server's configured
				// headers go only to its endpoint's (headerTransport):
				// Go would carry all but Authorization, Cookie and
				// WWW-Authenticate to another host, and those to a
				// subdomain or another port, so X-Vault-Token or
				// PRIVATE-TOKEN would follow. Go's Referer goes too:
				// it would carry the url, a token in its query and
				// all. The transport adds what a request needs.
				req.Header = http.Header{}
			}
			return nil
		},
	}
	hosts := strings.Join(c.AllowedHosts, ", ")
	tools := []agent.Tool{{
		Name: "http_get",
		Description: "Fetch a URL with GET (or HEAD) and return the status, selected headers and body. " +
			"Allowed hosts: " + hosts + ".",
		Schema:      schemaHttpGet,
		Annotations: approvals.Hints{ReadOnly: true, Destructive: ptr(false), Idempotent: true},
		Handler:     h.handler([]string{http.MethodGet, http.MethodHead}),
		Check:       checkHTTPArgs,
	}}
	if !c.ReadOnly {
		methods := []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}
		tools = append(tools, agent.Tool{
			Name: "http_request",
			Description: "Send an HTTP request with any method and return the status, selected headers and body. " +
				"Prefer http_get to only read. Allowed hosts: " + hosts + ".",
			Schema:      schemaHttpRequest,
			Annotations: approvals.Hints{Destructive: ptr(true)},
			Handler:     h.handler(methods),
			Preview:     h.previewRequest,
			Check:       checkHTTPArgs,
		})
	}
	return tools, nil
}

type httpTool struct {
	cfg    HTTPConfig
	hosts  []hostPattern
	client *http.Client
}

type httpArgs struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
}

// checkHTTPArgs refuses, before any card, headers the request could not
// send as the arguments read (see checkHeaders), and a URL not written
// plainly (see checkPlainURL).
func checkHTTPArgs(raw json.RawMessage) error {
	var args httpArgs
	if err := decodeArgs(raw, &args); err != nil {
		return err
	}
	if err := checkPlainURL(args.URL); err != nil {
		return err
	}
	return checkHeaders(args.Headers)
}

// checkPlainURL refuses a URL written in a form that a server reads as
// another (RFC 3986's equivalent forms), so that the policy's conditions on
// args.url, and the card, see the one spelling of where the request goes:
// an upper-case scheme or host, a host with a trailing dot, the scheme's
// own port written out, a ":" with no port after it (the default port), a
// port with leading zeros (039519 is port 39519), an escape of a character
// that needs none (%73 for "s") in the path or the query (servers decode
// the query's values, so ?force=%74rue is ?force=true), or a "." or ".."
// path segment.
//
// It also refuses a path or query that would not be sent as written: one
// with a character a URL cannot hold as it is (a space, a non-ASCII
// letter, "{", "|", a "%" that starts no escape; see mustEscape). In the
// path, Go would escape the whole path anew from its decoded form, so
// /files/notes%2Fto do.md would go as /files/notes/to%20do.md, and %3B,
// %3D, %26, %2B, %40 and %3A would be decoded too; in the query it would
// be sent as it is, and each server reads it its own way. The path and
// query checked are those written, which, once accepted, are what the
// request sends byte for byte. A URL that does not parse is left to the
// tool, which says what is wrong.
func checkPlainURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return nil
	}
	plain := func(why string) error {
		return fmt.Errorf("url %q: write it plainly (%s), so that what the policy and the approvers read is where the request goes", raw, why)
	}
	switch host := u.Hostname(); {
	case !strings.HasPrefix(raw, u.Scheme+"://"):
		return plain("the scheme in lower case")
	case host != strings.ToLower(host):
		return plain("the host in lower case")
	case strings.HasSuffix(host, "."):
		return plain("no dot at the end of the host")
	case strings.HasSuffix(u.Host, ":"):
		return plain("no : without a port after the host")
	case len(u.Port()) > 1 && u.Port()[0] == '0':
		port := strings.TrimLeft(u.Port(), "0")
		if port == "" {
			port = "0"
		}
		return plain("the port as " + port + ", without leading zeros")
	case u.Port() != "" && u.Port() == defaultPort(u.Scheme):
		return plain("no port " + u.Port() + " for " + u.Scheme)
	}
	path, query := pathAndQuery(raw[len(u.Scheme+"://"):])
	for _, part := range []string{path, query} {
		if c, ok := mustEscape(part); ok {
			return plain(fmt.Sprintf("%q percent-encoded, as %s", c, percentEncode(c)))
		}
		if esc, c, ok := needlessEscape(part); ok {
			return plain(fmt.Sprintf("%q unescaped: it is %q", esc, c))
		}
		if esc, ok := lowerEscape(part); ok {
			return plain(fmt.Sprintf("%q in upper case, as %s", esc, strings.ToUpper(esc)))
		}
	}
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return plain("no . or .. in the path")
		}
	}
	return nil
}

// pathAndQuery returns the path and the query of a URL as written, given
// what follows its "scheme://", as url.Parse splits it: the fragment goes
// first, then the query from the first "?", and the path starts at the
// first "/" left.
func pathAndQuery(rest string) (path, query string) {
	rest, _, _ = strings.Cut(rest, "#")
	i := strings.IndexAny(rest, "/?")
	if i < 0 {
		return "", ""
	}
	path, query, _ = strings.Cut(rest[i:], "?")
	return path, query
}

// uriChars are the characters besides the unreserved ones that a URL's
// path or query may hold as they are, and that Go sends as they are: RFC
// 3986's sub-delims, ":", "@", "/" and "?", and the "[" and "]" Go lets
// through.
const uriChars = "!$&'()*+,;=:@/?[]"

// mustEscape returns the first character of s, a path or a query as
// written, that a URL cannot hold as it is and must percent-encode: any
// but the unreserved ones, uriChars, and a "%" that starts an escape.
func mustEscape(s string) (string, bool) {
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			i += 3
		case unreserved(c) || strings.IndexByte(uriChars, c) >= 0:
			i++
		default:
			_, n := utf8.DecodeRuneInString(s[i:])
			return s[i : i+n], true
		}
	}
	return "", false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// percentEncode escapes every byte of s: "é" is %C3%A9.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// needlessEscape returns the first escape in s of an unreserved character
// (%73 for "s"), which means the same as the character itself, and that
// character.
func needlessEscape(s string) (esc, c string, ok bool) {
	for i := 0; i+2 < len(s); i++ {
		if s[i] != '%' {
			continue
		}
		if b, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil && unreserved(byte(b)) {
			return s[i : i+3], string(rune(b)), true
		}
	}
	return "", "", false
}

// lowerEscape returns the first escape in s written with a lower-case hex
// digit (%2f), which means the same as its upper-case form (RFC 3986,
// 6.2.2.1): one spelling of a URL is taken, so that a rule on it sees it.
func lowerEscape(s string) (string, bool) {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) && (s[i+1] >= 'a' || s[i+2] >= 'a') {
			return s[i : i+3], true
		}
	}
	return "", false
}

// unreserved reports whether c is one of RFC 3986's unreserved characters,
// which an escape never changes the meaning of.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

// checkHeaders refuses headers that could not be sent as the arguments,
// or a server's configuration, read them: the Host and Proxy-* headers;
// two names that are one header (header names are not case-sensitive, so
// of {"X-Env": "staging", "x-env": "production"} only one would be sent,
// while a card and the policy see both); a name that is not an HTTP
// token; Content-Length, which Go writes itself; a value with a line
// break (which a card shows as two headers, and a secret read from a file
// often ends with) or another control character, which Go refuses to
// send; and one with blanks around it, which Go and servers drop, so that
// the value a rule reads is the value sent. Values are never quoted.
func checkHeaders(headers map[string]string) error {
	names := make([]string, 0, len(headers))
	for k := range headers {
		names = append(names, k)
	}
	slices.Sort(names) // the same error for the same arguments
	seen := make(map[string]string, len(names))
	for _, k := range names {
		switch {
		case strings.EqualFold(k, "Host"):
			return errors.New("the Host header cannot be set; put the host in the url")
		case len(k) >= len("Proxy-") && strings.EqualFold(k[:len("Proxy-")], "Proxy-"):
			return fmt.Errorf("header %q cannot be set: requests do not go through a proxy", k)
		case strings.EqualFold(k, "Connection") || strings.EqualFold(k, "Upgrade") || strings.EqualFold(k, "Keep-Alive") ||
			strings.EqualFold(k, "TE") || strings.EqualFold(k, "Trailer") || strings.EqualFold(k, "Transfer-Encoding") ||
			len(k) >= len("Sec-WebSocket-") && strings.EqualFold(k[:len("Sec-WebSocket-")], "Sec-WebSocket-"):
			return fmt.Errorf("header %q cannot be set: it governs the connection, which the tool keeps to one request and its answer", k)
		case strings.EqualFold(k, "Content-Length"):
			return errors.New("the Content-Length header cannot be set: the tool sends the body's own length")
		case !validHeaderName(k):
			return fmt.Errorf("%q is not a valid header name", k)
		}
		c := http.CanonicalHeaderKey(k)
		if first, ok := seen[c]; ok {
			return fmt.Errorf("headers %q and %q are the same header (header names are not case-sensitive); send it once", first, k)
		}
		seen[c] = k
		v := headers[k]
		switch i := strings.IndexFunc(v, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); {
		case i < 0:
		case v[i] == '\n' || v[i] == '\r':
			return fmt.Errorf("%s: the value has a line break (a secret read from a file often ends with one): remove it", k)
		default:
			return fmt.Errorf("%s: the value has a control character", k)
		}
		if v != strings.Trim(v, " \t") {
			return fmt.Errorf("%s: the value starts or ends with a blank, which is not sent: remove it", k)
		}
	}
	return nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r >= 0x7f || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return true
}

type redirectError struct {
	url string
	err error
}

func (e *redirectError) Error() string {
	return fmt.Sprintf("redirect to %s refused: %v", e.url, e.err)
}

func (h *httpTool) handler(methods []string) agent.Handler {
	return func(ctx context.Context, raw json.RawMessage) (agent.Result, error) {
		var args httpArgs
		if err := decodeArgs(raw, &args); err != nil {
			return errorResult("%v", err), nil
		}
		if args.Method == "" {
			args.Method = http.MethodGet
		}
		if !slices.Contains(methods, args.Method) {
			return errorResult("method %q is not allowed here; use one of %s", args.Method, strings.Join(methods, ", ")), nil
		}
		return h.do(ctx, args), nil
	}
}

func (h *httpTool) do(ctx context.Context, args httpArgs) agent.Result {
	u, err := url.Parse(args.URL)
	if err != nil {
		return errorResult("invalid url: %v", err)
	}
	if err := checkPlainURL(args.URL); err != nil {
		return errorResult("%v", err)
	}
	if err := h.check(u); err != nil {
		return errorResult("request to %s refused: %v", u.Redacted(), err)
	}
	var body io.Reader
	if args.Body != "" {
		body = strings.NewReader(args.Body)
	}
	// Made from the url as written, which checkPlainURL made sure is sent
	// as it is.
	req, err := http.NewRequestWithContext(ctx, args.Method, args.URL, body)
	if err != nil {
		return errorResult("invalid request: %v", err)
	}
	if err := checkHeaders(args.Headers); err != nil {
		return errorResult("%v", err)
	}
	for k, v := range args.Headers {
		req.Header.Set(k, v)
	}
	limit := timeLimit(ctx, h.cfg.Timeout)
	var sent atomic.Bool
	req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { sent.Store(true) },
	}))
	// A write whose answer did not come whole may have done its work:
	// saying so, as the agent says of a call cut by TOOL_TIMEOUT, keeps
	// the model from sending it again unchecked. (The tool's timeout, at
	// most TOOL_TIMEOUT, comes first, so the agent's words never would.)
	unknown := func(msg string) agent.Result {
		if sent.Load() && !safeMethod(args.Method) {
			return agent.UnknownOutcomeResult(msg + ": " + agent.UnknownOutcome)
		}
		return errorResult("%s", msg)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if re, ok := errors.AsType[*redirectError](err); ok {
			return errorResult("%v", re)
		}
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return unknown(fmt.Sprintf("request to %s timed out after %s", u.Redacted(), limit))
		}
		return unknown(fmt.Sprintf("request to %s failed: %v", u.Redacted(), err))
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// Its body is the connection itself, which neither the time-out
		// nor ctx would end: closed at once.
		return unknown(fmt.Sprintf("the server at %s switched protocols (HTTP %s), which this tool does not speak", u.Redacted(), resp.Status))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, h.cfg.MaxResponseBytes+1))
	if err != nil {
		return unknown(fmt.Sprintf("the server answered HTTP %s, but reading the response from %s failed (%v)", resp.Status, u.Redacted(), err))
	}
	truncated := int64(len(data)) > h.cfg.MaxResponseBytes
	if truncated {
		data = data[:h.cfg.MaxResponseBytes]
		// Do not end in the middle of a character.
		for i := 0; i < utf8.UTFMax && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %s\n", resp.Status)
	final := resp.Request.URL
	if final.String() != u.String() {
		fmt.Fprintf(&b, "Final-URL: %s\n", final.Redacted())
	}
	for _, k := range shownHeaders {
		if v := resp.Header.Get(k); v != "" {
			fmt.Fprintf(&b, "%s: %s\n", k, v)
		}
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.Header.Get("Location") != "" {
		switch next, err := resp.Location(); {
		case args.Method != http.MethodGet && args.Method != http.MethodHead:
			fmt.Fprintf(&b, "[redirect not followed: a %s is sent only to the url it was approved for]\n", args.Method)
		case args.Body != "" && (resp.StatusCode == http.StatusTemporaryRedirect || resp.StatusCode == http.StatusPermanentRedirect) &&
			err == nil && urlOrigin(next) != urlOrigin(u):
			fmt.Fprintf(&b, "[redirect not followed: the request's body is sent only to the origin of the url it was approved for, not to %s]\n", (&url.URL{Scheme: next.Scheme, Host: next.Host}).String())
		}
	}
	if len(args.Headers) > 0 && urlOrigin(final) != urlOrigin(u) {
		fmt.Fprintf(&b, "[the headers were not sent to %s, another origin than the url's]\n", (&url.URL{Scheme: final.Scheme, Host: final.Host}).String())
	}
	b.WriteString("\n")
	switch {
	case !utf8.Valid(data):
		fmt.Fprintf(&b, "[binary body not shown]\n")
	default:
		b.Write(data)
		if truncated {
			fmt.Fprintf(&b, "\n[body truncated: only the first %d bytes are shown]\n", len(data))
		}
	}
	return agent.Result{Content: b.String()}
}

// carriesBody reports whether req, the next request of a redirect, would
// send the body of the one before: a 307 or 308 keeps it.
func carriesBody(req *http.Request) bool {
	return req.GetBody != nil || req.Body != nil && req.Body != http.NoBody
}

// safeMethod reports whether method only reads (RFC 9110's safe methods
// among those the tools send): such a request may be sent again.
func safeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// check says why u may not be requested, or nil.
func (h *httpTool) check(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q is not allowed; use http or https", u.Scheme)
	}
	if u.User != nil {
		return errors.New("URLs with user info (user@host) are not allowed")
	}
	host := normalizeHost(u.Hostname())
	if host == "" {
		return errors.New("the URL has no host")
	}
	if !isASCII(u.Hostname()) {
		// The check would match a lower-cased form of the name while the
		// connection goes to its IDNA form, another name ("İ" is "i" to
		// strings.ToLower, "i̇" to IDNA).
		return errors.New("the host must be written in ASCII (an internationalized name in its xn-- form)")
	}
	port := u.Port()
	if port == "" {
		port = defaultPort(u.Scheme)
	}
	for _, p := range h.hosts {
		if p.match(host, port, u.Scheme) {
			return nil
		}
	}
	return fmt.Errorf("host %q is not in the allowed hosts (%s)", u.Host, strings.Join(h.cfg.AllowedHosts, ", "))
}

// hostPattern is one allowed_hosts entry: an exact host or, with suffix
// set, any subdomain of host. Port "" matches only the default port of the
// URL's scheme, "*" any port.
type hostPattern struct {
	host   string
	suffix bool
	port   string
}

func (p hostPattern) match(host, port, scheme string) bool {
	switch p.port {
	case "*":
	case "":
		if port != defaultPort(scheme) {
			return false
		}
	default:
		if p.port != port {
			return false
		}
	}
	if p.suffix {
		return strings.HasSuffix(host, "."+p.host)
	}
	return host == p.host
}

func defaultPort(scheme string) string {
	switch scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// httpIdleConns is how many idle connections per host the HTTP tools and
// MCP servers over HTTP keep for reuse: net/http keeps 2 by default, so
// calls that overlap mostly dial anew. IdleConnTimeout (90 s, net/http's
// default) closes them once calls stop.
const httpIdleConns = 16

// newHTTPTransport is the transport of the HTTP tools and of MCP servers
// over HTTP: the default one without a proxy, so that requests go where
// their URL says and the environment cannot send them elsewhere, keeping
// httpIdleConns idle connections per host. It speaks HTTP/1.1 only: Go's
// HTTP/2 client sends a request again, whatever its method, when the
// server resets its stream (a proxy whose upstream answered badly), after
// the server may have acted on it, and returns the second answer as the
// only one: an approved POST or an MCP tools/call would run twice, told
// as once. Over HTTP/1.1 a request is sent again only if it is a GET,
// HEAD, OPTIONS or TRACE, names an idempotency key, or was never written.
func newHTTPTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConnsPerHost = httpIdleConns
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	return t
}

// parseHostPattern parses an entry checkHostPattern accepted.
func parseHostPattern(s string) hostPattern {
	var p hostPattern
	host := s
	if h, port, err := net.SplitHostPort(s); err == nil {
		host, p.port = h, port
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		host = s[1 : len(s)-1]
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		host, p.suffix = rest, true
	}
	p.host = normalizeHost(host)
	return p
}

func checkHostPattern(s string) error {
	if strings.ContainsAny(s, "/@?# ") || strings.Contains(s, "://") {
		return fmt.Errorf("%q: want a host name, not a URL", s)
	}
	p := parseHostPattern(s)
	if p.host == "" {
		return fmt.Errorf("%q: empty host", s)
	}
	if strings.Contains(p.host, "*") {
		return fmt.Errorf("%q: a wildcard is only allowed as a leading \"*.\"", s)
	}
	if !isASCII(p.host) {
		return fmt.Errorf("%q: write an internationalized host name in its ASCII (xn--) form", s)
	}
	if p.port != "" && p.port != "*" {
		// Ports are matched as written, as the url's port is written
		// plainly (see checkPlainURL): "08080" or "+8080" would match
		// no url.
		switch n, err := strconv.Atoi(p.port); {
		case err != nil || n < 1 || n > 65535:
			return fmt.Errorf("%q: invalid port %q", s, p.port)
		case strconv.Itoa(n) != p.port:
			return fmt.Errorf("%q: invalid port %q: write it as %d", s, p.port, n)
		}
	}
	return nil
}

func normalizeHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// schemaHttpGet is the argument schema of http_get.
var schemaHttpGet = json.RawMessage(`{
  "type": "object",
  "properties": {
    "url": {"type": "string", "description": "An http or https URL on an allowed host."},
    "method": {"type": "string", "enum": ["GET", "HEAD"], "default": "GET"},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Request headers."}
  },
  "required": ["url"],
  "additionalProperties": false
}`)

// schemaHttpRequest is the argument schema of http_request.
var schemaHttpRequest = json.RawMessage(`{
  "type": "object",
  "properties": {
    "method": {"type": "string", "enum": ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]},
    "url": {"type": "string", "description": "An http or https URL on an allowed host."},
    "headers": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Request headers."},
    "body": {"type": "string", "description": "The request body."}
  },
  "required": ["method", "url"],
  "additionalProperties": false
}`)
