package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store/redisstore"
)

// A short run on each store checks the tool's own accounting: every
// conversation of every phase is counted once, every cycle completes, and
// nothing is lost, duplicated, unapproved or unacked. No timing is
// asserted.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the bot")
	}
	bin, err := buildBot(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	stores := [][]string{{"-store", "embedded"}}
	if url := os.Getenv("REDIS_URL"); url != "" {
		stores = append(stores, []string{"-store", "redis", "-redis-url", url, "-replicas", "2"})
	} else if os.Getenv("CI") == "true" {
		t.Error("REDIS_URL is not set: the Redis smoke run cannot run")
	}
	for _, st := range stores {
		t.Run(st[1], func(t *testing.T) {
			const (
				conversations = 24
				probe         = 1
				parked        = 10
				warmup        = 5
				asked         = 18 // 24 x 0.75
			)
			out := filepath.Join(t.TempDir(), "report.json")
			args := append([]string{
				"-bot", bin, "-conversations", "24", "-rate", "40", "-ask", "0.75",
				"-model-latency", "20ms", "-click-delay", "20ms", "-probe", "1",
				"-paused", "10", "-paused-warmup", "5", "-paused-rate", "100", "-settle", "1s", "-settle-after", "200ms", "-channels", "5", "-timeout", "60s",
				"-mention-bytes", "3000", "-log-level", "warn", "-json", out,
			}, st...)
			var stdout, stderr bytes.Buffer
			if err := run(t.Context(), args, &stdout, &stderr); err != nil {
				t.Fatalf("loadbench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
			}
			raw, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(raw, &got); err != nil {
				t.Fatalf("the JSON report does not parse: %v\n%s", err, raw)
			}
			if missing := missingKeys(t, got); len(missing) > 0 {
				t.Errorf("the JSON report lacks %v:\n%s", missing, raw)
			}
			var rep Report
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Settings.MentionBytes != 3000 {
				t.Errorf("the report's settings say mentions of %d bytes more, want 3000", rep.Settings.MentionBytes)
			}
			a := rep.Accounting
			// The probe phase runs one warm-up conversation first, and the
			// paused phase warmup allowed ones.
			if want := conversations + probe + 1 + warmup + parked; a.Conversations != want {
				t.Errorf("accounted %d conversations, want %d", a.Conversations, want)
			}
			if want := conversations + probe + 1 + warmup; a.Completed != want {
				t.Errorf("%d conversations completed, want %d", a.Completed, want)
			}
			if a.Parked != parked {
				t.Errorf("%d runs parked, want %d", a.Parked, parked)
			}
			if a.Lost+a.Duplicated+a.DuplicateExecutions+a.Unapproved+a.UnknownExecutions+a.UnackedEnvelopes+a.RedeliveredEnvelopes+rep.BotsDied != 0 {
				t.Errorf("accounting %+v, bots died %d; want nothing lost, duplicated, unapproved, unacked or redelivered", a, rep.BotsDied)
			}
			l := rep.Load
			if l.Offered != conversations || l.Cycles != asked || l.Allowed != conversations-asked {
				t.Errorf("load phase offered %d, %d cycles, %d allowed; want %d, %d, %d", l.Offered, l.Cycles, l.Allowed, conversations, asked, conversations-asked)
			}
			for name, d := range map[string]Dist{
				"mention -> card": l.BotAdded.MentionToCard, "click -> executed": l.BotAdded.ClickToExecuted,
				"click -> answer": l.BotAdded.ClickToAnswer,
			} {
				if d.Count != asked {
					t.Errorf("%s has %d samples, want one per cycle (%d)", name, d.Count, asked)
				}
			}
			if l.BotAdded.MentionToAnswerAllowed.Count != conversations-asked {
				t.Errorf("mention -> answer (allowed) has %d samples, want %d", l.BotAdded.MentionToAnswerAllowed.Count, conversations-asked)
			}
			// The fake model's time is measured for each asked
			// conversation's first request, and covers at least its
			// latency (-model-latency 20ms).
			if l.InModel.Count != asked || l.InModel.P50 < 20 {
				t.Errorf("time in the fake model: %d samples, p50 %v ms; want %d, at least 20 ms", l.InModel.Count, l.InModel.P50, asked)
			}
			// Both processes worked: each used some CPU per conversation,
			// and so did the Redis server, on Redis.
			if l.BotCPUPerConversation <= 0 || l.BenchCPUPerConversation <= 0 {
				t.Errorf("CPU per conversation: bot %v ms, bench %v ms; want both measured", l.BotCPUPerConversation, l.BenchCPUPerConversation)
			}
			if onRedis := st[1] == "redis"; onRedis != (l.RedisCPUPerConversation > 0) {
				t.Errorf("%s: Redis server CPU per conversation %v ms; want it measured on Redis only", st[1], l.RedisCPUPerConversation)
			}
			// Every conversation posts a card or starts streaming its
			// answer, and the per-method figures add up to the total.
			var sum float64
			for _, v := range l.SlackCalls.ByMethod {
				sum += v
			}
			if l.SlackCalls.ByMethod["chat.postMessage"]+l.SlackCalls.ByMethod["chat.startStream"] < 1 || math.Abs(sum-l.SlackCalls.Total) > 1e-9 {
				t.Errorf("Slack calls per conversation %+v: want at least one chat.postMessage or chat.startStream, and methods adding up to the total", l.SlackCalls)
			}
			if l.RoundTrip.Count == 0 || rep.Acks.Count == 0 {
				t.Errorf("%d round trips and %d acks measured, want some of each", l.RoundTrip.Count, rep.Acks.Count)
			}
			sc := rep.StoreCalls
			if sc.Pause.Total <= 0 || sc.Decide.Total <= 0 || sc.Resume.Total <= 0 {
				t.Errorf("store calls per pause, decide, resume: %v, %v, %v; want each counted", sc.Pause.Total, sc.Decide.Total, sc.Resume.Total)
			}
			// Redis round trips are counted on Redis only: there each step
			// has some, or is unknown (-1) where every window of it held
			// one of the bots' periodic passes, as a loaded machine makes
			// likely; on the embedded store none.
			for name, trips := range map[string]float64{"pause": sc.Pause.RoundTrips, "decide": sc.Decide.RoundTrips, "resume": sc.Resume.RoundTrips} {
				if onRedis := st[1] == "redis"; onRedis && trips <= 0 && trips != -1 || !onRedis && trips != 0 {
					t.Errorf("%s: Redis round trips per %s: %v", st[1], name, trips)
				}
			}
			if len(rep.Paused) != 1 || rep.Paused[0].Runs != parked || rep.Paused[0].RawHistoryBytesPerRun <= 0 {
				t.Errorf("paused samples %+v, want one at %d runs with history measured", rep.Paused, parked)
			} else if p := rep.Paused[0]; !measured(p.AfterBurst) || !measured(p.Settled) || p.SettleSeconds < 1 {
				t.Errorf("paused memory after the burst %+v, settled %+v after %vs; want both measured, settled after at least -settle 1s", p.AfterBurst, p.Settled, p.SettleSeconds)
			}
			if !strings.Contains(stdout.String(), "accounting: ") {
				t.Errorf("the table has no accounting line:\n%s", &stdout)
			}
		})
	}
}

// The probe counts a step's own store calls: the bots' periodic passes
// (the takeover scan, here every second, and the sweep, every two) fall
// into whichever step is open and are left out, with their round trips
// (none on the embedded store), and the Home tabs' round that a card and
// a decision set off has a line of its own.
func TestProbeCountsEachStepsOwnCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the bot")
	}
	bin, err := buildBot(t.Context(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.json")
	args := []string{"-bot", bin, "-conversations", "0", "-probe", "3", "-model-latency", "20ms", "-log-level", "warn", "-json", out,
		"-env", "TAKEOVER_INTERVAL=1s", "-env", "SWEEP_INTERVAL=2s"}
	var stdout, stderr bytes.Buffer
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("loadbench: %v\n%s\n%s", err, &stdout, &stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		StoreCalls map[string]json.RawMessage `json:"store_calls"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	steps := map[string]StorePhase{}
	for _, step := range []string{"pause", "decide", "resume", "home_refresh"} {
		var p StorePhase
		if raw, ok := rep.StoreCalls[step]; ok {
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatalf("store_calls.%s: %v", step, err)
			}
		}
		steps[step] = p
	}
	for step, p := range steps {
		if p.RoundTrips != 0 {
			t.Errorf("%s: %v Redis round trips on the embedded store, want 0", step, p.RoundTrips)
		}
	}
	for _, step := range []string{"pause", "decide", "resume"} {
		p := steps[step]
		for _, m := range []string{"Unanswered", "Stalled", "Due", "NextExpiry", "NextReminder", "DueReminders", "Pending", "Records"} {
			if n := p.ByMethod[m]; n != 0 {
				t.Errorf("%s counts %s %v per conversation, which is no work of the step: %+v", step, m, n, p)
			}
		}
	}
	if home := steps["home_refresh"]; home.ByMethod["Pending"] < 1 || home.ByMethod["Records"] < 1 {
		t.Errorf("home refresh %+v; want the Home round's listings, Pending and Records, at least once per conversation", home)
	}
	if t.Failed() {
		t.Logf("\n%s", &stdout)
	}
}

// measured reports whether every figure of m was read.
func measured(m Memory) bool {
	return m.RSSBytes > 0 && m.RSSFileBytes > 0 && m.HeapInuseBytes > 0 && m.HeapFreeBytes >= 0 && m.HeapGoalBytes > 0 && m.StackInuseBytes > 0 && m.RuntimeBytes > 0 && m.Goroutines > 0 && m.OpenFDs > 0
}

// missingKeys returns the key paths of a full report that got lacks.
func missingKeys(t *testing.T, got map[string]any) []string {
	t.Helper()
	full := Report{Paused: []PausedSample{{}}, StopErrors: []string{}}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	var missing []string
	var walk func(prefix string, want, got any)
	walk = func(prefix string, want, got any) {
		switch w := want.(type) {
		case map[string]any:
			g, ok := got.(map[string]any)
			if !ok {
				missing = append(missing, prefix+" (not an object)")
				return
			}
			for k, v := range w {
				gv, ok := g[k]
				if !ok {
					missing = append(missing, prefix+"."+k)
					continue
				}
				walk(prefix+"."+k, v, gv)
			}
		case []any:
			g, ok := got.([]any)
			if !ok {
				missing = append(missing, prefix+" (not a list)")
				return
			}
			if len(w) > 0 && len(g) > 0 {
				walk(prefix+"[0]", w[0], g[0])
			}
		}
	}
	walk("", want, got)
	sort.Strings(missing)
	return missing
}

// The accounting counts each kind of failure.
func TestAccounting(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	convs := []conv{
		{ask: true, cardTS: "1", clickAt: at(2), execAt: []time.Time{at(3)}, answerAt: at(4)},        // completed
		{ask: false, execAt: []time.Time{at(1)}, answerAt: at(2)},                                    // completed, allowed
		{ask: true, cardTS: "1", clickAt: at(2), execAt: []time.Time{at(3), at(3)}, answerAt: at(4)}, // duplicated
		{ask: true, cardTS: "1", clickAt: at(5), execAt: []time.Time{at(3)}, answerAt: at(6)},        // ran before the click
		{ask: true, cardTS: "1", execAt: []time.Time{at(3)}, answerAt: at(6)},                        // ran with no click
		{ask: true, cardTS: "1", clickAt: at(2)},                                                     // lost: never answered
		{ask: true, noClick: true, cardTS: "1"},                                                      // parked
		{ask: true, noClick: true},                                                                   // lost: no card
		{ask: true, noClick: true, cardTS: "1", execAt: []time.Time{at(3)}},                          // parked, but ran
		{ask: true, cardTS: "1", clickAt: at(2), execAt: []time.Time{at(3)}, answerAt: time.Time{}},  // lost: executed, no answer
		// Ran after the click began but before its envelope was sent to
		// a bot: unapproved.
		{ask: true, cardTS: "1", clickAt: at(2), clickSent: at(4), execAt: []time.Time{at(3)}, answerAt: at(5)},
	}
	var a Accounting
	a.account(convs)
	want := Accounting{Conversations: 11, Completed: 2, Parked: 2, Lost: 3, Duplicated: 1, DuplicateExecutions: 1, Unapproved: 4}
	if a != want {
		t.Errorf("accounting\n got %+v\nwant %+v", a, want)
	}
	r := Report{Accounting: a}
	if r.Problems() == nil {
		t.Error("a report with lost, duplicated and unapproved calls has no problems")
	}
	if (&Report{Accounting: Accounting{Conversations: 3, Completed: 3}}).Problems() != nil {
		t.Error("a clean report has problems")
	}
}

// A click's spans start when the fake sent its envelope, once known:
// building the click is the fake's work.
func TestClickSpansStartWhenTheClickIsSent(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	o := options{modelLatency: 100 * time.Millisecond}
	inModel := [2]time.Duration{100 * time.Millisecond, 100 * time.Millisecond}
	convs := []conv{
		// Sent 1 ms after the click began: 2 ms to execute, not 3.
		{ask: true, mentionAt: ms(0), cardAt: ms(101), cardTS: "1", clickAt: ms(200), clickSent: ms(201),
			execAt: []time.Time{ms(203)}, execEnd: ms(204), answerAt: ms(310), inModel: inModel},
		// Unknown: from the click's start.
		{ask: true, mentionAt: ms(0), cardAt: ms(101), cardTS: "1", clickAt: ms(200),
			execAt: []time.Time{ms(203)}, execEnd: ms(204), answerAt: ms(310), inModel: inModel},
	}
	r := loadResult(convs, o, t0, time.Second)
	if r.Cycles != 2 {
		t.Fatalf("%d cycles, want 2", r.Cycles)
	}
	exec, answer := r.EndToEnd.ClickToExecuted, r.EndToEnd.ClickToAnswer
	if exec.Count != 2 || exec.P50 != 2 || exec.Max != 3 {
		t.Errorf("click -> executed %+v, want 2 samples, 2 and 3 ms", exec)
	}
	// The answer: 109 and 110 ms end to end, less the model's 100 and the
	// tool's 1.
	if answer.Count != 2 || answer.P50 != 109 || answer.Max != 110 {
		t.Errorf("click -> answer end to end %+v, want 109 and 110 ms", answer)
	}
	if added := r.BotAdded.ClickToAnswer; added.P50 != 8 || added.Max != 9 {
		t.Errorf("click -> answer added %+v, want 8 and 9 ms", added)
	}
}

// The Redis server's CPU time is its user and system time from INFO cpu.
func TestRedisCPUSeconds(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\nused_cpu_sys_main_thread:1.200000\r\n"
	if got, err := redisCPUSeconds(info); err != nil || got != 3.75 {
		t.Errorf("redisCPUSeconds = %v, %v; want 3.75", got, err)
	}
	for _, bad := range []string{"# CPU\r\nused_cpu_sys:1.0\r\n", "", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"} {
		if got, err := redisCPUSeconds(bad); err == nil {
			t.Errorf("redisCPUSeconds(%q) = %v, nil; want an error", bad, got)
		}
	}
}

// The run's keys are measured and deleted on every node that holds them:
// a single node, and each primary of a Cluster, whose keys of several hash
// slots no command takes together.
func TestRunKeysOnEveryNode(t *testing.T) {
	for _, v := range []string{"REDIS_URL", "REDIS_CLUSTER_URL"} {
		t.Run(v, func(t *testing.T) {
			u := os.Getenv(v)
			if u == "" {
				if os.Getenv("CI") == "true" {
					t.Fatalf("%s is not set", v)
				}
				t.Skipf("%s is not set", v)
			}
			c, err := redisstore.NewClient(u)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			e := &env{redis: c, prefix: "loadbench-test-" + randomHex(6), ctx: t.Context(), log: io.Discard}
			for i := range 50 {
				if err := c.Set(t.Context(), fmt.Sprintf("%s:{k%d}", e.prefix, i), strings.Repeat("x", 100), time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := e.storedBytes(); err != nil || n < 50*100 {
				t.Errorf("storedBytes = %d, %v; want at least 5,000 for 50 keys of 100 bytes", n, err)
			}
			e.cleanRedis()
			var mu sync.Mutex // nodes are scanned at once
			var left []string
			err = e.scanKeys(t.Context(), func(_ context.Context, _ *redis.Client, keys []string) error {
				mu.Lock()
				defer mu.Unlock()
				left = append(left, keys...)
				return nil
			})
			if err != nil || len(left) != 0 {
				t.Errorf("keys left after cleanRedis: %v, %v", left, err)
			}
		})
	}
}
