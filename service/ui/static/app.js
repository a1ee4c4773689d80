// rft dashboard: plain JavaScript, no build step, no third-party code.
// Every piece of user content (completions, prompts, logs, sources, names) reaches the page
// through textContent or attribute setters, never innerHTML: it is untrusted text.
"use strict";

const KEY_STORAGE = "rft.apiKey";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const PALETTE = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2",
  "#db2777", "#65a30d", "#ea580c", "#4f46e5"];
const TABS = [
  ["charts", "Charts"], ["completions", "Completions"], ["logs", "Reward logs"],
  ["errors", "Reward errors"], ["config", "Config"],
];

// ---------------------------------------------------------------- DOM helpers

function appendChildren(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function setAttributes(node, attrs) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") {
      node.addEventListener(name.slice(2), value);
    } else if (name === "style") {
      // Through the CSSOM: the page's CSP forbids inline style attributes.
      node.style.cssText = String(value);
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  return node;
}

// Like node.replaceChildren(), which would turn a null child into the text "null".
function setChildren(node, ...children) {
  node.replaceChildren();
  return appendChildren(node, children);
}

function el(tag, attrs, ...children) {
  return appendChildren(setAttributes(document.createElement(tag), attrs), children);
}

const SVG_NS = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs, ...children) {
  return appendChildren(setAttributes(document.createElementNS(SVG_NS, tag), attrs), children);
}

function formatNumber(value, digits = 4) {
  if (value === null || value === undefined) return "–";
  if (Number.isInteger(value)) return String(value);
  const magnitude = Math.abs(value);
  if (magnitude !== 0 && (magnitude < 1e-3 || magnitude >= 1e5)) return value.toExponential(2);
  return value.toFixed(digits);
}

function formatTime(iso) {
  if (!iso) return "–";
  return new Date(iso).toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
  });
}

function promptText(prompt) {
  if (typeof prompt === "string") return prompt;
  if (Array.isArray(prompt)) {
    return prompt.map((m) => (m && m.role ? `${m.role}: ${m.content}` : JSON.stringify(m)))
      .join("\n");
  }
  return JSON.stringify(prompt);
}

function statusBadge(status) {
  return el("span", { class: `badge status-${status}`, "data-status": status }, status);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

function apiKey() {
  return localStorage.getItem(KEY_STORAGE);
}

async function api(path, params, key = apiKey()) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") url.searchParams.set(name, value);
  }
  const response = await fetch(url, { headers: { Authorization: `Bearer ${key}` } });
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch { /* not JSON */ }
    if (response.status === 401 && key === apiKey()) signOut("Your API key was refused.");
    throw new ApiError(response.status, detail);
  }
  return response.json();
}

async function allPages(path, params, { maxPages = 50, onPage } = {}) {
  const rows = [];
  let after = null;
  for (let page = 0; page < maxPages; page += 1) {
    const body = await api(path, { ...params, limit: 1000, after });
    rows.push(...body.data);
    if (onPage) onPage(rows.length);
    if (!body.has_more) return { rows, complete: true };
    after = body.next_cursor;
  }
  return { rows, complete: false };
}

function jobPath(jobId, suffix = "") {
  return `/v1/jobs/${encodeURIComponent(jobId)}${suffix}`;
}

// Server-Sent Events over fetch(): EventSource cannot send an Authorization header, and an
// API key in the URL would end up in access logs.
async function followJobEvents(jobId, { onMessage, onState, signal }) {
  let lastId = null;
  while (!signal.aborted) {
    onState(lastId ? "reconnecting" : "connecting");
    try {
      const headers = { Authorization: `Bearer ${apiKey()}`, Accept: "text/event-stream" };
      if (lastId) headers["Last-Event-ID"] = lastId;
      const response = await fetch(jobPath(jobId, "/events"), { headers, signal, cache: "no-store" });
      if (response.status === 401) { signOut("Your API key was refused."); return; }
      if (!response.ok) { onState("unavailable"); return; }
      onState("live");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let boundary;
        while ((boundary = buffer.indexOf("\n\n")) >= 0) {
          const message = parseEventBlock(buffer.slice(0, boundary));
          buffer = buffer.slice(boundary + 2);
          if (!message) continue;
          if (message.id) lastId = message.id;
          onMessage(message);
          if (message.event === "end") { onState("ended"); return; }
        }
      }
    } catch (error) {
      if (signal.aborted) return;
    }
    await sleep(1500); // the connection dropped before `end`: resume from lastId
  }
}

function parseEventBlock(block) {
  let event = "message";
  let id = null;
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // heartbeat comment
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "id") id = value;
    else if (field === "data") data.push(value);
  }
  if (!data.length) return null;
  return { event, id, data: JSON.parse(data.join("\n")) };
}

// ---------------------------------------------------------------- app shell and routing

const root = document.getElementById("app");
let currentView = null; // has optional leave() and, for the job page, showTab()

function signOut(message) {
  localStorage.removeItem(KEY_STORAGE);
  if (currentView && currentView.leave) currentView.leave();
  currentView = null;
  renderSignIn(message);
}

