package main

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"golang.org/x/sync/errgroup"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

// The web page: a small Slack client for the fake workspace. The server
// renders everything (html.go) and pushes "something changed" over a
// WebSocket; the page's script (static/app.js) fetches the rendered panes
// again and posts what the person does, which the server turns into the
// Socket Mode envelopes Slack would send.

//go:embed static
var staticFiles embed.FS

// maxRequestBody bounds what the page may post.
const maxRequestBody = 1 << 20

// maxMessageChars is the longest message Slack takes.
const maxMessageChars = 40000

// noticeTimeout bounds the sending of one change notice: a page that
// takes none for that long is dropped, and opens its socket again.
const noticeTimeout = 10 * time.Second

// web serves the page for one playground.
type web struct {
	pg   *playground
	r    renderer
	page *template.Template
	// host is the address the page is served on; requests naming another
	// host (DNS rebinding) are refused.
	host string

	// submitView submits a modal: the fake Slack's SubmitView (tests
	// wrap it).
	submitView func(user, viewID string, values map[string]map[string]string, privateMetadata string) (json.RawMessage, error)
	// slash runs a slash command: the fake Slack's Slash (tests wrap it).
	slash func(user, channel, command, text string) (json.RawMessage, error)

	mu   sync.Mutex
	errs map[string]map[string]string // view id -> the inline errors of its last submission
	// submitting holds the views whose submission is under way: Slack
	// takes one submission of a modal at a time, and a second click on
	// Submit meanwhile does nothing.
	submitting map[string]bool
	// dmRead holds, by person, the ts of the newest message of their DM
	// with the bot when they last looked at it: the bot's messages after
	// it are unread. The bot answers a click on its Home tab there.
	dmRead map[string]string
	// changed is closed, and replaced, when errs or dmRead change: the
	// page's own state, which the fake Slack's Changed does not cover.
	changed chan struct{}
}

func newWeb(pg *playground, host string) (*web, error) {
	page, err := template.ParseFS(staticFiles, "static/index.html")
	if err != nil {
		return nil, fmt.Errorf("page template: %w", err)
	}
	w := &web{
		pg: pg, page: page, host: host, submitView: pg.slack.SubmitView, slash: pg.slack.Slash,
		errs: map[string]map[string]string{}, submitting: map[string]bool{}, dmRead: map[string]string{}, changed: make(chan struct{}),
	}
	w.r = renderer{
		user: func(id string) (string, bool) {
			if id == pg.slack.BotUserID() {
				return "toolgate", true
			}
			p, ok := personByID(id)
			return p.name, ok
		},
		channel: func(id string) (string, bool) {
			switch id {
			case channelOps:
				return "ops", true
			case channelApprov:
				return "approvals", true
			}
			return "", false
		},
		loc: time.Local,
	}
	return w, nil
}

// serveWeb serves the page on opts.addr until ctx ends, prints its URL to
// out and, where a desktop is present, opens it in a browser.
func serveWeb(ctx context.Context, pg *playground, opts options, out io.Writer) error {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", opts.addr)
	if err != nil {
		return fmt.Errorf("-addr: %w", err)
	}
	w, err := newWeb(pg, ln.Addr().String())
	if err != nil {
		ln.Close()
		return err
	}
	url := "http://" + ln.Addr().String() + "/"
	model := "the scripted demo model"
	if pg.fakeModel == nil {
		model = "the model " + pg.modelName
	}
	fmt.Fprintf(out, "Toolgate playground: the real bot, a fake Slack workspace and %s, in this process.\n"+
		"Store: %s.\n\n  Open %s\n\nCtrl-C stops it.\n", model, pg.storeName, url)
	if !opts.noOpen {
		if opened := openBrowser(url); opened != nil {
			// The opener is reaped in the background (see openBrowser).
			// The end waits a moment for a quick one, and not for one
			// that runs the browser in the foreground: it is left to
			// run, detached, for as long as the browser does.
			defer func() {
				select {
				case <-opened:
				case <-time.After(openerGrace):
				}
			}()
		}
	}
	return w.serve(ctx, ln)
}

// openerGrace is how long the end of serveWeb waits for the browser opener
// to finish.
const openerGrace = 500 * time.Millisecond

