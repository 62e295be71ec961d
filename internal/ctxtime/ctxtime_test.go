package ctxtime

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Sleep waits its time, and no longer than its context lasts.
func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep of 1ms = %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep of an hour with its context ended = %v, want context.Canceled", err)
	}
}
