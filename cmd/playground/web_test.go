package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/sashabaranov/go-openai"
	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// startWeb runs the playground with the demo config and its page handler
// on an httptest server.
func startWeb(t *testing.T) (*playground, *httptest.Server) {
	t.Helper()
	return startWebWith(t, nil)
}

// startWebWith is startWeb, with setup (if not nil) changing the page's
// server before it serves.
func startWebWith(t *testing.T, setup func(*web)) (*playground, *httptest.Server) {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REDIS_URL", "")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pg, err := start(context.Background(), options{}, log)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(pg.close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWeb(pg, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(w)
	}
	srv := httptest.NewUnstartedServer(w.handler())
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return pg, srv
}

func postJSON(t *testing.T, srv *httptest.Server, path string, body any) (int, string) {
	t.Helper()
	raw, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func getPanes(t *testing.T, srv *httptest.Server, user, conv, thread string) panesReply {
	t.Helper()
	resp, err := http.Get(srv.URL + "/panes?" + url.Values{"user": {user}, "conv": {conv}, "thread": {thread}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p panesReply
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatalf("panes: %v", err)
	}
	return p
}

// waitSlack waits, on the fake's change signal, until cond holds.
func waitSlack(t *testing.T, pg *playground, what string, cond func() bool) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		changed := pg.slack.Changed()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestPageIsLive follows a turn through the page: the change notices
// announce changes, the thread shows the bot's status while the model
// works, and then the answer.
func TestPageIsLive(t *testing.T) {
	pg, srv := startWeb(t)
	release := make(chan struct{})
	pg.fakeModel.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		<-release
		return scriptedModel(req)
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := dialEvents(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	next := func() string {
		t.Helper()
		got, err := readEvent(events)
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		return got
	}
	if got := next(); got != "change" {
		t.Fatalf("first notice: got %q", got)
	}

	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "list files"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ TS string }
	_ = json.Unmarshal([]byte(body), &sent)
	if got := next(); got != "change" {
		t.Fatalf("after a message: got %q", got)
	}

	waitSlack(t, pg, "the bot's status", func() bool { return pg.slack.ThreadStatus(channelOps, sent.TS) != "" })
	p := getPanes(t, srv, userYou, channelOps, sent.TS)
	for pane, html := range map[string]string{"channel": string(p.Main), "thread": string(p.Thread)} {
		if !strings.Contains(html, `class="bot-status"`) {
			t.Errorf("%s pane while the model works has no status:\n%s", pane, html)
		}
	}

	close(release)
	waitSlack(t, pg, "the answer", func() bool {
		for _, m := range pg.slack.Thread(channelOps, sent.TS) {
			if m.BotID != "" && strings.Contains(m.Text, "workspace_list:") && !m.Streaming {
				return true
			}
		}
		return false
	})
	waitSlack(t, pg, "the status to clear", func() bool { return pg.slack.ThreadStatus(channelOps, sent.TS) == "" })
	p = getPanes(t, srv, userYou, channelOps, sent.TS)
	if !strings.Contains(string(p.Thread), "workspace_list:") || !strings.Contains(string(p.Thread), "scratch.csv") {
		t.Errorf("thread pane lacks the answer:\n%s", p.Thread)
	}
	if strings.Contains(string(p.Thread), `class="bot-status"`) {
		t.Errorf("thread pane still shows a status:\n%s", p.Thread)
	}
	if !strings.Contains(string(p.Main), `class="replies" data-thread="`+sent.TS+`"`) {
		t.Errorf("channel pane lacks the thread's replies link:\n%s", p.Main)
	}
}

// The in-process fake Slack takes the token in a form post, which any web
// page may send to 127.0.0.1: its tokens are the playground's own, not the
// well-known defaults, so such a post cannot speak as the bot.
func TestFakeSlackTokensAreNotTheDefaults(t *testing.T) {
	pg, _ := startWeb(t)
	if pg.slack.BotToken() == fakeslack.DefaultBotToken || pg.slack.AppToken() == fakeslack.DefaultAppToken {
		t.Fatalf("the playground's fake Slack uses the default tokens")
	}
	form := url.Values{"token": {fakeslack.DefaultBotToken}, "channel": {channelOps}, "text": {"hi from another page"}}
	resp, err := http.PostForm(pg.slack.APIURL()+"chat.postMessage", form)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if got.OK {
		t.Errorf("a post with the default token was accepted")
	}
	if msgs := pg.slack.Messages(channelOps); len(msgs) != 0 {
		t.Errorf("a post with the default token reached #ops: %+v", msgs)
	}
}

func TestPageRefusals(t *testing.T) {
	pg, srv := startWeb(t)
	send := func(user, conv, text string) map[string]string {
		return map[string]string{"user": user, "conv": conv, "text": text}
	}
	for _, tc := range []struct {
		name string
		path string
		body any
		want int
	}{
		{"unknown user", "/api/send", send("U0NOBODY99", channelOps, "hi"), http.StatusBadRequest},
		{"outsider in #ops", "/api/send", send(userDave, channelOps, "hi"), http.StatusForbidden},
		{"bob in #approvals", "/api/send", send(userBob, channelApprov, "hi"), http.StatusForbidden},
		{"empty message", "/api/send", send(userYou, channelOps, "  "), http.StatusBadRequest},
		{"longer than Slack takes", "/api/send", send(userYou, channelOps, strings.Repeat("*a ", 13334)), http.StatusBadRequest},
		{"unknown command", "/api/send", send(userYou, channelOps, "/deploy now"), http.StatusBadRequest},
		{"click on no message", "/api/click", map[string]string{"user": userYou, "channel": channelOps, "ts": "1.000001", "action_id": "approve"}, http.StatusBadRequest},
		{"submit no modal", "/api/submit", map[string]any{"user": userYou, "view_id": "VNOPE"}, http.StatusBadRequest},
		{"close no modal", "/api/close", map[string]any{"user": userYou, "view_id": "VNOPE"}, http.StatusBadRequest},
	} {
		if code, body := postJSON(t, srv, tc.path, tc.body); code != tc.want {
			t.Errorf("%s: got %d %s, want %d", tc.name, code, body, tc.want)
		}
	}
	if msgs := pg.slack.Messages(channelOps); len(msgs) != 0 {
		t.Errorf("refused posts reached #ops: %+v", msgs)
	}

	// A cross-site form cannot post: only JSON is accepted.
	resp, err := http.Post(srv.URL+"/api/send", "application/x-www-form-urlencoded", strings.NewReader("user="+userYou+"&text=hi"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("a form post: got %d, want 415", resp.StatusCode)
	}
	// Another host name (DNS rebinding) is refused, with its port or
	// without.
	for _, host := range []string{"evil.example:80", "evil.example", "[evil.example]"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Host = host
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("another Host %s: got %d, want 403", host, resp.StatusCode)
		}
	}
	// A loopback name on another port (an SSH tunnel's), or on port 80,
	// which a browser leaves out, is this server.
	for _, host := range []string{"localhost:9000", "127.0.0.1:9000", "[::1]:9000", "127.0.0.1", "localhost", "[::1]"} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("Host %s (a loopback name): got %d, want 200", host, resp.StatusCode)
		}
	}
	// Another site's page cannot open the socket of change notices.
	ws, wsResp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/events", http.Header{"Origin": {"http://evil.example"}})
	if err == nil {
		ws.Close()
		t.Error("another origin opened the socket of change notices")
	} else if wsResp == nil || wsResp.StatusCode != http.StatusForbidden {
		t.Errorf("another origin's socket: got %v, want 403", err)
	}
	if wsResp != nil {
		wsResp.Body.Close()
	}
	// The page itself names the scripted model and every person.
	resp, err = http.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("page CSP: %q, want scripts from the page only and no framing", csp)
	}
	if xfo := resp.Header.Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("X-Frame-Options: %q, want DENY", xfo)
	}
	for _, w := range []string{"scripted demo model", "requester", "approver", "admin", "not in #ops"} {
		if !strings.Contains(string(page), w) {
			t.Errorf("the page lacks %q", w)
		}
	}
}