function route() {
  const key = apiKey();
  document.getElementById("sign-out").hidden = !key;
  document.getElementById("tenant-hint").textContent = key ? `key ${key.slice(0, 10)}…` : "";
  if (!key) { renderSignIn(); return; }
  const match = window.location.hash.match(/^#\/jobs\/([^/]+)(?:\/(\w+))?$/);
  if (match) {
    const jobId = decodeURIComponent(match[1]);
    const tab = match[2] || "charts";
    if (currentView instanceof JobPage && currentView.jobId === jobId) {
      currentView.showTab(tab);
      return;
    }
    switchView(new JobPage(jobId, tab));
  } else {
    switchView(new JobList());
  }
}

function switchView(view) {
  if (currentView && currentView.leave) currentView.leave();
  currentView = view;
  setChildren(root, view.element);
  view.start();
}

function renderSignIn(message) {
  document.getElementById("sign-out").hidden = true;
  document.getElementById("tenant-hint").textContent = "";
  const input = el("input", {
    type: "password", id: "api-key", name: "api-key", autocomplete: "off", required: true,
    placeholder: "rft_…", "aria-label": "API key",
  });
  const error = el("p", { class: "error", id: "sign-in-error" }, message || "");
  const form = el("form", { class: "card sign-in", id: "sign-in" },
    el("h1", null, "Sign in"),
    el("p", { class: "muted" }, "Paste an API key. It stays in this browser (localStorage) ",
      "and is sent only to this server, in the Authorization header."),
    input, el("button", { class: "button", type: "submit" }, "Sign in"), error);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = input.value.trim();
    try {
      await api("/v1/jobs", { limit: 1 }, key);
    } catch (failure) {
      error.textContent = failure.status === 401 ? "That key was refused." : failure.message;
      return;
    }
    localStorage.setItem(KEY_STORAGE, key);
    route();
  });
  setChildren(root, form);
  input.focus();
}

document.getElementById("sign-out").addEventListener("click", () => signOut());
window.addEventListener("hashchange", route);

// ---------------------------------------------------------------- jobs list

class JobList {
  constructor() {
    this.body = el("tbody");
    this.more = el("button", { class: "button subtle", type: "button", hidden: true }, "Load more");
    this.message = el("p", { class: "muted" });
    this.element = el("section", { class: "card" },
      el("div", { class: "section-head" }, el("h1", null, "Jobs")),
      el("table", { class: "table jobs", id: "jobs" },
        el("thead", null, el("tr", null, el("th", null, "Job"), el("th", null, "Status"),
          el("th", null, "Progress"), el("th", null, "Model"), el("th", null, "Created"))),
        this.body),
      this.message, this.more);
    this.more.addEventListener("click", () => this.load(this.nextCursor, true));
  }

  start() {
    this.load(null, false);
    // The list is cheap to re-read; a stream per job would be overkill here.
    this.timer = setInterval(() => { if (!this.nextCursor) this.load(null, false); }, 5000);
  }

  leave() { clearInterval(this.timer); }

  async load(after, append) {
    let page;
    try {
      page = await api("/v1/jobs", { limit: 50, after });
    } catch (failure) {
      this.message.textContent = `Could not load jobs: ${failure.message}`;
      return;
    }
    const rows = page.data.map((job) => this.row(job));
    if (append) this.body.append(...rows); else setChildren(this.body, ...rows);
    this.nextCursor = page.next_cursor;
    this.more.hidden = !page.has_more;
    this.message.textContent = this.body.children.length ? "" :
      "No jobs yet. Create one with the API or the SDK; it shows up here.";
  }

  row(job) {
    const href = `#/jobs/${encodeURIComponent(job.id)}`;
    const total = Number(job.hyperparameters.train_steps) || 0;
    const tr = el("tr", { class: "clickable", "data-job-id": job.id },
      el("td", null, el("a", { href }, job.name || job.id),
        job.name ? el("div", { class: "muted small mono" }, job.id) : null),
      el("td", null, statusBadge(job.status)),
      el("td", null, progressBar(job.steps_completed, total)),
      el("td", { class: "mono small" }, job.base_model),
      el("td", { class: "small" }, formatTime(job.created_at)));
    tr.addEventListener("click", (event) => {
      if (event.target.tagName !== "A") window.location.hash = href;
    });
    return tr;
  }
}

function progressBar(done, total) {
  const fraction = total ? Math.min(1, done / total) : 0;
  return el("div", { class: "progress", title: `${done} of ${total} steps` },
    el("div", { class: "progress-track" },
      el("div", { class: "progress-fill", style: `width: ${(fraction * 100).toFixed(1)}%` })),
    el("span", { class: "progress-label" }, `${done} / ${total}`));
}

// ---------------------------------------------------------------- job page

class JobPage {
  constructor(jobId, tab) {
    this.jobId = jobId;
    this.tab = tab;
    this.job = null;
    this.steps = [];
    this.events = [];
    this.panels = {};
    this.abort = new AbortController();
    this.header = el("div", { class: "job-head" }, el("p", { class: "muted" }, "Loading…"));
    this.streamState = el("span", { class: "stream-state", id: "stream-state",
      "data-stream": "connecting" }, "connecting");
    this.tabBar = el("nav", { class: "tabs" }, TABS.map(([name, label]) => el("a", {
      href: `#/jobs/${encodeURIComponent(jobId)}/${name}`, "data-tab": name,
    }, label)));
    this.panelHost = el("div", { class: "panel-host" });
    this.element = el("section", null,
      el("div", { class: "page-top" }, el("a", { href: "#/" }, "← All jobs"),
        el("span", { class: "muted small" }, "updates: ", this.streamState)),
      el("div", { class: "card" }, this.header, this.tabBar), this.panelHost);
  }

