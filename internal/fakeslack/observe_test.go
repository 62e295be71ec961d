package fakeslack_test

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
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

// A call's At is when its request arrived, taken before the fake's own
// work on it: here the request waits for the fake's lock, held while the
// fake handles a closed Socket Mode connection, and that wait is the
// fake's time, not the app's, so At is before the lock is released.
func TestCallAtIsTheArrival(t *testing.T) {
	var (
		locked   = make(chan struct{}) // the fake holds its lock in the hook
		release  = make(chan struct{}) // the test lets it go
		arrived  = make(chan struct{}) // the clock was read with the lock held
		held     atomic.Bool
		once     sync.Once
		arrival  sync.Once
		released time.Time
		mu       sync.Mutex
		at       time.Time
	)
	s := newServer(t,
		fakeslack.WithLogf(func(format string, _ ...any) {
			if strings.Contains(format, "closed") { // dropConn logs with the lock held
				once.Do(func() {
					held.Store(true)
					close(locked)
					<-release
				})
			}
		}),
		fakeslack.WithClock(func() time.Time {
			now := time.Now()
			if held.Load() {
				arrival.Do(func() { close(arrived) })
			}
			return now
		}),
		fakeslack.WithAPIObserver(func(e fakeslack.APIEvent) {
			if e.Call.Method == "chat.postMessage" {
				mu.Lock()
				at = e.Call.At
				mu.Unlock()
			}
		}),
	)
	var releaseOnce sync.Once
	let := func() { releaseOnce.Do(func() { released = time.Now(); close(release) }) }
	t.Cleanup(let) // before the fake closes, should the test stop early

	api := slack.New(s.BotToken(), slack.OptionAPIURL(s.APIURL()), slack.OptionAppLevelToken(s.AppToken()))
	_, wsURL, err := api.StartSocketModeContext(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WaitConnected(1, wait); err != nil {
		t.Fatal(err)
	}
	ws.Close()
	<-locked

	posted := make(chan error, 1)
	go func() {
		_, _, err := api.PostMessage("C1OPS", slack.MsgOptionText("card", false))
		posted <- err
	}()
	select {
	case <-arrived:
	case <-time.After(wait):
		t.Errorf("chat.postMessage got no arrival time within %v while the fake held its lock", wait)
	}
	let()
	if err := <-posted; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !at.Before(released) {
		t.Errorf("At %v is %v after the fake released its lock: the fake's wait for its lock counts as the app's time", at.Format(time.RFC3339Nano), at.Sub(released))
	}
}
