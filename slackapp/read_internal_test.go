package slackapp

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/gorilla/websocket"
)

// Messages read one after another into one buffer come out whole, and each
// stays as it was read: the buffer is reused, the messages are copies. A
// buffer grown past maxKeptBuffer is not kept.
func TestReadMessageCopiesEachMessage(t *testing.T) {
	msgs := [][]byte{
		[]byte(`{"envelope_id":"1","type":"events_api"}`),
		bytes.Repeat([]byte("x"), maxKeptBuffer+1),
		[]byte(`{"envelope_id":"3"}`),
		[]byte(`{"envelope_id":"4","type":"interactive"}`),
	}
	var up websocket.Upgrader
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Errorf("upgrade: %v", err)
			return
		}
		defer c.Close()
		for _, m := range msgs {
			if err := c.WriteMessage(websocket.TextMessage, m); err != nil {
				t.Errorf("write: %v", err)
				return
			}
		}
		_, _, _ = c.ReadMessage() // until the client closes
	}))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	var buf bytes.Buffer
	var got [][]byte
	for i := range msgs {
		data, err := readMessage(ws, &buf)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		got = append(got, data)
		if i == 1 && buf.Cap() > maxKeptBuffer {
			t.Errorf("after a message of %d bytes the buffer keeps %d bytes, want it let go", len(msgs[1]), buf.Cap())
		}
	}
	for i := range msgs {
		if !bytes.Equal(got[i], msgs[i]) {
			t.Errorf("message %d after all were read = %.60q (%d bytes), want %.60q (%d bytes)", i, got[i], len(got[i]), msgs[i], len(msgs[i]))
		}
	}
}

// A Web API answer decodes whatever its size, the same after a large one,
// and an answer that is cut short or cannot be read is an error.
func TestDecodeAnswer(t *testing.T) {
	big := `{"ok":true,"ts":"2.0","message":{"text":"` + strings.Repeat("y", maxKeptBuffer) + `"}}`
	for _, c := range []struct{ body, ts string }{
		{`{"ok":true,"ts":"1.0","message":{"text":"hi"}}`, "1.0"},
		{big, "2.0"},
		{`{"ok":false,"error":"channel_not_found"}`, ""},
		{`{"ok":true,"ts":"3.0"}`, "3.0"},
	} {
		var ans chatAnswer
		if err := decodeAnswer(strings.NewReader(c.body), &ans); err != nil {
			t.Fatalf("decodeAnswer(%.40q): %v", c.body, err)
		}
		if ans.TS != c.ts || ans.OK != (c.ts != "") {
			t.Errorf("decodeAnswer(%.40q) = %+v, want ts %q", c.body, ans, c.ts)
		}
	}
	var ans chatAnswer
	if err := decodeAnswer(strings.NewReader(`{"ok":true,"ts":"1.`), &ans); err == nil {
		t.Error("an answer cut short decoded without an error")
	}
	broken := errors.New("connection reset")
	if err := decodeAnswer(iotest.ErrReader(broken), &ans); !errors.Is(err, broken) {
		t.Errorf("an answer that cannot be read: error %v, want %v", err, broken)
	}
}