  start() {
    this.showTab(this.tab);
    followJobEvents(this.jobId, {
      signal: this.abort.signal,
      onState: (state) => this.setStreamState(state),
      onMessage: (message) => this.onMessage(message),
    });
  }

  leave() { this.abort.abort(); }

  setStreamState(state) {
    const labels = { live: "live", ended: "complete", connecting: "connecting",
      reconnecting: "reconnecting…", unavailable: "not found" };
    this.streamState.dataset.stream = state;
    this.streamState.textContent = labels[state] || state;
    if (state === "unavailable" && !this.job) {
      setChildren(this.header, el("p", { class: "error" },
        "This job does not exist, or belongs to another tenant."));
    }
  }

  onMessage({ event, data }) {
    if (event === "step") {
      // A resumed job re-runs the steps after its checkpoint: the new record replaces the old.
      const at = this.steps.findIndex((step) => step.step >= data.step);
      if (at === -1) this.steps.push(data);
      else this.steps.splice(at, this.steps.length - at, data);
    } else if (event === "job") {
      this.job = data;
      this.renderHeader();
    } else if (event !== "end") {
      this.events.push({ ...data, kind: event });
    }
    for (const panel of Object.values(this.panels)) if (panel.update) panel.update();
  }

  showTab(tab) {
    if (!TABS.some(([name]) => name === tab)) tab = "charts";
    this.tab = tab;
    for (const link of this.tabBar.children) {
      link.classList.toggle("active", link.dataset.tab === tab);
    }
    if (!this.panels[tab]) {
      const Panel = { charts: ChartsPanel, completions: CompletionsPanel, logs: LogsPanel,
        errors: ErrorsPanel, config: ConfigPanel }[tab];
      this.panels[tab] = new Panel(this);
    }
    setChildren(this.panelHost, this.panels[tab].element);
    if (this.panels[tab].update) this.panels[tab].update();
  }

  functionNames() {
    const names = new Set();
    for (const step of this.steps) for (const name of Object.keys(step.reward_functions)) names.add(name);
    return [...names].sort();
  }

  renderHeader() {
    const job = this.job;
    const total = Number(job.hyperparameters.train_steps) || 0;
    const facts = [
      ["Status", statusBadge(job.status)],
      ["Progress", progressBar(job.steps_completed, total)],
      ["Config", `v${job.config_version}` +
        (job.applied_config_version ? ` (v${job.applied_config_version} applied)` : "")],
      ["Model", el("span", { class: "mono" }, job.base_model)],
      ["Created", formatTime(job.created_at)],
    ];
    setChildren(this.header, 
      el("h1", null, job.name || job.id),
      job.name ? el("div", { class: "muted small mono" }, job.id) : null,
      el("dl", { class: "facts" }, facts.map(([term, value]) =>
        el("div", null, el("dt", null, term), el("dd", null, value)))),
      job.failure_reason ? el("p", { class: "error" }, job.failure_reason) : null);
  }
}

// ---------------------------------------------------------------- charts

function niceTicks(low, high, count = 5) {
  if (!(high > low)) { high = low + 1; }
  const rough = (high - low) / count;
  const power = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * power).find((s) => s >= rough) || rough;
  const ticks = [];
  for (let tick = Math.ceil(low / step) * step; tick <= high + step * 1e-9; tick += step) {
    ticks.push(Number(tick.toPrecision(12)));
  }
  return ticks;
}

