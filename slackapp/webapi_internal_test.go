package slackapp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/slack-go/slack"
)

// fakeChat answers chat.postMessage with the statuses given, one per
// call, then with a message; it records the JSON body of each call, its
// blocks as JSON text, with its path, content type and authorization.
type fakeChat struct {
	mu       sync.Mutex
	statuses []int
	forms    []map[string]string
}

func (f *fakeChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Channel  string          `json:"channel"`
		ThreadTS string          `json:"thread_ts"`
		TS       string          `json:"ts"`
		Blocks   json.RawMessage `json:"blocks"`
		Text     string          `json:"text"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.mu.Lock()
	f.forms = append(f.forms, map[string]string{"path": r.URL.Path, "auth": r.Header.Get("Authorization"), "type": r.Header.Get("Content-Type"),
		"channel": body.Channel, "thread_ts": body.ThreadTS, "ts": body.TS, "blocks": string(body.Blocks), "text": body.Text})
	var status int
	if len(f.statuses) > 0 {
		status, f.statuses = f.statuses[0], f.statuses[1:]
	}
	f.mu.Unlock()
	switch status {
	case 0:
		_, _ = w.Write([]byte(`{"ok":true,"channel":"C1","ts":"1.5","message":{"blocks":[{"type":"divider"}]}}`))
	case http.StatusOK:
		_, _ = w.Write([]byte(`{"ok":false,"error":"channel_not_found"}`))
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(status)
	default:
		w.WriteHeader(status)
		_, _ = w.Write([]byte("<html>down</html>"))
	}
}

func chatApp(t *testing.T, f *fakeChat) *App {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: srv.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// chat posts and updates with a JSON body, returns the ts, retries 429
// and 5xx answers with the same body (not the 5xx of a card's post, which
// a gateway's may follow after Slack made it), and reports Slack's errors
// as slack-go does.
func TestChatPostsUpdatesAndRetries(t *testing.T) {
	ctx := context.Background()
	blocks := []slack.Block{slack.NewDividerBlock()}
	t.Run("post in a thread after a 429 and a 503", func(t *testing.T) {
		f := &fakeChat{statuses: []int{http.StatusTooManyRequests, http.StatusServiceUnavailable}}
		ts, err := chatApp(t, f).chat(ctx, chatMessage{channel: "C1", thread: "1.1", blocks: blocks, text: "hi"})
		if err != nil || ts != "1.5" {
			t.Fatalf("chat() = %q, %v; want 1.5, nil", ts, err)
		}
		if len(f.forms) != 3 {
			t.Fatalf("%d calls; want 3 (two retries)", len(f.forms))
		}
		for i, form := range f.forms {
			want := map[string]string{"path": "/chat.postMessage", "auth": "Bearer xoxb-test", "type": "application/json; charset=utf-8", "channel": "C1", "thread_ts": "1.1", "ts": "", "blocks": `[{"type":"divider"}]`, "text": "hi"}
			for k, v := range want {
				if form[k] != v {
					t.Errorf("call %d: %s = %q; want %q", i+1, k, form[k], v)
				}
			}
		}
	})
	t.Run("update", func(t *testing.T) {
		f := &fakeChat{}
		if _, err := chatApp(t, f).chat(ctx, chatMessage{channel: "C1", ts: "1.5", blocks: blocks, text: "hi"}); err != nil {
			t.Fatal(err)
		}
		if f.forms[0]["path"] != "/chat.update" || f.forms[0]["ts"] != "1.5" {
			t.Errorf("update sent %v; want chat.update with ts 1.5", f.forms[0])
		}
	})
	t.Run("slack error", func(t *testing.T) {
		_, err := chatApp(t, &fakeChat{statuses: []int{http.StatusOK}}).chat(ctx, chatMessage{channel: "C1", blocks: blocks})
		var se slack.SlackErrorResponse
		if !errors.As(err, &se) || se.Err != "channel_not_found" {
			t.Errorf("chat() error = %v; want slack.SlackErrorResponse channel_not_found", err)
		}
	})
	t.Run("a card's post's server error", func(t *testing.T) {
		f := &fakeChat{statuses: []int{http.StatusServiceUnavailable}}
		_, err := chatApp(t, f).chat(withoutServerRetries(ctx), chatMessage{channel: "C1", blocks: blocks})
		var se slack.StatusCodeError
		if !errors.As(err, &se) || se.Code != http.StatusServiceUnavailable {
			t.Errorf("chat() error = %v; want slack.StatusCodeError 503", err)
		}
		if n := len(f.forms); n != 1 {
			t.Errorf("%d calls; want 1: the post may have been made", n)
		}
	})
	t.Run("server errors past the retries", func(t *testing.T) {
		f := &fakeChat{statuses: []int{500, 500, 500, 500, 500, 500}}
		_, err := chatApp(t, f).chat(ctx, chatMessage{channel: "C1", blocks: blocks})
		var se slack.StatusCodeError
		if !errors.As(err, &se) || se.Code != 500 {
			t.Errorf("chat() error = %v; want slack.StatusCodeError 500", err)
		}
		if n := len(f.forms); n != maxWebRetries+1 {
			t.Errorf("%d calls; want %d", n, maxWebRetries+1)
		}
	})
}

// A post whose connection broke is not sent again: it may have been made.
func TestChatDoesNotRetryBrokenConnections(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: srv.URL}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.chat(context.Background(), chatMessage{channel: "C1", text: "hi"}); err == nil {
		t.Fatal("chat() over a broken connection succeeded")
	}
	if got := n.Load(); got != 1 {
		t.Errorf("%d calls; want 1", got)
	}
}

// A call made withoutRetries is sent once: a rate limit or a server error
// is returned as it is, not waited out and tried again.
func TestWithoutRetriesSendsOnce(t *testing.T) {
	blocks := []slack.Block{slack.NewDividerBlock()}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		f := &fakeChat{statuses: []int{status, status}}
		_, err := chatApp(t, f).chat(withoutRetries(context.Background()), chatMessage{channel: "C1", blocks: blocks})
		var rl *slack.RateLimitedError
		var se slack.StatusCodeError
		if !errors.As(err, &rl) && !(errors.As(err, &se) && se.Code == status) {
			t.Errorf("HTTP %d: chat() error = %v; want Slack's answer", status, err)
		}
		if n := len(f.forms); n != 1 {
			t.Errorf("HTTP %d: %d calls; want 1", status, n)
		}
	}
}
