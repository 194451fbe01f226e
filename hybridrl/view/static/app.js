// hybridrl view: the page. Plain JS over the JSON API in hybridrl/view/app.py; plotly draws the curves.
"use strict";

const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];
const OPEN_SECTIONS = new Set(["critic", "val-core", "actor", "response_length"]);  // the rest open on a click
const POLL_MS = 3000;
const PAGE = 50;
const state = {
  runs: [], shown: new Set(), metrics: {}, tab: "curves",
  gen: {run: 0, kind: "", step: null, steps: [], offset: 0, total: 0, selected: null, rows: null},
};

// ---- fetching, the API key, messages -------------------------------------------------------------
function apiKey() {
  const m = location.hash.match(/key=([^&]+)/);
  if (m) { sessionStorage.setItem("hybridrl-view-key", decodeURIComponent(m[1])); history.replaceState(null, "", location.pathname); }
  return sessionStorage.getItem("hybridrl-view-key");
}

async function api(path, params) {
  const url = "api/" + path + "?" + new URLSearchParams(Object.entries(params || {}).filter(([, v]) => v !== "" && v !== null && v !== undefined));
  const key = apiKey();
  const resp = await fetch(url, {headers: key ? {Authorization: "Bearer " + key} : {}});
  let body;
  try { body = await resp.json(); } catch (e) { body = {error: "the viewer answered " + resp.status + " with no JSON"}; }
  if (resp.status === 401) { document.getElementById("key-form").hidden = false; }
  if (!resp.ok) { throw new Error(body.error || ("HTTP " + resp.status)); }
  return body;
}

function message(text, kind, id) {
  const box = document.getElementById("messages");
  let div = id ? document.getElementById(id) : null;
  if (!div) { div = document.createElement("div"); if (id) div.id = id; box.appendChild(div); }
  div.className = kind || "";
  div.textContent = text;
}
function clearMessage(id) { const d = document.getElementById(id); if (d) d.remove(); }

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}
function fmt(v) {
  if (v === null || v === undefined) return "-";
  if (typeof v === "string") return v;
  return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));  // like compare's %.4g
}

// ---- runs ------------------------------------------------------------------------------------------
async function loadRuns() {
  const data = await api("runs");
  state.runs = data.runs;
  state.sweep = data.sweep;
  if (!data.plotly) message("plotly is not installed, so curves cannot be drawn: pip install plotly (or 'hybridrl[view]')", "error");
  const bar = document.getElementById("runs-bar");
  bar.textContent = "";
  data.runs.forEach((r, i) => {
    state.shown.add(i);
    const box = el("input", {type: "checkbox", id: "run-" + i, "data-run": i});
    box.checked = true;
    box.addEventListener("change", () => { box.checked ? state.shown.add(i) : state.shown.delete(i); renderCurves(); });
    const label = el("label", {title: r.path}, box, el("span", {class: "swatch", style: "background:" + COLOURS[i % COLOURS.length]}), r.name);
    const ckpt = r.checkpoints.length ? ` · checkpoints ${r.checkpoints.map((c) => c.step + (c.whole ? "" : " (partial)")).join(", ")}` : "";
    bar.append(el("span", {class: "run"}, label, el("small", {text: ` ${r.metric_lines} steps logged${ckpt}`})));
    r.problems.forEach((p) => message(`${r.name}: ${p}`, "error"));
  });
  for (const id of ["gen-run", "ab-a", "ab-b"]) {
    const sel = document.getElementById(id);
    sel.textContent = "";
    data.runs.forEach((r, i) => sel.append(el("option", {value: i, text: r.name})));
  }
  if (data.runs.length > 1) document.getElementById("ab-b").value = "1";
}

// ---- curves ----------------------------------------------------------------------------------------
// The server sends every metric's name but only the series of the sections a run has loaded (the open
// ones; the rest when opened): a long run's first load ships the charts on screen, not every column.
const ALWAYS_KEYS = ["timing_s/step"];  // the time x-axis needs it whatever is open

