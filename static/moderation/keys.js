// Keyboard triage (README, "Keyboard"). Queue: j / k move the selection, Enter opens, x ticks
// the row's checkbox. Item: a approve, r reject, e edit, u back to the queue. Both: n next item.
// Anywhere: ? shows these, and lets the moderator change them. Keys are ignored while typing in a
// field and with Ctrl, Alt or Meta held, so they never eat a character or a browser shortcut;
// Escape leaves a field. On an item page, activity (a key, a click, typing) renews the
// moderator's claim on it.

const page = document.body.dataset.page;
const itemId = document.body.dataset.item;
const CLAIM_RENEW_MS = 60_000;
const queueUrl = document.querySelector(".topbar .brand").href;
// A focused checkbox or radio takes no text, so the keys stay active on it (x right after a click).
const typing = (el) => el instanceof HTMLElement
  && (el.isContentEditable || el.closest("input:not([type=checkbox]):not([type=radio]), textarea, select"));
const rows = () => [...document.querySelectorAll("#queue-table tbody tr[data-item]")];
const selected = () => document.querySelector("#queue-table tbody tr.selected");
const form = () => document.querySelector(".decide-form");

function select(step) {
  const all = rows();
  if (!all.length) return;
  const now = selected();
  const next = all[now ? Math.min(all.length - 1, Math.max(0, all.indexOf(now) + step)) : step > 0 ? 0 : all.length - 1];
  now?.classList.remove("selected");
  next.classList.add("selected");
  // The row's link takes the focus: it shows where the selection is, and Enter follows it.
  next.querySelector("a")?.focus();
}

function open() {
  const link = selected()?.querySelector("a");
  if (link) location.assign(link.href);
}

function tick() {
  const box = selected()?.querySelector("input[type=checkbox]");
  if (box && !box.disabled) box.click();
}

// A form deciding one action has a button per decision; one deciding several has a
// choice per action (then every action gets the same decision) and one submit button.
function decide(kind) {
  const target = form();
  if (!target) return false;
  const button = target.querySelector(`button[value="${kind}"]`);
  if (button) {
    if (!button.disabled) button.click();
    return true;
  }
  const choices = target.querySelectorAll(`input[type=radio][value="${kind}"]`);
  const submit = target.querySelector("button.primary");
  if (!choices.length || !submit || submit.disabled) return false;
  for (const choice of choices) choice.checked = true;
  submit.click();
  return true;
}

function reject() {
  // A reason field the reject cannot go without (marked by the form) is filled in first.
  const reason = form()?.querySelector("[data-reason-required]");
  if (reason && !reason.value) return reason.focus();
  decide("reject");
}

function edit() {
  form()?.querySelector("fieldset.edit input, fieldset.edit select, fieldset.edit textarea")?.focus();
}

function next() {
  const url = new URL("next/", queueUrl);
  if (itemId) url.searchParams.set("after", itemId);
  location.assign(url);
}

// Every action, its default key, and where it works. Each key does one thing everywhere, so a
// moderator's map reads the same on every page.
const ACTIONS = {
  down: { key: "j", pages: ["queue"], what: "select the next item", run: () => select(1) },
  up: { key: "k", pages: ["queue"], what: "select the previous item", run: () => select(-1) },
  open: { key: "Enter", pages: ["queue"], what: "open the selected item", run: open },
  tick: { key: "x", pages: ["queue"], what: "tick or untick the selected item", run: tick },
  approve: { key: "a", pages: ["item"], what: "approve", run: () => decide("approve") },
  reject: { key: "r", pages: ["item"], what: "reject (first the reason, when one is required)", run: reject },
  edit: { key: "e", pages: ["item"], what: "edit the arguments, where allowed", run: edit },
  back: { key: "u", pages: ["item"], what: "back to the queue", run: () => location.assign(queueUrl) },
  next: { key: "n", pages: ["queue", "item"], what: "open the next item nobody has claimed", run: next },
  help: { key: "?", pages: null, what: "show or hide this help", run: () => helpToggle() },
};
const GROUPS = [["Queue", ["down", "up", "open", "tick", "next"]], ["Item", ["approve", "reject", "edit", "back", "next"]],
  ["Any page", ["help"]]];
const NAMED_KEYS = ["Enter", "ArrowUp", "ArrowDown", "ArrowLeft", "ArrowRight"];

