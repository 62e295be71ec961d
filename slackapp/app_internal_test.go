package slackapp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/store"
)

// When every handler slot is taken, spawn answers "busy" at once instead of
// running the work in the caller (the Socket Mode loop).
func TestSpawnBusyWhenSaturated(t *testing.T) {
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", MaxHandlers: 1}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	started := make(chan struct{})
	a.spawn(func(context.Context) {
		close(started)
		<-release
	}, func() { t.Error("busy with a free slot") })
	<-started

	busy := false
	a.spawn(func(context.Context) { t.Error("work ran although every slot was taken") }, func() { busy = true })
	if !busy {
		t.Error("busy was not called with every slot taken")
	}
	close(release)
	a.spawned.Wait()

	ran := make(chan struct{})
	a.spawn(func(context.Context) { close(ran) }, func() { t.Error("busy after the slot was freed") })
	select {
	case <-ran:
	case <-time.After(5 * time.Second):
		t.Fatal("work did not run once the slot was free")
	}
	a.spawned.Wait()
}

func TestRefusalTextPolicyDenied(t *testing.T) {
	err := fmt.Errorf("decide r.0: %w", &agent.DetailError{Err: approvals.ErrPolicyDenied, Detail: "Deploys are frozen"})
	text, result := refusalText(store.Call{}, "U1", err)
	if result != "policy_denied" || text != "The policy now denies this call: Deploys are frozen. Nothing ran." {
		t.Errorf("refusalText = %q, %q", text, result)
	}
}

func TestRequireAdmin(t *testing.T) {
	// Nothing listens on the API URL: every look-up fails.
	a, err := New(Config{BotToken: "xoxb-test", AppToken: "xapp-test", APIURL: "http://127.0.0.1:1/", AdminUsers: []string{"UADMIN"}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "UADMIN", adminChange); !ok || refusal != "" {
		t.Errorf("requireAdmin(an admin) = %q, %v", refusal, ok)
	}
	if refusal, ok := a.requireAdmin(context.Background(), "USOMEONE", adminChange); ok || !strings.Contains(refusal, "nothing changed") {
		t.Errorf("requireAdmin(someone, no Web API) = %q, %v", refusal, ok)
	}
}
