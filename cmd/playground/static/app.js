// The playground page: it shows the panes the server renders and posts
// what the person does. It never builds HTML from data: panes come
// rendered (and escaped) from the server, and messages of its own are set
// with textContent.
"use strict";

const state = { user: "", conv: "", thread: "", modalKey: "" };
let fetching = false, dirty = false;
// submitting is the id of the modal whose submission is under way: its
// Submit button stays disabled until the bot has answered.
let submitting = "";

const $ = (id) => document.getElementById(id);

async function post(path, body) {
  const res = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(Object.assign({ user: state.user }, body)),
  });
  if (!res.ok) {
    throw new Error((await res.text()).trim());
  }
  return res.json();
}

function showError(err) {
  const el = $("post-error");
  el.textContent = err ? String(err.message || err) : "";
  el.hidden = !err;
}

// refresh fetches the panes again; changes that arrive meanwhile make it
// fetch once more when it is done.
async function refresh() {
  if (fetching) { dirty = true; return; }
  fetching = true;
  try {
    do {
      dirty = false;
      const q = new URLSearchParams({ user: state.user, conv: state.conv, thread: state.thread }).toString();
      const res = await fetch("/panes?" + q);
      const panes = res.ok ? await res.json() : null;
      // Panes asked for before a switch of person or conversation are
      // not shown: the next round asks again.
      const now = new URLSearchParams({ user: state.user, conv: state.conv, thread: state.thread }).toString();
      if (now !== q) dirty = true;
      else if (panes) render(panes);
    } while (dirty);
  } finally {
    fetching = false;
  }
}

// setHTML replaces an element's content only when it changed, so that
// what did not change keeps its nodes (and the person's selection).
const shown = new Map();
function setHTML(el, html) {
  if (shown.get(el) === html) return false;
  shown.set(el, html);
  el.innerHTML = html;
  return true;
}

function render(p) {
  setHTML($("sidebar"), p.sidebar);
  $("title").textContent = p.title;
  const main = $("main");
  const atBottom = main.scrollHeight - main.scrollTop - main.clientHeight < 40;
  if (setHTML(main, p.main) && atBottom) main.scrollTop = main.scrollHeight;

  const home = state.conv === "home";
  $("composer").hidden = home;
  $("text").disabled = !p.can_post;
  $("send").disabled = !p.can_post;
  $("text").placeholder = p.post_hint || "";

  const pane = $("thread-pane");
  pane.hidden = !state.thread || home;
  if (!pane.hidden) {
    const body = $("thread");
    const sc = body.querySelector(".thread-body");
    const keep = sc ? sc.scrollHeight - sc.scrollTop - sc.clientHeight < 40 : true;
    if (setHTML(body, p.thread)) {
      const nsc = body.querySelector(".thread-body");
      if (nsc && keep) nsc.scrollTop = nsc.scrollHeight;
    }
  }
  renderModal(p.modal, p.modal_key);
}

// renderModal replaces the modal only when the view or its errors changed,
// keeping what was typed into an input the bot did not change.
function renderModal(html, key) {
  const layer = $("modal-layer");
  if (!html) {
    layer.hidden = true;
    $("modal").innerHTML = "";
    state.modalKey = "";
    return;
  }
  if (key === state.modalKey) return;
  const typed = {};
  const old = $("modal").querySelector(".modal");
  const sameView = old && old.dataset.viewId === key.split("/")[0];
  if (sameView) {
    old.querySelectorAll("[data-action-id].bk-field-input").forEach((el) => { typed[el.dataset.actionId] = el.value; });
  }
  $("modal").innerHTML = html;
  if (sameView) {
    $("modal").querySelectorAll("[data-action-id].bk-field-input").forEach((el) => {
      if (el.dataset.actionId in typed) el.value = typed[el.dataset.actionId];
    });
  }
  state.modalKey = key;
  disableSubmit();
  layer.hidden = false;
  const first = $("modal").querySelector(".bk-field-input");
  if (first && !sameView) first.focus();
}

function go(conv, thread) {
  state.conv = conv;
  state.thread = thread || "";
  if (conv === "home") post("/api/home", {}).catch(showError);
  refresh();
}

async function send(textEl, inThread) {
  const text = textEl.value.trim();
  if (!text) return;
  showError(null);
  const user = state.user, conv = state.conv;
  try {
    const res = await post("/api/send", { conv, thread: inThread ? state.thread : "", text });
    textEl.value = "";
    // Follow the new conversation, unless the page moved to another
    // person or conversation while it was sent: there the ts names no
    // thread, or one that person did not start.
    if (!inThread && res.ts && state.user === user && state.conv === conv) state.thread = res.ts;
    refresh();
  } catch (err) {
    showError(err);
  }
}

function clickButton(btn) {
  const body = { action_id: btn.dataset.actionId, value: btn.dataset.value };
  const view = btn.closest("[data-view-id]");
  const msg = btn.closest(".msg[data-ts]");
  if (view) body.view_id = view.dataset.viewId;
  else if (msg) { body.channel = msg.dataset.channel; body.ts = msg.dataset.ts; }
  else return;
  post("/api/click", body).catch(showError);
}

