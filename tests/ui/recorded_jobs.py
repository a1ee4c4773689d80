"""Finished jobs written into Postgres as a worker records them, without training: for the
dashboard tests that only need a run's steps to draw (one dashboard test follows a real job as
it trains: test_dashboard.py::test_dashboard_follows_a_running_job).

The job, its config versions and its function sources are rows as the API stores them; the
steps, evaluations, warnings and guard trips go through the worker's own writers (store_step,
store_warning, store_guard_trip); the lifecycle's events (checkpoints, pause, resume) are added
with the messages and data the worker and the lease write (workers/database_observer.py,
service/jobs/ownership.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from service.auth.repository import AuthRepository
from service.auth.service import hash_api_key
from service.db import session_scope
from service.events.repository import EventRepository
from service.models import Job, JobConfigVersion, RewardFunctionVersion, new_id
from tests.held_jobs import stored_dataset
from workers.step_store import store_step
from workers.training.step_records import (
    CompletionRecord,
    EvalRecord,
    FunctionStepMetrics,
    StepRecord,
)


def finished_job(
    api_key: str,
    *,
    name: str,
    functions: Mapping[str, str] | None = None,
    train_steps: int = 1,
    **fields: Any,
) -> str:
    """A succeeded job of ``api_key``'s tenant with config v1: ``functions`` (name -> source)
    at weight 1. ``fields``: the job row's other columns (method, parent_job_id, ...)."""
    with session_scope() as session:
        key = AuthRepository(session).get_active_key_by_hash(hash_api_key(api_key))
        assert key is not None, "unknown API key"
        dataset = stored_dataset(session, key.tenant_id, name)
        job = Job(
            id=new_id("job"),
            tenant_id=key.tenant_id,
            dataset_id=dataset.id,
            name=name,
            base_model="rft-tiny",
            hyperparameters={"train_steps": train_steps},
            status="succeeded",
            started_at=datetime.now(UTC),
            finished_at=datetime.now(UTC),
            **fields,
        )
        session.add(job)
        session.flush()
        job_id = job.id
    if functions:
        add_config_version(
            job_id, 1, {name: (1, 1.0, source) for name, source in functions.items()}
        )
    return job_id


def add_config_version(
    job_id: str, version: int, functions: Mapping[str, tuple[int, float, str | None]]
) -> None:
    """Config ``version`` of the job: each function's (version, weight, source); a source is
    stored only with the function version that introduces it (None: an earlier version's)."""
    with session_scope() as session:
        for name, (function_version, _, source) in functions.items():
            if source is not None:
                session.add(
                    RewardFunctionVersion(
                        job_id=job_id,
                        name=name,
                        version=function_version,
                        source=source,
                        form="sample",
                    )
                )
        session.flush()
        session.add(
            JobConfigVersion(
                job_id=job_id,
                version=version,
                reward_functions={
                    name: {"version": function_version, "weight": weight}
                    for name, (function_version, weight, _) in functions.items()
                },
            )
        )
        job = session.get(Job, job_id)
        assert job is not None
        job.config_version = max(job.config_version or 1, version)


def add_event(
    job_id: str, kind: str, message: str, *, step: int, data: dict[str, Any] | None = None
) -> None:
    with session_scope() as session:
        EventRepository(session).add_event(job_id, kind, message, step=step, data=data)


def checkpoint_event(job_id: str, step: int) -> None:
    """What the worker announces with a checkpoint (workers/database_observer.py)."""
    download_path = f"/v1/jobs/{job_id}/checkpoints/{step}/adapter.tar.gz"
    add_event(
        job_id,
        "checkpoint",
        f"checkpoint saved at step {step}",
        step=step,
        data={"download_path": download_path},
    )


def pause_and_resume_events(job_id: str, step: int) -> None:
    """A pause after ``step`` and the resume from its checkpoint (service/jobs/ownership.py)."""
    add_event(
        job_id,
        "paused",
        f"paused after step {step}; the worker is free and the job resumes from this step's "
        "checkpoint",
        step=step,
    )
    add_event(
        job_id,
        "resumed",
        f"resuming from the checkpoint at step {step} on recorder; steps after it are re-run "
        "and their records replaced",
        step=step,
        data={"checkpoint_step": step, "worker_id": "recorder"},
    )


def completion(
    index: int, text: str, scores: dict[str, float | None], *, advantage: float = 0.0
) -> CompletionRecord:
    """Completion ``index`` of a step: prompts of two completions each."""
    total = sum(score for score in scores.values() if score is not None)
    return CompletionRecord(
        prompt_index=index // 2,
        group_position=index % 2,
        dataset_index=index // 2,
        prompt=f"Say {'abcdefgh'[index // 2]}:",
        completion=text,
        scores=scores,
        total=total,
        advantage=advantage,
        token_count=len(text.split()) + 1,
    )


def function_metrics(
    completions: list[CompletionRecord], versions: Mapping[str, tuple[int, float]]
) -> dict[str, FunctionStepMetrics]:
    """Each function's step figures over ``completions``: ``versions`` name -> (version,
    weight)."""
    metrics = {}
    for name, (version, weight) in versions.items():
        scores = [score for c in completions if (score := c.scores.get(name)) is not None]
        mean = sum(scores) / len(scores) if scores else None
        metrics[name] = FunctionStepMetrics(name, version, weight, mean, 0.1, len(scores), 0)
    return metrics


def step_record(
    step: int,
    completions: list[CompletionRecord],
    versions: Mapping[str, tuple[int, float]],
    *,
    config_version: int = 1,
    evaluation: EvalRecord | None = None,
    metrics: dict[str, float] | None = None,
) -> StepRecord:
    totals = [c.total for c in completions if c.total is not None]
    return StepRecord(
        step=step,
        config_version=config_version,
        reward_mean=sum(totals) / len(totals) if totals else None,
        reward_std=0.1 if totals else None,
        loss=0.01 * step,
        kl=0.0,
        learning_rate=0.02,
        duration_s=0.07,
        functions=function_metrics(completions, versions),
        completions=completions,
        evaluation=evaluation,
        metrics=metrics,
    )


def record_steps(job_id: str, records: list[StepRecord]) -> None:
    for record in records:
        store_step(job_id, record)
