package fakeslack_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

// The observer sees every answered call with its answer, in order, failed
// ones included.
func TestAPIObserver(t *testing.T) {
	var (
		mu     sync.Mutex
		events []fakeslack.APIEvent
	)
	s := newServer(t, fakeslack.WithAPIObserver(func(e fakeslack.APIEvent) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}))
	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()))
	s.AddChannel(fakeslack.Channel{ID: "COBS00001", Members: []string{s.BotUserID()}})
	_, ts, err := api.PostMessage("COBS00001", slack.MsgOptionText("hello", false), slack.MsgOptionTS("1.000001"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := api.PostMessage("CNOPE0001", slack.MsgOptionText("lost", false)); err == nil {
		t.Fatal("posting to an unknown channel succeeded")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(events) != 2 {
		t.Fatalf("the observer saw %d calls, want 2: %+v", len(events), events)
	}
	first := events[0]
	var res struct {
		OK      bool   `json:"ok"`
		TS      string `json:"ts"`
		Message struct {
			Text     string `json:"text"`
			ThreadTS string `json:"thread_ts"`
		} `json:"message"`
	}
	if err := json.Unmarshal(first.Response, &res); err != nil {
		t.Fatalf("the first answer %s: %v", first.Response, err)
	}
	if first.Call.Method != "chat.postMessage" || !res.OK || res.TS != ts || res.Message.Text != "hello" || res.Message.ThreadTS != "1.000001" {
		t.Errorf("the observer saw %s answered %s, want chat.postMessage with ts %s, the text and the thread", first.Call.Method, first.Response, ts)
	}
	if first.Call.At.IsZero() {
		t.Error("the observed call has no arrival time")
	}
	if e := events[1]; e.Call.Error != "channel_not_found" {
		t.Errorf("the second observed call failed with %q, want channel_not_found", e.Call.Error)
	}
}

// RoundTrip gets the client's pong on each of several connections, and
// fails clearly without one.
func TestRoundTrip(t *testing.T) {
	s := newServer(t)
	if _, err := s.RoundTrip(wait); err == nil {
		t.Fatal("a round trip without a connection succeeded")
	}
	startBot(t, s, ackAll)
	startBot(t, s, ackAll)
	if err := s.WaitConnected(2, wait); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		d, err := s.RoundTrip(wait)
		if err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		if d <= 0 {
			t.Errorf("round trip %d took %v, want a positive duration", i, d)
		}
	}
}
