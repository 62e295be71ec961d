package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sashabaranov/go-openai"
	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// startWeb runs the playground with the demo config and its page handler
// on an httptest server.
func startWeb(t *testing.T) (*playground, *httptest.Server) {
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

// TestPageIsLive follows a turn through the page: the event stream
// announces changes, the thread shows the bot's status while the model
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
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("events: Content-Type %q", ct)
	}
	events := bufio.NewReader(resp.Body)
	readEvent := func() string {
		t.Helper()
		line, err := events.ReadString('\n')
		if err != nil {
			t.Fatalf("events: %v", err)
		}
		_, _ = events.ReadString('\n') // the blank line after it
		return strings.TrimSpace(line)
	}
	if got := readEvent(); got != "data: change" {
		t.Fatalf("first event: got %q", got)
	}

	code, body := postJSON(t, srv, "/api/send", map[string]string{"user": userYou, "conv": channelOps, "text": "list files"})
	if code != http.StatusOK {
		t.Fatalf("send: %d %s", code, body)
	}
	var sent struct{ TS string }
	_ = json.Unmarshal([]byte(body), &sent)
	if got := readEvent(); got != "data: change" {
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
	// Another host name (DNS rebinding) is refused.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/", nil)
	req.Host = "evil.example:80"
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("another Host: got %d, want 403", resp.StatusCode)
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
// and stops cleanly when its context ends, an open event stream included.
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
	events, err := http.Get(pageURL + "events")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Body.Close()

	cancel() // as Ctrl-C does
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	if _, err := io.ReadAll(events.Body); err != nil && !strings.Contains(err.Error(), "EOF") {
		t.Logf("event stream ended with %v", err)
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