function metricsOf(i) {
  return state.metrics[i] || (state.metrics[i] = {steps: [], series: {}, names: [], gen: -1, loaded: new Set(OPEN_SECTIONS)});
}

function merge(m, d) {  // rows d.steps appended after m.steps (d.series: columns of those rows)
  if (d.reset) { m.steps = []; m.series = {}; }
  const before = m.steps.length;
  for (const [key, col] of Object.entries(d.series)) {
    const dest = m.series[key] || (m.series[key] = new Array(before).fill(null));
    while (dest.length < before) dest.push(null);
    dest.push(...col);
  }
  m.steps.push(...d.steps);
  for (const col of Object.values(m.series)) while (col.length < m.steps.length) col.push(null);
  m.names = d.names; m.gen = d.generation;
}

async function pollMetrics() {
  let ok = true;
  for (let i = 0; i < state.runs.length; i++) {
    const m = metricsOf(i);
    try {
      const d = await api("metrics", {run: i, since: m.steps.length, gen: m.gen, sections: [...m.loaded].join(","), keys: ALWAYS_KEYS.join(",")});
      const names = m.names.length;
      merge(m, d);
      m.changed = m.changed || d.steps.length > 0 || d.reset || d.names.length !== names;
      if (d.skipped) message(`${state.runs[i].name}: ${d.skipped} line(s) of metrics.jsonl are not JSON and were skipped`, "", "skip-" + i);
      clearMessage("metrics-" + i);
    } catch (e) { ok = false; message(`${state.runs[i].name}: metrics: ${e.message}`, "error", "metrics-" + i); }
  }
  document.getElementById("live").className = ok ? "" : "stale";
  if (Object.values(state.metrics).some((m) => m.changed)) {
    Object.values(state.metrics).forEach((m) => { m.changed = false; });
    renderCurves();
  }
}

async function loadSections(i, sections) {  // the series of newly opened sections, for the rows the page has
  const m = metricsOf(i);
  sections.forEach((s) => m.loaded.add(s));
  try {
    const d = await api("metrics", {run: i, since: 0, upto: m.steps.length, gen: m.gen, sections: sections.join(",")});
    if (d.reset) { m.steps = []; m.series = {}; m.gen = -1; return; }  // the next poll reloads from 0
    for (const [key, col] of Object.entries(d.series)) {  // rows a poll appended meanwhile are kept
      const had = m.series[key] || [];
      m.series[key] = had.length > col.length ? col.concat(had.slice(col.length)) : col;
      while (m.series[key].length < m.steps.length) m.series[key].push(null);
    }
  } catch (e) { sections.forEach((s) => m.loaded.delete(s)); message(`${state.runs[i].name}: metrics: ${e.message}`, "error", "metrics-" + i); }
  renderCurves();
}

function num(v) { return v === "nan" ? NaN : v === "inf" ? Infinity : v === "-inf" ? -Infinity : v; }

function ema(ys, alpha) {  // debiased exponential moving average (as TensorBoard's smoothing slider)
  if (!alpha) return ys;
  let last = 0, weight = 0;
  return ys.map((y) => {
    if (!Number.isFinite(y)) return y;
    last = alpha * last + (1 - alpha) * y; weight = alpha * weight + (1 - alpha);
    return last / weight;
  });
}

function xs(m, idx) {
  if (document.getElementById("x-axis").value !== "time") return idx.map((j) => m.steps[j]);
  const t = m.series["timing_s/step"] || [];
  const cum = []; let s = 0;
  for (let j = 0; j < m.steps.length; j++) { s += Number.isFinite(num(t[j])) ? num(t[j]) : 0; cum.push(s); }
  return idx.map((j) => cum[j]);
}

function sectionOf(key) { const i = key.indexOf("/"); return i < 0 ? "other" : key.slice(0, i); }

