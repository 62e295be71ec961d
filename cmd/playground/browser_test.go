package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/toolgate/toolgate/internal/fakeslack"
)

var (
	screenshot = flag.Bool("screenshot", false, "write the README's screenshot, docs/playground.png, from the browser test")
	shotsDir   = flag.String("shots", "", "keep the browser test's screenshots in `dir` (default: the test's temporary directory)")
)

// browserTimeout bounds the whole browser scenario.
const browserTimeout = 90 * time.Second

// startBrowser starts a headless Chromium for the test. Without one it
// skips, except in CI (CI=true), where it fails.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			exe = p
			break
		}
	}
	if exe == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("no chromium on PATH: the browser test needs Debian's chromium package")
		}
		t.Skip("no chromium on PATH (apt-get install chromium); CI fails here instead")
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 860),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, browserTimeout)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium (%s): %v", exe, err)
	}
	return ctx
}

// startPage runs the playground with the demo config and serves its page
// on a free loopback port until the test ends.
func startPage(t *testing.T) (*playground, string) {
	t.Helper()
	return startPageWith(t, nil)
}

// startPageWith is startPage, with setup (if not nil) changing the page's
// server before it serves.
func startPageWith(t *testing.T, setup func(*web)) (*playground, string) {
	t.Helper()
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	t.Setenv("REDIS_URL", "")
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pg, err := start(ctx, options{}, log)
	if err != nil {
		cancel()
		t.Fatalf("start: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w, err := newWeb(pg, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(w)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.serve(ctx, ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		pg.close()
	})
	return pg, "http://" + ln.Addr().String() + "/"
}

// waitJS waits until the JavaScript expression is true in the page.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(20*time.Second)), nil)
}

// waitText waits until an element matching sel contains text.
func waitText(sel, text string) chromedp.Action[chromedp.Void] {
	return waitJS(fmt.Sprintf(`[...document.querySelectorAll(%q)].some(e => e.textContent.includes(%q))`, sel, text))
}

// click clicks the first element matching sel as soon as there is one.
// It finds and clicks in one step: the page replaces its panes whenever
// the workspace changes, so a node found in one step may be gone in the
// next.
func click(sel string) chromedp.Action[chromedp.Void] {
	return waitJS(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true })()`, sel))
}

// setValue types value into the first element matching sel as soon as
// there is one, finding and typing in one step as click does.
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	return waitJS(fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.value = %q; return true })()`, sel, value))
}

// lastMessageHas waits until the last message of the open thread contains
// every one of texts.
func lastMessageHas(texts ...string) chromedp.Action[chromedp.Void] {
	list, _ := json.Marshal(texts)
	return waitJS(fmt.Sprintf(`(() => { const ms = document.querySelectorAll("#thread .msg"); const last = ms[ms.length - 1]; return !!last && %s.every(s => last.textContent.includes(s)) })()`, list))
}