// The map lives in this browser's localStorage, under the user's name so that people sharing a
// browser keep their own. Not on the server: it is one person's habit at one keyboard, which
// the server never needs, and keeping it there would take a model, a migration and an endpoint.
const user = document.querySelector(".topbar .who")?.textContent.split(" · ")[0].trim() || "";
const STORE = `reviewqueue.keys.${user}`;

// Why a key cannot be given to an action, or null when it can.
function keyProblem(key) {
  if (key === "Escape") return "Escape cannot be used: it leaves a field and closes this help.";
  if (key === " ") return "Space cannot be used: it presses the focused button.";
  if (key === "Tab") return "Tab cannot be used: it moves between links, fields and buttons.";
  if (key.length !== 1 && !NAMED_KEYS.includes(key)) {
    return `${key} cannot be used: choose a letter, a digit, a punctuation mark, Enter or an arrow key.`;
  }
  return null;
}

const defaults = () => Object.fromEntries(Object.entries(ACTIONS).map(([name, action]) => [name, action.key]));

// The action a key already belongs to in ``map``, other than ``except``.
const holder = (map, key, except) => Object.keys(map).find((name) => name !== except && map[name] === key);

function mapLoad() {
  const map = defaults();
  let saved = {};
  try {
    saved = JSON.parse(localStorage.getItem(STORE) || "{}");
  } catch (err) {
    console.warn("keys: the saved keys are unreadable; using the defaults", err);
    return map;
  }
  for (const [name, key] of Object.entries(saved)) {
    if (!(name in ACTIONS) || typeof key !== "string" || keyProblem(key)) continue;
    map[name] = key;
  }
  // A map edited by hand may give one key to two actions: none of it is kept then.
  if (new Set(Object.values(map)).size !== Object.keys(map).length) {
    console.warn("keys: the saved keys give one key to two actions; using the defaults");
    return defaults();
  }
  return map;
}

let keys = mapLoad();

const label = (name) => `“${ACTIONS[name].what}”`;
const keyText = (key) => ({ ArrowUp: "↑", ArrowDown: "↓", ArrowLeft: "←", ArrowRight: "→" })[key] || key;

let help = null;
let capturing = null; // the action whose new key the next key press sets

function say(text) {
  help.querySelector("#keys-status").textContent = text;
}

function helpRender() {
  const card = help.querySelector(".card");
  for (const old of card.querySelectorAll(".keys-group")) old.remove();
  const before = card.querySelector("#keys-status");
  for (const [title, names] of GROUPS) {
    const group = Object.assign(document.createElement("section"), { className: "keys-group" });
    const headingId = `keys-group-${title.replace(/\W+/g, "-").toLowerCase()}`;
    group.append(Object.assign(document.createElement("h3"), { id: headingId, textContent: title }));
    const table = document.createElement("table");
    table.setAttribute("aria-labelledby", headingId);
    for (const name of names) {
      const row = table.insertRow();
      row.insertCell().append(Object.assign(document.createElement("kbd"), { textContent: keyText(keys[name]) }));
      row.insertCell().textContent = ACTIONS[name].what;
      const change = Object.assign(document.createElement("button"), {
        type: "button", className: "link", textContent: capturing === name ? "press a key…" : "change",
      });
      change.setAttribute("aria-label", `Change the key for ${ACTIONS[name].what}`);
      change.dataset.action = name;
      change.addEventListener("click", () => captureStart(name));
      row.insertCell().append(change);
    }
    group.append(table);
    card.insertBefore(group, before);
  }
}

function captureStart(name) {
  capturing = name;
  helpRender();
  help.querySelector(`button[data-action="${name}"]`).focus();
  say(`Press the new key for ${label(name)}, or Escape to keep ${keyText(keys[name])}.`);
}

function captureEnd(name, text) {
  capturing = null;
  helpRender();
  help.querySelector(`button[data-action="${name}"]`).focus();
  say(text);
}

// The key pressed while an action waits for one: given to it, or refused with the reason (nothing changes).
function capture(e) {
  const name = capturing;
  if (["Shift", "Control", "Alt", "Meta", "AltGraph", "CapsLock"].includes(e.key)) return;
  if (e.key === "Escape") return captureEnd(name, `Nothing changed: ${label(name)} stays on ${keyText(keys[name])}.`);
  if (e.ctrlKey || e.altKey || e.metaKey) {
    return captureEnd(name, "Refused: keys held with Ctrl, Alt or Meta belong to the browser. Nothing changed.");
  }
  const problem = keyProblem(e.key);
  if (problem) return captureEnd(name, `Refused: ${problem} Nothing changed.`);
  const other = holder(keys, e.key, name);
  if (other) {
    return captureEnd(name, `Refused: ${keyText(e.key)} is already the key for ${label(other)}. `
      + "Give that action another key first. Nothing changed.");
  }
  keys = { ...keys, [name]: e.key };
  localStorage.setItem(STORE, JSON.stringify(keys));
  captureEnd(name, `Saved: ${label(name)} is now ${keyText(e.key)}.`);
}

