// Live dashboard: one websocket per page (ws/queue/ or ws/items/<uuid>/).
// The server sends a "state" snapshot on every (re)connect and after every heartbeat,
// so an event missed while disconnected (layers deliver at most once) is caught up.
// The socket reconnects with capped, jittered backoff after any drop.
// Events come through the channel layer that all servers share, where anyone able to
// publish could forge one. So an event only prompts a re-read: what the page shows as
// decided, and whether it stops for a logout, is what the server's own state says (the
// socket's state frame, or the same snapshot fetched from statePath).

const page = document.body.dataset.page;
const itemId = document.body.dataset.item;
const dot = document.getElementById("live-status");
// Rendered for a moderator or a viewer: a page whose reader's rights changed since is told to reload.
const renderedCanDecide = dot.dataset.canDecide === "1";
const STATUS_TEXT = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting… — what you see may be out of date",
  offline: "Live updates off — reload the page to see changes",
};
const path = page === "item" ? `/ws/items/${itemId}/` : "/ws/queue/";
const statePath = page === "item" ? `/api/items/${itemId}/state` : "/api/live/state";
// Close codes from moderation/live/sockets.py. Logged out: reconnecting cannot help. Too many
// pages open for this login: reconnecting cannot help either, the page says why. Rate
// limited: back off longer than usual, then reconnect. (Refused handshakes reach a browser
// only as 1006, indistinguishable from a server restart, so those are retried with backoff.)
const CLOSE_LOGGED_OUT = 4401;
const CLOSE_TOO_MANY_SOCKETS = 4409;
const CLOSE_RATE_LIMITED = 4429;
const RATE_LIMITED_RETRIES = 5; // the next delay is 8-16 s
const DECIDED_ROW_MS = 1500;

let you = "";
let heartbeatSeconds = 15;
// The queue page re-reads the counts more often than a heartbeat is needed: see stateApply.
let resyncSeconds = 0;
let heartbeat = null;
let socket = null;
let retries = 0;
let everLive = false; // has any socket of this page delivered a state yet?
let socketFresh = true; // is the next state the first of the current socket?
let viewing = {};
let refreshTimer = null;

function connect() {
  const ws = new WebSocket(`${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${path}`);
  socket = ws;
  socketFresh = true;
  let watchdog = null;
  let gone = false;
  const drop = (final) => {
    if (gone) return;
    gone = true;
    clearInterval(heartbeat);
    clearTimeout(watchdog);
    statusSet(final ? "offline" : "reconnecting");
    if (!final) setTimeout(connect, Math.min(30000, 500 * 2 ** retries++) * (0.5 + Math.random() / 2));
  };
  // A connection can die without a close event (sleeping laptop, dead NAT); silence
  // for more than two heartbeats means it has.
  const kick = () => {
    clearTimeout(watchdog);
    watchdog = setTimeout(() => { ws.close(); drop(false); }, heartbeatSeconds * 2500);
  };
  ws.onopen = () => { kick(); beat(); };
  ws.onmessage = (e) => { kick(); handle(JSON.parse(e.data)); };
  ws.onclose = async (e) => {
    if (e.code === CLOSE_RATE_LIMITED) retries = Math.max(retries, RATE_LIMITED_RETRIES);
    // A "logged out" close is believed only once the server confirms the session is over.
    drop(e.code === CLOSE_TOO_MANY_SOCKETS || (e.code === CLOSE_LOGGED_OUT && await sessionOver()));
  };
}

function statusSet(state) {
  dot.dataset.state = state;
  document.getElementById("live-status-text").textContent = STATUS_TEXT[state];
}

function beat() {
  clearInterval(heartbeat);
  const seconds = resyncSeconds > 0 ? Math.min(resyncSeconds, heartbeatSeconds) : heartbeatSeconds;
  const ws = socket;
  heartbeat = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send(JSON.stringify({ type: "heartbeat" })), seconds * 1000);
}

async function stateFetch() {
  return fetch(statePath, { headers: { Accept: "application/json" }, cache: "no-store" });
}

