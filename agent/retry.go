package agent

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/ctxtime"
)

// Defaults of the retry settings in ModelConfig.
const (
	DefaultRetryBackoff    = time.Second
	DefaultRetryBackoffMax = 30 * time.Second
	DefaultMaxRetryWait    = time.Minute
)

// Complete asks the model for the next assistant message, streaming it
// (see attempt for what is returned). A failure that is Retryable (429,
// 5xx, a time-out, a reset connection, a stream cut short) is retried up to
// ModelConfig.Retries times, after the server's Retry-After when it sent
// one and otherwise after an exponential backoff with jitter, but only
// while no text was passed to onDelta: once output was streamed, retrying
// would show it twice, so the error is returned. A Retry-After longer than
// MaxRetryWait is not waited for: the error is returned at once. If ctx
// ends while waiting, the error says so (ErrKindCanceled or
// ErrKindTimeout). The error returned after the last attempt is that
// attempt's *ModelError.
func (m *OpenAIModel) Complete(ctx context.Context, req ModelRequest, onDelta func(text string)) (openai.ChatCompletionMessage, error) {
	for retry := 0; ; retry++ {
		streamed := false
		delta := onDelta
		if onDelta != nil {
			delta = func(text string) {
				streamed = true
				onDelta(text)
			}
		}
		msg, err := m.attempt(ctx, req, delta)
		var me *ModelError
		if err == nil || streamed || retry >= m.cfg.Retries || ctx.Err() != nil || !errors.As(err, &me) || !me.Retryable() {
			return msg, err
		}
		wait, ok := m.retryWait(retry, me.RetryAfter)
		if !ok {
			return msg, err
		}
		if m.cfg.OnRetry != nil {
			m.cfg.OnRetry(ctx, retry+1, wait, me)
		}
		if serr := m.sleep(ctx, wait); serr != nil {
			return openai.ChatCompletionMessage{}, m.contextError(ctx, serr)
		}
	}
}

// retryWait is the wait before retry number retry+1: the server's
// Retry-After if it gave one (false if longer than MaxRetryWait), else the
// backoff doubled per retry up to its maximum, with jitter in [d/2, d).
func (m *OpenAIModel) retryWait(retry int, retryAfter time.Duration) (time.Duration, bool) {
	if retryAfter > 0 {
		return retryAfter, retryAfter <= m.cfg.MaxRetryWait
	}
	d := m.cfg.RetryBackoff
	for range retry {
		if d >= m.cfg.RetryBackoffMax/2 {
			d = m.cfg.RetryBackoffMax
			break
		}
		d *= 2
	}
	d = min(d, m.cfg.RetryBackoffMax)
	return d/2 + rand.N(d/2+1), true
}

// sleep waits d, or until ctx ends (Sleep, if set, waits instead).
func (m *OpenAIModel) sleep(ctx context.Context, d time.Duration) error {
	if m.cfg.Sleep != nil {
		return m.cfg.Sleep(ctx, d)
	}
	return ctxtime.Sleep(ctx, d)
}

// retryAfterKey keys the *time.Duration in a request's context where
// retryAfterTransport records the server's Retry-After.
type retryAfterKey struct{}

// withRetryAfter returns a context whose requests record the Retry-After of
// an error answer in *d.
func withRetryAfter(ctx context.Context, d *time.Duration) context.Context {
	return context.WithValue(ctx, retryAfterKey{}, d)
}

// retryAfterTransport records the Retry-After of error answers, which
// go-openai's errors do not carry, in the request context's slot (see
// withRetryAfter). RoundTrip returns before the client does, so the caller
// reads the slot after the request without a race.
type retryAfterTransport struct {
	next http.RoundTripper
	now  func() time.Time
}

func (t retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	if slot, ok := req.Context().Value(retryAfterKey{}).(*time.Duration); ok {
		*slot = parseRetryAfter(resp.Header, t.now())
	}
	return resp, nil
}

// parseRetryAfter reads how long a server asks to wait: retry-after-ms
// (Azure OpenAI, OpenAI), else Retry-After in seconds or as an HTTP date.
// Zero means not given or unreadable.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if ms, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After-Ms")), 64); err == nil && ms > 0 {
		return time.Duration(min(ms*float64(time.Millisecond), math.MaxInt64))
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s*float64(time.Second), math.MaxInt64))
	}
	if at, err := http.ParseTime(v); err == nil && at.After(now) {
		return at.Sub(now)
	}
	return 0
}
