package slackapp_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	openai "github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/internal/teststore"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/store"
)

// starvedStore is the store of a replica starved of CPU (see
// teststore.Starvation); released is closed when it first releases a
// conversation's lease itself, which it does once its turn or resume has
// stopped on a lost lease (a turn's own writes release the lease
// otherwise).
type starvedStore struct {
	fullStore
	*teststore.Starvation
	released chan struct{}
	once     sync.Once
}

func (s *starvedStore) RenewLease(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if lost, err := s.Renewal(ctx, false); lost || err != nil {
		return false, err
	}
	return s.fullStore.RenewLease(ctx, key, owner, ttl)
}

func (s *starvedStore) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	if lost, err := s.Renewal(ctx, true); lost || err != nil {
		return false, err
	}
	return s.fullStore.RenewClaim(ctx, runID, owner, lease)
}

func (s *starvedStore) ReleaseLease(ctx context.Context, key, owner string) error {
	defer s.once.Do(func() { close(s.released) })
	return s.fullStore.ReleaseLease(ctx, key, owner)
}

// A replica is starved of CPU while it works on a conversation (the turn
// of a message, or the resume of an approved call after the call ran):
// its lease (and claim) run out, another replica's takeover scan carries
// the work on (a resume from the call's saved result), and when the
// starved replica gets to renew it finds the conversation taken, stops and
// says nothing in the thread. The thread gets one answer, the call ran
// at most once.
func TestStarvedReplicaIsTakenOver(t *testing.T) {
	tests := []struct {
		name, mention, answer string
		deploys               int64
	}{
		{"resume", "deploy api 2", "Deployed: deployed", 1},
		{"turn", "what changed?", "Nothing changed.", 0},
	}
	for _, kind := range storeKinds(t) {
		for _, tt := range tests {
			t.Run(kind.name+"/"+tt.name, func(t *testing.T) {
				e := newEnv(t, kind)
				starvedAsks, survivorAsks := make(chan struct{}), make(chan struct{})
				survivorMayAnswer := make(chan struct{})
				staleAnswer := make(chan struct{})
				t.Cleanup(func() { close(staleAnswer) })
				resumes := 0
				var mu sync.Mutex
				e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
					last := req.Messages[len(req.Messages)-1]
					if strings.HasSuffix(last.Content, "deploy api 2") {
						return fakeopenai.ToolCalls(tc("c1", "deploy", `{"service":"api","version":"2"}`))
					}
					mu.Lock()
					resumes++
					n := resumes
					mu.Unlock()
					if n == 1 {
						close(starvedAsks)
						<-staleAnswer // the starved replica never gets its answer
						return fakeopenai.Text("the starved replica's answer")
					}
					close(survivorAsks)
					<-survivorMayAnswer
					if last.Role == openai.ChatMessageRoleTool {
						return fakeopenai.Text("Deployed: " + last.Content)
					}
					return fakeopenai.Text("Nothing changed.")
				})
				base := e.open()
				st := &starvedStore{fullStore: base, Starvation: teststore.NewStarvation(), released: make(chan struct{})}
				e.cfg.TakeoverInterval = time.Hour // the starved replica's own scan stays out of the way
				starved := e.run(st)
				var survivor *bot
				t.Cleanup(func() {
					for _, b := range []*bot{survivor, starved} {
						if b == nil {
							continue
						}
						b.cancel()
						if err := <-b.done; err != nil {
							t.Errorf("replica stopped with %v", err)
						}
					}
				})

				ts := e.slack.Mention(channel, requester, tt.mention)
				var card fakeslack.Message
				if tt.deploys > 0 {
					card = e.card(ts, "deploy")
					_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
					must(t, err)
				}
				<-starvedAsks
				st.Starve()
				<-st.Renewed()

				e.cfg.TakeoverInterval = 50 * time.Millisecond
				survivor = e.run(base)
				<-survivorAsks // the survivor holds the conversation and the claim
				st.Unstarve()
				<-st.released // the starved replica stopped
				close(survivorMayAnswer)
				e.answer(ts, tt.answer)

				// Stop both, so that anything the starved replica would say has
				// been said.
				for _, b := range []*bot{survivor, starved} {
					b.cancel()
					if err := <-b.done; err != nil {
						t.Errorf("replica stopped with %v", err)
					}
				}
				survivor, starved = nil, nil
				var answers []string
				for _, m := range e.slack.Thread(channel, ts) {
					if m.BotID == "" || isCard(m) || card.TS != "" && m.TS == card.TS {
						continue
					}
					answers = append(answers, m.Text)
				}
				if len(answers) != 1 || !strings.Contains(answers[0], tt.answer) {
					t.Errorf("the bot's messages in the thread besides the card = %q, want the one answer; thread:\n%s", answers, dumpThread(e.slack.Thread(channel, ts)))
				}
				if n := e.deploy.Load(); n != tt.deploys {
					t.Errorf("deploy ran %d times, want %d", n, tt.deploys)
				}
			})
		}
	}
}

