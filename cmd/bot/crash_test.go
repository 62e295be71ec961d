package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/redisstore"
)

// The crash tests run the real bot as processes: two replicas on one Redis
// (a single node, and a Redis Cluster when REDIS_CLUSTER_URL is set), one
// fake Slack (each replica a Socket Mode connection of its own) and one
// fake model. The replica working on a turn is killed with SIGKILL, and the
// survivor must answer the thread.

// forEachStore runs test on the embedded store (redisURL ""), where the
// survivor is the same replica started again on the same data, and on
// the Redis stores of forEachRedis, each as a subtest.
func forEachStore(t *testing.T, test func(t *testing.T, redisURL string)) {
	t.Helper()
	t.Run("embedded", func(t *testing.T) { test(t, "") })
	for _, u := range redisURLs(t) {
		t.Run(u[0], func(t *testing.T) { test(t, u[1]) })
	}
}

// forEachRedis runs test on REDIS_URL and, when it is set, on
// REDIS_CLUSTER_URL (a Redis Cluster), each as a subtest. Without REDIS_URL
// it is skipped locally and fails in CI.
func forEachRedis(t *testing.T, test func(t *testing.T, redisURL string)) {
	t.Helper()
	urls := redisURLs(t)
	if len(urls) == 0 {
		t.Skip("REDIS_URL is not set; set it (e.g. REDIS_URL=redis://127.0.0.1:6379/9) to run the crash tests on Redis")
	}
	for _, u := range urls {
		t.Run(u[0], func(t *testing.T) { test(t, u[1]) })
	}
}

// redisURLs names REDIS_URL and REDIS_CLUSTER_URL, those that are set (in
// CI both must be).
func redisURLs(t *testing.T) [][2]string {
	t.Helper()
	var urls [][2]string
	if u, ok := teststore.RedisURL(t); ok {
		urls = append(urls, [2]string{"redis", u})
	}
	if u, ok := teststore.ClusterURL(t); ok {
		urls = append(urls, [2]string{"redis-cluster", u})
	}
	return urls
}

var (
	botBinaryOnce sync.Once
	botBinaryDir  string
	botBinary     string
	botBinaryErr  error
)

// TestMain removes the bot binary the crash tests built.
func TestMain(m *testing.M) {
	code := m.Run()
	if botBinaryDir != "" {
		_ = os.RemoveAll(botBinaryDir)
	}
	os.Exit(code)
}

// buildBot builds cmd/bot once per test binary.
func buildBot(t *testing.T) string {
	t.Helper()
	botBinaryOnce.Do(func() {
		dir, err := os.MkdirTemp("", "toolgate-crash-")
		if err != nil {
			botBinaryErr = err
			return
		}
		botBinaryDir = dir
		botBinary = filepath.Join(dir, "bot")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		out, err := exec.Command(goBin, "build", "-o", botBinary, ".").CombinedOutput()
		if err != nil {
			botBinaryErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if botBinaryErr != nil {
		t.Fatal(botBinaryErr)
	}
	return botBinary
}

// cluster is the world of one crash test.
type cluster struct {
	t     *testing.T
	bin   string
	slack *fakeslack.Server
	model *fakeopenai.Server
	env   []string
	// redisURL and prefix are the replicas' Redis; dataDir, with no
	// redisURL, their embedded store's directory.
	redisURL string
	prefix   string
	dataDir  string
	// live are the replicas started and not killed.
	live []*replica
}

const (
	crashChannel   = "CCRASH0001"
	crashRequester = "UCRASHREQ1"
)

// newCluster prepares replicas of the bot with config on Redis at redisURL,
// or on the embedded store when it is "".
func newCluster(t *testing.T, redisURL, config string) *cluster {
	t.Helper()
	c := &cluster{t: t, bin: buildBot(t), slack: fakeslack.New(t), model: fakeopenai.New(t), redisURL: redisURL}
	c.slack.AddChannel(fakeslack.Channel{ID: crashChannel, Members: []string{crashRequester, c.slack.BotUserID()}})
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"SLACK_APP_TOKEN=" + c.slack.AppToken(),
		"SLACK_BOT_TOKEN=" + c.slack.BotToken(),
		"SLACK_API_URL=" + c.slack.APIURL(),
		"OPENAI_API_KEY=sk-crash-test",
		"OPENAI_BASE_URL=" + c.model.URL(),
		"CONFIG_FILE=" + cfgFile,
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=text",
		"LOG_LEVEL=info",
		// Short lease and scan so the takeover comes within seconds; the
		// defaults (10s, 5s) give 15s.
		"LEASE_TTL=1s",
		"TAKEOVER_INTERVAL=200ms",
	}
	if redisURL != "" {
		c.prefix = teststore.Prefix(t, redisURL, "toolgate-crash")
		c.env = append(c.env, "REDIS_URL="+redisURL, "REDIS_PREFIX="+c.prefix)
	} else {
		c.dataDir = t.TempDir()
		c.env = append(c.env, "DATA_DIR="+c.dataDir)
	}
	return c
}

// replica is one bot process.
type replica struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

// start starts a replica and waits until fake Slack has conns connections.
func (c *cluster) start(name string, conns int) *replica {
	c.t.Helper()
	r := &replica{name: name, out: &syncBuffer{}, done: make(chan struct{})}
	r.cmd = exec.Command(c.bin)
	r.cmd.Env = c.env
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() {
		defer close(r.done)
		_ = r.cmd.Wait()
	}()
	c.t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
		if c.t.Failed() {
			c.t.Logf("--- output of replica %s:\n%s", r.name, r.out.String())
		}
	})
	if err := c.slack.WaitConnected(conns, 20*time.Second); err != nil {
		c.t.Fatalf("replica %s: %v", name, err)
	}
	c.live = append(c.live, r)
	return r
}

