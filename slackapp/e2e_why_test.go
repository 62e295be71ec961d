package slackapp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// Why? on a pending card: the model, offered the tools but none callable
// (tool_choice none), explains the call
// in the thread; the call stays pending, the stored history does not keep
// the explanation, and the call is decided and runs afterwards as usual.
func TestWhyExplainsAndLeavesCallPending(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.start()
			const why = "It deploys api version 5, because you asked for it."
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"5"}`)),
				fakeopenai.Text(why), fakeopenai.Text("Deployed api 5."))
			ts := e.slack.Mention(channel, requester, "deploy api 5")
			card := e.card(ts, "deploy")

			// Anyone who can see the conversation may ask, not only approvers.
			_, err := e.slack.Click(stranger, channel, card.TS, slackapp.ActionWhy, "")
			must(t, err)
			got := e.answer(ts, why)
			if text := blocksText(got); !strings.Contains(text, "Explanation") || !strings.Contains(text, "<@"+stranger+">") {
				t.Errorf("the explanation is not marked as one, asked for by the clicker: %s", text)
			}
			req := e.request(2)
			if len(req.Tools) == 0 || req.ToolChoice != "none" {
				t.Errorf("the explanation request offers %d tools with tool_choice %v, want the tools with none callable", len(req.Tools), req.ToolChoice)
			}
			last := req.Messages[len(req.Messages)-1]
			if !strings.Contains(last.Content, "deploy") || !strings.Contains(last.Content, `"version":"5"`) {
				t.Errorf("the explanation request does not name the pending call: %q", last.Content)
			}
			if n := e.deploy.Load(); n != 0 {
				t.Errorf("deploy ran %d times after Why?", n)
			}
			if cards := e.cards(channel, ts); len(cards) != 1 {
				t.Fatalf("%d pending cards after Why?, want the one card still pending:\n%s", len(cards), dumpThread(e.slack.Thread(channel, ts)))
			}

			_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Deployed api 5.")
			if n := e.deploy.Load(); n != 1 {
				t.Errorf("deploy ran %d times after the approval, want 1", n)
			}
			for _, m := range e.request(3).Messages {
				if strings.Contains(m.Content, why) || strings.Contains(m.Content, "asks why") {
					t.Errorf("the resumed turn's history holds the explanation exchange: %q", m.Content)
				}
			}
		})
	}
}

// A model failure on Why? is told to the clicker only; the thread gets
// nothing and the call can still be decided.
func TestWhyModelFailureIsPrivate(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"6"}`)),
		fakeopenai.Error(401, "the key is refused"), fakeopenai.Text("Deployed api 6."))
	ts := e.slack.Mention(channel, requester, "deploy api 6")
	card := e.card(ts, "deploy")
	before := len(e.slack.Thread(channel, ts))

	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.ephemeral(other, "couldn't get an explanation")
	for _, u := range []string{requester, approver} {
		for _, m := range e.slack.Ephemerals(u) {
			if strings.Contains(m.Text, "explanation") {
				t.Errorf("%s was told about another person's failed Why?: %q", u, m.Text)
			}
		}
	}
	if n := len(e.slack.Thread(channel, ts)); n != before {
		t.Errorf("the thread has %d messages after a failed Why?, want %d:\n%s", n, before, dumpThread(e.slack.Thread(channel, ts)))
	}

	_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 6.")
	if n := e.deploy.Load(); n != 1 {
		t.Errorf("deploy ran %d times after the approval, want 1", n)
	}
}

// Why? from someone who cannot see the conversation and is no approver
// is refused privately, and the model is not asked.
func TestWhyRefusedToOutsider(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	const outsider = "UOUTSIDER1"
	e.slack.AddUser(fakeslack.User{ID: outsider, Name: "outsider"})
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"7"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 7")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(outsider, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	// Not in the channel, the outsider is told in a DM.
	e.answerIn(e.slack.DMChannel(outsider), "", "not part of")
	if n := len(e.model.Requests()); n != 1 {
		t.Errorf("the model was asked %d times, want 1 (no explanation for an outsider)", n)
	}
}