// A message whose turn waits longer than the lease wait for a conversation
// another replica holds is told so, not asked to send it again (it stays
// recorded), and is answered by a takeover once the conversation is free:
// one answer, with no second copy of the message.
func TestBusyConversationAnswersTheMessageOnceFree(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.leaseWait = 200 * time.Millisecond
			e.cfg.TakeoverInterval = 50 * time.Millisecond
			reg := prometheus.NewRegistry()
			e.cfg.Metrics = slackapp.NewMetrics(reg)
			b := e.start()
			e.model.Reply(fakeopenai.Text("First answer."))
			ts := e.slack.Mention(channel, requester, "first")
			e.answer(ts, "First answer.")

			// The turn is recorded, and its lease released, once its
			// answer is shown.
			key := store.TurnLease(e.slack.TeamID() + "/" + channel + "/" + ts)
			waitUntil(t, "the conversation's lease is free after its answer", func() bool {
				ok, err := b.st.AcquireLease(context.Background(), key, "another-replica", time.Hour)
				must(t, err)
				return ok
			})
			e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> second")
			note := e.answer(ts, "busy with an earlier message")
			if strings.Contains(note.Text, "again") {
				t.Errorf("the thread is asked to send the message again: %q", note.Text)
			}
			if n := len(e.model.Requests()); n != 1 {
				t.Fatalf("the model was asked %d times while another replica held the conversation", n)
			}
			// The wait is counted as such, not as a failed turn.
			waitUntil(t, "the waiting turn counted", func() bool { return counter(t, reg, "toolgate_turns_total", "busy") == 1 })
			if n := counter(t, reg, "toolgate_turns_total", "error"); n != 0 {
				t.Errorf("%v turns counted as errors, want none", n)
			}
			e.model.Reply(fakeopenai.Text("Second answer."))
			must(t, b.st.ReleaseLease(context.Background(), key, "another-replica"))
			e.answer(ts, "Second answer.")
			var users []string
			for _, m := range e.request(2).Messages {
				if m.Role == openai.ChatMessageRoleUser {
					users = append(users, m.Content)
				}
			}
			if strings.Join(users, "|") != "first|second" {
				t.Errorf("the model was given the messages %q, want first|second", users)
			}
		})
	}
}

// scanCounter counts, per conversation, the takeover scans that listed it
// and the turns begun on it outside a message's own record.
type scanCounter struct {
	fullStore
	mu     sync.Mutex
	listed map[string]int
	begun  map[string]int
}

func (s *scanCounter) Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error) {
	keys, err := s.fullStore.Unanswered(ctx, before, offset, limit)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.listed[k]++
	}
	return keys, err
}

func (s *scanCounter) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	s.mu.Lock()
	s.begun[conversation]++
	s.mu.Unlock()
	return s.fullStore.BeginTurn(ctx, conversation, owner, ttl, kinds...)
}

func (s *scanCounter) counts(key string) (listed, begun int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed[key], s.begun[key]
}

// A turn that runs longer than the lease is listed by every takeover scan
// of its own replica (its message is older than LEASE_TTL and not
// answered), and those scans queue nothing behind it: once it answers, no
// pile of takeovers runs through the conversation.
func TestLongTurnGathersNoTakeovers(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	sc := &scanCounter{listed: map[string]int{}, begun: map[string]int{}}
	open := e.open
	e.open = func() fullStore { sc.fullStore = open(); return sc }
	e.cfg.TakeoverInterval = 20 * time.Millisecond
	m := newScriptedModel()
	t.Cleanup(m.unblock)
	e.model.Handle(m.answer)
	e.start()
	ts := e.slack.Mention(channel, requester, "hold")
	<-m.held
	key := e.slack.TeamID() + "/" + channel + "/" + ts
	waitUntil(t, "five scans list the running turn's conversation", func() bool {
		listed, _ := sc.counts(key)
		return listed >= 5
	})
	m.unblock()
	e.answer(ts, "Held answer.")
	e.stop() // whatever was queued has run
	if _, begun := sc.counts(key); begun > 1 {
		t.Errorf("%d turns were begun on the conversation after its own, want at most one (a scan that listed it just before it answered)", begun)
	}
}