// survive kills the replica a, which holds work, and leaves a survivor to
// carry that work on: on Redis a second replica, started before a is
// killed; on the embedded store, a started again on its data after the
// kill.
func (c *cluster) survive(a *replica) {
	c.t.Helper()
	if c.redisURL != "" {
		c.start("b", 2)
		a.kill(c.t)
	} else {
		a.kill(c.t)
		c.start("a again", 1)
	}
	c.live = slices.DeleteFunc(c.live, func(r *replica) bool { return r == a })
}

// stop stops the replica with SIGTERM and waits for it to exit.
func (r *replica) stop(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %s did not stop within 60s of SIGTERM", r.name)
	}
}

// kill kills the replica with SIGKILL and waits for it to be gone.
func (r *replica) kill(t *testing.T) {
	t.Helper()
	if err := r.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r.done
}

// mention posts a mention and waits until its envelopes are acked: from then
// on Slack would not deliver them again.
func (c *cluster) mention(text string) string {
	c.t.Helper()
	ts := c.slack.Mention(crashChannel, crashRequester, text)
	for _, env := range c.slack.EnvelopesByTS(ts) {
		if _, err := c.slack.WaitAck(env.ID, 10*time.Second); err != nil {
			c.t.Fatal(err)
		}
	}
	return ts
}

// botReplies waits until the thread has a bot message containing want
// (within the 30 s the README promises).
func (c *cluster) botReplies(ts, want string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got []string
		found := false
		for _, m := range c.slack.Thread(crashChannel, ts) {
			if m.BotID != "" {
				got = append(got, m.Text)
				found = found || strings.Contains(m.Text, want)
			}
		}
		if found {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no answer %q in the thread 30s after the crash; bot messages: %q", want, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// hold makes the first model request wait until the test ends, reporting
// it on the returned channel; later requests get answer.
func (c *cluster) hold(first fakeopenai.Response, answer func(openai.ChatCompletionRequest) fakeopenai.Response) <-chan struct{} {
	entered := make(chan struct{})
	released := make(chan struct{})
	// Registered after the fake model's own clean-up, so it runs first and
	// lets the held request end before the server closes.
	c.t.Cleanup(func() { close(released) })
	var n atomic.Int64
	c.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if n.Add(1) == 1 {
			close(entered)
			if first.Text == "" && len(first.ToolCalls) == 0 {
				<-released
			}
			return first
		}
		return answer(req)
	})
	return entered
}

// answeredOnce waits until the thread has a bot message containing want
// (see botReplies), then until the store has nothing left to answer or
// resume (see settled), and checks that the answer is there once: a second
// one would come from work still listed after the first.
func (c *cluster) answeredOnce(ts, want string) {
	c.t.Helper()
	c.botReplies(ts, want)
	c.settled()
	var got []string
	for _, m := range c.slack.Thread(crashChannel, ts) {
		if m.BotID != "" {
			got = append(got, m.Text)
		}
	}
	if n := strings.Count(strings.Join(got, "\n"), want); n != 1 {
		c.t.Errorf("the answer was posted %d times, want once; bot messages: %q", n, got)
	}
}

