"""The worker's background writer against real Postgres: order, flush, back-pressure, failures."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from service.artifacts.storage import artifact_store
from service.db import session_scope
from service.models import Checkpoint, Completion, Job, JobEvent, Step
from service.settings import get_settings
from workers.circuit_breaker import RewardCircuitBreaker
from workers.database_observer import DatabaseObserver
from workers.step_store import BackgroundWriter, RecordingFailed, store_step

from .steps import step_record


def stored(job_id: str) -> tuple[list[int], int, int]:
    """(step numbers stored, completions stored, the job's steps_completed)."""
    with session_scope() as session:
        steps = list(
            session.scalars(select(Step.step).where(Step.job_id == job_id).order_by(Step.step))
        )
        completions = session.scalar(
            select(func.count()).select_from(Completion).where(Completion.job_id == job_id)
        )
        job = session.get(Job, job_id)
        assert job is not None
        return steps, int(completions or 0), job.steps_completed


def test_writes_in_submission_order_and_close_flushes(job_id: str) -> None:
    writer = BackgroundWriter(job_id, max_pending=4)
    order: list[int] = []
    for step in range(1, 21):

        def write(step: int = step) -> None:
            store_step(job_id, step_record(step))
            order.append(step)

        writer.submit(write)
    writer.close()  # returns only once everything queued is stored

    assert order == list(range(1, 21))
    # steps_completed is set by each write: the last write stored was the last step.
    assert stored(job_id) == (list(range(1, 21)), 20 * 4, 20)


def test_submit_blocks_while_the_queue_is_full_and_drops_nothing(job_id: str) -> None:
    gate = threading.Event()
    writer = BackgroundWriter(job_id, max_pending=2)
    writer.submit(gate.wait)  # the writer thread takes it and waits: the database is "slow"
    time.sleep(0.1)
    writer.submit(lambda: store_step(job_id, step_record(1)))
    writer.submit(lambda: store_step(job_id, step_record(2)))  # the queue is now full

    third_submitted = threading.Event()

    def submit_third() -> None:
        writer.submit(lambda: store_step(job_id, step_record(3)))
        third_submitted.set()

    producer = threading.Thread(target=submit_third)
    producer.start()
    assert not third_submitted.wait(0.5), "submit returned although the queue was full"
    gate.set()
    assert third_submitted.wait(10)
    producer.join()
    writer.close()
    assert stored(job_id) == ([1, 2, 3], 12, 3)


def test_a_failed_write_surfaces_at_the_next_submit_and_at_close(job_id: str) -> None:
    writer = BackgroundWriter(job_id)
    writer.submit(lambda: store_step(job_id, step_record(1)))
    # A job that does not exist: the step's foreign key fails (not a retryable outage).
    writer.submit(lambda: store_step("job_missing", step_record(2)))
    with pytest.raises(RecordingFailed):
        for step in range(3, 1000):  # one of these submits sees the failure
            writer.submit(lambda step=step: store_step(job_id, step_record(step)))
            time.sleep(0.01)
    with pytest.raises(RecordingFailed):
        writer.close()
    # Nothing after the failed write was stored: a gap must not look like a complete run.
    assert stored(job_id)[0] == [1]


def test_observer_stores_checkpoints_after_the_steps_they_cover(
    job_id: str, tmp_path: Path
) -> None:
    observer = DatabaseObserver(
        job_id,
        RewardCircuitBreaker(max_error_rate=0.5, patience=3),
        artifact_store(get_settings()),
    )
    for step in range(1, 6):
        observer.on_step(step_record(step))
    observer.on_checkpoint(5, tmp_path / "checkpoint-5")
    observer.on_step(step_record(6, config_version=2))
    observer.close()

    assert stored(job_id) == ([1, 2, 3, 4, 5, 6], 24, 6)
    with session_scope() as session:
        checkpoint = session.get(Checkpoint, (job_id, 5))
        assert checkpoint is not None
        step_5 = session.get(Step, (job_id, 5))
        assert step_5 is not None and step_5.created_at <= checkpoint.created_at
        events = list(
            session.scalars(
                select(JobEvent.kind).where(JobEvent.job_id == job_id).order_by(JobEvent.id)
            )
        )
        assert events == ["checkpoint", "config_applied"]
        assert session.scalar(select(Job.applied_config_version).where(Job.id == job_id)) == 2


def test_a_re_recorded_step_replaces_its_rows_and_keeps_text_intact(job_id: str) -> None:
    record = step_record(1)
    awkward = "tab\there\nnew line, back\\slash, \\. end marker, NUL\x00, ünï"
    record.completions[0].completion = awkward
    record.completions[1].prompt = [{"role": "user", "content": "chat\x00 prompt\n"}]
    record.completions[2].advantage = float("nan")
    store_step(job_id, record)
    store_step(job_id, record)  # a retried write, or a step re-run after a resume

    with session_scope() as session:
        rows = list(
            session.scalars(
                select(Completion).where(Completion.job_id == job_id).order_by(Completion.id)
            )
        )
    assert len(rows) == 4
    assert rows[0].completion == awkward.replace("\x00", "\ufffd")
    assert rows[1].prompt == [{"role": "user", "content": "chat\ufffd prompt\n"}]
    assert rows[2].advantage is not None and rows[2].advantage != rows[2].advantage  # NaN
    assert rows[3].scores == {"f": 0.5} and rows[3].dataset_index == 1