// series: [{label, color, points: [{x, y}]}]; band: {color, points: [{x, low, high}]};
// markers: [{x, label}]. The SVG carries data-points (plotted points), for tests and tooling.
function lineChart({ id, title, series, band, markers = [], yLabel, fixedRange }) {
  const width = 760, height = 240;
  const margin = { top: 14, right: 16, bottom: 42, left: 56 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const ys = series.flatMap((s) => s.points.map((p) => p.y)).filter((y) => y !== null);
  if (band) for (const p of band.points) ys.push(p.low, p.high);
  const pointCount = series.reduce((sum, s) => sum + s.points.filter((p) => p.y !== null).length, 0);

  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    "aria-label": title, "data-chart": id, "data-points": pointCount });
  const figure = el("figure", { class: "chart-card" },
    el("figcaption", null, el("span", { class: "chart-title" }, title),
      el("span", { class: "legend" }, series.map((s) => el("span", { class: "legend-item" },
        el("span", { class: "swatch", style: `background: ${s.color}` }), s.label)))),
    svg);
  if (!pointCount) {
    svg.append(svgEl("text", { x: width / 2, y: height / 2, class: "empty",
      "text-anchor": "middle" }, "No steps yet"));
    return figure;
  }

  const xMin = Math.min(1, ...xs), xMax = Math.max(xMin + 1, ...xs);
  let yMin = fixedRange ? fixedRange[0] : Math.min(...ys);
  let yMax = fixedRange ? Math.max(fixedRange[1], ...ys) : Math.max(...ys);
  if (yMax - yMin < 1e-9) { yMin -= 0.5; yMax += 0.5; }
  const pad = (yMax - yMin) * 0.06;
  if (!fixedRange) { yMin -= pad; yMax += pad; }
  const sx = (x) => margin.left + ((x - xMin) / (xMax - xMin)) * plotWidth;
  const sy = (y) => margin.top + (1 - (y - yMin) / (yMax - yMin)) * plotHeight;

  const grid = svgEl("g", { class: "grid" });
  for (const tick of niceTicks(yMin, yMax)) {
    grid.append(svgEl("line", { x1: margin.left, x2: width - margin.right, y1: sy(tick), y2: sy(tick) }),
      svgEl("text", { x: margin.left - 8, y: sy(tick) + 4, "text-anchor": "end" }, formatNumber(tick, 2)));
  }
  for (const tick of niceTicks(xMin, xMax, 8).filter((t) => Number.isInteger(t))) {
    grid.append(svgEl("text", { x: sx(tick), y: margin.top + plotHeight + 18,
      "text-anchor": "middle" }, tick));
  }
  grid.append(svgEl("text", { x: margin.left + plotWidth / 2, y: height - 4,
    "text-anchor": "middle", class: "axis-label" }, "step"));
  if (yLabel) {
    grid.append(svgEl("text", { x: 12, y: margin.top + plotHeight / 2, class: "axis-label",
      transform: `rotate(-90 12 ${margin.top + plotHeight / 2})`, "text-anchor": "middle" }, yLabel));
  }
  svg.append(grid);

  if (band && band.points.length) {
    const upper = band.points.map((p) => `${sx(p.x).toFixed(1)},${sy(p.high).toFixed(1)}`);
    const lower = band.points.slice().reverse().map((p) => `${sx(p.x).toFixed(1)},${sy(p.low).toFixed(1)}`);
    svg.append(svgEl("polygon", { points: [...upper, ...lower].join(" "), class: "band",
      fill: band.color }));
  }
  for (const marker of markers) {
    const x = sx(marker.x);
    svg.append(svgEl("g", { class: "marker", "data-marker-step": marker.x },
      svgEl("line", { x1: x, x2: x, y1: margin.top, y2: margin.top + plotHeight }),
      svgEl("text", { x: x + 4, y: margin.top + 10 }, marker.label)));
  }
  for (const s of series) {
    let path = "";
    let drawing = false;
    for (const p of s.points) {
      if (p.y === null) { drawing = false; continue; }
      path += `${drawing ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`;
      drawing = true;
    }
    svg.append(svgEl("path", { d: path, class: "line", stroke: s.color, "data-series": s.label }));
    const lone = s.points.filter((p) => p.y !== null);
    if (lone.length === 1) {
      svg.append(svgEl("circle", { cx: sx(lone[0].x), cy: sy(lone[0].y), r: 3, fill: s.color }));
    }
  }
  attachHover(figure, svg, { series, band, sx, xMin, xMax, margin, plotWidth, plotHeight, width });
  return figure;
}

function attachHover(figure, svg, { series, band, sx, xMin, xMax, margin, plotWidth, plotHeight, width }) {
  const cursor = svgEl("line", { class: "cursor", y1: margin.top, y2: margin.top + plotHeight,
    visibility: "hidden" });
  const overlay = svgEl("rect", { x: margin.left, y: margin.top, width: plotWidth,
    height: plotHeight, fill: "transparent" });
  const tip = el("div", { class: "tooltip", hidden: true });
  svg.append(cursor, overlay);
  figure.append(tip);
  overlay.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    const step = Math.round(xMin + ((x - margin.left) / plotWidth) * (xMax - xMin));
    const rows = series.map((s) => [s, s.points.find((p) => p.x === step)])
      .filter(([, p]) => p && p.y !== null);
    if (!rows.length) { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); return; }
    cursor.setAttribute("x1", sx(step));
    cursor.setAttribute("x2", sx(step));
    cursor.setAttribute("visibility", "visible");
    const bandPoint = band && band.points.find((p) => p.x === step);
    setChildren(tip, el("strong", null, `step ${step}`), ...rows.map(([s, p]) =>
      el("div", null, el("span", { class: "swatch", style: `background: ${s.color}` }),
        `${s.label}: ${formatNumber(p.y)}`)),
    bandPoint ? el("div", { class: "muted" }, `std ±${formatNumber((bandPoint.high - bandPoint.low) / 2)}`) : null);
    tip.hidden = false;
    const left = ((sx(step) / width) * box.width) + 12;
    tip.style.left = `${Math.min(left, box.width - 180)}px`;
  });
  overlay.addEventListener("mouseleave", () => {
    tip.hidden = true;
    cursor.setAttribute("visibility", "hidden");
  });
}

class ChartsPanel {
  constructor(page) {
    this.page = page;
    this.tiles = el("div", { class: "tiles" });
    this.charts = el("div", { class: "charts" });
    this.feed = el("ol", { class: "feed", id: "event-feed" });
    this.element = el("div", { class: "panel" }, this.tiles, this.charts,
      el("div", { class: "card" }, el("h2", null, "Events"), this.feed));
    this.pending = false;
  }

