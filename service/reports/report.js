// The job report: draws the document embedded in the page (#report-data, JSON) with the
// dashboard's own pieces (views.js, inlined before this file). No requests: the page works
// saved to disk and opened offline. User content goes through textContent only (views.js el).
"use strict";

const report = JSON.parse(document.getElementById("report-data").textContent);

function section(id, title, ...children) {
  return el("section", { class: "card", id }, el("h2", null, title), children);
}

function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.map(([term, value]) =>
    el("div", null, el("dt", null, term), el("dd", null, value))));
}

function header(job) {
  const total = Number(job.hyperparameters.train_steps) || 0;
  return el("section", { class: "card job-head", id: "summary" },
    el("div", { class: "muted small" }, "rft job report"),
    el("h1", null, job.name || job.id),
    job.name ? el("div", { class: "muted small mono" }, job.id) : null,
    facts([
      ["Status", statusBadge(job.status)],
      ["Steps", total ? `${job.steps_completed} of ${total}` : String(job.steps_completed)],
      ["Method", job.method],
      ["Model", el("span", { class: "mono" }, job.base_model)],
      ["Config", `v${job.config_version}`],
      ["Created", formatTime(job.created_at)],
      ["Finished", formatTime(job.finished_at)],
      ["Report made", formatTime(report.generated_at)],
    ]),
    job.failure_reason ? el("p", { class: "error" }, job.failure_reason) : null,
    warningBanner(job.warnings || []));
}

function curves() {
  const steps = report.steps;
  const markers = chartMarkers(steps, report.events);
  const colorOf = colorAssigner();
  const kl = steps.filter((s) => s.kl !== null);
  return section("curves", "Curves",
    el("p", { class: "muted small" }, `${steps.length} steps recorded. Lines mark config changes, ` +
      "pauses, resumes and guard trips."),
    el("div", { class: "charts" },
      rewardCharts(steps, report.evaluations, { markers, colorOf }),
      lineChart({
        id: "length", title: "Completion length (mean tokens)", yLabel: "tokens", markers,
        series: [{ label: "length", color: colorOf("length"),
          points: report.completion_lengths.map((p) => ({ x: p.step, y: p.mean_tokens })) }],
      }),
      kl.length ? lineChart({
        id: "kl", title: "KL to the reference model", yLabel: "KL", markers,
        series: [{ label: "KL", color: colorOf("kl"),
          points: steps.map((s) => ({ x: s.step, y: s.kl })) }],
      }) : el("p", { class: "muted", id: "kl-none" },
        "KL to the reference model: not measured (the job trains with beta 0).")));
}

function guardTrips(job) {
  const warnings = job.warnings || [];
  const trips = warnings.filter((w) => w.guard);
  const others = warnings.filter((w) => !w.guard);
  return section("guards", "Warnings and guard trips",
    warnings.length ? null : el("p", { class: "muted" }, "No warnings, no guard tripped."),
    trips.map((trip) => el("div", { class: "guard-trip", "data-guard": trip.kind },
      el("h3", null, `step ${trip.step}: ${trip.kind}`,
        trip.paused_job ? el("span", { class: "badge status-pausing" }, "paused the job") : null),
      el("p", null, trip.message),
      el("div", { class: "mono small muted" }, Object.entries(trip.numbers || {})
        .map(([name, value]) => `${name} ${typeof value === "number" ? formatNumber(value)
          : typeof value === "string" ? value : JSON.stringify(value)}`)
        .join(" · ")),
      (trip.examples || []).map((example) => el("pre", { class: "text completion-text" },
        example.completion)))),
    others.length ? el("ul", { class: "plain-list" }, others.map((w) =>
      el("li", { "data-warning-kind": w.kind },
        w.step !== null && w.step !== undefined ? el("span", { class: "muted small" },
          `step ${w.step}: `) : null, w.message))) : null);
}

