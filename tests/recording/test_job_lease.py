"""Who holds a job, and how a pause, a resume, a cancel and a lost worker move it
(service.jobs.ownership, and the user's moves in service.jobs.service), against the real
database and without training.

These rules were once exercised only end to end, by landing a request inside a slow training
step; at the row there is no step window to miss, so each order of events is checked exactly.
One end-to-end test per mechanism (tests/integration/test_faults.py: a paused job frees its
worker and resumes; a killed worker's job resumes) shows the worker obeys them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import AFTER_COMMIT_KEY
from service.errors import IllegalTransition
from service.jobs import ownership
from service.jobs.service import cancel_job, pause_job, resume_job
from service.leases import ExpiredLease, HeldBy
from service.models import Checkpoint, Job, JobEvent


@pytest.fixture
def job(session: Session, job_id: str) -> Job:
    """The job, queued again and taken by ``worker-a``: a run in progress."""
    row = session.get(Job, job_id)
    assert row is not None
    row.status = "queued"
    session.flush()
    assert ownership.take(session, job_id, "worker-a") == ownership.Taken(None)
    assert (row.status, row.worker_id) == ("running", "worker-a")
    return row


def statuses(session: Session, job_id: str) -> list[str]:
    rows = session.scalars(
        select(JobEvent)
        .where(JobEvent.job_id == job_id, JobEvent.kind == "status")
        .order_by(JobEvent.id)
    )
    return [row.data["status"] for row in rows]


def kinds(session: Session, job_id: str) -> list[str]:
    rows = session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
    return [row.kind for row in rows]


def queued_messages(session: Session) -> int:
    return len(session.info.get(AFTER_COMMIT_KEY, []))


def test_a_resume_while_pausing_calls_the_pause_off_and_the_worker_trains_on(
    session: Session, job: Job
) -> None:
    for _ in range(2):  # twice, as a user may
        assert pause_job(session, job.tenant_id, job.id).status == "pausing"
        with pytest.raises(IllegalTransition):
            pause_job(session, job.tenant_id, job.id)  # already pausing: 409
        assert resume_job(session, job.tenant_id, job.id).status == "running"
        assert job.worker_id == "worker-a"  # the worker never let go
    assert ownership.finish(session, job.id, HeldBy("worker-a"), adapter="adapter")
    assert statuses(session, job.id) == [
        "running",
        "pausing",
        "running",
        "pausing",
        "running",
        "succeeded",
    ]
    assert not {"paused", "pause_called_off", "resumed"} & set(kinds(session, job.id))
    assert queued_messages(session) == 0  # nothing went back to the queue


def test_a_pause_lets_the_worker_go_and_a_resume_continues_from_the_pause_checkpoint(
    session: Session, job: Job
) -> None:
    pause_job(session, job.tenant_id, job.id)
    job.steps_completed = 3
    session.add(Checkpoint(job_id=job.id, step=3, path="ckpt/3", size_bytes=1))
    ownership.release(session, job.id, HeldBy("worker-a"))
    assert (job.status, job.worker_id) == ("paused", None)
    assert kinds(session, job.id)[-1] == "paused"
    assert queued_messages(session) == 0  # the freed worker takes other work

    assert resume_job(session, job.tenant_id, job.id).status == "queued"
    assert queued_messages(session) == 1
    taken = ownership.take(session, job.id, "worker-b")
    assert taken is not None and taken.resume_from is not None
    assert taken.resume_from.step == 3 and job.started_step == 3
    assert kinds(session, job.id)[-1] == "resumed"
    assert statuses(session, job.id)[-4:] == ["pausing", "paused", "queued", "running"]


def test_a_resume_after_the_worker_stopped_for_the_pause_sends_the_job_back_to_the_queue(
    session: Session, job: Job
) -> None:
    """The worker had finished the step and was saving when the resume came: it lets go of a
    running job, which is queued again (never lost, never left running without a worker)."""
    pause_job(session, job.tenant_id, job.id)
    resume_job(session, job.tenant_id, job.id)
    ownership.release(session, job.id, HeldBy("worker-a"))
    assert (job.status, job.worker_id) == ("queued", None)
    assert kinds(session, job.id)[-1] == "pause_called_off"
    assert queued_messages(session) == 1


def test_a_cancel_while_pausing_ends_the_job_cancelled_not_paused(
    session: Session, job: Job
) -> None:
    pause_job(session, job.tenant_id, job.id)
    assert cancel_job(session, job.tenant_id, job.id).status == "cancelled"
    with pytest.raises(IllegalTransition):
        resume_job(session, job.tenant_id, job.id)
    # The worker stops after its step and lets go: the job stays cancelled.
    ownership.release(session, job.id, HeldBy("worker-a"))
    assert (job.status, job.worker_id, job.failure_reason) == (
        "cancelled",
        None,
        "cancelled by the user",
    )
    assert "paused" not in kinds(session, job.id)
    assert statuses(session, job.id) == ["running", "pausing", "cancelled"]
    assert not ownership.finish(session, job.id, HeldBy("worker-a"), adapter="late")


def test_a_lost_worker_s_job_is_queued_again_and_a_pausing_one_is_paused(
    session: Session, job: Job
) -> None:
    heartbeat = job.heartbeat_at
    stale = ExpiredLease((heartbeat or datetime.now(UTC)) - timedelta(seconds=1))
    assert not ownership.requeue(session, job.id, stale, kind="worker_lost", why="w", then="t")
    assert job.status == "running"  # it beat since the reaper looked
    assert ownership.requeue(
        session, job.id, ExpiredLease(heartbeat), kind="worker_lost", why="lost", then="resumes"
    )
    assert (job.status, job.worker_id) == ("queued", None)
    assert queued_messages(session) == 1

    ownership.take(session, job.id, "worker-b")
    pause_job(session, job.tenant_id, job.id)
    assert ownership.requeue(
        session, job.id, HeldBy("worker-b"), kind="worker_lost", why="lost", then="resumes"
    )
    assert job.status == "paused"  # as its user asked; resumed by hand
    assert queued_messages(session) == 1


def test_only_the_holder_ends_a_run(session: Session, job: Job) -> None:
    assert ownership.take(session, job.id, "worker-b") is None  # a duplicate message
    assert not ownership.fail(session, job.id, HeldBy("worker-b"), reason="not mine")
    assert not ownership.finish(session, job.id, HeldBy("worker-b"), adapter="not mine")
    assert job.status == "running"
    assert ownership.fail(session, job.id, HeldBy("worker-a"), reason="boom")
    assert (job.status, job.failure_reason) == ("failed", "boom")
