package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

// TestMain runs the test binary as a stand-in for the bot when
// fakeBotEnv is set (see fakeBot).
func TestMain(m *testing.M) {
	if os.Getenv(fakeBotEnv) != "" {
		fakeBot()
		return
	}
	os.Exit(m.Run())
}

// fakeBotEnv, set, makes the test binary a stand-in for the bot: it
// answers /healthz on HTTP_ADDR and, once told to stop, fetches the URL in
// fakeBotEnv (an execution of a conversation's tool) before it exits, as
// a bot's late work would.
const fakeBotEnv = "LOADBENCH_FAKE_BOT_LATE_URL"

func fakeBot() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM)
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(http.ResponseWriter, *http.Request) {})
	go func() { _ = http.ListenAndServe(os.Getenv("HTTP_ADDR"), mux) }()
	<-stop
	if res, err := http.Get(os.Getenv(fakeBotEnv)); err == nil {
		res.Body.Close()
	}
	os.Exit(0)
}

// newTestEnv is an env with the fake Slack and the tracker, and no bots:
// a test plays the bot's part through the fake's Web API.
func newTestEnv(t *testing.T) *env {
	t.Helper()
	e := &env{o: options{channels: 1}, t: newTracker(), log: io.Discard, ctx: t.Context(), client: http.DefaultClient}
	e.slack = fakeslack.Start(fakeslack.WithAPIObserver(e.t.observe))
	t.Cleanup(e.slack.Close)
	e.slack.AddUser(fakeslack.User{ID: requester, Name: "requester"})
	e.slack.AddUser(fakeslack.User{ID: approver, Name: "approver"})
	e.slack.AddChannel(fakeslack.Channel{ID: channelID(0), Members: []string{e.slack.BotUserID(), requester, approver}})
	return e
}

// botCall makes a Web API call as the bot and returns the fields of its
// answer; it fails the test unless the answer is ok.
func botCall(t *testing.T, e *env, method string, params url.Values) map[string]any {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.slack.APIURL()+method, strings.NewReader(params.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+e.slack.BotToken())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer res.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	if out["ok"] != true {
		t.Fatalf("%s %v: %v", method, params, out)
	}
	return out
}

// postInThread posts text in the conversation's thread as the bot.
func postInThread(t *testing.T, e *env, c *conv, text string) {
	t.Helper()
	botCall(t, e, "chat.postMessage", url.Values{"channel": {c.channel}, "thread_ts": {c.thread}, "text": {text}})
}

// postCard posts a card with an Approve button in the conversation's
// thread as the bot.
func postCard(t *testing.T, e *env, c *conv) {
	t.Helper()
	blocks := `[{"type":"actions","elements":[{"type":"button","action_id":"` + approveAction + `","text":{"type":"plain_text","text":"Approve"},"value":"call"}]}]`
	botCall(t, e, "chat.postMessage", url.Values{"channel": {c.channel}, "thread_ts": {c.thread}, "text": {"approve?"}, "blocks": {blocks}})
}

// stream streams texts as one answer in the conversation's thread as the
// bot: the first starts the stream, the last (which may be empty) stops
// it.
func stream(t *testing.T, e *env, c *conv, texts ...string) {
	t.Helper()
	start := url.Values{"channel": {c.channel}, "thread_ts": {c.thread}, "recipient_user_id": {requester}, "recipient_team_id": {"T1"}, "markdown_text": {texts[0]}}
	ts, _ := botCall(t, e, "chat.startStream", start)["ts"].(string)
	for i, text := range texts[1:] {
		method := "chat.appendStream"
		if i == len(texts)-2 {
			method = "chat.stopStream"
		}
		p := url.Values{"channel": {c.channel}, "ts": {ts}}
		if text != "" {
			p.Set("markdown_text", text)
		}
		botCall(t, e, method, p)
	}
}

// execute runs the conversation's tool once, as the bot would.
func execute(e *env, c *conv) {
	e.t.executedCall(c.id, time.Now())
	e.t.toolAnswered(c, time.Now())
}

// account returns the accounting of every conversation so far.
func account(e *env) Accounting {
	var a Accounting
	a.account(e.t.snapshot(0))
	return a
}