function configHistory() {
  const versions = report.config_versions;
  return section("config-history", "Config history",
    el("table", { class: "table", id: "config-versions" },
      el("thead", null, el("tr", null, el("th", null, "Version"), el("th", null, "Stored"),
        el("th", null, "Applied at step"), el("th", null, "Functions (weight)"),
        el("th", null, "Sampling"))),
      el("tbody", null, versions.map((v) => el("tr", null,
        el("td", null, `v${v.version}`), el("td", { class: "small" }, formatTime(v.created_at)),
        el("td", null, v.applied_at_step ?? "never"),
        el("td", { class: "mono small" }, Object.values(v.reward_functions)
          .map((f) => `${f.label} (${formatWeight(f.weight)})`).join(", ")),
        el("td", { class: "small" },
          `temperature ${v.temperature ?? "default"}, top_p ${v.top_p ?? "default"}`))))),
    versions.slice(1).map((to, index) => {
      const from = versions[index];
      return el("div", { class: "config-diff", "data-from": from.version, "data-to": to.version },
        el("h3", null, `v${from.version} → v${to.version}` +
          (to.applied_at_step ? ` (applied at step ${to.applied_at_step})` : "")),
        configDiff(from, to));
    }),
    versions.length < 2 ? el("p", { class: "muted" }, "The config never changed.") : null);
}

function completionCard(completion, rank) {
  return el("div", { class: "ranked-completion", "data-rank": rank, "data-completion-id": completion.id },
    el("div", { class: "small" }, el("strong", null, `total ${formatNumber(completion.total)}`),
      el("span", { class: "muted mono" }, " · " + Object.entries(completion.scores)
        .map(([name, score]) => `${name} ${formatNumber(score)}`).join(", ") +
        ` · ${completion.token_count} tokens`)),
    el("pre", { class: "text prompt-text muted" }, promptText(completion.prompt)),
    el("pre", { class: "text completion-text" }, completion.completion),
    // An agent's rollout: its turns and tool calls, folded behind their summary.
    completion.trajectory ? trajectoryFold(completion.trajectory) : null);
}

function completions() {
  return section("completions", "Best and worst completions",
    report.completions.length ? null : el("p", { class: "muted" }, "No steps recorded."),
    report.completions.map((chosen) => el("div", { class: "step-completions", "data-step": chosen.step },
      el("h3", null, `Step ${chosen.step}`),
      el("div", { class: "ranked" },
        el("div", { class: "best" }, el("h4", null, "Highest reward"),
          chosen.best.map((c) => completionCard(c, "best"))),
        el("div", { class: "worst" }, el("h4", null, "Lowest reward"),
          chosen.worst.map((c) => completionCard(c, "worst")))))));
}

function lineageJob(entry) {
  const where = entry.checkpoint_step === null || entry.checkpoint_step === undefined
    ? "final adapter" : `checkpoint ${entry.checkpoint_step}`;
  return [el("span", { class: "mono" }, entry.id),
    entry.name ? ` “${entry.name}”` : null,
    entry.status ? [" ", statusBadge(entry.status)] : el("span", { class: "muted" }, " (deleted)")];
}

function lineage() {
  const { parent, children } = report.lineage;
  return section("lineage", "Lineage",
    el("dl", { class: "facts" },
      el("div", { id: "lineage-parent" }, el("dt", null, "Started from"), el("dd", null, parent
        ? [lineageJob(parent), parent.checkpoint_step === null ? " (final adapter)"
          : ` (checkpoint ${parent.checkpoint_step})`]
        : "fresh LoRA weights (no init_from)")),
      el("div", { id: "lineage-children" }, el("dt", null, "Continued by"), el("dd", null,
        children.length ? el("ul", { class: "plain-list" }, children.map((child) => el("li", null,
          lineageJob(child), child.checkpoint_step === null ? " from the final adapter"
            : ` from checkpoint ${child.checkpoint_step}`))) : "no job yet"))));
}

function exportsTable() {
  const exports = report.exports;
  return section("exports", "Exports", exports.length ? el("table", { class: "table" },
    el("thead", null, el("tr", null, ["Export", "Kind", "Weights", "Status", "Where", "Created"]
      .map((name) => el("th", null, name)))),
    el("tbody", null, exports.map((e) => el("tr", { "data-export-id": e.id },
      el("td", { class: "mono small" }, e.id), el("td", null, e.kind),
      el("td", null, e.checkpoint_step === null ? "final adapter" : `checkpoint ${e.checkpoint_step}`),
      el("td", null, statusBadge(e.status)),
      el("td", { class: "mono small" }, e.hub ? (e.hub.commit_url || e.hub.repo_id) :
        (e.download_path || "–")),
      el("td", { class: "small" }, formatTime(e.created_at)))))) :
    el("p", { class: "muted" }, "No exports."));
}

const job = report.job;
setChildren(document.getElementById("report"), header(job), curves(), guardTrips(job),
  configHistory(), completions(), lineage(), exportsTable());
document.body.dataset.rendered = "true";