// settled waits until the store lists no conversation to take over and no
// run to resume: from then on no replica has work left that could answer
// again. The embedded store is read once its replica has stopped (SIGTERM:
// it finishes its work first), as only one process may open it.
func (c *cluster) settled() {
	c.t.Helper()
	var st interface {
		Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error)
		Stalled(ctx context.Context, limit int) ([]string, error)
		Close() error
	}
	var err error
	if c.redisURL != "" {
		st, err = redisstore.New(context.Background(), c.redisURL, redisstore.Options{Prefix: c.prefix})
	} else {
		for _, r := range c.live {
			r.stop(c.t)
		}
		c.live = nil
		st, err = boltstore.Open(filepath.Join(c.dataDir, "toolgate.db"), boltstore.Options{})
	}
	if err != nil {
		c.t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		unanswered, err := st.Unanswered(context.Background(), time.Now().Add(time.Hour), 0, 10)
		if err != nil {
			c.t.Fatal(err)
		}
		stalled, err := st.Stalled(context.Background(), 10)
		if err != nil {
			c.t.Fatal(err)
		}
		if len(unanswered) == 0 && len(stalled) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("30s after the answer, the store still lists conversations %q and runs %q", unanswered, stalled)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitFor waits for ch to close, failing the test after 20s.
func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not come within 20s", what)
	}
}

const crashModelConfig = `
policy:
  default: allow
`

// A replica killed while its turn waits on the model: the other replica
// takes the turn over once the lease lapses and answers the thread, once.
func TestCrashDuringModelCall(t *testing.T) {
	forEachStore(t, testCrashDuringModelCall)
}

func testCrashDuringModelCall(t *testing.T, redisURL string) {
	c := newCluster(t, redisURL, crashModelConfig)
	entered := c.hold(fakeopenai.Response{}, func(openai.ChatCompletionRequest) fakeopenai.Response {
		return fakeopenai.Text("answered by the survivor")
	})
	a := c.start("a", 1)
	ts := c.mention("what is deployed?")
	waitFor(t, entered, "the first replica's model call") // a holds the turn
	c.survive(a)

	c.answeredOnce(ts, "answered by the survivor")
	reqs := c.model.Requests()
	last := reqs[len(reqs)-1]
	users := 0
	for _, m := range last.Messages {
		if m.Role == openai.ChatMessageRoleUser {
			users++
			if m.Content != "what is deployed?" {
				t.Errorf("the survivor sent the user message %q", m.Content)
			}
		}
	}
	if users != 1 {
		t.Errorf("the survivor sent %d user messages, want the mention once", users)
	}
}

// A replica killed while its answer is on its way to Slack (the post is
// rate limited): the turn is recorded only once its answer is shown, so
// the survivor takes it over and answers the thread.
func TestCrashWhileTheAnswerIsPosted(t *testing.T) {
	forEachStore(t, testCrashWhileTheAnswerIsPosted)
}

func testCrashWhileTheAnswerIsPosted(t *testing.T, redisURL string) {
	c := newCluster(t, redisURL, crashModelConfig)
	c.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return fakeopenai.Text("Deployed.") })
	// The first replica's answer is the first post: Slack asks it to wait.
	c.slack.RateLimit("chat.postMessage", 1, 60)
	a := c.start("a", 1)
	ts := c.mention("what is deployed?")
	if _, err := c.slack.WaitCall("chat.postMessage", func(fakeslack.Call) bool { return true }, 20*time.Second); err != nil {
		t.Fatalf("the first replica posted no answer: %v", err)
	}
	c.survive(a)
	c.answeredOnce(ts, "Deployed.")
}

// A replica killed while an allowed tool runs: the survivor answers; a tool
// that may not repeat (http_request) is not run again and the model is told
// its outcome is unknown, while a read-only one (http_get) runs again.
func TestCrashDuringToolCall(t *testing.T) {
	forEachStore(t, testCrashDuringToolCall)
}

