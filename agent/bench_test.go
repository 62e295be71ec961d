package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
	"github.com/toolgate/toolgate/store/redisstore"
)

// roundTrips counts the round trips of a redisstore.RoundTrips hook.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) hook() redisstore.RoundTrips { return func() { r.n.Add(1) } }

func (r *roundTrips) load() int64 {
	if r == nil {
		return 0
	}
	return r.n.Load()
}

// BenchmarkDecideResumeRedis measures deciding one paused call and resuming
// its step on Redis, and reports the round trips that takes. Set REDIS_URL
// to run it; the keys it writes are deleted at the end.
func BenchmarkDecideResumeRedis(b *testing.B) {
	st, trips := benchRedis(b)
	benchDecideResume(b, st, trips)
}

// benchRedis opens a store on REDIS_URL, under a prefix of its own whose
// keys are deleted at the end, with its round trips counted; the
// benchmark is skipped without REDIS_URL.
func benchRedis(b *testing.B) (*redisstore.Store, *roundTrips) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		b.Skip("REDIS_URL is not set")
	}
	client, err := redisstore.NewClient(url)
	if err != nil {
		b.Fatal(err)
	}
	trips := &roundTrips{}
	client.AddHook(trips.hook())
	prefix := "agentbench-" + store.NewRunID()
	st := redisstore.NewFromClient(client, redisstore.Options{Prefix: prefix})
	b.Cleanup(func() { _ = st.Close() })
	b.Cleanup(func() {
		if err := deleteKeys(context.Background(), client, prefix+":*"); err != nil {
			b.Errorf("delete benchmark keys: %v", err)
		}
	})
	if err := st.Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st, trips
}

// BenchmarkDecideResumeBolt is the same on the embedded store, for
// comparison.
func BenchmarkDecideResumeBolt(b *testing.B) {
	benchDecideResume(b, benchBolt(b), nil)
}

