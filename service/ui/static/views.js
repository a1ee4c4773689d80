// rft views: the pieces the dashboard (app.js) and the job report (GET /v1/jobs/{id}/report.html,
// which inlines this file) both draw: DOM helpers, line charts, warnings, config diffs.
// Plain JavaScript, no build step, no third-party code, no requests. Every piece of user
// content reaches the page through textContent or attribute setters, never innerHTML.
"use strict";

const PALETTE = ["#2563eb", "#d97706", "#059669", "#dc2626", "#7c3aed", "#0891b2",
  "#db2777", "#65a30d", "#ea580c", "#4f46e5"];
const VALIDATION_COLOR = "#111827"; // near black: apart from every function colour

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

// Weights are typed by people: 0.5 reads better than 0.50, and 1 than 1.0000.
function formatWeight(weight) {
  return String(Number(Number(weight).toPrecision(4)));
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

function colorAssigner() {
  const assigned = new Map();
  return (key) => {
    if (!assigned.has(key)) assigned.set(key, PALETTE[assigned.size % PALETTE.length]);
    return assigned.get(key);
  };
}

// Warnings say the run may not be learning (no reward signal, signs of reward hacking): they
// stay in view above the tabs, not only in the event feed. A tripped guard shows its first
// example completion, the evidence, beside its message.
function warningBanner(warnings) {
  if (!warnings.length) return null;
  const title = warnings.length === 1 ? "1 warning" : `${warnings.length} warnings`;
  return el("div", { class: "warning-banner", id: "job-warnings", role: "alert" },
    el("strong", null, `⚠ ${title}`),
    el("ul", null, warnings.map((warning) => el("li", { "data-warning-kind": warning.kind },
      warning.step !== null && warning.step !== undefined
        ? el("span", { class: "muted small" }, `step ${warning.step}: `) : null,
      warning.message,
      warning.guard && warning.examples && warning.examples.length
        ? el("div", { class: "guard-example mono small" },
          `e.g. ${JSON.stringify(warning.examples[0].completion)}`) : null))));
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

// Exponential moving average as TensorBoard draws it: debiased, so the first points are not
// pulled towards zero; gaps (null) stay gaps and do not reset the average.
function smoothPoints(points, weight) {
  if (!(weight > 0)) return points;
  let average = 0, count = 0;
  return points.map((p) => {
    if (p.y === null) return p;
    average = average * weight + (1 - weight) * p.y;
    count += 1;
    return { x: p.x, y: average / (1 - weight ** count) };
  });
}

const MARKER_FONT_WIDTH = 6.3; // per character of an 11px label, in viewBox units
const MARKER_LANES = 4;
const MARKER_LANE_HEIGHT = 14;

// Markers close together would print their labels over each other: each label takes the first
// lane (row) where it fits; past the last lane the label is left out (the line keeps a <title>).
function layoutMarkers(markers, sx, left, right) {
  const laneEnds = [];
  return [...markers].sort((a, b) => a.x - b.x).map((marker) => {
    const x = sx(marker.x);
    const width = marker.label.length * MARKER_FONT_WIDTH;
    const flip = x + 4 + width > right; // near the right edge: the label goes left of the line
    const start = flip ? x - 4 - width : x + 4;
    let lane = laneEnds.findIndex((end) => end + 4 <= start);
    if (lane === -1 && laneEnds.length < MARKER_LANES) lane = laneEnds.length;
    if (lane !== -1) laneEnds[lane] = start + width;
    return { ...marker, px: x, lane, flip, start: Math.max(left, start) };
  });
}

function drawPath(points, sx, sy) {
  let path = "";
  let drawing = false;
  for (const p of points) {
    if (p.y === null) { drawing = false; continue; }
    path += `${drawing ? "L" : "M"}${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`;
    drawing = true;
  }
  return path;
}

// series: [{label, color, points: [{x, y}]}]; band: {color, points: [{x, low, high}]};
// markers: [{x, label, kind}] (kind: config, pause, resume, guard); smoothing: the EMA weight, 0 for
// none. The SVG carries data-points (plotted points), for tests and tooling.
function lineChart({ id, title, series, band, markers = [], yLabel, fixedRange, smoothing = 0 }) {
  const width = 760, height = 240;
  const margin = { top: 14, right: 16, bottom: 42, left: 56 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const xs = series.flatMap((s) => s.points.map((p) => p.x));
  const ys = series.flatMap((s) => s.points.map((p) => p.y)).filter((y) => y !== null);
  if (band) for (const p of band.points) ys.push(p.low, p.high);
  const pointCount = series.reduce((sum, s) => sum + s.points.filter((p) => p.y !== null).length, 0);

  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, class: "chart", role: "img",
    "aria-label": title, "data-chart": id, "data-points": pointCount, "data-smoothing": smoothing });
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
  for (const marker of layoutMarkers(markers, sx, margin.left, width - margin.right)) {
    // A resume often follows its pause at the same step: the two lines sit side by side.
    const x = marker.px + (marker.kind === "pause" ? -1.5 : marker.kind === "resume" ? 1.5 : 0);
    svg.append(svgEl("g", { class: `marker kind-${marker.kind || "config"}`,
      "data-marker-step": marker.x, "data-marker-kind": marker.kind || "config" },
    svgEl("title", null, `step ${marker.x}: ${marker.label}`),
    svgEl("line", { x1: x, x2: x, y1: margin.top, y2: margin.top + plotHeight }),
    marker.lane === -1 ? null : svgEl("text", { x: marker.start,
      y: margin.top + 10 + marker.lane * MARKER_LANE_HEIGHT }, marker.label)));
  }
  for (const s of series) {
    // Sparse series (validation every few steps) are drawn as measured, with a dot per point.
    s.shown = s.sparse ? s.points : smoothPoints(s.points, smoothing);
    if (smoothing > 0 && !s.sparse) {
      // The raw values stay visible, faint, behind the smoothed line.
      svg.append(svgEl("path", { d: drawPath(s.points, sx, sy), class: "line raw", stroke: s.color,
        "data-raw-series": s.label }));
    }
    svg.append(svgEl("path", { d: drawPath(s.shown, sx, sy), class: "line", stroke: s.color,
      "data-series": s.label }));
    const lone = s.points.filter((p) => p.y !== null);
    if (s.sparse) {
      for (const p of lone) {
        svg.append(svgEl("circle", { cx: sx(p.x), cy: sy(p.y), r: 3, fill: s.color,
          "data-point-of": s.label }));
      }
    } else if (lone.length === 1) {
      svg.append(svgEl("circle", { cx: sx(lone[0].x), cy: sy(lone[0].y), r: 3, fill: s.color }));
    }
  }
  attachHover(figure, svg, { series, band, sx, xMin, xMax, margin, plotWidth, plotHeight, width });
  return figure;
}

// A GRPO run's reward charts: the total (with validation beside it), each function version,
// validation per function (when evaluated) and the error rate per function.
function rewardCharts(steps, evals, { markers = [], smoothing = 0, colorOf = colorAssigner() } = {}) {
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
  return [
    lineChart({
      id: "reward", title: "Total reward (mean ± std)", yLabel: "reward", markers, smoothing,
      series: [{ label: "reward", color: PALETTE[0],
        points: steps.map((s) => ({ x: s.step, y: s.reward_mean })) },
      // The adapter on the validation prompts, beside the training reward.
      ...(evals.length ? [{ label: "validation", color: VALIDATION_COLOR, sparse: true,
        points: evals.map((e) => ({ x: e.step, y: e.reward_mean })) }] : [])],
      band: { color: PALETTE[0], points: steps.filter((s) => s.reward_mean !== null)
        .map((s) => ({ x: s.step, low: s.reward_mean - (s.reward_std || 0),
          high: s.reward_mean + (s.reward_std || 0) })) },
    }),
    lineChart({
      id: "functions", title: "Reward functions (mean, per version)", yLabel: "score", markers,
      smoothing,
      series: [...byLabel].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }))
        .map(([label, points]) => ({ label, points, color: colorOf(label) })),
    }),
    evals.length ? lineChart({
      id: "validation", title: "Validation reward (per function, on held-out prompts)",
      yLabel: "score", markers,
      series: [{ label: "total", color: VALIDATION_COLOR, sparse: true,
        points: evals.map((e) => ({ x: e.step, y: e.reward_mean })) },
      ...[...new Set(evals.flatMap((e) => Object.keys(e.reward_functions || {})))].sort()
        .map((name) => ({ label: name, color: colorOf(`validation:${name}`), sparse: true,
          points: evals.map((e) => ({ x: e.step,
            y: e.reward_functions[name] ? e.reward_functions[name].mean : null })) }))],
    }) : null,
    lineChart({
      id: "errors", title: "Reward error rate (per function)", yLabel: "errors", markers,
      fixedRange: [0, 1], smoothing,
      series: [...errorsByName].map(([name, points]) => ({ label: name, points,
        color: colorOf(`errors:${name}`) })),
    }),
  ];
}