func testCrashDuringToolCall(t *testing.T, redisURL string) {
	for _, tc := range []struct {
		tool, args string
		wantHits   int64
		wantResult string
	}{
		{"http_request", `{"method":"POST","url":"%s/deploy"}`, 1, "outcome unknown: the bot stopped while http_request was running"},
		{"http_get", `{"url":"%s/status"}`, 2, "all green"},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			srv, hits, hit := heldTool(t, "all green")
			host := strings.TrimPrefix(srv.URL, "http://")
			c := newCluster(t, redisURL, fmt.Sprintf(`
builtin_tools:
  http_request:
    allowed_hosts: [%q]
    timeout: 60s
policy:
  default: ask
  rules:
    - tool: "http_*"
      verdict: allow
`, host))
			call := fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: tc.tool, Arguments: fmt.Sprintf(tc.args, srv.URL)})
			results := c.holdReporting(call)
			a := c.start("a", 1)
			ts := c.mention("roll it out")
			t.Cleanup(func() {
				if t.Failed() {
					for i, r := range c.model.Requests() {
						b, _ := json.Marshal(r.Messages)
						t.Logf("model request %d: %s", i+1, b)
					}
				}
			})
			waitFor(t, hit, "the first replica's tool call") // a runs the tool
			c.survive(a)

			c.answeredOnce(ts, "survivor reporting")
			if n := hits.Load(); n != tc.wantHits {
				t.Errorf("%s ran %d times, want %d", tc.tool, n, tc.wantHits)
			}
			if got := results(); len(got) != 1 || !strings.Contains(got[0], tc.wantResult) {
				t.Errorf("the survivor gave the model the results %q, want one with %q", got, tc.wantResult)
			}
		})
	}
}

// A replica killed after posting a pause's card and before recording the
// pause (Slack has the card; the store has nothing of it): a click on that
// card decides nothing and is told so, the survivor runs the turn again and
// posts its own card, and approving that one runs the tool once.
func TestCrashBetweenCardAndSave(t *testing.T) {
	forEachStore(t, testCrashBetweenCardAndSave)
}

