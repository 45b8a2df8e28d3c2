// The page of `tinydelta serve` (docs/SERVE.md). Plain JavaScript, no framework: every number
// comes from the JSON endpoints; rows are fetched a page at a time.
"use strict";

const PAGE = 100;
const token = new URLSearchParams(location.search).get("token");
const $ = (id) => document.getElementById(id);
const state = {
  versions: [], latest: -1, selected: -1, follow: true, writable: false,
  columns: [], loaded: 0, total: 0, loading: false, gridVersion: -1,
  changes: null, changesLoaded: 0,
};
window.tdTimings = { firstRowsMs: null, lastRowsMs: null };

function showError(msg) {
  const e = $("error");
  if (msg) { e.textContent = msg; e.hidden = false; } else { e.hidden = true; e.textContent = ""; }
}

async function api(path, opts) {
  let r;
  try {
    r = await fetch(path, opts);
  } catch (err) {
    throw new Error("the server cannot be reached: " + err.message);
  }
  let body;
  try { body = await r.json(); } catch (err) { throw new Error(path + ": the answer is not JSON (HTTP " + r.status + ")"); }
  if (!r.ok) { const e = new Error(body.error || ("HTTP " + r.status)); e.body = body; throw e; }
  return body;
}

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = text;
  if (cls) e.className = cls;
  return e;
}

function cell(v) {
  if (v === null || v === undefined) return "null";
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}

function fmtBytes(n) {
  if (n < 1024) return n + " B";
  const u = ["KiB", "MiB", "GiB", "TiB"];
  let i = -1;
  do { n /= 1024; i++; } while (n >= 1024 && i < u.length - 1);
  return n.toFixed(1) + " " + u[i];
}

function entry(v) { return state.versions.find((e) => e.version === v); }

// --- the timeline ---------------------------------------------------------------------------
async function loadVersions() {
  const d = await api("/api/versions");
  $("table-name").textContent = d.table;
  state.versions = d.versions;
  state.writable = d.writable;
  $("write-box").hidden = !d.writable;
  showError(d.error ? "the table is damaged: " + d.error : null);
  const vs = d.versions;
  if (!vs.length) return;
  const first = vs[0].version, last = vs[vs.length - 1].version;
  const t = $("timeline");
  t.min = first; t.max = last;
  state.latest = last;
  $("latest-label").textContent = "latest " + d.latest;
  for (const id of ["from", "to"]) {
    const s = $(id), keep = s.value;
    s.textContent = "";
    for (const e of vs) s.append(new Option(e.version + "  " + e.operation, e.version));
    s.value = keep !== "" && entry(Number(keep)) ? keep : (id === "to" ? last : Math.max(first, last - 1));
  }
  drawChart();
}

function describeEntry(e) {
  const parts = [e.time, e.operation];
  if (e.rowsAdded !== null && e.rowsAdded > 0) parts.push("+" + e.rowsAdded + " rows");
  if (e.rowsRemoved !== null && e.rowsRemoved > 0) parts.push("-" + e.rowsRemoved + " rows");
  if (e.source) parts.push("from incoming/" + e.source);
  for (const [app, v] of e.txns) parts.push("txn " + app + ":" + v);
  parts.push((e.rows === null ? "?" : e.rows) + " rows in " + e.files + " files, " + fmtBytes(e.bytes));
  return parts.join(" · ");
}

let selectTimer = null;
function onTimelineInput() {
  const v = Number($("timeline").value);
  showVersionHeader(v);
  clearTimeout(selectTimer);
  selectTimer = setTimeout(() => select(v), 120);
}

function showVersionHeader(v) {
  $("version-label").textContent = v;
  const e = entry(v);
  $("version-info").textContent = e ? describeEntry(e) : "";
}

async function select(v) {
  clearTimeout(selectTimer);
  state.selected = v;
  state.follow = v === state.latest;
  $("timeline").value = v;
  showVersionHeader(v);
  drawChart();
  const started = performance.now();
  await Promise.all([loadDescribe(v), resetGrid(v)]);
  if (state.selected === v) window.tdTimings.lastRowsMs = performance.now() - started;
}

