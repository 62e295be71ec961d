package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/toolgate/toolgate/store"
)

func TestReminderTimes(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		after, ttl  time.Duration
		wantOffsets []time.Duration // from t0
	}{
		{"off", 0, 72 * time.Hour, nil},
		{"after an hour and with a quarter left", time.Hour, 72 * time.Hour, []time.Duration{time.Hour, 54 * time.Hour}},
		{"quarter left comes first", 3 * time.Hour, 4 * time.Hour, []time.Duration{3 * time.Hour}},
		{"never before expiry", 2 * time.Hour, 2 * time.Hour, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reminders(store.Call{CreatedAt: t0, ExpiresAt: t0.Add(tt.ttl), RemindAfter: tt.after})
			// Paused within a millisecond, the times are the same, and
			// none comes as the call expires.
			sub := t0.Add(456789 * time.Nanosecond)
			if late := reminders(store.Call{CreatedAt: sub, ExpiresAt: sub.Add(tt.ttl), RemindAfter: tt.after}); len(late) != len(got) {
				t.Errorf("paused %v past a millisecond: reminders at %v, want %d like %v", sub.Sub(t0), late, len(got), got)
			}
			var offsets []time.Duration
			for _, r := range got {
				offsets = append(offsets, r.Sub(t0))
			}
			if fmt.Sprint(offsets) != fmt.Sprint(tt.wantOffsets) {
				t.Errorf("reminders(after %v, ttl %v) at %v, want %v", tt.after, tt.ttl, offsets, tt.wantOffsets)
			}
		})
	}
}
