"""Who holds a job, and every move made on a job that a worker holds: the job's lease
(service.leases, which says how every move reads, checks and moves the row).

The user's moves (pause, resume, cancel) are in service.jobs.service; the worker, placement
(workers.placement) and the lost-worker reaper (workers.lease) make these (the worker's
``pause`` is a guard's, workers.guards, and moves the job as the user's pause does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.artifacts.repository import CheckpointRepository
from service.db import after_commit
from service.events.repository import EventRepository
from service.jobs.node_repository import JobNodeRepository
from service.jobs.repository import JobRepository
from service.jobs.status import OWNED_STATUSES, JobStatus
from service.jobs.transitions import transition
from service.leases import Claim, HeldBy, LeasePolicy, start_lease
from service.models import Checkpoint, Job
from service.work_queue.queue import enqueue_training


def _load_for_update(session: Session, job_id: str) -> Job | None:
    return JobRepository(session).get_any_tenant(job_id, for_update=True)


JOB_LEASE = LeasePolicy(
    load_for_update=_load_for_update,
    holding=frozenset(status.value for status in OWNED_STATUSES),
)


@dataclass(frozen=True)
class Taken:
    """The job is the worker's now; it resumes from ``resume_from`` (None: from the start)."""

    resume_from: Checkpoint | None


def take(session: Session, job_id: str, worker_id: str) -> Taken | None:
    """queued -> running, and the lease is ``worker_id``'s. None when the job should not run
    here: it is gone, or not queued (a duplicate or stale message: the database, not the
    queue, says what runs)."""
    job = _load_for_update(session, job_id)
    if job is None or job.status != JobStatus.QUEUED.value:
        return None
    transition(session, job, JobStatus.RUNNING)
    start_lease(job, worker_id)
    checkpoint = CheckpointRepository(session).latest_checkpoint(job_id)
    # The run goes on after the checkpoint: a config stored now applies from the step after
    # it (steps after the checkpoint that ran before are re-run).
    job.started_step = checkpoint.step if checkpoint is not None else 0
    if checkpoint is not None:
        EventRepository(session).add_event(
            job_id,
            "resumed",
            f"resuming from the checkpoint at step {checkpoint.step} on {worker_id}; "
            f"steps after it are re-run and their records replaced",
            step=checkpoint.step,
            data={"checkpoint_step": checkpoint.step, "worker_id": worker_id},
        )
    return Taken(checkpoint)


def release(session: Session, job_id: str, claim: HeldBy) -> None:
    """The worker's run is over (ended, stopped on request, or cut short): it lets go.

    A pausing job is paused now (its checkpoint is saved). A job that is running again was
    resumed after the worker had already stopped for the pause: it goes back to the queue and
    continues from that checkpoint, so a resume is never lost.
    """
    job = _load_for_update(session, job_id)
    if job is None or not claim.holds(job):
        return
    # Whatever the status (ended, cancelled): the worker holds it no more.
    job.worker_id = None
    events = EventRepository(session)
    if job.status == JobStatus.PAUSING.value:
        transition(session, job, JobStatus.PAUSED)
        events.add_event(
            job_id,
            "paused",
            f"paused after step {job.steps_completed}; the worker is free and the job resumes "
            "from this step's checkpoint",
            step=job.steps_completed,
        )
    elif job.status == JobStatus.RUNNING.value:
        transition(session, job, JobStatus.QUEUED)
        events.add_event(
            job_id,
            "pause_called_off",
            f"resumed while the worker was stopping for the pause; the job continues from its "
            f"checkpoint at step {job.steps_completed} on the next free worker",
            step=job.steps_completed,
        )
        _enqueue_after_commit(session, job)


def requeue(
    session: Session,
    job_id: str,
    claim: Claim,
    *,
    kind: str,
    why: str,
    then: str,
    data: dict[str, Any] | None = None,
) -> bool:
    """The worker (or one machine of the job's) was lost: the job resumes from its last
    checkpoint, on a fresh placement, once a worker takes it from the queue; ``then`` says so
    in the event. A job that was pausing is paused instead, as its user asked. Whether the
    job moved (False: someone else ended, paused or took it meanwhile)."""
    job = JOB_LEASE.hold(session, job_id, claim)
    if job is None:
        return False
    job.worker_id = None
    JobNodeRepository(session).drop(job_id)
    if job.status == JobStatus.PAUSING.value:
        transition(session, job, JobStatus.PAUSED)
        then = "the job is paused, as asked, and resumes from its last checkpoint when resumed"
    else:
        transition(session, job, JobStatus.QUEUED)
        _enqueue_after_commit(session, job)
    EventRepository(session).add_event(
        job_id, kind, f"{why}; {then}", step=job.steps_completed, data=data
    )
    return True


def pause(session: Session, job_id: str, claim: HeldBy) -> bool:
    """The worker pauses the job it holds (one of the job's guards.pause_on tripped):
    running -> pausing, the move a user's pause makes; the worker then checkpoints and lets
    go through ``release``, and resume works as after any pause. Whether the job moved
    (False: it is no longer running here, e.g. cancelled or paused meanwhile)."""
    job = JOB_LEASE.hold(session, job_id, claim)
    if job is None or job.status != JobStatus.RUNNING.value:
        return False
    transition(session, job, JobStatus.PAUSING)
    return True


def finish(session: Session, job_id: str, claim: HeldBy, *, adapter: str) -> bool:
    """The run trained every step: succeeded, with its adapter."""
    return _end(session, job_id, claim, JobStatus.SUCCEEDED, adapter=adapter)


def fail(session: Session, job_id: str, claim: HeldBy, *, reason: str) -> bool:
    """The run failed; ``reason`` is the job's failure reason."""
    return _end(session, job_id, claim, JobStatus.FAILED, reason=reason)


def _end(
    session: Session,
    job_id: str,
    claim: HeldBy,
    final: JobStatus,
    *,
    adapter: str | None = None,
    reason: str | None = None,
) -> bool:
    """Move the job the claim holds to a final status; whether it moved (False: the claim no
    longer holds it)."""
    job = JOB_LEASE.hold(session, job_id, claim)
    if job is None:
        return False
    if adapter is not None:
        job.adapter_path = adapter
    transition(session, job, final, reason=reason)
    return True


def _enqueue_after_commit(session: Session, job: Job) -> None:
    job_id, num_devices, num_nodes = job.id, job.num_devices, job.num_nodes
    after_commit(session, lambda: enqueue_training(job_id, num_devices, num_nodes))
