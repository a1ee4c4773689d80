"""A fine-tuning job's checkpoints, OpenAI's shape: each stored checkpoint with the metrics of
its step."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.inference.service import fine_tuned_model_name
from service.jobs.step_repository import StepRepository
from service.models import Job
from service.openai_compat.files.schemas import OpenAIPage
from service.openai_compat.fine_tuning.events import supervised_metrics
from service.openai_compat.fine_tuning.pages import page_after
from service.openai_compat.fine_tuning.schemas import CheckpointMetrics, FineTuningJobCheckpoint
from service.openai_compat.fine_tuning.service import get_job


def list_checkpoints(
    session: Session, tenant_id: str, job_id: str, *, limit: int, after: str | None
) -> OpenAIPage[FineTuningJobCheckpoint]:
    job = get_job(session, tenant_id, job_id)
    records = StepRepository(session)
    steps = {row["step"]: row for row in records.list_steps(job.id, after_step=0, limit=1_000_000)}
    rewards = records.evaluation_rewards(job.id)
    checkpoints = [
        FineTuningJobCheckpoint(
            id=f"ftckpt-{job.id}-{checkpoint.step}",
            created_at=int(checkpoint.created_at.timestamp()),
            fine_tuned_model_checkpoint=fine_tuned_model_name(
                job.base_model, job.id, checkpoint.step
            ),
            fine_tuning_job_id=job.id,
            step_number=checkpoint.step,
            metrics=checkpoint_metrics(
                job, checkpoint.step, steps.get(checkpoint.step), rewards.get(checkpoint.step)
            ),
        )
        for checkpoint in sorted(
            CheckpointRepository(session).list_checkpoints(job.id),
            key=lambda c: c.step,
            reverse=True,
        )
    ]
    return page_after(checkpoints, limit, after)


def checkpoint_metrics(
    job: Job, step: int, row: Any | None, valid_reward_mean: float | None
) -> CheckpointMetrics:
    if job.method == "sft":
        return CheckpointMetrics(step=step, **(supervised_metrics(row) if row is not None else {}))
    return CheckpointMetrics(
        step=step,
        train_loss=row["loss"] if row is not None else None,
        train_reward_mean=row["reward_mean"] if row is not None else None,
        valid_reward_mean=valid_reward_mean,
    )