// A reply names a thread of the conversation it is posted in: the ts of a
// top-level message there. The page keeps an open thread's ts across a
// switch of person, and another person's DM does not have it.
func TestReplyNeedsAThreadOfTheConversation(t *testing.T) {
	pg, srv := startWeb(t)
	msg := func(user, conv, thread, text string) map[string]string {
		return map[string]string{"user": user, "conv": conv, "thread": thread, "text": text}
	}
	sent := func(body string) string {
		var r struct{ TS string }
		if err := json.Unmarshal([]byte(body), &r); err != nil || r.TS == "" {
			t.Fatalf("send answered %s, want a ts", body)
		}
		return r.TS
	}
	code, body := postJSON(t, srv, "/api/send", msg(userYou, "dm", "", "hello"))
	if code != http.StatusOK {
		t.Fatalf("send in your DM: %d %s", code, body)
	}
	parent := sent(body)
	code, body = postJSON(t, srv, "/api/send", msg(userYou, "dm", parent, "a reply"))
	if code != http.StatusOK {
		t.Fatalf("reply in your DM's thread: %d %s", code, body)
	}
	reply := sent(body)

	for _, tc := range []struct {
		name string
		body map[string]string
	}{
		{"alice, in her DM, to a thread of yours", msg(userAlice, "dm", parent, "hi")},
		{"you, in #ops, to a thread of your DM", msg(userYou, channelOps, parent, "hi")},
		{"you, to a reply", msg(userYou, "dm", reply, "hi")},
		{"you, to no message", msg(userYou, "dm", "1.000001", "hi")},
	} {
		code, body := postJSON(t, srv, "/api/send", tc.body)
		if code != http.StatusBadRequest || !strings.Contains(body, "no thread "+tc.body["thread"]) {
			t.Errorf("%s: got %d %s, want 400 naming the thread", tc.name, code, strings.TrimSpace(body))
		}
	}
	for _, ch := range []string{pg.slack.DMChannel(userAlice), channelOps} {
		if msgs := pg.slack.Messages(ch); len(msgs) != 0 {
			t.Errorf("refused replies reached %s: %+v", ch, msgs)
		}
	}
	// The bot answers what was sent; only the refused replies say "hi".
	for _, m := range pg.slack.Messages(pg.slack.DMChannel(userYou)) {
		if m.Text == "hi" {
			t.Errorf("a refused reply reached your DM: %+v", m)
		}
	}
}

