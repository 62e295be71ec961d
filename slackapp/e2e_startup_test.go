package slackapp_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// Slack out of reach as the bot starts (a network or a sidecar not ready
// yet) is waited for: auth.test is asked again with backoff until Slack
// answers, and the bot then connects and answers, instead of Run ending
// with the first connection error.
func TestStartWaitsForSlackToBeReachable(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	target, err := url.Parse(e.slack.APIURL())
	must(t, err)
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var dropped atomic.Int64
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/auth.test") && dropped.Add(1) <= 3 {
			// The connection ends with no answer, as a network that is
			// not up yet ends it.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.cfg.APIURL = front.URL + target.Path
	e.start()
	if n := dropped.Load(); n < 4 {
		t.Errorf("auth.test was asked %d times, want the 3 dropped and one answered", n)
	}
	e.model.Reply(fakeopenai.Text("Up after the wait."))
	ts := e.slack.Mention(channel, requester, "hello")
	e.answer(ts, "Up after the wait.")
}

// An answer that asking again will not change, such as a 404 for a wrong
// SLACK_API_URL, or a web page answered with 200 there, ends Run with the
// error at once instead of being asked again forever.
func TestStartEndsOnAClientError(t *testing.T) {
	for _, tt := range []struct {
		name  string
		serve http.HandlerFunc
		want  string
	}{
		{"404", http.NotFound, "404"},
		{"a web page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html><body>Sign in to the proxy</body></html>"))
		}, "is SLACK_API_URL"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			var asked atomic.Int64
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				asked.Add(1)
				tt.serve(w, r)
			}))
			t.Cleanup(front.Close)
			e.cfg.APIURL = front.URL + "/wrong/"
			b := e.launch(e.open())
			defer b.st.Close()
			select {
			case err := <-b.done:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("Run returned %v, want %q in it", err, tt.want)
				}
			case <-time.After(20 * time.Second):
				b.cancel()
				t.Fatalf("Run did not end; auth.test was asked %d times", asked.Load())
			}
			if n := asked.Load(); n != 1 {
				t.Errorf("auth.test was asked %d times, want once", n)
			}
		})
	}
}
