"""The live table of ``rft jobs watch``: total reward and each function's recent history."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from rft.cli.sparkline import sparkline
from rft.models import GuardTrip, Job, JobEvent, Step

HISTORY_STEPS = 40


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def job_view(job: Job, steps: Sequence[Step], evaluation: JobEvent | None = None) -> Group:
    recent = list(steps[-HISTORY_STEPS:])
    latest = recent[-1] if recent else None
    title = f"{job.id}  {job.status.value}  step {job.steps_completed}/{job.train_steps}"
    if job.failure_reason:
        title += f"  ({job.failure_reason})"
    table = Table()
    table.add_column("reward" if job.method == "grpo" else "metric")
    table.add_column("weight", justify="right")
    table.add_column("mean", justify="right")
    table.add_column("std", justify="right")
    table.add_column(f"last {HISTORY_STEPS} steps")
    if job.method == "sft":
        _add_supervised_rows(table, recent)
        return Group(Text(title), table)
    table.add_row(
        "[bold]total[/bold]",
        "",
        _number(latest.reward_mean if latest else None),
        _number(latest.reward_std if latest else None),
        sparkline([step.reward_mean for step in recent]),
    )
    names = sorted({name for step in recent for name in step.reward_functions})
    for name in names:
        metrics = latest.reward_functions.get(name) if latest else None
        history = [
            step.reward_functions[name].mean if name in step.reward_functions else None
            for step in recent
        ]
        errors = f"  [red]{metrics.errors} errors[/red]" if metrics and metrics.errors else ""
        table.add_row(
            name + errors,
            f"{metrics.weight:g}" if metrics else "",
            _number(metrics.mean if metrics else None),
            _number(metrics.std if metrics else None),
            sparkline(history),
        )
    # What the run warned about (no learning signal, signs of reward hacking) stays in view;
    # a guard's trip with one example completion, its evidence.
    warnings = [
        warning_line(w) if not w.get("guard") else guard_line(GuardTrip.model_validate(w))
        for w in job.warnings
    ]
    # The latest validation result ('eval' event), when the job has a validation set.
    validation = (
        [
            Text(
                f"validation (step {evaluation.step}): reward "
                f"{_number(evaluation.data.get('reward_mean'))}"
                f" over {evaluation.data.get('samples')} samples (rft jobs evals {job.id})"
            )
        ]
        if evaluation is not None
        else []
    )
    return Group(Text(title), table, *validation, *warnings)


def warning_line(warning: dict[str, Any]) -> Text:
    return Text(f"warning (step {warning.get('step')}): {warning.get('message')}", style="yellow")


def guard_line(trip: GuardTrip) -> Text:
    line = Text(f"guard {trip.kind} (step {trip.step}): {trip.message}", style="yellow")
    if trip.examples:
        completion = str(trip.examples[0].get("completion", ""))
        line.append(f"\n  e.g. {completion[:120]!r}", style="dim")
    return line


# A supervised step's curves: its loss and what TRL logged beside it (Step.metrics).
SUPERVISED_ROWS = (
    ("loss", None),
    ("token accuracy", "mean_token_accuracy"),
    ("eval loss", "eval_loss"),
)


def _add_supervised_rows(table: Table, recent: Sequence[Step]) -> None:
    for label, key in SUPERVISED_ROWS:
        history = [step.loss if key is None else (step.metrics or {}).get(key) for step in recent]
        known = [value for value in history if value is not None]
        if key is not None and not known:
            continue  # e.g. no validation set: no eval loss
        table.add_row(label, "", _number(known[-1] if known else None), "", sparkline(history))