async function sessionOver() {
  try {
    const res = await stateFetch();
    // 404: the item is gone for this user (another team's now); reconnecting cannot help.
    if (res.status === 401 || res.status === 403 || res.status === 404) return true;
    return res.ok && (await res.json()).can_decide !== renderedCanDecide;
  } catch {
    return false; // server unreachable: retry with backoff as after any drop
  }
}

// The item's state as the server has it now, for an event that claims it changed: the read
// under way if it began after ``since`` (the ``heardNow()`` of the event), else a new one. A
// decision sends every page of the item an item.decided, and the loser's pages a
// decision.lost too: one read serves both, or a race's reads pile up on the server beside
// its decisions and answer pages, and the loser's notice waits for the last of them. A page
// that has sent a decision is being replaced by the answer, and reads nothing more.
let stateReading = null; // {startedAt, promise}
let leaving = false;
document.addEventListener("submit", (e) => { if (e.target.matches(".decide-form")) leaving = true; });
window.addEventListener("pageshow", (e) => { if (e.persisted) leaving = false; });

// Events and reads in the order this page saw them. A counter, not a clock: an event and the
// read it starts can fall in one tick of performance.now().
let heard = 0;
const heardNow = () => ++heard;

// When this page first heard of a decision (by its decided_at). item.decided comes from the
// winner's request and decision.lost from the loser's, in either order: a read begun after the
// first of them already sees the decided item, so it serves both.
const decisionsHeard = new Map();
function decisionHeardAt(msg) {
  if (!msg.decided_at) return heardNow();
  if (!decisionsHeard.has(msg.decided_at)) decisionsHeard.set(msg.decided_at, heardNow());
  return decisionsHeard.get(msg.decided_at);
}

function itemStateRead(since) {
  if (leaving) return Promise.resolve(null);
  if (stateReading && stateReading.startedAt > since) return stateReading.promise;
  const reading = { startedAt: heardNow(), promise: itemStateFetch() };
  stateReading = reading;
  reading.promise.finally(() => { if (stateReading === reading) stateReading = null; });
  return reading.promise;
}

async function itemStateFetch() {
  try {
    const res = await stateFetch();
    return res.ok ? (await res.json()).item : null;
  } catch (err) {
    console.warn("live: state fetch failed", err);
    return null;
  }
}

function handle(msg) {
  switch (msg.type) {
    case "state": return stateApply(msg);
    case "item.created": countsSet(msg.counts); return page === "queue" && queueRefreshSoon();
    // The queue re-reads itself on any decision, for its "Recently decided" list as well as its rows.
    case "item.decided": countsSet(msg.counts); rowDecided(msg); return page === "queue" ? queueRefreshSoon() : decidedCheck(msg);
    // The worker ran the graph on from a decision: finished, failed, or asked again (a row back in the queue).
    case "item.applied": return page === "queue" ? queueRefreshSoon() : appliedCheck(msg);
    case "decision.lost": return lostCheck(msg);
    // A quorum item (moderation.policies): a vote that did not resolve it, or its move to a supervisor team.
    case "item.voted": return page === "queue" ? queueRefreshSoon() : votedCheck(msg);
    case "item.escalated": return page === "queue" ? (escalatedShow(msg), queueRefreshSoon()) : escalatedCheck(msg);
    case "presence.changed": viewing[msg.item] = msg.viewers; return presenceShow();
    case "item.claimed": return claimSet(msg.item, msg.holder, msg.seconds_left);
    case "item.released": return claimSet(msg.item, null, 0);
    case "error": return msg.error === "too_many_sockets" ? liveStoppedShow(msg.message) : console.warn("live:", msg.message);
  }
}