// actAs switches the page's user.
func actAs(userID string) chromedp.Action[chromedp.Void] {
	return void(chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById("user"); s.value = %q; s.dispatchEvent(new Event("change")); return true })()`, userID)), nil)
}

// openThread shows the thread ts in the thread pane, and waits until the
// pane holds it (not the thread shown before, whose buttons a next click
// would press).
func openThread(ts string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		click(fmt.Sprintf(`.replies[data-thread=%q]`, ts)),
		waitJS(fmt.Sprintf(`state.thread === %q && !document.getElementById("thread-pane").hidden && document.querySelector('#thread .msg[data-ts=%q]') !== null`, ts, ts)),
	)
}

// ask sends text as the current user in #ops and stores the new thread's
// ts once the bot's card is in it.
func ask(text string, ts *string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		waitJS(`(state.thread = "") === ""`), // the reply opens the new thread
		setValue("#text", text),
		click("#send"),
		waitJS(`state.thread !== "" && document.querySelector('#thread button[data-action-id="approve"]') !== null`),
		void(chromedp.Evaluate[string](`state.thread`), ts),
	)
}

func TestBrowser(t *testing.T) {
	pg, url := startPage(t)
	ctx := startBrowser(t)
	shots := *shotsDir
	if shots == "" {
		shots = t.TempDir()
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			_ = chromedp.Do(ctx, shot("failed"))
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
			t.Fatalf("%s: %v\nscreenshots in %s\npage:\n%s", step, err, shots, html)
		}
	}
	// The Approve button of the card in the open thread.
	const approve = `#thread .msg[data-ts] button[data-action-id="approve"]`

	var threadA, threadB, threadC string
	run("load the page",
		chromedp.Navigate(url+"?user="+userYou),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		waitText(`#model`, "scripted demo model"),
	)
	run("the requester asks to delete scratch.csv: a card with its buttons",
		ask("delete scratch.csv", &threadA),
		waitText(`#thread .bk-header`, "workspace_delete"),
		waitText(`#thread .bk-text`, "Deleting files needs a second person"),
		waitText(`#thread .mention`, "@alice"),
		chromedp.WaitVisible(chromedp.CSS(`#thread button.bk-primary[data-action-id="approve"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#thread button[data-action-id="reject"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#thread button[data-action-id="edit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#thread button.bk-danger[data-action-id="deny"]`)),
		shot("1-card"),
	)
	run("a second request in another thread",
		ask("delete scratch.csv", &threadB),
	)
	if threadA == threadB {
		t.Fatalf("both requests landed in thread %s", threadA)
	}

	run("a bystander's Approve is refused privately",
		actAs(userBob),
		openThread(threadA),
		click(approve),
		waitText(`.msg.ephemeral`, "not an approver"),
		waitText(`.msg.ephemeral .only-you`, "Only visible to you"),
		shot("2-bystander"),
	)
	run("the refusal is only bob's",
		actAs(userAlice),
		waitJS(`document.querySelector("#user").value === "`+userAlice+`" && !document.body.textContent.includes("not an approver")`),
	)

	const reason = "not during the freeze <b>really</b>"
	run("the approver rejects with a reason through the modal",
		click(`#thread button[data-action-id="reject"]`),
		chromedp.WaitVisible(chromedp.CSS(`#modal .modal .bk-field-input`)),
		setValue(`#modal .bk-field-input`, reason),
		shot("3-reject-modal"),
		click(`#modal .modal-submit`),
		waitJS(`document.getElementById("modal-layer").hidden`),
		waitText(`#thread .msg`, "Rejected by"),
		// The answer, last in the thread, quotes the tool result: the
		// scripted model read the reason.
		lastMessageHas("workspace_delete: ", "not during the freeze"),
		waitJS(`document.querySelector('#thread button[data-action-id="approve"]') === null`),
	)
	if !modelSaw(pg, "not during the freeze <b>really</b>") {
		t.Error("the reviewer's reason did not reach the model verbatim")
	}
	var injected bool
	run("the reason is text, not markup",
		void(chromedp.Evaluate[bool](`[...document.querySelectorAll("#thread b")].some(b => b.textContent === "really")`), &injected),
	)
	if injected {
		t.Error("the reason's <b> became markup")
	}
	if _, err := os.Stat(filepath.Join(pg.workspace, "scratch.csv")); err != nil {
		t.Fatalf("scratch.csv is gone after a rejection: %v", err)
	}

	run("the approver approves in the other thread",
		openThread(threadB),
		click(approve),
		waitText(`#thread .msg`, "Approved by"),
		waitJS(`document.querySelector('#thread button[data-action-id="approve"]') === null`),
		lastMessageHas("workspace_delete: deleted scratch.csv"),
		shot("4-approved"),
	)
	if _, err := os.Stat(filepath.Join(pg.workspace, "scratch.csv")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("scratch.csv after the approval: got %v, want it gone", err)
	}

	run("a third request, for the edit form",
		actAs(userYou),
		ask("delete report.csv", &threadC),
		actAs(userAlice),
		waitJS(`document.querySelector('#thread button[data-action-id="edit"]') !== null`),
	)
	if *screenshot {
		var buf []byte
		run("the README's screenshot", void(chromedp.FullScreenshot(100), &buf))
		if err := os.WriteFile(filepath.Join("..", "..", "docs", "playground.png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run("Deny asks for confirmation first; keeping it pending changes nothing",
		click(`#thread button[data-action-id="deny"]`),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-layer .bk-confirm-box`)),
		waitText(`#confirm-layer .bk-confirm-title`, "Deny this call?"),
		click(`#confirm-layer .bk-confirm-no`),
		waitJS(`document.getElementById("confirm-layer").hidden`),
		waitJS(`document.querySelector('#thread button[data-action-id="approve"]') !== null`),
	)
	run("Edit with invalid JSON shows the inline error",
		click(`#thread button[data-action-id="edit"]`),
		chromedp.WaitVisible(chromedp.CSS(`#modal textarea.bk-field-input`)),
		setValue(`#modal textarea.bk-field-input`, `{"path": "report.csv",`),
		click(`#modal .modal-submit`),
		chromedp.WaitVisible(chromedp.CSS(`#modal .bk-has-error .bk-error`)),
		// What was typed is kept next to the error.
		waitJS(`document.querySelector("#modal textarea.bk-field-input").value === '{"path": "report.csv",'`),
		shot("5-edit-error"),
		click(`#modal .modal-close`),
		waitJS(`document.getElementById("modal-layer").hidden`),
		// Neither the kept-pending Deny nor the failed edit decided it.
		waitJS(`document.querySelector('#thread button[data-action-id="approve"]') !== null && !document.getElementById("thread").textContent.includes("Denied by")`),
	)
	if _, err := os.Stat(filepath.Join(pg.workspace, "report.csv")); err != nil {
		t.Errorf("report.csv after a failed edit: %v", err)
	}
	t.Logf("screenshots in %s", shots)
}

// modelSaw reports whether a tool result given to the scripted model
// contains text.
func modelSaw(pg *playground, text string) bool {
	for _, req := range pg.fakeModel.Requests() {
		for _, m := range req.Messages {
			if m.Role == "tool" && strings.Contains(m.Content, text) {
				return true
			}
		}
	}
	return false
}

// void runs a, stores its value in dst (if not nil) and returns nothing,
// so that actions with values can be steps.
func void[T any](a chromedp.Action[T], dst *T) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		v, err := a(ctx, tg)
		if dst != nil {
			*dst = v
		}
		return chromedp.Void{}, err
	}
}