// serve serves the page on ln until ctx ends, then stops the server,
// ending the page's change notices.
func (w *web) serve(ctx context.Context, ln net.Listener) error {
	streams, stopStreams := context.WithCancel(ctx)
	defer stopStreams()
	srv := &http.Server{
		Handler:           w.handler(),
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return streams },
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve the page: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		stopStreams()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return g.Wait()
}

// openBrowser opens url where a desktop is present: on macOS, or with
// DISPLAY or WAYLAND_DISPLAY set. Failing to open it is not an error: the
// URL is printed. The opener runs detached from the playground (see
// detach), so that stopping the playground does not stop the browser, and
// a goroutine waits for it; openBrowser returns a channel closed once it
// has, or nil if none was started. Where xdg-open runs the browser in the
// foreground, the opener lasts as long as the browser: nothing but that
// goroutine waits for it.
func openBrowser(url string) <-chan struct{} {
	var cmd *exec.Cmd
	switch {
	case runtime.GOOS == "darwin":
		cmd = exec.Command("open", url)
	case os.Getenv("DISPLAY") != "" || os.Getenv("WAYLAND_DISPLAY") != "":
		cmd = exec.Command("xdg-open", url)
	default:
		return nil
	}
	detach(cmd)
	if cmd.Start() != nil {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	return done
}

func (w *web) handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", w.index)
	mux.HandleFunc("GET /events", w.events)
	mux.HandleFunc("GET /panes", w.panes)
	mux.HandleFunc("POST /api/send", w.send)
	mux.HandleFunc("POST /api/click", w.click)
	mux.HandleFunc("POST /api/submit", w.submit)
	mux.HandleFunc("POST /api/close", w.closeModal)
	mux.HandleFunc("POST /api/home", w.openHome)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if !w.allowedHost(r.Host) {
			http.Error(rw, "unknown host", http.StatusForbidden)
			return
		}
		// No other page may frame this one (a transparent frame over a
		// decoy button would click Approve for whoever the URL names).
		rw.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
		rw.Header().Set("X-Frame-Options", "DENY")
		rw.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(rw, r)
	})
}

// allowedHost reports whether a request's Host names this server: its
// own address, or a loopback name on any port (an SSH tunnel or an
// editor's port forwarding may listen on another one), which no page of
// another site can have a browser send. A Host without a port (a browser
// leaves port 80 out) names port 80.
func (w *web) allowedHost(host string) bool {
	if host == w.host {
		return true
	}
	name, _, err := net.SplitHostPort(host)
	if err != nil {
		name = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	}
	return name == "localhost" || name == "127.0.0.1" || name == "::1"
}

// personView is a person in the page's user switcher.
type personView struct {
	ID, Name, Role string
}

func (w *web) index(rw http.ResponseWriter, _ *http.Request) {
	data := struct {
		People   []personView
		Model    string
		Scripted bool
		Store    string
		Examples []string // phrases the scripted model understands on the demo workspace
		Channel  string   // the conversation shown first
	}{Scripted: w.pg.fakeModel != nil, Store: w.pg.storeName, Channel: channelOps}
	for _, p := range people {
		data.People = append(data.People, personView{p.id, p.name, p.role})
	}
	if data.Scripted {
		data.Model = "scripted demo model (no API key)"
	} else {
		data.Model = "model: " + w.pg.modelName
	}
	if data.Scripted && w.pg.workspace != "" {
		data.Examples = []string{"delete scratch.csv", "list files", "read secrets/api-token.txt", "write hi to notes.md", "run df -h", "/approvals pending"}
	}
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := w.page.Execute(rw, data); err != nil {
		w.pg.log.Error("render the page", "err", err)
	}
}

// ownChanged returns a channel that is closed at the next change of the
// page's own state: the inline errors of modals, what each person has
// read of their DM.
func (w *web) ownChanged() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// notifyLocked wakes the change notices after a change of the page's own
// state. w.mu is held.
func (w *web) notifyLocked() {
	close(w.changed)
	w.changed = make(chan struct{})
}