// A stream that stops without the answer (the reporter ends the stream
// of a step cut by a lost lease, a shutdown or a model error) is not the
// conversation's answer: the conversation is lost.
func TestStreamStoppedWithoutTheAnswerIsLost(t *testing.T) {
	e := newTestEnv(t)
	c := e.mention(convKind{})
	execute(e, c)
	stream(t, e, c, "The status", "")
	a := account(e)
	if a.Completed != 0 || a.Lost != 1 || a.OtherReplies != 1 {
		t.Errorf("accounting %+v; want the conversation lost, not completed, and the stopped stream an other reply", a)
	}
	// The whole answer, streamed, completes it.
	stream(t, e, c, "done", " conv-0")
	if a := account(e); a.Completed != 1 || a.Lost != 0 {
		t.Errorf("accounting after the answer %+v; want the conversation completed", a)
	}
}

// An answer that names another conversation is not the answer of the
// thread it was posted in, streamed or posted whole.
func TestAnswerOfAnotherConversationIsNotThisOnes(t *testing.T) {
	for _, how := range []string{"posted", "streamed"} {
		t.Run(how, func(t *testing.T) {
			e := newTestEnv(t)
			for range 11 {
				e.mention(convKind{})
			}
			c := e.t.get(1)
			execute(e, c)
			if how == "posted" {
				postInThread(t, e, c, "done conv-10")
			} else {
				stream(t, e, c, "done conv-10", "")
			}
			a := account(e)
			if a.Completed != 0 || a.Lost != 11 || a.MisdirectedAnswers != 1 {
				t.Errorf("accounting %+v; want all 11 conversations lost, and one misdirected answer: conv-1's thread got conv-10's answer", a)
			}
			if err := (&Report{Accounting: a}).Problems(); err == nil || !strings.Contains(err.Error(), "1 answers posted in another conversation's thread") {
				t.Errorf("Problems() = %v; want the misdirected answer named", err)
			}
			c10 := e.t.get(10)
			execute(e, c10)
			postInThread(t, e, c10, "done conv-10")
			if a := account(e); a.Completed != 1 {
				t.Errorf("accounting after conv-10's own answer %+v; want it completed", a)
			}
		})
	}
}

// A click that never reached the bot (Click failed) approves nothing: an
// execution after it is unapproved, and the conversation is not completed.
func TestFailedClickIsNoApproval(t *testing.T) {
	e := newTestEnv(t)
	c := e.mention(convKind{ask: true})
	postCard(t, e, c)
	e.t.mu.Lock()
	c.cardTS = "9999999999.000000" // no such message: Click fails
	e.t.mu.Unlock()
	if err := e.click(c); err == nil {
		t.Fatal("a click on a card that does not exist succeeded")
	}
	execute(e, c)
	postInThread(t, e, c, "done conv-0")
	a := account(e)
	if a.Completed != 0 || a.Unapproved != 1 || a.FailedClicks != 1 {
		t.Errorf("accounting %+v; want the execution unapproved, the click failed and the conversation not completed", a)
	}
	if err := (&Report{Accounting: a}).Problems(); err == nil || !strings.Contains(err.Error(), "1 clicks refused") {
		t.Errorf("Problems() = %v; want the failed click named", err)
	}
}

// A conversation whose turn posted two cards, or two answers, is counted
// as duplicated: its turn ran twice.
func TestSecondCardOrAnswerIsADuplicate(t *testing.T) {
	t.Run("cards", func(t *testing.T) {
		e := newTestEnv(t)
		c := e.mention(convKind{ask: true, noClick: true})
		postCard(t, e, c)
		postCard(t, e, c)
		if a := account(e); a.Duplicated != 1 || a.DuplicateCards != 1 || a.Parked != 1 {
			t.Errorf("accounting %+v; want the parked conversation with two cards duplicated", a)
		}
	})
	t.Run("answers", func(t *testing.T) {
		e := newTestEnv(t)
		c := e.mention(convKind{})
		execute(e, c)
		postInThread(t, e, c, "done conv-0")
		stream(t, e, c, "done conv-0", "")
		if a := account(e); a.Duplicated != 1 || a.DuplicateAnswers != 1 || a.Completed != 0 {
			t.Errorf("accounting %+v; want the conversation answered twice duplicated, not completed", a)
		}
	})
}

