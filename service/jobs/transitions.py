"""A job's status change and what comes with it, the one way a job's status moves: the
state machine's check (service.jobs.status), the device-hours it holds (service.usage), the
timestamps, the status event, the webhook outbox and the change notice to watchers. The user's
moves (service.jobs.service) and the worker's (service.jobs.ownership) both make it."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from service.events.repository import EventRepository
from service.jobs.repository import JobRepository
from service.jobs.status import JOB_STATES, JobStatus
from service.models import Job
from service.server_paths import hide_server_paths
from service.usage import service as usage
from service.webhooks import outbox as webhook_outbox


def transition(session: Session, job: Job, target: JobStatus, *, reason: str | None = None) -> Job:
    """Move a job (already read FOR UPDATE) to ``target``, or raise 409."""
    current = JobStatus(job.status)
    JOB_STATES.ensure(job.id, current, target)
    now = datetime.now(UTC)
    # Devices are held from a worker's take until the job leaves running/pausing.
    if target.has_worker and not current.has_worker:
        usage.start_holding(session, job, now)
    elif current.has_worker and not target.has_worker:
        usage.stop_holding(session, job, now)
    job.status = target.value
    if target == JobStatus.RUNNING and job.started_at is None:
        job.started_at = now
    if target.is_terminal:
        job.finished_at = now
    if reason is not None:
        # Worker exceptions quote paths freely (a model that failed to load): not for clients.
        reason = hide_server_paths(reason)
        job.failure_reason = reason
    message = f"job {target.value}" + (f": {reason}" if reason else "")
    EventRepository(session).add_event(job.id, "status", message, data={"status": target.value})
    webhook_outbox.job_status_changed(session, job, target)
    JobRepository(session).notify_changed(job.id)
    return job
