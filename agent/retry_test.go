package agent_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// sleeps records the waits between attempts instead of waiting.
type sleeps struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *sleeps) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waits = append(s.waits, d)
	return ctx.Err()
}

func (s *sleeps) got() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.waits...)
}

// newRetryingModel returns a model client talking to s that retries up to
// retries times, recording its waits in sl.
func newRetryingModel(s *fakeopenai.Server, retries int, sl *sleeps) *agent.OpenAIModel {
	return agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL: s.URL(), APIKey: "test-key", Model: "test-model",
		Retries: retries, Sleep: sl.sleep,
		RetryBackoff: time.Second, RetryBackoffMax: 4 * time.Second, MaxRetryWait: time.Minute,
	})
}

func TestModelRetries(t *testing.T) {
	retryAfter := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	cutBeforeText := fakeopenai.Response{Text: "never seen", Chunks: 2, CutAfter: 1, Abort: true}
	tests := []struct {
		name      string
		replies   []fakeopenai.Response
		retries   int
		wantText  string               // the answer; empty: an error
		wantKind  agent.ModelErrorKind // the error's kind
		wantWaits [][2]time.Duration   // each wait's range, inclusive
		wantReqs  int
	}{
		{
			name:      "429 with Retry-After",
			replies:   []fakeopenai.Response{{Status: 429, Header: retryAfter("7")}, fakeopenai.Text("ok")},
			retries:   3,
			wantText:  "ok",
			wantWaits: [][2]time.Duration{{7 * time.Second, 7 * time.Second}},
			wantReqs:  2,
		},
		{
			name:      "429 with retry-after-ms",
			replies:   []fakeopenai.Response{{Status: 429, Header: http.Header{"Retry-After-Ms": {"1500"}}}, fakeopenai.Text("ok")},
			retries:   3,
			wantText:  "ok",
			wantWaits: [][2]time.Duration{{1500 * time.Millisecond, 1500 * time.Millisecond}},
			wantReqs:  2,
		},
		{
			name:     "500s back off with jitter",
			replies:  []fakeopenai.Response{fakeopenai.Error(500, "boom"), fakeopenai.Error(502, "bad gateway"), fakeopenai.Error(503, "busy"), fakeopenai.Error(500, "boom"), fakeopenai.Text("ok")},
			retries:  4,
			wantText: "ok",
			wantWaits: [][2]time.Duration{
				{500 * time.Millisecond, time.Second},
				{time.Second, 2 * time.Second},
				{2 * time.Second, 4 * time.Second},
				{2 * time.Second, 4 * time.Second}, // capped at RetryBackoffMax
			},
			wantReqs: 5,
		},
		{
			name:      "stream cut before any output",
			replies:   []fakeopenai.Response{cutBeforeText, fakeopenai.Text("ok")},
			retries:   1,
			wantText:  "ok",
			wantWaits: [][2]time.Duration{{500 * time.Millisecond, time.Second}},
			wantReqs:  2,
		},
		{
			name:      "gives up after the bound",
			replies:   []fakeopenai.Response{fakeopenai.Error(500, "a"), fakeopenai.Error(500, "b"), fakeopenai.Error(500, "c"), fakeopenai.Text("too late")},
			retries:   2,
			wantKind:  agent.ErrKindHTTP,
			wantWaits: [][2]time.Duration{{500 * time.Millisecond, time.Second}, {time.Second, 2 * time.Second}},
			wantReqs:  3,
		},
		{
			name:     "no retries configured",
			replies:  []fakeopenai.Response{fakeopenai.Error(500, "a"), fakeopenai.Text("unused")},
			wantKind: agent.ErrKindHTTP,
			wantReqs: 1,
		},
		{
			name:     "400 is not retried",
			replies:  []fakeopenai.Response{fakeopenai.Error(400, "bad request"), fakeopenai.Text("unused")},
			retries:  3,
			wantKind: agent.ErrKindHTTP,
			wantReqs: 1,
		},
		{
			name:     "Retry-After longer than MaxRetryWait",
			replies:  []fakeopenai.Response{{Status: 429, Header: retryAfter("3600")}, fakeopenai.Text("unused")},
			retries:  3,
			wantKind: agent.ErrKindHTTP,
			wantReqs: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := fakeopenai.New(t)
			s.Reply(tt.replies...)
			sl := &sleeps{}
			var deltas strings.Builder
			var retried []int
			m := agent.NewOpenAIModel(agent.ModelConfig{
				BaseURL: s.URL(), APIKey: "test-key", Model: "test-model",
				Retries: tt.retries, Sleep: sl.sleep,
				RetryBackoff: time.Second, RetryBackoffMax: 4 * time.Second, MaxRetryWait: time.Minute,
				OnRetry: func(_ context.Context, retry int, _ time.Duration, err *agent.ModelError) {
					if !err.Retryable() {
						t.Errorf("OnRetry with %v, which is not retryable", err)
					}
					retried = append(retried, retry)
				},
			})
			msg, err := m.Complete(context.Background(), userMessage("hi"), func(d string) { deltas.WriteString(d) })
			if tt.wantText != "" {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if msg.Content != tt.wantText || deltas.String() != tt.wantText {
					t.Errorf("got content %q, deltas %q, want %q once", msg.Content, deltas.String(), tt.wantText)
				}
			} else {
				modelError(t, err, tt.wantKind)
				if deltas.Len() != 0 {
					t.Errorf("deltas %q, want none", deltas.String())
				}
			}
			if got := len(s.Requests()); got != tt.wantReqs {
				t.Errorf("got %d requests, want %d", got, tt.wantReqs)
			}
			waits := sl.got()
			if len(waits) != len(tt.wantWaits) || len(retried) != len(waits) {
				t.Fatalf("waited %v (OnRetry %v), want %d waits in %v", waits, retried, len(tt.wantWaits), tt.wantWaits)
			}
			for i, w := range waits {
				if w < tt.wantWaits[i][0] || w > tt.wantWaits[i][1] {
					t.Errorf("wait %d = %v, want within %v", i+1, w, tt.wantWaits[i])
				}
				if retried[i] != i+1 {
					t.Errorf("OnRetry numbers %v, want 1, 2, ...", retried)
				}
			}
		})
	}
}