// events sends the page a "change" message over a WebSocket when it
// connects and whenever the fake workspace or the page's own state
// changes, until the page goes away or the server stops. A WebSocket does
// not hold one of the six HTTP/1.1 connections a browser gives a host, as
// a stream of server-sent events does: with the page open in six tabs (one
// per person is natural), no tab could fetch or post anything. The
// upgrader refuses pages of other origins.
func (w *web) events(rw http.ResponseWriter, r *http.Request) {
	var upgrader websocket.Upgrader
	conn, err := upgrader.Upgrade(rw, r, nil)
	if err != nil {
		return // the upgrader has answered
	}
	// The page sends nothing: reading only notices that it went away
	// (and answers its control frames).
	gone := make(chan struct{})
	go func() {
		defer close(gone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	defer func() {
		conn.Close()
		<-gone
	}()
	for {
		changed, own := w.pg.slack.Changed(), w.ownChanged()
		_ = conn.SetWriteDeadline(time.Now().Add(noticeTimeout))
		if err := conn.WriteMessage(websocket.TextMessage, []byte("change")); err != nil {
			return
		}
		select {
		case <-r.Context().Done():
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "the playground stopped"), time.Now().Add(time.Second))
			return
		case <-gone:
			return
		case <-changed:
		case <-own:
		}
	}
}

// panesReply is what the page shows, rendered.
type panesReply struct {
	Sidebar  template.HTML `json:"sidebar"`
	Title    string        `json:"title"`
	Main     template.HTML `json:"main"`
	Thread   template.HTML `json:"thread"`
	Modal    template.HTML `json:"modal"`
	ModalKey string        `json:"modal_key"`
	CanPost  bool          `json:"can_post"`
	PostHint string        `json:"post_hint"`
}