// TestDefaultModeServesThePage runs the program as `go run
// ./cmd/playground -no-open` does: it prints the page's URL, serves it,
// and stops cleanly when its context ends, an open socket of change
// notices included.
func TestDefaultModeServesThePage(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REDIS_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, strings.NewReader(""), outW, []string{"-no-open", "-addr", "127.0.0.1:0"})
		outW.Close()
		done <- err
	}()
	lines := bufio.NewScanner(out)
	var pageURL string
	for pageURL == "" && lines.Scan() {
		if u, ok := strings.CutPrefix(strings.TrimSpace(lines.Text()), "Open "); ok {
			pageURL = u
		}
	}
	go func() { _, _ = io.Copy(io.Discard, out) }() // the rest of the output
	if !strings.HasPrefix(pageURL, "http://127.0.0.1:") {
		t.Fatalf("no page URL printed (got %q)", pageURL)
	}
	resp, err := http.Get(pageURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), "Toolgate playground") {
		t.Fatalf("GET %s: %d\n%s", pageURL, resp.StatusCode, page)
	}
	events, err := dialEvents(context.Background(), strings.TrimSuffix(pageURL, "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	if _, err := readEvent(events); err != nil {
		t.Fatalf("events: %v", err)
	}

	cancel() // as Ctrl-C does
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	// The socket ends with the server.
	_ = events.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := readEvent(events); err != nil {
			if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
				t.Errorf("the change notices ended with %v, want a close going away", err)
			}
			break
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "toolgate-playground-*")); len(left) > 0 {
		t.Errorf("temporary directories left behind: %v", left)
	}
}