// One explanation per call at a time: a second Why? while the model is
// still writing the first is answered privately, and the model is asked
// once.
func TestWhyOneAtATime(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	arrived, release := modelGate(t)
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		arrived <- struct{}{}
		<-release
		return fakeopenai.Text("Because you asked for version 10.")
	})
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"10"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 10")
	card := e.card(ts, "deploy")

	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	<-arrived
	_, err = e.slack.Click(stranger, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.ephemeral(stranger, "already being written")
	close(release)
	e.answer(ts, "Because you asked for version 10.")
	if n := len(e.model.Requests()); n != 2 {
		t.Errorf("the model was asked %d times, want 2 (the turn and one explanation)", n)
	}
}

// Why? on the copy of a private conversation's card in APPROVALS_CHANNEL
// sends the explanation, written from that conversation, to the clicker's
// DM with the bot: not to the approvals channel, whose other members may
// not see the conversation.
func TestWhyOnAnApprovalsChannelCopyIsSentToTheClickerOnly(t *testing.T) {
	const private = "CPRIVATE01"
	const approvalsChannel = "CAPPROVALS"
	const bystander = "UBYSTANDER"
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddUser(fakeslack.User{ID: bystander, Name: "bystander"})
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: []string{approver, other, bystander, e.slack.BotUserID()}})
	e.cfg.ApprovalsChannel = approvalsChannel
	e.start()
	const why = "The requester said the ACME merger closes Friday, so vault 14 must ship."
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text(why))
	ts := e.slack.Mention(private, requester, "deploy vault 14 before the ACME merger")
	e.cardIn(private, ts, "deploy")
	cp, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)

	_, err = e.slack.Click(approver, approvalsChannel, cp.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.answerIn(private, ts, why)
	if _, err := e.slack.WaitMessage(e.slack.DMChannel(approver), func(m fakeslack.Message) bool {
		return strings.Contains(blocksText(m), "ACME")
	}, 10*time.Second); err != nil {
		t.Fatalf("the clicker got no explanation in their DM: %v", err)
	}
	for _, m := range e.slack.Messages(approvalsChannel) {
		if strings.Contains(blocksText(m)+m.Text, "ACME") {
			t.Fatalf("the explanation of a private conversation was posted in the approvals channel, where %s reads it: %q", bystander, m.Text)
		}
	}
}

// The private channel and the approvals channel of approvalsChannelEnv.
const (
	private          = "CPRIVATE01"
	approvalsChannel = "CAPPROVALS"
)

// approvalsChannelEnv starts a bot with APPROVALS_CHANNEL set: the
// requester's private channel, where no approver is, and the approvals
// channel, with the approvers and a bystander.
func approvalsChannelEnv(t *testing.T) *env {
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddUser(fakeslack.User{ID: "UBYSTANDER", Name: "bystander"})
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.slack.AddChannel(fakeslack.Channel{ID: approvalsChannel, Name: "approvals", Members: []string{approver, other, "UBYSTANDER", e.slack.BotUserID()}})
	e.cfg.ApprovalsChannel = approvalsChannel
	e.start()
	return e
}

// A copy of the card outside the conversation (APPROVALS_CHANNEL, read by
// people who may not see a private conversation) says that the call ran,
// not what it returned; the thread's card shows the output.
func TestApprovalsChannelCopyShowsNoOutput(t *testing.T) {
	e := approvalsChannelEnv(t)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("shipped"))
	ts := e.slack.Mention(private, requester, "deploy vault 14")
	card := e.cardIn(private, ts, "deploy")
	cp, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)
	_, err = e.slack.Click(approver, approvalsChannel, cp.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answerIn(private, ts, "shipped")
	e.waitIn(private, ts, "with the card showing the output", func(m fakeslack.Message) bool {
		return m.TS == card.TS && strings.Contains(blocksText(m), "deployed {")
	})
	ran := func(m fakeslack.Message) bool {
		return m.TS == cp.TS && strings.Contains(blocksText(m), "Outcome:* ran")
	}
	got, err := e.slack.WaitMessage(approvalsChannel, ran, 10*time.Second)
	must(t, err)
	if strings.Contains(blocksText(got)+got.Text, "deployed {") {
		t.Errorf("the copy in the approvals channel shows the tool's output:\n%s", blocksText(got))
	}
	if !strings.Contains(blocksText(got), "the output is in the conversation's thread") {
		t.Errorf("the copy does not say where the output is:\n%s", blocksText(got))
	}
}