function stateApply(msg) {
  if (msg.can_decide !== undefined && msg.can_decide !== renderedCanDecide) {
    // The page's forms (or their absence) no longer match what this login may do.
    liveStoppedShow("your rights changed; reload the page");
    socket.onclose = null;
    socket.close();
    clearInterval(heartbeat);
    return statusSet("offline");
  }
  you = msg.you;
  retries = 0; // reset only once admitted, so a server that accepts and drops still backs off
  const interval = [heartbeatSeconds, resyncSeconds];
  heartbeatSeconds = msg.heartbeat_seconds || heartbeatSeconds;
  resyncSeconds = msg.resync_seconds || 0;
  if (interval[0] !== heartbeatSeconds || interval[1] !== resyncSeconds) beat();
  statusSet("live");
  if (page === "queue") {
    // After a reconnect anything may have changed; otherwise differing counts mean an event
    // never reached us (layers deliver at most once). The server answers every
    // resync_seconds heartbeat with fresh counts for this.
    const stale = (socketFresh && everLive)
      || String(msg.counts.pending) !== text("count-pending")
      || String(msg.counts.decided_today) !== text("count-decided-today");
    countsSet(msg.counts);
    viewing = msg.viewing;
    if (stale) queueRefreshSoon();
  } else {
    viewing = { [itemId]: msg.viewers };
    itemStateShow(msg.item);
  }
  everLive = true;
  socketFresh = false;
  presenceShow();
}

const text = (id) => document.getElementById(id)?.textContent.trim();
const others = (names) => (names || []).filter((n) => n !== you);
const listed = (names) => names.length < 2 ? names.join("") : `${names.slice(0, -1).join(", ")} and ${names.at(-1)}`;
const ago = (s) => s < 60 ? `${s} s ago` : s < 3600 ? `${Math.floor(s / 60)} min ago` : `${Math.floor(s / 3600)} h ago`;

function countsSet(counts) {
  if (!counts) return;
  for (const [key, id] of [["pending", "count-pending"], ["decided_today", "count-decided-today"]]) {
    const el = document.getElementById(id);
    if (el && counts[key] !== undefined) el.textContent = counts[key];
  }
}

function presenceShow() {
  if (page === "item") {
    const line = document.getElementById("presence");
    const names = others(viewing[itemId]);
    line.textContent = names.length ? `${listed(names)} ${names.length > 1 ? "are" : "is"} also viewing` : "";
    line.hidden = !names.length;
    return;
  }
  for (const row of document.querySelectorAll("#queue-table tr[data-item]")) {
    const names = others(viewing[row.dataset.item]);
    let marker = row.querySelector(".viewing");
    if (!names.length) { marker?.remove(); continue; }
    if (!marker) {
      marker = Object.assign(document.createElement("span"), { className: "viewing" });
      row.cells[0].append(" ", marker);
    }
    marker.textContent = `viewing: ${names.join(", ")}`;
    marker.title = `${listed(names)} viewing now`;
  }
}

// Marked at once, then checked by the refresh it asks for: a row the server still lists
// was not decided, and is unmarked again (rowConfirm) before it would leave.
function rowDecided(msg) {
  const row = document.querySelector(`#queue-table tr[data-item="${msg.item}"]`);
  if (!row || row.classList.contains("decided-live")) return;
  row.classList.add("decided-live");
  row.dataset.markedAt = performance.now();
  row.cells[0].append(Object.assign(document.createElement("strong"), {
    className: "decided-by", textContent: ` ${msg.status} by ${msg.winner}`,
  }));
  queueRefreshSoon();
  setTimeout(() => { if (row.classList.contains("decided-live")) row.remove(); }, DECIDED_ROW_MS);
}

// ``listed``: does a refresh that started at ``since`` still list the row?
function rowConfirm(row, listed, since) {
  if (!row.classList.contains("decided-live") || !listed || since < Number(row.dataset.markedAt)) return;
  row.classList.remove("decided-live");
  row.querySelector(".decided-by")?.remove();
}

// A row the server no longer lists was decided; its event can still be on the way (the
// refresh may overtake it), so it gets a moment to say who decided it before it goes.
function rowLeaving(row) {
  if (row.dataset.leaving) return;
  row.dataset.leaving = "1";
  setTimeout(() => { if (!row.classList.contains("decided-live")) row.remove(); }, DECIDED_ROW_MS);
}