function renderCurves() {
  if (state.tab !== "curves" || window.PLOTLY_MISSING || typeof Plotly === "undefined") return;
  const filter = document.getElementById("metric-filter").value.trim().toLowerCase();
  const keys = new Set();
  for (const i of state.shown) for (const k of (state.metrics[i] || {names: []}).names) keys.add(k);
  const bySection = {};
  [...keys].sort().filter((k) => !filter || k.toLowerCase().includes(filter)).forEach((k) => (bySection[sectionOf(k)] = bySection[sectionOf(k)] || []).push(k));
  const root = document.getElementById("sections");
  for (const d of root.querySelectorAll("details.section")) if (!bySection[d.dataset.section]) d.remove();
  for (const name of Object.keys(bySection).sort()) {
    let sec = root.querySelector(`details.section[data-section="${CSS.escape(name)}"]`);
    if (!sec) {
      sec = el("details", {class: "section", "data-section": name}, el("summary", {text: name + "/"}), el("div", {class: "grid"}));
      if (OPEN_SECTIONS.has(name) || filter) sec.open = true;
      sec.addEventListener("toggle", renderCurves);
      root.append(sec);
    }
    sec.querySelector("summary").textContent = `${name}/ (${bySection[name].length})`;
    if (sec.open) drawSection(sec, bySection[name]);
  }
  for (const i of state.shown) {  // open sections whose series a run has not sent yet
    const m = state.metrics[i];
    const missing = m ? [...root.querySelectorAll("details.section[open]")].map((d) => d.dataset.section).filter((s) => !m.loaded.has(s)) : [];
    if (missing.length) loadSections(i, missing);
  }
  if (!keys.size) message("no metrics logged yet in the runs shown (the page updates when they appear)", "", "no-metrics");
  else clearMessage("no-metrics");
}

function drawSection(sec, keys) {
  const grid = sec.querySelector(".grid");
  const alpha = Number(document.getElementById("ema").value);
  const logY = document.getElementById("log-y").checked;
  for (const chart of grid.querySelectorAll(".chart")) if (!keys.includes(chart.dataset.metric)) chart.remove();
  for (const key of keys) {
    const div = plotDiv(grid, key), traces = tracesOf(key, alpha);
    const axisOf = (c) => traces.flatMap((t) => t[c]);
    const layout = {margin: {l: 45, r: 10, t: 26, b: 30}, showlegend: traces.length > 1,
                    legend: {orientation: "h", y: -0.2, font: {size: 10}},
                    yaxis: {type: logY ? "log" : "linear", automargin: true, ...flatAxis(axisOf("y"), logY)},
                    xaxis: {title: {text: document.getElementById("x-axis").value === "time" ? "s" : ""},
                            automargin: true, ...flatAxis(axisOf("x"), false)}};
    Plotly.react(div, traces, layout, {displaylogo: false, responsive: true,
                                       toImageButtonOptions: {filename: key.replace(/[^\w@.-]+/g, "_")}});
  }
}

// The title is the page's, above the plot: plotly draws its own title in the band where its toolbar (the
// modebar) floats, so a centred title ran under the toolbar's buttons. (The plot keeps that band, 26 px,
// for the toolbar alone; a PNG from its camera button is named after the metric, as it has no title.)
function plotDiv(grid, key) {
  const found = grid.querySelector(`.plot[data-metric="${CSS.escape(key)}"]`);
  if (found) return found;
  const div = el("div", {class: "plot", "data-metric": key});
  grid.append(el("div", {class: "chart", "data-metric": key}, el("div", {class: "chart-title", title: key, text: key}), div));
  return div;
}

