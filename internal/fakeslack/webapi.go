package fakeslack

import (
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// injection is a scripted failure, or a hold (see HoldNext), for the next
// call to a method.
type injection struct {
	status     int
	retryAfter int
	hold       *hold
	// code, when set, is answered as Slack's ok:false error, with HTTP
	// 200, instead of running the method, or after it with after set; so
	// is status, when set with after.
	code  string
	after bool
	// holdAnswer, when set, holds the answer of the method, run, until
	// released or the client gives up (see HoldAnswerNext).
	holdAnswer *hold
}

// RateLimit makes the next times calls to method answer HTTP 429 with a
// Retry-After header of retryAfter seconds, which slack-go reports as
// *slack.RateLimitedError.
func (s *Server) RateLimit(method string, times, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range times {
		s.inject[method] = append(s.inject[method], injection{status: http.StatusTooManyRequests, retryAfter: retryAfter})
	}
}

// FailNext makes the next call to method answer with the HTTP status (for
// example 500 or 503) and an HTML body, as Slack does, instead of running.
func (s *Server) FailNext(method string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inject[method] = append(s.inject[method], injection{status: status})
}

// ErrorNext makes the next call to method answer ok:false with the error
// code (for example "internal_error" or "channel_not_found"), as Slack
// does, instead of running.
func (s *Server) ErrorNext(method, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inject[method] = append(s.inject[method], injection{code: code})
}

// ErrorAfterNext makes the next call to method run, and then answer
// ok:false with the error code, as Slack may for internal_error and
// fatal_error ("some aspect of the operation succeeded").
func (s *Server) ErrorAfterNext(method, code string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inject[method] = append(s.inject[method], injection{code: code, after: true})
}

// FailAfterNext makes the next call to method run, and then answer with
// the HTTP status (for example 502 or 504) and an HTML body: a gateway
// that gave up on Slack's answer after Slack made the call.
func (s *Server) FailAfterNext(method string, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inject[method] = append(s.inject[method], injection{status: status, after: true})
}

// HoldAnswerNext makes the next call to method run, and its answer wait
// until release is called or the client gives up on the request: a call
// Slack made whose answer is late, or lost. arrived is closed once the
// call was made.
func (s *Server) HoldAnswerNext(method string) (arrived <-chan struct{}, release func()) {
	h := &hold{arrived: make(chan struct{}), release: make(chan struct{})}
	s.mu.Lock()
	s.inject[method] = append(s.inject[method], injection{holdAnswer: h})
	s.mu.Unlock()
	return h.arrived, func() { h.once.Do(func() { close(h.release) }) }
}

// request is a decoded Web API request.
type request struct {
	method string
	token  string
	params url.Values
	body   json.RawMessage
	json   map[string]json.RawMessage
}

// str returns a parameter from the form, the query or a top-level JSON
// string.
func (r *request) str(name string) string {
	if v := r.params.Get(name); v != "" {
		return v
	}
	if raw, ok := r.json[name]; ok {
		var v string
		if json.Unmarshal(raw, &v) == nil {
			return v
		}
	}
	return ""
}

// has reports whether the parameter was sent at all.
func (r *request) has(name string) bool {
	if _, ok := r.params[name]; ok {
		return true
	}
	_, ok := r.json[name]
	return ok
}

// raw returns a JSON parameter: a top-level JSON value, or a form value
// holding JSON text (as slack-go sends blocks).
func (r *request) raw(name string) json.RawMessage {
	if raw, ok := r.json[name]; ok {
		return raw
	}
	if v := r.params.Get(name); v != "" {
		return json.RawMessage(v)
	}
	return nil
}

// response is a JSON answer; "ok" is added when it is written.
type response map[string]any

// apiError is a Slack {"ok":false,"error":code} answer.
type apiError struct {
	code     string
	messages []string
}

func fail(code string, messages ...string) *apiError {
	return &apiError{code: code, messages: messages}
}

func parseRequest(r *http.Request) (*request, error) {
	rq := &request{method: strings.TrimPrefix(r.URL.Path, "/api/")}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		body, err := io.ReadAll(io.LimitReader(r.Body, 10<<20))
		if err != nil {
			return nil, err
		}
		rq.params = r.URL.Query()
		if len(strings.TrimSpace(string(body))) > 0 && string(body) != "null" {
			rq.body = body
			if err := json.Unmarshal(body, &rq.json); err != nil {
				return nil, err
			}
		}
	} else {
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		rq.params = r.Form
	}
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		rq.token = auth
	} else {
		rq.token = rq.str("token")
	}
	rq.params.Del("token")
	return rq, nil
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	// The call's time is its arrival: reading and parsing the body and
	// waiting for the lock are the fake's work, not the app's.
	at := s.cfg.now()
	rq, err := parseRequest(r)
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}

	s.mu.Lock()
	call := Call{Method: rq.method, Params: rq.params, Body: rq.body, At: at}
	if q := s.inject[rq.method]; len(q) > 0 && q[0].hold != nil {
		h := q[0].hold
		s.inject[rq.method] = q[1:]
		s.mu.Unlock()
		h.wait(r.Context())
		s.mu.Lock()
	}
	var injected *apiError
	var heldAnswer *hold
	injectedAfter := false
	if q := s.inject[rq.method]; len(q) > 0 && q[0].holdAnswer != nil {
		heldAnswer = q[0].holdAnswer
		s.inject[rq.method] = q[1:]
	} else if len(q) > 0 && q[0].hold == nil && q[0].code != "" {
		injected, injectedAfter = fail(q[0].code), q[0].after
		s.inject[rq.method] = q[1:]
	} else if len(q) > 0 && q[0].hold == nil {
		inj := q[0]
		s.inject[rq.method] = q[1:]
		if h := s.handler(rq.method); inj.after && h != nil {
			_, _ = h(rq)
		}
		call.Status = inj.status
		s.recordLocked(call)
		s.mu.Unlock()
		s.observe(call, nil)
		if inj.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(inj.retryAfter))
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(inj.status)
		_, _ = io.WriteString(w, "<html><body>"+http.StatusText(inj.status)+"</body></html>")
		return
	}
	var (
		res  response
		aerr *apiError
	)
	handler := s.handler(rq.method)
	switch {
	case injected != nil && injectedAfter && handler != nil:
		_, _ = handler(rq)
		aerr = injected
	case injected != nil:
		aerr = injected
	case handler == nil:
		s.unknown = append(s.unknown, rq.method)
		aerr = fail("unknown_method")
	case rq.token == "":
		aerr = fail("not_authed")
	case rq.method == "apps.connections.open" && rq.token != s.cfg.appToken,
		rq.method != "apps.connections.open" && rq.token != s.cfg.botToken:
		aerr = fail("invalid_auth")
	default:
		res, aerr = handler(rq)
	}
	call.Status = http.StatusOK
	if aerr != nil {
		call.Error = aerr.code
		res = response{"ok": false, "error": aerr.code}
		if len(aerr.messages) > 0 {
			res["response_metadata"] = map[string]any{"messages": aerr.messages}
		}
	} else {
		if res == nil {
			res = response{}
		}
		res["ok"] = true
	}
	s.recordLocked(call)
	s.mu.Unlock()
	s.observe(call, res)
	if heldAnswer != nil {
		heldAnswer.wait(r.Context())
	}

	s.logf("%s -> %s", rq.method, orOK(call.Error))
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_ = json.NewEncoder(w).Encode(res)
}

