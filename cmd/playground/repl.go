package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
)

// startWait is how long an action may go without any visible reaction of
// the bot before the playground stops waiting for one.
const startWait = 5 * time.Second

// session is the REPL: who is typing, the thread being talked in and what
// of it was shown already.
type session struct {
	pg   *playground
	out  io.Writer
	opts options

	user   person
	thread string // ts of the thread's first message; empty before it

	shown     map[string]string // message ts -> text last printed
	cards     map[string]int    // message ts -> card number in its thread
	nextCard  int
	ephemeral map[string]int // user id -> ephemeral messages printed

	// commands counts the commands run; failed names those the
	// playground could not carry out ("line 3 (/approve)"), and
	// failing says whether the one running is one of them.
	commands int
	failed   []string
	failing  bool

	// stopping is closed once the playground stops (Ctrl-C): the waits
	// for the bot end at once.
	stopping <-chan struct{}
}

func newSession(pg *playground, out io.Writer, opts options) *session {
	return &session{
		pg: pg, out: out, opts: opts, user: people[0],
		shown: map[string]string{}, cards: map[string]int{}, nextCard: 1, ephemeral: map[string]int{},
	}
}

// printf prints to the terminal. Everything the session prints goes
// through it, and much of that comes from the bot, the model and tools,
// so it is made safe for a terminal here.
func (s *session) printf(format string, args ...any) {
	_, _ = io.WriteString(s.out, terminalSafe(fmt.Sprintf(format, args...)))
}

func (s *session) intro() {
	model := "a scripted model (no API key needed; /help lists what it understands)"
	if s.pg.fakeModel == nil {
		model = "the real model " + s.pg.modelName + " (OPENAI_* is set; -scripted uses the scripted one)"
	}
	s.printf(`Toolgate playground: the real bot against a fake Slack workspace, in this process.

  Workspace: #ops, with you (requester), alice (approves deletes), carol (admin), the bot
             and bob (named by no rule: decides only what anyone in #ops may);
             dave is not in #ops.
  Model:     %s.
  Store:     %s.
`, model, s.pg.storeName)
	if s.pg.workspace != "" {
		s.printf(`  Tools:     the built-in workspace tools on a seeded temporary workspace, run_command
             and ask_human; /policy shows the policy.

Lines you type are posted in #ops as the current person; /commands click and type for them.
Try:
  delete scratch.csv   you ask the bot; the policy wants alice's approval, the bot posts a card
  /approve             you approve your own request: refused, deletes need a second person
  /as alice            become alice
  /approve             the file is deleted and the bot answers in the thread
Then: read secrets/api-token.txt (denied); write hi to notes.md, /reject not now; run df -h;
/pending; /policy. /help lists all commands, /quit ends.

`)
	} else {
		s.printf("  Tools:     those of your config file; /policy shows it.\n\n" +
			"Lines you type are posted in #ops as the current person; /commands click and type for them.\n" +
			"/help lists the commands, /quit ends.\n\n")
	}
}

const helpCommands = `Lines that do not start with / are posted as the current person: the first one
mentions the bot in #ops and starts a thread, the next ones are replies in it.

  /as NAME                act as someone else: you, alice, bob, carol or dave
  /new                    start a new thread with the next message
  /approve [N]            click Approve on the latest pending card (or card #N)
  /deny [N]               click Deny
  /always [N]             click Always allow here
  /reject [#N] REASON     click Reject with reason and submit the reason
  /edit [#N] JSON         click Edit arguments and submit new arguments
  /reply [#N] ANSWER      answer a question the bot asked (ask_human)
  /cancel [N]             click Cancel request (only the requester may)
  /pending                run /approvals pending
  /policy                 show the policy file and /approvals policy list
  /approvals ARGS         run any /approvals command, e.g. /approvals policy test workspace_delete {"path":"scratch.csv"}
  /show                   print the whole thread again
  /help                   this text
  /quit                   stop the bot and leave (end of input and Ctrl-C do too)
`

// loop reads commands until the input ends, /quit or ctx ends. With
// -script, it then returns an error if any command could not be carried
// out (see fail), so that a script in CI fails.
func (s *session) loop(ctx context.Context, in io.Reader, interactive bool) error {
	s.stopping = ctx.Done()
	done := make(chan struct{})
	defer close(done)
	input := lines(in, done)
	for n := 1; ; n++ {
		if interactive {
			s.printf("%s> ", s.user.name)
		}
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			s.printf("\nstopping\n")
			return s.outcome()
		case line, ok = <-input:
		}
		if !ok {
			if interactive {
				s.printf("\n")
			}
			return s.outcome()
		}
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !interactive {
			s.printf("%s> %s\n", s.user.name, line)
		}
		s.commands++
		s.failing = false
		quit := s.do(line)
		if s.failing {
			s.failed = append(s.failed, fmt.Sprintf("line %d (%s)", n, shorten(line, 40)))
		}
		if quit || ctx.Err() != nil {
			return s.outcome()
		}
	}
}