function tracesOf(key, alpha) {  // one trace per shown run that logged `key`
  const traces = [];
  for (const i of [...state.shown].sort()) {
    const m = state.metrics[i];
    const col = m && m.series[key];
    if (!col) continue;
    const idx = []; col.forEach((v, j) => { if (v !== null) idx.push(j); });
    const ys = ema(idx.map((j) => num(col[j])), alpha);
    // a line needs two finite neighbours: a lone point (a single step, or one between NaNs) gets a marker
    const lone = ys.map((y, j) => Number.isFinite(y) && !Number.isFinite(ys[j - 1]) && !Number.isFinite(ys[j + 1]));
    const colour = COLOURS[i % COLOURS.length];
    traces.push({x: xs(m, idx), y: ys, name: state.runs[i].name, mode: lone.some(Boolean) ? "lines+markers" : "lines",
                 line: {color: colour, width: 1.5}, marker: {color: colour, size: lone.map((b) => (b ? 6 : 0))}});
  }
  return traces;
}

// Plotly autoranges an axis whose values are all equal to value ± 1, so a constant learning rate of 2e-4 was a
// flat line at "0" on a −1…1 axis (and 1e6 got labels like "1.000001M" cut by the margin). A constant axis
// (every finite value within 1e-9 of each other, relatively: a debiased EMA of a constant moves in the last bits;
// or a single value) is set here: centred on the value, ± half of it (± 1 around 0; on a log axis ×/÷ 2), with
// one tick that shows the value. An axis of varying values, or with none, stays plotly's.
function flatAxis(values, log) {
  let lo = Infinity, hi = -Infinity;  // (not Math.min(...values): a long run has more points than arguments fit)
  for (const v of values) if (Number.isFinite(v) && (!log || v > 0)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  if (lo > hi || hi - lo > 1e-9 * Math.max(Math.abs(lo), Math.abs(hi))) return {};
  const v = lo + (hi - lo) / 2, pad = v === 0 ? 1 : Math.abs(v) / 2;
  const range = log ? [Math.log10(v / 2), Math.log10(v * 2)] : [v - pad, v + pad];
  return {range, autorange: false, tickmode: "array", tickvals: [v], ticktext: [fmt(v)]};
}

// ---- generations -----------------------------------------------------------------------------------
async function loadKinds() {
  const r = state.runs[state.gen.run];
  const kinds = Object.keys(r.generations);
  const sel = document.getElementById("gen-kind");
  sel.textContent = "";
  kinds.forEach((k) => sel.append(el("option", {value: k, text: k})));
  document.getElementById("prompt-list").tBodies[0].textContent = "";
  document.getElementById("detail-cols").textContent = "";
  document.getElementById("detail-controls").hidden = true;
  if (!kinds.length) {
    document.getElementById("prompt-count").textContent = `${r.name} dumped no generations: train with trainer.rollout_data_dir=DIR (and trainer.validation_data_dir) to see them here`;
    return;
  }
  state.gen.kind = kinds[0];
  await loadSteps(true);
}

async function loadSteps(toLast) {  // toLast: a new run or kind (the step list starts over); else a poll
  const g = state.gen, before = String(g.steps);
  try {
    g.steps = (await api("steps", {run: g.run, kind: g.kind})).steps;
  } catch (e) { message("generations: " + e.message, "error", "gen-error"); return; }
  const sel = document.getElementById("gen-step"), other = document.getElementById("other-step");
  const keep = sel.value;
  sel.textContent = "";
  g.steps.forEach((s) => sel.append(el("option", {value: s, text: s})));
  // "same prompt at step" lists the open prompt's steps (otherSteps): a new run or kind closes the prompt; a poll
  // that found new steps asks for the open prompt's again (a poll once refilled it with every step of the kind)
  if (toLast) {
    other.textContent = ""; other.append(el("option", {value: "", text: "—"}));
    delete other.dataset.prompt;
    g.rows = null;  // the open prompt was the old run's or kind's: its detail goes with it
    document.getElementById("detail-cols").textContent = "";
    document.getElementById("detail-controls").hidden = true;
  } else if (before !== String(g.steps) && g.rows) {
    await otherSteps(g.rows.i);
  }
  if (!g.steps.length) { document.getElementById("prompt-count").textContent = "no step dumped yet"; return; }
  sel.value = toLast || !g.steps.includes(Number(keep)) ? g.steps[g.steps.length - 1] : keep;
  if (toLast || String(g.step) !== sel.value) { g.step = Number(sel.value); g.offset = 0; await loadPrompts(); }
}

function filters() {
  const v = (id) => document.getElementById(id).value.trim();
  return {q: v("f-q"), source: v("f-source"), min_score: v("f-min-score"), max_score: v("f-max-score"),
          min_length: v("f-min-len"), max_length: v("f-max-len")};
}

async function loadPrompts() {
  const g = state.gen;
  let d;
  try {
    d = await api("prompts", {run: g.run, kind: g.kind, step: g.step, offset: g.offset, limit: PAGE, ...filters()});
    clearMessage("gen-error");
  } catch (e) { message("generations: " + e.message, "error", "gen-error"); return; }
  g.total = d.total;
  const src = document.getElementById("f-source"), keep = src.value;
  src.textContent = ""; src.append(el("option", {value: "", text: "all"}));
  d.data_sources.forEach((s) => src.append(el("option", {value: s, text: s})));
  src.value = d.data_sources.includes(keep) ? keep : "";
  document.getElementById("prompt-count").textContent = `step ${g.step}: ${d.total} of ${d.all} prompts match` + (d.skipped ? ` (${d.skipped} unreadable rows skipped)` : "");
  const body = document.getElementById("prompt-list").tBodies[0];
  body.textContent = "";
  for (const p of d.prompts) {
    const tr = el("tr", {class: "prompt-row", "data-i": p.i, "data-key": p.key},
      el("td", {text: p.i}), el("td", {class: "preview", text: p.preview}), el("td", {text: p.data_source ?? "-"}),
      el("td", {text: p.n}), el("td", {text: fmt(p.score_mean)}), el("td", {text: fmt(p.length_mean)}));
    if (g.selected === p.key) tr.classList.add("selected");
    tr.addEventListener("click", () => openPrompt(p.i, p.key));
    body.append(tr);
  }
  document.getElementById("page-info").textContent = d.total ? `${g.offset + 1}–${Math.min(g.offset + PAGE, d.total)} of ${d.total}` : "";
}

async function openPrompt(i, key) {
  const g = state.gen;
  g.selected = key;
  delete document.getElementById("other-step").dataset.prompt;  // the choices shown are the last prompt's until refilled
  for (const tr of document.querySelectorAll("tr.prompt-row")) tr.classList.toggle("selected", tr.dataset.key === key);
  try {
    const d = await api("prompt", {run: g.run, kind: g.kind, step: g.step, i});
    g.rows = d;
    document.getElementById("detail-controls").hidden = false;
    document.getElementById("other-step").value = "";
    const cols = document.getElementById("detail-cols");
    cols.textContent = "";
    cols.append(promptColumn(d));
    clearMessage("prompt-error");
    await otherSteps(i);
  } catch (e) { message("prompt: " + e.message, "error", "prompt-error"); }
}

async function otherSteps(i) {  // the picker lists the other steps that sampled this prompt (else every step)
  const g = state.gen, other = document.getElementById("other-step");
  let steps = g.steps;
  try { steps = (await api("prompt_steps", {run: g.run, kind: g.kind, step: g.step, i})).steps; } catch (e) { /* keep every step */ }
  other.textContent = "";
  other.append(el("option", {value: "", text: steps.length > 1 ? "—" : "— (no other step sampled it)"}));
  steps.filter((s) => s !== g.step).forEach((s) => other.append(el("option", {value: s, text: s})));
  other.dataset.prompt = `${g.kind}:${g.step}:${i}`;  // whose steps these are (the browser test waits for it)
}

async function compareStep() {
  const g = state.gen, step = document.getElementById("other-step").value;
  const cols = document.getElementById("detail-cols");
  while (cols.children.length > 1) cols.lastChild.remove();
  if (!step || !g.rows) return;
  try {
    const d = await api("prompt", {run: g.run, kind: g.kind, step, key: g.rows.key});
    cols.append(d.found ? promptColumn(d) : el("div", {class: "step-col", "data-step": step, text: d.message}));
  } catch (e) { cols.append(el("div", {class: "step-col", text: e.message})); }
}

function promptColumn(d) {
  const col = el("div", {class: "step-col", "data-step": d.step},
    el("h4", {text: `step ${d.step} · prompt ${d.i} · ${d.rows.length} responses`}), el("div", {class: "prompt-text", text: d.input}));
  const samples = el("div", {class: "samples"});
  d.rows.forEach((row, j) => samples.append(sampleCard(row, j)));
  col.append(samples);
  return col;
}

const SHOWN = new Set(["input", "output", "step", "score", "reward", "advantage", "response_length", "gts", "data_source", "index",
                       "tokens", "token_logprobs", "token_trainer_logprobs", "token_entropy", "token_prob_gap", "token_trained"]);

function sampleCard(row, j) {
  const good = typeof row.score === "number" && row.score > 0;
  const card = el("div", {class: "sample " + (good ? "good" : "bad"), "data-j": j});
  const extras = Object.entries(row).filter(([k]) => !SHOWN.has(k)).map(([k, v]) => `${k}=${fmt(v)}`).join(" · ");
  card.append(el("div", {class: "meta", text: `#${j} score ${fmt(row.score)} · reward ${fmt(row.reward)} · advantage ${fmt(row.advantage)} · length ${fmt(row.response_length)}`}));
  if (row.gts !== undefined) card.append(el("div", {class: "meta", text: `ground truth: ${fmt(row.gts)}`}));
  if (extras) card.append(el("div", {class: "meta", text: extras}));
  card.append(Array.isArray(row.tokens) ? tokenSpans(row) : el("div", {class: "output", text: row.output ?? ""}));
  return card;
}

function tokenSpans(row) {
  // one span per response token, shaded by the chosen per-token value; tool/observation tokens
  // (token_trained 0: attended to, not trained on) are marked instead
  const by = document.getElementById("colour-by").value;
  const values = row[by] || [];
  const finite = values.filter((v) => Number.isFinite(v));
  const lo = Math.min(0, ...finite), hi = Math.max(1e-9, ...finite);
  const out = el("div", {class: "output tokens"});
  row.tokens.forEach((t, k) => {
    const v = values[k];
    const trained = !row.token_trained || row.token_trained[k];
    const span = el("span", {class: "tok" + (trained ? "" : " masked"), text: t,
                             title: `${by}: ${fmt(v)}` + (trained ? "" : " (not trained: tool/observation token)")});
    if (trained && Number.isFinite(v)) {
      // log-probs: low (surprising) is red; entropy and the probability gap: high is red
      const frac = by === "token_logprobs" ? (v - hi) / ((lo - hi) || 1) : (v - lo) / ((hi - lo) || 1);
      span.style.background = `rgba(239, 68, 68, ${Math.min(1, Math.max(0, frac)) * 0.75})`;
    }
    out.append(span);
  });
  return out;
}

// ---- A/B ---------------------------------------------------------------------------------------------
async function loadAB() {
  const a = document.getElementById("ab-a").value, b = document.getElementById("ab-b").value;
  const table = document.getElementById("ab-table");
  table.tHead.textContent = ""; table.tBodies[0].textContent = "";
  if (a === "" || b === "") return;
  try {
    const d = await api("compare", {a, b});
    document.getElementById("ab-rule").textContent = d.best_rule;
    table.tHead.append(el("tr", {}, el("th", {text: "metric"}), el("th", {text: "best"}),
      ...d.runs.flatMap((n) => [el("th", {text: n + " final"}), el("th", {text: n + " best"})])));
    for (const r of d.rows) {
      const cells = [];
      for (let k = 0; k < 2; k++) cells.push(el("td", {text: fmt(r.final[k])}), el("td", {text: fmt(r.best[k])}));
      const f = r.final.map(num);
      if (r.best_is && f.every(Number.isFinite) && f[0] !== f[1]) {
        const w = (r.best_is === "max") === (f[0] > f[1]) ? 0 : 1;
        cells[2 * w].classList.add("win");
      }
      table.tBodies[0].append(el("tr", {"data-metric": r.metric}, el("td", {text: r.metric}), el("td", {text: r.best_is || "-"}), ...cells));
    }
    clearMessage("ab-error");
  } catch (e) { message("A/B: " + e.message, "error", "ab-error"); }
}

// ---- wiring ------------------------------------------------------------------------------------------
function showTab(tab) {
  state.tab = tab;
  for (const b of document.querySelectorAll("button.tab")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const p of document.querySelectorAll("section.panel")) p.hidden = p.id !== tab;
  if (tab === "curves") renderCurves();
  if (tab === "ab") loadAB();
}

function on(id, ev, fn) { document.getElementById(id).addEventListener(ev, fn); }

function wire() {
  for (const b of document.querySelectorAll("button.tab")) b.addEventListener("click", () => showTab(b.dataset.tab));
  on("ema", "input", () => { document.getElementById("ema-value").textContent = document.getElementById("ema").value; renderCurves(); });
  for (const id of ["x-axis", "log-y"]) on(id, "change", renderCurves);
  on("metric-filter", "input", renderCurves);
  on("gen-run", "change", () => { state.gen.run = Number(document.getElementById("gen-run").value); loadKinds(); });
  on("gen-kind", "change", () => { state.gen.kind = document.getElementById("gen-kind").value; loadSteps(true); });
  on("gen-step", "change", () => { state.gen.step = Number(document.getElementById("gen-step").value); state.gen.offset = 0; loadPrompts(); });
  const moveStep = (d) => {
    const sel = document.getElementById("gen-step"), j = sel.selectedIndex + d;
    if (j >= 0 && j < sel.options.length) { sel.selectedIndex = j; sel.dispatchEvent(new Event("change")); }
  };
  on("step-prev", "click", () => moveStep(-1));
  on("step-next", "click", () => moveStep(1));
  for (const id of ["f-q", "f-min-score", "f-max-score", "f-min-len", "f-max-len"]) on(id, "input", () => { state.gen.offset = 0; loadPrompts(); });
  on("f-source", "change", () => { state.gen.offset = 0; loadPrompts(); });
  on("page-prev", "click", () => { if (state.gen.offset > 0) { state.gen.offset = Math.max(0, state.gen.offset - PAGE); loadPrompts(); } });
  on("page-next", "click", () => { if (state.gen.offset + PAGE < state.gen.total) { state.gen.offset += PAGE; loadPrompts(); } });
  on("other-step", "change", compareStep);
  on("colour-by", "change", () => { const g = state.gen; if (g.rows) openPrompt(g.rows.i, g.rows.key).then(compareStep); });
  for (const id of ["ab-a", "ab-b"]) on(id, "change", loadAB);
  on("key-form", "submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem("hybridrl-view-key", document.getElementById("key-input").value);
    document.getElementById("key-form").hidden = true;
    start();
  });
}

async function start() {
  try {
    await loadRuns();
  } catch (e) { message("cannot list the runs: " + e.message, "error", "runs-error"); return; }
  clearMessage("runs-error");
  if (window.PLOTLY_MISSING) message("plotly.min.js did not load: pip install plotly", "error");
  if (state.sweep) await startSweep();  // sweep.js: the trials table first
  await pollMetrics();
  if (state.runs.length) await loadKinds();  // a sweep whose trials all failed has no run
  if (!state.timer) state.timer = setInterval(async () => {
    await pollMetrics();
    if (state.tab === "gens" && state.gen.kind) await loadSteps(false);  // new steps of a run still training
    if (state.tab === "sweep") await loadSweep();  // a running sweep's trials move on
  }, POLL_MS);
}

wire();
start();