// TestBrowserSurfaces walks the rest of the page: a DM whose card goes to
// #approvals, the App Home inbox, a slash command's private answer and a
// person outside #ops.
func TestBrowserSurfaces(t *testing.T) {
	pg, url := startPage(t)
	ctx := startBrowser(t)
	shots := *shotsDir
	if shots == "" {
		shots = t.TempDir()
	}
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			buf, err := chromedp.FullScreenshot(100)(ctx, tg)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644)
		})
	}
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			_ = chromedp.Do(ctx, shot("failed"))
			html, _ := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("body")))
			t.Fatalf("%s: %v\nscreenshots in %s\npage:\n%s", step, err, shots, html)
		}
	}
	var dmThread string
	run("load the page",
		chromedp.Navigate(url+"?user="+userYou),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
	)
	run("a request in the DM with the bot",
		click(`.nav-item[data-conv="dm"]`),
		waitText(`#title`, "toolgate (DM)"),
		ask("delete notes.md", &dmThread),
		shot("s1-dm"),
	)
	run("alice cannot see the DM: switching to her closes your DM's thread",
		actAs(userAlice),
		waitJS(`state.thread === "" && document.getElementById("thread-pane").hidden && document.getElementById("title").textContent === "toolgate (DM)"`),
	)
	run("alice cannot see the DM: the card is in #approvals",
		click(`.nav-item[data-conv="`+channelApprov+`"]`),
		waitText(`#title`, "#approvals"),
		waitText(`#main .bk-header`, "workspace_delete"),
		waitJS(`document.querySelector('#main button[data-action-id="approve"]') !== null`),
		shot("s2-approvals"),
	)
	run("alice's Home tab lists it with the same buttons",
		click(`.nav-item[data-conv="home"]`),
		waitJS(`document.querySelector('#main .home-view button[data-action-id="approve"]') !== null`),
		waitText(`#main .home-view`, "workspace_delete"),
		shot("s3-home"),
		click(`#main .home-view button[data-action-id="approve"]`),
	)
	run("approved from the Home tab: the requester's thread has the answer",
		actAs(userYou),
		click(`.nav-item[data-conv="dm"]`),
		openThread(dmThread),
		waitText(`#thread .msg`, "Approved by"),
		waitText(`#thread .msg`, "workspace_delete: deleted notes.md"),
	)
	if _, err := os.Stat(filepath.Join(pg.workspace, "notes.md")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("notes.md after the approval: got %v, want it gone", err)
	}
	// The page holds the next send until the person is switched, then
	// lets it through.
	var opened bool
	run("a message sent just before a switch of person does not open its thread for the next one",
		void(chromedp.Evaluate[bool](`(() => {
			const fetch = window.fetch;
			window.releaseSend = null;
			window.fetch = (url, opts) => {
				if (url !== "/api/send") return fetch(url, opts);
				window.fetch = fetch;
				return new Promise((resolve) => { window.releaseSend = () => resolve(fetch(url, opts)); });
			};
			return true;
		})()`), nil),
		setValue("#text", "list files"),
		click("#send"),
		waitJS(`window.releaseSend !== null`),
		actAs(userAlice),
		waitJS(`document.getElementById("thread-pane").hidden`),
		void(chromedp.Evaluate[bool](`(window.releaseSend(), true)`), nil),
		// send clears the composer and then decides about the thread.
		waitJS(`document.getElementById("text").value === ""`),
		void(chromedp.Evaluate[bool](`state.thread !== "" || !document.getElementById("thread-pane").hidden`), &opened),
	)
	if opened {
		t.Error("alice's page opened the thread of the message you sent")
	}
	run("a slash command answers privately",
		actAs(userBob),
		click(`.nav-item[data-conv="`+channelOps+`"]`),
		setValue("#text", "/approvals help"),
		click("#send"),
		waitText(`#main .msg.ephemeral`, "/approvals"),
		waitText(`#main .msg.ephemeral .only-you`, "Only visible to you"),
		shot("s4-slash"),
	)
	run("dave, outside #ops, cannot post there",
		actAs(userDave),
		waitJS(`document.getElementById("text").disabled && document.getElementById("text").placeholder.includes("not in #ops")`),
		waitJS(`!document.body.textContent.includes("Only visible to you")`),
	)
	run("a ?user= that names no one says so, and the page acts as the first person",
		chromedp.Navigate(url+"?user=U0NOBODY99"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		waitText(`#post-error`, `No one here is "U0NOBODY99"`),
		waitJS(`!document.getElementById("post-error").hidden && state.user === "`+userYou+`"`),
	)
	run("?user= takes a name",
		chromedp.Navigate(url+"?user=alice"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		waitJS(`state.user === "`+userAlice+`" && document.getElementById("post-error").hidden`),
	)
}

// tabTimeout bounds each step of TestBrowserManyTabs: a page that gets
// no connection waits forever, so a step that takes longer has failed.
const tabTimeout = 15 * time.Second

// TestBrowserManyTabs opens the page in one tab per person, and more:
// browsers give a host at most six HTTP/1.1 connections, so a page that
// held one open for its change notices would leave none for a sixth tab's
// requests or a seventh tab's page, and freeze them all.
func TestBrowserManyTabs(t *testing.T) {
	_, url := startPage(t)
	first := startBrowser(t)
	step := func(ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, tabTimeout)
		defer cancel()
		if err := chromedp.Do(sctx, actions...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	load := func(user string) chromedp.Action[chromedp.Void] {
		return chromedp.Steps(
			chromedp.Navigate(url+"?user="+user),
			waitJS(`document.querySelector("#sidebar .nav-item.active") !== null && state.user !== ""`),
		)
	}
	tabs := []context.Context{first}
	for i, user := range []string{"you", "alice", "bob", "carol", "dave", "you", "alice"} {
		tab := first
		if i > 0 {
			ctx, cancel := chromedp.NewContext(first)
			t.Cleanup(cancel)
			// The first run opens the tab for as long as its context
			// lasts, so it runs without a step's timeout.
			if err := chromedp.Do(ctx); err != nil {
				t.Fatalf("open tab %d: %v", i+1, err)
			}
			tab = ctx
			tabs = append(tabs, tab)
		}
		step(tab, fmt.Sprintf("load tab %d as %s", i+1, user), load(user))
		if i == 5 {
			step(tabs[0], "with six tabs open, a message sent in the first shows in #main",
				setValue("#text", "list files"),
				click("#send"),
				waitText(`#main .msg`, "list files"),
			)
		}
	}
	step(tabs[4], "the other tabs follow: dave's shows the message too",
		waitText(`#main .msg`, "list files"),
	)
}

// A page opened on the Home tab (?conv=home) tells the bot that the Home
// tab was opened, as the sidebar's Home item does, and shows it.
func TestBrowserOpensHomeFromURL(t *testing.T) {
	_, url := startPage(t)
	ctx := startBrowser(t)
	err := chromedp.Do(ctx,
		chromedp.Navigate(url+"?user=alice&conv=home"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		waitJS(`document.querySelector("#main .home-view") !== null`),
	)
	if err != nil {
		var main string
		_ = chromedp.Do(ctx, void(chromedp.Evaluate[string](`document.getElementById("main").textContent`), &main))
		t.Fatalf("the Home tab opened from the URL: %v; it shows %q", err, main)
	}
}

// An error on the Home tab, which has no composer, is shown: here a click
// on a button of a Home tab the bot has changed since the page showed it,
// told in plain words.
func TestBrowserShowsErrorsOnHome(t *testing.T) {
	pg, url := startPage(t)
	ctx := startBrowser(t)
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	var card string
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"approve"`) {
				card = m.TS
				return true
			}
		}
		return false
	})
	run("alice's Home tab lists the call",
		chromedp.Navigate(url+"?user=alice"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		click(`.nav-item[data-conv="home"]`),
		waitJS(`document.querySelector('#main .home-view button[data-action-id="approve"]') !== null`),
	)
	// The page is slow to fetch its panes (held here), and meanwhile
	// alice approves the call elsewhere: the Home tab no longer has it.
	// Held once no fetch runs: one running would set fetching back to
	// false as it ends, and redraw the tab without the stale button.
	run("hold the page's fetches", waitJS(`!fetching && (fetching = true)`))
	if _, err := pg.slack.Click(userAlice, channelOps, card, "approve", ""); err != nil {
		t.Fatal(err)
	}
	waitSlack(t, pg, "alice's Home without the call", func() bool {
		v, ok := pg.slack.HomeView(userAlice)
		return ok && !strings.Contains(string(v.JSON), `"approve"`)
	})
	var shown bool
	var text string
	run("alice clicks the stale Approve: the click is refused",
		click(`#main .home-view button[data-action-id="approve"]`),
		waitJS(`document.getElementById("post-error").textContent !== ""`),
		void(chromedp.Evaluate[string](`document.getElementById("post-error").textContent`), &text),
		void(chromedp.Evaluate[bool](`document.getElementById("post-error").offsetParent !== null`), &shown),
	)
	if !shown {
		t.Errorf("the error %q is not visible on the Home tab", text)
	}
	if !strings.Contains(text, "changed since the page showed it") || strings.Contains(text, "fakeslack") {
		t.Errorf("the error says %q, want it in plain words", text)
	}
}

// A double click on a modal's Submit submits it once: the button is
// disabled while the submission is under way.
func TestBrowserSubmitsAModalOnce(t *testing.T) {
	pg, url := startPage(t)
	ctx := startBrowser(t)
	run := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"reject"`) {
				return true
			}
		}
		return false
	})
	var disabled bool
	run("alice double-clicks Submit in the reject modal",
		chromedp.Navigate(url+"?user=alice"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		openThread(ts),
		click(`#thread button[data-action-id="reject"]`),
		chromedp.WaitVisible(chromedp.CSS(`#modal .modal .bk-field-input`)),
		setValue(`#modal .bk-field-input`, "not now"),
		void(chromedp.Evaluate[bool](`(() => { const b = document.querySelector("#modal .modal-submit"); b.click(); const d = b.disabled; b.click(); return d })()`), &disabled),
		waitJS(`document.getElementById("modal-layer").hidden`),
		waitText(`#thread .msg`, "Rejected by"),
	)
	if !disabled {
		t.Error("Submit stayed enabled while the modal was being submitted")
	}
	subs := 0
	for _, e := range pg.slack.Envelopes() {
		if e.InteractionType == "view_submission" {
			subs++
		}
	}
	var errText string
	run("read the page's error", void(chromedp.Evaluate[string](`document.getElementById("post-error").textContent`), &errText))
	if subs != 1 || errText != "" {
		t.Errorf("the bot got %d submissions; the page shows the error %q", subs, errText)
	}
}

// A modal whose submission fails stays open, and says why inside itself,
// in plain words: an error under the modal's overlay is one the person
// cannot see.
func TestBrowserModalSubmitErrorIsVisible(t *testing.T) {
	pg, url := startPageWith(t, func(w *web) {
		w.submitView = func(string, string, map[string]map[string]string, string) (json.RawMessage, error) {
			return nil, fmt.Errorf("waiting for ack of E0TEST0001: %w", fakeslack.ErrTimeout)
		}
	})
	ctx := startBrowser(t)
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"reject"`) {
				return true
			}
		}
		return false
	})
	// shownError is the error the page shows, in the modal or under the
	// composer, and whether it is what a person sees at its place (no
	// overlay over it).
	const shownError = `(() => {
		const e = [...document.querySelectorAll("#modal .modal-error, #post-error")].find(e => e.textContent !== "");
		if (!e) return null;
		const r = e.getBoundingClientRect();
		const hit = r.width > 0 && r.height > 0 ? document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2) : null;
		return { text: e.textContent, visible: hit !== null && e.contains(hit) };
	})()`
	var got struct {
		Text    string `json:"text"`
		Visible bool   `json:"visible"`
	}
	var open, enabled bool
	err := chromedp.Do(ctx,
		chromedp.Navigate(url+"?user=alice"),
		chromedp.WaitVisible(chromedp.CSS(`#sidebar .nav-item.active`)),
		openThread(ts),
		click(`#thread button[data-action-id="reject"]`),
		chromedp.WaitVisible(chromedp.CSS(`#modal .modal .bk-field-input`)),
		setValue(`#modal .bk-field-input`, "not now"),
		click(`#modal .modal-submit`),
		waitJS(`(`+shownError+`) !== null`),
		void(chromedp.Evaluate[struct {
			Text    string `json:"text"`
			Visible bool   `json:"visible"`
		}](shownError), &got),
		void(chromedp.Evaluate[bool](`!document.getElementById("modal-layer").hidden`), &open),
		waitJS(`!document.querySelector("#modal .modal-submit").disabled`),
		void(chromedp.Evaluate[bool](`!document.querySelector("#modal .modal-submit").disabled`), &enabled),
	)
	if err != nil {
		t.Fatal(err)
	}
	if !open || !enabled {
		t.Errorf("after the failed submission the modal is open: %v, its Submit enabled: %v; want both", open, enabled)
	}
	if !got.Visible {
		t.Errorf("the error %q is covered by the modal's overlay", got.Text)
	}
	if !strings.Contains(got.Text, "did not answer") || strings.Contains(got.Text, "fakeslack") || strings.Contains(got.Text, "ack of") {
		t.Errorf("the error says %q, want it in plain words", got.Text)
	}
}

