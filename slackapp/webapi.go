package slackapp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/internal/fastjson"
)

// How Web API calls are retried (see webClient).
const (
	maxWebRetries = 4
	// retryAfterDefault is the wait after a 429 without a usable
	// Retry-After; retryAfterMin is the shortest wait after a 429, and
	// retryAfterJitter the most added at random.
	retryAfterDefault = 5 * time.Second
	retryAfterMin     = time.Second
	retryAfterJitter  = time.Second
	// A server error (5xx) is retried after backoffFirst, doubling up to
	// backoffMax, plus up to backoffJitter at random.
	backoffFirst  = 100 * time.Millisecond
	backoffMax    = 10 * time.Second
	backoffJitter = 50 * time.Millisecond
)

// webIdleConns is how many idle connections to the Web API are kept for
// reuse. net/http keeps 2 per host (and 100 in all) by default, so when
// posts and updates overlap most of them dial (and shake hands) anew;
// IdleConnTimeout (90 s, net/http's default) closes them once it is quiet.
// Slack's own Web API speaks HTTP/2, over one connection; this bounds
// what a Web API over HTTP/1.1 (a proxy, the fake in tests) keeps.
const webIdleConns = 256

// webTransport is http.DefaultTransport keeping webIdleConns idle
// connections per host, with no cap over all hosts.
func webTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = webIdleConns
	t.MaxIdleConns = 0
	return t
}

// webClient makes every Web API call of the bot, slack-go's and the chat
// methods the bot calls itself (see chat). It retries a rate-limited call
// (429) after its Retry-After, and a server error (5xx) with exponential
// backoff, up to maxWebRetries times; each attempt has the client's
// timeout. Connection errors are not retried: a post whose answer was lost
// may have been made, and posting it twice is worse. For the same reason
// the server error of a card's post is not retried either (see
// withoutServerRetries): a gateway's 502 or 504 may come after Slack made
// it, and the card is looked for instead. A request whose body
// cannot be sent again is not retried, nor one whose context says so
// (withoutRetries), nor one whose context ends before the wait would: its
// answer (a rate limit's, with its Retry-After) is returned at once, for
// the caller to try again later if it may (see App.cardRetryLater), where
// waiting it out would only end in the context's error.
type webClient struct {
	client *http.Client
}

// noRetriesKey is the context key of withoutRetries.
type noRetriesKey struct{}

// noServerRetriesKey is the context key of withoutServerRetries.
type noServerRetriesKey struct{}

// withoutServerRetries returns ctx for a Web API call whose server error
// (5xx) is returned as it is, not retried: a card's post, which a
// gateway's 5xx may follow after Slack made it, and which its caller
// looks for instead (see App.postCardMessage), where posting it again
// would leave a second card with live buttons.
func withoutServerRetries(ctx context.Context) context.Context {
	return context.WithValue(ctx, noServerRetriesKey{}, true)
}

// withoutRetries returns ctx for a Web API call that is made once: Slack's
// first answer, a rate limit or a server error included, is returned as it
// is. For calls worth little late (a thread status), which must not keep
// what waits for them waiting out a Retry-After.
func withoutRetries(ctx context.Context) context.Context {
	return context.WithValue(ctx, noRetriesKey{}, true)
}

// Do sends req, retrying as described on webClient. Once the retries are
// spent it returns the last answer.
func (c webClient) Do(req *http.Request) (*http.Response, error) {
	once := req.Context().Value(noRetriesKey{}) != nil
	for attempt := 0; ; attempt++ {
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = body
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, err
		}
		wait, retry := retryWait(resp, attempt)
		if resp.StatusCode >= http.StatusInternalServerError && req.Context().Value(noServerRetriesKey{}) != nil {
			retry = false
		}
		if !retry || once || attempt >= maxWebRetries || (req.Body != nil && req.GetBody == nil) || endsWithin(req.Context(), wait) {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err := ctxtime.Sleep(req.Context(), wait); err != nil {
			return nil, err
		}
	}
}

// endsWithin reports whether ctx has a deadline less than d away.
func endsWithin(ctx context.Context, d time.Duration) bool {
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < d
}

// retryWait reports whether resp, the answer to attempt (0 for the
// first), is worth retrying, and after how long.
func retryWait(resp *http.Response, attempt int) (time.Duration, bool) {
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		wait := retryAfterDefault
		if sec, err := strconv.ParseInt(strings.TrimSpace(resp.Header.Get("Retry-After")), 10, 64); err == nil {
			wait = time.Duration(sec) * time.Second
		}
		return max(wait, retryAfterMin) + rand.N(retryAfterJitter), true
	case resp.StatusCode >= http.StatusInternalServerError:
		return backoff(attempt), true
	}
	return 0, false
}