func orOK(code string) string {
	if code == "" {
		return "ok"
	}
	return code
}

func (s *Server) recordLocked(c Call) {
	s.calls = append(s.calls, c)
	s.notifyLocked()
}

// handler returns the implementation of a Web API method, nil for methods
// the fake does not know. Handlers run with s.mu held.
func (s *Server) handler(method string) func(*request) (response, *apiError) {
	switch method {
	case "api.test":
		return func(*request) (response, *apiError) { return nil, nil }
	case "auth.test":
		return s.authTest
	case "apps.connections.open":
		return s.appsConnectionsOpen
	case "chat.postMessage":
		return s.chatPostMessage
	case "chat.postEphemeral":
		return s.chatPostEphemeral
	case "chat.update":
		return s.chatUpdate
	case "chat.delete":
		return s.chatDelete
	case "chat.getPermalink":
		return s.chatGetPermalink
	case "chat.startStream":
		return s.chatStartStream
	case "chat.appendStream":
		return s.chatAppendStream
	case "chat.stopStream":
		return s.chatStopStream
	case "views.open":
		return s.viewsOpen
	case "views.push":
		return s.viewsPush
	case "views.update":
		return s.viewsUpdate
	case "views.publish":
		return s.viewsPublish
	case "conversations.open":
		return s.conversationsOpen
	case "conversations.info":
		return s.conversationsInfo
	case "conversations.members":
		return s.conversationsMembers
	case "conversations.replies":
		return s.conversationsReplies
	case "users.info":
		return s.usersInfo
	case "usergroups.users.list":
		return s.usergroupsUsersList
	case "assistant.threads.setStatus":
		return s.assistantThreadsSetStatus
	case "reactions.add":
		return s.reactionsAdd
	}
	return nil
}

// serveResponseURL accepts posts to the response_url of interactions and
// slash commands. They are recorded as calls of the pseudo-method
// "response_url" with the JSON body; nothing else happens.
func (s *Server) serveResponseURL(w http.ResponseWriter, r *http.Request) {
	at := s.cfg.now()
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	s.mu.Lock()
	s.recordLocked(Call{Method: "response_url", Params: url.Values{"path": {r.URL.Path}}, Body: body, At: at, Status: http.StatusOK})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = io.WriteString(w, `{"ok":true}`)
}