  // Many steps can arrive at once during replay: draw once per frame, not once per step.
  update() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  configMarkers() {
    const markers = new Map();
    let previous = null;
    for (const step of this.page.steps) {
      if (previous !== null && step.config_version !== previous) {
        markers.set(step.step, `config v${step.config_version}`);
      }
      previous = step.config_version;
    }
    for (const event of this.page.events) {
      if (event.kind === "config_applied" && event.step) {
        markers.set(event.step, `config v${event.data.config_version}`);
      }
    }
    return [...markers].map(([x, label]) => ({ x, label }));
  }

  render() {
    const steps = this.page.steps;
    const markers = this.configMarkers();
    const last = steps[steps.length - 1];
    const tiles = [
      ["Steps recorded", steps.length],
      ["Reward (last step)", last ? formatNumber(last.reward_mean) : "–"],
      ["Reward std", last ? formatNumber(last.reward_std) : "–"],
      ["Loss", last ? formatNumber(last.loss) : "–"],
      ["KL", last ? formatNumber(last.kl) : "–"],
      ["Seconds per step", last ? formatNumber(last.duration_s, 2) : "–"],
    ];
    setChildren(this.tiles, ...tiles.map(([label, value]) =>
      el("div", { class: "tile" }, el("div", { class: "tile-value" }, value),
        el("div", { class: "tile-label" }, label))));

    // One line per function version (score_v1, score_v2): a changed source is a new curve.
    const byLabel = new Map();
    const errorsByName = new Map();
    for (const step of steps) {
      for (const [name, metrics] of Object.entries(step.reward_functions)) {
        const label = `${name}_v${metrics.version}`;
        if (!byLabel.has(label)) byLabel.set(label, []);
        byLabel.get(label).push({ x: step.step, y: metrics.mean });
        if (!errorsByName.has(name)) errorsByName.set(name, []);
        errorsByName.get(name).push({ x: step.step, y: metrics.error_rate });
      }
    }
    const colorOf = colorAssigner();
    setChildren(this.charts, 
      lineChart({
        id: "reward", title: "Total reward (mean ± std)", yLabel: "reward", markers,
        series: [{ label: "reward", color: PALETTE[0],
          points: steps.map((s) => ({ x: s.step, y: s.reward_mean })) }],
        band: { color: PALETTE[0], points: steps.filter((s) => s.reward_mean !== null)
          .map((s) => ({ x: s.step, low: s.reward_mean - (s.reward_std || 0),
            high: s.reward_mean + (s.reward_std || 0) })) },
      }),
      lineChart({
        id: "functions", title: "Reward functions (mean, per version)", yLabel: "score", markers,
        series: [...byLabel].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }))
          .map(([label, points]) => ({ label, points, color: colorOf(label) })),
      }),
      lineChart({
        id: "errors", title: "Reward error rate (per function)", yLabel: "errors", markers,
        fixedRange: [0, 1],
        series: [...errorsByName].map(([name, points]) => ({ label: name, points,
          color: colorOf(`errors:${name}`) })),
      }));

    const recent = this.page.events.slice(-12).reverse();
    setChildren(this.feed, ...(recent.length ? recent.map((event) => el("li", null,
      el("span", { class: `kind kind-${event.kind}` }, event.kind),
      el("span", null, event.message),
      el("span", { class: "muted small" }, formatTime(event.created_at)))) :
      [el("li", { class: "muted" }, "No events yet.")]));
  }
}

function colorAssigner() {
  const assigned = new Map();
  return (key) => {
    if (!assigned.has(key)) assigned.set(key, PALETTE[assigned.size % PALETTE.length]);
    return assigned.get(key);
  };
}

// ---------------------------------------------------------------- completions explorer

class CompletionsPanel {
  constructor(page) {
    this.page = page;
    this.slots = { a: null, b: null };
    this.stepInput = el("input", { type: "number", min: 1, value: 1, id: "completions-step",
      "aria-label": "Step" });
    this.promptSelect = el("select", { id: "prompt-select", "aria-label": "Prompt", hidden: true });
    this.status = el("span", { class: "muted small" });
    this.compare = el("div", { class: "compare", id: "compare" });
    this.results = el("div", { class: "groups", id: "completion-groups" });
    const button = (label, attrs, action) => {
      const node = el("button", { class: "button subtle", type: "button", ...attrs }, label);
      node.addEventListener("click", action);
      return node;
    };
    this.element = el("div", { class: "panel" },
      el("div", { class: "card toolbar" },
        el("label", null, "Step ", this.stepInput),
        button("◀", { "aria-label": "Previous step" }, () => this.moveStep(-1)),
        button("▶", { "aria-label": "Next step" }, () => this.moveStep(1)),
        button("Show step", { id: "show-step" }, () => this.loadStep()),
        button("Best of step", { id: "best-of-step" }, () => this.jumpTo("best")),
        button("Worst of step", { id: "worst-of-step" }, () => this.jumpTo("worst")),
        el("span", { class: "spacer" }),
        button("Browse by prompt", { id: "load-prompts" }, () => this.loadPrompts()),
        this.promptSelect, this.status),
      el("div", { class: "card" }, el("h2", null, "Compare"), this.compare),
      this.results);
    this.stepInput.addEventListener("change", () => this.loadStep());
    this.promptSelect.addEventListener("change", () => this.showPrompt());
    this.renderCompare();
    this.loaded = false;
  }