// replyFirst makes the record of a mention ("first") wait until a reply in
// its thread ("follow-up") has been tried and found the thread unknown: a
// reply that arrives while the mention that starts its thread is still
// being recorded (on another connection, or another replica). A mention
// recorded without that wait fails the test.
type replyFirst struct {
	fullStore
	t        *testing.T
	once     sync.Once
	tried    chan struct{} // closed once the reply found its thread unknown
	held     chan struct{} // closed once the mention's record waited for that
	heldOnce sync.Once
}

func newReplyFirst(t *testing.T) *replyFirst {
	return &replyFirst{t: t, tried: make(chan struct{}), held: make(chan struct{})}
}

func (s *replyFirst) gate(m store.Inbound, acc store.Acceptance) {
	if strings.Contains(m.Text, "follow-up") && acc == store.Unknown {
		s.once.Do(func() { close(s.tried) })
	}
}

func (s *replyFirst) hold(m store.Inbound) {
	if !strings.Contains(m.Text, "first") {
		return
	}
	select {
	case <-s.tried:
		s.heldOnce.Do(func() { close(s.held) })
	case <-time.After(10 * time.Second):
		s.t.Errorf("the mention %q was recorded without its reply having found the thread unknown first", m.Text)
	}
}

func (s *replyFirst) AcceptMessage(ctx context.Context, conv string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	s.hold(m)
	got, acc, err := s.fullStore.AcceptMessage(ctx, conv, m, requireKnown)
	s.gate(m, acc)
	return got, acc, err
}

func (s *replyFirst) AcceptBegin(ctx context.Context, conv string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	s.hold(m)
	got, acc, b, err := s.fullStore.AcceptBegin(ctx, conv, m, requireKnown, owner, ttl, kinds...)
	s.gate(m, acc)
	return got, acc, b, err
}

// A reply in a thread that arrives while the mention starting the thread
// is still being recorded is asked again a moment later, and answered: it
// used to be dropped as a reply in a thread the bot is not part of. So is
// one right after a mention in the middle of an older thread (an alert's),
// which the mention's first turn does not read either (it reads the thread
// up to the mention).
func TestReplyBeforeItsMentionIsRecordedIsAnswered(t *testing.T) {
	for _, kind := range storeKinds(t) {
		for _, age := range []time.Duration{0, -time.Minute} {
			t.Run(fmt.Sprintf("%s/thread started %v ago", kind.name, -age), func(t *testing.T) {
				var offset atomic.Int64 // added to the fake Slack's clock
				rf := newReplyFirst(t)
				e := newEnv(t, kind, fakeslack.WithClock(func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }))
				open := e.open
				e.open = func() fullStore {
					rf.fullStore = open()
					return rf
				}
				e.start()
				e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
					var users []string
					for _, m := range req.Messages {
						if m.Role == openai.ChatMessageRoleUser {
							users = append(users, m.Content)
						}
					}
					return fakeopenai.Text("read: " + strings.Join(users, " | "))
				})
				var ts string
				if age == 0 {
					ts = e.slack.Mention(channel, requester, "first question")
				} else {
					offset.Store(int64(age))
					ts = e.slack.Post(channel, other, "PagerDuty: disk full on db-1")
					offset.Store(0)
					e.slack.ThreadReply(channel, ts, requester, "<@"+e.slack.BotUserID()+"> first question")
				}
				e.slack.ThreadReply(channel, ts, requester, "follow-up detail")
				e.answer(ts, "follow-up detail")
				select {
				case <-rf.held:
				default:
					t.Fatal("answered, but the mention was not recorded after its reply found the thread unknown: the race was not tested")
				}
			})
		}
	}
}