// New rows come from the server's own rendering of this page, so the template stays the
// only place a row is built; rows still showing "approved by ..." are left to leave on their own.
function queueRefreshSoon() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(() => queueRefresh().catch((err) => console.warn("live: refresh failed", err)), 150);
}

async function queueRefresh() {
  const since = performance.now();
  // The header keeps this background refresh from consuming the page's flash messages.
  const res = await fetch(location.href, { headers: { Accept: "text/html", "X-Live-Refresh": "1" } });
  if (!res.ok) return;
  const doc = new DOMParser().parseFromString(await res.text(), "text/html");
  const fresh = doc.querySelector("#queue-table tbody");
  const tbody = document.querySelector("#queue-table tbody");
  if (!fresh || !tbody) {
    document.querySelector("main").replaceWith(document.adoptNode(doc.querySelector("main")));
  } else {
    const wanted = new Set([...fresh.rows].map((r) => r.dataset.item));
    for (const row of [...tbody.rows]) {
      rowConfirm(row, wanted.has(row.dataset.item), since);
      if (!wanted.has(row.dataset.item) && !row.classList.contains("decided-live")) rowLeaving(row);
    }
    let previous = null;
    for (const row of [...fresh.rows]) {
      let mine = tbody.querySelector(`tr[data-item="${row.dataset.item}"]`);
      if (!mine) {
        mine = document.adoptNode(row);
        if (previous) previous.after(mine);
        else tbody.prepend(mine);
      } else {
        claimReplace(mine.cells[0], row.querySelector(".claim"));
        tallyReplace(mine, row);
      }
      previous = mine;
    }
    const recent = doc.getElementById("recent-decided");
    if (recent) document.getElementById("recent-decided")?.replaceWith(document.adoptNode(recent));
    countsSet({
      pending: doc.getElementById("count-pending")?.textContent,
      decided_today: doc.getElementById("count-decided-today")?.textContent,
    });
  }
  presenceShow();
  claimsTick();
}

// Claims (moderation/records/claims.py): "claimed by alice · 3 min left" is counted down here and
// disappears when it runs out (the server ignores an expired claim; nothing announces it),
// and is rewritten by item.claimed / item.released. The server's words are the template's
// (_claim.html); these are the same.
const CLAIM_TICK_MS = 10_000;

function claimText(el) {
  if (!el.dataset.expiresAt) el.dataset.expiresAt = Date.now() + Number(el.dataset.secondsLeft) * 1000;
  const left = Number(el.dataset.expiresAt) - Date.now();
  if (left <= 0) return el.remove();
  const holder = el.classList.contains("claim-mine") ? "you" : el.dataset.holder;
  el.textContent = `claimed by ${holder} · ${Math.max(1, Math.ceil(left / 60000))} min left`;
}

function claimsTick() {
  for (const el of document.querySelectorAll(".claim")) claimText(el);
}

function claimReplace(host, fresh) {
  host.querySelector(".claim")?.remove();
  if (!fresh) return;
  const el = document.adoptNode(fresh);
  host.append(el);
  claimText(el);
}

function claimSet(item, holder, secondsLeft) {
  const host = page === "item"
    ? (item === itemId ? document.getElementById("claim") : null)
    : document.querySelector(`#queue-table tr[data-item="${item}"]`)?.cells[0];
  if (!host) return;
  let el = null;
  if (holder) {
    el = Object.assign(document.createElement("span"), { className: holder === you ? "claim claim-mine" : "claim" });
    el.dataset.holder = holder;
    el.dataset.secondsLeft = secondsLeft;
  }
  claimReplace(host, el);
}

let bannerTimer = null;
const CONTROLS = ".decide-form button, .decide-form textarea, .decide-form input, .decide-form select";

async function appliedCheck(msg) {
  if (msg.item !== itemId) return;
  const since = heardNow();
  await itemRefresh().catch((err) => console.warn("live: item refresh failed", err));
  itemStateShow(await itemStateRead(since));
}

