// rft dashboard: plain JavaScript, no build step, no third-party code. views.js (loaded first)
// holds what the job report draws too. Every piece of user content (completions, prompts,
// logs, sources, names) reaches the page through textContent or attribute setters, never
// innerHTML: it is untrusted text.
"use strict";

const KEY_STORAGE = "rft.apiKey";
const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
const TABS = [
  ["charts", "Charts"], ["completions", "Completions"], ["logs", "Reward logs"],
  ["errors", "Reward errors"], ["config", "Config"], ["playground", "Playground"],
];

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
      if (WARNING_KINDS.has(event) && this.job) this.renderHeader();
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
        errors: ErrorsPanel, config: ConfigPanel, playground: PlaygroundPanel }[tab];
      this.panels[tab] = new Panel(this);
    }
    setChildren(this.panelHost, this.panels[tab].element);
    if (this.panels[tab].update) this.panels[tab].update();
  }

  // Validation results ('eval' events), one per evaluated step: a re-run step's newest wins.
  evaluations() {
    const byStep = new Map();
    for (const event of this.events) {
      if (event.kind === "eval" && event.data && event.step !== null) byStep.set(event.step, event.data);
    }
    return [...byStep].sort(([a], [b]) => a - b).map(([step, data]) => ({ ...data, step }));
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
      job.method === "sft" ? ["Method", "supervised (SFT)"] : ["Config", `v${job.config_version}` +
        (job.applied_config_version ? ` (v${job.applied_config_version} applied)` : "")],
      ["Model", el("span", { class: "mono" }, job.base_model)],
      ...(job.parent_job_id ? [["Started from", parentLink(job)]] : []),
      ["Created", formatTime(job.created_at)],
      ["Expected cost", el("span", { id: "job-estimate" }, estimateText(job.cost_estimate))],
      ["GPU time", el("span", { id: "job-gpu-seconds" }, gpuTimeText(job.gpu_seconds))],
      ...(job.eta_seconds !== null && job.eta_seconds !== undefined
        ? [["Time left", el("span", { id: "job-eta" }, `~${durationText(job.eta_seconds)}`)]] : []),
    ];
    setChildren(this.header, 
      el("h1", null, job.name || job.id),
      job.name ? el("div", { class: "muted small mono" }, job.id) : null,
      el("dl", { class: "facts" }, facts.map(([term, value]) =>
        el("div", null, el("dt", null, term), el("dd", null, value)))),
      job.failure_reason ? el("p", { class: "error" }, job.failure_reason) : null,
      warningBanner(this.warnings()));
  }

  // The job's stored warnings, and those that arrived as events since the job was last sent.
  warnings() {
    const seen = new Map();
    const fromEvents = this.events.filter((event) => WARNING_KINDS.has(event.kind))
      .map((event) => ({ ...event.data, message: event.message, step: event.step }));
    for (const warning of [...(this.job.warnings || []), ...fromEvents]) {
      seen.set(`${warning.kind}|${warning.step}|${warning.message}`, warning);
    }
    return [...seen.values()];
  }
}

