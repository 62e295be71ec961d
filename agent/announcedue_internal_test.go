package agent

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

// An announcement tells the processes that follow pauses when the first
// of its calls is due (an expiry or a reminder), even when it carries no
// calls (no version of the records, on a Redis Cluster, or arguments too
// large to remember); the process that paused them is not told again.
func TestAnnouncementFromAnotherProcessReportsItsDeadline(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	remind := now.Add(2*time.Second + 500*time.Microsecond)
	calls := []store.Call{
		{ID: "a.0", Args: json.RawMessage(`{}`), ExpiresAt: now.Add(time.Hour)},
		{ID: "a.1", Args: json.RawMessage(`{}`), ExpiresAt: now.Add(3 * time.Second), RemindAt: remind},
	}
	large := []store.Call{{ID: "b.0", Args: json.RawMessage(`"` + strings.Repeat("x", maxPausedArgs) + `"`), ExpiresAt: remind}}
	recs := map[string][]store.Record{"rule": nil}
	them := &Agent{cfg: Config{Owner: "them"}, log: slog.New(slog.DiscardHandler)}
	me := &Agent{cfg: Config{Owner: "me"}, log: slog.New(slog.DiscardHandler)}
	for _, c := range []struct {
		name string
		an   announcement
	}{
		{"version 0, no calls", rememberable(calls, recs, 0)},
		{"calls too large to remember", rememberable(large, recs, 4)},
	} {
		if len(c.an.IDs) != 0 {
			t.Fatalf("%s: the announcement carries calls %v, want none", c.name, c.an.IDs)
		}
		b := them.announce(c.an, recs)
		var got []time.Time
		me.announced(b, func(t time.Time) { got = append(got, t) })
		if len(got) != 1 || got[0].Before(remind) || got[0].After(remind.Add(time.Millisecond)) {
			t.Errorf("%s: another process's announcement %s reported deadlines %v, want %v (to the millisecond, not before)", c.name, b, got, remind)
		}
		got = nil
		them.announced(b, func(t time.Time) { got = append(got, t) })
		if len(got) != 0 {
			t.Errorf("%s: the process's own announcement reported deadlines %v, want none", c.name, got)
		}
		if me.paused.count() != 0 {
			t.Errorf("%s: remembered %d calls of an announcement that carries none", c.name, me.paused.count())
		}
	}
}
