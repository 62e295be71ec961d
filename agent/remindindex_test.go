package agent_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
)

// countingStore counts the calls the agent makes to the store methods an
// expiry pass could use to find reminders.
type countingStore struct {
	agent.Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *countingStore) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
}

// take returns the counts since the last take and starts again.
func (s *countingStore) take() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := s.calls
	s.calls = map[string]int{}
	return got
}

func (s *countingStore) Pending(ctx context.Context, f store.Filter) ([]store.Call, error) {
	s.count("Pending")
	return s.Store.Pending(ctx, f)
}

func (s *countingStore) GetCall(ctx context.Context, id string) (store.Call, error) {
	s.count("GetCall")
	return s.Store.GetCall(ctx, id)
}

func (s *countingStore) LoadRun(ctx context.Context, id string) (store.Run, []store.Call, error) {
	s.count("LoadRun")
	return s.Store.LoadRun(ctx, id)
}

func (s *countingStore) Due(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	s.count("Due")
	return s.Store.Due(ctx, now, limit)
}

func (s *countingStore) NextExpiry(ctx context.Context) (time.Time, error) {
	s.count("NextExpiry")
	return s.Store.NextExpiry(ctx)
}

func (s *countingStore) DueReminders(ctx context.Context, now time.Time, limit int) ([]store.Call, error) {
	s.count("DueReminders")
	return s.Store.DueReminders(ctx, now, limit)
}

func (s *countingStore) ClaimReminder(ctx context.Context, id string, n int, next time.Time) (bool, error) {
	s.count("ClaimReminder")
	return s.Store.ClaimReminder(ctx, id, n, next)
}

func (s *countingStore) NextReminder(ctx context.Context) (time.Time, error) {
	s.count("NextReminder")
	return s.Store.NextReminder(ctx)
}

// SeenEvent is counted although agent.Store no longer has it, in case a
// reminder claim reached it through the store's concrete type.
func (s *countingStore) SeenEvent(ctx context.Context, id string, ttl time.Duration) (bool, error) {
	s.count("SeenEvent")
	return s.Store.(interface {
		SeenEvent(context.Context, string, time.Duration) (bool, error)
	}).SeenEvent(ctx, id, ttl)
}

// reminded is a Reporter that also keeps the reminders it is asked to send.
type reminded struct {
	*recorder
	mu   sync.Mutex
	sent []string // "call id #n"
}

func (r *reminded) Remind(_ context.Context, c agent.PendingCall, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, fmt.Sprintf("%s #%d", c.ID, n))
}

func (r *reminded) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.sent
	r.sent = nil
	return got
}

// Expiry passes find reminders through the store's reminder index: each
// reminder is sent once, and a pass after the calls were reminded makes
// no store call for any of them (no listing of pending calls, no claim),
// only the index look-ups of every pass.
func TestReminderPassesReadOnlyTheIndex(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.ReminderAfter = time.Hour
			w.cfg.ApprovalTTL = 8 * time.Hour
			st := &countingStore{Store: w.store, calls: map[string]int{}}
			rep := &reminded{recorder: w.rec}
			p, err := approvals.ParseConfig([]byte(testPolicy))
			must(t, err)
			engine := approvals.NewEngine(p, w.store.(approvals.RecordStore), approvals.WithClock(w.clock))
			model := agent.NewOpenAIModel(agent.ModelConfig{BaseURL: w.model.URL(), APIKey: "test-key", Model: "fake-model", Timeout: 10 * time.Second})
			a := agent.New(model, w.reg, engine, st, func(string) agent.Reporter { return rep }, w.cfg)

			const n = 5
			var tcs []fakeopenai.ToolCall
			for i := range n {
				tcs = append(tcs, call(fmt.Sprintf("c%d", i), "deploy", fmt.Sprintf(`{"service":"s%d","version":"1"}`, i)))
			}
			w.model.Reply(fakeopenai.ToolCalls(tcs...))
			out, err := a.Run(ctx, request("deploy them all"))
			must(t, err)
			if out.Status != agent.Paused || len(out.Pending) != n {
				t.Fatalf("got %s with %d pending, want %d paused calls", out.Status, len(out.Pending), n)
			}
			created := w.clock()
			first, second := created.Add(time.Hour), created.Add(6*time.Hour) // a quarter of 8h left

			expire := func(want time.Time) {
				t.Helper()
				next, err := a.Expire(ctx, func(string, string) {})
				must(t, err)
				if !next.Equal(want) {
					t.Fatalf("Expire at %v: next deadline %v, want %v", w.clock(), next, want)
				}
			}
			wantSent := func(nth int) {
				t.Helper()
				var want []string // none for nth 0
				for _, c := range out.Pending {
					if nth > 0 {
						want = append(want, fmt.Sprintf("%s #%d", c.ID, nth))
					}
				}
				got := rep.take()
				if fmt.Sprint(sorted(got)) != fmt.Sprint(sorted(want)) {
					t.Fatalf("reminders sent %v, want %v", got, want)
				}
			}
			quiet := map[string]int{"Due": 1, "NextExpiry": 1, "DueReminders": 1, "NextReminder": 1}

			expire(first)
			wantSent(0)
			st.take()

			w.advance(time.Hour)
			expire(second)
			wantSent(1)
			if got := st.take(); got["ClaimReminder"] != n || got["Pending"] != 0 || got["SeenEvent"] != 0 {
				t.Errorf("the pass that sent %d reminders made store calls %v, want %d ClaimReminder and no Pending or SeenEvent", n, got, n)
			}
			for range 3 {
				w.advance(time.Minute)
				expire(second)
				wantSent(0)
				if got := st.take(); !maps.Equal(got, quiet) {
					t.Errorf("a pass after the reminders were sent made store calls %v, want only %v", got, quiet)
				}
			}

			// A restart keeps what was sent; the second reminder comes
			// once, and then only expiry is left.
			w.store = w.reopen()
			st = &countingStore{Store: w.store, calls: map[string]int{}}
			engine = approvals.NewEngine(p, w.store.(approvals.RecordStore), approvals.WithClock(w.clock))
			a = agent.New(model, w.reg, engine, st, func(string) agent.Reporter { return rep }, w.cfg)
			w.advance(second.Sub(w.clock()))
			expire(created.Add(8 * time.Hour))
			wantSent(2)
			expire(created.Add(8 * time.Hour))
			wantSent(0)
			if got := st.take(); got["ClaimReminder"] != n {
				t.Errorf("store calls %v, want %d ClaimReminder (one pass sent the second reminders)", got, n)
			}
		})
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