// The error of a refused long wait carries the server's Retry-After.
func TestModelErrorRetryAfter(t *testing.T) {
	s := fakeopenai.New(t)
	at := time.Now().Add(2 * time.Hour).UTC().Format(http.TimeFormat)
	s.Reply(fakeopenai.Response{Status: 429, Header: http.Header{"Retry-After": {at}}})
	_, err := newRetryingModel(s, 3, &sleeps{}).Complete(context.Background(), userMessage("hi"), nil)
	me := modelError(t, err, agent.ErrKindHTTP)
	if me.RetryAfter < time.Hour || me.RetryAfter > 2*time.Hour {
		t.Errorf("RetryAfter = %v from the date %s, want about 2h", me.RetryAfter, at)
	}
}

// Once text has been streamed, a failure is not retried: the output would
// be shown twice.
func TestModelDoesNotRetryAfterOutput(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Response{Text: "one two three four", Chunks: 4, CutAfter: 3, Abort: true}, fakeopenai.Text("again"))
	sl := &sleeps{}
	var deltas strings.Builder
	_, err := newRetryingModel(s, 3, sl).Complete(context.Background(), userMessage("hi"), func(d string) { deltas.WriteString(d) })
	modelError(t, err, agent.ErrKindStreamCut)
	if got := len(s.Requests()); got != 1 {
		t.Errorf("got %d requests, want 1", got)
	}
	if s.Pending() != 1 || len(sl.got()) != 0 {
		t.Errorf("pending %d, waits %v: want the second answer unused and no wait", s.Pending(), sl.got())
	}
	if d := deltas.String(); d == "" || strings.Contains(d, "again") {
		t.Errorf("deltas %q, want the first answer's start only", d)
	}
}

// A retry's wait ends with the caller's context.
func TestModelRetryWaitCanceled(t *testing.T) {
	s := fakeopenai.New(t)
	s.Reply(fakeopenai.Error(503, "busy"), fakeopenai.Text("unused"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := agent.NewOpenAIModel(agent.ModelConfig{
		BaseURL: s.URL(), Model: "test-model", Retries: 3,
		Sleep: func(ctx context.Context, _ time.Duration) error {
			cancel()
			<-ctx.Done()
			return ctx.Err()
		},
	})
	_, err := m.Complete(ctx, userMessage("hi"), nil)
	modelError(t, err, agent.ErrKindCanceled)
	if got := len(s.Requests()); got != 1 {
		t.Errorf("got %d requests, want 1", got)
	}
}

// Through the agent: a retried model error shows the answer in the thread
// once, and nothing of the failed attempt.
func TestAgentRetriesModelWithoutDuplicateOutput(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, backends(t)[0])
	p, err := approvals.ParseConfig([]byte(testPolicy))
	must(t, err)
	engine := approvals.NewEngine(p, w.store.(approvals.RecordStore), approvals.WithClock(w.clock))
	model := newRetryingModel(w.model, 2, &sleeps{})
	a := agent.New(model, w.reg, engine, w.store, func(string) agent.Reporter { return w.rec }, w.cfg)

	w.model.Reply(
		fakeopenai.Error(500, "upstream exploded"),
		fakeopenai.Response{Text: "lost", Chunks: 2, CutAfter: 1, Abort: true},
		fakeopenai.Response{Text: "the disk is fine", Chunks: 3},
	)
	_, err = a.Run(ctx, request("how is the disk?"))
	must(t, err)
	if got := w.rec.Answers(); len(got) != 1 || got[0] != "the disk is fine" {
		t.Errorf("answers %q, want one: the disk is fine", got)
	}
	w.rec.mu.Lock()
	deltas := w.rec.deltas.String()
	w.rec.mu.Unlock()
	if deltas != "the disk is fine" {
		t.Errorf("streamed %q, want the answer once", deltas)
	}
	if got := len(w.model.Requests()); got != 3 {
		t.Errorf("got %d model requests, want 3", got)
	}
}