// TestPageShowsStreams shows an answer while it is streamed: the text so
// far, as Markdown, marked as streaming until the stream stops.
func TestPageShowsStreams(t *testing.T) {
	pg, srv := startWeb(t)
	api := slack.New(pg.slack.BotToken(), slack.OptionAPIURL(pg.slack.APIURL()))
	dm := pg.slack.DMChannel(userYou)
	parent := pg.slack.Post(dm, userYou, "hello") // the bot answers it, too; the stream below is ours
	_, ts, err := api.StartStream(dm, slack.MsgOptionTS(parent), slack.MsgOptionMarkdownText("**Deleting** `scratch.csv` &lt;now&gt;"))
	if err != nil {
		t.Fatal(err)
	}
	msg := func() string {
		p := getPanes(t, srv, userYou, "dm", parent)
		html := string(p.Thread)
		at := strings.Index(html, `data-ts="`+ts+`"`)
		if at < 0 {
			t.Fatalf("the streamed message %s is not in the thread:\n%s", ts, html)
		}
		start := strings.LastIndex(html[:at], `<div class="msg`)
		return html[start:]
	}
	got := msg()
	for _, w := range []string{`<div class="msg streaming"`, `<div class="markdown"><div class="md-p"><b>Deleting</b> <code>scratch.csv</code> &lt;now&gt;`} {
		if !strings.Contains(got, w) {
			t.Errorf("while streaming, the message lacks %s:\n%s", w, got)
		}
	}
	if _, _, err := api.AppendStream(dm, ts, slack.MsgOptionMarkdownText(" done.")); err != nil {
		t.Fatal(err)
	}
	if got := msg(); !strings.Contains(got, "&lt;now&gt; done.") {
		t.Errorf("after an append, the message lacks the new text:\n%s", got)
	}
	if _, _, err := api.StopStream(dm, ts); err != nil {
		t.Fatal(err)
	}
	if got := msg(); strings.HasPrefix(got, `<div class="msg streaming"`) || !strings.Contains(got, "done.") {
		t.Errorf("after the stream stopped:\n%s", got)
	}
}

// An approver with the page open in two tabs submits invalid JSON in the
// Edit form of one. The other tab fetched its panes when the fake Slack
// announced the submission's outcome, before the page kept the form's
// inline errors: the page must announce them, so that the other tab
// fetches its panes again and shows them. Other changes (the bot's
// look-ups, the fake's pings) are announced too, now and then, so the
// test looks at the page's own announcement, not at whether some change
// comes along.
func TestInlineErrorsAreAnnounced(t *testing.T) {
	type tab struct {
		announced <-chan struct{} // the page's own announcement, as /events waits for it
		events    *websocket.Conn
		sawErrors bool
		err       error
	}
	tabs := make(chan tab, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg, srv := startWebWith(t, func(w *web) {
		base := "http://" + w.host
		submit := w.submitView
		w.submitView = func(user, viewID string, values map[string]map[string]string, meta string) (json.RawMessage, error) {
			ack, err := submit(user, viewID, values, meta)
			// The fake Slack has announced its last change of the
			// submission. The other tab, woken by it, waits for the
			// next change and fetches its panes, as the page does.
			var tb tab
			defer func() { tabs <- tb }()
			tb.announced = w.ownChanged()
			tb.events, tb.err = dialEvents(ctx, base)
			if tb.err != nil {
				return ack, err
			}
			if _, tb.err = readEvent(tb.events); tb.err != nil {
				return ack, err
			}
			var p panesReply
			if tb.err = fetchPanes(base, userAlice, channelOps, &p); tb.err == nil {
				tb.sawErrors = strings.Contains(string(p.Modal), "bk-error")
			}
			return ack, err
		}
	})

	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "delete report.csv"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ TS string }
	_ = json.Unmarshal([]byte(body), &sent)
	var card string
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, sent.TS) {
			if m.BotID != "" && strings.Contains(string(m.Blocks), `"action_id":"edit"`) {
				card = m.TS
				return true
			}
		}
		return false
	})
	if code, body := postJSON(t, srv, "/api/click", map[string]string{"user": userAlice, "channel": channelOps, "ts": card, "action_id": "edit"}); code != http.StatusOK {
		t.Fatalf("click Edit: %d %s", code, body)
	}
	var modal fakeslack.View
	waitSlack(t, pg, "the Edit form", func() bool {
		modals := pg.slack.OpenModals(userAlice)
		if len(modals) == 0 {
			return false
		}
		modal = modals[len(modals)-1]
		return true
	})

	code, body = postJSON(t, srv, "/api/submit", map[string]any{
		"user": userAlice, "view_id": modal.ID,
		"values": map[string]map[string]string{"edit_args": {"edit_args_input": `{"path": "report.csv",`}},
	})
	if code != http.StatusOK || !strings.Contains(body, `"errors":{`) {
		t.Fatalf("submit: %d %s, want inline errors", code, body)
	}
	other := <-tabs
	if other.events != nil {
		defer other.events.Close()
	}
	if other.err != nil {
		t.Fatalf("the other tab: %v", other.err)
	}
	if other.sawErrors {
		t.Fatal("the other tab saw the errors before the page kept them")
	}
	// The submission has been answered, so the errors are kept, and
	// announced since the other tab last fetched its panes.
	select {
	case <-other.announced:
	default:
		t.Fatal("the page kept the inline errors without announcing them")
	}

	// The other tab's notices say so, and its panes then show the error.
	// The bound only turns a stream that says nothing into a failure.
	next := make(chan error, 1)
	go func() {
		_, err := readEvent(other.events)
		next <- err
	}()
	select {
	case err := <-next:
		if err != nil {
			t.Fatalf("the other tab's events: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the other tab's notices announced no change after the inline errors were kept")
	}
	var p panesReply
	if err := fetchPanes(srv.URL, userAlice, channelOps, &p); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(p.Modal), `class="bk-error"`) || !strings.Contains(string(p.Modal), "bk-has-error") {
		t.Errorf("after the announcement, the Edit form lacks its inline error:\n%s", p.Modal)
	}
}