// Cost (docs/cost.md): the estimate the job was created with, per kind of worker that could
// take it; a kind with nothing measured says so instead of a number.
function durationText(seconds) {
  if (seconds < 90) return `${seconds.toFixed(1)} s`;
  if (seconds < 90 * 60) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function gpuTimeText(seconds) {
  return `${(seconds || 0).toFixed(1)} GPU-seconds`;
}

function estimateText(estimate) {
  if (!estimate) return "no estimate";
  const parts = estimate.workers.map((entry) => entry.basis === "measured"
    ? `${entry.device_kind}: ${durationText(entry.total_seconds)}, ` +
      `${entry.gpu_hours.toPrecision(3)} GPU-hours`
    : `${entry.device_kind}: ${entry.message}`);
  if (estimate.note) parts.push(estimate.note);
  return parts.join("; ") || "no estimate";
}

// A job created with init_from links to the job whose weights it started from. The lineage
// outlives that job: once it is deleted, its page says it is not found.
function parentLink(job) {
  const step = job.parent_checkpoint_step;
  return el("span", { id: "job-parent" },
    el("a", { class: "mono", href: `#/jobs/${encodeURIComponent(job.parent_job_id)}` },
      job.parent_job_id),
    step === null || step === undefined ? " (final adapter)" : ` (checkpoint ${step})`,
    job.init_from_optimizer ? ", with its optimizer state" : "");
}

// Events that are also one of the job's warnings: a guard's trip is one, with its evidence.
const WARNING_KINDS = new Set(["warning", "guard_tripped"]);


const SMOOTHING_STORAGE = "rft.smoothing";
// The feed scrolls inside its card: enough entries that a pause is still there after the
// warnings, evaluations and checkpoint runs a long job adds behind it.
const FEED_LENGTH = 60;
// Saved every few steps: alone they would push every other event out of the feed.
const COLLAPSED_KINDS = new Set(["checkpoint"]);

class ChartsPanel {
  constructor(page) {
    this.page = page;
    let saved = {};
    try { saved = JSON.parse(localStorage.getItem(SMOOTHING_STORAGE) || "{}") || {}; } catch { /* reset */ }
    this.smoothOn = Boolean(saved.on);
    this.smoothWeight = Number.isFinite(saved.weight) ? saved.weight : 0.6;
    this.tiles = el("div", { class: "tiles" });
    this.smoothToggle = el("input", { type: "checkbox", id: "smooth-toggle", checked: this.smoothOn });
    this.smoothSlider = el("input", { type: "range", id: "smooth-weight", min: 0, max: 0.95,
      step: 0.05, value: this.smoothWeight, "aria-label": "Smoothing weight", disabled: !this.smoothOn });
    this.smoothValue = el("span", { class: "muted small mono" }, this.smoothWeight.toFixed(2));
    const onSmoothing = () => {
      this.smoothOn = this.smoothToggle.checked;
      this.smoothWeight = Number(this.smoothSlider.value);
      this.smoothSlider.disabled = !this.smoothOn;
      this.smoothValue.textContent = this.smoothWeight.toFixed(2);
      localStorage.setItem(SMOOTHING_STORAGE,
        JSON.stringify({ on: this.smoothOn, weight: this.smoothWeight }));
      this.update();
    };
    this.smoothToggle.addEventListener("change", onSmoothing);
    this.smoothSlider.addEventListener("input", onSmoothing);
    this.charts = el("div", { class: "charts" });
    this.feed = el("ol", { class: "feed", id: "event-feed" });
    this.element = el("div", { class: "panel" }, this.tiles,
      el("div", { class: "chart-controls" },
        el("label", null, this.smoothToggle, " Smooth lines (moving average)"),
        this.smoothSlider, this.smoothValue,
        el("span", { class: "spacer" }),
        el("span", { class: "legend marker-legend muted small" },
          el("span", { class: "marker-key kind-config" }, "config change"),
          el("span", { class: "marker-key kind-pause" }, "paused"),
          el("span", { class: "marker-key kind-resume" }, "resumed"),
          el("span", { class: "marker-key kind-guard" }, "guard tripped"))),
      this.charts,
      el("div", { class: "card" }, el("h2", null, "Events"), this.feed));
    this.pending = false;
  }

  // Many steps can arrive at once during replay: draw once per frame, not once per step.
  update() {
    if (this.pending) return;
    this.pending = true;
    requestAnimationFrame(() => { this.pending = false; this.render(); });
  }

  chartMarkers() { return chartMarkers(this.page.steps, this.page.events); }

  // Runs of collapsible events (checkpoints) become one entry; the newest entries first.
  feedEntries() {
    const entries = [];
    for (const event of this.page.events) {
      const last = entries[entries.length - 1];
      if (COLLAPSED_KINDS.has(event.kind) && last && last.kind === event.kind) {
        last.events.push(event);
      } else {
        entries.push({ kind: event.kind, events: [event] });
      }
    }
    return entries.slice(-FEED_LENGTH).reverse();
  }

  feedItem({ kind, events }) {
    const latest = events[events.length - 1];
    const badge = el("span", { class: `kind kind-${kind}` }, kind);
    const when = el("span", { class: "muted small" }, formatTime(latest.created_at));
    if (events.length === 1) {
      return el("li", { "data-kind": kind }, badge, el("span", null, latest.message), when);
    }
    const steps = events.map((event) => event.step).filter((step) => step !== null);
    const summary = `${events.length} ${kind}s saved` +
      (steps.length ? ` (steps ${steps[0]}–${steps[steps.length - 1]})` : "");
    return el("li", { "data-kind": kind, "data-count": events.length, class: "collapsed" }, badge,
      el("details", null, el("summary", null, summary),
        el("ul", { class: "feed-detail" }, events.map((event) => el("li", null, event.message)))),
      when);
  }

  render() {
    const steps = this.page.steps;
    const markers = this.chartMarkers();
    const smoothing = this.smoothOn ? this.smoothWeight : 0;
    const last = steps[steps.length - 1];
    const evals = this.page.evaluations();
    const lastEval = evals[evals.length - 1];
    // Supervised jobs have a loss and no reward: their own tiles and charts.
    const supervised = Boolean(this.page.job && this.page.job.method === "sft");
    const tiles = supervised ? supervisedTiles(steps) : [
      ["Steps recorded", steps.length],
      ["Reward (last step)", last ? formatNumber(last.reward_mean) : "–"],
      ["Reward std", last ? formatNumber(last.reward_std) : "–"],
      ["Loss", last ? formatNumber(last.loss) : "–"],
      ["KL", last ? formatNumber(last.kl) : "–"],
      // Groups whose completions all got the same reward teach GRPO nothing.
      ["Groups without signal", last && last.frac_reward_zero_std !== null &&
        last.frac_reward_zero_std !== undefined
        ? `${Math.round(last.frac_reward_zero_std * 100)} %` : "–"],
      ["Seconds per step", last ? formatNumber(last.duration_s, 2) : "–"],
      ...(lastEval ? [[`Validation reward (step ${lastEval.step})`,
        formatNumber(lastEval.reward_mean)]] : []),
      ...(last && last.agent_metrics ? [
        ["Tool calls per rollout", formatNumber(last.agent_metrics.tool_calls_per_rollout, 2)],
        ["Rollouts cut off", `${Math.round(last.agent_metrics.truncated_share * 100)} %`]] : []),
    ];
    setChildren(this.tiles, ...tiles.map(([label, value]) =>
      el("div", { class: "tile" }, el("div", { class: "tile-value" }, value),
        el("div", { class: "tile-label" }, label))));

    const colorOf = colorAssigner();
    if (supervised) setChildren(this.charts, ...supervisedCharts(steps, markers, smoothing));
    else setChildren(this.charts, ...rewardCharts(steps, evals, { markers, smoothing, colorOf }),
      ...agentCharts(steps, markers, smoothing, colorOf),
      ...asyncGenerationCharts(steps, markers, colorOf));

    // An open list of checkpoints stays open across redraws.
    const open = new Set([...this.feed.querySelectorAll("details[open]")]
      .map((node) => node.closest("li").dataset.first));
    const entries = this.feedEntries();
    setChildren(this.feed, ...(entries.length ? entries.map((entry) => {
      const item = this.feedItem(entry);
      item.dataset.first = entry.events[0].id;
      const details = item.querySelector("details");
      if (details && open.has(String(entry.events[0].id))) details.open = true;
      return item;
    }) : [el("li", { class: "muted" }, "No events yet.")]));
  }
}

// Supervised (method "sft") jobs: the loss per step (and the validation loss where it was
// measured), and the share of answer tokens the model predicts.
function supervisedTiles(steps) {
  const last = steps[steps.length - 1];
  const metric = (step, key) => (step && step.metrics ? step.metrics[key] : undefined);
  const evaluated = steps.filter((s) => metric(s, "eval_loss") !== undefined);
  const lastEval = evaluated[evaluated.length - 1];
  return [
    ["Steps recorded", steps.length],
    ["Loss (last step)", last ? formatNumber(last.loss) : "–"],
    ["Token accuracy", last && metric(last, "mean_token_accuracy") !== undefined
      ? `${Math.round(metric(last, "mean_token_accuracy") * 100)} %` : "–"],
    ["Learning rate", last ? formatNumber(last.learning_rate) : "–"],
    ["Seconds per step", last ? formatNumber(last.duration_s, 2) : "–"],
    ...(lastEval ? [[`Validation loss (step ${lastEval.step})`,
      formatNumber(metric(lastEval, "eval_loss"))]] : []),
  ];
}

function supervisedCharts(steps, markers, smoothing) {
  const metricPoints = (key) => steps.filter((s) => s.metrics && s.metrics[key] !== undefined)
    .map((s) => ({ x: s.step, y: s.metrics[key] }));
  const validation = metricPoints("eval_loss");
  return [
    lineChart({
      id: "loss", title: "Training loss", yLabel: "loss", markers, smoothing,
      series: [{ label: "loss", color: PALETTE[0],
        points: steps.map((s) => ({ x: s.step, y: s.loss })) },
      ...(validation.length ? [{ label: "validation", color: VALIDATION_COLOR, sparse: true,
        points: validation }] : [])],
    }),
    lineChart({
      id: "token-accuracy", title: "Token accuracy (answer tokens predicted)",
      yLabel: "accuracy", markers, fixedRange: [0, 1], smoothing,
      series: [{ label: "training", color: PALETTE[1],
        points: metricPoints("mean_token_accuracy") }],
    }),
  ];
}

// Agent jobs (steps with agent_metrics): how much the rollouts use their tools, and how often
// each tool fails. Jobs without tools draw neither.
function agentCharts(steps, markers, smoothing, colorOf) {
  const agentSteps = steps.filter((s) => s.agent_metrics);
  if (!agentSteps.length) return [];
  const errorsByTool = new Map();
  for (const step of agentSteps) {
    for (const [name, metrics] of Object.entries(step.agent_metrics.tools || {})) {
      if (!errorsByTool.has(name)) errorsByTool.set(name, []);
      errorsByTool.get(name).push({ x: step.step, y: metrics.error_rate });
    }
  }
  return [
    lineChart({
      id: "agent-turns", title: "Tool calls and turns per rollout", yLabel: "per rollout",
      markers, smoothing,
      series: [
        { label: "tool calls", color: colorOf("agent:calls"),
          points: agentSteps.map((s) => ({ x: s.step, y: s.agent_metrics.tool_calls_per_rollout })) },
        { label: "turns", color: colorOf("agent:turns"),
          points: agentSteps.map((s) => ({ x: s.step, y: s.agent_metrics.turns_per_rollout })) },
      ],
    }),
    lineChart({
      id: "tool-errors", title: "Tool error rate (per tool)", yLabel: "errors", markers,
      fixedRange: [0, 1], smoothing,
      series: [...errorsByTool].sort(([a], [b]) => a.localeCompare(b))
        .map(([name, points]) => ({ label: name, points, color: colorOf(`tool-errors:${name}`) })),
    }),
  ];
}

// Async-generation jobs (steps with async_generation): how many policy versions old each step's
// rollouts were, against the job's bound, and the importance-sampling ratios that corrected it.
function asyncGenerationCharts(steps, markers, colorOf) {
  const asyncSteps = steps.filter((s) => s.async_generation);
  if (!asyncSteps.length) return [];
  const ratio = (name) => asyncSteps
    .filter((s) => s.async_generation.importance_sampling_ratio[name] !== null)
    .map((s) => ({ x: s.step, y: s.async_generation.importance_sampling_ratio[name] }));
  return [
    lineChart({
      id: "staleness", title: "Rollout staleness (policy versions behind)", yLabel: "versions",
      markers, smoothing: 0,
      series: [
        { label: "staleness", color: colorOf("async:staleness"),
          points: asyncSteps.map((s) => ({ x: s.step, y: s.async_generation.staleness_max })) },
        { label: "bound", color: colorOf("async:bound"),
          points: asyncSteps.map((s) => ({ x: s.step, y: s.async_generation.max_staleness })) },
      ],
    }),
    lineChart({
      id: "is-ratio", title: "Importance-sampling ratio (min, mean, max)", yLabel: "ratio",
      markers, smoothing: 0,
      series: ["min", "mean", "max"].map((name) => (
        { label: name, color: colorOf(`async:is-${name}`), points: ratio(name) })),
    }),
  ];
}

// ---------------------------------------------------------------- completions explorer

const MANY_SCORES = 4;

class CompletionsPanel {
  constructor(page) {
    this.page = page;
    this.slots = { a: null, b: null };
    this.stepInput = el("input", { type: "number", min: 1, value: 1, id: "completions-step",
      "aria-label": "Step" });
    this.promptSelect = el("select", { id: "prompt-select", "aria-label": "Prompt", hidden: true });
    this.status = el("span", { class: "muted small", id: "completions-status" });
    this.loading = 0;
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
    // A step the user typed before the job's steps arrived must not be replaced by the latest.
    this.stepInput.addEventListener("input", () => { this.userChoseStep = true; });
    this.userChoseStep = false;
    this.promptSelect.addEventListener("change", () => this.showPrompt());
    this.renderCompare();
    this.loaded = false;
  }

  update() {
    const steps = this.page.steps;
    if (steps.length) this.stepInput.max = steps[steps.length - 1].step;
    if (!this.loaded && steps.length) {
      this.loaded = true;
      if (!this.userChoseStep) {
        this.stepInput.value = steps[steps.length - 1].step;
        this.loadStep();
      }
    }
  }

  moveStep(delta) {
    this.userChoseStep = true;
    this.stepInput.value = Math.max(1, Number(this.stepInput.value || 1) + delta);
    this.loadStep();
  }

  async loadStep() {
    const step = Number(this.stepInput.value);
    if (!(step >= 1)) return null;
    this.status.textContent = `Loading step ${step}…`;
    // Only the latest request draws: an earlier, slower one must not replace its result.
    const request = ++this.loading;
    let rows;
    try {
      ({ rows } = await allPages(jobPath(this.page.jobId, "/completions"), { step }));
    } catch (failure) {
      if (request === this.loading) this.status.textContent = `Could not load step ${step}: ${failure.message}`;
      return null;
    }
    // A superseded request still hands its rows to whoever awaited it (best/worst of step).
    if (request !== this.loading) return rows;
    this.stepRows = rows;
    this.shownStep = step;
    this.status.textContent = `${rows.length} completions at step ${step}`;
    setChildren(this.results, ...groupsOf(rows, (c) => c.prompt_index).map((group) =>
      this.groupCard(`Prompt ${group[0].prompt_index}` +
        (group[0].dataset_index !== null ? ` · dataset row ${group[0].dataset_index}` : ""),
      group, true)));
    if (!rows.length) setChildren(this.results, el("p", { class: "card muted" }, "No completions at this step."));
    return rows;
  }

  async jumpTo(which) {
    // The rows of the step in the box, even while a later click's load is drawing.
    const rows = this.shownStep === Number(this.stepInput.value) ? this.stepRows : await this.loadStep();
    const scored = (rows || []).filter((c) => c.total !== null);
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
    this.loading += 1; // a step still loading must not replace this view
    const groups = groupsOf(list, (c) => `${c.step}:${c.prompt_index}`);
    setChildren(this.results, 
      el("div", { class: "card" }, el("h2", null, "Prompt"), el("pre", { class: "text" }, promptText(list[0].prompt))),
      ...groups.map((group) => this.groupCard(`Step ${group[0].step} · config v${group[0].config_version}`, group, false)));
  }

  groupCard(title, group, showPrompt) {
    const names = [...new Set(group.flatMap((c) => Object.keys(c.scores)))].sort();
    // Fixed column widths: the completion takes what the scores leave. With many functions the
    // score columns narrow and their names stand upright, so the text stays wide.
    const many = names.length >= MANY_SCORES;
    const digits = many ? 3 : 4;
    const rows = group.sort((a, b) => a.group_position - b.group_position).map((c) => {
      const choose = (slot) => {
        const node = el("button", { class: "button tiny", type: "button",
          "data-choose": slot, title: `Compare as ${slot.toUpperCase()}` }, slot.toUpperCase());
        node.addEventListener("click", () => this.select(slot, c));
        return node;
      };
      return el("tr", { "data-completion-id": c.id },
        el("td", { class: "mono small" }, c.group_position),
        el("td", { class: "completion-cell" }, el("pre", { class: "text clip" }, c.completion),
          c.trajectory ? trajectoryFold(c.trajectory) : null),
        names.map((name) => el("td", { class: "num score", "data-score": name,
          title: `${name}: ${c.scores[name] ?? "no score"}` }, formatNumber(c.scores[name], digits))),
        el("td", { class: "num strong" }, formatNumber(c.total, digits)),
        el("td", { class: `num ${c.advantage > 0 ? "pos" : c.advantage < 0 ? "neg" : ""}` },
          formatNumber(c.advantage, digits)),
        el("td", { class: "nowrap" }, choose("a"), choose("b")));
    });
    const scoreWidth = many ? 54 : 100;
    return el("div", { class: "card group" },
      el("h3", null, title),
      showPrompt ? el("pre", { class: "text prompt" }, promptText(group[0].prompt)) : null,
      el("div", { class: "table-scroll" },
        el("table", { class: `table completions${many ? " many-scores" : ""}`,
          "data-functions": names.length },
        el("colgroup", null, el("col", { style: "width: 34px" }), el("col"),
          names.map(() => el("col", { style: `width: ${scoreWidth}px` })),
          el("col", { style: `width: ${many ? 58 : 72}px` }),
          el("col", { style: `width: ${many ? 64 : 84}px` }), el("col", { style: "width: 78px" })),
        el("thead", null, el("tr", null, el("th", null, "#"), el("th", null, "Completion"),
          names.map((name) => el("th", { class: "num score-name", title: name },
            el("span", null, name))),
          el("th", { class: "num" }, "Total"),
          el("th", { class: "num", title: "Advantage" }, many ? "Adv." : "Advantage"), el("th", null, "Compare"))),
        el("tbody", null, rows))));
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
        c.trajectory ? el("div", { class: "muted small" }, trajectorySummary(c.trajectory)) : null,
        c.trajectory ? trajectoryView(c.trajectory) : null,
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

// ---------------------------------------------------------------- config history

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
        .map((f) => `${f.label} (${formatWeight(f.weight)})`).join(", ")),
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
    setChildren(this.diff, configDiff(from, to, { id: "config-changes" }));
  }
}