func testCrashBetweenCardAndSave(t *testing.T, redisURL string) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, "deployed")
	}))
	t.Cleanup(srv.Close)
	c := newCluster(t, redisURL, fmt.Sprintf(`
builtin_tools:
  http_request:
    allowed_hosts: [%q]
policy:
  default: ask
`, strings.TrimPrefix(srv.URL, "http://")))
	approver := c.addApprover()
	call := fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "http_request", Arguments: fmt.Sprintf(`{"method":"POST","url":"%s/deploy"}`, srv.URL)})
	c.hold(call, func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleTool {
			return fakeopenai.Text("deployed after approval: " + last.Content)
		}
		return call // the survivor starts the turn over
	})
	arrived, release := c.slack.HoldNext("chat.postMessage")
	a := c.start("a", 1)
	ts := c.mention("roll it out")
	waitFor(t, arrived, "the first replica's card") // a is posting the card
	c.survive(a)
	release() // Slack posts the card whose poster is gone

	isCard := func(m fakeslack.Message) bool {
		return m.ThreadTS == ts && strings.Contains(string(m.Blocks), `"action_id":"approve"`)
	}
	orphan, err := c.slack.WaitMessage(crashChannel, isCard, 10*time.Second)
	if err != nil {
		t.Fatalf("the first replica's card: %v", err)
	}
	card, err := c.slack.WaitMessage(crashChannel, func(m fakeslack.Message) bool { return isCard(m) && m.TS != orphan.TS }, 30*time.Second)
	if err != nil {
		t.Fatalf("the survivor's card: %v", err)
	}

	if _, err := c.slack.Click(approver, crashChannel, orphan.TS, "approve", ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !slices.ContainsFunc(c.slack.Ephemerals(approver), func(e fakeslack.Ephemeral) bool { return strings.Contains(e.Text, "don't know this request") }) {
		if time.Now().After(deadline) {
			t.Fatalf("the click on the unsaved card was not answered; ephemerals: %+v", c.slack.Ephemerals(approver))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the tool ran %d times before the survivor's card was approved", n)
	}

	if _, err := c.slack.Click(approver, crashChannel, card.TS, "approve", ""); err != nil {
		t.Fatal(err)
	}
	c.answeredOnce(ts, "deployed after approval")
	if n := hits.Load(); n != 1 {
		t.Errorf("the tool ran %d times, want once", n)
	}
}

// A replica killed while an approved call's tool runs: the survivor
// resumes the run once the dead replica's claim lapses, does not run the
// tool again, tells the model its outcome is unknown and says so on the
// card, and answers the thread once.
func TestCrashDuringApprovedToolCall(t *testing.T) {
	forEachStore(t, testCrashDuringApprovedToolCall)
}

func testCrashDuringApprovedToolCall(t *testing.T, redisURL string) {
	srv, hits, hit := heldTool(t, "deployed again")
	c := newCluster(t, redisURL, fmt.Sprintf(`
builtin_tools:
  http_request:
    allowed_hosts: [%q]
    timeout: 60s
policy:
  default: ask
`, strings.TrimPrefix(srv.URL, "http://")))
	approver := c.addApprover()
	call := fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "http_request", Arguments: fmt.Sprintf(`{"method":"POST","url":"%s/deploy"}`, srv.URL)})
	results := c.holdReporting(call)
	a := c.start("a", 1)
	ts := c.mention("roll it out")
	card, err := c.slack.WaitMessage(crashChannel, func(m fakeslack.Message) bool {
		return m.ThreadTS == ts && strings.Contains(string(m.Blocks), `"action_id":"approve"`)
	}, 20*time.Second)
	if err != nil {
		t.Fatalf("the card: %v", err)
	}
	if _, err := c.slack.Click(approver, crashChannel, card.TS, "approve", ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, hit, "the approved call's tool") // a runs it
	c.survive(a)

	c.answeredOnce(ts, "survivor reporting")
	if n := hits.Load(); n != 1 {
		t.Errorf("the approved tool ran %d times, want once", n)
	}
	if got := results(); len(got) != 1 || !strings.Contains(got[0], "outcome unknown") {
		t.Errorf("the survivor gave the model the results %q, want one saying the outcome is unknown", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, ok := c.slack.Message(crashChannel, card.TS)
		if ok && strings.Contains(strings.ToLower(string(m.Blocks)+m.Text), "outcome unknown") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the card does not say the outcome is unknown: %s %s", m.Text, m.Blocks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// heldTool serves a tool whose first request is held until the replica
// that sent it is gone (or the test ends); later requests get answer. It
// returns the server, the count of requests, and a channel closed when the
// first one arrives.
func heldTool(t *testing.T, answer string) (*httptest.Server, *atomic.Int64, <-chan struct{}) {
	var hits atomic.Int64
	hit := make(chan struct{})
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hits.Add(1) == 1 {
			close(hit)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		fmt.Fprint(w, answer)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	return srv, &hits, hit
}

// holdReporting makes the model ask for call, first and whenever a turn
// starts over, and answer "survivor reporting" to a tool's result; it
// returns the tool results the model got.
func (c *cluster) holdReporting(call fakeopenai.Response) func() []string {
	var results []string
	var mu sync.Mutex
	c.hold(call, func(req openai.ChatCompletionRequest) fakeopenai.Response {
		last := req.Messages[len(req.Messages)-1]
		if last.Role != openai.ChatMessageRoleTool {
			return call // the survivor starts the turn over
		}
		mu.Lock()
		results = append(results, last.Content)
		mu.Unlock()
		return fakeopenai.Text("survivor reporting")
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(results)
	}
}

// addApprover adds a person to the channel, who approves with the
// default policy, and returns their id.
func (c *cluster) addApprover() string {
	const approver = "UCRASHAPP1"
	c.slack.AddUser(fakeslack.User{ID: approver, Name: "approver"})
	c.slack.Join(crashChannel, approver)
	return approver
}

// defaults drops the short LEASE_TTL and TAKEOVER_INTERVAL newCluster
// sets: the replicas run with the defaults (10 s, 5 s).
func (c *cluster) defaults() {
	c.env = slices.DeleteFunc(c.env, func(e string) bool {
		return strings.HasPrefix(e, "LEASE_TTL=") || strings.HasPrefix(e, "TAKEOVER_INTERVAL=")
	})
}

// With the default LEASE_TTL and TAKEOVER_INTERVAL, a replica killed during
// a model call is taken over and its thread answered by the survivor, as
// the README says, within 30 s of the crash (the lease's 10 s, then a scan
// every 5 s; answeredOnce waits no longer).
func TestCrashDuringModelCallWithTheDefaults(t *testing.T) {
	forEachRedis(t, func(t *testing.T, redisURL string) {
		c := newCluster(t, redisURL, crashModelConfig)
		c.defaults()
		entered := c.hold(fakeopenai.Response{}, func(openai.ChatCompletionRequest) fakeopenai.Response {
			return fakeopenai.Text("answered by the survivor")
		})
		a := c.start("a", 1)
		ts := c.mention("what is deployed?")
		waitFor(t, entered, "the first replica's model call")
		c.survive(a)
		c.answeredOnce(ts, "answered by the survivor")
	})
}
