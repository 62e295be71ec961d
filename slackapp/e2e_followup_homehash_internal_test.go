package slackapp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// listedAgent is an Agent whose pending calls are those the test lists,
// shared by the replicas of a test as their store would be.
type listedAgent struct {
	Agent
	mu    sync.Mutex
	calls []agent.PendingCall
	reads int // listings made
}

func (l *listedAgent) Pending(context.Context, store.Filter) ([]agent.PendingCall, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	return slices.Clone(l.calls), nil
}

func (l *listedAgent) listings() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

func (l *listedAgent) list(calls ...agent.PendingCall) {
	l.mu.Lock()
	l.calls = calls
	l.mu.Unlock()
}

// noRecords is a record store with no policy records and no standing
// rules.
type noRecords struct{}

func (noRecords) PutRecord(_ context.Context, r store.Record, _ int64) (store.Record, error) {
	return r, nil
}
func (noRecords) Records(context.Context, string) ([]store.Record, error) { return nil, nil }
func (noRecords) DeleteRecord(context.Context, string, string) error      { return store.ErrNotFound }

// homeReplicas starts n apps on one fake Slack and one listing of pending
// calls, as replicas of the bot, without their Socket Mode connections:
// the tests publish Home tabs through them directly.
func homeReplicas(t *testing.T, fs *fakeslack.Server, listed *listedAgent, n int) []*App {
	var apps []*App
	for range n {
		a, err := New(Config{BotToken: fs.BotToken(), AppToken: fs.AppToken(), APIURL: fs.APIURL()}, nil, approvals.NewEngine(nil, noRecords{}))
		if err != nil {
			t.Fatal(err)
		}
		a.ag = listed
		apps = append(apps, a)
	}
	return apps
}

// homeHashWorld is a fake Slack with a requester and an approver, and a
// call the approver may decide.
func homeHashWorld(t *testing.T) (*fakeslack.Server, agent.PendingCall) {
	fs := fakeslack.New(t)
	for _, u := range []string{"UREQ", "UAPP"} {
		fs.AddUser(fakeslack.User{ID: u, Name: strings.ToLower(u)})
	}
	fs.AddChannel(fakeslack.Channel{ID: "C1", Name: "general", Members: []string{"UREQ", "UAPP", fs.BotUserID()}})
	pc := agent.PendingCall{Call: agent.Call{
		ID: "r1.0", RunID: "r1", Tool: "deploy", Args: json.RawMessage(`{"service":"api"}`), Fingerprint: "fp",
		Requester: "UREQ", Channel: "C1", Approvers: []string{"UAPP"}, Status: agent.CallPending,
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
	}}
	return fs, pc
}

// listsCall reports whether user's Home tab, as last published, lists the
// deploy call with its buttons.
func listsCall(fs *fakeslack.Server, user string) bool {
	home, ok := fs.HomeView(user)
	return ok && strings.Contains(string(home.JSON), `"action_id":"`+ActionApprove+`"`)
}

// A replica whose publish of a tab it published before is slow, read
// before the call was decided, does not put its reading over the tab
// another replica published after the decision: Slack refuses it for the
// hash it carries, and it reads again.
func TestHomeOfAnOlderReadingRefusedByItsHash(t *testing.T) {
	fs, pc := homeHashWorld(t)
	listed := &listedAgent{}
	listed.list(pc)
	apps := homeReplicas(t, fs, listed, 2)
	slow, other := apps[0], apps[1]
	slow.publishHomes(t.Context(), []string{"UAPP"}, nil)
	if !listsCall(fs, "UAPP") {
		t.Fatal("the tab does not list the pending call")
	}

	publishStaleAndNew(t, fs, listed, slow, other)
	refused := slices.ContainsFunc(fs.Calls("views.publish"), func(c fakeslack.Call) bool { return c.Error == "hash_conflict" })
	if !refused {
		t.Error("no publish was refused for its hash")
	}
}

