"""Stores what the training loop reports: steps, completions, reward errors and logs.

Each step is written in one transaction that first deletes anything already stored for that
step, so a write retried after a lost connection, or a step re-run after resuming from a
checkpoint, never leaves a duplicate row.

The worker writes through a ``BackgroundWriter``: training hands a step over and goes on to the
next one while a thread of the writer's own stores it, in order.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import delete, func, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.bulk import NULL, copy_json, copy_line, copy_lines, copy_number, copy_text
from service.db import session_scope
from service.jobs.repository import JobRepository
from service.models import (
    Completion,
    Evaluation,
    Job,
    JobConfigVersion,
    RewardErrorRecord,
    RewardLog,
    Step,
)
from workers.training.records import EvalRecord, FunctionStepMetrics, StepRecord
from workers.training_signals import frac_reward_zero_std

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
ERROR_COLUMNS = [
    "job_id",
    "step",
    "function_name",
    "function_version",
    "kind",
    "message",
    "traceback",
    "sample_index",
]
LOG_COLUMNS = ["job_id", "step", "function_name", "function_version", "output", "truncated"]


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


def functions_json(functions: dict[str, FunctionStepMetrics]) -> dict[str, dict[str, Any]]:
    """Per-function metrics as steps and evaluations store them."""
    return {
        name: {
            "version": m.version,
            "weight": m.weight,
            "mean": m.mean,
            "std": m.std,
            "scored": m.scored,
            "errors": m.errors,
            "error_rate": m.errors / max(1, m.scored + m.errors),
        }
        for name, m in functions.items()
    }


def record_step(session: Session, job_id: str, record: StepRecord) -> None:
    """Store one step, replacing whatever an earlier attempt stored for it.

    Three statements whatever the step's size (the deletes and the step row in one, a COPY of
    the completions, the job row and config bookkeeping in one; plus a COPY each for reward
    errors and logs when there are any): time goes to streaming rows, not to round trips.
    """
    # Deletes run as CTEs of the step upsert: one statement instead of four.
    deletes = [
        delete(Completion)
        .where(Completion.job_id == job_id, Completion.step == record.step)
        .cte("d_completions"),
        delete(RewardErrorRecord)
        .where(RewardErrorRecord.job_id == job_id, RewardErrorRecord.step == record.step)
        .cte("d_errors"),
        delete(RewardLog)
        .where(RewardLog.job_id == job_id, RewardLog.step == record.step)
        .cte("d_logs"),
    ]
    step_row = {
        "config_version": record.config_version,
        "reward_mean": record.reward_mean,
        "reward_std": record.reward_std,
        "loss": record.loss,
        "kl": record.kl,
        "learning_rate": record.learning_rate,
        "duration_s": record.duration_s,
        "frac_reward_zero_std": frac_reward_zero_std(record.completions),
        "reward_functions": functions_json(record.functions),
        "created_at": datetime.now(UTC),
    }
    session.execute(
        pg_insert(Step)
        .values(job_id=job_id, step=record.step, **step_row)
        .on_conflict_do_update(index_elements=[Step.job_id, Step.step], set_=step_row)
        .add_cte(*deletes)
    )
    raw = session.connection().connection.driver_connection
    with raw.cursor() as cursor:  # type: ignore[union-attr]
        copy_lines(cursor, "completions", COMPLETION_COLUMNS, completion_copy_lines(job_id, record))
        errors = [
            copy_line(
                job_id,
                record.step,
                name,
                result.version,
                error.kind.value,
                copy_text(error.message),
                None if error.traceback is None else copy_text(error.traceback),
                error.sample_index,
            )
            for name, result in record.function_results.items()
            for error in result.errors
        ]
        copy_lines(cursor, "reward_errors", ERROR_COLUMNS, errors)
        logs = [
            copy_line(
                job_id,
                record.step,
                name,
                result.version,
                copy_text(result.logs),
                "t" if result.logs_truncated else "f",
            )
            for name, result in record.function_results.items()
            if result.logs
        ]
        copy_lines(cursor, "reward_logs", LOG_COLUMNS, logs)
    _note_progress(session, job_id, record)
    if record.evaluation is not None:
        record_evaluation(session, job_id, record.evaluation)


def record_evaluation(session: Session, job_id: str, evaluation: EvalRecord) -> None:
    """Store a validation result (replacing a re-run step's) and announce it as an 'eval'
    event, which the event stream carries."""
    functions = functions_json(evaluation.functions)
    row = {
        "config_version": evaluation.config_version,
        "reward_mean": evaluation.reward_mean,
        "reward_std": evaluation.reward_std,
        "prompts": evaluation.prompts,
        "samples": evaluation.samples,
        "duration_s": evaluation.duration_s,
        "reward_functions": functions,
        "created_at": datetime.now(UTC),
    }
    session.execute(
        pg_insert(Evaluation)
        .values(job_id=job_id, step=evaluation.step, **row)
        .on_conflict_do_update(index_elements=[Evaluation.job_id, Evaluation.step], set_=row)
    )
    mean = "none" if evaluation.reward_mean is None else f"{evaluation.reward_mean:.4f}"
    JobRepository(session).add_event(
        job_id,
        "eval",
        f"validation reward {mean} at step {evaluation.step} ({evaluation.samples} samples)",
        step=evaluation.step,
        data={
            "step": evaluation.step,
            "reward_mean": evaluation.reward_mean,
            "reward_std": evaluation.reward_std,
            "samples": evaluation.samples,
            "reward_functions": functions,
        },
    )


def _note_progress(session: Session, job_id: str, record: StepRecord) -> None:
    """Advance the job row; the first step scored by a config version marks where it applied."""
    applied = (
        update(JobConfigVersion)
        .where(
            JobConfigVersion.job_id == job_id,
            JobConfigVersion.version == record.config_version,
            or_(
                JobConfigVersion.applied_at_step.is_(None),
                JobConfigVersion.applied_at_step > record.step,
            ),
        )
        .values(applied_at_step=record.step)
        .returning(JobConfigVersion.version)
        .cte("applied")
    )
    applied_version = select(applied.c.version).scalar_subquery()
    newly_applied = session.scalar(
        update(Job)
        .where(Job.id == job_id)
        .values(
            steps_completed=record.step,
            heartbeat_at=datetime.now(UTC),
            applied_config_version=func.coalesce(applied_version, Job.applied_config_version),
        )
        .returning(applied_version)
    )
    if newly_applied is not None and record.config_version > 1:
        JobRepository(session).add_event(
            job_id,
            "config_applied",
            f"config v{record.config_version} applied at step {record.step}",
            step=record.step,
            data={"config_version": record.config_version},
        )


def completion_copy_lines(job_id: str, record: StepRecord) -> list[str]:
    # A step's completions share a handful of prompts (one per group): encode each once.
    prompts: dict[int, str] = {}
    head = f"{job_id}\t{record.step}\t{record.config_version}\t"
    lines = []
    for c in record.completions:
        prompt = prompts.get(id(c.prompt))
        if prompt is None:
            prompt = prompts[id(c.prompt)] = copy_json(c.prompt)
        dataset_index = NULL if c.dataset_index is None else str(c.dataset_index)
        lines.append(
            f"{head}{c.prompt_index}\t{c.group_position}\t{dataset_index}\t{prompt}\t"
            f"{copy_text(c.completion)}\t{copy_json(c.scores)}\t{copy_number(c.total)}\t"
            f"{copy_number(c.advantage)}\t{c.token_count}\n"
        )
    return lines


def store_step(job_id: str, record: StepRecord) -> None:
    def write() -> None:
        # A normal, durable commit: an asynchronous one (synchronous_commit off) was ~10%
        # faster, but a Postgres crash could then drop a step the worker believes stored,
        # leaving a hole no resume would fill. The writer thread absorbs the flush's latency.
        with session_scope() as session:
            record_step(session, job_id, record)

    with_database_retries(write, what=f"recording step {record.step} of {job_id}")


class RecordingFailed(RuntimeError):
    """The background writer could not store something: the run must not go on without it."""


class BackgroundWriter:
    """Runs database writes on a thread of its own, one at a time, in the order submitted.

    Why: a step's record takes milliseconds to store (more while Postgres restarts, when
    ``with_database_retries`` waits), and the training loop should not wait for it.

    - Bounded: at most ``max_pending`` writes wait; ``submit`` blocks while the queue is full
      (back-pressure), so a slow database slows training down instead of dropping records or
      growing memory without bound.
    - Ordered: one thread, one FIFO queue. A checkpoint row submitted after step N's record is
      stored after it, so a resume from that checkpoint never skips an unrecorded step.
    - Failures surface: the first write that fails (after its own retries) is kept, every later
      write is skipped (storing step N+1 without step N would leave a gap that looks complete),
      and the error is raised from the next ``submit`` and from ``close``.
    """

    def __init__(self, name: str, *, max_pending: int = 8) -> None:
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max_pending)
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"writer-{name}", daemon=True)
        self._thread.start()

    def submit(self, write: Callable[[], None]) -> None:
        """Queue ``write``; blocks while ``max_pending`` writes wait. Raises an earlier failure."""
        if self._closed:
            raise RuntimeError("the writer is closed")
        self.raise_failure()
        self._queue.put(write)

    def flush(self) -> None:
        """Wait until every write submitted so far is done; raise if one failed."""
        self._queue.join()
        self.raise_failure()

    def close(self, *, raise_failure: bool = True) -> None:
        """Finish every queued write, stop the thread; raise a failure unless told not to."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join()
        if raise_failure:
            self.raise_failure()

    @property
    def failure(self) -> BaseException | None:
        return self._error

    def raise_failure(self) -> None:
        if self._error is not None:
            raise RecordingFailed(f"recording failed: {self._error}") from self._error

    def _run(self) -> None:
        while True:
            write = self._queue.get()
            try:
                if write is None:
                    return
                if self._error is None:
                    write()
            except BaseException as exc:  # kept, and raised in the submitting thread
                logger.exception("background write failed; later writes are skipped")
                self._error = exc
            finally:
                self._queue.task_done()