// dialEvents opens the socket of change notices of the page at base
// (http://host:port), as the page does from its own origin.
func dialEvents(ctx context.Context, base string) (*websocket.Conn, error) {
	h := http.Header{"Origin": {base}}
	c, resp, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(base, "http")+"/events", h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	return c, err
}

// readEvent reads one change notice.
func readEvent(c *websocket.Conn) (string, error) {
	_, msg, err := c.ReadMessage()
	return string(msg), err
}

// fetchPanes is getPanes for any goroutine: it returns its error.
func fetchPanes(base, user, conv string, p *panesReply) error {
	resp, err := http.Get(base + "/panes?" + url.Values{"user": {user}, "conv": {conv}}.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("panes: %s", resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(p)
}

// The bot's streamed answer naming a tool and a file with underscores in
// them shows both as written in the thread pane.
func TestStreamedAnswerKeepsUnderscores(t *testing.T) {
	pg, srv := startWeb(t)
	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "write hi to tmp/a_b.txt"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ TS string }
	_ = json.Unmarshal([]byte(body), &sent)
	waitSlack(t, pg, "the answer", func() bool {
		for _, m := range pg.slack.Thread(channelOps, sent.TS) {
			if m.BotID != "" && strings.Contains(m.Text, "wrote") && !m.Streaming {
				return true
			}
		}
		return false
	})
	p := getPanes(t, srv, userYou, channelOps, sent.TS)
	if !strings.Contains(string(p.Thread), "workspace_write: wrote 3 bytes to tmp/a_b.txt") {
		t.Errorf("the thread pane shows:\n%s\nwant the answer as written", p.Thread)
	}
}

// Slack takes one submission of a modal at a time: a second Submit while
// the first is under way is refused, and the bot gets one submission.
func TestModalIsSubmittedOnce(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int64
	pg, srv := startWebWith(t, func(w *web) {
		inner := w.submitView
		w.submitView = func(user, viewID string, values map[string]map[string]string, meta string) (json.RawMessage, error) {
			if calls.Add(1) == 1 {
				close(entered)
				<-release // the first is under way until the second was answered
			}
			return inner(user, viewID, values, meta)
		}
	})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	var card string
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"reject"`) {
				card = m.TS
				return true
			}
		}
		return false
	})
	if code, body := postJSON(t, srv, "/api/click", map[string]string{"user": userAlice, "channel": channelOps, "ts": card, "action_id": "reject"}); code != http.StatusOK {
		t.Fatalf("click: %d %s", code, body)
	}
	waitSlack(t, pg, "the reject modal", func() bool { return len(pg.slack.OpenModals(userAlice)) > 0 })
	v := pg.slack.OpenModals(userAlice)[0]
	var view struct {
		Blocks []struct {
			Type    string `json:"type"`
			BlockID string `json:"block_id"`
			Element struct {
				ActionID string `json:"action_id"`
			} `json:"element"`
		} `json:"blocks"`
	}
	if err := json.Unmarshal(v.JSON, &view); err != nil {
		t.Fatal(err)
	}
	values := map[string]map[string]string{}
	for _, b := range view.Blocks {
		if b.Type == "input" {
			values[b.BlockID] = map[string]string{b.Element.ActionID: "not now"}
		}
	}
	submit, _ := json.Marshal(map[string]any{"user": userAlice, "view_id": v.ID, "values": values})
	first := make(chan string, 1)
	go func() {
		resp, err := http.Post(srv.URL+"/api/submit", "application/json", bytes.NewReader(submit))
		if err != nil {
			first <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		first <- fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
	}()
	<-entered
	code, body := postJSON(t, srv, "/api/submit", map[string]any{"user": userAlice, "view_id": v.ID, "values": values})
	close(release)
	if code != http.StatusConflict {
		t.Errorf("a second submission while the first is under way: %d %s, want %d", code, body, http.StatusConflict)
	}
	if got := <-first; !strings.HasPrefix(got, "200 ") {
		t.Errorf("the first submission: %s", got)
	}
	subs := 0
	for _, e := range pg.slack.Envelopes() {
		if e.InteractionType == "view_submission" {
			subs++
		}
	}
	if subs != 1 {
		t.Errorf("the bot got %d submissions of one modal", subs)
	}
	if code, body := postJSON(t, srv, "/api/submit", map[string]any{"user": userAlice, "view_id": v.ID, "values": values}); code != http.StatusBadRequest {
		t.Errorf("a submission of the closed modal: %d %s, want %d", code, body, http.StatusBadRequest)
	}
}

// A click on a button the page no longer has (the bot changed the
// message or the view since it was shown) is refused with a message for
// the person, not the fake Slack's own words.
func TestStaleClickIsExplained(t *testing.T) {
	_, srv := startWeb(t)
	for _, req := range []map[string]string{
		{"user": userAlice, "channel": channelOps, "ts": "1.000001", "action_id": "approve"},
		{"user": userAlice, "view_id": "V0GONE0001", "action_id": "approve"},
	} {
		code, body := postJSON(t, srv, "/api/click", req)
		if code != http.StatusBadRequest || strings.Contains(body, "fakeslack") || !strings.Contains(body, "changed since the page showed it") {
			t.Errorf("click %v: %d %s", req, code, body)
		}
	}
}

// A modal's submission or a slash command that the fake Slack could not
// deliver (the bot did not ack in time, or it answered with a view Slack
// refuses) is refused with a message for the person, not the fake
// Slack's own words.
func TestFailedSubmissionIsExplained(t *testing.T) {
	var fail atomic.Pointer[error] // the error submitView and slash return
	pg, srv := startWebWith(t, func(w *web) {
		w.submitView = func(string, string, map[string]map[string]string, string) (json.RawMessage, error) {
			return nil, *fail.Load()
		}
		w.slash = func(string, string, string, string) (json.RawMessage, error) {
			return nil, *fail.Load()
		}
	})
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	var card string
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"reject"`) {
				card = m.TS
				return true
			}
		}
		return false
	})
	if code, body := postJSON(t, srv, "/api/click", map[string]string{"user": userAlice, "channel": channelOps, "ts": card, "action_id": "reject"}); code != http.StatusOK {
		t.Fatalf("click: %d %s", code, body)
	}
	waitSlack(t, pg, "the reject modal", func() bool { return len(pg.slack.OpenModals(userAlice)) > 0 })
	view := pg.slack.OpenModals(userAlice)[0].ID
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("waiting for ack of E0TEST0001: %w", fakeslack.ErrTimeout), "did not answer within 3s"},
		{errors.New("response_action update refused: invalid_arguments [no title]"), "a view Slack would refuse"},
	} {
		fail.Store(&c.err)
		code, body := postJSON(t, srv, "/api/submit", map[string]any{"user": userAlice, "view_id": view, "values": map[string]any{}})
		if code != http.StatusBadGateway || !strings.Contains(body, c.want) || strings.Contains(body, "fakeslack") || strings.Contains(body, "refused:") {
			t.Errorf("submit failing with %q: %d %s, want %d and %q", c.err, code, body, http.StatusBadGateway, c.want)
		}
	}
	timeout := fmt.Errorf("waiting for ack of E0TEST0002: %w", fakeslack.ErrTimeout)
	fail.Store(&timeout)
	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "/approvals pending"})
	if code != http.StatusBadGateway || !strings.Contains(body, "did not answer within 3s") || strings.Contains(body, "fakeslack") {
		t.Errorf("/approvals failing: %d %s", code, body)
	}
}