// youngRetry reports when a reply ("follow-up") finds its thread unknown,
// and holds the reply's next try (asked again by its message id alone)
// until another conversation's turn has asked the model, or the reply's
// record gives up: a reply waiting for its thread's mention must leave the
// turn slots to other conversations.
type youngRetry struct {
	fullStore
	t           *testing.T
	unknown     chan struct{} // closed once the reply found its thread unknown
	otherAsked  chan struct{} // closed by the test's model
	unknownOnce sync.Once
	held        sync.Once
}

func (s *youngRetry) found(m store.Inbound, acc store.Acceptance) {
	if strings.Contains(m.Text, "follow-up") && acc == store.Unknown {
		s.unknownOnce.Do(func() { close(s.unknown) })
	}
}

func (s *youngRetry) AcceptMessage(ctx context.Context, conv string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	if strings.Contains(m.Text, "follow-up") && m.EventID == "" {
		s.held.Do(func() {
			select {
			case <-s.otherAsked:
			case <-ctx.Done():
				s.t.Errorf("no other conversation's turn ran while a reply waited for its thread's mention: the wait held the turn slot")
			}
		})
	}
	got, acc, err := s.fullStore.AcceptMessage(ctx, conv, m, requireKnown)
	s.found(m, acc)
	return got, acc, err
}

func (s *youngRetry) AcceptBegin(ctx context.Context, conv string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	got, acc, b, err := s.fullStore.AcceptBegin(ctx, conv, m, requireKnown, owner, ttl, kinds...)
	s.found(m, acc)
	return got, acc, b, err
}

// A reply in a thread started a moment ago, whose mention is not recorded
// yet (here it never is: the thread's first message is not to the bot), is
// asked again a moment later without holding a turn slot meanwhile: with
// one slot, another conversation's turn runs while the reply waits.
func TestYoungThreadRetryHoldsNoTurnSlot(t *testing.T) {
	yr := &youngRetry{t: t, unknown: make(chan struct{}), otherAsked: make(chan struct{})}
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.MaxTurns = 1
	open := e.open
	e.open = func() fullStore { yr.fullStore = open(); return yr }
	var askedOnce sync.Once
	e.model.Handle(func(req openai.ChatCompletionRequest) fakeopenai.Response {
		if last := req.Messages[len(req.Messages)-1]; strings.Contains(last.Content, "hello b") {
			askedOnce.Do(func() { close(yr.otherAsked) })
		}
		return fakeopenai.Text("hi b")
	})
	e.start()
	root := e.slack.Post(channel, requester, "a thread without the bot, so far")
	e.slack.ThreadReply(channel, root, requester, "follow-up detail")
	<-yr.unknown
	tsB := e.slack.Mention(channel, other, "hello b")
	e.answer(tsB, "hi b")
}

// More conversations than one takeover scan lists (takeoverBatch, 100) are
// listed before a dead replica's message and held by live replicas (turns
// that outlast the lease's time under load): the scans page on through the
// listing, and the dead replica's message is answered. Every scan listed
// the same oldest 100, all held, and never reached it.
func TestTakeoverScanPagesPastHeldConversations(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			e.cfg.TakeoverInterval = 50 * time.Millisecond
			st := e.open()
			ctx := context.Background()
			old := time.Now().Add(-time.Hour)
			for i := range 250 {
				conv := fmt.Sprintf("%s/%s/1000.%06d", e.slack.TeamID(), channel, i)
				_, _, err := st.AcceptMessage(ctx, conv, store.Inbound{EventID: fmt.Sprint("Ev", i), User: requester, Channel: channel, Text: "a long one", At: old.Add(time.Duration(i) * time.Millisecond)}, false)
				must(t, err)
				ok, err := st.AcquireLease(ctx, store.TurnLease(conv), "live-replica", time.Hour)
				must(t, err)
				if !ok {
					t.Fatal("lease not taken")
				}
			}
			// The dead replica's message, recorded (acked) a minute ago;
			// its lease lapsed long since.
			ts := e.slack.Post(channel, requester, "a thread")
			conv := e.slack.TeamID() + "/" + channel + "/" + ts
			_, _, err := st.AcceptMessage(ctx, conv, store.Inbound{EventID: "EvDead", MsgID: channel + ":" + ts, User: requester, Channel: channel, Text: "what changed?", At: time.Now().Add(-time.Minute)}, false)
			must(t, err)
			e.model.Reply(fakeopenai.Text("Nothing changed."))
			e.bot = e.run(st)
			e.answer(ts, "Nothing changed.")
		})
	}
}