// confirmThen shows a button's confirm dialog, if it has one, and clicks
// it only when confirmed.
function confirmThen(btn) {
  const dialog = btn.parentElement.querySelector(".bk-confirm");
  if (!dialog) { clickButton(btn); return; }
  const layer = $("confirm-layer");
  const box = dialog.cloneNode(true);
  box.hidden = false;
  $("confirm").replaceChildren(box);
  layer.hidden = false;
  box.querySelector(".bk-confirm-no").onclick = () => { layer.hidden = true; };
  box.querySelector(".bk-confirm-yes").onclick = () => { layer.hidden = true; clickButton(btn); };
}

// disableSubmit disables the modal's Submit button while it is being
// submitted, and enables it again after.
function disableSubmit() {
  const modal = $("modal").querySelector(".modal");
  const btn = modal && modal.querySelector(".modal-submit");
  if (btn) btn.disabled = submitting !== "" && submitting === modal.dataset.viewId;
}

async function submitModal() {
  const modal = $("modal").querySelector(".modal");
  if (!modal || submitting) return;
  submitting = modal.dataset.viewId;
  disableSubmit();
  const values = {};
  modal.querySelectorAll(".bk-input").forEach((block) => {
    const input = block.querySelector(".bk-field-input");
    if (!input) return;
    values[block.dataset.blockId] = { [input.dataset.actionId]: input.value };
  });
  showModalError(submitting, null);
  try {
    await post("/api/submit", { view_id: modal.dataset.viewId, values });
    refresh();
  } catch (err) {
    showModalError(submitting, err);
  } finally {
    submitting = "";
    disableSubmit();
  }
}

// showModalError shows why the submission of the modal viewId failed in
// its footer, above the overlay that covers the rest of the page, or
// clears it; a modal no longer shown has its error shown under the
// composer.
function showModalError(viewId, err) {
  const modal = $("modal").querySelector(".modal");
  const el = modal && modal.dataset.viewId === viewId && !$("modal-layer").hidden ? modal.querySelector(".modal-error") : null;
  if (!el) { if (err) showError(err); return; }
  el.textContent = err ? String(err.message || err) : "";
  el.hidden = !err;
}

function closeModal() {
  const modal = $("modal").querySelector(".modal");
  if (modal) post("/api/close", { view_id: modal.dataset.viewId }).then(refresh).catch((err) => showModalError(modal.dataset.viewId, err));
}

document.addEventListener("click", (ev) => {
  const t = ev.target;
  const nav = t.closest(".nav-item, .conv-link");
  if (nav) { ev.preventDefault(); go(nav.dataset.conv, ""); return; }
  const rep = t.closest(".replies");
  if (rep) { ev.preventDefault(); state.thread = rep.dataset.thread; refresh(); return; }
  if (t.closest(".thread-close")) { state.thread = ""; refresh(); return; }
  if (t.closest(".modal-submit")) { submitModal(); return; }
  if (t.closest(".modal-close") || t.closest(".modal-x")) { closeModal(); return; }
  const ex = t.closest(".example");
  if (ex) { $("text").value = ex.dataset.text; $("text").focus(); return; }
  const btn = t.closest("button.bk-btn[data-action-id]");
  if (btn) { confirmThen(btn); return; }
  const msg = t.closest(".channel .msg[data-ts]");
  if (msg && !t.closest("a")) {
    // Clicking a message opens its thread.
    state.thread = msg.dataset.ts;
    refresh();
  }
});

// listen follows the server's change notices over a WebSocket, which,
// unlike a stream of server-sent events, does not hold one of the six
// connections a browser gives a host: the page open in six tabs would
// leave none for their requests. A socket that closes is opened again; the
// server's first notice then fetches what changed meanwhile.
function listen() {
  const ws = new WebSocket(location.protocol.replace("http", "ws") + "//" + location.host + "/events");
  ws.onmessage = () => refresh();
  ws.onclose = () => setTimeout(listen, 2000);
}

function enterSends(textEl, inThread) {
  textEl.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); send(textEl, inThread); }
  });
}

window.addEventListener("DOMContentLoaded", () => {
  const params = new URLSearchParams(location.search);
  const sel = $("user");
  const wanted = params.get("user");
  if (wanted) {
    const opt = [...sel.options].find((o) => o.value === wanted || o.dataset.name === wanted);
    if (opt) sel.value = opt.value;
    else showError(`No one here is "${wanted}" (?user= takes a name or user id): acting as ${sel.selectedOptions[0].dataset.name}.`);
  }
  state.user = sel.value;
  state.conv = params.get("conv") || document.body.dataset.conv;
  // Opened on the Home tab, the page tells the bot, as a click on Home does.
  if (state.conv === "home") post("/api/home", {}).catch(showError);
  sel.addEventListener("change", () => {
    state.user = sel.value;
    state.modalKey = "";
    // Each person has their own DM with the bot: a thread open in the
    // last person's is not in the next one's. A channel's threads are
    // the same for everyone, and stay open.
    if (state.conv === "dm") state.thread = "";
    showError(null);
    if (state.conv === "home") post("/api/home", {}).catch(showError);
    refresh();
  });
  $("composer").addEventListener("submit", (ev) => { ev.preventDefault(); send($("text"), false); });
  $("thread-composer").addEventListener("submit", (ev) => { ev.preventDefault(); send($("thread-text"), true); });
  enterSends($("text"), false);
  enterSends($("thread-text"), true);
  listen();
  refresh();
});