// The bot answers a click on its Home tab (a refusal, or an explanation)
// in the person's DM with it, as Slack's app Messages tab: the sidebar
// marks that DM as unread, and the Home tab shows the answer, or a click
// there that is refused seems to do nothing.
func TestHomeClickAnswerIsShown(t *testing.T) {
	pg, srv := startWeb(t)
	first := pg.slack.Mention(channelOps, userYou, "write one to notes.md")
	second := pg.slack.Mention(channelOps, userYou, "write two to notes.md")
	approveValue := regexp.MustCompile(`"action_id":"approve"[^}]*"value":"([^"]+)"|"value":"([^"]+)"[^}]*"action_id":"approve"`)
	cardOf := func(thread string) (ts, value string) {
		for _, m := range pg.slack.Thread(channelOps, thread) {
			if v := approveValue.FindStringSubmatch(string(m.Blocks)); v != nil {
				return m.TS, v[1] + v[2]
			}
		}
		return "", ""
	}
	var card1, value1 string
	waitSlack(t, pg, "both cards", func() bool {
		card1, value1 = cardOf(first)
		card2, _ := cardOf(second)
		return card1 != "" && card2 != ""
	})
	pg.slack.OpenHome(userAlice)
	waitSlack(t, pg, "alice's Home with both calls", func() bool {
		v, ok := pg.slack.HomeView(userAlice)
		return ok && strings.Count(string(v.JSON), `"action_id":"approve"`) == 2
	})
	home, _ := pg.slack.HomeView(userAlice)
	// Bob approves the first call in #ops; alice's Home tab, not yet
	// redrawn, still offers it.
	if _, err := pg.slack.Click(userBob, channelOps, card1, "approve", ""); err != nil {
		t.Fatal(err)
	}
	waitSlack(t, pg, "the first call approved", func() bool {
		for _, m := range pg.slack.Thread(channelOps, first) {
			if m.TS == card1 && strings.Contains(string(m.Blocks), "Approved by") {
				return true
			}
		}
		return false
	})
	dm := pg.slack.DMChannel(userAlice)
	before := len(pg.slack.Messages(dm))
	if p := getPanes(t, srv, userAlice, "home", ""); strings.Contains(string(p.Sidebar), "unread") {
		t.Fatalf("alice's sidebar marks her DM before the bot wrote to her:\n%s", p.Sidebar)
	}
	code, body := postJSON(t, srv, "/api/click", map[string]string{"user": userAlice, "view_id": home.ID, "action_id": "approve", "value": value1})
	if code != http.StatusOK {
		t.Fatalf("click: %d %s", code, body)
	}
	var answer string
	waitSlack(t, pg, "the bot's answer to alice", func() bool {
		if ms := pg.slack.Messages(dm); len(ms) > before {
			answer = ms[len(ms)-1].Text
			return true
		}
		return false
	})
	p := getPanes(t, srv, userAlice, "home", "")
	if !strings.Contains(string(p.Sidebar), "unread") {
		t.Errorf("the bot answered alice's click in her DM (%q), but the sidebar does not mark the DM:\n%s", answer, p.Sidebar)
	}
	if !strings.Contains(string(p.Main), "already") {
		t.Errorf("the bot answered alice's click in her DM (%q), but her Home tab does not show it:\n%s", answer, p.Main)
	}
	// Once she has looked at her DM, it is read, and the Home tab no
	// longer repeats the answer.
	getPanes(t, srv, userAlice, "dm", "")
	p = getPanes(t, srv, userAlice, "home", "")
	if strings.Contains(string(p.Sidebar), "unread") || strings.Contains(string(p.Main), "home-notice") {
		t.Errorf("after alice read her DM, the sidebar:\n%s\nthe Home tab:\n%s", p.Sidebar, p.Main)
	}
	// The answer is hers: bob's page marks nothing.
	if p := getPanes(t, srv, userBob, "home", ""); strings.Contains(string(p.Sidebar), "unread") {
		t.Errorf("bob's sidebar marks his DM:\n%s", p.Sidebar)
	}
}