// Config changes (from the steps, and config_applied events), pauses, resumes and guard trips
// (events): [{x, label, kind}], as lineChart takes them.
function chartMarkers(steps, events) {
  const configs = new Map();
  let previous = null;
  for (const step of steps) {
    if (previous !== null && step.config_version !== previous) {
      configs.set(step.step, `config v${step.config_version}`);
    }
    previous = step.config_version;
  }
  const markers = [];
  for (const event of events) {
    if (event.kind === "config_applied" && event.step) {
      configs.set(event.step, `config v${event.data.config_version}`);
    } else if (event.kind === "paused" && event.step !== null && event.step !== undefined) {
      markers.push({ x: event.step, label: "paused", kind: "pause" });
    } else if (event.kind === "guard_tripped" && event.step !== null && event.step !== undefined) {
      markers.push({ x: event.step, label: event.data.kind, kind: "guard" });
    } else if (event.kind === "resumed" && event.data && event.data.checkpoint_step !== undefined) {
      markers.push({ x: event.data.checkpoint_step, label: "resumed", kind: "resume" });
    }
  }
  return [...[...configs].map(([x, label]) => ({ x, label, kind: "config" })), ...markers];
}

function attachHover(figure, svg, { series, band, sx, xMin, xMax, margin, plotWidth, plotHeight, width }) {
  const cursor = svgEl("line", { class: "cursor", y1: margin.top, y2: margin.top + plotHeight,
    visibility: "hidden" });
  const overlay = svgEl("rect", { x: margin.left, y: margin.top, width: plotWidth,
    height: plotHeight, fill: "transparent" });
  const tip = el("div", { class: "tooltip", hidden: true, "data-tooltip": svg.dataset.chart });
  svg.append(cursor, overlay);
  figure.append(tip);
  overlay.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const x = ((event.clientX - box.left) / box.width) * width;
    const step = Math.round(xMin + ((x - margin.left) / plotWidth) * (xMax - xMin));
    const rows = series.map((s) => {
      const at = s.points.findIndex((p) => p.x === step);
      return [s, s.points[at], s.shown[at]];
    }).filter(([, p]) => p && p.y !== null);
    if (!rows.length) { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); return; }
    cursor.setAttribute("x1", sx(step));
    cursor.setAttribute("x2", sx(step));
    cursor.setAttribute("visibility", "visible");
    const bandPoint = band && band.points.find((p) => p.x === step);
    setChildren(tip, el("strong", null, `step ${step}`), ...rows.map(([s, p, shown]) =>
      el("div", { "data-series": s.label, "data-value": p.y, "data-smoothed": shown.y },
        el("span", { class: "swatch", style: `background: ${s.color}` }),
        shown.y === p.y ? `${s.label}: ${formatNumber(p.y)}` :
          `${s.label}: ${formatNumber(shown.y)} (raw ${formatNumber(p.y)})`)),
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

const DIFF_CONTEXT = 3;

// Runs of unchanged lines longer than twice the context shrink to one ["…", count] line,
// unless nothing changed at all (then the source is shown whole).
function foldUnchanged(ops) {
  if (!ops.some(([op]) => op !== " ")) return ops;
  const folded = [];
  let run = [];
  const flush = (atStart, atEnd) => {
    const keepBefore = atStart ? 0 : DIFF_CONTEXT, keepAfter = atEnd ? 0 : DIFF_CONTEXT;
    if (run.length > keepBefore + keepAfter + 1) {
      folded.push(...run.slice(0, keepBefore), ["…", run.length - keepBefore - keepAfter],
        ...run.slice(run.length - keepAfter));
    } else {
      folded.push(...run);
    }
    run = [];
  };
  let seenChange = false;
  for (const op of ops) {
    if (op[0] === " ") { run.push(op); continue; }
    flush(!seenChange, false);
    seenChange = true;
    folded.push(op);
  }
  flush(false, true);
  return folded;
}

// Per function: what changed between two config versions, changed functions first.
// What a reward entry runs: its code, or the reward model it names.
function entryText(entry) {
  return entry.model ? `reward model: ${entry.model}` : entry.source;
}

function functionChanges(from, to) {
  const names = [...new Set([...Object.keys(from.reward_functions),
    ...Object.keys(to.reward_functions)])].sort();
  const changes = names.map((name) => {
    const before = from.reward_functions[name], after = to.reward_functions[name];
    const notes = [];
    if (!before) notes.push(`added (weight ${formatWeight(after.weight)})`);
    else if (!after) notes.push("removed");
    else {
      if (before.version !== after.version) {
        notes.push(`${after.model ? "new model" : "new code"} (${before.label} → ${after.label})`);
      }
      if (before.weight !== after.weight) {
        notes.push(`weight ${formatWeight(before.weight)} → ${formatWeight(after.weight)}`);
      }
      // How the function runs (concurrency, limits) changes without a new code version.
      for (const key of ["max_concurrency", "sample_timeout_s", "rate_limit_per_s", "batch_size",
        "max_length"]) {
        if ((before[key] ?? null) !== (after[key] ?? null)) {
          notes.push(`${key} ${before[key] ?? "default"} → ${after[key] ?? "default"}`);
        }
      }
    }
    const codeChanged = !before || !after || before.version !== after.version;
    return { name, before, after, notes, codeChanged };
  });
  return changes.sort((a, b) => (b.notes.length > 0) - (a.notes.length > 0));
}

// What changed between two config versions comes first: a summary line per change, then the
// code diffs (unchanged stretches folded), then the functions that did not change, folded away.
function configDiff(from, to, { id } = {}) {
  const changes = functionChanges(from, to);
  const summary = changes.filter((change) => change.notes.length).map((change) =>
    el("li", { "data-function": change.name }, el("strong", { class: "mono" }, change.name),
      `: ${change.notes.join(", ")}`));
  for (const setting of ["temperature", "top_p"]) {
    if (from[setting] !== to[setting]) {
      summary.push(el("li", { "data-setting": setting }, el("strong", { class: "mono" }, setting),
        `: ${from[setting] ?? "default"} → ${to[setting] ?? "default"}`));
    }
  }
  const withCode = changes.filter((change) => change.codeChanged);
  const rest = changes.filter((change) => !change.codeChanged);
  return [
    el("ul", { class: "changes", id }, summary.length ? summary :
      el("li", { class: "muted" }, `No changes between v${from.version} and v${to.version}.`)),
    withCode.map((change) => diffBlock(change)),
    rest.length ? el("details", { class: "unchanged-functions" },
      el("summary", null, `${rest.length} function${rest.length === 1 ? "" : "s"} with the same code: ` +
        rest.map((change) => change.name).join(", ")),
      rest.map((change) => diffBlock(change))) : null,
  ];
}

function diffBlock({ name, before, after }) {
  const ops = diffLines(before ? entryText(before) : "", after ? entryText(after) : "");
  const changed = ops.filter(([op]) => op !== " ").length;
  const title = !before ? `${name}: added as ${after.label}` : !after ? `${name}: removed` :
    before.version === after.version ? `${name}: ${after.label}` :
      `${name}: ${before.label} → ${after.label}`;
  return el("div", { class: "diff", "data-function": name },
    el("h3", null, title, el("span", { class: "muted small" }, ` · ${changed} changed lines`)),
    el("pre", { class: "diff-body" }, foldUnchanged(ops).map(([op, line]) => op === "…" ?
      el("div", { class: "fold" }, `⋯ ${line} unchanged lines`) :
      el("div", { class: op === "+" ? "add" : op === "-" ? "del" : "same" }, `${op} ${line}`))));
}

// ---------------------------------------------------------------- agent rollouts

// An agent's rollout (completion.trajectory): assistant turns in order, each tool call folded
// with the result (or error) that answered it. The k-th tool message after an assistant turn
// answers its first not yet answered call of that name.
function toolCallText(call) {
  // Arguments that are no JSON object (the model wrote bad JSON) are shown as written.
  const args = call.arguments && typeof call.arguments === "object"
    ? Object.entries(call.arguments).map(([name, value]) => `${name}=${JSON.stringify(value)}`).join(", ")
    : (call.arguments ?? "");
  return `${call.name}(${args})`;
}

function toolResultBody(message) {
  if (message.error) {
    // The kind is on the call's summary already; here the message says what went wrong.
    return el("div", { class: "tool-result error" }, message.error.message);
  }
  return el("pre", { class: "text tool-result" }, message.content);
}

function toolCallNode(call) {
  const summary = el("summary", null, el("span", { class: "mono" }, `→ ${toolCallText(call)}`));
  const node = el("details", { class: "tool-call", "data-tool": call.name }, summary,
    el("div", { class: "muted small pending" }, "no result recorded"));
  node.answer = (message) => {
    const pending = node.querySelector(".pending");
    if (pending) pending.remove();
    node.append(toolResultBody(message));
    if (message.duration_s !== null && message.duration_s !== undefined) {
      summary.append(el("span", { class: "muted small duration" }, ` ${formatNumber(message.duration_s, 2)} s`));
    }
    if (message.error) {
      node.classList.add("error");
      node.dataset.errorKind = message.error.kind;
      summary.append(el("span", { class: "kind kind-error" }, `✕ ${message.error.kind}`));
    }
  };
  return node;
}

function trajectoryView(trajectory) {
  const turns = [];
  let unanswered = [];
  const cutOff = () => el("div", { class: "turn truncated", "data-truncated": "" },
    "Cut off here (max turns or the token budget).");
  for (const message of trajectory) {
    if (message.role === "assistant") {
      const calls = (message.tool_calls || []).map((call) => ({ call, node: toolCallNode(call) }));
      unanswered = calls;
      turns.push(el("div", { class: "turn assistant", "data-role": "assistant" },
        el("div", { class: "turn-role" }, "assistant"),
        message.content ? el("pre", { class: "text" }, message.content) : null,
        calls.map(({ node }) => node)));
    } else if (message.role === "tool") {
      const index = unanswered.findIndex(({ call }) => call.name === message.name);
      if (index >= 0) {
        unanswered.splice(index, 1)[0].node.answer(message);
      } else {
        // A result without its call (the call was cut from the record): shown on its own.
        const node = toolCallNode({ name: message.name, arguments: {} });
        node.answer(message);
        turns.push(el("div", { class: "turn tool", "data-role": "tool" }, node));
      }
    } else {
      turns.push(el("div", { class: "turn", "data-role": message.role },
        el("div", { class: "turn-role" }, message.role),
        el("pre", { class: "text" }, typeof message.content === "string"
          ? message.content : JSON.stringify(message.content))));
    }
    // The worker marks the rollout's last message, whichever its role.
    if (message.truncated) turns.push(cutOff());
  }
  return el("div", { class: "trajectory" }, turns);
}

function trajectorySummary(trajectory) {
  const turns = trajectory.filter((m) => m.role === "assistant").length;
  const calls = trajectory.reduce((sum, m) => sum + ((m.tool_calls || []).length), 0);
  const errors = trajectory.filter((m) => m.role === "tool" && m.error).length;
  const last = trajectory[trajectory.length - 1];
  return `${turns} turn${turns === 1 ? "" : "s"} · ${calls} tool call${calls === 1 ? "" : "s"}` +
    (errors ? ` · ${errors} error${errors === 1 ? "" : "s"}` : "") +
    (last && last.truncated ? " · cut off" : "");
}

// In a table cell the conversation is folded behind its summary; errors show on the summary.
function trajectoryFold(trajectory) {
  const errors = trajectory.some((m) => m.role === "tool" && m.error);
  return el("details", { class: `trajectory-fold${errors ? " has-errors" : ""}`, "data-trajectory": "" },
    el("summary", null, trajectorySummary(trajectory)), trajectoryView(trajectory));
}