// fail prints why the command running could not be carried out, or not
// seen through (the bot did not react, or was still busy when -wait
// ran out), and counts it as failed. What the bot answers is no failure,
// whatever it is: a denied call, a refused click, a form it sends back.
func (s *session) fail(format string, args ...any) {
	s.printf("  "+format+"\n", args...)
	s.failing = true
}

// outcome is the session's result: with -script, an error that says how
// many commands failed and which, if any did; otherwise nil.
func (s *session) outcome() error {
	if s.opts.script == "" || len(s.failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of the script's %d %s failed: %s", len(s.failed), s.commands, plural(s.commands, "command", "commands"), strings.Join(s.failed, ", "))
}

// shorten cuts s to at most n runes, marking the cut with "…".
func shorten(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// plural returns one for n == 1 and many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// do runs one line and reports whether it asked to quit.
func (s *session) do(line string) (quit bool) {
	if !strings.HasPrefix(line, "/") {
		s.say(line)
		return false
	}
	cmd, rest, _ := strings.Cut(line, " ")
	rest = strings.TrimSpace(rest)
	switch cmd {
	case "/quit", "/exit":
		return true
	case "/help":
		s.printf("%s\n%s\n", helpCommands, helpText)
	case "/as":
		p, ok := personByName(rest)
		if !ok {
			s.fail("no such person %q: try you, alice, bob, carol or dave", rest)
			break
		}
		s.user = p
		s.printf("  you are now %s (%s)\n", p.name, p.role)
	case "/new":
		s.thread = ""
		s.printf("  the next message starts a new thread\n")
	case "/approve":
		s.click(slackapp.ActionApprove, rest)
	case "/deny":
		s.click(slackapp.ActionDeny, rest)
	case "/always":
		s.click(slackapp.ActionRemember, rest)
	case "/cancel":
		s.click(slackapp.ActionCancel, rest)
	case "/reject":
		s.modal(slackapp.ActionReject, slackapp.CallbackReject, slackapp.BlockRejectReason, slackapp.ActionRejectReason, rest, "a reason")
	case "/edit":
		s.modal(slackapp.ActionEdit, slackapp.CallbackEdit, slackapp.BlockEditArgs, slackapp.ActionEditArgs, rest, "the new arguments as JSON")
	case "/reply":
		s.modal(slackapp.ActionRespond, slackapp.CallbackRespond, slackapp.BlockAnswer, slackapp.ActionAnswer, rest, "an answer")
	case "/pending":
		s.slash("pending")
	case "/policy":
		s.printf("  config file:\n%s\n", indent(strings.TrimRight(s.pg.config, "\n"), "    "))
		s.slash("policy list")
	case "/approvals":
		s.slash(rest)
	case "/show":
		s.showAll()
	default:
		s.fail("unknown command %s; /help lists them", cmd)
	}
	return false
}

// inOps reports whether the current person is in #ops, where the terminal
// posts and runs commands; if not, it says so, as the page does.
func (s *session) inOps() bool {
	if !s.user.inOps {
		s.fail("%s", cannotPost(s.user, "#ops"))
	}
	return s.user.inOps
}

// say posts text in #ops as the current person, if they are in it.
func (s *session) say(text string) {
	if !s.inOps() {
		return
	}
	before := s.pg.activity()
	if s.thread == "" {
		s.thread = s.pg.slack.Mention(channelOps, s.user.id, typed(text))
		s.nextCard = 1
		s.printf("  (%s mentions @toolgate in #ops: a new thread)\n", s.user.name)
	} else {
		s.pg.slack.ThreadReply(channelOps, s.thread, s.user.id, typed(text))
	}
	s.settle(before)
	s.show()
}

// click presses a card's button as the current person.
func (s *session) click(action, arg string) {
	card, ok := s.pickCard(action, strings.TrimPrefix(arg, "#"))
	if !ok {
		return
	}
	before := s.pg.activity()
	if _, err := s.pg.slack.Click(s.user.id, channelOps, card.TS, action, ""); err != nil {
		s.fail("could not click: %v", err)
		return
	}
	s.settle(before)
	s.show()
}

// modal presses a button that opens a modal, types value into its one
// input and submits it. arg is "[#N] value".
func (s *session) modal(action, callback, blockID, actionID, arg, what string) {
	num := ""
	if strings.HasPrefix(arg, "#") {
		num, arg, _ = strings.Cut(arg[1:], " ")
		arg = strings.TrimSpace(arg)
	}
	if arg == "" {
		s.fail("type %s after the command", what)
		return
	}
	card, ok := s.pickCard(action, num)
	if !ok {
		return
	}
	open := map[string]bool{}
	for _, v := range s.pg.slack.OpenModals(s.user.id) {
		open[v.ID] = true
	}
	told := len(s.pg.slack.Ephemerals(s.user.id))
	before := s.pg.activity()
	if _, err := s.pg.slack.Click(s.user.id, channelOps, card.TS, action, ""); err != nil {
		s.fail("could not click: %v", err)
		return
	}
	var view fakeslack.View
	s.waitFor(func() bool {
		for _, v := range s.pg.slack.OpenModals(s.user.id) {
			if !open[v.ID] && v.CallbackID == callback {
				view = v
				return true
			}
		}
		return len(s.pg.slack.Ephemerals(s.user.id)) > told
	})
	if view.ID == "" {
		// The bot answered the click some other way, such as "you are
		// not an approver for this".
		s.settle(before)
		s.show()
		return
	}
	s.printf("  (%s types into the %q form and submits it)\n", s.user.name, viewTitle(view))
	before = s.pg.activity()
	ack, err := s.pg.slack.SubmitView(s.user.id, view.ID, map[string]map[string]string{blockID: {actionID: arg}}, "")
	if err != nil {
		s.fail("could not submit: %v", err)
		return
	}
	var resp struct {
		Action string            `json:"response_action"`
		Errors map[string]string `json:"errors"`
	}
	if json.Unmarshal(ack, &resp) == nil && resp.Action == "errors" {
		for _, e := range resp.Errors {
			s.printf("  the form was not accepted: %s\n", mrkdwnText(e))
		}
		return
	}
	s.settle(before)
	s.show()
}

// slash runs /approvals with text in #ops as the current person, if they
// are in it.
func (s *session) slash(text string) {
	if !s.inOps() {
		return
	}
	if _, err := s.pg.slack.Slash(s.user.id, channelOps, "/approvals", typed(text)); err != nil {
		s.fail("/approvals %s: %v", text, err)
		return
	}
	s.show()
}

// pickCard finds the card to act on: card number num, or the latest
// pending card of the thread. It explains the problem when there is none.
func (s *session) pickCard(action, num string) (fakeslack.Message, bool) {
	if s.thread == "" {
		s.fail("no thread yet: post a message first")
		return fakeslack.Message{}, false
	}
	s.show() // numbers cards that are new
	msgs := s.pg.slack.Thread(channelOps, s.thread)
	if num != "" {
		n, err := strconv.Atoi(num)
		if err != nil {
			s.fail("%q is not a card number", num)
			return fakeslack.Message{}, false
		}
		for _, m := range msgs {
			if s.cards[m.TS] == n {
				if !hasElement(m.Blocks, action) {
					s.fail("card #%d has no such button (any more)", n)
					return fakeslack.Message{}, false
				}
				return m, true
			}
		}
		s.fail("there is no card #%d in this thread", n)
		return fakeslack.Message{}, false
	}
	for _, m := range slices.Backward(msgs) {
		if m.BotID != "" && isPendingCard(m) {
			if !hasElement(m.Blocks, action) {
				s.fail("card #%d has no such button", s.cards[m.TS])
				return fakeslack.Message{}, false
			}
			return m, true
		}
	}
	s.fail("no pending card in this thread")
	return fakeslack.Message{}, false
}

// settle waits until the bot reacted to an action and then went quiet:
// no Web API call and no model request for a while, no thread status
// ("is thinking…") and no answer being streamed. It gives up after the
// -wait flag's time, or after startWait with no reaction at all.
func (s *session) settle(before int64) {
	start := time.Now()
	deadline := start.Add(s.opts.wait)
	last, changed := s.pg.activity(), start
	reacted := last != before
	for time.Now().Before(deadline) {
		if !s.pause() {
			return
		}
		if a := s.pg.activity(); a != last {
			last, changed, reacted = a, time.Now(), true
			continue
		}
		if !reacted {
			if time.Since(start) > min(startWait, s.opts.wait) {
				s.fail("(the bot did not react)")
				return
			}
			continue
		}
		if time.Since(changed) >= s.opts.quiet && s.idle() {
			return
		}
	}
	s.fail("(still waiting for the bot; its answer will show after the next command)")
}

// idle reports whether the bot shows no work in progress in the thread.
func (s *session) idle() bool {
	if s.thread == "" {
		return true
	}
	if s.pg.slack.ThreadStatus(channelOps, s.thread) != "" {
		return false
	}
	for _, m := range s.pg.slack.Thread(channelOps, s.thread) {
		if m.Streaming {
			return false
		}
	}
	return true
}

// waitFor polls cond until it holds or startWait passes, or the
// playground stops.
func (s *session) waitFor(cond func() bool) bool {
	deadline := time.Now().Add(min(startWait, s.opts.wait))
	for !cond() {
		if time.Now().After(deadline) || !s.pause() {
			return false
		}
	}
	return true
}

// pause waits a moment between two looks at the bot; false once the
// playground stops.
func (s *session) pause() bool {
	t := time.NewTimer(20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-s.stopping:
		return false
	case <-t.C:
		return true
	}
}

// show prints what is new since the last call: the bot's new and changed
// messages in the thread and in people's DMs with it, and new ephemeral
// messages.
func (s *session) show() {
	if s.thread != "" {
		for _, m := range s.pg.slack.Thread(channelOps, s.thread) {
			if m.BotID == "" {
				continue
			}
			s.printMessage(m, false)
		}
	}
	for _, p := range people {
		for _, m := range s.pg.slack.Messages(s.pg.slack.DMChannel(p.id)) {
			if m.BotID != "" && !m.Streaming {
				s.printDM(p, m)
			}
		}
		eph := s.pg.slack.Ephemerals(p.id)
		for _, e := range eph[min(s.ephemeral[p.id], len(eph)):] {
			who := p.name + " sees"
			if p.id == userYou {
				who = "you see"
			}
			s.printf("toolgate (only %s this):\n%s\n", who, indent(blocksText(e.Blocks, e.Text), "  "))
		}
		s.ephemeral[p.id] = len(eph)
	}
}

// showAll prints the whole thread, people's messages included.
func (s *session) showAll() {
	if s.thread == "" {
		s.fail("no thread yet")
		return
	}
	for _, m := range s.pg.slack.Thread(channelOps, s.thread) {
		if m.BotID == "" {
			s.printf("%s:\n%s\n", nameOf(m.User), indent(mrkdwnText(m.Text), "  "))
			continue
		}
		s.printMessage(m, true)
	}
}

// printMessage prints a bot message if it is new or changed (or always).
func (s *session) printMessage(m fakeslack.Message, always bool) {
	text := blocksText(m.Blocks, m.Text)
	if m.Streaming {
		return // shown once the stream ends
	}
	prev, seen := s.shown[m.TS]
	if !always && seen && prev == text {
		return
	}
	s.shown[m.TS] = text
	label := "toolgate"
	if isPendingCard(m) && s.cards[m.TS] == 0 {
		s.cards[m.TS] = s.nextCard
		s.nextCard++
	}
	if n := s.cards[m.TS]; n > 0 {
		label += fmt.Sprintf(" · card #%d", n)
	}
	if seen && !always {
		label += " updated"
	}
	s.printf("%s:\n%s\n", label, indent(text, "  "))
}

// printDM prints a bot message in p's DM with the bot if it is new or
// changed. Nothing is posted in a DM from the terminal: the bot writes
// there what it cannot say in #ops, such as why it refused the click of
// someone outside the channel, who cannot be shown an ephemeral message
// there.
func (s *session) printDM(p person, m fakeslack.Message) {
	text := blocksText(m.Blocks, m.Text)
	if prev, seen := s.shown[m.TS]; seen && prev == text {
		return
	}
	s.shown[m.TS] = text
	where := p.name + "'s DM"
	if p.id == userYou {
		where = "your DM"
	}
	s.printf("toolgate (in %s):\n%s\n", where, indent(text, "  "))
}

// isPendingCard reports whether m is an approval card that can still be
// decided.
func isPendingCard(m fakeslack.Message) bool {
	return hasElement(m.Blocks, slackapp.ActionApprove) || hasElement(m.Blocks, slackapp.ActionRespond)
}

// hasElement reports whether blocks have an interactive element actionID.
func hasElement(blocks json.RawMessage, actionID string) bool {
	var list []struct {
		Elements []struct {
			ActionID string `json:"action_id"`
		} `json:"elements"`
		Accessory struct {
			ActionID string `json:"action_id"`
		} `json:"accessory"`
	}
	if json.Unmarshal(blocks, &list) != nil {
		return false
	}
	for _, b := range list {
		if b.Accessory.ActionID == actionID {
			return true
		}
		for _, el := range b.Elements {
			if el.ActionID == actionID {
				return true
			}
		}
	}
	return false
}

// viewTitle returns the title of a modal.
func viewTitle(v fakeslack.View) string {
	var obj struct {
		Title struct{ Text string } `json:"title"`
	}
	_ = json.Unmarshal(v.JSON, &obj)
	return obj.Title.Text
}