function keysReset() {
  localStorage.removeItem(STORE);
  keys = defaults();
  capturing = null;
  helpRender();
  say("Every key is back to its default.");
}

function helpToggle() {
  if (!help) {
    help = Object.assign(document.createElement("div"), { id: "keys-help", className: "keys-help", hidden: true });
    help.setAttribute("role", "dialog");
    help.setAttribute("aria-modal", "true");
    help.setAttribute("aria-labelledby", "keys-help-title");
    const card = Object.assign(document.createElement("div"), { className: "card" });
    const status = Object.assign(document.createElement("p"), { id: "keys-status", className: "keys-status" });
    status.setAttribute("role", "status");
    const reset = Object.assign(document.createElement("button"), { type: "button", textContent: "Reset keys to defaults" });
    reset.addEventListener("click", keysReset);
    const close = Object.assign(document.createElement("button"), { type: "button", className: "primary", textContent: "Close" });
    close.addEventListener("click", helpToggle);
    card.append(
      Object.assign(document.createElement("h2"), { id: "keys-help-title", textContent: "Keyboard shortcuts" }),
      status,
      Object.assign(document.createElement("p"), {
        className: "muted", textContent: "Keys do nothing while you type in a field. Your keys are kept in this browser.",
      }),
      reset, " ", close,
    );
    help.append(card);
    help.addEventListener("click", (e) => { if (e.target === help) helpToggle(); });
    document.body.append(help);
  }
  capturing = null;
  if (help.hidden) {
    helpRender();
    say("");
  }
  help.hidden = !help.hidden;
  if (!help.hidden) help.querySelector(".primary").focus();
}

document.addEventListener("keydown", (e) => {
  if (capturing && help && !help.hidden) {
    e.preventDefault();
    return capture(e);
  }
  if (e.defaultPrevented || e.ctrlKey || e.altKey || e.metaKey || e.isComposing) return;
  if (typing(e.target)) {
    if (e.key === "Escape") e.target.blur(); // out of the field, back to the keys
    return;
  }
  if (e.key === keys.help) {
    e.preventDefault();
    return helpToggle();
  }
  if (help && !help.hidden) {
    if (e.key === "Escape") helpToggle();
    return;
  }
  // Shift with Enter or an arrow is another gesture (selecting text, say); a shifted character is its own key.
  if (e.shiftKey && e.key.length !== 1) return;
  // Enter on a focused link or button already does what it says; only a selection without focus needs help.
  if (e.key === "Enter" && e.target instanceof HTMLElement && e.target.closest("a, button")) return;
  const name = Object.keys(keys).find((n) => keys[n] === e.key && ACTIONS[n].pages?.includes(page));
  if (!name) return;
  e.preventDefault();
  ACTIONS[name].run();
});

// "Select all on this page" ticks every row; unticking a row unticks it, since the server
// reads a ticked "all" as every item the page was rendered with.
const bulkAll = document.getElementById("bulk-all");
if (page === "queue" && bulkAll) {
  bulkAll.addEventListener("change", () => {
    for (const box of document.querySelectorAll("#queue-table input.bulk-pick")) box.checked = bulkAll.checked;
  });
  document.addEventListener("change", (e) => {
    if (e.target instanceof HTMLInputElement && e.target.matches("input.bulk-pick") && !e.target.checked) bulkAll.checked = false;
  });
}

// Activity on an item page renews the claim the page took when it opened (or takes it
// again after it ran out), at most once a minute.
const token = document.querySelector(".decide-form input[name=csrfmiddlewaretoken]")?.value;
if (page === "item" && token) {
  let renewedAt = Date.now(); // opening the page just claimed it
  const renew = () => {
    if (Date.now() - renewedAt < CLAIM_RENEW_MS) return;
    renewedAt = Date.now();
    fetch(`/items/${encodeURIComponent(itemId)}/claim`, { method: "POST", headers: { "X-CSRFToken": token } })
      .catch((err) => console.warn("keys: claim renewal failed", err));
  };
  for (const kind of ["keydown", "pointerdown", "input"]) document.addEventListener(kind, renew, { passive: true });
}