// An execution the bots make after the conversation was answered, up to
// the moment they have stopped, is counted: the accounting is taken once
// no bot runs any more.
func TestLateExecutionIsCounted(t *testing.T) {
	e := newTestEnv(t)
	e.tools = httptest.NewServer(http.HandlerFunc(e.serveTool))
	defer e.tools.Close()
	c := e.mention(convKind{})
	execute(e, c)
	postInThread(t, e, c, "done conv-0")
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	late := fmt.Sprintf("%s/exec/allow/conv-%d", e.tools.URL, c.id)
	p, err := startBot(t.Context(), "bot1", bin, []string{fakeBotEnv + "=" + late}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.bots = []*botProc{p}
	defer e.stopBots()
	rep := &Report{StopErrors: []string{}}
	e.finish(rep)
	if a := rep.Accounting; a.Duplicated != 1 || a.DuplicateExecutions != 1 || a.Completed != 0 {
		t.Errorf("accounting %+v; want the late second execution counted as a duplicate", a)
	}
}

// socket opens a Socket Mode connection to the fake as a bot would and
// reads its hello; the test reads, and acks, the envelopes itself.
func socket(t *testing.T, e *env) *websocket.Conn {
	t.Helper()
	api := slack.New(e.slack.BotToken(), slack.OptionAPIURL(e.slack.APIURL()), slack.OptionAppLevelToken(e.slack.AppToken()))
	_, u, err := api.StartSocketModeContext(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, _, err := websocket.DefaultDialer.Dial(u, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	var hello struct {
		Type string `json:"type"`
	}
	if err := ws.ReadJSON(&hello); err != nil || hello.Type != "hello" {
		t.Fatalf("hello: %v %+v", err, hello)
	}
	return ws
}

// An envelope the bot it was sent to never acked, delivered again to
// another replica when that bot stopped and acked there, is a problem
// of the run: counted as redelivered, in the table and the JSON, and not
// as an ack time.
func TestEnvelopeAckedOnlyWhenRedeliveredIsAProblem(t *testing.T) {
	e := newTestEnv(t)
	bot1 := socket(t, e)
	if err := e.slack.WaitConnected(1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.mention(convKind{}) // app_mention and message, both to bot1
	for range 2 {
		var env map[string]any
		if err := bot1.ReadJSON(&env); err != nil {
			t.Fatal(err)
		}
	}
	bot2 := socket(t, e)
	if err := e.slack.WaitConnected(2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	bot1.Close() // stops without acking them: the fake delivers them to bot2
	ids := map[string]bool{}
	for len(ids) < 2 {
		var env struct {
			EnvelopeID string `json:"envelope_id"`
		}
		if err := bot2.ReadJSON(&env); err != nil {
			t.Fatal(err)
		}
		if env.EnvelopeID == "" {
			continue
		}
		ids[env.EnvelopeID] = true
		if err := bot2.WriteJSON(map[string]string{"envelope_id": env.EnvelopeID}); err != nil {
			t.Fatal(err)
		}
	}
	for id := range ids {
		if _, err := e.slack.WaitAck(id, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	rep := &Report{StopErrors: []string{}}
	e.accountAll(rep)
	if err := rep.Problems(); err == nil || !strings.Contains(err.Error(), "2 envelopes acked only when delivered again") {
		t.Errorf("Problems() = %v; want the 2 envelopes bot1 never acked named", err)
	}
	if rep.Acks.Count != 0 {
		t.Errorf("%d ack times; want none: an ack after a redelivery is timed from the redelivery", rep.Acks.Count)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Accounting map[string]any `json:"accounting"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if n := got.Accounting["redelivered_envelopes"]; n != 2.0 {
		t.Errorf("the JSON's accounting.redelivered_envelopes is %v, want 2", n)
	}
	var table strings.Builder
	writeTable(&table, rep)
	if !strings.Contains(table.String(), "redelivered envelopes 2") {
		t.Errorf("the table does not say 2 envelopes were redelivered:\n%s", &table)
	}
}