  update() {
    const steps = this.page.steps;
    if (steps.length) this.stepInput.max = steps[steps.length - 1].step;
    if (!this.loaded && steps.length) {
      this.loaded = true;
      this.stepInput.value = steps[steps.length - 1].step;
      this.loadStep();
    }
  }

  moveStep(delta) {
    this.stepInput.value = Math.max(1, Number(this.stepInput.value || 1) + delta);
    this.loadStep();
  }

  async loadStep() {
    const step = Number(this.stepInput.value);
    if (!(step >= 1)) return;
    this.status.textContent = `Loading step ${step}…`;
    let rows;
    try {
      ({ rows } = await allPages(jobPath(this.page.jobId, "/completions"), { step }));
    } catch (failure) {
      this.status.textContent = `Could not load step ${step}: ${failure.message}`;
      return;
    }
    this.stepRows = rows;
    this.shownStep = step;
    this.status.textContent = `${rows.length} completions at step ${step}`;
    setChildren(this.results, ...groupsOf(rows, (c) => c.prompt_index).map((group) =>
      this.groupCard(`Prompt ${group[0].prompt_index}` +
        (group[0].dataset_index !== null ? ` · dataset row ${group[0].dataset_index}` : ""),
      group, true)));
    if (!rows.length) setChildren(this.results, el("p", { class: "card muted" }, "No completions at this step."));
  }

  async jumpTo(which) {
    if (this.shownStep !== Number(this.stepInput.value)) await this.loadStep();
    const scored = (this.stepRows || []).filter((c) => c.total !== null);
    if (!scored.length) return;
    const pick = scored.reduce((best, c) =>
      (which === "best" ? c.total > best.total : c.total < best.total) ? c : best);
    this.select(which === "best" ? "a" : "b", pick);
    const row = this.results.querySelector(`[data-completion-id="${pick.id}"]`);
    if (row) {
      row.scrollIntoView({ block: "center" });
      row.classList.add("flash");
      setTimeout(() => row.classList.remove("flash"), 1200);
    }
  }

  async loadPrompts() {
    this.status.textContent = "Loading completions…";
    let rows, complete;
    try {
      ({ rows, complete } = await allPages(jobPath(this.page.jobId, "/completions"), {},
        { maxPages: 20, onPage: (n) => { this.status.textContent = `Loading completions… ${n}`; } }));
    } catch (failure) {
      this.status.textContent = `Could not load completions: ${failure.message}`;
      return;
    }
    this.allRows = rows;
    this.byPrompt = new Map();
    for (const c of rows) {
      const key = c.dataset_index !== null ? `row:${c.dataset_index}` : `text:${promptText(c.prompt)}`;
      if (!this.byPrompt.has(key)) this.byPrompt.set(key, []);
      this.byPrompt.get(key).push(c);
    }
    const options = [...this.byPrompt].map(([key, list]) => {
      const text = promptText(list[0].prompt).replace(/\s+/g, " ");
      const prefix = list[0].dataset_index !== null ? `#${list[0].dataset_index} ` : "";
      return el("option", { value: key },
        `${prefix}${text.length > 70 ? `${text.slice(0, 70)}…` : text} (${list.length})`);
    });
    setChildren(this.promptSelect, el("option", { value: "" }, "Choose a prompt…"), ...options);
    this.promptSelect.hidden = false;
    this.status.textContent = `${rows.length} completions, ${this.byPrompt.size} prompts` +
      (complete ? "" : " (first 20,000 only)");
  }

  showPrompt() {
    const list = this.byPrompt.get(this.promptSelect.value);
    if (!list) return;
    const groups = groupsOf(list, (c) => `${c.step}:${c.prompt_index}`);
    setChildren(this.results, 
      el("div", { class: "card" }, el("h2", null, "Prompt"), el("pre", { class: "text" }, promptText(list[0].prompt))),
      ...groups.map((group) => this.groupCard(`Step ${group[0].step} · config v${group[0].config_version}`, group, false)));
  }

  groupCard(title, group, showPrompt) {
    const names = [...new Set(group.flatMap((c) => Object.keys(c.scores)))].sort();
    const rows = group.sort((a, b) => a.group_position - b.group_position).map((c) => {
      const choose = (slot) => {
        const node = el("button", { class: "button tiny", type: "button",
          "data-choose": slot, title: `Compare as ${slot.toUpperCase()}` }, slot.toUpperCase());
        node.addEventListener("click", () => this.select(slot, c));
        return node;
      };
      return el("tr", { "data-completion-id": c.id },
        el("td", { class: "mono small" }, c.group_position),
        el("td", null, el("pre", { class: "text clip" }, c.completion)),
        names.map((name) => el("td", { class: "num" }, formatNumber(c.scores[name]))),
        el("td", { class: "num strong" }, formatNumber(c.total)),
        el("td", { class: `num ${c.advantage > 0 ? "pos" : c.advantage < 0 ? "neg" : ""}` },
          formatNumber(c.advantage)),
        el("td", { class: "nowrap" }, choose("a"), choose("b")));
    });
    return el("div", { class: "card group" },
      el("h3", null, title),
      showPrompt ? el("pre", { class: "text prompt" }, promptText(group[0].prompt)) : null,
      el("table", { class: "table" },
        el("thead", null, el("tr", null, el("th", null, "#"), el("th", null, "Completion"),
          names.map((name) => el("th", { class: "num" }, name)), el("th", { class: "num" }, "Total"),
          el("th", { class: "num" }, "Advantage"), el("th", null, "Compare"))),
        el("tbody", null, rows)));
  }