// ---------------------------------------------------------------- playground

// POST a JSON body; errors as api() words them (422s list pydantic's problems).
async function apiPost(path, body) {
  const response = await fetch(new URL(path, window.location.origin), {
    method: "POST",
    headers: { Authorization: `Bearer ${apiKey()}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) {
    const detail = Array.isArray(payload.detail) ?
      payload.detail.map((problem) => `${problem.loc.slice(1).join(".")}: ${problem.msg}`).join("; ") :
      payload.detail || response.statusText;
    if (response.status === 401) signOut("Your API key was refused.");
    throw new ApiError(response.status, detail);
  }
  return payload;
}

// One prompt, two models side by side (base vs adapter, or two checkpoints), each answer
// scored by the job's current reward functions through the same test endpoint as the API's.
class PlaygroundPanel {
  constructor(page) {
    this.page = page;
    this.prompt = el("textarea", { id: "playground-prompt", class: "text", rows: 3,
      "aria-label": "Prompt", placeholder: "A prompt, as a user message" });
    this.left = el("select", { id: "playground-left", "aria-label": "Left model" });
    this.right = el("select", { id: "playground-right", "aria-label": "Right model" });
    this.maxTokens = el("input", { id: "playground-max-tokens", type: "number", min: 1,
      value: 64, "aria-label": "Max tokens" });
    this.temperature = el("input", { id: "playground-temperature", type: "number", min: 0,
      max: 2, step: 0.1, value: 0, "aria-label": "Temperature" });
    this.run = el("button", { id: "playground-run", class: "button", type: "button" }, "Generate");
    this.message = el("p", { class: "muted small", id: "playground-message" },
      "Temperature 0 decodes greedily: the same answer every time.");
    this.slots = [this.slot("left"), this.slot("right")];
    this.element = el("div", { class: "panel" },
      el("div", { class: "card" }, el("h2", null, "Playground"), this.prompt,
        el("div", { class: "toolbar" }, el("label", null, "Left ", this.left),
          el("label", null, "Right ", this.right),
          el("label", null, "Max tokens ", this.maxTokens),
          el("label", null, "Temperature ", this.temperature), this.run),
        this.message),
      el("div", { class: "compare", id: "playground-results" },
        this.slots.map((slot) => slot.element)));
    this.run.addEventListener("click", () => this.generate());
    this.knownModels = "";
  }

  slot(side) {
    const answer = el("div", { class: "text completion", "data-answer": side });
    const title = el("div", { class: "strong mono small" });
    const scores = el("table", { class: "table", "data-scores": side });
    return { side, answer, title, scores,
      element: el("div", { class: "slot", id: `playground-${side}-result` }, title, answer, scores) };
  }

  // Models to offer: the base model, the final adapter once there is one, every checkpoint.
  // Re-listed when the job moves on (a new step may have saved a checkpoint), not per event.
  update() {
    const job = this.page.job;
    const progress = job ? `${job.status}:${job.steps_completed}` : "";
    if (!job || progress === this.knownProgress) return;
    this.knownProgress = progress;
    this.loadModels();
  }

  async loadModels() {
    const job = this.page.job;
    let checkpoints;
    try {
      checkpoints = await api(jobPath(job.id, "/checkpoints"));
    } catch (failure) {
      this.message.textContent = `Could not list checkpoints: ${failure.message}`;
      return;
    }
    const models = [[job.base_model, `base: ${job.base_model}`]];
    if (checkpoints.final_adapter_path) models.push([job.id, "final adapter"]);
    for (const checkpoint of [...checkpoints.data].reverse()) {
      models.push([`${job.id}:checkpoint-${checkpoint.step}`, `checkpoint ${checkpoint.step}`]);
    }
    const signature = models.map(([value]) => value).join("|");
    if (signature === this.knownModels) return;
    this.knownModels = signature;
    const keep = [this.left.value, this.right.value];
    const options = () => models.map(([value, label]) => el("option", { value }, label));
    setChildren(this.left, options());
    setChildren(this.right, options());
    const values = models.map(([value]) => value);
    this.left.value = values.includes(keep[0]) && keep[0] ? keep[0] : values[0];
    this.right.value = values.includes(keep[1]) && keep[1] ? keep[1] : values[Math.min(1, values.length - 1)];
  }

  async generate() {
    const text = this.prompt.value;
    if (!text.trim()) { this.message.textContent = "Write a prompt first."; return; }
    const messages = [{ role: "user", content: text }];
    const settings = { max_tokens: Number(this.maxTokens.value) || 64,
      temperature: Number(this.temperature.value) || 0 };
    this.run.disabled = true;
    this.message.textContent = "Generating…";
    for (const slot of this.slots) slot.element.dataset.state = "running";
    let config = null;
    try {
      config = await api(jobPath(this.page.jobId, "/config"));
    } catch (failure) {
      this.message.textContent = `Could not read the job's reward functions: ${failure.message}`;
    }
    const models = [this.left.value, this.right.value];
    await Promise.all(this.slots.map((slot, index) =>
      this.fill(slot, models[index], messages, settings, config)));
    this.run.disabled = false;
    this.message.textContent = "Scored by the job's current reward functions" +
      (config ? ` (config v${config.version}).` : ".");
  }

  async fill(slot, model, messages, settings, config) {
    setChildren(slot.title, model);
    setChildren(slot.answer, "…");
    setChildren(slot.scores);
    slot.element.dataset.state = "running";
    let answer;
    try {
      const reply = await apiPost("/v1/chat/completions", { model, messages, ...settings });
      answer = reply.choices[0].message.content;
    } catch (failure) {
      slot.answer.textContent = "";
      setChildren(slot.scores, el("tr", null, el("td", { class: "error" }, failure.message)));
      slot.element.dataset.state = "error";
      return;
    }
    slot.answer.textContent = answer;
    if (config) await this.score(slot, messages, answer, config);
    slot.element.dataset.state = "done";
  }

  async score(slot, messages, answer, config) {
    const functions = {};
    for (const [name, fn] of Object.entries(config.reward_functions)) {
      // A reward model is checked there, not run (the API has no model runtime).
      functions[name] = fn.model ? { model: fn.model, weight: fn.weight } :
        { source: fn.source, weight: fn.weight };
    }
    let result;
    try {
      result = await apiPost("/v1/reward-functions/test", {
        reward_functions: functions, allow_network: config.allow_network,
        samples: [{ prompt: messages, completion: answer }],
      });
    } catch (failure) {
      setChildren(slot.scores, el("tr", null, el("td", { class: "error" },
        `Scoring failed: ${failure.message}`)));
      return;
    }
    const rows = Object.entries(result.results).map(([name, outcome]) => el("tr",
      { "data-function": name }, el("td", { class: "mono small" }, name),
      el("td", { class: "num", "data-score": name }, outcome.errors.length ?
        el("span", { class: "error", title: outcome.errors[0].message }, "error") :
        formatNumber(outcome.scores[0]))));
    rows.push(el("tr", null, el("td", { class: "strong" }, "total"),
      el("td", { class: "num strong", "data-score": "total" }, formatNumber(result.totals[0]))));
    setChildren(slot.scores, rows);
  }
}

route();