// Why? on a card whose arguments were edited (under a two-person rule the
// edit waits for a second approval) explains the edited arguments, which
// the card shows and an approval runs, not the model's first ones.
func TestWhyExplainsTheEditedArguments(t *testing.T) {
	// The model's next answer is the explanation.
	e, ts, card := startTwoPerson(t, storeKinds(t)[0], "It deploys api 999.")
	_, err := e.slack.Click(other, channel, card, slackapp.ActionEdit, "")
	must(t, err)
	view := e.modal(other, slackapp.CallbackEdit)
	_, err = e.slack.SubmitView(other, view.ID, map[string]map[string]string{slackapp.BlockEditArgs: {slackapp.ActionEditArgs: `{"service":"api","version":"999"}`}}, "")
	must(t, err)
	e.waitCount(ts, "the arguments were edited")
	_, err = e.slack.Click(approver, channel, card, slackapp.ActionWhy, "")
	must(t, err)
	e.answer(ts, "It deploys api 999.")
	last := e.request(2).Messages
	if q := last[len(last)-1].Content; !strings.Contains(q, `"version":"999"`) {
		t.Errorf("Why? asked the model about %q, want the edited arguments", q)
	}
}

// One Why? of a call at a time, not one per half minute: once an
// explanation is done, the next Why? is answered.
func TestWhyAgainOnceTheFirstIsDone(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"3"}`)), fakeopenai.Text("First explanation."), fakeopenai.Text("Second explanation."))
	ts := e.slack.Mention(channel, requester, "deploy api 3")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.answer(ts, "First explanation.")
	_, err = e.slack.Click(stranger, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	e.answer(ts, "Second explanation.")
}

// The copy in APPROVALS_CHANNEL, read by people who may not see the
// conversation, shows none of the call's arguments, nor the reason it was
// rejected with; its "View full arguments" shows them to an approver and
// to no one else there.
func TestApprovalsChannelCopyIsSealed(t *testing.T) {
	const secret = "SECRET-TOKEN-123"
	e := approvalsChannelEnv(t)
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"`+secret+`","version":"14"}`)), fakeopenai.Text("not shipped"))
	ts := e.slack.Mention(private, requester, "deploy")
	card := e.cardIn(private, ts, "deploy")
	if !strings.Contains(blocksText(card), secret) {
		t.Fatalf("the card in the conversation does not show the arguments:\n%s", blocksText(card))
	}
	cp, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
	must(t, err)
	if text := blocksText(cp) + cp.Text; strings.Contains(text, secret) || !strings.Contains(text, "Not shown here") {
		t.Errorf("the copy in the approvals channel shows the arguments, or does not say they are hidden:\n%s", text)
	}
	_, err = e.slack.Click("UBYSTANDER", approvalsChannel, cp.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	e.ephemeral("UBYSTANDER", "not part of")
	if views := e.slack.OpenModals("UBYSTANDER"); len(views) != 0 {
		t.Errorf("a bystander in the approvals channel opened %d views of the call", len(views))
	}
	_, err = e.slack.Click(approver, approvalsChannel, cp.TS, slackapp.ActionViewArgs, "")
	must(t, err)
	if view := e.modal(approver, slackapp.CallbackViewArgs); !strings.Contains(string(view.JSON), secret) {
		t.Errorf("View full arguments does not show the approver the arguments: %s", view.JSON)
	}
	const reason = "PRIVATE-REASON: not now"
	e.reject(approver, approvalsChannel, cp.TS, reason)
	e.answerIn(private, ts, "not shipped")
	decided, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool {
		return m.TS == cp.TS && strings.Contains(blocksText(m), "Rejected")
	}, 10*time.Second)
	must(t, err)
	if text := blocksText(decided) + decided.Text; strings.Contains(text, secret) || strings.Contains(text, "PRIVATE-REASON") {
		t.Errorf("the decided copy in the approvals channel shows the arguments or the reason:\n%s", text)
	}
	if thread, _ := e.slack.Message(private, card.TS); !strings.Contains(blocksText(thread), "PRIVATE-REASON") {
		t.Errorf("the card in the conversation does not show the reason:\n%s", blocksText(thread))
	}
}