// panes renders the page for ?user= looking at ?conv= (a channel id, "dm"
// or "home") with ?thread= open.
func (w *web) panes(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, ok := personByID(q.Get("user"))
	if !ok {
		http.Error(rw, "unknown user", http.StatusBadRequest)
		return
	}
	conv, thread := q.Get("conv"), q.Get("thread")
	if conv == "dm" {
		w.readDM(p)
	}
	var reply panesReply
	reply.Sidebar = w.sidebar(p, conv)
	switch conv {
	case "home":
		reply.Title = "toolgate · Home"
		notice := w.dmNotice(p)
		if v, ok := w.pg.slack.HomeView(p.id); ok {
			reply.Main = notice + w.r.view(v.JSON)
		} else {
			reply.Main = notice + template.HTML(`<div class="empty">The Home tab is loading…</div>`)
		}
	default:
		ch, name, member := w.channelFor(p, conv)
		reply.Title = name
		reply.Main = w.channelPane(p, ch)
		if thread != "" {
			reply.Thread = w.threadPane(p, ch, thread)
		}
		reply.CanPost = member
		switch {
		case !member:
			reply.PostHint = cannotPost(p, name)
		case ch == channelOps || ch == channelApprov:
			reply.PostHint = "Message " + name + " (mentions @toolgate; /approvals … runs the command)"
		default:
			reply.PostHint = "Message toolgate"
		}
	}
	if modals := w.pg.slack.OpenModals(p.id); len(modals) > 0 {
		v := modals[len(modals)-1]
		w.mu.Lock()
		errs := w.errs[v.ID]
		w.mu.Unlock()
		reply.Modal = w.r.modal(v.JSON, errs)
		errKey, _ := json.Marshal(errs)
		reply.ModalKey = v.ID + "/" + v.Hash + "/" + string(errKey)
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(rw).Encode(reply)
}

// channelFor resolves the conversation a page names: "dm" is the person's
// DM with the bot. It returns the channel id, its display name and
// whether the person is a member.
func (w *web) channelFor(p person, conv string) (id, name string, member bool) {
	switch conv {
	case channelApprov:
		return channelApprov, "#approvals", p.inApprovals
	case "dm":
		return w.pg.slack.DMChannel(p.id), "toolgate (DM)", true
	}
	return channelOps, "#ops", p.inOps
}

// readDM marks the person's DM with the bot as read up to its newest
// message: the page shows it to them.
func (w *web) readDM(p person) {
	msgs := w.pg.slack.Messages(w.pg.slack.DMChannel(p.id))
	newest := ""
	for _, m := range msgs {
		if m.ThreadTS == "" || m.ThreadTS == m.TS {
			newest = max(newest, m.TS)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if newest > w.dmRead[p.id] {
		w.dmRead[p.id] = newest
		w.notifyLocked() // the person's other pages mark it read too
	}
}

// unreadDM returns the bot's messages in the person's DM (not the replies
// in its threads) that came after they last looked at it, oldest first.
func (w *web) unreadDM(p person) []fakeslack.Message {
	w.mu.Lock()
	read := w.dmRead[p.id]
	w.mu.Unlock()
	var unread []fakeslack.Message
	for _, m := range w.pg.slack.Messages(w.pg.slack.DMChannel(p.id)) {
		if m.BotID != "" && !m.Deleted && (m.ThreadTS == "" || m.ThreadTS == m.TS) && m.TS > read {
			unread = append(unread, m)
		}
	}
	return unread
}

// dmNotice renders, for the Home tab, the newest unread message of the
// bot in the person's DM: the bot answers a click on the Home tab there
// (a refusal, or why a call needs approval), which Slack shows in the
// app's Messages tab, next to Home.
func (w *web) dmNotice(p person) template.HTML {
	unread := w.unreadDM(p)
	if len(unread) == 0 {
		return ""
	}
	m := unread[len(unread)-1]
	var b htmlBuilder
	b.raw(`<div class="home-notice" role="status"><div class="home-notice-head">toolgate wrote to you in your DM`)
	if len(unread) > 1 {
		b.text(fmt.Sprintf(" (%d new messages; the newest below)", len(unread)))
	}
	b.raw(` · <a href="#" class="conv-link" data-conv="dm">Open it</a></div><div class="msg-body">`)
	b.raw(string(w.r.message(m.Blocks, m.Text, m.Streamed)))
	b.raw(`</div></div>`)
	return b.html()
}

func (w *web) sidebar(p person, conv string) template.HTML {
	var b htmlBuilder
	item := func(conv, cur, label, extra string, unread int) {
		b.raw(`<a href="#" class="nav-item`)
		if conv == cur || (cur == "" && conv == channelOps) {
			b.raw(` active`)
		}
		if unread > 0 {
			b.raw(` unread`)
		}
		b.raw(`"`)
		b.attr("data-conv", conv)
		b.raw(`>`)
		if unread > 0 {
			b.raw(`<span class="nav-badge"`)
			b.attr("title", fmt.Sprintf("%d unread", unread))
			b.raw(`>`)
			b.text(fmt.Sprint(unread))
			b.raw(`</span>`)
		}
		b.text(label)
		if extra != "" {
			b.raw(`<span class="nav-note">`)
			b.text(extra)
			b.raw(`</span>`)
		}
		b.raw(`</a>`)
	}
	b.raw(`<div class="nav-section">Channels</div>`)
	_, _, inOps := w.channelFor(p, channelOps)
	item(channelOps, conv, "# ops", map[bool]string{false: "not a member"}[inOps], 0)
	_, _, inApprov := w.channelFor(p, channelApprov)
	item(channelApprov, conv, "# approvals", map[bool]string{false: "not a member"}[inApprov], 0)
	b.raw(`<div class="nav-section">Direct messages</div>`)
	// The DM is badged with the bot's messages the person has not seen,
	// as Slack badges an app's Messages tab.
	item("dm", conv, "toolgate", "", len(w.unreadDM(p)))
	b.raw(`<div class="nav-section">Apps</div>`)
	item("home", conv, "toolgate · Home", "", 0)
	return b.html()
}

// entry is a message or an ephemeral message in a pane, in ts order.
type entry struct {
	ts  string
	msg *fakeslack.Message
	eph *fakeslack.Ephemeral
}

func sortEntries(es []entry) {
	slices.SortStableFunc(es, func(a, b entry) int { return strings.Compare(a.ts, b.ts) })
}

// channelPane renders a channel's top-level messages, the person's
// ephemeral messages there, and under each thread parent its reply count
// and the bot's status.
func (w *web) channelPane(p person, ch string) template.HTML {
	msgs := w.pg.slack.Messages(ch)
	replies := map[string]int{}
	var es []entry
	for i := range msgs {
		m := &msgs[i]
		if m.Deleted {
			continue
		}
		if m.ThreadTS != "" && m.ThreadTS != m.TS {
			replies[m.ThreadTS]++
			continue
		}
		es = append(es, entry{ts: m.TS, msg: m})
	}
	for _, e := range w.pg.slack.Ephemerals(p.id) {
		if e.Channel == ch && e.ThreadTS == "" {
			es = append(es, entry{ts: e.TS, eph: &e})
		}
	}
	sortEntries(es)
	var b htmlBuilder
	if len(es) == 0 {
		b.raw(`<div class="empty">No messages yet. Say something to the bot below.</div>`)
	}
	for _, e := range es {
		w.entry(&b, ch, e)
		if e.msg == nil {
			continue
		}
		if n := replies[e.msg.TS]; n > 0 {
			b.raw(`<a href="#" class="replies"`)
			b.attr("data-thread", e.msg.TS)
			b.raw(`>`)
			b.text(fmt.Sprintf("%d %s", n, map[bool]string{true: "reply", false: "replies"}[n == 1]))
			b.raw(`</a>`)
		}
		if st := w.pg.slack.ThreadStatus(ch, e.msg.TS); st != "" {
			w.status(&b, st)
		}
	}
	return b.html()
}

// threadPane renders a thread: its parent, the replies, the person's
// ephemeral messages in it and the bot's status.
func (w *web) threadPane(p person, ch, thread string) template.HTML {
	var es []entry
	msgs := w.pg.slack.Thread(ch, thread)
	for i := range msgs {
		if !msgs[i].Deleted {
			es = append(es, entry{ts: msgs[i].TS, msg: &msgs[i]})
		}
	}
	for _, e := range w.pg.slack.Ephemerals(p.id) {
		if e.Channel == ch && e.ThreadTS == thread {
			es = append(es, entry{ts: e.TS, eph: &e})
		}
	}
	sortEntries(es)
	var b htmlBuilder
	b.raw(`<div class="thread-head"><span>Thread</span><button type="button" class="thread-close" title="Close">×</button></div><div class="thread-body">`)
	for i, e := range es {
		w.entry(&b, ch, e)
		if i == 0 && len(es) > 1 {
			b.raw(`<div class="thread-sep">`)
			b.text(fmt.Sprintf("%d %s", len(es)-1, map[bool]string{true: "reply", false: "replies"}[len(es) == 2]))
			b.raw(`</div>`)
		}
	}
	if st := w.pg.slack.ThreadStatus(ch, thread); st != "" {
		w.status(&b, st)
	}
	b.raw(`</div>`)
	return b.html()
}

func (w *web) status(b *htmlBuilder, status string) {
	b.raw(`<div class="bot-status"><span class="dots"></span> toolgate `)
	b.text(status)
	b.raw(`</div>`)
}

// entry renders one message with its author, time and content.
func (w *web) entry(b *htmlBuilder, ch string, e entry) {
	var author, ts string
	var bot bool
	var content template.HTML
	b.raw(`<div class="msg`)
	if e.eph != nil {
		author, ts, bot = "toolgate", e.eph.TS, true
		content = w.r.message(e.eph.Blocks, e.eph.Text, false)
		b.raw(` ephemeral"`)
	} else {
		m := e.msg
		ts = m.TS
		if m.BotID != "" {
			author, bot = "toolgate", true
		} else {
			author = nameOf(m.User)
		}
		content = w.r.message(m.Blocks, m.Text, m.Streamed)
		if m.Streaming {
			b.raw(` streaming`)
		}
		b.raw(`"`)
		b.attr("data-channel", ch)
		b.attr("data-ts", m.TS)
	}
	b.raw(`><div class="avatar`)
	if bot {
		b.raw(` bot`)
	}
	b.raw(`">`)
	b.text(strings.ToUpper(author[:1]))
	b.raw(`</div><div class="msg-main"><div class="msg-head"><span class="author">`)
	b.text(author)
	b.raw(`</span>`)
	if bot {
		b.raw(`<span class="app-badge">APP</span>`)
	}
	b.raw(`<span class="time">`)
	b.text(tsClock(ts))
	b.raw(`</span>`)
	if e.msg != nil && e.msg.Updates > 0 {
		b.raw(`<span class="edited">(edited)</span>`)
	}
	b.raw(`</div><div class="msg-body">`)
	b.raw(string(content))
	b.raw(`</div>`)
	if e.eph != nil {
		b.raw(`<div class="only-you">👁 Only visible to you</div>`)
	}
	b.raw(`</div></div>`)
}

// tsClock renders a message ts as a local clock time.
func tsClock(ts string) string {
	sec, _, _ := strings.Cut(ts, ".")
	var n int64
	if _, err := fmt.Sscan(sec, &n); err != nil {
		return ""
	}
	return time.Unix(n, 0).Format("15:04")
}

// decode reads a JSON request body into v and finds the person it names;
// it refuses other content types so that a plain cross-site form cannot
// post. On failure it has answered the request.
func decode(rw http.ResponseWriter, r *http.Request, v any, user *string) (person, bool) {
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
		http.Error(rw, "want application/json", http.StatusUnsupportedMediaType)
		return person{}, false
	}
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, maxRequestBody)).Decode(v); err != nil {
		http.Error(rw, "bad request: "+err.Error(), http.StatusBadRequest)
		return person{}, false
	}
	p, ok := personByID(*user)
	if !ok {
		http.Error(rw, "unknown user", http.StatusBadRequest)
	}
	return p, ok
}