// The item's state sections come from the server's own rendering of this page (as the
// queue's rows do). A form still open keeps what its reviewer has typed into it; a form
// whose ask is no longer open goes, unless nothing is open any more: then the page
// keeps it, disabled under the banner that says who decided.
async function itemRefresh() {
  if (leaving) return;
  const res = await fetch(location.pathname, { headers: { Accept: "text/html", "X-Live-Refresh": "1" }, cache: "no-store" });
  if (!res.ok) return;
  const doc = new DOMParser().parseFromString(await res.text(), "text/html");
  const mine = document.getElementById("item-state");
  const fresh = doc.getElementById("item-state");
  if (!mine || !fresh) return;
  const region = document.adoptNode(fresh);
  const review = region.querySelector("#review");
  const current = mine.querySelector("#review");
  if (review) {
    for (const form of review.querySelectorAll(".decide-form[data-ask]")) {
      const kept = current?.querySelector(`.decide-form[data-ask="${CSS.escape(form.dataset.ask)}"]`);
      if (kept) form.replaceWith(kept);
    }
  } else if (current) {
    region.prepend(current);
  }
  mine.replaceWith(region);
}

async function decidedCheck(msg) {
  if (page !== "item" || msg.item !== itemId) return;
  itemStateShow(await itemStateRead(decisionHeardAt(msg)));
}

// The row's "Vote: 1 of 2 approvals: alice" line, as the server renders it now.
function tallyReplace(mine, fresh) {
  const line = fresh.querySelector(".tally");
  const old = mine.querySelector(".tally");
  if (old && line) old.replaceWith(document.adoptNode(line));
  else if (old) old.remove();
  else if (line) mine.querySelector(".asked")?.after(document.adoptNode(line));
}

// A vote counted on this item: the panel (tally, who may still vote, your vote) is re-read
// from the server, and its tally, not the event's, is announced.
async function votedCheck(msg) {
  if (msg.item !== itemId) return;
  await itemRefresh().catch((err) => console.warn("live: item refresh failed", err));
  const tally = text("vote-tally");
  if (tally) noticeShow("vote-live-notice", `Vote counted: ${tally}`);
}

async function escalatedCheck(msg) {
  if (msg.item !== itemId) return;
  await itemRefresh().catch((err) => console.warn("live: item refresh failed", err));
  const team = document.querySelector("#vote-team strong")?.textContent;
  if (team) noticeShow("escalated-live-notice", `No decision before the deadline: this item was escalated to ${team}`);
}

// The queue's notice; its row is re-read with the queue (gone, for a team that cannot see it any more).
function escalatedShow(msg) {
  noticeShow("escalated-live-notice", `“${msg.title}” was escalated to ${msg.team_name}`);
}

function noticeShow(id, message) {
  let notice = document.getElementById(id);
  if (!notice) {
    notice = Object.assign(document.createElement("div"), { id, className: "notice notice-info" });
    notice.setAttribute("role", "status");
    document.querySelector("main").prepend(notice);
  }
  notice.textContent = message;
}

// Deadlines (moderation.review.deadlines) counted down in words; the worker's sweep, not this page, decides.
function countdownsTick() {
  for (const el of document.querySelectorAll("time.countdown")) {
    if (!el.dataset.endsAt) el.dataset.endsAt = Date.now() + Number(el.dataset.secondsLeft) * 1000;
    const left = Math.ceil((Number(el.dataset.endsAt) - Date.now()) / 1000);
    el.textContent = left > 0 ? `${duration(left)} left` : "overdue — being settled now";
  }
}

const duration = (s) => s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s`
  : `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;

// ``item``: the server's state of this page's item (state frame or fetch), never an event.
function itemStateShow(item) {
  if (!item) return;
  if (item.winner) bannerShow(item);
  else bannerClear();
  // A resolved quorum item whose page still shows the vote open (its event came before this
  // page's socket did): the panel's final tally, and whether this voter's vote counted.
  if (item.tally && !document.getElementById("vote-outcome")) {
    itemRefresh().catch((err) => console.warn("live: item refresh failed", err));
  }
  // Applied while this page was being rendered (its item.applied came before its socket did):
  // the page's own rendering, with the outcome, once the state says the apply is over.
  if (item.apply_state !== "applying" && document.getElementById("applying")) {
    itemRefresh().catch((err) => console.warn("live: item refresh failed", err));
  }
}

