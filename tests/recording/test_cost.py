"""Cost at the row: recorded steps fold into the measured throughput (all but a run's first),
the ETA follows the job's own step times, and GPU-seconds count only the stretches a worker
holds the job, across a pause and a resume (service.usage)."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from statistics import fmean

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.jobs import ownership
from service.jobs.service import pause_job, resume_job
from service.leases import HeldBy
from service.models import GpuUsage, Job, Step, Throughput
from service.usage.service import eta_seconds
from tests.recording.steps import step_record
from workers.step_store import record_step

DURATIONS = [3.0, 0.5, 0.7, 0.9]  # the first: a run's warm-up, never measured


@pytest.fixture
def job(session: Session, job_id: str) -> Job:
    """The recording job on 2 devices, filed under a model key of its own, 10 steps long."""
    row = session.get(Job, job_id)
    assert row is not None
    row.num_devices = 2
    row.hyperparameters = {"train_steps": 10, "prompts_per_step": 2, "num_generations": 2}
    row.model_key = f"test-shape-{uuid.uuid4().hex}"
    row.device_kind, row.generation_backend = "cpu", "transformers"
    row.held_since = datetime.now(UTC)  # a worker took it: its run starts
    session.flush()
    return row


def record_steps(session: Session, job: Job, durations: list[float]) -> None:
    for step, duration in enumerate(durations, start=job.steps_completed + 1):
        # 4 completions of 5 tokens each: 20 tokens, 5 per completion.
        record_step(session, job.id, dataclasses.replace(step_record(step), duration_s=duration))


def test_recorded_steps_fold_into_the_throughput_of_their_kind(session: Session, job: Job) -> None:
    record_steps(session, job, DURATIONS)

    tokens = session.scalars(select(Step.completion_tokens).where(Step.job_id == job.id)).all()
    assert tokens == [20, 20, 20, 20]
    row = session.get(Throughput, ("cpu", job.model_key, "transformers"))
    assert row is not None and row.steps == 3
    measured = DURATIONS[1:]
    # A step's wall time x its 2 devices, per token of its 2 x 2 completions of 5 tokens.
    assert row.device_seconds_per_token == pytest.approx(fmean(d * 2 / 20 for d in measured))
    assert row.step_seconds == pytest.approx(fmean(measured))
    assert row.tokens_per_completion == pytest.approx(5.0)


def test_a_run_whose_kind_is_unknown_is_not_measured(session: Session, job: Job) -> None:
    job.device_kind = None  # a worker from before runs said what they run on
    record_steps(session, job, DURATIONS)
    assert session.get(Throughput, ("cpu", job.model_key, "transformers")) is None


def test_the_eta_is_the_steps_left_at_the_recent_step_time(session: Session, job: Job) -> None:
    assert eta_seconds(session, job) is None  # nothing measured yet
    record_steps(session, job, DURATIONS)
    session.refresh(job)
    assert job.steps_completed == 4
    assert eta_seconds(session, job) == pytest.approx((10 - 4) * fmean(DURATIONS))
    job.status = "succeeded"
    assert eta_seconds(session, job) is None


def test_gpu_seconds_count_held_stretches_only_across_a_pause(session: Session, job: Job) -> None:
    job.status = "queued"
    session.flush()
    held = HeldBy("worker-a")
    ownership.take(session, job.id, held.worker_id)
    assert job.held_since is not None
    pause_job(session, job.tenant_id, job.id)  # pausing: the worker still holds the devices
    assert job.held_since is not None
    ownership.release(session, job.id, held)
    assert job.status == "paused" and job.held_since is None
    after_first = job.gpu_seconds
    assert after_first > 0
    resume_job(session, job.tenant_id, job.id)  # queued: nothing held while it waits
    assert job.held_since is None and job.gpu_seconds == after_first
    ownership.take(session, job.id, held.worker_id)
    assert ownership.finish(session, job.id, held, adapter="adapter")

    stretches = session.scalars(
        select(GpuUsage).where(GpuUsage.job_id == job.id).order_by(GpuUsage.id)
    ).all()
    assert len(stretches) == 2 and all(s.ended_at is not None for s in stretches)
    first, second = stretches
    assert second.started_at >= first.ended_at  # the paused time lies between: not counted
    held_s = sum((s.ended_at - s.started_at).total_seconds() for s in stretches)  # type: ignore[operator]
    assert {s.devices for s in stretches} == {2}
    assert job.gpu_seconds == pytest.approx(held_s * 2)
    assert job.held_since is None