  select(slot, completion) {
    this.slots[slot] = completion;
    this.renderCompare();
  }

  renderCompare() {
    setChildren(this.compare, ...["a", "b"].map((slot) => {
      const c = this.slots[slot];
      if (!c) {
        return el("div", { class: "slot empty", "data-slot": slot },
          `${slot.toUpperCase()}: pick a completion below (or Best/Worst of step).`);
      }
      const valueCell = (value, attrs) => el("td", { class: "num", "data-value": value ?? "", ...attrs },
        formatNumber(value));
      return el("div", { class: "slot", "data-slot": slot, "data-completion-id": c.id },
        el("h3", null, `${slot.toUpperCase()} · step ${c.step} · prompt ${c.prompt_index} · #${c.group_position}`),
        el("div", { class: "muted small" }, `completion ${c.id} · config v${c.config_version} · ${c.token_count} tokens`),
        el("pre", { class: "text prompt" }, promptText(c.prompt)),
        el("pre", { class: "text completion" }, c.completion),
        el("table", { class: "table compact" }, el("tbody", null,
          Object.keys(c.scores).sort().map((name) =>
            el("tr", null, el("th", null, name), valueCell(c.scores[name], { "data-score": name }))),
          el("tr", { class: "strong" }, el("th", null, "Total"), valueCell(c.total, { "data-field": "total" })),
          el("tr", null, el("th", null, "Advantage"), valueCell(c.advantage, { "data-field": "advantage" })))));
    }));
  }
}

function groupsOf(rows, keyOf) {
  const groups = new Map();
  for (const row of rows) {
    const key = keyOf(row);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(row);
  }
  return [...groups.values()];
}

// ---------------------------------------------------------------- logs and errors

class FilteredList {
  constructor(page, { id, path, empty, renderItem }) {
    this.page = page;
    this.path = path;
    this.empty = empty;
    this.renderItem = renderItem;
    this.step = el("input", { type: "number", min: 1, placeholder: "any", "aria-label": "Step",
      id: `${id}-step` });
    this.function = el("select", { "aria-label": "Function", id: `${id}-function` },
      el("option", { value: "" }, "all functions"));
    this.list = el("div", { class: "entries", id });
    this.more = el("button", { class: "button subtle", type: "button", hidden: true }, "Load more");
    const apply = el("button", { class: "button", type: "submit" }, "Filter");
    const form = el("form", { class: "card toolbar" }, el("label", null, "Step ", this.step),
      el("label", null, "Function ", this.function), apply);
    form.addEventListener("submit", (event) => { event.preventDefault(); this.load(null); });
    this.more.addEventListener("click", () => this.load(this.cursor));
    this.element = el("div", { class: "panel" }, form, this.list, this.more);
    this.load(null);
  }

  update() {
    const known = new Set([...this.function.options].map((o) => o.value));
    for (const name of this.page.functionNames()) {
      if (!known.has(name)) this.function.append(el("option", { value: name }, name));
    }
  }

  async load(after) {
    const params = { step: this.step.value, function: this.function.value, limit: 100, after };
    let page;
    try {
      page = await api(jobPath(this.page.jobId, this.path), params);
    } catch (failure) {
      setChildren(this.list, el("p", { class: "error" }, failure.message));
      return;
    }
    const items = page.data.map((item) => this.renderItem(item));
    if (after) this.list.append(...items);
    else setChildren(this.list, ...(items.length ? items : [el("p", { class: "card muted" }, this.empty)]));
    this.cursor = page.next_cursor;
    this.more.hidden = !page.has_more;
  }
}

class LogsPanel extends FilteredList {
  constructor(page) {
    super(page, {
      id: "reward-logs", path: "/logs", empty: "No output printed by reward functions here.",
      renderItem: (log) => el("div", { class: "card entry", "data-log-id": log.id },
        el("div", { class: "entry-head" }, el("strong", null, `step ${log.step}`),
          el("span", { class: "mono" }, `${log.function_name}_v${log.function_version}`),
          log.truncated ? el("span", { class: "badge status-failed" }, "truncated") : null),
        el("pre", { class: "text log" }, log.output)),
    });
  }
}

class ErrorsPanel extends FilteredList {
  constructor(page) {
    super(page, {
      id: "reward-errors", path: "/reward-errors", empty: "No reward errors. 🎉",
      renderItem: (error) => el("div", { class: "card entry", "data-error-id": error.id },
        el("div", { class: "entry-head" }, el("strong", null, `step ${error.step}`),
          el("span", { class: "mono" }, `${error.function_name}_v${error.function_version}`),
          el("span", { class: "badge status-failed" }, error.kind),
          error.sample_index !== null ? el("span", { class: "muted" }, `sample ${error.sample_index}`) : null),
        el("pre", { class: "text" }, error.message),
        error.traceback ? el("details", null, el("summary", null, "Traceback"),
          el("pre", { class: "text log" }, error.traceback)) : null),
    });
  }
}

// ---------------------------------------------------------------- config history and diff

