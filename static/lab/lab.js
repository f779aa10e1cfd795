// The race lab page: start a run without leaving the page, poll its status until it ends, reload.
const form = document.getElementById("lab-run-form");
const button = document.getElementById("lab-run-button");
const box = document.getElementById("lab-progress");
const bar = document.getElementById("lab-progress-bar");
const label = document.getElementById("lab-progress-label");
const error = document.getElementById("lab-error");
const statusUrl = document.getElementById("lab-run").dataset.statusUrl;

function show(status) {
  if (status.state === "starting" || status.state === "running") {
    box.hidden = false;
    button.disabled = true;
    bar.max = status.total || 1;
    bar.value = status.done || 0;
    label.textContent = status.state === "starting" ? "starting…" : `${status.done}/${status.total} ${status.label}`;
    return true;
  }
  box.hidden = true;
  button.disabled = false;
  error.hidden = status.state !== "failed";
  error.textContent = status.error || "";
  return false;
}

async function poll() {
  const response = await fetch(statusUrl, { headers: { Accept: "application/json" } });
  const status = await response.json();
  if (show(status)) {
    setTimeout(poll, 1000);
  } else if (status.state === "done") {
    location.reload();
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  button.disabled = true;
  error.hidden = true;
  const response = await fetch(form.action, {
    method: "POST", body: new FormData(form), headers: { Accept: "application/json" },
  });
  const status = await response.json();
  if (response.status === 409) {
    error.hidden = false;
    error.textContent = status.message;
  }
  setTimeout(poll, 500);
});

if (!box.hidden) setTimeout(poll, 1000);