// benchBolt opens an embedded store in a temporary directory, closed at
// the end.
func benchBolt(b *testing.B) *boltstore.Store {
	st, err := boltstore.Open(filepath.Join(b.TempDir(), "toolgate.db"), boltstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	return st
}

// benchStore is a Store that also keeps the policy's records.
type benchStore interface {
	agent.Store
	approvals.RecordStore
}

// benchDecideResume pauses one call per iteration, untimed, then times the
// approval and the resume, which runs the tool and asks the model for its
// answer. With trips set it reports the round trips of both.
func benchDecideResume(b *testing.B, st benchStore, trips *roundTrips) {
	ctx := context.Background()
	model := deployModel()
	defer model.Close()
	var runs atomic.Int64
	a := benchDeployAgent(b, st, model, testPolicy, func() { runs.Add(1) })

	var decideTrips, allTrips int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		out, err := a.Run(ctx, agent.Request{Conversation: fmt.Sprintf("bench/%d", i), User: "UREQUESTER", Channel: "C1", Text: "deploy api 1.2.3"})
		if err != nil {
			b.Fatal(err)
		}
		if out.Status != agent.Paused || len(out.Pending) != 1 {
			b.Fatalf("got %s with %d pending, want one paused call", out.Status, len(out.Pending))
		}
		p := out.Pending[0]
		start := trips.load()
		b.StartTimer()

		res, err := a.Decide(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
		if err != nil {
			b.Fatal(err)
		}
		decided := trips.load()
		if !res.Complete {
			b.Fatal("the only decision of the step did not complete it")
		}
		out, err = a.Resume(ctx, res.Call.RunID)
		if err != nil {
			b.Fatal(err)
		}

		b.StopTimer()
		decideTrips += decided - start
		allTrips += trips.load() - start
		if out.Status != agent.Answered {
			b.Fatalf("got %s after the resume, want answered", out.Status)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if n := runs.Load(); n != int64(b.N) {
		b.Fatalf("the tool ran %d times for %d approvals", n, b.N)
	}
	if trips != nil {
		b.ReportMetric(float64(allTrips)/float64(b.N), "roundtrips/decision")
		b.ReportMetric(float64(decideTrips)/float64(b.N), "decide-roundtrips/op")
	}
}

// BenchmarkTwoPersonApprovalsRedis measures the two approvals of a call
// that needs two, on the process that paused it, and reports the round
// trips of each: the first, counted, and the second, from its click to
// the tool's start. Set REDIS_URL to run it; the keys it writes are
// deleted at the end.
func BenchmarkTwoPersonApprovalsRedis(b *testing.B) {
	st, trips := benchRedis(b)
	benchTwoPerson(b, st, trips)
}

// BenchmarkTwoPersonApprovalsBolt is the same on the embedded store.
func BenchmarkTwoPersonApprovalsBolt(b *testing.B) {
	benchTwoPerson(b, benchBolt(b), nil)
}

// benchTwoPerson pauses one call per iteration, untimed, then times its two
// approvals and the resume. With trips set it reports the round trips of
// each approval.
func benchTwoPerson(b *testing.B, st benchStore, trips *roundTrips) {
	ctx := context.Background()
	model := deployModel()
	defer model.Close()
	var started atomic.Int64 // the round trips counted when the tool started
	a := benchDeployAgent(b, st, model, `
policy:
  rules:
    - id: two
      tool: deploy
      verdict: ask
      approvers: [UAPPROVER1, UAPPROVER2]
      min_approvals: 2
`, func() { started.Store(trips.load()) })
	var first, second int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		out, err := a.Run(ctx, agent.Request{Conversation: fmt.Sprintf("bench/%d", i), User: "UREQUESTER", Channel: "C1", Text: "deploy api 1.2.3"})
		if err != nil || out.Status != agent.Paused || len(out.Pending) != 1 {
			b.Fatalf("got %+v, %v; want one paused call", out, err)
		}
		p := out.Pending[0]
		start := trips.load()
		b.StartTimer()
		res, _, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
		if err != nil || res.Complete {
			b.Fatalf("first approval = %+v, %v; want counted", res, err)
		}
		counted := trips.load()
		res, taken, err := a.DecideTaking(ctx, approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER2"})
		if err != nil || !res.Complete {
			b.Fatalf("second approval = %+v, %v; want the step complete", res, err)
		}
		out, err = resumeTakenOr(ctx, a, taken, res.Call.RunID)
		if err != nil || out.Status != agent.Answered {
			b.Fatalf("resume = %+v, %v; want answered", out, err)
		}
		b.StopTimer()
		first += counted - start
		second += started.Load() - counted
		b.StartTimer()
	}
	b.StopTimer()
	if trips != nil {
		b.ReportMetric(float64(first)/float64(b.N), "first-roundtrips/op")
		b.ReportMetric(float64(second)/float64(b.N), "second-to-tool-roundtrips/op")
	}
}

// benchDeployAgent is an agent on st and model, judged by the policy
// file policy, whose deploy tool calls ran each time it runs.
func benchDeployAgent(b *testing.B, st benchStore, model *fakeopenai.Server, policy string, ran func()) *agent.Agent {
	tools := agent.NewRegistry()
	err := tools.Register(agent.Tool{Name: "deploy", Schema: json.RawMessage(deploySchema),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			ran()
			return agent.Result{Content: "deployed"}, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	p, err := approvals.ParseConfig([]byte(policy))
	if err != nil {
		b.Fatal(err)
	}
	return agent.New(
		agent.NewOpenAIModel(agent.ModelConfig{BaseURL: model.URL(), APIKey: "key", Model: "fake-model", Timeout: 10 * time.Second}),
		tools, approvals.NewEngine(p, st), st, nil, agent.Config{})
}

// deployModel is a fake model that asks to deploy, and answers once the
// deploy's result is in.
func deployModel() *fakeopenai.Server {
	model := fakeopenai.Start()
	model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if last := req.Messages[len(req.Messages)-1]; last.Role == openai.ChatMessageRoleTool {
			return fakeopenai.Text("Deployed.")
		}
		return fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "call_1", Name: "deploy", Arguments: `{"service":"api","version":"1.2.3"}`})
	})
	return model
}

// deleteKeys deletes the keys matching pattern on every primary, one DEL
// per key so that keys of different hash slots may go in one pipeline.
func deleteKeys(ctx context.Context, c redis.UniversalClient, pattern string) error {
	del := func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, pattern, 500).Iterator()
		pipe := c.Pipeline()
		for iter.Next(ctx) {
			pipe.Del(ctx, iter.Val())
			if pipe.Len() == 500 {
				if _, err := pipe.Exec(ctx); err != nil {
					return err
				}
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	return redisstore.EachPrimary(ctx, c, del)
}