func reply(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(v)
}

// send posts what the person typed: a slash command, a thread reply, a
// DM, or a message in a channel that mentions the bot.
func (w *web) send(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		User   string `json:"user"`
		Conv   string `json:"conv"`
		Thread string `json:"thread"`
		Text   string `json:"text"`
	}
	p, ok := decode(rw, r, &req, &req.User)
	if !ok {
		return
	}
	text := strings.TrimSpace(req.Text)
	if text == "" {
		http.Error(rw, "nothing to send", http.StatusBadRequest)
		return
	}
	if n := utf8.RuneCountInString(text); n > maxMessageChars {
		http.Error(rw, fmt.Sprintf("the message has %d characters; Slack takes at most %d", n, maxMessageChars), http.StatusBadRequest)
		return
	}
	ch, name, member := w.channelFor(p, req.Conv)
	if !member {
		http.Error(rw, cannotPost(p, name), http.StatusForbidden)
		return
	}
	if strings.HasPrefix(text, "/") {
		cmd, args, _ := strings.Cut(text, " ")
		if cmd != "/approvals" {
			http.Error(rw, "unknown command "+cmd+": the bot has /approvals", http.StatusBadRequest)
			return
		}
		if _, err := w.slash(p.id, ch, cmd, typed(strings.TrimSpace(args))); err != nil {
			w.pg.log.Warn("/approvals failed", "err", err)
			http.Error(rw, "/approvals failed: "+failure(err), http.StatusBadGateway)
			return
		}
		reply(rw, map[string]string{})
		return
	}
	var ts string
	switch {
	case req.Thread != "":
		// A reply goes in a thread of this conversation, as in Slack's
		// client; the fake Slack files one under any ts. A page that
		// switched person with a DM thread open would otherwise post
		// under a ts of another person's DM, a thread no one can see.
		if !w.isThread(ch, req.Thread) {
			http.Error(rw, "no thread "+req.Thread+" in "+name+": reply in a thread of this conversation", http.StatusBadRequest)
			return
		}
		ts = w.pg.slack.ThreadReply(ch, req.Thread, p.id, typed(text))
	case req.Conv == "dm":
		ts = w.pg.slack.DM(p.id, typed(text))
	default:
		ts = w.pg.slack.Mention(ch, p.id, typed(text))
	}
	reply(rw, map[string]string{"ts": ts})
}

