// Package ctxtime waits on time the way a context may cut short.
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits for d, or returns ctx's error once ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
