"""A job's cost and a tenant's usage, as a person reads them in the terminal."""

from __future__ import annotations

from rft.models import CostEstimate, Job


def duration_text(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.1f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_lines(estimate: CostEstimate) -> list[str]:
    lines = [f"model: {estimate.model_key}; {estimate.devices} device(s)"]
    if estimate.max_tokens is not None:
        lines.append(f"at most {estimate.max_tokens:,} completion tokens")
    for entry in estimate.workers:
        where = f"{entry.device_kind} ({entry.generation_backend})"
        if entry.basis != "measured" or entry.step_seconds is None:
            lines.append(f"{where}: {entry.message or 'no estimate'}")
            continue
        lines.append(
            f"{where}: ~{entry.tokens_per_step or 0:,.0f} tokens/step, "
            f"{duration_text(entry.step_seconds)}/step, "
            f"{duration_text(entry.total_seconds or 0.0)} in all, "
            f"{entry.gpu_hours or 0.0:.3g} GPU-hours (measured over {entry.steps_measured} steps)"
        )
    if estimate.note:
        lines.append(estimate.note)
    return lines


def cost_lines(job: Job) -> list[str]:
    """Expected (at creation), so far / in all, and the time left while it runs."""
    lines = [f"{job.id} {job.status.value}: {job.steps_completed}/{job.train_steps} steps"]
    if job.cost_estimate is None:
        lines.append("expected: no estimate (created before estimates)")
    else:
        lines += ["expected:", *(f"  {line}" for line in estimate_lines(job.cost_estimate))]
    lines.append(f"GPU-seconds used: {job.gpu_seconds:,.1f} ({job.gpu_seconds / 3600:.3g} h)")
    if job.eta_seconds is not None:
        lines.append(f"time left: ~{duration_text(job.eta_seconds)}")
    return lines
