package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/boltstore"
)

// A paused run with one call: the first decision wins and completes the
// run, a second click is told who decided, and the resume is claimed once.
func Example() {
	dir, _ := os.MkdirTemp("", "toolgate")
	defer os.RemoveAll(dir)
	s, err := boltstore.Open(filepath.Join(dir, "toolgate.db"), boltstore.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	ctx := context.Background()

	r := store.Run{ID: store.NewRunID(), Conversation: "C1:1700000000.000100", Requester: "U1"}
	call := store.Call{
		ID:          store.CallID(r.ID, 0),
		Tool:        "files__delete_file",
		Args:        []byte(`{"path":"/srv/report.txt"}`),
		Fingerprint: "f1",
		ExpiresAt:   time.Now().Add(72 * time.Hour),
	}
	if err := s.CreateRun(ctx, r, []store.Call{call}); err != nil {
		fmt.Println(err)
		return
	}

	c, complete, err := s.Decide(ctx, call.ID, "f1", store.Decision{Kind: "approve", Decider: "U2"})
	fmt.Println(c.Status, complete, err)

	c, _, err = s.Decide(ctx, call.ID, "f1", store.Decision{Kind: "deny", Decider: "U3"})
	fmt.Println(errors.Is(err, store.ErrAlreadyDecided), c.Decision.Decider)

	first, _ := s.ClaimResume(ctx, r.ID, "replica-a", time.Minute)
	second, _ := s.ClaimResume(ctx, r.ID, "replica-b", time.Minute)
	fmt.Println(first, second)
	// Output:
	// decided true <nil>
	// true U2
	// true false
}
