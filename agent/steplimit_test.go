package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeopenai"
)

// A resume that stops at the step limit, then answers a message queued
// during the pause and is cut by a shutdown while the model is asked,
// leaves a conversation that decodes: the cut takes back the queued
// messages' step, not the stop message's. The thread is answered after a
// restart.
func TestStepLimitThenACutLeavesTheThreadWhole(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			w := newWorld(t, b)
			w.cfg.MaxSteps = 1
			a := w.agent()
			p := pauseOne(t, w, a, call("c1", "deploy", `{"service":"api","version":"2"}`))
			q := request("meanwhile: is the cache warm?")
			q.User = "UOTHER2"
			_, err := a.Run(t.Context(), q)
			must(t, err)
			_, err = a.Decide(t.Context(), approvals.Decision{CallID: p.ID, Fingerprint: p.Fingerprint, Kind: approvals.Approve, Decider: "UAPPROVER1"})
			must(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			w.model.Reply(fakeopenai.Response{Text: "held", Delay: time.Minute})
			n := len(w.model.Requests())
			go func() {
				// Cut as the queued message's step asks the model.
				_, _ = w.model.WaitRequests(t.Context(), n+1)
				cancel()
			}()
			_, _ = a.Resume(ctx, p.RunID)

			w.model.Reply(fakeopenai.Text("The cache is warm."), fakeopenai.Text("Hello."))
			r := w.restart()
			if _, err := r.TakeOver(t.Context(), request("").Conversation); err != nil {
				t.Fatalf("taking the thread over after the cut: %v", err)
			}
			if _, err := r.Run(t.Context(), request("hello?")); err != nil {
				t.Fatalf("the thread fails after the cut: %v", err)
			}
		})
	}
}

// A stream whose connection breaks after the model said it finished
// (before [DONE]) gives its answer: the answer is whole, and was shown.
func TestStreamCutAfterTheFinishKeepsTheAnswer(t *testing.T) {
	m := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "100000") // more than is sent
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello there\"},\"finish_reason\":null}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
		w.(http.Flusher).Flush()
	})
	msg, err := m.Complete(t.Context(), userMessage("hi"), nil)
	if err != nil || msg.Content != "hello there" {
		t.Errorf("Complete = %q, %v; want the finished answer", msg.Content, err)
	}
}

// One cut before the model said it finished is still a failure.
func TestStreamCutBeforeTheFinishFails(t *testing.T) {
	m := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hello the\"},\"finish_reason\":null}]}\n\n")
		w.(http.Flusher).Flush()
	})
	if msg, err := m.Complete(t.Context(), userMessage("hi"), nil); err == nil {
		t.Errorf("Complete = %q, nil; want the cut stream refused", msg.Content)
	}
}
