// Keyboard triage (README, "Using the dashboard"). Queue: j / k move the selection, Enter
// opens, x ticks the row's checkbox. Item: a approve, r reject, e edit, n next item, u back to
// the queue. Anywhere: ? shows these. Keys are ignored while typing in a field and with Ctrl,
// Alt or Meta held, so they never eat a character or a browser shortcut; Escape leaves a field.
// On an item page, activity (a key, a click, typing) renews the moderator's claim on it.

const page = document.body.dataset.page;
const itemId = document.body.dataset.item;
const CLAIM_RENEW_MS = 60_000;
const queueUrl = document.querySelector(".topbar .brand").href;

const KEYS = {
  queue: [["j", "select the next item"], ["k", "select the previous item"], ["Enter", "open the selected item"],
    ["x", "tick or untick the selected item"], ["n", "open the next item nobody has claimed"]],
  item: [["a", "approve"], ["r", "reject (first the reason, when one is required)"], ["e", "edit the arguments, where allowed"],
    ["n", "next item nobody has claimed"], ["u", "back to the queue"]],
};

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

let help = null;

function helpToggle() {
  if (!help) {
    help = Object.assign(document.createElement("div"), { id: "keys-help", className: "keys-help", hidden: true });
    help.setAttribute("role", "dialog");
    help.setAttribute("aria-modal", "true");
    help.setAttribute("aria-labelledby", "keys-help-title");
    const card = Object.assign(document.createElement("div"), { className: "card" });
    card.append(Object.assign(document.createElement("h2"), { id: "keys-help-title", textContent: "Keyboard shortcuts" }));
    const table = document.createElement("table");
    for (const [key, what] of [...(KEYS[page] || []), ["?", "show or hide this help"]]) {
      const row = table.insertRow();
      row.insertCell().append(Object.assign(document.createElement("kbd"), { textContent: key }));
      row.insertCell().textContent = what;
    }
    const close = Object.assign(document.createElement("button"), { type: "button", className: "primary", textContent: "Close" });
    close.addEventListener("click", helpToggle);
    card.append(table, Object.assign(document.createElement("p"), { className: "muted", textContent: "Keys do nothing while you type in a field." }), close);
    help.append(card);
    help.addEventListener("click", (e) => { if (e.target === help) helpToggle(); });
    document.body.append(help);
  }
  help.hidden = !help.hidden;
  if (!help.hidden) help.querySelector("button").focus();
}

const ACTIONS = {
  queue: { j: () => select(1), k: () => select(-1), Enter: open, x: tick, n: next },
  item: { a: () => decide("approve"), r: reject, e: edit, n: next, u: () => location.assign(queueUrl) },
};

document.addEventListener("keydown", (e) => {
  if (e.defaultPrevented || e.ctrlKey || e.altKey || e.metaKey || e.isComposing) return;
  if (typing(e.target)) {
    if (e.key === "Escape") e.target.blur(); // out of the field, back to the keys
    return;
  }
  if (e.key === "?") {
    e.preventDefault();
    return helpToggle();
  }
  if (help && !help.hidden) {
    if (e.key === "Escape") helpToggle();
    return;
  }
  if (e.shiftKey) return;
  // Enter on a focused link or button already does what it says; only a selection without focus needs help.
  if (e.key === "Enter" && e.target instanceof HTMLElement && e.target.closest("a, button")) return;
  const action = ACTIONS[page]?.[e.key];
  if (!action) return;
  e.preventDefault();
  action();
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
