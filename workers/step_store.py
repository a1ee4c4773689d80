"""Stores what the training loop reports: each step (with its completions, reward errors and
logs) and each evaluation, turned into rows for service.jobs.step_repository.

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
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from service.bulk import NULL, copy_json, copy_line, copy_number, copy_text
from service.events.repository import EventRepository
from service.jobs.step_repository import StepRepository
from service.usage.throughput import measure_step
from workers.database import in_transaction
from workers.failures import RecordingFailed
from workers.training.step_records import EvalRecord, FunctionStepMetrics, StepRecord
from workers.training_signals import frac_reward_zero_std

logger = logging.getLogger(__name__)


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
    """Store one step (replacing whatever an earlier attempt stored for it), advance the job
    row, fold its throughput into the measured figures (service.usage.throughput), and store
    the step's evaluation when it has one."""
    steps = StepRepository(session)
    completion_tokens = (
        sum(c.token_count for c in record.completions) if record.completions else None
    )
    steps.replace_step(
        job_id,
        record.step,
        {
            "config_version": record.config_version,
            "reward_mean": record.reward_mean,
            "reward_std": record.reward_std,
            "loss": record.loss,
            "kl": record.kl,
            "learning_rate": record.learning_rate,
            "duration_s": record.duration_s,
            "completion_tokens": completion_tokens,
            "frac_reward_zero_std": frac_reward_zero_std(record.completions),
            "reward_functions": functions_json(record.functions),
            "agent_metrics": record.agent_metrics,
            "metrics": record.metrics,
            "async_generation": record.async_generation,
        },
        completions=completion_copy_lines(job_id, record),
        errors=[
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
        ],
        logs=[
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
        ],
    )
    if steps.advance(job_id, record.step, record.config_version) and record.config_version > 1:
        EventRepository(session).add_event(
            job_id,
            "config_applied",
            f"config v{record.config_version} applied at step {record.step}",
            step=record.step,
            data={"config_version": record.config_version},
        )
    measure_step(
        session,
        job_id,
        step=record.step,
        duration_s=record.duration_s,
        completion_tokens=completion_tokens,
        completions=len(record.completions),
    )
    if record.evaluation is not None:
        record_evaluation(session, job_id, record.evaluation)


def record_evaluation(session: Session, job_id: str, evaluation: EvalRecord) -> None:
    """Store a validation result (replacing a re-run step's) and announce it as an 'eval'
    event, which the event stream carries."""
    functions = functions_json(evaluation.functions)
    StepRepository(session).replace_evaluation(
        job_id,
        evaluation.step,
        {
            "config_version": evaluation.config_version,
            "reward_mean": evaluation.reward_mean,
            "reward_std": evaluation.reward_std,
            "prompts": evaluation.prompts,
            "samples": evaluation.samples,
            "duration_s": evaluation.duration_s,
            "reward_functions": functions,
            "agent_metrics": evaluation.agent_metrics,
        },
    )
    mean = "none" if evaluation.reward_mean is None else f"{evaluation.reward_mean:.4f}"
    EventRepository(session).add_event(
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
        trajectory = NULL if c.trajectory is None else copy_json(c.trajectory)
        lines.append(
            f"{head}{c.prompt_index}\t{c.group_position}\t{dataset_index}\t{prompt}\t"
            f"{copy_text(c.completion)}\t{copy_json(c.scores)}\t{copy_number(c.total)}\t"
            f"{copy_number(c.advantage)}\t{c.token_count}\t{trajectory}\n"
        )
    return lines


def store_step(job_id: str, record: StepRecord) -> None:
    # A normal, durable commit: an asynchronous one (synchronous_commit off) was ~10% faster,
    # but a Postgres crash could then drop a step the worker believes stored, leaving a hole
    # no resume would fill. The writer thread absorbs the flush's latency.
    in_transaction(
        lambda session: record_step(session, job_id, record),
        what=f"recording step {record.step} of {job_id}",
    )


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