// --- the chart ------------------------------------------------------------------------------
function drawChart() {
  const svg = $("chart"), vs = state.versions, W = 600, H = 120, P = 6;
  svg.textContent = "";
  if (!vs.length) return;
  const ns = "http://www.w3.org/2000/svg";
  const x = (i) => vs.length === 1 ? W / 2 : P + (i * (W - 2 * P)) / (vs.length - 1);
  const series = [["rows", "#1f6feb", (e) => e.rows || 0], ["bytes", "#d97706", (e) => e.bytes], ["files", "#7c3aed", (e) => e.files]];
  for (const [name, color, f] of series) {
    const max = Math.max(1, ...vs.map(f));
    const pts = vs.map((e, i) => x(i).toFixed(1) + "," + (H - P - (f(e) / max) * (H - 2 * P)).toFixed(1)).join(" ");
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke", color);
    line.setAttribute("stroke-width", "2");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    line.setAttribute("class", "series-" + name);
    svg.append(line);
  }
  const i = vs.findIndex((e) => e.version === state.selected);
  if (i >= 0) {
    const m = document.createElementNS(ns, "line");
    m.setAttribute("x1", x(i)); m.setAttribute("x2", x(i));
    m.setAttribute("y1", 0); m.setAttribute("y2", H);
    m.setAttribute("stroke", "#444"); m.setAttribute("stroke-dasharray", "3 3");
    m.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(m);
  }
  svg.onclick = (ev) => {
    const r = svg.getBoundingClientRect();
    const f = (ev.clientX - r.left) / r.width;
    const k = Math.round(f * (vs.length - 1));
    select(vs[Math.max(0, Math.min(vs.length - 1, k))].version).catch((e) => showError(e.message));
  };
}

// --- describe and schema --------------------------------------------------------------------
async function loadDescribe(v) {
  const dl = $("describe"), sc = $("schema");
  try {
    const d = await api("/api/describe?version=" + v);
    if (state.selected !== v) return;
    dl.textContent = "";
    const ranges = d.readableVersions.map(([a, b]) => a === b ? String(a) : a + "-" + b).join(", ");
    for (const [k, val] of [["version", d.version], ["time", d.time], ["files", d.numFiles], ["rows", d.rows], ["bytes", d.bytes + " (" + fmtBytes(d.bytes) + ")"], ["readable versions", ranges]]) {
      dl.append(el("dt", k), el("dd", String(val)));
    }
    sc.textContent = "";
    const h = sc.insertRow();
    for (const t of ["column", "type", "nullable"]) h.append(el("th", t));
    state.columns = d.schema.map((c) => c.name);
    for (const c of d.schema) {
      const r = sc.insertRow();
      r.insertCell().textContent = c.name;
      r.insertCell().textContent = typeof c.type === "string" ? c.type : JSON.stringify(c.type);
      r.insertCell().textContent = c.nullable ? "yes" : "no";
    }
  } catch (e) {
    if (state.selected !== v) return;
    dl.textContent = "";
    dl.append(el("dt", "error"), el("dd", e.message));
    showError(e.message);
  }
}

// --- the grid -------------------------------------------------------------------------------
async function resetGrid(v) {
  state.gridVersion = v;
  state.loaded = 0;
  state.total = 0;
  state.loading = false;
  const g = $("grid");
  g.textContent = "";
  $("grid-box").scrollTop = 0;
  await loadPage(v);
}

async function loadPage(v) {
  if (state.loading || v !== state.gridVersion) return;
  if (state.loaded > 0 && state.loaded >= state.total) return;
  state.loading = true;
  try {
    // The first page of the latest version was asked for with the timeline (main()).
    const pre = state.loaded === 0 && state.prefetch ? await state.prefetch.catch(() => null) : null;
    state.prefetch = null;
    const d = pre && pre.version === v ? pre
      : await api("/api/rows?version=" + v + "&offset=" + state.loaded + "&limit=" + PAGE);
    if (v !== state.gridVersion) return;
    const g = $("grid");
    let cols = state.columns;
    if (!g.rows.length) {
      // The schema's order first, then any other key the page's rows have.
      cols = cols.slice();
      for (const row of d.rows) for (const k of Object.keys(row)) if (!cols.includes(k)) cols.push(k);
      const h = g.createTHead().insertRow();
      h.append(el("th", "#"));
      for (const c of cols) h.append(el("th", c));
      g.dataset.cols = JSON.stringify(cols);
    } else {
      cols = JSON.parse(g.dataset.cols);
    }
    const body = g.tBodies[0] || g.createTBody();
    d.rows.forEach((row, i) => {
      const r = body.insertRow();
      r.insertCell().textContent = String(d.offset + i);
      for (const c of cols) r.insertCell().textContent = cell(row[c]);
    });
    state.loaded = d.offset + d.rows.length;
    state.total = d.total;
    $("grid-info").textContent = "version " + v + ": " + state.loaded + " of " + d.total + " rows shown (scroll for more)";
    if (window.tdTimings.firstRowsMs === null) window.tdTimings.firstRowsMs = performance.now();
  } catch (e) {
    $("grid-info").textContent = "version " + v + ": " + e.message;
    showError(e.message);
  } finally {
    state.loading = false;
  }
}