// The copy in APPROVALS_CHANNEL stays sealed when the bot restarts with
// APPROVALS_CHANNEL moved or unset while the call waits: its update shows
// neither the arguments nor the reason to the channel it was posted in.
func TestApprovalsChannelCopyStaysSealedAfterTheSettingChanges(t *testing.T) {
	for _, tt := range []struct{ name, now string }{
		{"unset", ""},
		{"moved", "CAPPROVALS2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := approvalsChannelEnv(t)
			e.slack.AddChannel(fakeslack.Channel{ID: "CAPPROVALS2", Name: "approvals-2", Members: []string{approver, e.slack.BotUserID()}})
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)), fakeopenai.Text("not shipped"))
			ts := e.slack.Mention(private, requester, "deploy vault 14")
			card := e.cardIn(private, ts, "deploy")
			cp, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool { return isCard(m) }, 10*time.Second)
			must(t, err)
			e.stop()
			e.cfg.ApprovalsChannel = tt.now
			e.start()
			e.slack.Join(private, approver)
			e.reject(approver, private, card.TS, "PRIVATE-REASON: not now")
			e.answerIn(private, ts, "not shipped")
			decided, err := e.slack.WaitMessage(approvalsChannel, func(m fakeslack.Message) bool {
				return m.TS == cp.TS && strings.Contains(blocksText(m), "Rejected")
			}, 10*time.Second)
			must(t, err)
			if text := blocksText(decided) + decided.Text; strings.Contains(text, "vault") || strings.Contains(text, "PRIVATE-REASON") {
				t.Errorf("APPROVALS_CHANNEL %s: the decided copy in %s shows the arguments or the reason:\n%s", tt.name, approvalsChannel, text)
			}
		})
	}
}

