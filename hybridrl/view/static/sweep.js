// hybridrl view SWEEP_DIR: the Sweep tab. The trials with their sampled values, status and metric (GET
// api/sweep); a header click sorts, the filters keep trials by value (a range per numeric key, ticked values
// per choice/grid key), and "open" shows the trial's curves and generations. Loaded before app.js; uses its
// helpers (api, el, fmt, message, state, showTab, loadKinds) when called.
"use strict";

const sweepState = {sort: "best", desc: null, keys: [], filters: {}, asked: 0};

async function startSweep() {  // app.js calls it once the runs are listed, when they are a sweep's trials
  document.getElementById("tab-sweep").hidden = false;
  const d = await loadSweep();
  if (d) buildSweepFilters(d.keys);
  showTab("sweep");
}

async function loadSweep() {
  const params = {sort: sweepState.sort, filters: JSON.stringify(sweepState.filters)};
  if (sweepState.desc !== null) params.desc = sweepState.desc;
  const asked = ++sweepState.asked;  // answers can cross (typing in a bound): only the last request's is shown
  try {
    const d = await api("sweep", params);
    if (asked !== sweepState.asked) return null;
    sweepState.keys = d.keys;
    sweepState.desc = d.desc;  // the order the server chose: the next click on this column flips it
    renderSweep(d);
    clearMessage("sweep-error");
    return d;
  } catch (e) {
    if (asked === sweepState.asked) message("sweep: " + e.message, "error", "sweep-error");
    return null;
  }
}

function filterInput(key, bound) {
  const input = el("input", {class: "num", placeholder: bound, "data-key": key, "data-bound": bound});
  input.addEventListener("input", readSweepFilters);
  return input;
}

function buildSweepFilters(keys) {
  const box = document.getElementById("sweep-filters");
  box.textContent = "";
  for (const k of keys) {
    const set = el("fieldset", {"data-key": k.key}, el("legend", {text: `${k.key} (${k.kind})`}));
    if (k.axis === "category") {
      k.values.forEach((v, j) => {
        const tick = el("input", {type: "checkbox", "data-key": k.key, "data-j": j});
        tick.checked = true;
        tick.addEventListener("change", readSweepFilters);
        set.append(el("label", {}, tick, " " + fmt(v) + " "));
      });
    } else {
      set.append(filterInput(k.key, "min"), " – ", filterInput(k.key, "max"));
    }
    box.append(set);
  }
}

function readSweepFilters() {
  const filters = {};
  for (const k of sweepState.keys) {
    const inputs = [...document.querySelectorAll("#sweep-filters input")].filter((i) => i.dataset.key === k.key);
    if (k.axis === "category") {
      if (inputs.some((i) => !i.checked)) filters[k.key] = {in: inputs.filter((i) => i.checked).map((i) => k.values[Number(i.dataset.j)])};
      continue;
    }
    const cond = {};
    for (const i of inputs) {
      const text = i.value.trim();
      if (text === "") continue;
      if (!Number.isFinite(Number(text))) { message(`${k.key} ${i.dataset.bound}: '${text}' is not a number`, "error", "sweep-error"); return; }
      cond[i.dataset.bound] = Number(text);
    }
    if (Object.keys(cond).length) filters[k.key] = cond;
  }
  sweepState.filters = filters;
  loadSweep();
}

function sortBy(column) {
  // the same column again flips the order; a new one starts from the server's default (best first for "best")
  if (sweepState.sort === column) sweepState.desc = !sweepState.desc;
  else { sweepState.sort = column; sweepState.desc = null; }
  loadSweep();
}

function renderSweep(d) {
  document.getElementById("sweep-head").textContent =
    `${d.shown} of ${d.total} trials · ${d.metric} (${d.mode}): best is the best logged value, step 0 included`;
  const table = document.getElementById("sweep-table");
  const columns = [["trial", "trial"], ["status", "status"], ["best", "best"], ["final", "final"], ["steps", "steps"],
    ...d.keys.map((k) => [k.key, k.key])];
  table.tHead.textContent = "";
  table.tHead.append(el("tr", {}, ...columns.map(([col, text]) => {
    const th = el("th", {"data-col": col, class: "sortable", title: "sort by " + text, text: text + (d.sort === col ? (d.desc ? " ↓" : " ↑") : "")});
    th.addEventListener("click", () => sortBy(col));
    return th;
  }), el("th", {text: ""})));
  table.tBodies[0].textContent = "";
  for (const t of d.trials) {
    const open = el("button", {type: "button", text: "open"});
    if (t.run === null) { open.disabled = true; open.title = t.end === "error" ? "no run: its config was refused" : "started after the viewer: restart it to open this trial"; }
    else open.addEventListener("click", () => openTrial(t.run));
    const row = el("tr", {"data-trial": t.trial, class: "end-" + t.end, title: t.error || ""},
      el("td", {text: t.trial}), el("td", {text: t.status}), el("td", {text: fmt(t.best)}), el("td", {text: fmt(t.final)}),
      el("td", {text: fmt(t.steps)}), ...d.keys.map((k) => el("td", {text: fmt(t.sampled[k.key])})), el("td", {}, open));
    table.tBodies[0].append(row);
  }
}

function openTrial(run) {  // the trial alone on the curves, and chosen for the generations
  state.shown = new Set([run]);
  state.runs.forEach((_, i) => { document.getElementById("run-" + i).checked = i === run; });
  document.getElementById("gen-run").value = String(run);
  state.gen.run = run;
  loadKinds();
  showTab("curves");
}
