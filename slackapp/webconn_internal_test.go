package slackapp

import (
	"io"
	"net/http"
	"testing"

	"github.com/toolgate/toolgate/internal/conntest"
)

// TestWebAPIReusesConnections checks that the Web API client of an app
// made without an HTTPClient keeps the connections of calls made at once
// for the next calls, more of them than net/http keeps by default (100 in
// all).
func TestWebAPIReusesConnections(t *testing.T) {
	const n = 128
	srv := conntest.Start(t, n, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: srv.URL + "/"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, later := srv.Rounds(t, n, 2, func() error {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/chat.postMessage", nil)
		if err != nil {
			return err
		}
		resp, err := a.web.Do(req)
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