// A card whose copy cannot reach the approvers who cannot see the
// conversation (APPROVALS_CHANNEL refuses it) says so in the thread: they
// would otherwise wait on a card they never get.
func TestUnreachedApproversAreNamedInTheThread(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.slack.AddChannel(fakeslack.Channel{ID: private, Name: "secret", Private: true, Members: []string{requester, e.slack.BotUserID()}})
	e.cfg.ApprovalsChannel = "CMISSING01"
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"vault","version":"14"}`)))
	ts := e.slack.Mention(private, requester, "deploy vault 14")
	e.cardIn(private, ts, "deploy")
	e.waitIn(private, ts, "a note on the card that did not reach the approvers", func(m fakeslack.Message) bool {
		return m.BotID != "" && strings.Contains(m.Text, "couldn't send the approval card") && strings.Contains(m.Text, "<#CMISSING01>")
	})
}

// panicExplainStore panics once on the Why? marker of a call, taking it
// (acquire) or giving it back (after the release), as a bug in a store
// client would.
type panicExplainStore struct {
	fullStore
	acquire bool
	once    sync.Once
}

func (s *panicExplainStore) panicOnce() {
	first := false
	s.once.Do(func() { first = true })
	if first {
		panic("a bug in the store client")
	}
}

func (s *panicExplainStore) AcquireLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if s.acquire && strings.HasPrefix(key, "explain:") {
		s.panicOnce()
	}
	return s.fullStore.AcquireLease(ctx, key, owner, ttl)
}

func (s *panicExplainStore) ReleaseLease(ctx context.Context, key, owner string) error {
	err := s.fullStore.ReleaseLease(ctx, key, owner)
	if !s.acquire && strings.HasPrefix(key, "explain:") {
		s.panicOnce()
	}
	return err
}

// A Why? whose handler panicked while it marked the call as being
// explained, or unmarked it, leaves the next Why? of the call free to
// run: it is answered, not refused as one already being written.
func TestWhyAfterAPanicIsAnswered(t *testing.T) {
	for _, tt := range []struct {
		name    string
		acquire bool
	}{{"taking the marker", true}, {"giving it back", false}} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, storeKinds(t)[0])
			reg := prometheus.NewRegistry()
			e.cfg.Metrics = slackapp.NewMetrics(reg)
			open := e.open
			e.open = func() fullStore { return &panicExplainStore{fullStore: open(), acquire: tt.acquire} }
			e.start()
			const why = "It deploys api version 8, as you asked."
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"8"}`)))
			e.model.Handle(func(openai.ChatCompletionRequest) fakeopenai.Response { return fakeopenai.Text(why) })
			ts := e.slack.Mention(channel, requester, "deploy api 8")
			card := e.card(ts, "deploy")

			_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionWhy, "")
			must(t, err)
			waitUntil(t, "the Why? handler panicked", func() bool { return counter(t, reg, "toolgate_errors_total", "panic") >= 1 })
			_, err = e.slack.Click(stranger, channel, card.TS, slackapp.ActionWhy, "")
			must(t, err)
			refused := func() bool {
				for _, m := range e.slack.Ephemerals(stranger) {
					if strings.Contains(m.Text, "already being written") {
						return true
					}
				}
				return false
			}
			answered := func() bool {
				for _, m := range e.slack.Thread(channel, ts) {
					if m.BotID != "" && strings.Contains(blocksText(m), why) {
						return true
					}
				}
				return false
			}
			waitUntil(t, "the second Why? is answered or refused", func() bool { return answered() || refused() })
			if refused() {
				t.Fatal("the second Why? was refused as already being written: the panicked one still marks the call")
			}
		})
	}
}

// A Why? whose model answer comes after the call was approved (and ran)
// posts no explanation saying the call still waits: the clicker is told it
// was decided.
func TestWhyAnsweredAfterTheDecisionSaysItWasDecided(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.start()
	arrived, release := modelGate(t)
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if req.ToolChoice == "none" { // the Why? request
			arrived <- struct{}{}
			<-release
			return fakeopenai.Text("WHY-TEXT: it deploys api 11.")
		}
		return fakeopenai.Text("Deployed api 11.")
	})
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"11"}`)))
	ts := e.slack.Mention(channel, requester, "deploy api 11")
	card := e.card(ts, "deploy")
	_, err := e.slack.Click(other, channel, card.TS, slackapp.ActionWhy, "")
	must(t, err)
	<-arrived
	_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Deployed api 11.")
	close(release)
	waitUntil(t, "the Why? is answered", func() bool {
		for _, m := range e.slack.Thread(channel, ts) {
			if strings.Contains(blocksText(m), "WHY-TEXT") {
				return true
			}
		}
		for _, m := range e.slack.Ephemerals(other) {
			if strings.Contains(m.Text, "already approved") {
				return true
			}
		}
		return false
	})
	for _, m := range e.slack.Thread(channel, ts) {
		if text := blocksText(m); strings.Contains(text, "WHY-TEXT") {
			t.Errorf("after the call was approved and ran, the thread got an explanation saying it still waits:\n%s", text)
		}
	}
}

// modelGate returns the channels of a model request held until released:
// arrived, which the request reports on, and release, closing which lets
// it answer (closed as the test ends, if it was not before).
func modelGate(t *testing.T) (arrived, release chan struct{}) {
	arrived, release = make(chan struct{}, 1), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	return arrived, release
}
