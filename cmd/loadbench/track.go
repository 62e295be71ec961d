package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sashabaranov/go-openai"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// approveAction is the action id of the card's Approve button.
const approveAction = "approve"

// convMarker names a conversation in the mention, the tool's URL and the
// model's answer: "conv-17".
var convMarker = regexp.MustCompile(`conv-(\d+)`)

// answerMarker is the scripted model's final answer, "done conv-17",
// which names the conversation it answers (see model.answer).
var answerMarker = regexp.MustCompile(`done conv-(\d+)`)

// answerNames returns the conversations the answers in text name.
func answerNames(text string) []int {
	var ids []int
	for _, sm := range answerMarker.FindAllStringSubmatch(text, -1) {
		if id, err := strconv.Atoi(sm[1]); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// conv is one conversation of the bench and what happened to it. Times are
// wall-clock times taken by the fakes as each event reached them.
type conv struct {
	id      int
	ask     bool // the tool call asks; otherwise the policy allows it
	noClick bool // parked: the card is never clicked
	channel string

	thread    string // ts of the mention
	mentionAt time.Time
	cardAt    time.Time // the first card
	cardTS    string
	cards     int // cards posted in the thread
	// clickAt is when the bench began the click that the fake accepted,
	// before the fake built it (zero: no click reached the fake);
	// clickSent is when the fake sent its envelope to a bot (zero:
	// unknown), and clickEnv is that envelope's id.
	clickAt      time.Time
	clickSent    time.Time
	clickEnv     string
	failedClicks int         // clicks the fake refused: they never reached a bot
	execAt       []time.Time // every execution of its tool call
	execEnd      time.Time   // the first execution's answer
	answerAt     time.Time   // the first answer
	answers      int         // messages in the thread that hold its answer
	// misdirected counts messages in the thread that hold the answer of
	// another conversation, and not its own.
	misdirected int
	others      int // bot messages in the thread that are neither card nor answer
	// inModel is the time the fake model spent on each request of the
	// conversation, by step: 0 before the tool call, 1 after its result.
	// Zero where unknown (then the model's latency stands in for it).
	inModel [2]time.Duration

	card     chan struct{} // closed when the card is posted
	answered chan struct{} // closed when the final answer is complete
	executed chan struct{} // closed when the tool starts running
	hold     chan struct{} // non-nil: the tool waits for it to close
}

// tracker follows every conversation through the fakes' observations.
type tracker struct {
	mu          sync.Mutex
	convs       []*conv
	byThread    map[string]*conv
	early       map[string][]func(*conv) // thread -> observations before its conversation was registered
	unknown     int                      // tool executions for no known conversation
	history     []int                    // raw history bytes of each paused step
	otherSample string                   // the first bot reply that was neither card nor the conversation's answer
	onCard      func(*conv)              // called without the lock, once per card
	apiCalls    map[string]int           // Web API calls the fake Slack answered, by method
}

func newTracker() *tracker {
	return &tracker{
		byThread: map[string]*conv{},
		early:    map[string][]func(*conv){},
		apiCalls: map[string]int{},
	}
}

// apiCounts returns a copy of the Web API calls counted so far, by method.
func (t *tracker) apiCounts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.apiCalls)
}

// convKind says what a new conversation does.
type convKind struct {
	ask     bool // its call asks (else the policy allows it)
	noClick bool // parked: its card is never clicked
	hold    bool // its tool waits for close(c.hold) before answering
}

// add registers a new conversation in one of channels channels, by its
// number.
func (t *tracker) add(k convKind, channels int) *conv {
	t.mu.Lock()
	defer t.mu.Unlock()
	id := len(t.convs)
	c := &conv{
		id: id, ask: k.ask, noClick: k.noClick, channel: channelID(id % channels),
		card: make(chan struct{}), answered: make(chan struct{}), executed: make(chan struct{}),
	}
	if k.hold {
		c.hold = make(chan struct{})
	}
	t.convs = append(t.convs, c)
	return c
}

// count returns the number of conversations.
func (t *tracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.convs)
}

// get returns conversation id, or nil.
func (t *tracker) get(id int) *conv {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id < 0 || id >= len(t.convs) {
		return nil
	}
	return t.convs[id]
}