// A replica that publishes a tab it does not know the hash of, slowly,
// from a reading made before the call was decided, puts the newer tab
// back once its own is out: it reads again, and publishes what changed
// with the hash its own publish got.
func TestHomePublishedWithoutAHashIsChecked(t *testing.T) {
	fs, pc := homeHashWorld(t)
	listed := &listedAgent{}
	listed.list(pc)
	apps := homeReplicas(t, fs, listed, 2)
	slow, other := apps[0], apps[1]

	publishStaleAndNew(t, fs, listed, slow, other)

	// Once each replica knows the hash of the tab it published last, a
	// publish with nothing changed is one call, with its hash.
	before := len(fs.Calls("views.publish"))
	slow.publishHomes(t.Context(), []string{"UAPP"}, nil)
	calls := fs.Calls("views.publish")
	if n := len(calls) - before; n != 1 || calls[len(calls)-1].Error != "" {
		t.Errorf("a publish of a tab this replica published last took %d call(s), the last failing with %q; want one", n, calls[len(calls)-1].Error)
	}
}

// publishStaleAndNew has slow publish UAPP's tab from a reading with the
// call pending, held at the fake Slack, while the call is decided and
// other publishes the tab after it; then lets the held publish go on, and
// checks that the tab shown is the newer one.
func publishStaleAndNew(t *testing.T, fs *fakeslack.Server, listed *listedAgent, slow, other *App) {
	t.Helper()
	arrived, release := fs.HoldNext("views.publish")
	defer release()
	done := make(chan struct{})
	go func() {
		defer close(done)
		slow.publishHomes(t.Context(), []string{"UAPP"}, nil)
	}()
	<-arrived // read with the call pending, held

	listed.list() // decided
	other.publishHomes(t.Context(), []string{"UAPP"}, nil)
	if listsCall(fs, "UAPP") {
		t.Fatal("the other replica's tab lists the decided call")
	}
	release()
	<-done
	if listsCall(fs, "UAPP") {
		t.Error("the tab read before the decision is shown over the one published after it")
	}
}

// A replica that knows no hash of a tab publishes it, as its user opens
// it, with the hash of the view the app_home_opened event carries: one
// publish from one listing, with no check after it.
func TestOpenedHomePublishedWithTheHashItWasOpenedWith(t *testing.T) {
	fs, pc := homeHashWorld(t)
	listed := &listedAgent{}
	listed.list(pc)
	apps := homeReplicas(t, fs, listed, 2)
	apps[0].publishHomes(t.Context(), []string{"UAPP"}, nil)
	home, ok := fs.HomeView("UAPP")
	if !ok || home.Hash == "" {
		t.Fatal("the tab was not published with a hash")
	}

	raw, err := json.Marshal(map[string]any{
		"envelope_id": "e1", "type": envelopeEvents,
		"payload": map[string]any{"type": "event_callback", "event": map[string]any{
			"type": "app_home_opened", "user": "UAPP", "tab": "home", "view": json.RawMessage(home.JSON),
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	env := &envelope{}
	if err := fastjson.Unmarshal(raw, env); err != nil {
		t.Fatal(err)
	}
	env.raw = raw
	before, listings := len(fs.Calls("views.publish")), listed.listings()
	apps[1].onEventsAPI(t.Context(), env, func() {})
	apps[1].wg.Wait()

	calls := fs.Calls("views.publish")[before:]
	if len(calls) != 1 || calls[0].Error != "" || calls[0].Param("hash") != home.Hash {
		var got []string
		for _, c := range calls {
			got = append(got, "hash "+c.Param("hash")+" error "+c.Error)
		}
		t.Errorf("publishes as the tab was opened: %q; want one, with the hash %q, accepted", got, home.Hash)
	}
	if n := listed.listings() - listings; n != 1 {
		t.Errorf("the pending calls were listed %d times, want once", n)
	}
}