// isThread reports whether ts is a top-level message of channel ch, one
// that can have a thread.
func (w *web) isThread(ch, ts string) bool {
	for _, m := range w.pg.slack.Messages(ch) {
		if m.TS == ts {
			return m.ThreadTS == "" || m.ThreadTS == m.TS
		}
	}
	return false
}

// click presses a button: in a message (channel and ts) or in a view.
func (w *web) click(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		User     string `json:"user"`
		Channel  string `json:"channel"`
		TS       string `json:"ts"`
		ViewID   string `json:"view_id"`
		ActionID string `json:"action_id"`
		Value    string `json:"value"`
	}
	p, ok := decode(rw, r, &req, &req.User)
	if !ok {
		return
	}
	var err error
	what := "message"
	if req.ViewID != "" {
		what = "view"
		_, err = w.pg.slack.ClickInView(p.id, req.ViewID, req.ActionID, req.Value)
	} else {
		_, err = w.pg.slack.Click(p.id, req.Channel, req.TS, req.ActionID, req.Value)
	}
	if err != nil {
		// The fake Slack refuses a click on a button that is no longer
		// there: the bot changed (or closed, or deleted) the view or the
		// message since the page showed it. The person is told so, not
		// the fake's own words.
		http.Error(rw, "This "+what+" has changed since the page showed it, and that button is gone: refresh the page to see it as it is now.", http.StatusBadRequest)
		return
	}
	reply(rw, map[string]string{})
}

