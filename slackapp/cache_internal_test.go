package slackapp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// heldSlack is a Web API that answers usergroups.users.list,
// conversations.members and conversations.info, counting calls per method.
// Once hold is called, it keeps every answer until release.
type heldSlack struct {
	calls    sync.Map      // method -> *atomic.Int64
	held     chan struct{} // closed by release; nil: answer at once
	released sync.Once
}

func (s *heldSlack) count(method string) int64 {
	v, _ := s.calls.LoadOrStore(method, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

// hold makes the server keep its answers until release (or the end of the
// test). Call it before the first request.
func (s *heldSlack) hold(t *testing.T) {
	s.held = make(chan struct{})
	t.Cleanup(s.release)
}

// release lets the answers kept by hold go, and later ones at once.
func (s *heldSlack) release() { s.released.Do(func() { close(s.held) }) }

func newHeldSlack(t *testing.T) (*heldSlack, *slack.Client) {
	s := &heldSlack{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		method := r.URL.Path[len("/api/"):]
		v, _ := s.calls.LoadOrStore(method, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		if s.held != nil {
			select {
			case <-s.held:
			case <-r.Context().Done():
				return
			}
		}
		_ = r.ParseForm()
		var body any
		switch method {
		case "usergroups.users.list":
			body = map[string]any{"ok": true, "users": []string{"U1", "U2"}}
		case "conversations.members":
			body = map[string]any{"ok": true, "members": []string{"U1"}, "response_metadata": map[string]string{"next_cursor": ""}}
		case "conversations.info":
			body = map[string]any{"ok": true, "channel": map[string]any{"id": r.Form.Get("channel"), "is_im": true, "user": "U1"}}
		default:
			body = map[string]any{"ok": false, "error": "unknown_method"}
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return s, slack.New("xoxb-test", slack.OptionAPIURL(srv.URL+"/api/"))
}

// waitingContext returns a context around parent and a channel closed once
// its caller waits on it. A caller of a cache asks its context for Done
// only as it waits for the result of the look-up it shares (lookups.do),
// after it has joined that look-up.
func waitingContext(parent context.Context) (context.Context, <-chan struct{}) {
	c := &waitingCtx{Context: parent, waiting: make(chan struct{})}
	return c, c.waiting
}

type waitingCtx struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *waitingCtx) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// allWaiting waits until every channel of waiting is closed: every caller
// waits on a look-up.
func allWaiting(t *testing.T, waiting []<-chan struct{}) {
	t.Helper()
	guard := time.After(10 * time.Second)
	for i, w := range waiting {
		select {
		case <-w:
		case <-guard:
			t.Fatalf("%d of %d callers wait on a look-up after 10 s", i, len(waiting))
		}
	}
}

// Concurrent misses of one group share a single API call.
func TestGroupCacheSharesConcurrentLookups(t *testing.T) {
	api, client := newHeldSlack(t)
	api.hold(t)
	g := newGroupCache(client, time.Minute)
	var wg sync.WaitGroup
	var waiting []<-chan struct{}
	for range 20 {
		ctx, w := waitingContext(context.Background())
		waiting = append(waiting, w)
		wg.Go(func() {
			m, err := g.Members(ctx, "S1")
			if err != nil || len(m) != 2 {
				t.Errorf("Members = %v, %v", m, err)
			}
		})
	}
	allWaiting(t, waiting)
	api.release()
	wg.Wait()
	if n := api.count("usergroups.users.list"); n != 1 {
		t.Errorf("20 concurrent lookups of one group made %d API calls, want 1", n)
	}
}

// The group cache keeps at most its limit of entries, dropping expired ones
// first, then the oldest.
func TestGroupCacheIsBounded(t *testing.T) {
	api, client := newHeldSlack(t)
	g := newGroupCache(client, time.Minute)
	g.max = 3
	ctx := context.Background()
	for i := range 5 {
		if _, err := g.Members(ctx, fmt.Sprintf("S%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if len(g.entries) != 3 {
		t.Errorf("the cache holds %d groups, want at most 3", len(g.entries))
	}
	for _, id := range []string{"S2", "S3", "S4"} {
		if _, ok := g.entries[id]; !ok {
			t.Errorf("the newest group %s was evicted", id)
		}
	}
	before := api.count("usergroups.users.list")
	if _, err := g.Members(ctx, "S4"); err != nil {
		t.Fatal(err)
	}
	if api.count("usergroups.users.list") != before {
		t.Error("a cached group was looked up again")
	}
}

func TestPutEvictsExpiredBeforeOldest(t *testing.T) {
	now := time.Now()
	m := map[string]time.Time{
		"expired": now.Add(-2 * time.Minute),
		"old":     now.Add(-30 * time.Second),
		"new":     now.Add(-time.Second),
	}
	at := func(t time.Time) time.Time { return t }
	put(m, "fresh", now, 3, time.Minute, at)
	if _, ok := m["expired"]; ok || len(m) != 3 {
		t.Errorf("after put into a full map: %v, want the expired entry gone", m)
	}
	put(m, "fresher", now.Add(time.Second), 3, time.Minute, at)
	if _, ok := m["old"]; ok || len(m) != 3 {
		t.Errorf("after put into a full map: %v, want the oldest entry gone", m)
	}
	put(m, "fresher", now, 3, time.Minute, at)
	if len(m) != 3 {
		t.Errorf("replacing an entry changed the size: %v", m)
	}
}

// Concurrent misses of one channel or DM share a single API call, and the
// audience cache is bounded.
func TestAudienceCacheSharesLookupsAndIsBounded(t *testing.T) {
	api, client := newHeldSlack(t)
	api.hold(t)
	c := newAudienceCache(client, time.Minute)
	c.maxChannels, c.maxDMs = 2, 2
	ctx := context.Background()
	var wg sync.WaitGroup
	var waiting []<-chan struct{}
	for range 10 {
		for _, ch := range []string{"C1", "D1"} {
			ctx, w := waitingContext(ctx)
			waiting = append(waiting, w)
			wg.Go(func() {
				if ok, err := c.CanSee(ctx, ch, "U1"); !ok || err != nil {
					t.Errorf("CanSee(%s, U1) = %v, %v", ch, ok, err)
				}
			})
		}
	}
	allWaiting(t, waiting)
	api.release()
	wg.Wait()
	if n := api.count("conversations.members"); n != 1 {
		t.Errorf("10 concurrent checks of one channel made %d API calls, want 1", n)
	}
	if n := api.count("conversations.info"); n != 1 {
		t.Errorf("10 concurrent checks of one DM made %d API calls, want 1", n)
	}
	for _, ch := range []string{"C2", "C3", "D2", "D3"} {
		if _, err := c.CanSee(ctx, ch, "U1"); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.members) != 2 || len(c.dms) != 2 {
		t.Errorf("the cache holds %d channels and %d DMs, want at most 2 of each", len(c.members), len(c.dms))
	}
}

// Whether a channel is public is asked of Slack once per ttl: concurrent
// misses share one conversations.info, later checks within the ttl make
// none, and one past it asks again. The cache is bounded.
func TestAudienceCacheKeepsWhetherAChannelIsPublic(t *testing.T) {
	api, client := newHeldSlack(t)
	api.hold(t)
	c := newAudienceCache(client, time.Hour)
	c.maxChannels = 2
	ctx := context.Background()
	var wg sync.WaitGroup
	var waiting []<-chan struct{}
	for range 10 {
		ctx, w := waitingContext(ctx)
		waiting = append(waiting, w)
		wg.Go(func() {
			// The fake answers is_im: not public.
			if public, err := c.isPublic(ctx, "C1"); public || err != nil {
				t.Errorf("isPublic(C1) = %v, %v; want false, nil", public, err)
			}
		})
	}
	allWaiting(t, waiting)
	api.release()
	wg.Wait()
	if _, err := c.isPublic(ctx, "C1"); err != nil {
		t.Fatal(err)
	}
	if n := api.count("conversations.info"); n != 1 {
		t.Errorf("11 checks of one channel within the ttl made %d API calls, want 1", n)
	}
	c.mu.Lock()
	e := c.public["C1"]
	e.at = e.at.Add(-time.Hour - time.Second) // past the ttl
	c.public["C1"] = e
	c.mu.Unlock()
	if _, err := c.isPublic(ctx, "C1"); err != nil {
		t.Fatal(err)
	}
	if n := api.count("conversations.info"); n != 2 {
		t.Errorf("a check past the ttl made %d API calls in all, want 2", n)
	}
	for _, ch := range []string{"C2", "C3", "C4"} {
		if _, err := c.isPublic(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	if len(c.public) != 2 {
		t.Errorf("the cache holds %d channels, want at most 2", len(c.public))
	}
}

// A waiting caller whose context ends stops waiting; the shared lookup
// goes on for the others, even when the one who gave up started it.
func TestSharedLookupCallerGivesUp(t *testing.T) {
	api, client := newHeldSlack(t)
	api.hold(t)
	g := newGroupCache(client, time.Minute)
	type result struct {
		members []string
		err     error
	}
	members := func(ctx context.Context) <-chan result {
		got := make(chan result, 1)
		go func() {
			m, err := g.Members(ctx, "S1")
			got <- result{m, err}
		}()
		return got
	}
	quitCtx, quit := context.WithCancel(context.Background())
	defer quit()
	quitCtx, quitWaiting := waitingContext(quitCtx)
	quitter := members(quitCtx) // starts the look-up
	allWaiting(t, []<-chan struct{}{quitWaiting})
	stayCtx, stayWaiting := waitingContext(context.Background())
	stayer := members(stayCtx)
	allWaiting(t, []<-chan struct{}{stayWaiting})

	quit()
	select {
	case r := <-quitter:
		if r.err == nil {
			t.Error("Members with an ended context succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a caller whose context ended still waits on the look-up")
	}
	api.release()
	select {
	case r := <-stayer:
		if r.err != nil || len(r.members) != 2 {
			t.Errorf("Members after the caller who started the look-up gave up = %v, %v", r.members, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller who stayed got no answer")
	}
	if n := api.count("usergroups.users.list"); n != 1 {
		t.Errorf("two callers of one group made %d API calls, want 1", n)
	}
}

// Closing the look-ups cancels the one still running, whose caller gave
// up, and returns only once it has ended; a look-up after that runs in its
// caller's goroutine. A panicking look-up is its callers' error.
func TestLookupsCloseWaitsForRunning(t *testing.T) {
	var l lookups
	started := make(chan struct{})
	var ended atomic.Bool
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := l.do(ctx, "k", func(ctx context.Context) (any, error) {
			close(started)
			<-ctx.Done() // until close cancels it
			ended.Store(true)
			return nil, ctx.Err()
		})
		got <- err
	}()
	<-started
	cancel()
	if err := <-got; err == nil {
		t.Fatal("a caller whose context ended got a result")
	}
	l.close()
	if !ended.Load() {
		t.Error("close returned before the running look-up ended")
	}
	if v, err := l.do(context.Background(), "k", func(context.Context) (any, error) { return 7, nil }); err != nil || v != 7 {
		t.Errorf("a look-up after close = %v, %v; want 7", v, err)
	}
	var p lookups
	if _, err := p.do(context.Background(), "p", func(context.Context) (any, error) { panic("a bug") }); err == nil {
		t.Error("a panicking look-up returned no error")
	}
	p.close()
}

func TestModalText(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"already rejected by <@U123> at <!date^1700000000^{date_short_pretty} at {time}|2023-11-14 22:13 UTC>.", "already rejected by @U123 at 2023-11-14 22:13 UTC."},
		{"<@U1|alice> and <!subteam^S1> and <!subteam^S2|@ops>", "@alice and @S1 and @ops"},
		{"in <#C1|general> or <#C2>", "in #general or #C2"},
		{"see <https://example.com|the docs> or <https://example.com>", "see the docs (https://example.com) or https://example.com"},
		{"<!here> &lt;@U9&gt; &amp; more", "@here <@U9> & more"},
		{Escape("a <b> & @channel"), "a <b> & @\u2060channel"},
	} {
		if got := modalText(tt.in); got != tt.want {
			t.Errorf("modalText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// warm looks up who can see a conversation in the background when what is
// kept would not stay fresh for half the ttl, and not otherwise; a DM's
// other party, which never changes, is looked up once.
func TestAudienceWarmRefreshesOnlyWhatIsNotFreshForLong(t *testing.T) {
	api, client := newHeldSlack(t)
	c := newAudienceCache(client, time.Minute)
	ctx := context.Background()
	settle := func() {
		c.lookups.mu.Lock()
		var running []chan struct{}
		for _, l := range c.lookups.running {
			running = append(running, l.done)
		}
		c.lookups.mu.Unlock()
		for _, done := range running {
			<-done
		}
	}

	c.warm(ctx, "C1")
	settle()
	if n := api.count("conversations.members"); n != 1 {
		t.Fatalf("warming an unknown channel made %d look-ups, want 1", n)
	}
	if ok, err := c.CanSee(ctx, "C1", "U1"); !ok || err != nil {
		t.Fatalf("CanSee(C1, U1) after warming = %v, %v", ok, err)
	}
	if n := api.count("conversations.members"); n != 1 {
		t.Fatalf("a check after warming made a look-up of its own (%d in all)", n)
	}

	for _, tc := range []struct {
		age  time.Duration
		want int64
	}{
		{age: 20 * time.Second, want: 0}, // fresh for 40 s more
		{age: 40 * time.Second, want: 1}, // fresh for 20 s only
		{age: 2 * time.Minute, want: 1},  // stale
	} {
		before := api.count("conversations.members")
		c.mu.Lock()
		e := c.members["C1"]
		e.at = time.Now().Add(-tc.age)
		c.members["C1"] = e
		c.mu.Unlock()
		c.warm(ctx, "C1")
		settle()
		if n := api.count("conversations.members") - before; n != tc.want {
			t.Errorf("warming a channel looked up %v ago made %d look-ups, want %d", tc.age, n, tc.want)
		}
	}

	c.warm(ctx, "D1")
	settle()
	c.warm(ctx, "D1")
	settle()
	if n := api.count("conversations.info"); n != 1 {
		t.Errorf("warming a DM twice made %d look-ups, want 1", n)
	}
	if ok, err := c.CanSee(ctx, "D1", "U1"); !ok || err != nil || api.count("conversations.info") != 1 {
		t.Errorf("CanSee(D1, U1) after warming = %v, %v, with %d look-ups", ok, err, api.count("conversations.info"))
	}

	c.lookups.close()
	c.warm(ctx, "C9")
	if n := api.count("conversations.members"); n != 3 {
		t.Errorf("warming once the look-ups are closed made a look-up (%d in all, want 3)", n)
	}
}