// mentioned records the thread of a conversation once its mention is
// posted, and applies what was observed in the thread before.
func (t *tracker) mentioned(c *conv, thread string, at time.Time) {
	t.mu.Lock()
	c.thread, c.mentionAt = thread, at
	t.byThread[thread] = c
	early := t.early[thread]
	delete(t.early, thread)
	t.mu.Unlock()
	for _, f := range early {
		f(c)
	}
}

// inThread runs f on the conversation of thread, now or once it is
// registered.
func (t *tracker) inThread(thread string, f func(*conv)) {
	t.mu.Lock()
	c := t.byThread[thread]
	if c == nil {
		t.early[thread] = append(t.early[thread], f)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	f(c)
}

// message is the part of a Web API answer the tracker reads.
type message struct {
	OK      bool   `json:"ok"`
	TS      string `json:"ts"`
	Message struct {
		Text     string          `json:"text"`
		ThreadTS string          `json:"thread_ts"`
		Blocks   json.RawMessage `json:"blocks"`
	} `json:"message"`
}

// observe is the fake Slack's API observer: it spots cards and final
// answers as they are posted. A message is read as the fake holds it once
// complete: a posted one, or a stream once stopped (the fake's answer to
// chat.stopStream carries the whole message, every chunk of the stream
// in it). It is a conversation's answer only if it holds "done conv-N"
// naming that conversation: a stream stopped part way (a turn cut by a
// lost lease, a shutdown or a model error) is not, and neither is an
// answer in the thread of another conversation.
func (t *tracker) observe(e fakeslack.APIEvent) {
	t.mu.Lock()
	t.apiCalls[e.Call.Method]++
	t.mu.Unlock()
	if e.Call.Error != "" || len(e.Response) == 0 {
		return
	}
	at := e.Call.At
	switch e.Call.Method {
	case "chat.postMessage", "chat.stopStream":
		var m message
		if json.Unmarshal(e.Response, &m) != nil || !m.OK || m.Message.ThreadTS == "" {
			return
		}
		ts, text, blocks := m.TS, m.Message.Text, string(m.Message.Blocks)
		if e.Call.Method == "chat.postMessage" && strings.Contains(blocks, `"action_id":"`+approveAction+`"`) {
			t.inThread(m.Message.ThreadTS, func(c *conv) { t.cardPosted(c, ts, at) })
			return
		}
		named := answerNames(text + "\n" + blocks)
		t.inThread(m.Message.ThreadTS, func(c *conv) {
			switch {
			case slices.Contains(named, c.id):
				t.answerDone(c, at)
			case len(named) > 0:
				t.misdirectedAnswer(c, text)
			default:
				t.otherReply(c, text)
			}
		})
	}
}

// cardPosted records a card posted in the conversation's thread; the
// first is the one the bench clicks, and any other is counted.
func (t *tracker) cardPosted(c *conv, ts string, at time.Time) {
	t.mu.Lock()
	c.cards++
	first := c.cardTS == ""
	if first {
		c.cardTS, c.cardAt = ts, at
	}
	onCard := t.onCard
	t.mu.Unlock()
	if first {
		close(c.card)
		if onCard != nil {
			onCard(c)
		}
	}
}

// otherReply records a bot message in the thread that is neither a card
// nor the answer, such as "busy, try again".
func (t *tracker) otherReply(c *conv, text string) { t.noteReply(&c.others, text) }

// misdirectedAnswer records an answer naming another conversation, posted
// in c's thread.
func (t *tracker) misdirectedAnswer(c *conv, text string) { t.noteReply(&c.misdirected, text) }

// noteReply counts a reply of one kind in *n, and keeps the first such
// reply's text as a sample.
func (t *tracker) noteReply(n *int, text string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	*n++
	if t.otherSample == "" {
		t.otherSample = text
	}
}

// answerDone records the conversation's own answer; the first one
// completes it, and any other is counted.
func (t *tracker) answerDone(c *conv, at time.Time) {
	t.mu.Lock()
	c.answers++
	first := c.answerAt.IsZero()
	if first {
		c.answerAt = at
	}
	t.mu.Unlock()
	if first {
		close(c.answered)
	}
}

// executed records a run of conversation id's tool and returns the channel
// to wait on before answering (nil: answer at once).
func (t *tracker) executedCall(id int, at time.Time) (*conv, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id < 0 || id >= len(t.convs) {
		t.unknown++
		return nil, nil
	}
	c := t.convs[id]
	c.execAt = append(c.execAt, at)
	if len(c.execAt) == 1 {
		close(c.executed)
	}
	return c, c.hold
}

// toolAnswered records when the first execution's answer was written.
func (t *tracker) toolAnswered(c *conv, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c.execEnd.IsZero() {
		c.execEnd = at
	}
}

// clicked records a click the fake accepted: when the bench began it, its
// envelope, and when the fake sent that envelope (zero: not yet).
func (t *tracker) clicked(c *conv, at time.Time, envelope string, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.clickAt, c.clickEnv, c.clickSent = at, envelope, sent
}

// clickFailed records a click the fake refused.
func (t *tracker) clickFailed(c *conv) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.failedClicks++
}