// The bot's answer to a click on the Home tab, in the person's DM, shows
// on the Home tab and badges the DM in the sidebar; the notice's link
// opens the DM, which then is read.
func TestBrowserHomeClickAnswerLeadsToTheDM(t *testing.T) {
	pg, url := startPage(t)
	ctx := startBrowser(t)
	ts := pg.slack.Mention(channelOps, userYou, "delete scratch.csv")
	waitSlack(t, pg, "the card", func() bool {
		for _, m := range pg.slack.Thread(channelOps, ts) {
			if strings.Contains(string(m.Blocks), `"why"`) {
				return true
			}
		}
		return false
	})
	err := chromedp.Do(ctx,
		chromedp.Navigate(url+"?user=alice&conv=home"),
		click(`#main .home-view button[data-action-id="why"]`),
		waitJS(`document.querySelector("#main .home-notice") !== null && document.querySelector('#sidebar .nav-item.unread[data-conv="dm"] .nav-badge') !== null`),
		waitText(`#main .home-notice`, "Explanation"),
		click(`#main .home-notice .conv-link`),
		waitJS(`state.conv === "dm" && document.getElementById("title").textContent === "toolgate (DM)"`),
		waitText(`#main .msg`, "Explanation"),
		waitJS(`document.querySelector("#sidebar .nav-item.unread") === null`),
	)
	if err != nil {
		var page string
		_ = chromedp.Do(ctx, void(chromedp.Evaluate[string](`document.body.innerText`), &page))
		t.Fatalf("%v; the page shows:\n%s", err, page)
	}
}
