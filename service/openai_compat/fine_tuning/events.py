"""A fine-tuning job's events, OpenAI's shape: our job events, and a metrics event per
recorded step (GRPO's rewards, or SFT's loss and token accuracy)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from service.events.repository import EventRepository
from service.jobs.step_repository import StepRepository
from service.models import Job
from service.openai_compat.files.schemas import OpenAIPage
from service.openai_compat.fine_tuning.pages import page_after
from service.openai_compat.fine_tuning.schemas import FineTuningJobEvent
from service.openai_compat.fine_tuning.service import get_job, job_grader
from service.openai_compat.graders.compile import part_reward_names, reward_name

# A tripped guard (docs/guards.md) is a warning too.
EVENT_LEVELS = {"warning": "warn", "guard_tripped": "warn", "error": "error"}


def list_events(
    session: Session, tenant_id: str, job_id: str, *, limit: int, after: str | None
) -> OpenAIPage[FineTuningJobEvent]:
    """Newest first, as OpenAI lists them: the job's events as messages and each training
    step as a metrics event (reward means, per-grader scores and errors, validation reward)."""
    job = get_job(session, tenant_id, job_id)
    # Ordered by the exact time (the objects carry whole seconds), then by id or step.
    timed = [
        (
            event.created_at,
            event.id,
            FineTuningJobEvent(
                id=f"ftevent-{event.id}",
                created_at=int(event.created_at.timestamp()),
                level=EVENT_LEVELS.get(event.kind, "info"),  # type: ignore[arg-type]
                message=event.message,
                data={"kind": event.kind, **(event.data or {})},
                type="message",
            ),
        )
        for event in EventRepository(session).list_events(job.id, after_id=0, limit=1_000_000)
    ]
    timed.extend(step_events(session, job))
    timed.sort(key=lambda entry: (entry[0], entry[1]), reverse=True)
    return page_after([event for _, _, event in timed], limit, after)


def step_events(session: Session, job: Job) -> list[tuple[datetime, int, FineTuningJobEvent]]:
    if job.method == "sft":
        return supervised_step_events(session, job)
    repository = StepRepository(session)
    grader = job_grader(session, job)
    main = reward_name(grader.name) if grader is not None else None
    parts = part_reward_names(grader) if grader is not None else {}
    validation = {
        evaluation.step: evaluation
        for evaluation in repository.list_evaluations(job.id, after_step=0, limit=1_000_000)
    }
    events = []
    for row in repository.list_steps(job.id, after_step=0, limit=1_000_000):
        functions = json.loads(row["reward_functions"] or "{}")
        named = parts or ({grader.name: main} if grader is not None and main else {})
        if not named:
            named = {name: name for name in functions}
        evaluation = validation.get(row["step"])
        data = {
            "step": row["step"],
            "train_reward_mean": row["reward_mean"],
            "train_reward_std": row["reward_std"],
            "valid_reward_mean": evaluation.reward_mean if evaluation is not None else None,
            "scores": {
                grader_name: functions.get(function, {}).get("mean")
                for grader_name, function in named.items()
            },
            "errors": {
                grader_name: functions.get(function, {}).get("errors", 0)
                for grader_name, function in named.items()
            },
            "error_rate": (functions.get(main, {}).get("error_rate") if main is not None else None),
            "loss": row["loss"],
            "kl": row["kl"],
            "learning_rate": row["learning_rate"],
            "frac_reward_zero_std": row["frac_reward_zero_std"],
            "config_version": row["config_version"],
        }
        message = (
            f"Step {row['step']}/{job.hyperparameters['train_steps']}: "
            f"train reward mean {row['reward_mean']}"
        )
        events.append(metrics_event(row, message, data))
    return events


def metrics_event(
    row: Any, message: str, data: dict[str, Any]
) -> tuple[datetime, int, FineTuningJobEvent]:
    """A step's metrics event (a list_steps row), keyed for list_events' ordering."""
    return (
        row["created_at"],
        row["step"],
        FineTuningJobEvent(
            id=f"ftevent-step-{row['step']}",
            created_at=int(row["created_at"].timestamp()),
            level="info",
            message=message,
            data=data,
            type="metrics",
        ),
    )


def supervised_metrics(row: Any) -> dict[str, Any]:
    """A supervised step's metrics under OpenAI's names (a list_steps row)."""
    logged = json.loads(row["metrics"] or "{}")
    return {
        "train_loss": row["loss"],
        "train_mean_token_accuracy": logged.get("mean_token_accuracy"),
        "valid_loss": logged.get("eval_loss"),
        "valid_mean_token_accuracy": logged.get("eval_mean_token_accuracy"),
    }


def supervised_step_events(
    session: Session, job: Job
) -> list[tuple[datetime, int, FineTuningJobEvent]]:
    """One metrics event per step, as OpenAI writes a supervised job's."""
    total = job.hyperparameters["train_steps"]
    events = []
    for row in StepRepository(session).list_steps(job.id, after_step=0, limit=1_000_000):
        loss = "none" if row["loss"] is None else f"{row['loss']:.4f}"
        data = {
            "step": row["step"],
            "total_steps": total,
            **supervised_metrics(row),
            "learning_rate": row["learning_rate"],
        }
        events.append(metrics_event(row, f"Step {row['step']}/{total}: training loss={loss}", data))
    return events