// backoff is the wait before retry attempt+1 after a failure: backoffFirst
// doubling up to backoffMax, plus up to backoffJitter at random.
func backoff(attempt int) time.Duration {
	wait := backoffMax
	if attempt < 10 {
		wait = min(backoffFirst<<attempt, backoffMax)
	}
	return wait + rand.N(backoffJitter)
}

// chatAnswer is what the bot reads of a chat.postMessage or chat.update
// answer. slack-go would also decode the message it echoes, blocks and
// all, which the bot never reads.
type chatAnswer struct {
	OK      bool   `json:"ok"`
	Error   string `json:"error"`
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// chatRequest is the JSON body of a chat.postMessage or chat.update call.
type chatRequest struct {
	Channel  string        `json:"channel"`
	ThreadTS string        `json:"thread_ts,omitempty"`
	TS       string        `json:"ts,omitempty"`
	Blocks   []slack.Block `json:"blocks"`
	Text     string        `json:"text"`
	// Unfurl is false on every post: Slack would otherwise fetch the links
	// of model-written text from its servers (an image link carrying data
	// out), and show their previews.
	UnfurlLinks *bool `json:"unfurl_links,omitempty"`
	UnfurlMedia *bool `json:"unfurl_media,omitempty"`
}

// noUnfurl is the false of chatRequest's Unfurl fields.
var noUnfurl = new(bool)

// chatMessage is a message the bot posts (thread set: in that thread) or
// updates (ts set).
type chatMessage struct {
	channel, thread, ts string
	blocks              []slack.Block
	text                string
}

// answerBufs are the buffers Web API answers are read into to be decoded:
// Slack sends a posted or updated message back whole, and a json.Decoder
// on the body grows a buffer of its own for every answer.
var answerBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptBuffer is the largest buffer kept for the next message or answer.
const maxKeptBuffer = 1 << 20

// decodeAnswer reads a Web API answer to its end and decodes it into v.
func decodeAnswer(body io.Reader, v any) error {
	b := answerBufs.Get().(*bytes.Buffer)
	defer func() {
		if b.Cap() <= maxKeptBuffer {
			b.Reset()
			answerBufs.Put(b)
		}
	}()
	if _, err := b.ReadFrom(body); err != nil {
		return &answerLostError{err}
	}
	return fastjson.Unmarshal(b.Bytes(), v)
}

// answerLostError is a 200 answer whose body could not be read (the
// connection cut, a time-out): Slack made the call.
type answerLostError struct{ err error }

func (e *answerLostError) Error() string { return "read answer: " + e.err.Error() }
func (e *answerLostError) Unwrap() error { return e.err }

// chat posts msg with chat.postMessage, or updates it with chat.update when
// msg.ts is set, and returns the message's ts. Errors are slack-go's:
// *slack.RateLimitedError once the retries are spent, slack.StatusCodeError,
// slack.SlackErrorResponse.
func (a *App) chat(ctx context.Context, msg chatMessage) (string, error) {
	method := "chat.postMessage"
	if msg.ts != "" {
		method = "chat.update"
	}
	// A JSON body: the blocks go as they are, where a form would escape
	// every character of their JSON that a URL may not hold.
	cr := chatRequest{Channel: msg.channel, ThreadTS: msg.thread, TS: msg.ts, Blocks: msg.blocks, Text: msg.text}
	if msg.ts == "" {
		cr.UnfurlLinks, cr.UnfurlMedia = noUnfurl, noUnfurl
	}
	body, err := fastjson.Marshal(cr)
	if err != nil {
		return "", fmt.Errorf("encode blocks: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.apiURL+method, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer "+a.cfg.BotToken)
	resp, err := a.web.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		sec, _ := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
		return "", &slack.RateLimitedError{RetryAfter: time.Duration(sec) * time.Second}
	case resp.StatusCode != http.StatusOK:
		_, _ = io.Copy(io.Discard, resp.Body)
		return "", slack.StatusCodeError{Code: resp.StatusCode, Status: resp.Status}
	}
	var ans chatAnswer
	if err := decodeAnswer(resp.Body, &ans); err != nil {
		return "", fmt.Errorf("decode %s answer: %w", method, err)
	}
	if !ans.OK {
		return "", slack.SlackErrorResponse{Err: ans.Error}
	}
	return ans.TS, nil
}