function onGridScroll() {
  const b = $("grid-box");
  if (b.scrollTop + b.clientHeight > b.scrollHeight - 200) loadPage(state.gridVersion);
}

// --- what changed ---------------------------------------------------------------------------
async function compare() {
  let a = Number($("from").value), b = Number($("to").value);
  if (a > b) [a, b] = [b, a];
  state.changes = { from: a, to: b };
  state.changesLoaded = 0;
  $("changes-grid").textContent = "";
  $("changes-summary").textContent = "…";
  await moreChanges();
}

async function moreChanges() {
  const c = state.changes;
  if (!c) return;
  try {
    const d = await api("/api/changes?from=" + c.from + "&to=" + c.to + "&offset=" + state.changesLoaded + "&limit=" + PAGE);
    $("changes-summary").textContent = "from version " + d.from + " to " + d.to + ": " + d.deleted + " rows deleted, " + d.inserted + " rows inserted";
    const g = $("changes-grid");
    if (!g.rows.length) {
      const h = g.createTHead().insertRow();
      for (const t of ["change", "version", "row"]) h.append(el("th", t));
    }
    const body = g.tBodies[0] || g.createTBody();
    for (const r of d.rows) {
      const tr = body.insertRow();
      tr.append(el("td", r._change_type, r._change_type));
      tr.insertCell().textContent = String(r._commit_version);
      tr.insertCell().textContent = JSON.stringify(r.row);
    }
    state.changesLoaded = d.offset + d.rows.length;
    $("changes-more").hidden = state.changesLoaded >= d.total;
  } catch (e) {
    $("changes-summary").textContent = e.message;
  }
}

// --- writes ---------------------------------------------------------------------------------
async function upload(file) {
  const out = $("append-result");
  out.textContent = "";
  out.append(el("li", "appending " + file.name + "…"));
  try {
    const body = await file.arrayBuffer();
    const d = await api("/api/append?name=" + encodeURIComponent(file.name), {
      method: "POST", body, headers: { "X-Tinydelta-Token": token || "", "Content-Type": "application/x-ndjson" },
    });
    out.textContent = "";
    out.append(el("li", d.message, "ok"));
    await refresh(true);
  } catch (e) {
    out.textContent = "";
    const lines = (e.body && e.body.messages) || [e.message];
    for (const l of lines) out.append(el("li", l, "bad"));
  }
}

async function restore() {
  const v = state.selected;
  if (!confirm("Restore the table to version " + v + "? This commits a new version whose rows are version " + v + "'s.")) return;
  try {
    const d = await api("/api/restore?version=" + v, { method: "POST", headers: { "X-Tinydelta-Token": token || "" } });
    $("restore-result").textContent = d.message;
    await refresh(true);
  } catch (e) {
    $("restore-result").textContent = e.message;
  }
}

// --- live -----------------------------------------------------------------------------------
async function refresh(follow) {
  const was = state.latest;
  await loadVersions();
  if ((follow || state.follow) && state.latest !== was) await select(state.latest);
}

function live() {
  const es = new EventSource("/api/events");
  es.addEventListener("open", () => $("live").className = "live on");
  es.addEventListener("error", () => $("live").className = "live off");
  es.addEventListener("version", (ev) => {
    const d = JSON.parse(ev.data);
    if (d.latest !== state.latest) refresh(false).catch((e) => showError(e.message));
  });
  es.addEventListener("damaged", (ev) => showError("the table is damaged: " + JSON.parse(ev.data).error));
}

async function main() {
  $("timeline").addEventListener("input", onTimelineInput);
  $("timeline").addEventListener("change", () => select(Number($("timeline").value)));
  $("grid-box").addEventListener("scroll", onGridScroll);
  $("compare").addEventListener("click", compare);
  $("changes-more").addEventListener("click", moreChanges);
  $("restore").addEventListener("click", restore);
  $("upload").addEventListener("change", (ev) => { if (ev.target.files.length) upload(ev.target.files[0]); });
  const drop = $("drop");
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault();
    drop.classList.remove("over");
    if (ev.dataTransfer.files.length) upload(ev.dataTransfer.files[0]);
  });
  try {
    // The latest version's first rows, asked for at once beside the timeline.
    state.prefetch = api("/api/rows?offset=0&limit=" + PAGE);
    await loadVersions();
    if (state.latest >= 0) await select(state.latest);
  } catch (e) {
    showError(e.message);
  }
  live();
  document.body.dataset.ready = "1";
}

main();