// submit submits a modal with the values typed into it and keeps the
// inline errors the bot answers with, if any.
func (w *web) submit(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		User   string                       `json:"user"`
		ViewID string                       `json:"view_id"`
		Values map[string]map[string]string `json:"values"`
	}
	p, ok := decode(rw, r, &req, &req.User)
	if !ok {
		return
	}
	// The view is marked before it is looked at: a submission that ends
	// meanwhile has closed it, or answered with errors.
	w.mu.Lock()
	busy := w.submitting[req.ViewID]
	w.submitting[req.ViewID] = true
	w.mu.Unlock()
	if busy {
		http.Error(rw, "This form is already being submitted.", http.StatusConflict)
		return
	}
	defer func() {
		w.mu.Lock()
		delete(w.submitting, req.ViewID)
		w.mu.Unlock()
	}()
	if v, ok := w.pg.slack.View(req.ViewID); !ok || v.User != p.id || v.Closed {
		http.Error(rw, "This form is no longer open.", http.StatusBadRequest)
		return
	}
	ack, err := w.submitView(p.id, req.ViewID, req.Values, "")
	if err != nil {
		// The person is told what Slack would have them know, not the
		// fake's own words, which go to the log.
		w.pg.log.Warn("a modal's submission failed", "view", req.ViewID, "err", err)
		http.Error(rw, "The submission failed: "+failure(err), http.StatusBadGateway)
		return
	}
	var resp struct {
		Action string            `json:"response_action"`
		Errors map[string]string `json:"errors"`
	}
	_ = json.Unmarshal(ack, &resp)
	// The fake Slack announced the submission's outcome as it applied
	// it, before the errors are kept here: a page that fetched its panes
	// then showed the modal without them, so they are announced again.
	w.mu.Lock()
	if resp.Action == "errors" {
		w.errs[req.ViewID] = resp.Errors
	} else {
		delete(w.errs, req.ViewID)
	}
	w.notifyLocked()
	w.mu.Unlock()
	reply(rw, map[string]any{"errors": resp.Errors})
}

// failure says in plain words why a submission or a slash command failed
// in the fake Slack: the bot did not answer within the ack wait (the fake
// Slack's default, which the playground keeps), the playground is
// stopping, or the bot answered with a view Slack would refuse.
func failure(err error) string {
	switch {
	case errors.Is(err, fakeslack.ErrTimeout):
		return fmt.Sprintf("the bot did not answer within %v, as Slack requires. Try again.", fakeslack.DefaultAckWait)
	case errors.Is(err, fakeslack.ErrClosed):
		return "the playground is stopping."
	}
	return "the bot answered with a view Slack would refuse, so the form stays as it was. The playground's log in the terminal says what is wrong with that view."
}

// closeModal closes a modal, as its Cancel button does.
func (w *web) closeModal(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		User   string `json:"user"`
		ViewID string `json:"view_id"`
	}
	p, ok := decode(rw, r, &req, &req.User)
	if !ok {
		return
	}
	if err := w.pg.slack.CloseView(p.id, req.ViewID); err != nil {
		http.Error(rw, "This form is no longer open.", http.StatusBadRequest)
		return
	}
	w.mu.Lock()
	delete(w.errs, req.ViewID)
	w.mu.Unlock()
	reply(rw, map[string]string{})
}

// openHome tells the bot that the person opened its Home tab.
func (w *web) openHome(rw http.ResponseWriter, r *http.Request) {
	var req struct {
		User string `json:"user"`
	}
	p, ok := decode(rw, r, &req, &req.User)
	if !ok {
		return
	}
	w.pg.slack.OpenHome(p.id)
	reply(rw, map[string]string{})
}