// Line diff: common prefix and suffix trimmed, then an LCS table over what is left. Reward
// functions are short, so the quadratic table is fine; past a size limit it falls back to
// "all removed, all added" rather than freezing the tab.
function diffLines(before, after) {
  // A final newline ends the last line; it is not an empty line of its own.
  const lines = (text) => (text === "" ? [] : text.replace(/\n$/, "").split("\n"));
  const a = lines(before), b = lines(after);
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start += 1;
  let endA = a.length, endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) { endA -= 1; endB -= 1; }
  const midA = a.slice(start, endA), midB = b.slice(start, endB);
  const ops = a.slice(0, start).map((line) => [" ", line]);
  if (midA.length * midB.length > 4_000_000) {
    ops.push(...midA.map((line) => ["-", line]), ...midB.map((line) => ["+", line]));
  } else {
    const n = midA.length, m = midB.length;
    const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i -= 1) {
      for (let j = m - 1; j >= 0; j -= 1) {
        table[i][j] = midA[i] === midB[j] ? table[i + 1][j + 1] + 1 :
          Math.max(table[i + 1][j], table[i][j + 1]);
      }
    }
    let i = 0, j = 0;
    while (i < n || j < m) {
      if (i < n && j < m && midA[i] === midB[j]) { ops.push([" ", midA[i]]); i += 1; j += 1; }
      // Removals before additions, as in a unified diff.
      else if (i < n && (j === m || table[i + 1][j] >= table[i][j + 1])) { ops.push(["-", midA[i]]); i += 1; }
      else { ops.push(["+", midB[j]]); j += 1; }
    }
  }
  ops.push(...a.slice(endA).map((line) => [" ", line]));
  return ops;
}

class ConfigPanel {
  constructor(page) {
    this.page = page;
    this.history = el("tbody");
    this.from = el("select", { id: "diff-from", "aria-label": "From version" });
    this.to = el("select", { id: "diff-to", "aria-label": "To version" });
    this.diff = el("div", { id: "config-diff" });
    this.element = el("div", { class: "panel" },
      el("div", { class: "card" }, el("h2", null, "Version history"),
        el("table", { class: "table", id: "config-versions" },
          el("thead", null, el("tr", null, el("th", null, "Version"), el("th", null, "Stored"),
            el("th", null, "Applied at step"), el("th", null, "Functions (weight)"),
            el("th", null, "Sampling"))), this.history)),
      el("div", { class: "card" }, el("h2", null, "Diff"),
        el("div", { class: "toolbar" }, el("label", null, "From ", this.from),
          el("label", null, "to ", this.to)), this.diff));
    this.from.addEventListener("change", () => this.renderDiff());
    this.to.addEventListener("change", () => this.renderDiff());
    this.knownVersion = null;
  }

  // Re-read the history when the job reports a new config version.
  update() {
    const version = this.page.job ? this.page.job.config_version : 0;
    if (version !== this.knownVersion) { this.knownVersion = version; this.load(); }
  }

  async load() {
    try {
      this.versions = await api(jobPath(this.page.jobId, "/config/versions"));
    } catch (failure) {
      setChildren(this.diff, el("p", { class: "error" }, failure.message));
      return;
    }
    setChildren(this.history, ...this.versions.map((v) => el("tr", null,
      el("td", null, `v${v.version}`), el("td", { class: "small" }, formatTime(v.created_at)),
      el("td", null, v.applied_at_step ?? "not yet"),
      el("td", { class: "mono small" }, Object.values(v.reward_functions)
        .map((f) => `${f.label} (${formatNumber(f.weight, 2)})`).join(", ")),
      el("td", { class: "small" }, `temperature ${v.temperature ?? "default"}, top_p ${v.top_p ?? "default"}`))));
    const options = () => this.versions.map((v) => el("option", { value: v.version }, `v${v.version}`));
    setChildren(this.from, ...options());
    setChildren(this.to, ...options());
    const count = this.versions.length;
    this.from.value = this.versions[Math.max(0, count - 2)].version;
    this.to.value = this.versions[count - 1].version;
    this.renderDiff();
  }

  renderDiff() {
    const byVersion = new Map(this.versions.map((v) => [String(v.version), v]));
    const from = byVersion.get(this.from.value), to = byVersion.get(this.to.value);
    if (!from || !to) return;
    const names = [...new Set([...Object.keys(from.reward_functions), ...Object.keys(to.reward_functions)])].sort();
    setChildren(this.diff, ...names.map((name) => {
      const before = from.reward_functions[name], after = to.reward_functions[name];
      const title = !before ? `${name}: added as ${after.label}` : !after ? `${name}: removed` :
        before.version === after.version ? `${name}: ${after.label}, unchanged source` :
          `${name}: ${before.label} → ${after.label}`;
      const weight = before && after && before.weight !== after.weight ?
        ` · weight ${formatNumber(before.weight, 2)} → ${formatNumber(after.weight, 2)}` : "";
      const ops = diffLines(before ? before.source : "", after ? after.source : "");
      const changed = ops.filter(([op]) => op !== " ").length;
      return el("div", { class: "diff", "data-function": name },
        el("h3", null, title + weight, el("span", { class: "muted small" }, ` · ${changed} changed lines`)),
        el("pre", { class: "diff-body" }, ops.map(([op, line]) => el("div", {
          class: op === "+" ? "add" : op === "-" ? "del" : "same" }, `${op} ${line}`))));
    }));
  }
}

route();
