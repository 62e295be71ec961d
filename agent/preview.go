package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// maxPreviewBytes caps a stored preview; the card shows less, and the
// full-preview modal at most this.
const maxPreviewBytes = 64 << 10

// previewed is one call's preview, or the reason there is none.
type previewed struct{ text, problem string }

// previews computes the previews of the asked calls of a step at once, so
// a step waits at most one Config.PreviewTimeout for them: for each call,
// its preview and the reason there is none.
func (a *Agent) previews(ctx context.Context, asks []ask) []previewed {
	out := make([]previewed, len(asks))
	var wg sync.WaitGroup
	for k, q := range asks {
		if q.tool.Preview == nil {
			continue
		}
		wg.Go(func() {
			text, problem := a.preview(ctx, q.tool, q.canonical)
			out[k] = previewed{text, problem}
		})
	}
	wg.Wait()
	return out
}

// preview runs the tool's Preview for args within Config.PreviewTimeout.
// It returns the preview, or the reason there is none ("" and "" for a
// tool without one). It never fails the pause: a slow, failing or
// panicking preview is only shown as unavailable. The preview is stored
// with the call, so every card, copy and Home tab, also after a restart,
// shows the preview of exactly the stored arguments as they were judged.
func (a *Agent) preview(ctx context.Context, tool Tool, args json.RawMessage) (text, problem string) {
	return a.previewWithin(ctx, tool, args, a.cfg.PreviewTimeout)
}

// editPreviewTimeout bounds the preview of an edit's arguments, made while
// the Edit form waits for its answer (Slack allows 3 seconds; the form is
// answered that the store is slow after 2): a slower preview shows as
// unavailable.
const editPreviewTimeout = 1500 * time.Millisecond

// previewWithin is preview within timeout.
func (a *Agent) previewWithin(ctx context.Context, tool Tool, args json.RawMessage, timeout time.Duration) (text, problem string) {
	if tool.Preview == nil {
		return "", ""
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			a.log.Error("tool preview panicked", "tool", tool.Name, "panic", r, "stack", string(debug.Stack()))
			text, problem = "", fmt.Sprintf("internal error (%v)", r)
		}
	}()
	out, err := tool.Preview(ctx, args)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		return "", fmt.Sprintf("no answer within %s", timeout)
	case err != nil:
		// Stored with the call, as the preview is: bounded (a server's
		// error can be megabytes; a card shows 500 characters of it).
		return "", cutText(err.Error(), maxPreviewErrorBytes, "error")
	}
	return cutText(out, maxPreviewBytes, "preview"), ""
}

// maxPreviewErrorBytes bounds the reason a preview is unavailable.
const maxPreviewErrorBytes = 2 << 10