function bannerClear() {
  const banner = document.getElementById("decided-banner");
  if (!banner) return;
  clearInterval(bannerTimer);
  banner.remove();
  for (const control of document.querySelectorAll(CONTROLS)) control.disabled = false;
}

function bannerShow(msg) {
  const review = document.getElementById("review");
  if (page !== "item" || msg.item !== itemId || !review) return;
  let banner = document.getElementById("decided-banner");
  if (!banner) {
    banner = Object.assign(document.createElement("div"), { id: "decided-banner", className: "notice notice-warning" });
    banner.setAttribute("role", "alert");
    // Outside #item-state, which itemRefresh replaces.
    document.getElementById("item-state").before(banner);
  }
  const since = Date.now() - (msg.seconds_ago || 0) * 1000;
  // A quorum item: each voter is told whether their vote was one of those it resolved with.
  const counted = !msg.tally ? "" : msg.tally.voters.includes(you)
    ? ` — resolved: ${msg.status} — your vote counted (${msg.tally.summary})` : ` — resolved: ${msg.status} (${msg.tally.summary})`;
  const render = () => {
    const when = ago(Math.floor((Date.now() - since) / 1000));
    banner.textContent = msg.status === "withdrawn"
      ? `Withdrawn by ${msg.winner} ${when}` : `${msg.winner} ${msg.status} this item ${when}${counted}`;
  };
  render();
  clearInterval(bannerTimer);
  bannerTimer = setInterval(render, 1000);
  for (const control of review.querySelectorAll(CONTROLS)) control.disabled = true;
}

const REQUESTED_NOUN = { approve: "approval", reject: "rejection", edit: "edit", respond: "response", mixed: "decision" };

// Shown only if the server confirms the item was decided by the winner the event names;
// the words come from that confirmed state, not from the event.
async function lostCheck(msg) {
  if (page !== "item" || msg.item !== itemId || !REQUESTED_NOUN[msg.requested]) return;
  const since = decisionHeardAt(msg);
  // The read the item.decided before this event started (whenever it began) confirms the
  // winner, as the server had it, when it names them; else one begun since either event came.
  let item = await itemStateRead(-Infinity);
  if (item?.winner !== msg.winner) item = await itemStateRead(since);
  if (!item?.winner || item.winner !== msg.winner) return;
  itemStateShow(item);
  // Worded as moderation/records/outcomes.py's DecisionOutcome.loser_notice, except that an edit or
  // response is named by its status only: the state read here does not describe decisions,
  // and the event's ``what`` is not trusted (it travels through the shared layer).
  const first = item.status === "withdrawn" ? `it was withdrawn by ${item.winner} first` : `${item.winner} ${item.status} it first`;
  if (item.tally) return lostShow(`your vote was not counted: the item was already resolved (${first}; ${item.tally.summary})`);
  lostShow(`your ${REQUESTED_NOUN[msg.requested]} of item ${item.title} was not applied: ${first}`);
}

function liveStoppedShow(message) {
  let notice = document.getElementById("live-stopped-notice");
  if (!notice) {
    notice = Object.assign(document.createElement("div"), { id: "live-stopped-notice", className: "notice notice-warning" });
    notice.setAttribute("role", "alert");
    document.querySelector("main").prepend(notice);
  }
  notice.textContent = `Live updates are off for this page: ${message}.`;
}

function lostShow(message) {
  let notice = document.getElementById("lost-live-notice");
  if (!notice) {
    notice = Object.assign(document.createElement("div"), { id: "lost-live-notice", className: "notice notice-lost" });
    notice.setAttribute("role", "alert");
    document.querySelector("main").prepend(notice);
  }
  notice.textContent = message;
}

connect();
claimsTick();
setInterval(claimsTick, CLAIM_TICK_MS);
countdownsTick();
setInterval(countdownsTick, 1000);
