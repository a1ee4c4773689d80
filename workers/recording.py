"""Stores what the training loop reports: steps, completions, reward errors and logs.

Each step is written in one transaction that first deletes anything already stored for that
step, so a write retried after a lost connection, or a step re-run after resuming from a
checkpoint, never leaves a duplicate row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import delete, select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.bulk import copy_rows, without_nul
from service.db import session_scope
from service.jobs.repository import JobRepository
from service.models import (
    Completion,
    Job,
    JobConfigVersion,
    RewardErrorRecord,
    RewardLog,
    Step,
)
from workers.training.records import StepRecord

logger = logging.getLogger(__name__)

T = TypeVar("T")

COMPLETION_COLUMNS = [
    "job_id",
    "step",
    "config_version",
    "prompt_index",
    "group_position",
    "dataset_index",
    "prompt",
    "completion",
    "scores",
    "total",
    "advantage",
    "token_count",
]


def with_database_retries(
    action: Callable[[], T], *, what: str, give_up_after_s: float = 600.0
) -> T:
    """Run ``action``, retrying while the database is unreachable (a restart, a failover).

    A training run is worth far more than a few minutes of waiting for Postgres to return.
    """
    deadline = time.monotonic() + give_up_after_s
    delay = 0.2
    while True:
        try:
            return action()
        except OperationalError as exc:
            if time.monotonic() > deadline:
                raise
            logger.warning("%s: database unavailable (%s); retrying in %.1fs", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


def record_step(session: Session, job_id: str, record: StepRecord) -> None:
    session.execute(delete(Step).where(Step.job_id == job_id, Step.step == record.step))
    for model in (Completion, RewardErrorRecord, RewardLog):
        session.execute(delete(model).where(model.job_id == job_id, model.step == record.step))

    session.add(
        Step(
            job_id=job_id,
            step=record.step,
            config_version=record.config_version,
            reward_mean=record.reward_mean,
            reward_std=record.reward_std,
            loss=record.loss,
            kl=record.kl,
            learning_rate=record.learning_rate,
            duration_s=record.duration_s,
            reward_functions={
                name: {
                    "version": m.version,
                    "weight": m.weight,
                    "mean": m.mean,
                    "std": m.std,
                    "scored": m.scored,
                    "errors": m.errors,
                    "error_rate": m.errors / max(1, m.scored + m.errors),
                }
                for name, m in record.functions.items()
            },
        )
    )
    session.flush()
    copy_rows(
        session,
        "completions",
        COMPLETION_COLUMNS,
        (
            (
                job_id,
                record.step,
                record.config_version,
                c.prompt_index,
                c.group_position,
                c.dataset_index,
                c.prompt,
                c.completion,
                c.scores,
                c.total,
                c.advantage,
                c.token_count,
            )
            for c in record.completions
        ),
        json_columns=["prompt", "scores"],
    )
    for name, result in record.function_results.items():
        for error in result.errors:
            session.add(
                RewardErrorRecord(
                    job_id=job_id,
                    step=record.step,
                    function_name=name,
                    function_version=result.version,
                    kind=error.kind.value,
                    message=without_nul(error.message),
                    traceback=without_nul(error.traceback),
                    sample_index=error.sample_index,
                )
            )
        if result.logs:
            session.add(
                RewardLog(
                    job_id=job_id,
                    step=record.step,
                    function_name=name,
                    function_version=result.version,
                    output=without_nul(result.logs),
                    truncated=result.logs_truncated,
                )
            )
    _note_config_application(session, job_id, record)
    session.execute(
        update(Job)
        .where(Job.id == job_id)
        .values(steps_completed=record.step, heartbeat_at=datetime.now(UTC))
    )


def _note_config_application(session: Session, job_id: str, record: StepRecord) -> None:
    """The first step scored by a config version marks where that version was applied."""
    config = session.scalar(
        select(JobConfigVersion).where(
            JobConfigVersion.job_id == job_id, JobConfigVersion.version == record.config_version
        )
    )
    if config is None or (
        config.applied_at_step is not None and config.applied_at_step <= record.step
    ):
        return
    config.applied_at_step = record.step
    session.execute(
        update(Job).where(Job.id == job_id).values(applied_config_version=record.config_version)
    )
    if record.config_version > 1:
        JobRepository(session).add_event(
            job_id,
            "config_applied",
            f"config v{record.config_version} applied at step {record.step}",
            step=record.step,
            data={"config_version": record.config_version},
        )


def store_step(job_id: str, record: StepRecord) -> None:
    def write() -> None:
        with session_scope() as session:
            record_step(session, job_id, record)

    with_database_retries(write, what=f"recording step {record.step} of {job_id}")