// approvedAt is the time from which the conversation's call counts as
// approved: when its click's envelope was sent to a bot or, where that is
// unknown, when the click began; zero when no click reached the fake.
func (c *conv) approvedAt() time.Time {
	if !c.clickSent.IsZero() {
		return c.clickSent
	}
	return c.clickAt
}

// snapshot returns copies of the conversations from index from on.
func (t *tracker) snapshot(from int) []conv {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]conv, 0, len(t.convs)-from)
	for _, c := range t.convs[from:] {
		cp := *c
		cp.execAt = append([]time.Time(nil), c.execAt...)
		out = append(out, cp)
	}
	return out
}

// model is the scripted model: the first request of a conversation gets one
// tool call of http_get on the bench's tool server, the request after the
// tool result gets the final answer "done conv-N". Each answer waits
// latency (nanoseconds), which may change while the model answers, and the
// time the fake spent on each request is recorded with its conversation.
type model struct {
	t       *tracker
	toolURL string
	latency atomic.Int64
}

func (m *model) answer(req openai.ChatCompletionRequest) fakeopenai.Response {
	latency := time.Duration(m.latency.Load())
	id := -1
	hasResult := false
	for _, msg := range req.Messages {
		if msg.Role == openai.ChatMessageRoleUser && id < 0 {
			if sm := convMarker.FindStringSubmatch(msg.Content); sm != nil {
				id, _ = strconv.Atoi(sm[1])
			}
		}
		if msg.Role == openai.ChatMessageRoleTool {
			hasResult = true
		}
	}
	if id < 0 {
		return fakeopenai.Response{Delay: latency, Text: "I do not know this conversation."}
	}
	step := 0
	if hasResult {
		step = 1
	}
	served := func(d time.Duration) { m.t.inModel(id, step, d) }
	if hasResult {
		return fakeopenai.Response{Delay: latency, Text: fmt.Sprintf("done conv-%d", id), Served: served}
	}
	c := m.t.get(id)
	mode := "allow"
	if c != nil && c.ask {
		mode = "ask"
	}
	args := fmt.Sprintf(`{"url":"%s/%s/conv-%d"}`, m.toolURL, mode, id)
	call := fakeopenai.ToolCall{ID: fmt.Sprintf("call_%d", id), Name: "http_get", Arguments: args}
	if c != nil && c.ask {
		// The raw history of the paused step: what the model was sent, and
		// its tool call.
		hist, _ := json.Marshal(req.Messages)
		tc, _ := json.Marshal(openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{{
			ID: call.ID, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: call.Name, Arguments: args},
		}}})
		m.t.mu.Lock()
		m.t.history = append(m.t.history, len(hist)+len(tc))
		m.t.mu.Unlock()
	}
	return fakeopenai.Response{Delay: latency, ToolCalls: []fakeopenai.ToolCall{call}, Served: served}
}

// inModel records the time the fake model spent on step's request of
// conversation id (the first one, if it was asked more than once).
func (t *tracker) inModel(id, step int, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id >= 0 && id < len(t.convs) && t.convs[id].inModel[step] == 0 {
		t.convs[id].inModel[step] = d
	}
}
